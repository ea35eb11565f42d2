"""Pausing Python's cyclic garbage collector while large, cycle-free structures are built.

Why: loading 150,000 pods allocates millions of dicts, tuples and records; each allocation burst
triggers a full-heap cycle search that finds nothing (records hold no reference cycles): on the
synthetic clusters the collector was a large share of load and plan time (the figure:
docs/benchmarks.md, "Figures behind the code"). Reference counting still frees everything as
usual; only the cycle search is deferred, and the previous state is restored afterwards, so a
long-running ``serve`` is unaffected.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

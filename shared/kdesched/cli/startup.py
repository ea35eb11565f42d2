"""Start-up runs with Python's cyclic garbage collector paused (the ``kdesched`` command's entry point,
:mod:`kdesched.cli.entry`, pauses it first).

Why: with scale-to-zero a Knative function pays its whole start-up on the first event after an idle
period, and that start-up is mostly imports. They build the objects that live as long as the
process (modules, classes, functions, the policy), and CPython's collector, triggered by their
allocation, keeps searching them for cycles and finds none: 150 collections, about 8% of an
evicting function's start-up (measured with ``gc.callbacks``; docs/benchmarks.md, "Function cold
start"). So the entry point pauses the collector before the first import (:func:`pause`), and
:func:`started` ends the pause once the command is ready to work:

- ``gc.freeze()`` first moves everything made so far out of the collector's reach for good, as
  CPython documents for long-lived start-up state (so a long-running ``serve`` or function never
  scans it again either). The few dozen objects of start-up garbage cycles stay with it (17 to
  20, counted with ``gc.collect()``): a collection to free them would cost what the pause saves.
- the collector then runs as usual. Reference counting frees everything else meanwhile, as always.

``kdesched.cli.main`` calls :func:`started` after parsing the command line; ``function`` and
``serve`` call it themselves once their app is built, just before they serve. A command run
in-process (the tests call ``kdesched.cli.main.main``) never paused the collector, and
:func:`started` leaves it alone then.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Pause the collector until :func:`started` (the entry point, before the first heavy import)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def started() -> None:
    """End the start-up pause: freeze what start-up built, turn the collector back on. Idempotent;
    a no-op when :func:`pause` did not pause it."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()

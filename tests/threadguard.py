"""The guard against tests that leave threads behind (tests/conftest.py; docs/testing.md, "Threads a
test leaves behind"). A thread a test started and did not stop runs on into later tests: it called
their servers, counted in their connection tallies and logged into their captured output. After
each test the guard waits briefly for the threads the test started to end, then names the ones
still running, with their targets and where they are, and the test errors at teardown."""

from __future__ import annotations

import re
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping

WAIT_SECONDS = 2.0  # how long a test's threads get to end after its teardown (most end within 0.4 s)

# Threads that may outlive the test that started them: a pattern matched against the whole thread
# name, and why. Empty: every thread of the fast tier is stopped by the test that started it.
ALLOWED: Mapping[str, str] = {}

# The real tiers share servers and helpers across a session (tests/realk8s/fixtures.py): the guard
# leaves their tests alone.
REAL_TIERS = ("realk8s", "realprom", "realknative")


def alive() -> set[threading.Thread]:
    return set(threading.enumerate())


def left_behind(before: Iterable[threading.Thread], wait: float = WAIT_SECONDS,
                allowed: Mapping[str, str] = ALLOWED) -> list[threading.Thread]:
    """The threads alive now that were not in ``before`` and are not allowed, once each had until
    ``wait`` seconds from now to end."""
    known = set(before)
    deadline = time.monotonic() + wait
    left = []
    for thread in threading.enumerate():
        if thread in known or any(re.fullmatch(pattern, thread.name) for pattern in allowed):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            left.append(thread)
    return left


def target_of(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None) or getattr(thread, "function", None)  # Thread, Timer
    if target is None:
        return f"{type(thread).__module__}.{type(thread).__qualname__}.run"
    owner = getattr(target, "__self__", None)
    name = getattr(target, "__qualname__", None) or repr(target)
    module = getattr(target, "__module__", None) or (type(owner).__module__ if owner is not None else "")
    return f"{module}.{name}" if module else name


def describe(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    where = ""
    if frame is not None:
        stack = traceback.extract_stack(frame)[-3:]
        where = ", now at " + " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}"
                                          for f in reversed(stack))
    return (f"{thread.name!r} (target {target_of(thread)}, {'daemon' if thread.daemon else 'not daemon'}"
            f"{where})")

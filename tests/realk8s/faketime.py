"""Run a process with its wall clock shifted: Debian's libfaketime, preloaded directly.

libfaketime names a POSIX semaphore and a shared-memory object after the process's PID
(/dev/shm/sem.faketime_sem_<pid>, /dev/shm/faketime_shm_<pid>) and removes them when the process
exits, not when it is killed, which is how the tests stop their processes. Debian's ``faketime``
wrapper refuses to start under a PID whose pair was left behind: "faketime: sem_open: File exists"
(the fresh-clone CI at e4e0d41, a skewed ``kdesched function taints`` that never started). The
preloaded library carries on without its shared state, which only serves an absolute start time
shared with children; a relative offset such as ``-3m`` needs none. So the tests set what the
wrapper would set and leave the wrapper out (tests/realk8s/test_faketime.py shows both under a
reused PID).
"""

from __future__ import annotations

import glob
import shutil


def library(*, multithreaded: bool = True) -> str | None:
    """The path of libfaketime (``MT``: the thread-safe build the wrapper's ``-m`` picks), or None."""
    name = "libfaketimeMT.so.1" if multithreaded else "libfaketime.so.1"
    found = sorted(glob.glob(f"/usr/lib/*/faketime/{name}") + glob.glob(f"/usr/lib/faketime/{name}"))
    return found[0] if found else None


def available() -> bool:
    """Whether Debian's faketime package is installed (its wrapper and its library)."""
    return shutil.which("faketime") is not None and library() is not None


def env(offset: str, *, fake_monotonic: bool = False, multithreaded: bool = True) -> dict[str, str]:
    """The environment that runs a process ``offset`` off (libfaketime's syntax: ``+3m``, ``-1h``).

    ``fake_monotonic``: shift CLOCK_MONOTONIC too (libfaketime's default; off here, because Debian's
    0.9.10 does not intercept ``sem_clockwait`` and Python's timed waits then hang)."""
    path = library(multithreaded=multithreaded)
    if path is None:
        raise RuntimeError("libfaketime is not installed (apt-get install faketime)")
    return {"LD_PRELOAD": path, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "0" if fake_monotonic else "1"}

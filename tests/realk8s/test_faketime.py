"""The tests' way of shifting a process's clock survives what broke Debian's wrapper in CI.

A process under libfaketime (wrapper or not) that is killed leaves /dev/shm/sem.faketime_sem_<pid>
and /dev/shm/faketime_shm_<pid> behind. The wrapper then refuses to start under a reused PID
("faketime: sem_open: File exists": the fresh-clone CI at e4e0d41); the preloaded library, as
tests/realk8s/faketime.py runs it, carries on. Shown with the PID reused on purpose: the first
process of a new PID namespace (``unshare -p -f``, as root) is PID 1, and a stale pair for PID 1 is
put in place first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realk8s import faketime

SHM = Path("/dev/shm")
STALE = (SHM / "sem.faketime_sem_1", SHM / "faketime_shm_1")

pytestmark = pytest.mark.skipif(
    not faketime.available() or shutil.which("unshare") is None or os.geteuid() != 0 or not SHM.is_dir(),
    reason="needs Debian's faketime, unshare and root (a new PID namespace)")

PROBE = "import os, time; print(os.getpid(), time.time())"


@pytest.fixture
def stale_pair_for_pid_1() -> Iterator[tuple[Path, Path]]:
    if any(p.exists() for p in STALE):
        pytest.skip("a faketime object for PID 1 exists already: not ours to remove")
    STALE[0].write_bytes(b"\0" * 32)  # the sizes libfaketime gives them
    STALE[1].write_bytes(b"\0" * 8)
    yield STALE
    for p in STALE:
        p.unlink(missing_ok=True)


def run_as_pid_1(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "-p", "-f", *command], check=False, env=env, capture_output=True, text=True, timeout=30)


def test_the_preloaded_library_runs_shifted_where_the_wrapper_refuses(stale_pair_for_pid_1: tuple[Path, Path]) -> None:
    done = run_as_pid_1([sys.executable, "-c", PROBE], {**os.environ, **faketime.env("-3m")})
    assert done.returncode == 0, done.stderr
    pid, at = done.stdout.split()
    assert pid == "1"  # the reused PID: the stale pair was its own
    assert abs(float(at) - time.time() + 180) < 30, done.stdout  # and its clock 3 minutes behind
    wrapper = shutil.which("faketime")
    assert wrapper is not None
    refused = run_as_pid_1([wrapper, "-f", "-3m", sys.executable, "-c", PROBE], dict(os.environ))
    assert refused.returncode != 0 and "sem_open" in refused.stderr, (refused.returncode, refused.stderr)

"""``kdesched run`` interrupted (Ctrl-C / SIGINT, SIGTERM) in the middle of a concurrent batch.

The evictions in flight finish, none not started yet is sent (each is reported ``abandoned``), and
the run ends with its report and exit 128 + the signal's number (130, 143), docs/cli.md. Before,
the interrupt was raised in the main thread waiting for the batch, leaving the thread pool ran
every queued eviction to the end (nothing told them to stop) and the command exited 130 without a
report of what it had evicted (review J, finding 4).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kdesched.cli.main import main

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer, Fault
from tests.test_cli_run import kubeconfig

ROOT = Path(__file__).resolve().parent.parent
N = 12
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
POLICY = ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: d\n"
          "  pluginConfig: [{name: RemovePodsViolatingNodeTaints}]\n"
          "  plugins: {deschedule: {enabled: [RemovePodsViolatingNodeTaints]}}\n")


def cluster(fake: FakeApiServer, delay: float) -> None:
    """12 pods to move off a tainted node, each eviction taking ``delay`` seconds on the server."""
    fake.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))
    fake.add(*[pod_obj(f"p{i:02d}", "n1", owner_name=f"rs{i}") for i in range(N)])
    for i in range(N):
        fake.script_eviction(f"default/p{i:02d}", [Fault(delay=delay)])


def args(tmp_path: Path, fake: FakeApiServer) -> list[str]:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    return ["run", "--policy", str(policy), "--kubeconfig", kubeconfig(tmp_path / "kc", fake.url), "-o", "json",
            "-q", "--max-concurrent-evictions", "2"]


def sent(fake: FakeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in fake.requests("POST") if r.path.endswith("/eviction")]


def signal_when_in_flight(fake: FakeApiServer, pid: int, signum: int, count: int = 2) -> threading.Thread:
    """Send ``signum`` to ``pid`` once ``count`` evictions are in flight on the fake."""
    def press() -> None:
        limit = time.monotonic() + 30
        while fake.evictions_in_flight < count and time.monotonic() < limit:
            time.sleep(0.005)
        os.kill(pid, signum)

    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    return thread


def check_report(report: dict, fake: FakeApiServer, name: str) -> None:
    results = [(e["pod"], e["result"]) for e in report["evictions"]]
    evicted = sorted(p for p, r in results if r == "evicted")
    abandoned = [e for e in report["evictions"] if e["result"] == "abandoned"]
    assert 2 <= len(sent(fake)) <= 4, f"{len(sent(fake))} of {N} evictions sent after {name} with 2 in flight"
    assert evicted == sorted(sent(fake)), results  # the ones in flight finished, and were reported
    assert len(evicted) + len(abandoned) == N, results
    assert all(e["cause"] == "stopped" and f"interrupted ({name})" in e["message"] for e in abandoned), abandoned
    (error,) = report["summary"]["errors"]
    assert error.startswith(f"interrupted by {name}: {len(abandoned)} eviction(s) not started")
    assert all(fake.get("Pod", e["pod"], "default") is not None for e in abandoned)


def ctrl_c_in_flight(fake: FakeApiServer, tmp_path: Path) -> int:
    """``kdesched run`` in this process's main thread, as on the command line, and a real SIGINT to it
    once evictions are in flight: its exit code, once a queued eviction still being sent would show."""
    previous = signal.getsignal(signal.SIGINT)
    presser = signal_when_in_flight(fake, os.getpid(), signal.SIGINT)
    try:
        code = main(args(tmp_path, fake))
    finally:
        presser.join()
        assert signal.getsignal(signal.SIGINT) is previous  # the command put the handler back
    time.sleep(0.4)
    return code


def test_ctrl_c_mid_batch_stops_what_is_not_started_and_reports(
        fake_api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real SIGINT to this process (``main`` runs in the main thread, as on the command line)."""
    cluster(fake_api, delay=0.3)
    assert ctrl_c_in_flight(fake_api, tmp_path) == 130
    check_report(json.loads(capsys.readouterr().out), fake_api, "SIGINT")


def test_sigterm_to_a_running_command_stops_it_the_same_way(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """The console script in a process of its own, stopped by SIGTERM (a Job's pod deleted, a CI
    step cancelled): the report on stdout, exit 143."""
    cluster(fake_api, delay=0.3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "shared"), str(ROOT / "functions"), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-m", "kdesched", *args(tmp_path, fake_api)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    signal_when_in_flight(fake_api, proc.pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    time.sleep(0.4)
    assert proc.returncode == 143, err
    check_report(json.loads(out), fake_api, "SIGTERM")


def test_a_signal_ignored_at_start_stays_ignored() -> None:
    """``kdesched run &`` from a script starts with SIGINT ignored (the shell's rule for background
    jobs): the script's Ctrl-C is not for it, and the run must not take it as a stop."""
    import signal

    from kdesched.cli.interrupts import Interrupts

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Interrupts():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # (still handled: not ignored)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_ctrl_c_while_evictions_are_retried_sends_no_new_attempt(
        fake_api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every eviction answers 503 (retried, up to 5 attempts in a 60 s budget). Before, the two in
    flight at the SIGINT went on retrying to their last attempt; now neither sends another: they are
    ``abandoned``, cut short, and ``summary.errors`` says so apart from those not started."""
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))
    fake_api.add(*[pod_obj(f"p{i:02d}", "n1", owner_name=f"rs{i}") for i in range(N)])
    for i in range(N):
        fake_api.script_eviction(f"default/p{i:02d}", [Fault(503, delay=0.3)] * 5)
    assert ctrl_c_in_flight(fake_api, tmp_path) == 130
    report = json.loads(capsys.readouterr().out)
    posted = sent(fake_api)
    assert 2 <= len(posted) <= 4 and len(set(posted)) == len(posted), posted  # one attempt each, no retry
    cut = [e for e in report["evictions"] if e["pod"] in posted]
    assert all((e["result"], e["cause"], e["attempts"]) == ("abandoned", "stopped", 1) for e in cut), cut
    assert all("cut short by the stop (interrupted (SIGINT))" in e["message"] for e in cut), cut
    (error,) = report["summary"]["errors"]
    assert error.startswith(f"interrupted by SIGINT: {N - len(posted)} eviction(s) not started (abandoned), "
                            f"{len(posted)} cut short between retries (abandoned)"), error

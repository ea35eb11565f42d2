"""The entry point's start-up without the cyclic GC (kdesched.cli.entry, kdesched.cli.startup): every command turns the
collector back on before it does its work, past the objects start-up built.

Each case runs the real entry point in a fresh interpreter: the pause and ``gc.freeze`` are
process-wide, and must not touch the test process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fakeapi import FakeApiServer

REPO = Path(__file__).resolve().parents[1]
POLICY = REPO / "knative" / "common" / "policy.yaml"

# serve's work is replaced by a probe that reports the collector's state at that point; a one-shot
# command runs as it is, and the state is reported after it
PROBE = r"""
import gc, json, sys
import kdesched.cli.startup as startup

def report(*_args, **_kwargs):
    print("GC " + json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}), flush=True)
    return 0

target = sys.argv[1]
if target == "serve":
    startup.pause()  # as kdesched.cli.entry.main() does first; the patch below imports part of the package
    from kdesched.reactor.serve.server import ReactorServer
    ReactorServer.run = report
sys.argv = ["kdesched", *sys.argv[2:]]
import kdesched.cli.entry
code = kdesched.cli.entry.main()
if target == "after":  # a one-shot command: its work is done, report the state it ran in
    report()
sys.exit(code)
"""


def run_probe(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KDESCHED_")}
    environ.update(env or {})
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=REPO,
                          env=environ, timeout=120, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("GC ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(lines[-1][3:])
    return result


def test_a_one_shot_command_runs_with_the_collector_on_and_start_up_frozen() -> None:
    state = run_probe("after", "policy", "validate", str(POLICY))
    assert state["enabled"] and state["frozen"] > 10_000


def test_serve_runs_with_the_collector_on_and_start_up_frozen(fake_api: FakeApiServer, tmp_path: Path) -> None:
    kubeconfig = fake_api.kubeconfig(tmp_path / "kubeconfig")
    state = run_probe("serve", "serve", "--policy", str(POLICY), "--kubeconfig", kubeconfig, "--port", "0",
                      "--lease-namespace", "kdesched")
    assert state["enabled"] and state["frozen"] > 10_000


def test_called_in_process_the_collector_is_left_as_it_was() -> None:
    code = ("import gc, kdesched.cli.startup as s; gc.disable(); s.started(); a = gc.isenabled(); gc.enable(); "
            "s.started(); print(a, gc.isenabled(), gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.split() == ["False", "True", "0"]

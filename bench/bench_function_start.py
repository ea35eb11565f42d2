"""Cold start of each Knative function: process start to its first answered request.

Why: with scale-to-zero every function pays its start-up on the first event after an idle
period, so what a function imports before it can answer is latency on the event path (issue 22:
about 0.6 s of imports for every function, ``deadletter`` included). This starts the container's
command, ``kdesched function NAME --port P``, exactly as Knative does, and measures from just
before the process is spawned to:

- ``healthz``: the first answered ``GET /healthz`` (polled every 2 ms; the readiness point);
- ``event``: the first answered CloudEvent, POSTed (retried until the port accepts) as soon as
  the process is spawned: start-up plus handling one event. The evicting functions' events are
  node-scoped runs on a node with no pods (taints, affinity), the classifier's an unchanged Node,
  deadletter's a ``run.completed``; rebalance's ``node.ready`` includes its 0.5 s gather
  (``balanceDelaySeconds``) and manual's dry-run ``run.requested`` takes the Lease.

The measured checkout is byte-compiled first (``compileall``), as pip compiles kdesched when the
image is built (the image runs with ``PYTHONDONTWRITEBYTECODE=1``: without the ``.pyc`` files
every start would compile ~50 modules, ~0.2 s). The API server is the in-repo fake
(tests/fakeapi.py, real HTTP on 127.0.0.1, in this process);
the policy is the shipped one (knative/common/policy.yaml via ``$KDESCHED_POLICY``) and logs are
JSON (``LOG_FORMAT=json``), as in the cluster. Functions are interleaved round by round so that
load from other work spreads over all of them; the median, min and max of ``--repeat`` runs are
reported with the machine's conditions (bench/machine.py). ``--baseline DIR`` also runs another
checkout's ``shared/`` and ``functions/`` (PYTHONPATH) with its own shipped policy
(``DIR/knative/common/policy.yaml`` when there is one), interleaved start by start with this one,
for before/after figures taken under the same load:

    python bench/bench_function_start.py                               # all six, 7 runs each
    python bench/bench_function_start.py --functions deadletter,taints --repeat 11
    mkdir /tmp/old && git archive OLD shared functions knative | tar -x -C /tmp/old
    python bench/bench_function_start.py --baseline /tmp/old

Not a test: the figures depend on the machine (docs/benchmarks.md has them with their command).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.machine import machine
from tests.builders import node_obj
from tests.fakeapi import FakeApiServer

FUNCTIONS = ("deadletter", "classifier", "taints", "affinity", "rebalance", "manual")
POLICY = REPO / "knative" / "common" / "policy.yaml"


def _event(name: str, node: dict[str, Any]) -> tuple[str, Any, int]:
    """(CloudEvent type, data, expected status) of the first event sent to ``name``."""
    return {
        "deadletter": ("dev.kdesched.run.completed", {"trigger": {"type": "x"}, "evictions": []}, 202),
        "classifier": ("dev.knative.apiserver.resource.update", node, 202),
        "taints": ("dev.kdesched.node.taints.changed", {"node": "n1", "before": {"taints": []},
                                                        "after": {"taints": []}}, 200),
        "affinity": ("dev.kdesched.node.labels.changed", {"node": "n1", "before": {"team": "a"},
                                                          "after": {"team": "b"}}, 200),
        "rebalance": ("dev.kdesched.node.ready", {"node": "n1"}, 200),
        "manual": ("dev.kdesched.run.requested", {"strategies": ["RemovePodsViolatingNodeTaints"],
                                                  "dryRun": True}, 200),
    }[name]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(env: dict[str, str]) -> list[str]:
    """The container's command: the ``kdesched`` script of this interpreter's environment. With
    ``$PYTHONPATH`` set (``--baseline``: another checkout's sources), ``python -m kdesched``, so that
    each checkout starts through its own entry point (the script is this checkout's)."""
    if env.get("PYTHONPATH"):
        return [sys.executable, "-m", "kdesched"]
    script = Path(sys.executable).with_name("kdesched")
    if script.exists():
        return [str(script)]
    found = shutil.which("kdesched")
    return [found] if found else [sys.executable, "-m", "kdesched"]


def request(port: int, method: str, body: bytes = b"", headers: dict[str, str] | None = None,
            deadline: float = 30.0) -> int:
    """One request, retried (every 2 ms) while the port refuses connections; the status."""
    start = time.monotonic()
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(method, "/healthz" if method == "GET" else "/", body=body or None, headers=headers or {})
            resp = conn.getresponse()
            resp.read()
            return resp.status
        except (ConnectionRefusedError, ConnectionResetError):
            if time.monotonic() - start > deadline:
                raise TimeoutError(f"nothing answered on port {port} within {deadline:g} s") from None
            time.sleep(0.002)
        finally:
            conn.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (/proc/PID/stat, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_start(name: str, target: str, env: dict[str, str], node: dict[str, Any]) -> tuple[float, float]:
    """Wall seconds from spawning ``kdesched function NAME`` to the first answer of ``target``, and
    the CPU seconds the process used by then (less sensitive than wall time to other work on a
    shared machine; 10 ms resolution)."""
    port = free_port()
    if target == "event":
        etype, data, expected = _event(name, node)
        headers = {"ce-specversion": "1.0", "ce-id": f"bench-{time.time_ns()}", "ce-source": "/bench",
                   "ce-type": etype, "content-type": "application/json"}
        body = json.dumps(data).encode()
    t0 = time.perf_counter()
    proc = subprocess.Popen([*command(env), "function", name, "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if target == "event":
            status = request(port, "POST", body, headers)
        else:
            status, expected = request(port, "GET"), 200
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if status != expected:
        raise RuntimeError(f"{name} {target}: HTTP {status}, expected {expected}; its log:\n"
                           f"{err.decode(errors='replace')[-2000:]}")
    return elapsed, cpu


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--functions", default=",".join(FUNCTIONS), help="comma-separated (default: all six)")
    ap.add_argument("--targets", default="healthz,event", help="healthz, event or both (default)")
    ap.add_argument("--repeat", type=int, default=7, help="runs per function and target (default 7)")
    ap.add_argument("--baseline", metavar="DIR",
                    help="also measure this checkout's shared/ and functions/, interleaved with this one")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "function-start.json"))
    args = ap.parse_args(argv)
    names = [n for n in args.functions.split(",") if n]
    targets = [t for t in args.targets.split(",") if t]
    checkouts = {"this checkout": REPO, **({f"baseline {args.baseline}": Path(args.baseline).resolve()}
                                           if args.baseline else {})}
    conditions = machine()
    api = FakeApiServer().start()
    try:
        api.add(node_obj("n1", labels={"team": "b"}))
        node = api.get("Node", "n1")
        assert node is not None
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = Path(tmp) / "kubeconfig"
            kubeconfig.write_text(json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "bench",
                "clusters": [{"name": "bench", "cluster": {"server": api.url}}],
                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench",
                                                           "namespace": "kdesched"}}],
                "users": [{"name": "bench", "user": {"token": "bench"}}]}))
            common_env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KDESCHED_POLICY": str(POLICY),
                          "LOG_FORMAT": "json", "KDESCHED_LEASE_NAMESPACE": "kdesched",
                          "KDESCHED_BROKER_URL": "http://127.0.0.1:9/unused",
                          "PYTHONDONTWRITEBYTECODE": "1"}  # as in the image: .pyc read, never written
            common_env.pop("KDESCHED_CACHE", None)
            envs: dict[str, dict[str, str]] = {}
            for label, root in checkouts.items():
                sources = [str(root / d) for d in ("shared", "functions")]
                # as pip does when the image is built: every module compiled once
                subprocess.run([sys.executable, "-m", "compileall", "-q", *sources], check=True,
                               stdout=subprocess.DEVNULL)
                # with --baseline every checkout runs from its sources, this one too: the same command for all
                envs[label] = {**common_env, **({"PYTHONPATH": os.pathsep.join(sources)} if args.baseline else {})}
                own = root / "knative" / "common" / "policy.yaml"
                if own.is_file():  # each checkout with its own shipped policy (an older one refuses newer fields)
                    envs[label]["KDESCHED_POLICY"] = str(own)
            runs = {c: {n: {t: [] for t in targets} for n in names} for c in checkouts}
            cpu = {c: {n: {t: [] for t in targets} for n in names} for c in checkouts}
            for label in checkouts:  # one warm-up each: the page cache
                for name in names:
                    one_start(name, "healthz", envs[label], node)
            for _ in range(args.repeat):  # interleaved: other work on the machine spreads over all
                for name in names:
                    for target in targets:
                        for label in checkouts:
                            wall, used = one_start(name, target, envs[label], node)
                            runs[label][name][target].append(wall)
                            cpu[label][name][target].append(used)
    finally:
        api.stop()
    conditions["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"kdesched function NAME: process start -> first answer, wall seconds median [min-max] and CPU seconds "
          f"median, of {args.repeat} runs")
    print(f"machine: {conditions['cpus']} CPUs {conditions['cpu']}, Python {conditions['python']}, commit "
          f"{conditions['commit']}, load average before {conditions['loadavg']} after {conditions['loadavg_after']}")
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for label in checkouts:
        print(f"\n{label}\n")
        print("| function | " + " | ".join(f"{t} wall s | {t} CPU s" for t in targets) + " |")
        print("|---|" + "---|---|" * len(targets))
        for name in names:
            cells = []
            for target in targets:
                xs = runs[label][name][target]
                summary.setdefault(label, {}).setdefault(name, {})[target] = statistics.median(xs)
                cells.append(f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]")
                cells.append(f"{statistics.median(cpu[label][name][target]):.2f}")
            print(f"| {name} | " + " | ".join(cells) + " |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": conditions, "repeat": args.repeat, "median": summary, "runs": runs,
                               "cpu": cpu}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

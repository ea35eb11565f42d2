"""Admissions per second through the disruption ledger on a real API server, with 1, 4 and 8 writers.

Why: issue 28 split the ledger into a record per workload committed through one small Lease
(kdesched.reactor.io.ledger_store). Every admission still commits at one object, so concurrent writers
conflict; this measures what that costs on a real kube-apiserver (etcd round trips included): N
writer processes, each admitting its own workloads one admission at a time (read the commit Lease,
LIST the records, write the workload's record, commit), against a ledger already holding
``--background`` moving workloads (a maintenance under way).

Reported per writer count: admissions per second (all writers), commits lost to another writer
(conflicts) per admission, and the median and 95th percentile of one admission's latency.

    python bench/bench_admissions.py [--writers 1,4,8] [--admissions 40] [--background 200]
    python bench/bench_admissions.py --tiny          # the suite's smoke run (tests/bench)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kdesched.evictor.ledger import Admission, Ledger
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Conflict
from kdesched.model.records import Pod
from kdesched.reactor.io.ledger_store import LedgerStore
from kdesched.reactor.run.admit import conflict_backoff

from bench.machine import machine
from tests.builders import pod_obj
from tests.realk8s.controlplane import ControlPlane, find_binaries

TAINTS = "RemovePodsViolatingNodeTaints"


def pod(writer: int, workload: int, replica: int) -> Pod:
    name = f"w{writer}-app{workload}"
    return Pod.from_api(pod_obj(f"{name}-7d9f8-{replica}", f"pool-{workload % 50}", namespace="shop",
                                owner_name=f"{name}-7d9f8", labels={"pod-template-hash": "7d9f8"}))


def admit_one(store: LedgerStore, p: Pod, run: str) -> tuple[int, float]:
    """One admission as kdesched.reactor.run.admit.decide makes it (without the planning): returns
    (commits lost to another writer, seconds)."""
    started = time.perf_counter()
    lost = 0
    while True:
        read = store.read()
        now = time.time()
        new = read.ledger.without_run(run).admit([Admission(p, TAINTS, False, f"node:{p.node_name}:{TAINTS}",
                                                            "spare-0", 4, 4)], now, run, 60)
        if store.write(read, new, run):
            return lost, time.perf_counter() - started
        lost += 1
        time.sleep(conflict_backoff(lost))  # as kdesched.reactor.run.admit.decide waits


def writer(kubeconfig: str, index: int, admissions: int, start_at: float, out: Any) -> None:
    client = KubeClient.from_config(kubeconfig)
    store = LedgerStore(client, "kdesched", "kdesched")
    while time.time() < start_at:
        time.sleep(0.005)
    results = [admit_one(store, pod(index, i, 0), f"bench-{index}-{i}") for i in range(admissions)]
    out.put(results)
    client.close()


def seed(kubeconfig: str, workloads: int) -> None:
    """A maintenance under way: ``workloads`` moving workloads already in the ledger."""
    client = KubeClient.from_config(kubeconfig)
    store = LedgerStore(client, "kdesched", "kdesched")
    admissions = [Admission(pod(99, w, r), TAINTS, r > 0, f"node:pool-{w % 50}:{TAINTS}", "", 4, 4)
                  for w in range(workloads) for r in range(4)]
    assert store.write(store.read(), Ledger().admit(admissions, time.time(), "seed", 60), "seed")
    client.close()


def measure(kubeconfig: str, writers: int, admissions: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    start_at = time.time() + 2.0
    procs = [ctx.Process(target=writer, args=(kubeconfig, i, admissions, start_at, out)) for i in range(writers)]
    for p in procs:
        p.start()
    results: list[tuple[int, float]] = []
    for _ in procs:
        results += out.get(timeout=600)
    for p in procs:
        p.join(30)
    wall = max(0.001, time.time() - start_at)
    latencies = sorted(s for _, s in results)
    lost = sum(n for n, _ in results)
    return {"writers": writers, "admissions": len(results), "seconds": round(wall, 2),
            "admissions_per_second": round(len(results) / wall, 1), "conflicts_per_admission": round(lost / len(results), 2),
            "latency_p50_ms": round(statistics.median(latencies) * 1000, 1),
            "latency_p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))] * 1000, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writers", default="1,4,8", help="writer process counts to measure (default 1,4,8)")
    ap.add_argument("--admissions", type=int, default=40, help="admissions per writer (default 40)")
    ap.add_argument("--background", type=int, default=200, help="moving workloads already in the ledger")
    ap.add_argument("--tiny", action="store_true", help="a smoke run: 1 and 2 writers, 3 admissions, 10 workloads")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = ap.parse_args(argv)
    counts = [1, 2] if args.tiny else [int(x) for x in args.writers.split(",")]
    admissions, background = (3, 10) if args.tiny else (args.admissions, args.background)
    bins = find_binaries()
    if bins is None:
        print("no Kubernetes binaries (see tests/realk8s/controlplane.py find_binaries)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="kdesched-bench-") as tmp, ControlPlane(bins) as cp:
        kubeconfig = str(cp.kubeconfig(Path(tmp) / "admin.kubeconfig"))
        client = KubeClient.from_config(kubeconfig)
        try:
            client.create_raw("Namespace", {"metadata": {"name": "kdesched"}})
        except Conflict:
            pass  # a control plane that has it already (the test tier's)
        client.close()
        seed(kubeconfig, background)
        for n in counts:
            row = measure(kubeconfig, n, admissions)
            rows.append(row)
            print(f"{n} writer(s): {row['admissions_per_second']} admissions/s, {row['conflicts_per_admission']} "
                  f"conflicts per admission, latency p50 {row['latency_p50_ms']} ms, p95 {row['latency_p95_ms']} ms")
    info = machine()
    print(f"machine: {info}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Admission through the disruption ledger: optimistic concurrency against the Lease for every run.

Why: issue 21 asks for the design of cross-process admission to be measured. N processes (Reactor
instances, each with its own client: the pods of the taints function) get one taint event each at
the same moment, each for its own node, every node running one replica of one Deployment (the
maintenance story). Two designs decide the same thing (one eviction admitted, N-1 paced):

* ``ledger``: what kdesched does: plan in parallel, write the admission conditionally on the
  ledger's resourceVersion, plan again after a lost write;
* ``lease``: the alternative: every evicting run holds the run Lease (kdesched.reactor.io.lease
  .LeaseGuard) from before reading until after evicting, so the runs go one at a time.

Reported per design: wall time until every run has answered, requests sent to the API server,
ledger writes lost to another run, and the evictions (must be 1). The API server is the in-repo
fake (tests/fakeapi.py) on loopback, so the request counts are exact and the times are the
reactor's own plus loopback HTTP; on a real API server each write also costs an etcd round trip.

    python bench/bench_ledger.py [--runs 6,20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kdesched.kube.client import KubeClient
from kdesched.reactor import metrics as m
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.io.lease import LeaseGuard
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from bench.machine import machine
from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


class LeasedReactor(Reactor):
    """The alternative design: the run Lease held around every evicting run."""

    def _decide_and_execute(self, *a: Any, **kw: Any) -> Any:  # type: ignore[override]
        if kw.get("guard") is not None:
            return super()._decide_and_execute(*a, **kw)
        with LeaseGuard(self.client, self.settings.lease_namespace, self.settings.lease_name, self.identity,
                        duration_seconds=60, wait_seconds=120, stop=self.stop, poll_seconds=0.02) as guard:
            kw["guard"] = guard
            return super()._decide_and_execute(*a, **kw)


def one(design: str, runs: int) -> dict[str, Any]:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 120}
    policy = default_like_policy(kdesched=block)
    settings = parse_settings(block, policy=policy, env={})
    cls = LeasedReactor if design == "lease" else Reactor
    with FakeApiServer() as fake:
        fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
        fake.add(*[node_obj(f"p{i}", taints=[TAINT]) for i in range(runs)], node_obj("s0"), node_obj("s1"))
        fake.add(*[pod_obj(f"web-7d9f8-{i}", f"p{i}", owner_name="web-7d9f8", conditions=[
            {"type": "Ready", "status": "True"}], labels={"app": "web", "pod-template-hash": "7d9f8"})
            for i in range(runs)])
        clients = [KubeClient.for_host(fake.url) for _ in range(runs)]
        reactors = [cls(policy, settings, c, identity=f"p{i}") for i, c in enumerate(clients)]
        conflicts0 = m.LEDGER_WRITES.labels("conflict")._value.get()
        fake.clear_journal()
        barrier = threading.Barrier(runs + 1)
        outs: list[dict[str, Any]] = [{} for _ in range(runs)]

        def run(i: int) -> None:
            barrier.wait()
            outs[i] = reactors[i].node_event(Trigger(ev.TAINTS_CHANGED, f"e{i}"), parse_node_event({"node": f"p{i}"}))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(runs)]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        for r in reactors:
            r.stop.set()
            r.continuations.cancel_all()
        for c in clients:
            c.close()
        requests = len(fake.requests())
        evicted = sum(1 for o in outs for e in o.get("evictions", []) if e.get("result") == "evicted")
        paced = sum(1 for o in outs for e in o.get("evictions", []) if e.get("result") == "paced")
        conflicts = m.LEDGER_WRITES.labels("conflict")._value.get() - conflicts0
    return {"design": design, "runs": runs, "wall": wall, "requests": requests, "conflicts": conflicts,
            "evicted": evicted, "paced": paced}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="6,20", help="concurrent runs (processes), comma-separated")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.runs.split(",") if x]
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for n in sizes:
            for design in ("ledger", "lease"):
                rows.setdefault((design, n), []).append(one(design, n))
    info = machine()
    print(f"python {info['python']}, {info['cpus']} CPUs ({info['cpu']}), load {info['loadavg']}, "
          f"commit {info['commit']}; median of {args.repeat}; fake API server on loopback")
    print(f"{'design':8s} {'runs':>5s} {'wall s':>8s} {'requests':>9s} {'lost writes':>12s} {'evicted':>8s} {'paced':>6s}")
    for (design, n), rs in rows.items():
        print(f"{design:8s} {n:5d} {statistics.median(r['wall'] for r in rs):8.3f} "
              f"{statistics.median(r['requests'] for r in rs):9.0f} {statistics.median(r['conflicts'] for r in rs):12.0f} "
              f"{'/'.join(sorted({str(r['evicted']) for r in rs})):>8s} {'/'.join(sorted({str(r['paced']) for r in rs})):>6s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

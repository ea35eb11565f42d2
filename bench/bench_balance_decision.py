"""A balance run's decision time from a warm snapshot, with and without the early stop on an empty
global eviction bucket (docs/reactor.md, "An empty global bucket ends a leased run's planning").

Why: at 150,000 pods ``bench_serve_cache.py --api fake`` needs ~12 minutes just to sync its cache
(the fake API server's LIST is slow), which is too slow to compare two variants of the planning.
This bench isolates what the warm cache leaves: the reactor's leased run (Lease GET/PUT on the
in-repo fake API server, the cluster served by the ``loader`` seam from records already in memory,
exactly what ``kube.cache`` hands a run) for the rebalance strategies of ``node.added``
(LowNodeUtilization + RemoveDuplicates), shipped policy, the event path's safety defaults and the
default token buckets. Each variant runs in a fresh reactor (full buckets), interleaved, dry run
(a dry run spends a copy of the buckets exactly as a live run spends them).

Run: ``python bench/bench_balance_decision.py --cluster FILE [--repeat 3]`` where FILE comes from
``python -m bench.generate --nodes 5000 --pods-per-node 30 --seed 1 -o FILE``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kdesched.reactor.events.requests import Trigger, parse_run_request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "knative" / "common" / "policy.yaml"
STRATEGIES = ["LowNodeUtilization", "RemoveDuplicates"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True, help="a snapshot file (bench/generate.py)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from kdesched.kube.client import KubeClient
    from kdesched.model.files import load_snapshot
    from kdesched.policy.load import load_policy
    from kdesched.reactor.events import routing as ev
    from kdesched.reactor.run import runner as runner_mod
    from kdesched.reactor.run.runner import Reactor
    from kdesched.reactor.run.settings import ReactorSettings

    from tests.fakeapi import FakeApiServer

    t0 = time.perf_counter()
    snapshot = load_snapshot(args.cluster)
    print(f"loaded {len(snapshot.pods)} pods, {len(snapshot.nodes)} nodes in {time.perf_counter() - t0:.1f}s")
    policy = load_policy(str(POLICY))
    settings = ReactorSettings.from_policy(policy)

    original = runner_mod.Reactor._decide_and_execute

    def variant(stop: bool) -> Any:
        def plan_and_execute(self: Any, *a: Any, **kw: Any) -> Any:
            kw["stop_when_spent"] = stop and kw.get("stop_when_spent", False)
            return original(self, *a, **kw)
        return plan_and_execute

    results: dict[str, list[tuple[float, float, int, int]]] = {"stop when spent": [], "plan every candidate": []}
    with FakeApiServer() as fake:
        fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
        client = KubeClient.for_host(fake.url)
        for _ in range(args.repeat):
            for name, stop in (("stop when spent", True), ("plan every candidate", False)):
                runner_mod.Reactor._decide_and_execute = variant(stop)  # type: ignore[method-assign]
                reactor = Reactor(policy, settings, client, identity=f"bench-{name}",
                                  loader=lambda _c, _n, _k: snapshot)
                wall, cpu = time.perf_counter(), time.process_time()
                out = reactor.run_requested(Trigger(ev.RUN_REQUESTED, f"bench-{time.time()}"),
                                            parse_run_request({"strategies": STRATEGIES, "dryRun": True}))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                sent = sum(1 for e in out["evictions"] if e.get("result") in ("dry-run", "evicted"))
                results[name].append((wall, cpu, sent, len(out["blocked"])))
                print(f"{name:22s} wall {wall:6.2f}s cpu {cpu:6.2f}s evictions {sent:5d} "
                      f"(+{len(out['evictions']) - sent} paced) refusals listed {len(out['blocked']):6d}", flush=True)
        runner_mod.Reactor._decide_and_execute = original  # type: ignore[method-assign]
    print(f"\npython {platform.python_version()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; median of {args.repeat}")
    for name, rows in results.items():
        print(f"{name:22s} wall {statistics.median(r[0] for r in rows):6.2f}s "
              f"cpu {statistics.median(r[1] for r in rows):6.2f}s evictions {rows[0][2]} "
              f"refusals listed {rows[0][3]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""API cost of one event: a node-scoped run (``taints.changed`` on one node) versus a full run.

Why: the point of event-driven descheduling at scale is that one node's change must not cost a
cluster-wide LIST (https://github.com/kubernetes-sigs/descheduler/issues/671). This serves a
synthetic 500-node cluster (30 pods per node, bench/generate.py) from the in-repo fake API
server (tests/fakeapi.py, real HTTP on 127.0.0.1) and counts the API requests and bytes the
reactor reads for each kind of run, through the real ``kubernetes`` client. Runs are dry-runs,
so every scenario sees the same cluster.

With ``kdesched serve``'s watch cache (kdesched.kube.cache, the default there) the same events
are measured again: the run's own requests and bytes, with the cache's one-time sync (a LIST per
kind) and its watch traffic during the scenarios reported apart.

Run: ``python bench/bench_events.py [--nodes 500] [--pods-per-node 30] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.policy.defaults import default_policy
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event, parse_sweep_data
from kdesched.reactor.io.loaders import CachedLoader
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from bench.generate import generate
from tests.fakeapi import FakeApiServer


def measure(client: KubeClient, fn: Callable[[], Any], repeat: int) -> tuple[int, int, float, Any]:
    times, result = [], None
    for _ in range(repeat):
        client.reset_stats()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    stats = client.stats
    return stats.requests, stats.bytes_read, statistics.median(times), result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods-per-node", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    cluster = generate(args.nodes, args.pods_per_node, seed=1)
    items = cluster["items"]
    fake = FakeApiServer().start()
    try:
        fake.add(*items)
        client = KubeClient.for_host(fake.url, request_timeout=120)
        policy = default_policy()
        block = {"settleSeconds": 0, "leaseWaitSeconds": 30, "dryRun": True}
        settings = parse_settings(block, policy=policy, env={})
        reactor = Reactor(policy, settings, client, identity="bench")
        nodes = [o for o in items if o.get("kind") == "Node"]
        tainted = next(n["metadata"]["name"] for n in nodes if (n.get("spec") or {}).get("taints"))
        pods = sum(1 for o in items if o.get("kind") == "Pod")

        def node_event(r: Reactor, etype: str, data: dict[str, Any]) -> Callable[[], Any]:
            return lambda: r.node_event(Trigger(etype, "bench", "/bench"), parse_node_event(data))

        def scenarios(r: Reactor, suffix: str) -> list[tuple[str, Callable[[], Any]]]:
            return [
                ("taints.changed, one tainted node (node-scoped)" + suffix,
                 node_event(r, ev.TAINTS_CHANGED, {"node": tainted})),
                ("labels.changed, one node, non-topology key" + suffix, node_event(
                    r, ev.LABELS_CHANGED, {"node": tainted, "before": {"team": "a"}, "after": {"team": "b"}})),
                ("node.ready (rebalance: LowNodeUtilization + RemoveDuplicates)" + suffix,
                 node_event(r, ev.NODE_READY, {"node": tainted})),
                ("sweep / full run (whole default policy)" + suffix,
                 lambda: r.run_requested(Trigger(ev.PING, "b", "/b"), parse_sweep_data(None))),
            ]

        rows = []
        for name, fn in [*scenarios(reactor, ""),
                         ("naive: full snapshot LIST (what a per-event full run reads)", lambda: load_live_snapshot(client))]:
            requests, nbytes, seconds, result = measure(client, fn, args.repeat)
            planned = len(result.get("evictions", [])) if isinstance(result, dict) else "-"
            rows.append((name, requests, nbytes, seconds, planned))

        # the same events with serve's watch cache: synced once, then every run plans from memory
        from kdesched.reactor.events.routing import kinds_needed

        t0 = time.perf_counter()
        cache = ClusterCache(client, kinds=kinds_needed(reactor.policy)).start()
        if not cache.wait_synced(600):
            raise SystemExit(f"the cache did not sync: {cache.describe()}")
        sync_seconds = time.perf_counter() - t0
        sync = cache.client.stats
        loader = CachedLoader(cache)
        cached = Reactor(policy, settings, client, identity="bench-cached", loader=loader)
        cached_rows = []
        for name, fn in scenarios(cached, ", watch cache"):
            requests, nbytes, seconds, result = measure(client, fn, args.repeat)
            cached_rows.append((name, requests, nbytes, seconds, len(result.get("evictions", []))))
        watch_bytes = cache.client.stats.bytes_read - sync.bytes_read
        cache_stats = cache.stats()
        cache.close()
        assert loader.listed == 0, "a cached run LISTed"
    finally:
        fake.stop()

    print(f"cluster: {args.nodes} nodes, {pods} pods (bench/generate.py seed 1), fake API on 127.0.0.1")
    print(f"event node: {tainted}")
    print(f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs; median of "
          f"{args.repeat}; dry-run")
    header = f"{'scenario':<78} {'requests':>8} {'KiB read':>10} {'seconds':>8} {'evictions':>9}"
    print(header)
    print("-" * len(header))
    full_bytes = rows[-1][2] or 1
    for name, requests, nbytes, seconds, planned in rows:
        print(f"{name:<78} {requests:>8} {nbytes / 1024:>10.1f} {seconds:>8.3f} {planned!s:>9}")
    for name, requests, nbytes, seconds, planned in cached_rows:
        print(f"{name:<78} {requests:>8} {nbytes / 1024:>10.1f} {seconds:>8.3f} {planned!s:>9}")
    print(f"\nnode-scoped taints.changed reads {rows[0][2] / full_bytes:.1%} of the bytes of a full snapshot "
          f"(LIST per event); {cached_rows[0][2] / full_bytes:.2%} with the watch cache")
    print(f"watch cache: synced in {sync_seconds:.2f} s with {sync.requests} requests, {sync.bytes_read / 1024:.1f} KiB "
          f"(once); {sum(cache_stats.objects.values())} objects, ~{cache_stats.bytes_estimate / 2**20:.0f} MiB estimated; "
          f"{watch_bytes / 1024:.1f} KiB of watch events during the cached scenarios (dry runs change nothing)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The watch cache's memory peak during a 410 re-LIST, against its steady size (tracemalloc).

Why: the cache's default ceiling is a share of the container's memory limit
(``kdesched.kube.cache.MEMORY_SHARE``), and that share must leave room for the moment the records
are held twice: a re-LIST builds the new store while the old one still serves runs. This measures
that moment: the synthetic cluster of bench/generate.py served by the in-repo fake API server (in
this process, loaded *before* tracing starts, so its store is not counted; its per-page copies
are, and are small), a ``ClusterCache`` of Nodes, Pods and PDBs synced, then every watch cut after
a compaction so each kind gets 410 Gone and re-lists. Printed: the steady traced size, the
first-sync peak, and the peak during the re-LISTs as a multiple of the steady size.

Run: ``python bench/bench_cache_relist_peak.py --nodes 500`` (15,000 pods, about a minute).
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient

from bench.generate import generate
from tests.fakeapi import FakeApiServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods-per-node", type=int, default=30)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    fake = FakeApiServer().start()
    try:
        fake.add(*generate(args.nodes, args.pods_per_node, seed=1)["items"])
        gc.collect()
        kube = KubeClient.for_host(fake.url, request_timeout=600)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        cache = ClusterCache(kube, kinds=["Node", "Pod", "PodDisruptionBudget"], max_objects=10**9,
                             backoff_initial=0.01, backoff_max=0.01).start()
        try:
            if not cache.wait_synced(3600):
                raise SystemExit("the cache did not sync")
            time.sleep(1)
            gc.collect()
            steady, first_peak = (m - base for m in tracemalloc.get_traced_memory())
            stats = cache.stats()
            print(f"objects {sum(stats.objects.values())}, estimate {stats.bytes_estimate / 2**20:.1f} MiB; traced: "
                  f"steady {steady / 2**20:.1f} MiB, first-sync peak {first_peak / 2**20:.1f} MiB")
            tracemalloc.reset_peak()
            fake.compact()
            fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "zz-bump"}})
            fake.compact()  # every watch's resourceVersion is now too old: 410 on reconnect
            fake.cut_connections()
            kinds = len(cache.kinds)
            if not cache.wait_for(lambda: cache.stats().relists_gone >= kinds and cache.stats().lists >= 2 * kinds,
                                  3600):
                raise SystemExit("no 410 re-LIST of every kind")
            time.sleep(1)
            gc.collect()
            after, peak = (m - base for m in tracemalloc.get_traced_memory())
            print(f"410 re-LISTs: traced after {after / 2**20:.1f} MiB, peak during them {peak / 2**20:.1f} MiB "
                  f"= {peak / steady:.2f} x the steady store")
        finally:
            cache.close()
            kube.close()
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

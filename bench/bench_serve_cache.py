"""``kdesched serve`` with a warm watch cache: from a node event to the decision, at 15k and 150k pods.

Why: the point of the cache (issue 12) is that a node joining a big cluster is decided in a second
or two, not after re-reading the world. This measures, for ``kdesched serve`` running in this
process with the shipped policy (``knative/common/policy.yaml``, live, the event path's safety
defaults on):

- the cache's sync: seconds, requests and bytes of its LISTs, and the process's RSS growth (the
  records, indexes and what the sync left behind);
- per event, the time from the API write (its response) to the decision (the run has its plan:
  ``Reactor.execution.executor_factory`` called) and to the evictions sent (its executor returned), for a node added (usable at
  once: ``node.added`` -> rebalance, which gathers ``balanceDelaySeconds``, 0.5 s, first) and for a
  user taint on a loaded node (``taints.changed`` -> its pods checked, then every pod for "somewhere
  to go");
- the watch bytes read meanwhile.

API servers: ``--api real`` loads the synthetic cluster (bench/generate.py) into etcd 3.4 +
kube-apiserver v1.24 (tests/realk8s/controlplane.py, through the API, 8 writers); ``--api fake``
serves it from tests/fakeapi.py in a *subprocess* (LIST + chunked WATCH over HTTP on 127.0.0.1),
so its JSON encoding does not share this process's interpreter. No scheduler or kubelet: an
evicted pod stays terminating (real) or is gone (fake); the decisions are what is measured.

Run: ``python bench/bench_serve_cache.py --api real --nodes 500 --pods-per-node 30`` and
``python bench/bench_serve_cache.py --api fake --nodes 5000 --pods-per-node 30``.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "knative" / "common" / "policy.yaml"
LEASE_NS = "kdesched"


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- the cluster ---------------------------------------------------------------------------------

def cluster_items(nodes: int, pods_per_node: int) -> list[dict[str, Any]]:
    from bench.generate import generate

    return list(generate(nodes, pods_per_node, seed=1)["items"])


def serve_fake(nodes: int, pods_per_node: int) -> int:
    """Subprocess mode: serve the generated cluster from the fake API until stdin closes."""
    from tests.fakeapi import FakeApiServer

    items = cluster_items(nodes, pods_per_node)
    fake = FakeApiServer().start()
    fake.add(*items)
    del items
    print(fake.url, flush=True)
    sys.stdin.read()
    fake.stop()
    return 0


@contextmanager
def fake_backend(nodes: int, pods_per_node: int) -> Iterator[tuple[Any, str]]:
    from kdesched.kube.client import KubeClient

    proc = subprocess.Popen([sys.executable, __file__, "--serve-fake", str(nodes), str(pods_per_node)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url:
            raise SystemExit("the fake API subprocess did not start")
        yield KubeClient.for_host(url, request_timeout=600), "tests/fakeapi.py (subprocess, 127.0.0.1)"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_real(api: Any, items: list[dict[str, Any]], writers: int = 8) -> None:
    """Create the generated objects with their status, through the API (as a running cluster shows them)."""
    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(obj)
        meta = body["metadata"]
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
            meta.pop(key, None)
        return body

    plural = {"Namespace": "namespaces", "PriorityClass": "priorityclasses", "Node": "nodes",
              "PersistentVolumeClaim": "persistentvolumeclaims", "PodDisruptionBudget": "poddisruptionbudgets",
              "Pod": "pods"}
    group = {"PriorityClass": "/apis/scheduling.k8s.io/v1", "PodDisruptionBudget": "/apis/policy/v1"}

    def create(obj: dict[str, Any]) -> None:
        kind = obj["kind"]
        body = strip(obj)
        ns = body["metadata"].get("namespace")
        base = group.get(kind, "/api/v1") + (f"/namespaces/{ns}" if ns and kind not in ("Namespace", "Node",
                                                                                        "PriorityClass") else "")
        path = f"{base}/{plural[kind]}"
        try:
            created = api.request("POST", path, body)
        except Exception as exc:  # an object the server already has (a system namespace)
            if "409" in str(exc) or "already exists" in str(exc):
                return
            raise
        if kind in ("Node", "Pod", "PodDisruptionBudget") and obj.get("status"):
            status = dict(obj["status"])
            if kind == "PodDisruptionBudget":
                status["observedGeneration"] = created["metadata"].get("generation", 1)
            api.patch(f"{path}/{body['metadata']['name']}/status", {"status": status})

    order = ["Namespace", "PriorityClass", "Node", "PersistentVolumeClaim", "PodDisruptionBudget", "Pod"]
    for kind in order:
        batch = [o for o in items if o["kind"] == kind]
        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(create, batch))


@contextmanager
def real_backend(nodes: int, pods_per_node: int) -> Iterator[tuple[Any, str]]:
    import urllib3
    from kdesched.kube.client import KubeClient

    from tests.realk8s.controlplane import ControlPlane, find_binaries

    bins = find_binaries()
    if bins is None:
        raise SystemExit("no Kubernetes binaries (see tests/realk8s/controlplane.py find_binaries)")
    with ControlPlane(bins) as cp:
        assert cp.api is not None
        cp.api.pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=cp.api.pool.connection_pool_kw["ca_certs"],
                                          maxsize=8)
        t0 = time.perf_counter()
        load_real(cp.api, cluster_items(nodes, pods_per_node))
        print(f"loaded the cluster into the real API server in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        client = KubeClient.from_config(str(cp.admin_kubeconfig))
        client.request_timeout = 600
        yield client, "etcd 3.4 + kube-apiserver v1.24 (tests/realk8s/controlplane.py)"


# --- the measurement -----------------------------------------------------------------------------

class _TimedExecutor:
    """The run's executor, stamping when each call returns (the evictions, or the paced, sent)."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner, self.clock = inner, clock

    def execute(self, *a: Any, **kw: Any) -> Any:
        out = self.inner.execute(*a, **kw)
        self.clock.stamp(self.clock.sent)
        return out

    def pace(self, *a: Any, **kw: Any) -> Any:
        out = self.inner.pace(*a, **kw)
        self.clock.stamp(self.clock.sent)
        return out

    @property
    def events_lost(self) -> int:
        return int(self.inner.events_lost)


class Clock:
    """Stamps when each run decided and when it sent its evictions, through the reactor's one public
    seam for it: ``Reactor.execution.executor_factory`` is called once a run has its plan (the decision) and
    its executor's calls return once the evictions are sent. (The first version wrapped the runner's
    module functions ``plan_run``/``execute_plan``, which a refactoring moved: the benchmark died with
    an AttributeError, and tests/bench/test_benchmarks.py now runs it at a tiny size.)"""

    def __init__(self, reactor: Any) -> None:
        self.lock = threading.Lock()
        self.decided: list[float] = []
        self.sent: list[float] = []
        factory = reactor.execution.executor_factory

        def timed_factory(dry_run: bool) -> Any:
            self.stamp(self.decided)
            return _TimedExecutor(factory(dry_run), self)

        reactor.execution.executor_factory = timed_factory

    def stamp(self, into: list[float]) -> None:
        with self.lock:
            into.append(time.perf_counter())

    def mark(self, srv: Any) -> tuple[int, int, int]:
        """Where the stamps and the server's reports stand before an event."""
        with self.lock:
            return len(srv.reports), len(self.decided), len(self.sent)

    def wait_run(self, srv: Any, event_type: str, mark: tuple[int, int, int], timeout: float) -> tuple[float, float, int]:
        """The first run for ``event_type`` reported after ``mark``: when it decided, when it had sent
        its evictions, and its outcomes."""
        reports, decided, sent = mark
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            report = next((r for r in list(srv.reports)[reports:] if r["trigger"]["type"] == event_type), None)
            if report is not None:
                with self.lock:
                    first_decided = self.decided[decided] if len(self.decided) > decided else time.perf_counter()
                    last_sent = self.sent[-1] if len(self.sent) > sent else first_decided
                return first_decided, last_sent, len(report.get("evictions", []))
            time.sleep(0.005)
        raise SystemExit(f"no {event_type} run within the timeout")


def node_body(name: str) -> dict[str, Any]:
    alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "topology.kubernetes.io/zone": "eu-west-1a"}},
            "spec": {},
            "status": {"allocatable": alloc, "capacity": alloc,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api", choices=("real", "fake"), default="fake")
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods-per-node", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--serve-fake", nargs=2, type=int, metavar=("NODES", "PODS_PER_NODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_fake:
        return serve_fake(*args.serve_fake)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from kdesched.cli.main import load_policy_arg
    from kdesched.reactor.events.types import NODE_ADDED, TAINTS_CHANGED
    from kdesched.reactor.serve.server import ReactorServer

    backend = real_backend if args.api == "real" else fake_backend
    with backend(args.nodes, args.pods_per_node) as (client, where):
        if args.api == "real":
            client.create_raw("Namespace", {"metadata": {"name": LEASE_NS}})
        loaded = load_policy_arg(str(POLICY))
        from dataclasses import replace

        settings = replace(loaded.settings, lease_namespace=LEASE_NS)
        rss0 = rss_mib()
        t0 = time.perf_counter()
        srv = ReactorServer(loaded.policy, settings, client, port=0, sweep_interval_seconds=0,
                            leader_election=False, identity="bench", watch_timeout_seconds=300)
        assert srv.cache is not None
        clock = Clock(srv.reactor)
        # a paced taint run repeats itself 1 s later (evicting the next pods once replacements are
        # Ready, which never happens here): push the repeats out so they do not overlap the next event
        srv.reactor.continuations.first = srv.reactor.continuations.longest = 3600
        runner = threading.Thread(target=srv.run, daemon=True)
        runner.start()
        if not srv.cache.wait_synced(1800):
            raise SystemExit(f"cache did not sync: {srv.cache.describe()}")
        while not srv.ready()[0]:
            time.sleep(0.01)
        sync_s = time.perf_counter() - t0
        sync = srv.cache.client.stats
        rss_synced = rss_mib()
        stats = srv.cache.stats()
        pods = stats.objects.get("Pod", 0)

        rows: list[tuple[str, float, float, int]] = []
        taintable = sorted(n for n in srv.cache.snapshot(include=["Node", "Pod"]).pods_by_node)
        for i in range(args.repeat):
            # node added, usable at once: node.added -> rebalance (after the 0.5 s gather)
            before = clock.mark(srv)
            client.create_raw("Node", node_body(f"bench-new-{i}"))
            t_written = time.perf_counter()
            decided, sent, evictions = clock.wait_run(srv, NODE_ADDED, before, 600)
            rows.append(("node added (rebalance)", decided - t_written, sent - t_written, evictions))
            # a user taint on a loaded node: taints.changed -> that node's pods, then all for somewhere-to-go
            node = taintable[(i * 7919) % len(taintable)]
            raw = client.get_raw("Node", node)
            assert raw is not None
            raw["spec"]["taints"] = [*(raw["spec"].get("taints") or []),
                                     {"key": "bench", "value": str(i), "effect": "NoSchedule"}]
            before = clock.mark(srv)
            client.replace_raw("Node", raw)
            t_written = time.perf_counter()
            decided, sent, evictions = clock.wait_run(srv, TAINTS_CHANGED, before, 600)
            rows.append(("taint on a loaded node (taints.changed)", decided - t_written, sent - t_written, evictions))
            if i + 1 < args.repeat:  # the next balance run is not held by settleSeconds
                time.sleep(settings.settle_seconds + 1)
        watch = srv.cache.client.stats.bytes_read - sync.bytes_read
        taint_notes = next((r.get("notes", []) for r in reversed(srv.reports)
                            if r["trigger"]["type"].endswith("taints.changed")), [])
        srv.shutdown()
        runner.join(60)

    print(f"cluster: {args.nodes} nodes, {pods} pods (bench/generate.py seed 1); API server: {where}")
    print(f"policy: {POLICY.relative_to(REPO)} (live; event path safety defaults on); "
          f"cached kinds: {', '.join(stats.objects)}")
    print(f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"cache sync (start to /readyz 200): {sync_s:.1f} s, {sync.requests} requests, "
          f"{sync.bytes_read / 2**20:.1f} MiB read; objects {dict(stats.objects)}; "
          f"estimate {stats.bytes_estimate / 2**20:.0f} MiB; process RSS {rss0:.0f} -> {rss_synced:.0f} MiB "
          f"(+{rss_synced - rss0:.0f} MiB)")
    print("a taint run's notes: " + " | ".join(map(str, taint_notes))[:600])
    print(f"watch traffic during the {args.repeat} x 2 events: {watch / 1024:.1f} KiB")
    print(f"{'event':<42} {'to decision (s)':>16} {'to evictions sent (s)':>22} {'outcomes':>9}")
    for name in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == name]
        for _, d, s, n in mine:
            print(f"{name:<42} {d:>16.3f} {s:>22.3f} {n:>9}")
        print(f"{name + ' (median)':<42} {statistics.median(r[1] for r in mine):>16.3f} "
              f"{statistics.median(r[2] for r in mine):>22.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

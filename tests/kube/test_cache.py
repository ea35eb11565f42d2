"""The watch cache (kdesched.kube.cache) over the fake API server: scripted faults.

Covers: a cache snapshot equals what load_live_snapshot LISTs (full and node-scoped, every kind,
small pages) before and after adds, modifications and deletions; a watch cut mid-stream and
5xx / 410 around the re-list lose no change; has-synced gating per kind; the ceiling; a malformed
object fails the snapshots that include it, naming it. The real-server twin is
tests/realk8s/test_cache_real.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kdesched.evictor.pacing import Pacer
from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.model.errors import ModelError
from kdesched.model.records import Pod
from kdesched.model.snapshot import KINDS, Snapshot
from kdesched.policy.safety import Safety
from kdesched.strategies.framework import ClusterState

from bench.generate import generate
from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer


def fields(record: Any) -> tuple[Any, ...]:
    return tuple(getattr(record, f.name) for f in dataclasses.fields(record))


def view(s: Snapshot) -> dict[str, Any]:
    """Everything a decision reads, field by field, in order."""
    return {
        "nodes": [(k, fields(v)) for k, v in s.nodes.items()],
        "pods": [fields(p) for p in s.pods],
        "by_node": {k: [p.key for p in v] for k, v in s.pods_by_node.items()},
        "owners": dict(s.owner_pod_counts),
        "pdbs": [fields(b) for b in s.pdbs],
        "pcs": [(k, fields(v)) for k, v in s.priority_classes.items()],
        "namespaces": [(k, fields(v)) for k, v in s.namespaces.items()],
        "pvcs": [(k, fields(v)) for k, v in s.pvcs.items()],
        "notes": s.notes,
        # what a run derives from the pods (the cache keeps these up to date pod by pod; a
        # LIST-built snapshot leaves them to the run): read through the run's own accessors
        "usage": derived_usage(s),
        "workloads": {k: [p.key for p in v] for k, v in Pacer(SAFETY, ClusterState(s, NOW))._pods_by_key().items()},
    }


SAFETY = Safety(True, "test")
NOW = datetime(2026, 1, 15, tzinfo=UTC)


def derived_usage(s: Snapshot) -> dict[str, dict[str, int]]:
    """Each node's usage as a run reads it (``.get``: an entry at 0 is the same as a missing one)."""
    state = ClusterState(s, NOW)
    return {n: {k: v for k, v in state.usage(n).items() if v} for n in sorted({*s.nodes, *s.pods_by_node})}


@pytest.fixture
def make_cache(kube: KubeClient) -> Iterator[Callable[..., ClusterCache]]:
    caches: list[ClusterCache] = []

    def make(**kw: Any) -> ClusterCache:
        kw.setdefault("watch_timeout_seconds", 2)
        kw.setdefault("backoff_initial", 0.05)
        cache = ClusterCache(kube, **kw)
        caches.append(cache)
        return cache.start()

    yield make
    for cache in caches:
        cache.close()


def converges(cache: ClusterCache, kube: KubeClient, pod_nodes: list[str] | None = None, timeout: float = 10) -> None:
    """Wait (bounded) until the cache's snapshot equals a fresh LIST's (of the kinds the cache
    watches); fail with the difference."""
    kinds = cache.kinds

    def same() -> bool:
        return view(cache.snapshot(pod_nodes, kinds)) == view(load_live_snapshot(kube, pod_nodes=pod_nodes,
                                                                                 include=kinds))

    if not cache.wait_for(same, timeout):
        assert view(cache.snapshot(pod_nodes, kinds)) == view(load_live_snapshot(kube, pod_nodes=pod_nodes,
                                                                                 include=kinds))


def test_snapshot_is_the_listed_one_full_and_node_scoped_through_changes(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    cluster = generate(12, 8, seed=3)["items"]
    assert {o["kind"] for o in cluster} >= set(KINDS)
    fake_api.add(*cluster)
    cache = make_cache(page_size=7)
    assert cache.wait_synced(10)
    nodes = [o["metadata"]["name"] for o in cluster if o["kind"] == "Node"]
    converges(cache, kube)
    converges(cache, kube, [nodes[3], nodes[0], nodes[3]])
    full_lists = len(fake_api.requests("GET", "/api/v1/pods"))

    pods = fake_api.list("Pod")
    fake_api.delete("Pod", pods[0]["metadata"]["name"], pods[0]["metadata"]["namespace"])
    moved = pods[1]
    moved["spec"]["nodeName"] = nodes[0]  # the by-node index follows a pod to its new node
    moved["metadata"]["labels"] = {"changed": "yes"}
    fake_api.update(moved)
    fake_api.add(pod_obj("aaa-new", nodes[0], namespace="default"), pod_obj("zzz-pending"))
    node = fake_api.get("Node", nodes[0])
    assert node is not None
    node["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    fake_api.update(node)
    pdb = fake_api.list("PodDisruptionBudget")[0]
    fake_api.delete("PodDisruptionBudget", pdb["metadata"]["name"], pdb["metadata"]["namespace"])
    converges(cache, kube)
    converges(cache, kube, [nodes[0]])
    # the cache itself listed each kind once: every later pod LIST is the test's load_live_snapshot
    assert cache.stats().lists == len(KINDS)
    watches = [r for r in fake_api.requests("GET", "/api/v1/pods")[full_lists:] if "watch" in r.query]
    assert all(r.query.get("allowWatchBookmarks") == "true" for r in watches)


def test_a_closed_cache_ends_its_watches_quietly(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache],
        caplog: pytest.LogCaptureFixture) -> None:
    """Stopping ``serve`` closes the cache; the watches then in flight end with an error (the
    connection goes with the client, or the server goes first). That is the stop, not a failure:
    no "failed, retrying" warning at every shutdown, no watch error counted, and the threads end."""
    fake_api.add(node_obj("n1"), pod_obj("p0", "n1"))
    cache = make_cache(watch_timeout_seconds=30)
    assert cache.wait_synced(10)
    assert cache.wait_for(lambda: sum(r.query.get("watch") == "true" for r in fake_api.requests("GET"))
                          >= len(cache.reflectors), 10)  # every kind's watch is in flight
    errors = cache.stats().watch_errors
    caplog.set_level("DEBUG", logger="kdesched.kube.cache")
    cache.close()
    fake_api.cut_connections()  # the watches in flight end with an error now, not at their timeout
    for reflector in cache.reflectors.values():
        assert reflector.thread is not None
        reflector.thread.join(10)
        assert not reflector.thread.is_alive(), f"{reflector.kind} reflector still running after close"
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    assert cache.stats().watch_errors == errors
    assert any("watch ended while stopping" in r.getMessage() for r in caplog.records)


def test_watch_cut_mid_stream_then_410_and_5xx_on_the_relist_lose_nothing(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"), *(pod_obj(f"p{i}", "n1") for i in range(5)))
    cache = make_cache(watch_timeout_seconds=30)
    assert cache.wait_synced(10)
    fake_api.delete("Pod", "p0", "default")
    assert cache.wait_for(lambda: len(cache.snapshot().pods) == 4, 10)

    # 1. the stream is cut mid-watch: reconnect from the last resourceVersion, nothing missed
    errors = cache.stats().watch_errors
    fake_api.cut_connections()
    fake_api.add(pod_obj("p9", "n2"))
    converges(cache, kube)
    assert cache.stats().watch_errors > errors and cache.stats().relists_gone == 0

    # 2. the history is compacted while the watch is down and the re-list fails twice with 5xx:
    #    410 -> re-LIST (after the 5xx) -> the store is replaced, the gap's changes are all there
    fake_api.script("GET", "/api/v1/pods", [500, 410, 503, 500])
    fake_api.cut_connections()
    assert cache.wait_for(lambda: not fake_api.scripts[("GET", "/api/v1/pods")], 20)
    fake_api.delete("Pod", "p1", "default")
    fake_api.add(pod_obj("p10", "n2"))
    fake_api.compact()
    converges(cache, kube, timeout=20)
    converges(cache, kube, ["n1"])
    stats = cache.stats()
    assert stats.relists_gone >= 1 and stats.lists >= len(KINDS) + 1
    assert {p.name for p in cache.snapshot().pods} == {"p2", "p3", "p4", "p9", "p10"}


def test_a_kind_not_listed_yet_is_not_used_and_is_named(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), pod_obj("p", "n1"))
    fake_api.script("GET", "/apis/policy/v1/poddisruptionbudgets", [403] * 1000)  # RBAC refuses PDBs
    cache = make_cache()
    assert cache.wait_synced(10, kinds=["Node", "Pod"])
    assert not cache.wait_synced(0.3)
    assert cache.unsynced() == ("PodDisruptionBudget",)
    assert "not listed yet: PodDisruptionBudget" in cache.describe()
    assert cache.usable(["Node", "Pod"]) and not cache.usable(["Node", "Pod", "PodDisruptionBudget"])
    with pytest.raises(LookupError, match="PodDisruptionBudget"):
        cache.snapshot(include=["Node", "Pod", "PodDisruptionBudget"])
    assert [p.name for p in cache.snapshot(include=["Node", "Pod"]).pods] == ["p"]


def test_past_the_ceiling_the_cache_gives_up_but_keeps_nodes(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i}", "n1") for i in range(3)))
    cache = make_cache(kinds=["Node", "Pod"], max_objects=6)
    assert cache.wait_synced(10)
    assert cache.usable(["Node", "Pod"])
    fake_api.add(*(pod_obj(f"q{i}", "n1") for i in range(3)))  # 7 objects > 6
    assert cache.wait_for(lambda: bool(cache.disabled), 10)
    assert "7 objects over the ceiling of 6 (Node 1, Pod 6)" in cache.disabled
    stats = cache.stats()
    assert stats.objects == {"Node": 1, "Pod": 0} and not cache.usable(["Node"])
    with pytest.raises(LookupError, match="over the ceiling"):
        cache.snapshot()
    assert "LIST per event" in cache.describe()


def test_back_under_the_ceiling_the_cache_lists_and_watches_again(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i}", "n1") for i in range(6)))  # 7 objects > 6
    cache = make_cache(kinds=["Node", "Pod"], max_objects=6, recheck_seconds=0.1)
    assert cache.wait_for(lambda: bool(cache.disabled), 10)
    assert "counting again every 0.1 s, back on under 4" in cache.describe()
    before = cache.reflectors["Pod"]
    # still 7 objects at every count (one LIST of a single object per kind): stays off
    assert cache.wait_for(lambda: len(fake_api.requests("GET", "/api/v1/pods")) >= 4, 10)
    counts = [r for r in fake_api.requests("GET", "/api/v1/pods") if r.query.get("limit") == "1"]
    assert len(counts) >= 2 and cache.disabled and cache.stats().recoveries == 0
    for i in range(3):  # 4 objects: under 80% of the ceiling (4.8)
        fake_api.delete("Pod", f"p{i}", "default")
    assert cache.wait_for(lambda: not cache.disabled and cache.usable(["Node", "Pod"]), 10)
    assert cache.stats().recoveries == 1
    converges(cache, kube)
    # the reflector from before is retired: were it still reading a watch, nothing it read is kept
    assert before.retired and cache.reflectors["Pod"] is not before
    cache._put("Pod", "default/ghost", Pod.from_api(pod_obj("ghost", "n1")), before)
    assert "ghost" not in [p.name for p in cache.snapshot(include=["Node", "Pod"]).pods]
    fake_api.add(pod_obj("late", "n1"))  # and it watches again
    converges(cache, kube)
    assert [p.name for p in cache.snapshot(include=["Node", "Pod"]).pods] == ["late", "p3", "p4", "p5"]


def test_a_server_that_does_not_count_leaves_the_cache_off(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    fake_api.report_remaining = False
    assert kube.count_objects("Pod") == 0
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i}", "n1") for i in range(6)))
    assert kube.count_objects("Node") == 1 and kube.count_objects("Pod") is None
    cache = make_cache(kinds=["Node", "Pod"], max_objects=6, recheck_seconds=0.1)
    assert cache.wait_for(lambda: bool(cache.disabled), 10)
    for i in range(5):
        fake_api.delete("Pod", f"p{i}", "default")  # 2 objects, but the count of 1 + unknown is unknown
    fake_api.add(pod_obj("q", "n1"))
    assert not cache.wait_for(lambda: not cache.disabled, 1.0)
    fake_api.report_remaining = True
    assert kube.count_objects("Pod") == 2
    assert not cache.wait_for(lambda: not cache.disabled, 0.5)  # it stopped counting: off until restarted


def test_a_malformed_pod_fails_the_snapshots_that_include_it(
        fake_api: FakeApiServer, kube: KubeClient, make_cache: Callable[..., ClusterCache]) -> None:
    bad = pod_obj("bad", "n2")
    bad["spec"]["priority"] = "high"
    fake_api.add(node_obj("n1"), node_obj("n2"), pod_obj("good", "n1"), bad)
    cache = make_cache()
    assert cache.wait_synced(10)
    with pytest.raises(ModelError, match=r"bad in default.*spec.priority: must be an integer"):
        cache.snapshot()
    with pytest.raises(ModelError, match="spec.priority"):
        load_live_snapshot(kube)  # what a LIST does with it
    assert [p.name for p in cache.snapshot(["n1"]).pods] == ["good"]
    fixed = fake_api.get("Pod", "bad", "default")
    assert fixed is not None
    fixed["spec"]["priority"] = 5
    fake_api.update(fixed)

    def healed() -> bool:
        try:
            return len(cache.snapshot().pods) == 2
        except ModelError:
            return False

    assert cache.wait_for(healed, 10)


@pytest.mark.parametrize("safety", [True, False])
def test_a_plan_from_the_caches_indexes_is_the_plan_from_computed_ones(safety: bool) -> None:
    """The usage and workload indexes the cache keeps (Snapshot.build(derived=...)) plan exactly
    as the ones a run computes itself, also where earlier evictions of the run changed usage."""
    from kdesched.engine import plan_run
    from kdesched.kube.cache import _Store, record_key
    from kdesched.policy.load import load_policy

    objects = [(f"items[{i}]", o) for i, o in enumerate(generate(60, 12, seed=5)["items"])]
    plain = Snapshot.from_objects(objects)
    store = _Store("Pod")
    store.replace({record_key("Pod", p.namespace, p.name): p for p in plain.pods}, {})
    pods = store.sorted_records()
    rest = (plain.nodes.values(), pods, plain.pdbs, plain.priority_classes.values(), plain.namespaces.values(),
            plain.pvcs.values())
    computed, kept = Snapshot.build(*rest), Snapshot.build(*rest, derived=store.derived())
    assert computed.node_usage is None and kept.node_usage is not None

    policy = load_policy(str(Path(__file__).resolve().parents[2] / "knative" / "common" / "policy.yaml"))
    runs = [plan_run(policy, s, now=NOW, safety=Safety(safety, "test")) for s in (computed, kept)]
    a, b = ([(e.pod.key, e.strategy, e.reason) for e in r.evictions] for r in runs)
    assert a == b and len(a) > 20
    assert [(r.pod.key, r.reason) for r in runs[0].refusals] == [(r.pod.key, r.reason) for r in runs[1].refusals]
    assert runs[0].pacing == runs[1].pacing


def test_a_pod_turning_ready_is_reported_once(fake_api: FakeApiServer, kube: KubeClient,
                                              make_cache: Callable[..., ClusterCache]) -> None:
    """What serve wakes paced moves with: a pod the watch sees turn Ready (not one already Ready,
    nor a Ready pod's other changes, nor one that stops being Ready)."""
    ready = [{"type": "Ready", "status": "True"}]
    fake_api.add(node_obj("n1"), pod_obj("old", "n1", conditions=ready), pod_obj("new", "n1", phase="Pending"))
    seen: list[str] = []
    cache = ClusterCache(kube, watch_timeout_seconds=2, backoff_initial=0.05)
    cache.on_pod_ready(lambda pod: seen.append(pod.name))
    cache.on_pod_ready(lambda pod: 1 / 0)  # a failing hook is logged; the others and the watch go on
    try:
        cache.start()
        assert cache.wait_synced(10)
        assert seen == []  # the LIST is not a change
        new = fake_api.get("Pod", "new", "default")
        assert new is not None
        new["status"].update(phase="Running", conditions=ready)
        fake_api.update(new)
        assert cache.wait_for(lambda: seen == ["new"], 10), seen
        new["metadata"]["labels"] = {"x": "y"}  # still Ready: not again
        fake_api.update(new)
        old = fake_api.get("Pod", "old", "default")
        assert old is not None
        old["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        fake_api.update(old)
        time.sleep(0.5)
        assert seen == ["new"]
        old["status"]["conditions"] = ready  # Ready again: reported
        fake_api.update(old)
        assert cache.wait_for(lambda: seen == ["new", "old"], 10), seen
    finally:
        cache.close()

"""The watch cache (kdesched.kube.cache) on the real API server: its snapshot is the one a LIST
builds (every kind, full and node-scoped, the API server's own order), through adds,
modifications and deletions of pods and nodes, and across a real 410 Gone re-list (after a
backoff step, through the client's rate limit); a kind counted over the ceiling (the server's
remainingItemCount) is never listed; and
``kdesched serve`` planning from it evicts exactly what the taint story needs (real scheduler,
controller-manager and kubelet stand-in).

The fake-API twin (tests/kube/test_cache.py) scripts the faults the real server does not make on
demand (a watch cut mid-stream, 5xx on the re-list).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.model.snapshot import KINDS

from tests.kube.test_cache import view
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc
from tests.realk8s.serve_stories import NS, Serve, policy_text, taint, uids, wait_placement, write_file


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as client:
        yield client


def converges(cache: ClusterCache, kube: KubeClient, pod_nodes: list[str] | None = None,
              timeout: float = 20) -> None:
    """Wait (bounded) until the cache's snapshot equals a fresh LIST's; fail with the difference."""
    kinds = cache.kinds

    def same() -> bool:
        return view(cache.snapshot(pod_nodes, kinds)) == view(
            load_live_snapshot(kube, pod_nodes=pod_nodes, include=kinds, page_size=3))

    if not cache.wait_for(same, timeout):
        assert view(cache.snapshot(pod_nodes, kinds)) == view(load_live_snapshot(kube, pod_nodes=pod_nodes, include=kinds))


def populate(cluster: Cluster) -> None:
    # "team" and "team-a": '-' sorts before '/', so the API server lists team-a/... before team/...
    for ns in ("team", "team-a"):
        cluster.namespace(ns, labels={"tier": ns})
    cluster.node("n1")
    cluster.node("n2", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    cluster.node("n3", labels={"topology.kubernetes.io/zone": "b"})
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "11111111-2222-3333-4444-555555555555",
             "controller": True}
    for i, (ns, node) in enumerate([("team", "n1"), ("team-a", "n1"), ("team", "n2"), ("default", "n3"),
                                    ("team-a", "n2"), ("team", "n1")]):
        cluster.pod(f"p{i}", ns, node=node, labels={"app": "web"}, owner=owner, cpu="250m", memory="128Mi",
                    tolerations=[{"key": "dedicated", "operator": "Exists"}])
    cluster.pod("pending", "team")  # no node: not in a node-scoped snapshot
    cluster.pdb("web", {"app": "web"}, "team", min_available=1)
    cluster.priority_class("high", 1000)
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "team"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                             "resources": {"requests": {"storage": "1Gi"}}}})


def test_cache_snapshot_is_the_listed_snapshot_through_changes(control_plane: ControlPlane, cluster: Cluster,
                                                                kube: KubeClient) -> None:
    populate(cluster)
    cache = ClusterCache(kube, page_size=2, watch_timeout_seconds=5).start()
    try:
        assert cache.wait_synced(30)
        assert set(cache.stats().objects) == set(KINDS)
        converges(cache, kube)
        converges(cache, kube, ["n2", "n1"])
        assert [p.key for p in cache.snapshot(["n1"]).pods] == ["team-a/p1", "team/p0", "team/p5"]

        # pods: deleted, relabelled, added; nodes: tainted, added, deleted; a PDB deleted
        cluster.api.delete("/api/v1/namespaces/team/pods/p0", grace=0)
        cluster.api.patch("/api/v1/namespaces/team-a/pods/p1", {"metadata": {"labels": {"app": "other"}}})
        cluster.pod("p9", "team", node="n3")
        cluster.api.patch("/api/v1/nodes/n1", {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}})
        cluster.node("n4")
        cluster.api.delete("/api/v1/nodes/n3")
        cluster.api.delete("/apis/policy/v1/namespaces/team/poddisruptionbudgets/web")
        converges(cache, kube)
        converges(cache, kube, ["n1", "n3", "n4"])
        snap = cache.snapshot()
        assert "n3" not in snap.nodes and "n4" in snap.nodes and not snap.pdbs
        assert snap.nodes["n1"].taints[0].key == "maintenance"
        assert {p.key for p in snap.pods_by_node["n1"]} == {"team-a/p1", "team/p5"}
        assert cache.stats().lists == len(KINDS) and cache.stats().relists_gone == 0  # watched, not re-listed
    finally:
        cache.close()


def test_a_real_410_relists_and_keeps_every_change(compacting: ControlPlane) -> None:
    cluster = Cluster(compacting)
    cluster.namespace("gone")
    cluster.node("n1")
    cluster.node("n2")
    for i in range(4):
        cluster.pod(f"p{i}", "gone", node="n1" if i % 2 else "n2")
    with KubeClient.from_config(str(compacting.admin_kubeconfig)) as client:
        # watches end after 1 s; v1.24 sends no bookmark, so a quiet kind resumes from an old
        # resourceVersion, which the compaction soon makes 410 Gone: a real re-list
        cache = ClusterCache(client, kinds=["Node", "Pod", "PodDisruptionBudget"], watch_timeout_seconds=1).start()
        try:
            assert cache.wait_synced(30)
            converges(cache, client)
            cluster.api.delete("/api/v1/namespaces/gone/pods/p0", grace=0)
            cluster.pod("p7", "gone", node="n1")
            cluster.api.patch("/api/v1/nodes/n2", {"metadata": {"labels": {"rack": "r2"}}})
            assert cache.wait_for(lambda: cache.stats().relists_gone >= 1, 60), "no 410 Gone within 60 s"
            converges(cache, client)
            # every re-LIST after a 410 waited a backoff step first (>= 0.8 s, client-go's first),
            # and the cache's requests took the client's tokens (one bucket for cache and runs)
            stats = cache.stats()
            assert stats.backoffs >= stats.relists_gone and stats.backoff_seconds >= 0.8 * stats.relists_gone
            assert client.rate_limiter is not None and cache.client.rate_limiter is client.rate_limiter
            cluster.api.delete("/api/v1/namespaces/gone/pods/p1", grace=0)  # and it keeps watching after
            converges(cache, client)
            converges(cache, client, ["n1"])
            snap = cache.snapshot(include=cache.kinds)
            assert {p.name for p in snap.pods} == {"p2", "p3", "p7"} and snap.nodes["n2"].labels["rack"] == "r2"
        finally:
            cache.close()


def test_a_kind_counted_over_the_ceiling_is_not_listed(cluster: Cluster, kube: KubeClient) -> None:
    """The real server's remainingItemCount (a LIST of one object) says how many pods there are
    before any page of them is read: past the ceiling the cache gives up without listing them."""
    # the previous module's Deployments are deleted in the background: their garbage collector may
    # still be removing pods a ReplicaSet recreated meanwhile; this test counts every pod
    deadline = time.monotonic() + 60
    while kube.count_objects("Pod") and time.monotonic() < deadline:
        time.sleep(0.5)
    cluster.namespace("many")
    cluster.node("n1")
    for i in range(4):
        cluster.pod(f"p{i}", "many", node="n1")
    assert kube.count_objects("Pod") == 4 and kube.count_objects("Node") == 1
    cache = ClusterCache(kube, kinds=["Pod"], max_objects=3, recheck_seconds=0).start()
    try:
        assert cache.wait_for(lambda: bool(cache.disabled), 30)
        assert cache.disabled.startswith("4 objects over the ceiling of 3 (Pod 4); counted before listing Pod")
        stats = cache.stats()
        assert stats.lists == 0 and stats.objects == {"Pod": 0} and stats.requests == 1  # the count alone
    finally:
        cache.close()


def test_serve_with_the_cache_evicts_right_on_the_taint_story(control_plane: ControlPlane, scheduler: Proc,
                                                              controller_manager: Proc, kubelet: Kubelet,
                                                              cluster: Cluster, tmp_path: Path) -> None:
    cluster.namespace(NS)
    story = taint(control_plane, cluster)
    before = uids(cluster, "shop")
    s = Serve(control_plane.admin_kubeconfig, write_file(tmp_path, "policy.yaml", policy_text()), "cached",
              workdir=tmp_path).start()
    try:
        def synced() -> bool:
            assert s.alive(), s.log()[-3000:]
            status, why = s.readyz()
            return status == 200 and "watch cache synced" in why
        control_plane.wait_for(synced, 60, what="serve to lead with a synced watch cache")
        assert s.metric("kdesched_cache_synced", kind="Pod") == 1 and s.metric("kdesched_cache_objects", kind="Pod") >= 2
        story.change()
        got = wait_placement(control_plane, cluster, "shop", story.done, what="shop on node-1")
        assert got == {"node-1": 2} and not (uids(cluster, "shop") & before)  # both replaced, nothing else
        assert s.metric("kdesched_cache_snapshots", source="cache") >= 1
        assert s.metric("kdesched_cache_snapshots", source="list") == 0  # every run planned from the cache
        assert "watch cache of Node, Pod, PodDisruptionBudget" in s.log()
    finally:
        s.stop()

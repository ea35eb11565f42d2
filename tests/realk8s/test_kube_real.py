"""The kube layer against the real API server: watch streams and their 410, Lease optimistic
concurrency. The fake API server (tests/kube) keeps the fault injection (scripted 5xx, 429,
timeouts); these are the same behaviours as the real server produces them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone
from kdesched.kube.lease import LeaseLock, get_lease

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane

T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as client:
        yield client


# --- counting (the watch cache's re-check after its ceiling) -----------------------------------------

def test_count_objects_reads_the_real_servers_remaining_item_count(kube: KubeClient, cluster: Cluster) -> None:
    """kube-apiserver v1.24 reports remainingItemCount on a paged LIST from etcd, so the cache can
    count cheaply before coming back (kube/cache.py, RECOVER_FRACTION)."""
    assert kube.count_objects("Node") == 0
    for i in range(5):
        cluster.node(f"n{i}")
    cluster.namespace("count-a")
    assert kube.count_objects("Node") == 5
    assert kube.count_objects("Namespace") == len(kube.list_raw("Namespace").items)
    page = list(kube.list_pages("Node", page_size=1))
    assert len(page) == 5  # one object per page: the count came from the first page alone


# --- when a node's taints and labels were written (kdesched.admission.fresh_change) ------------------

def test_the_real_servers_managed_fields_say_when_a_nodes_taints_and_labels_were_written(
        kube: KubeClient, cluster: Cluster) -> None:
    """kube-apiserver v1.24 records every writer of a node's spec.taints / metadata.labels in
    managedFields, with its time: what the fresh-node-change control reads, in the server's clock."""
    from kdesched.model.records import Node

    cluster.node("n1")
    created = Node.from_api(kube.get_raw("Node", "n1"))
    assert created.labels_written_at is not None and created.taints_written_at is None  # no taint yet
    time_before = kube.clock.now()
    cluster.api.patch("/api/v1/nodes/n1", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})
    node = Node.from_api(kube.get_raw("Node", "n1"))
    assert node.taints_written_at is not None
    assert time_before - 2 <= node.taints_written_at <= kube.clock.now() + 1  # whole seconds, the server's clock
    cluster.api.patch("/api/v1/nodes/n1/status", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert Node.from_api(kube.get_raw("Node", "n1")).taints_written_at == node.taints_written_at  # status is not spec


# --- watch ----------------------------------------------------------------------------------------

def test_watch_backlog_live_changes_and_server_timeout(kube: KubeClient, cluster: Cluster) -> None:
    cluster.node("n1")
    rv = kube.list_raw("Node").resource_version
    cluster.node("n2")
    stream = kube.watch_raw("Node", resource_version=rv, timeout_seconds=3)
    etype, obj = next(stream)
    assert (etype, obj["metadata"]["name"], obj["kind"], obj["apiVersion"]) == ("ADDED", "n2", "Node", "v1")
    cluster.api.patch("/api/v1/nodes/n1", {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})
    etype, obj = next(stream)
    assert (etype, obj["metadata"]["name"], obj["spec"]["taints"][0]["key"]) == ("MODIFIED", "n1", "k")
    cluster.api.delete("/api/v1/nodes/n2")
    assert next(stream)[0] == "DELETED"
    rest = list(stream)  # the server ends the stream at timeoutSeconds, without an error
    assert all(t == "BOOKMARK" for t, _ in rest)
    # the connection the finished stream used is reusable
    assert [n["metadata"]["name"] for n in kube.list_raw("Node").items] == ["n1"]


def test_abandoned_watch_leaves_the_client_usable(kube: KubeClient, cluster: Cluster) -> None:
    cluster.node("n1")
    stream = kube.watch_raw("Node", resource_version="0", timeout_seconds=30)
    assert next(stream)[0] == "ADDED"
    stream.close()
    assert [n["metadata"]["name"] for n in kube.list_raw("Node").items] == ["n1"]


def test_watch_from_a_compacted_resource_version_is_gone(compacting: ControlPlane) -> None:
    cluster = Cluster(compacting)
    cluster.node("n1")
    with KubeClient.from_config(str(compacting.admin_kubeconfig)) as client:
        old = client.list_raw("Node").resource_version
        for i in range(3):
            cluster.api.patch("/api/v1/nodes/n1", {"metadata": {"labels": {"step": str(i)}}})

        def compacted() -> bool:
            try:
                list(client.watch_raw("Node", resource_version=old, timeout_seconds=1))
            except Gone:
                return True
            return False

        compacting.wait_for(compacted, 30, interval=1.0, what="etcd to compact past the old resourceVersion")
        # a fresh LIST gives a resourceVersion to watch from again (what the reactor's re-list does)
        fresh = client.list_raw("Node").resource_version
        assert list(client.watch_raw("Node", resource_version=fresh, timeout_seconds=1)) == []


# --- Lease ----------------------------------------------------------------------------------------

class Clock:
    """Wall clock (what the Lease records) and the monotonic seconds since T0 (what expiry is judged by)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def mono(self) -> float:
        return (self.now - T0).total_seconds()


def lock(client: KubeClient, clock: Any, who: str, duration: int = 30) -> LeaseLock:
    return LeaseLock(client, "default", "balance", who, duration, clock=clock, monotonic=clock.mono)


def test_lease_acquire_contend_renew_expire_release(kube: KubeClient) -> None:
    clock = Clock()
    a, b = lock(kube, clock, "a"), lock(kube, clock, "b")
    assert a.try_acquire() and not b.try_acquire()
    lease = get_lease(kube, "default", "balance")
    assert lease is not None  # the real server stored (and validated) the MicroTime fields as sent
    assert lease["spec"] == {"holderIdentity": "a", "leaseDurationSeconds": 30,
                             "acquireTime": "2026-11-01T12:00:00.000000Z", "renewTime": "2026-11-01T12:00:00.000000Z",
                             "leaseTransitions": 0}
    clock.now = T0 + timedelta(seconds=25)
    assert a.renew()
    clock.now = T0 + timedelta(seconds=50)
    assert not b.try_acquire()  # renewed 25 s ago: still a's
    clock.now = T0 + timedelta(seconds=56)
    assert b.try_acquire()  # expired: taken over, one transition
    spec = get_lease(kube, "default", "balance")["spec"]  # type: ignore[index]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert not a.renew() and not a.release()
    assert b.release() and a.try_acquire()


def test_lease_lost_races_are_real_conflicts(kube: KubeClient, control_plane: ControlPlane,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    a = lock(kube, clock, "a")
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as other:
        b = lock(other, clock, "b")
        # create race: b read "absent" before a created it -> the server answers 409 AlreadyExists
        original = other.get_raw

        def absent_then_a_creates(kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
            seen = original(kind, name, namespace)
            assert seen is None and a.try_acquire()
            return seen

        monkeypatch.setattr(other, "get_raw", absent_then_a_creates)
        assert not b.try_acquire()
        monkeypatch.setattr(other, "get_raw", original)
        assert not b.try_acquire()  # b sees a's record (expiry is judged from b's first sight of it)
        # takeover race: b read the expired lease, a renewed meanwhile -> 409 on b's stale resourceVersion
        clock.now = T0 + timedelta(seconds=60)

        def read_then_a_renews(kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
            seen = original(kind, name, namespace)
            assert a.renew()
            return seen

        monkeypatch.setattr(other, "get_raw", read_then_a_renews)
        assert not b.try_acquire()
        assert a.holder() == "a"


def test_lease_has_one_holder_among_concurrent_contenders(control_plane: ControlPlane) -> None:
    clients = [KubeClient.from_config(str(control_plane.admin_kubeconfig)) for _ in range(6)]
    barrier = threading.Barrier(len(clients))
    won: list[str] = []

    def contend(i: int) -> None:
        contender = LeaseLock(clients[i], "default", "race", f"c{i}", 30)
        barrier.wait()
        if contender.try_acquire():
            won.append(f"c{i}")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for client in clients:
        client.close()
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as reader:
        lease = get_lease(reader, "default", "race")
    assert lease is not None and won == [lease["spec"]["holderIdentity"]]

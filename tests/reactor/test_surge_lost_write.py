"""The settle's eviction of a surge-first move is recorded in the ledger even when the write after it
loses its race (kdesched.reactor.run.surge, Surges.advance).

The settle evicts the move's pod, then the run writes the ledger with the move's eviction time. When
that write loses its race (a 409: another run wrote the record), the run decides again on the ledger
as it now is, which has no eviction time. The process remembers it (``Surges._evicted``) so that it
neither evicts the pod again nor takes it for alive; but the step it then decides is "wait" (the pod
was evicted a moment ago), which changes nothing, so nothing was written: the ledger never said the
pod was evicted, and only this process knew. Another process (a restart, another replica) would then
judge the move as not evicted: evict again at every run, or take a pod it cannot see going for one
that was never evicted. Now the attempt that decides again writes the remembered eviction time."""

from __future__ import annotations

from kdesched.kube.client import KubeClient
from kdesched.reactor.io.ledger_store import record_name
from kdesched.reactor.run.runner import Reactor

from tests.fakeapi import FakeApiServer
from tests.reactor.test_health_brake_surge_settle import (
    cluster,
    evictions,
    surge_under_way,
    taint_event,
)
from tests.reactor.test_surge import KEY


def record_path(reactor: Reactor) -> str:
    store = reactor.execution.store
    return f"/apis/coordination.k8s.io/v1/namespaces/{store.namespace}/leases/{record_name(store.name, KEY)}"


def test_the_eviction_is_recorded_when_the_write_after_it_loses_its_race(fake_api: FakeApiServer,
                                                                        kube: KubeClient) -> None:
    reactor = cluster(fake_api, kube, 0)
    client = surge_under_way(reactor)  # the move's new pod is Ready on spare-1: the settle evicts web-1
    path = record_path(reactor)
    fake_api.script("PUT", path, [409])  # the write after the eviction loses its race
    fake_api.clear_journal()
    out = taint_event(reactor)
    assert evictions(client) == ["web-1"]  # once: the attempt that decided again did not evict it again
    assert len(fake_api.requests("PUT", path)) == 2, "the 409 was not played, or nothing was written after it"
    s = reactor.execution.store.read().ledger.surges[KEY]
    assert s.evicted > 0, "the pod was evicted, but the ledger does not say so: only this process knows"
    assert any("admitted on attempt 2" in n for n in out["notes"]), out["notes"]


def test_without_a_lost_write_the_eviction_is_recorded_once(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The control: the write goes through at once; the eviction time is the settle's."""
    reactor = cluster(fake_api, kube, 0)
    client = surge_under_way(reactor)
    path = record_path(reactor)
    fake_api.clear_journal()
    taint_event(reactor)
    assert evictions(client) == ["web-1"]
    assert len(fake_api.requests("PUT", path)) == 1
    assert reactor.execution.store.read().ledger.surges[KEY].evicted > 0

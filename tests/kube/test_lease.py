"""LeaseLock against the fake API server's optimistic concurrency.

Covers: acquire when absent, contention, re-acquire when already ours, takeover after expiry
(injected clock), renew, release (others may take it at once), losing a race (409 on create and
on replace), and the Lease's fields.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock, get_lease

from tests.fakeapi import FakeApiServer

T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lock(kube: KubeClient, clock: Clock, who: str, duration: int = 30) -> LeaseLock:
    return LeaseLock(kube, "kdesched", "balance", who, duration, clock=clock)


def test_acquire_contend_release(fake_api: FakeApiServer, kube: KubeClient, clock: Clock) -> None:
    a, b = lock(kube, clock, "a"), lock(kube, clock, "b")
    assert a.try_acquire()
    lease = get_lease(kube, "kdesched", "balance")
    assert lease is not None
    assert lease["spec"] == {"holderIdentity": "a", "leaseDurationSeconds": 30,
                             "acquireTime": "2026-11-01T12:00:00.000000Z", "renewTime": "2026-11-01T12:00:00.000000Z",
                             "leaseTransitions": 0}
    assert not b.try_acquire()
    assert a.try_acquire()  # already ours: renewed
    assert a.holder() == "a"
    assert not b.release()  # only the holder may release
    assert a.release()
    assert a.holder() is None
    assert b.try_acquire()
    assert get_lease(kube, "kdesched", "balance")["spec"]["holderIdentity"] == "b"
    assert not a.renew()


@pytest.mark.parametrize(("elapsed", "taken"), [(29, False), (30, False), (31, True), (3600, True)])
def test_expiry(fake_api: FakeApiServer, kube: KubeClient, clock: Clock, elapsed: int, taken: bool) -> None:
    a, b = lock(kube, clock, "a"), lock(kube, clock, "b")
    assert a.try_acquire()
    clock.now = T0 + timedelta(seconds=elapsed)
    assert b.try_acquire() is taken
    spec = get_lease(kube, "kdesched", "balance")["spec"]
    assert spec["holderIdentity"] == ("b" if taken else "a")
    assert spec["leaseTransitions"] == (1 if taken else 0)


def test_renew_keeps_it_alive(fake_api: FakeApiServer, kube: KubeClient, clock: Clock) -> None:
    a, b = lock(kube, clock, "a"), lock(kube, clock, "b")
    assert a.try_acquire()
    clock.now = T0 + timedelta(seconds=25)
    assert a.renew()
    clock.now = T0 + timedelta(seconds=50)  # 25s after the renewal: still held
    assert not b.try_acquire()
    assert get_lease(kube, "kdesched", "balance")["spec"]["renewTime"] == "2026-11-01T12:00:25.000000Z"


def test_lost_race_on_create_is_false(fake_api: FakeApiServer, kube: KubeClient, clock: Clock) -> None:
    fake_api.script("POST", "/apis/coordination.k8s.io/v1/namespaces/kdesched/leases", [409])
    assert not lock(kube, clock, "a").try_acquire()


def test_lost_race_on_takeover_is_false(fake_api: FakeApiServer, kube: KubeClient, clock: Clock,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    a = lock(kube, clock, "a")
    other = KubeClient.for_host(fake_api.url)
    b = LeaseLock(other, "kdesched", "balance", "b", 30, clock=clock)
    assert a.try_acquire()
    clock.now = T0 + timedelta(seconds=60)  # a's lease has expired
    original = other.get_raw

    def read_then_a_renews(kind: str, name: str, namespace: str | None = None) -> dict | None:
        seen = original(kind, name, namespace)
        assert a.renew()  # between b's read and b's write: b's resourceVersion is now stale
        return seen

    monkeypatch.setattr(other, "get_raw", read_then_a_renews)
    assert not b.try_acquire()
    assert a.holder() == "a"
    puts = fake_api.requests("PUT", "/apis/coordination.k8s.io/v1/namespaces/kdesched/leases/balance")
    assert [r.body["spec"]["holderIdentity"] for r in puts] == ["a", "b"]  # a's renew won, b's takeover got 409
    other.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="holder_identity"):
        LeaseLock(None, "ns", "n", "", 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease_duration_seconds"):
        LeaseLock(None, "ns", "n", "me", 0)  # type: ignore[arg-type]


def test_writes_keep_annotations_and_labels(fake_api: FakeApiServer, kube: KubeClient, clock: Clock) -> None:
    """Acquire, renew and release replace the Lease; what others keep on it must survive."""
    a = lock(kube, clock, "a")
    assert a.try_acquire()
    lease = get_lease(kube, "kdesched", "balance")
    assert lease is not None
    lease["metadata"]["annotations"] = {"kdesched.dev/history": '{"owners": {}}'}
    lease["metadata"]["labels"] = {"app": "kdesched"}
    kube.replace_raw("Lease", lease)
    assert a.renew() and a.release() and a.try_acquire()
    meta = get_lease(kube, "kdesched", "balance")["metadata"]
    assert meta["annotations"] == {"kdesched.dev/history": '{"owners": {}}'}
    assert meta["labels"] == {"app": "kdesched"}

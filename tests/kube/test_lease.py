"""LeaseLock against the fake API server's optimistic concurrency.

Covers: acquire when absent, contention, re-acquire when already ours, takeover after expiry
(injected clocks), renew, release (others may take it at once), losing a race (409 on create and
on replace), and the Lease's fields. Expiry is judged by the candidate's own clock (client-go's
rule): the first sight of a held Lease is never expired, whatever its renewTime says; a record
unchanged for its duration is; a renew that meets a concurrent write (409) re-reads and renews.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Conflict
from kdesched.kube.lease import LeaseLock, LeaseObservations, get_lease

from tests.fakeapi import FakeApiServer

T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    """The test's timeline: ``now`` is the wall clock, ``mono`` the monotonic seconds since T0."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def mono(self) -> float:
        return (self.now - T0).total_seconds()


class Skewed:
    """A holder's wall clock, ``offset`` away from the timeline (what it writes as renewTime)."""

    def __init__(self, clock: Clock, offset: timedelta) -> None:
        self.clock, self.offset = clock, offset

    def __call__(self) -> datetime:
        return self.clock.now + self.offset


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lock(kube: KubeClient, clock: Clock, who: str, duration: int = 30, *, wall: Skewed | None = None,
         own_eyes: bool = False) -> LeaseLock:
    """A lock on the timeline; ``own_eyes``: its own observations (another process's view)."""
    return LeaseLock(kube, "kdesched", "balance", who, duration, clock=wall or clock, monotonic=clock.mono,
                     observations=LeaseObservations() if own_eyes else None)


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
    b = LeaseLock(other, "kdesched", "balance", "b", 30, clock=clock, monotonic=clock.mono)
    assert a.try_acquire()
    assert not b.try_acquire()  # b sees a's record (first sight: held)
    clock.now = T0 + timedelta(seconds=60)  # a's record unchanged for 60 s by b's clock: expired
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


# --- expiry by the candidate's own clock (client-go's observedRecord/observedTime) -------------------


@pytest.mark.parametrize("skew", [timedelta(days=-1), timedelta(0), timedelta(hours=1)])
def test_first_sight_of_a_held_lease_waits_one_duration_whatever_the_holders_clock(
        fake_api: FakeApiServer, kube: KubeClient, clock: Clock, skew: timedelta) -> None:
    """A holder's renewTime a day old (its clock behind ours) is not expired at first sight; one an
    hour ahead (its clock ahead) expires like any other: one duration unchanged by our clock."""
    a = lock(kube, clock, "a", wall=Skewed(clock, skew))
    b = lock(kube, clock, "b", own_eyes=True)  # another process: it has never seen the Lease
    assert a.try_acquire()
    clock.now = T0 + timedelta(seconds=5)
    assert not b.try_acquire() and b.holder() == "a"
    observed = b.observed()
    assert observed is not None and observed.holder == "a" and observed.seen_at == 5.0
    clock.now = T0 + timedelta(seconds=35)  # unchanged for exactly 30 s: not yet
    assert not b.try_acquire()
    clock.now = T0 + timedelta(seconds=36)
    assert b.holder() is None and b.try_acquire()
    assert get_lease(kube, "kdesched", "balance")["spec"]["holderIdentity"] == "b"


def test_a_renewing_holder_is_never_taken_over_whatever_its_clock(fake_api: FakeApiServer, kube: KubeClient,
                                                                  clock: Clock) -> None:
    """The old rule (renewTime + duration < our wall clock) took the Lease from a live holder whose
    clock was behind ours. Judged by change, a renewing holder keeps it."""
    a = lock(kube, clock, "a", wall=Skewed(clock, timedelta(hours=-2)))
    b = lock(kube, clock, "b", own_eyes=True)
    assert a.try_acquire()
    for t in range(0, 300, 10):
        clock.now = T0 + timedelta(seconds=t)
        if t % 20 == 0:
            assert a.renew()
        assert not b.try_acquire(), t
    assert get_lease(kube, "kdesched", "balance")["spec"]["holderIdentity"] == "a"


def test_another_writers_annotation_does_not_keep_a_dead_holders_lease(fake_api: FakeApiServer, kube: KubeClient,
                                                                       clock: Clock) -> None:
    """Only the record (holder, times, duration, transitions) counts as a sign of life, not the
    resourceVersion an unrelated annotation update moves."""
    a = lock(kube, clock, "a")
    b = lock(kube, clock, "b", own_eyes=True)
    assert a.try_acquire() and not b.try_acquire()
    for t in (10, 20, 30):
        clock.now = T0 + timedelta(seconds=t)
        lease = get_lease(kube, "kdesched", "balance")
        lease["metadata"]["annotations"] = {"someone/else": str(t)}
        kube.replace_raw("Lease", lease)
        assert not b.try_acquire()
    clock.now = T0 + timedelta(seconds=31)
    assert b.try_acquire()
    assert get_lease(kube, "kdesched", "balance")["metadata"]["annotations"] == {"someone/else": "30"}


def test_a_changed_record_restarts_the_wait(fake_api: FakeApiServer, kube: KubeClient, clock: Clock) -> None:
    a, c = lock(kube, clock, "a", own_eyes=True), lock(kube, clock, "c", own_eyes=True)
    b = lock(kube, clock, "b", own_eyes=True)
    assert a.try_acquire() and not b.try_acquire()
    assert a.release()
    clock.now = T0 + timedelta(seconds=25)
    assert c.try_acquire()  # a free Lease is taken at once, without waiting
    assert not b.try_acquire()  # b sees c's record now
    clock.now = T0 + timedelta(seconds=40)  # 40 s since b first saw the Lease, but c's record is 15 s old
    assert not b.try_acquire()
    clock.now = T0 + timedelta(seconds=56)
    assert b.try_acquire()


def test_renew_retries_a_concurrent_write_instead_of_calling_it_lost(fake_api: FakeApiServer, kube: KubeClient,
                                                                     clock: Clock,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process updates an annotation between our read and our write: the 409 is not a
    loss; the renew re-reads (still ours), renews, and keeps the other writer's annotation."""
    a = lock(kube, clock, "a")
    assert a.try_acquire()
    original = kube.get_raw
    writes = [0]

    def read_then_someone_annotates(kind: str, name: str, namespace: str | None = None) -> dict | None:
        seen = original(kind, name, namespace)
        if writes[0] == 0:
            writes[0] += 1
            fresh = original(kind, name, namespace)
            fresh["metadata"]["annotations"] = {"someone/else": "x"}
            kube.replace_raw("Lease", fresh)
        return seen

    monkeypatch.setattr(kube, "get_raw", read_then_someone_annotates)
    clock.now = T0 + timedelta(seconds=10)
    assert a.renew() is True
    lease = fake_api.get("Lease", "balance", "kdesched")
    assert lease is not None and lease["spec"]["renewTime"] == "2026-11-01T12:00:10.000000Z"
    assert lease["metadata"]["annotations"] == {"someone/else": "x"}
    puts = fake_api.requests("PUT", "/apis/coordination.k8s.io/v1/namespaces/kdesched/leases/balance")
    # the annotation, then a's renew with the stale resourceVersion (409), then a's renew re-read
    assert [r.body["spec"].get("renewTime") for r in puts] == ["2026-11-01T12:00:00.000000Z",
                                                                "2026-11-01T12:00:10.000000Z",
                                                                "2026-11-01T12:00:10.000000Z"]
    assert puts[1].body["metadata"]["resourceVersion"] != puts[2].body["metadata"]["resourceVersion"]


def test_renew_is_false_when_the_race_was_lost_to_another_holder(fake_api: FakeApiServer, kube: KubeClient,
                                                                 clock: Clock,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    a = lock(kube, clock, "a")
    assert a.try_acquire()
    original = kube.get_raw
    taken = [False]

    def read_then_b_takes_it(kind: str, name: str, namespace: str | None = None) -> dict | None:
        seen = original(kind, name, namespace)
        if not taken[0]:
            taken[0] = True
            fresh = original(kind, name, namespace)
            fresh["spec"]["holderIdentity"] = "b"
            kube.replace_raw("Lease", fresh)
        return seen

    monkeypatch.setattr(kube, "get_raw", read_then_b_takes_it)
    assert a.renew() is False


def test_renew_raises_after_repeated_conflicts_and_then_recovers(fake_api: FakeApiServer, kube: KubeClient,
                                                                 clock: Clock) -> None:
    """Three 409s in a row are an error to retry (the caller's renew deadline decides), not a loss."""
    a = lock(kube, clock, "a")
    assert a.try_acquire()
    fake_api.script("PUT", "/apis/coordination.k8s.io/v1/namespaces/kdesched/leases/balance", [409, 409, 409])
    with pytest.raises(Conflict):
        a.renew()
    assert a.renew() is True and a.holder() == "a"

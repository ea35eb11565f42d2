"""Coalescing, locks, Lease guard and token buckets, without strategies (the ledger: tests/evictor/test_ledger.py).

The Lease guard's renew deadline is tested on a fake clock (the renew thread runs for real, with
short waits, but whether the deadline passed is decided by the clock the test moves); per-node
state pruning is tested with threads racing new requests against pruning.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from kdesched.admission.bucket import ClusterBucket
from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock
from kdesched.reactor.io.lease import LeaseGuard, LockBusy, RenewTiming, ShuttingDown, Tenure
from kdesched.reactor.run.coalescing import Coalescer, CoalescingCore, KeyedCoalescers, NodeLocks

from tests.fakeapi import FakeApiServer


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


# --- token buckets -------------------------------------------------------------------------------


def test_cluster_bucket_refills_at_rate_up_to_burst() -> None:
    b = ClusterBucket(per_minute=30, burst=2)  # 0.5 a second
    assert b.tokens(None, 100.0) == 2  # never drawn from: full
    state = b.drawn(None, 100.0, 2)
    assert state == (0.0, 100.0) and b.tokens(state, 100.0) == 0
    assert b.seconds_until(b.tokens(state, 100.0)) == pytest.approx(2.0)
    assert b.tokens(state, 102.0) == pytest.approx(1.0)
    assert b.tokens(state, 1000.0) == 2  # never more than burst
    assert b.drawn(state, 1000.0, 0) is None  # full again: nothing to record


def test_cluster_bucket_draw_may_go_below_zero_but_not_past_minus_burst() -> None:
    b = ClusterBucket(per_minute=60, burst=3)
    assert b.drawn(None, 0.0, 5) == (-2.0, 0.0)  # admitted elsewhere already: the bucket owes them
    assert b.drawn(None, 0.0, 50) == (-3.0, 0.0)


# --- coalescer -----------------------------------------------------------------------------------


def test_parallel_burst_becomes_one_or_two_runs_without_overlap() -> None:
    active, overlaps, batches = [0], [0], []
    guard = threading.Lock()

    def run(reqs: list[int]) -> list[int]:
        with guard:
            active[0] += 1
            overlaps[0] = max(overlaps[0], active[0])
        batches.append(list(reqs))
        with guard:
            active[0] -= 1
        return list(reqs)

    c: Coalescer[int, list[int]] = Coalescer(run, delay_seconds=0.05)
    barrier = threading.Barrier(20)
    results: dict[int, Any] = {}

    def deliver(i: int) -> None:
        barrier.wait()
        results[i] = c.submit(i)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= c.runs <= 2 and overlaps[0] == 1
    assert sorted(i for b in batches for i in b) == list(range(20))
    for i, served in results.items():
        assert i in served.result and served.coalesced == len(served.result)


def test_events_during_a_run_form_exactly_one_pending_batch() -> None:
    started, release = threading.Event(), threading.Event()
    batches: list[list[str]] = []

    def run(reqs: list[str]) -> int:
        batches.append(list(reqs))
        if len(batches) == 1:
            started.set()
            release.wait(5)
        return len(batches)

    c: Coalescer[str, int] = Coalescer(run, delay_seconds=0.01)
    first = threading.Thread(target=c.submit, args=("a",))
    first.start()
    assert started.wait(5)
    later = [threading.Thread(target=c.submit, args=(x,)) for x in "bcde"]
    for t in later:
        t.start()
    # all four are queued in the one pending batch behind the running one; wait until they joined
    for _ in range(500):
        with c._lock:
            if c.core.open is not None and len(c.core.open.requests) == 4:
                break
        threading.Event().wait(0.005)
    release.set()
    for t in [first, *later]:
        t.join()
    assert len(batches) == 2 and batches[0] == ["a"] and sorted(batches[1]) == list("bcde")
    assert c.runs == 2


def test_run_error_reaches_every_joined_request_and_stop_aborts() -> None:
    def boom(reqs: list[int]) -> int:
        raise LockBusy("held")

    c: Coalescer[int, int] = Coalescer(boom)
    with pytest.raises(LockBusy):
        c.submit(1)
    stop = threading.Event()
    stop.set()
    c2: Coalescer[int, int] = Coalescer(lambda r: 1, delay_seconds=10, stop=stop)
    with pytest.raises(ShuttingDown):
        c2.submit(1)


def test_lock_timeout_gives_lock_busy() -> None:
    lock = threading.Lock()
    lock.acquire()
    c: Coalescer[int, int] = Coalescer(lambda r: 1, run_lock=lock, lock_timeout=0.05)
    with pytest.raises(LockBusy):
        c.submit(1)


def test_node_locks_are_per_node() -> None:
    locks = NodeLocks()
    assert locks.get("a") is locks.get("a") and locks.get("a") is not locks.get("b")


def wait_for(cond: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        threading.Event().wait(0.01)
    raise AssertionError("condition not met in time")


# --- per-node state is dropped once idle -----------------------------------------------------------


def test_node_locks_keep_a_lock_only_while_it_is_used() -> None:
    locks = NodeLocks()
    held = locks.get("n1")
    with held:
        assert locks.get("n1") is held  # in use: every caller gets the same lock
        assert not locks.get("n1").acquire(blocking=False)
    for i in range(10_000):  # node churn: names come and go
        with locks.get(f"churn-{i}"):
            pass
    gc.collect()
    assert len(locks) == 1  # only n1, still referenced by `held`
    del held
    gc.collect()
    assert len(locks) == 0


def test_node_locks_never_give_two_holders_one_node_while_unused_locks_are_dropped() -> None:
    """Threads take and release the locks of a few nodes as fast as they can; unused locks vanish
    and reappear all the time. At no moment may two threads be inside the same node's lock."""
    locks = NodeLocks()
    inside = dict.fromkeys("abc", 0)
    worst = dict.fromkeys("abc", 0)
    guard = threading.Lock()
    barrier = threading.Barrier(8)

    def work(seed: int) -> None:
        barrier.wait()
        for i in range(2000):
            node = "abc"[(seed + i) % 3]
            with locks.get(node):
                with guard:
                    inside[node] += 1
                    worst[node] = max(worst[node], inside[node])
                if i % 7 == 0:
                    time.sleep(0)  # let another thread try the same node meanwhile
                with guard:
                    inside[node] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert worst == dict.fromkeys("abc", 1)
    gc.collect()
    assert len(locks) == 0


def test_keyed_coalescers_drop_idle_keys_but_not_a_busy_one() -> None:
    made: list[str] = []
    started, release = threading.Event(), threading.Event()

    def factory(key: str) -> Coalescer[int, str]:
        made.append(key)

        def run(reqs: list[int]) -> str:
            if key == "busy":
                started.set()
                release.wait(10)
            return key

        return Coalescer(run)

    keyed: KeyedCoalescers[int, str] = KeyedCoalescers(factory)
    busy = threading.Thread(target=lambda: keyed.get("busy").submit(0))
    busy.start()
    assert started.wait(10)
    for i in range(1000):  # node churn
        assert keyed.get(f"node-{i}").submit(i).result == f"node-{i}"
    assert len(keyed) <= KeyedCoalescers.PRUNE_FLOOR  # pruned as it grew: bounded, not 1001
    keyed.prune()
    assert len(keyed) == 1  # the busy one stays: its batch is running
    assert keyed.get("busy").idle() is False and made.count("busy") == 1
    release.set()
    busy.join(10)
    assert keyed.prune() == 1 and len(keyed) == 0
    keyed.get("busy")
    assert made.count("busy") == 2  # a fresh one, once the old one was idle and dropped


def test_an_idle_coalescer_with_spacing_left_is_kept_until_the_interval_passed() -> None:
    clock = FakeClock()
    keyed: KeyedCoalescers[int, int] = KeyedCoalescers(lambda key: Coalescer(lambda r: 1, min_interval_seconds=10,
                                                                              clock=clock))
    keyed.get("k").submit(1)
    assert keyed.prune() == 0  # its next batch must still wait for the interval: forgetting it would not
    clock.t += 10
    assert keyed.prune() == 1


def test_pruning_never_races_a_new_request_for_the_same_key() -> None:
    """Requests for a few keys from many threads, each key's runs serialised by its node lock as
    the runner wires them, while another thread prunes without pause: no two runs of one key ever
    overlap, every request is served, and nothing is left behind."""
    locks = NodeLocks()
    inside: dict[str, int] = {}
    worst: dict[str, int] = {}
    alive: dict[str, int] = {}
    most_alive: dict[str, int] = {}
    served = [0]
    guard = threading.Lock()

    def gone(key: str) -> None:
        with guard:
            alive[key] -= 1

    def factory(key: str) -> Coalescer[int, int]:
        with guard:
            alive[key] = alive.get(key, 0) + 1
            most_alive[key] = max(most_alive.get(key, 0), alive[key])

        def run(reqs: list[int]) -> int:
            with guard:
                inside[key] = inside.get(key, 0) + 1
                worst[key] = max(worst.get(key, 0), inside[key])
            time.sleep(0)
            with guard:
                inside[key] -= 1
                served[0] += len(reqs)
            return len(reqs)

        c: Coalescer[int, int] = Coalescer(run, run_lock=locks.get(key))
        weakref.finalize(c, gone, key)
        return c

    keyed: KeyedCoalescers[int, int] = KeyedCoalescers(factory)
    stop = threading.Event()

    def prune() -> None:
        while not stop.is_set():
            keyed.prune()

    def deliver(seed: int) -> None:
        for i in range(500):
            keyed.get("wxyz"[(seed * 7 + i) % 4]).submit(i)

    pruner = threading.Thread(target=prune)
    pruner.start()
    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    pruner.join(10)
    assert served[0] == 8 * 500
    assert worst == dict.fromkeys("wxyz", 1)
    assert most_alive == dict.fromkeys("wxyz", 1)  # never a second coalescer for a key while one is in use
    keyed.prune()
    gc.collect()
    assert len(keyed) == 0 and len(locks) == 0


# --- renew timing and stepping down ----------------------------------------------------------------


def test_renew_timing_follows_client_go() -> None:
    assert RenewTiming.for_lease(15) == RenewTiming(15, 10, 5, 2)  # LeaseDuration/RenewDeadline/RetryPeriod
    t = RenewTiming.for_lease(60)
    assert (t.deadline_seconds, t.interval_seconds, t.retry_seconds) == (40, 20, 2)
    t = RenewTiming.for_lease(60, 20)
    assert (t.deadline_seconds, t.interval_seconds, t.retry_seconds) == (20, 10, 2)
    t = RenewTiming.for_lease(5)
    assert t.interval_seconds < t.deadline_seconds < 5 and t.retry_seconds < t.deadline_seconds
    for bad in (0, -1, 60, 61):
        with pytest.raises(ValueError, match="renew deadline"):
            RenewTiming.for_lease(60, bad)


def test_tenure_ends_at_the_deadline_and_stays_ended() -> None:
    clock = FakeClock()
    tenure = Tenure(40, clock=clock, what="Lease ns/x")
    clock.t += 30
    tenure.renewed(clock.t - 1)
    clock.t += 38
    assert tenure.check() is None  # 68 s since the start, 39 s since the renew began
    clock.t += 2
    reason = tenure.check()
    assert reason is not None and "Lease ns/x not renewed for 41.0s (renew deadline 40s)" in reason
    tenure.renewed(clock.t)  # too late: whoever relied on it has stopped already
    assert tenure.check() == reason


def guard_on(kube: KubeClient, clock: FakeClock, *, name: str = "kd", **kw: Any) -> LeaseGuard:
    """A guard whose deadline is judged by ``clock``; its renew thread wakes every 20 ms."""
    timing = RenewTiming(60, 40, 0.02, 0.02)
    return LeaseGuard(kube, "ops", name, "me", duration_seconds=60, wait_seconds=0, timing=timing, clock=clock, **kw)


def lease_puts(fake_api: FakeApiServer, name: str = "kd") -> list[Any]:
    return fake_api.requests("PUT", f"/apis/coordination.k8s.io/v1/namespaces/ops/leases/{name}")


def test_guard_is_held_while_renewing_even_through_409s(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A concurrent write (409 on our renew) is not a loss: re-read, renew, still held."""
    clock = FakeClock()
    with guard_on(kube, clock) as guard:
        assert guard.still_held() is None and not guard.lost
        clock.t += 30
        before = len(lease_puts(fake_api))
        fake_api.script("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/kd", [409, 409, 409, 409, 409])
        wait_for(lambda: len(lease_puts(fake_api)) >= before + 8)  # the 409s, then renews that went through
        clock.t += 39  # 69 s since the Lease was taken, 39 s since the last successful renew began
        assert guard.still_held() is None and not guard.lost
    assert not guard.lost and guard.still_held() == "Lease ops/kd released"
    assert not (fake_api.get("Lease", "kd", "ops") or {})["spec"].get("holderIdentity")


def test_guard_steps_down_when_no_renew_succeeds_within_the_deadline(fake_api: FakeApiServer,
                                                                     kube: KubeClient) -> None:
    clock = FakeClock()
    with guard_on(kube, clock) as guard:
        fake_api.script("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/kd", [500] * 10_000)
        before = len(lease_puts(fake_api))
        wait_for(lambda: len(lease_puts(fake_api)) >= before + 3)  # failing, retried
        assert guard.still_held() is None  # errors alone are not a step-down: the deadline is
        clock.t += 41
        reason = guard.still_held()
        assert reason is not None and "renew deadline 40s" in reason and guard.lost
        renewer = guard._renewer
        assert renewer is not None
        wait_for(lambda: not renewer.is_alive())  # stopped renewing
        tried = len(lease_puts(fake_api))
        threading.Event().wait(0.1)
        assert len(lease_puts(fake_api)) == tried
        fake_api.scripts.pop(("PUT", "/apis/coordination.k8s.io/v1/namespaces/ops/leases/kd"), None)
    assert not guard.lost  # exited: released (the Lease still named us)


def test_guard_steps_down_at_once_when_another_holder_has_the_lease(fake_api: FakeApiServer,
                                                                    kube: KubeClient) -> None:
    clock = FakeClock()
    with guard_on(kube, clock) as guard:
        lease = fake_api.get("Lease", "kd", "ops")
        assert lease is not None
        lease["spec"]["holderIdentity"] = "usurper"
        fake_api.update(lease)
        reason = wait_for(guard.still_held)
        assert "no longer ours" in reason and guard.lost
    assert (fake_api.get("Lease", "kd", "ops") or {})["spec"]["holderIdentity"] == "usurper"  # not released


def test_guard_rejects_a_deadline_not_shorter_than_the_duration(kube: KubeClient) -> None:
    with pytest.raises(ValueError, match="shorter than the Lease duration"):
        LeaseGuard(kube, "ops", "kd", "me", duration_seconds=60, wait_seconds=0, renew_deadline_seconds=60)


# --- Lease ---------------------------------------------------------------------------------------


def test_lease_held_by_another_holder_is_busy(fake_api: FakeApiServer, kube: KubeClient) -> None:
    other = LeaseLock(kube, "kdesched", "kdesched", "someone-else", 60)
    assert other.try_acquire()
    guard = LeaseGuard(kube, "kdesched", "kdesched", "me", duration_seconds=60, wait_seconds=0.05, poll_seconds=0.01)
    with pytest.raises(LockBusy) as err, guard:
        pass
    assert "someone-else" in str(err.value)


# --- leading edge, on a fake clock ---------------------------------------------------------------


def simulate(core: CoalescingCore[int, None], arrivals: list[float], run_seconds: float) -> list[tuple[float, list[int]]]:
    """Drive the real timing rule through a discrete-event simulation: requests arrive at
    ``arrivals`` (fake seconds), each run lasts ``run_seconds``. Returns (start time, requests) per run."""
    runs: list[tuple[float, list[int]]] = []
    pending = sorted(enumerate(arrivals), key=lambda x: x[1])
    running_until: float | None = None
    now = 0.0
    while pending or core.open is not None or core.running is not None:
        candidates = []
        if pending:
            candidates.append(pending[0][1])
        if core.running is not None and running_until is not None:
            candidates.append(running_until)
        elif core.open is not None:
            candidates.append(core.start_time(core.open))
        now = max(now, min(candidates))
        if core.running is not None and running_until is not None and running_until <= now:
            core.end(core.running)
            running_until = None
            continue
        if pending and pending[0][1] <= now:
            i, _ = pending.pop(0)
            core.offer(i, now)
            continue
        if core.open is not None and core.running is None and core.start_time(core.open) <= now:
            batch = core.open
            core.begin(batch, now)
            runs.append((now, list(batch.requests)))
            running_until = now + run_seconds
    return runs


def test_a_lone_event_runs_at_once_node_scoped_and_after_the_gather_delay_balance() -> None:
    node = simulate(CoalescingCore(0.0, 0.0), [5.0], run_seconds=0.2)
    assert node == [(5.0, [0])]
    balance = simulate(CoalescingCore(0.5, 10.0), [5.0], run_seconds=2.0)
    assert balance == [(5.5, [0])]


def test_a_burst_of_20_nodes_over_10s_gives_at_most_two_balance_runs() -> None:
    arrivals = [i * 10.0 / 19 for i in range(20)]  # 20 nodes, first at 0 s, last at 10 s
    for run_seconds in (0.1, 1.0, 3.0, 12.0):
        runs = simulate(CoalescingCore(0.5, 10.0), arrivals, run_seconds)
        assert len(runs) <= 2, (run_seconds, runs)
        assert runs[0][0] == 0.5  # leading edge: the first run does not wait for the burst to end
        assert sorted(i for _, reqs in runs for i in reqs) == list(range(20))  # every event served once
        # the follow-up decides on state read after the last event of the burst
        assert runs[-1][0] >= arrivals[-1]


def test_events_during_a_run_coalesce_into_one_follow_up_started_after_the_run() -> None:
    # node-scoped (no spacing): a, then b c d while a runs -> exactly one follow-up right after a
    runs = simulate(CoalescingCore(0.0, 0.0), [0.0, 0.1, 0.2, 0.3], run_seconds=1.0)
    assert runs == [(0.0, [0]), (1.0, [1, 2, 3])]
    # a later, separate event after things went quiet runs at once again (leading edge)
    runs = simulate(CoalescingCore(0.5, 10.0), [0.0, 30.0], run_seconds=1.0)
    assert runs == [(0.5, [0]), (30.5, [1])]


def test_a_follow_up_waits_for_the_min_interval_measured_from_the_previous_start() -> None:
    core: CoalescingCore[int, None] = CoalescingCore(0.5, 10.0)
    first, _ = core.offer(1, now=0.0)
    assert core.start_time(first) == 0.5
    core.begin(first, now=0.5)
    follow, opened = core.offer(2, now=1.0)
    assert opened and follow is not first
    joined, opened_again = core.offer(3, now=2.0)
    assert joined is follow and not opened_again  # one follow-up batch, however many events
    assert core.start_time(follow) == 10.5
    core.end(first)
    core.abandon(follow)
    assert core.open is None and core.runs == 1


def test_offer_without_waiting_frees_a_joining_caller_and_the_run_still_serves_it() -> None:
    started, release = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def run(reqs: list[int]) -> int:
        batches.append(list(reqs))
        if len(batches) == 1:
            started.set()
            release.wait(5)
        return len(batches)

    c: Coalescer[int, int] = Coalescer(run)
    leader = threading.Thread(target=c.submit, args=(0,))
    leader.start()
    assert started.wait(5)
    follow = threading.Thread(target=c.offer, args=(1,), kwargs={"wait": False})  # opens the follow-up: leads it
    follow.start()
    for _ in range(500):
        with c._lock:
            if c.core.open is not None:
                break
        threading.Event().wait(0.005)
    # joiners of the queued follow-up return at once, without waiting for either run
    assert [c.offer(i, wait=False) for i in (2, 3, 4)] == [None, None, None]
    release.set()
    leader.join(5)
    follow.join(5)
    assert batches == [[0], [1, 2, 3, 4]] and c.runs == 2

"""The client-side rate limit (a token bucket, every request counted) and the client limits' settings.

Covers: the bucket's schedule on a fake clock (a burst at once, then 1/qps apart, refilled up to
the burst only), first come first served across threads (the waits handed out are exactly the
schedule: no token given twice, none lost), every request type taking a token, the urllib3 pool
sized for the concurrency, and the limits from flags, environment and defaults with errors naming
the variable.
"""

from __future__ import annotations

import threading
import time

import pytest
from kdesched.kube.client import KubeClient, TokenBucket
from kdesched.kube.config import (
    DEFAULT_BURST,
    DEFAULT_MAX_CONCURRENT_EVICTIONS,
    DEFAULT_QPS,
    ClientLimits,
    limits_from_env,
)
from kdesched.kube.deadline import DEADLINE_CONNECT_SECONDS, Deadline, DeadlinePassed
from kdesched.kube.errors import ConfigError, Unavailable
from kdesched.kube.lease import LeaseLock
from kdesched.kube.transport import EVENTS, LEASES, lane

from tests.builders import pod_obj
from tests.fakeapi import FakeApiServer, blackhole_first_connect


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_one_token_every_1_over_qps() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=4, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(6)] == [0.0, 0.0, 0.0, 0.25, 0.5, 0.75]
    clock.now += 0.75  # the debt is paid: the bucket is empty, not negative
    assert bucket.reserve() == 0.25
    clock.now += 100  # a long pause refills up to the burst, no further
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, 0.25]


def test_acquire_sleeps_for_its_turn() -> None:
    clock = Clock()
    slept: list[float] = []
    bucket = TokenBucket(qps=10, burst=1, clock=clock, sleep=slept.append)
    for _ in range(3):
        bucket.acquire()
    assert slept == [0.1, 0.2]
    assert bucket.waited_seconds == pytest.approx(0.3)


def test_concurrent_callers_get_exactly_the_schedule() -> None:
    bucket = TokenBucket(qps=50, burst=5, clock=Clock())  # frozen clock: only reservations count
    waits: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(40):
            w = bucket.reserve()
            with lock:
                waits.append(w)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = [max(0, i - 4) / 50 for i in range(320)]
    assert sorted(waits) == pytest.approx(expected)


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_a_bucket_needs_positive_settings(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        TokenBucket(qps, burst)


def test_every_request_takes_a_token(fake_api: FakeApiServer) -> None:
    fake_api.add(pod_obj("a", node="n1"), pod_obj("b", node="n1"))
    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=1, burst=1000, max_concurrent_evictions=2))
    clock = Clock()
    assert client.rate_limiter is not None
    client.rate_limiter = bucket = TokenBucket(1, 1000, clock=clock)
    client.lane_limiters[EVENTS] = events = TokenBucket(1, 1000, clock=clock)
    try:
        client.list_raw("Pod", page_size=1)  # two pages: two requests
        client.get_raw("Pod", "a", "default")
        client.get_raw("Pod", "missing", "default")  # a 404 counts too
        client.evict_pod("default", "a", uid=None, grace_period_seconds=None, annotations={})
        client.create_event(namespace="default", name="a", reason="R", note="n")
        assert client.stats.requests == 6
        assert bucket.reserve() == 0.0 and 1000 - 6 == pytest.approx(bucket._tokens)
        assert 1000 - 1 == pytest.approx(events._tokens)  # the Event took its token from its own lane
    finally:
        client.close()


def test_events_and_leases_never_wait_behind_the_main_lane(fake_api: FakeApiServer) -> None:
    """kube-scheduler's way: Events and leader election have buckets of their own. With the main
    bucket spent, an Event and a Lease renew go at once; a main-lane request waits."""
    fake_api.add(pod_obj("a", node="n1"))
    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=1, burst=2, max_concurrent_evictions=2))
    slept: list[float] = []
    client.rate_limiter = TokenBucket(1, 2, clock=Clock(), sleep=slept.append)
    client.lane_limiters = {EVENTS: TokenBucket(1, 2, clock=Clock(), sleep=slept.append),
                            LEASES: TokenBucket(1, 4, clock=Clock(), sleep=slept.append)}
    try:
        client.get_raw("Pod", "a", "default")
        client.get_raw("Pod", "a", "default")  # the main lane's burst is spent
        client.post_event(namespace="default", name="a", reason="R", note="n")
        lock = LeaseLock(client, "default", "leader", "me", 15)
        assert lock.try_acquire() and lock.renew()  # get + create, get + update: the leases lane's 4
        assert slept == []
        client.get_raw("Pod", "a", "default")
        assert slept == [1.0]  # the main lane's third request waits for its refill
    finally:
        client.close()


def test_an_unknown_lane_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown rate-limit lane"), lane("bulk"):
        pass


def test_every_request_and_every_wait_is_on_metrics(fake_api: FakeApiServer) -> None:
    """kdesched_api_requests_total{method,code} and the rate limiter's waits, as /metrics serves them
    (the process-wide counts of kdesched.kube.traffic, published by kdesched.evictor.metrics)."""
    from kdesched.evictor.metrics import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    fake_api.add(pod_obj("a", node="n1"))
    fake_api.script("GET", "/api/v1/namespaces/default/pods/a", [429])
    before = {code: sample("kdesched_api_requests_total", method="GET", code=code) for code in ("200", "404", "429")}
    waits, waited = sample("kdesched_api_rate_limiter_waits_total"), sample("kdesched_api_rate_limiter_wait_seconds_total")
    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=1, burst=1000, max_concurrent_evictions=2))
    slept: list[float] = []
    client.rate_limiter = TokenBucket(10, 2, clock=Clock(), sleep=slept.append)  # the third token waits 0.1 s
    try:
        client.get_raw("Pod", "a", "default")  # 429 once (retried): 429 then 200
        client.get_raw("Pod", "missing", "default")
    finally:
        client.close()
    after = {code: sample("kdesched_api_requests_total", method="GET", code=code) for code in ("200", "404", "429")}
    assert {code: after[code] - before[code] for code in after} == {"200": 1, "404": 1, "429": 1}
    assert sample("kdesched_api_rate_limiter_waits_total") - waits == len(slept) == 1
    assert sample("kdesched_api_rate_limiter_wait_seconds_total") - waited == pytest.approx(sum(slept))


def test_the_connection_pool_is_sized_for_the_concurrency(fake_api: FakeApiServer) -> None:
    limits = ClientLimits(max_concurrent_evictions=40)
    client = KubeClient.for_host(fake_api.url, limits=limits)
    try:
        assert client.api_client.configuration.connection_pool_maxsize >= 2 * 40
        assert client.max_concurrent_evictions == 40
    finally:
        client.close()


def test_limits_flags_win_over_environment_over_defaults() -> None:
    assert limits_from_env({}) == ClientLimits(DEFAULT_QPS, DEFAULT_BURST, DEFAULT_MAX_CONCURRENT_EVICTIONS)
    env = {"KDESCHED_KUBE_API_QPS": "200", "KDESCHED_KUBE_API_BURST": "300", "KDESCHED_MAX_CONCURRENT_EVICTIONS": "4"}
    assert limits_from_env(env) == ClientLimits(200.0, 300, 4)
    assert limits_from_env(env, qps=7.5, burst=9, max_concurrent_evictions=2) == ClientLimits(7.5, 9, 2)


@pytest.mark.parametrize(("var", "value"), [
    ("KDESCHED_KUBE_API_QPS", "fast"), ("KDESCHED_KUBE_API_QPS", "0"), ("KDESCHED_KUBE_API_QPS", "inf"),
    ("KDESCHED_KUBE_API_BURST", "0"), ("KDESCHED_KUBE_API_BURST", "1.5"),
    ("KDESCHED_MAX_CONCURRENT_EVICTIONS", "0"), ("KDESCHED_MAX_CONCURRENT_EVICTIONS", "1000"),
])
def test_a_bad_environment_value_names_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^\${var}: must be"):
        limits_from_env({var: value})


def test_limits_refuse_nonsense_when_built_directly() -> None:
    with pytest.raises(ValueError, match="qps"):
        ClientLimits(qps=0)
    with pytest.raises(ValueError, match="max_concurrent_evictions"):
        ClientLimits(max_concurrent_evictions=0)


def test_a_bounded_write_is_timed_after_its_wait_for_a_token(fake_api: FakeApiServer) -> None:
    """A write bounded by a deadline (an eviction's admission) must not be carried out after it:
    its ``?timeout=`` is what is left once the bucket let it go, and it is not sent at all when
    less than an attempt's minimum is left then. A relative ``timeout`` caps it too."""
    fake_api.add(pod_obj("a", node="n1"), pod_obj("b", node="n1"))
    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=1, burst=1, max_concurrent_evictions=1))
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.now += seconds

    client.rate_limiter = bucket = TokenBucket(1, 1, clock=clock, sleep=sleep)
    try:
        for _ in range(3):
            bucket.reserve()  # three requests ahead: this one waits 3 s
        client.evict_pod("default", "a", uid=None, grace_period_seconds=None, annotations={},
                         deadline=Deadline(clock.now + 10.5, clock))
        client.evict_pod("default", "b", uid=None, grace_period_seconds=None, annotations={}, timeout=5,
                         deadline=Deadline(clock.now + 30, clock))  # waits 1 s more
        sent = [r.query["timeout"] for r in fake_api.requests("POST") if r.path.endswith("/eviction")]
        # a: 10.5 - 3 waited - 3 for the connect (the API server counts from receiving it), floored;
        # b: 29 left, capped at its 5
        assert sent == ["4s", "5s"]
        bucket.reserve()
        with pytest.raises(DeadlinePassed):
            client.evict_pod("default", "b", uid=None, grace_period_seconds=None, annotations={},
                             deadline=Deadline(clock.now + 1.5, clock))  # its wait leaves under 1 s
        assert len([r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]) == 2  # not sent
    finally:
        client.close()


def test_a_bounded_write_is_never_resent_by_the_transport(
        fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib3 retries a failed connect with the same request, whose ``?timeout=`` was fixed before the
    first attempt: after a first connect that hung to its timeout (a SYN to a dead endpoint behind the
    Service), the eviction went out seconds late with its whole ``?timeout=`` and could land after the
    admission's deadline. A write bounded by a deadline gets no transport retry: the failed connect is
    the executor's to retry, which times the next attempt from what is left then. Its connect is
    bounded too (at most DEADLINE_CONNECT_SECONDS in all, TCP then TLS: half each), so a dead endpoint
    leaves the retry some time."""
    fake_api.add(pod_obj("a", node="n1"))
    client = KubeClient.for_host(fake_api.url)
    connects = blackhole_first_connect(fake_api, monkeypatch)
    try:
        with pytest.raises(Unavailable) as failed:
            client.evict_pod("default", "a", uid=None, grace_period_seconds=None, annotations={},
                             deadline=Deadline(time.monotonic() + 10.0))
        assert not failed.value.maybe_sent  # nothing was sent: the executor may retry it
        assert [c.timeout for c in connects] == [DEADLINE_CONNECT_SECONDS / 2]  # one connect, bounded below the 10 s left
        assert not [r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]
        client.evict_pod("default", "a", uid=None, grace_period_seconds=None, annotations={},
                         deadline=Deadline(time.monotonic() + 10.0))  # the executor's next attempt
        (sent,) = [r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]
        assert sent.query["timeout"] == "6s"  # timed when it went out (10 s less a moment, less the connect's 3)
    finally:
        client.close()

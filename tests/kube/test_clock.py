"""ServerClock (kdesched.kube.clock): the API server's clock from the Date of its answers.

Simulated: a server whose clock is ``mono + truth`` (``truth`` a large offset, as it is between
epoch seconds and a monotonic clock, faked or not), answering after a round trip at a random
fraction of a second, its Date truncated to the second as RFC 7231 has it."""

from __future__ import annotations

import email.utils
import logging
import math
import random
import threading
import time

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.clock import (
    DRIFT,
    Bounds,
    Sample,
    ServerClock,
    answered_by_api_server,
    date_header,
    parse_http_date,
)

from tests.fakeapi import FakeApiServer


class Mono:
    """A settable monotonic clock."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Server:
    """A server clock ``truth(mono)`` and a client exchanging requests with it over ``rtt``."""

    def __init__(self, mono: Mono, offset: float, rate: float = 1.0) -> None:
        self.mono, self.offset, self.rate = mono, offset, rate

    def at(self, mono: float) -> float:
        return self.offset + mono * self.rate

    def exchange(self, clock: ServerClock, rtt: float, answer_at: float = 0.5) -> None:
        """One request: sent now, answered ``answer_at`` of the way through ``rtt``, received at its end."""
        sent = self.mono.t
        date = math.floor(self.at(sent + rtt * answer_at))
        self.mono.t += rtt
        assert clock.observe({"Date": email.utils.formatdate(date, usegmt=True)}, sent, self.mono.t)


def converge(mono: Mono, server: Server, clock: ServerClock, seed: int, n: int = 300) -> None:
    """``n`` answers at random fractions of a second (5 ms round trips)."""
    rng = random.Random(seed)
    for _ in range(n):
        server.exchange(clock, rtt=0.005, answer_at=rng.random())
        mono.t += rng.uniform(0.05, 2.0)


def assert_close(mono: Mono, server: Server, clock: ServerClock, within: float = 0.06) -> None:
    """The estimate is within its own bounds of the truth, and those are narrow."""
    state = clock.state()
    assert state.uncertainty_seconds < within, state
    assert abs(clock.now() - server.at(mono.t)) <= state.uncertainty_seconds / 2 + 1e-6


def make(offset: float = 1_795_000_000.123, wall_skew: float = 0.0) -> tuple[Mono, Server, ServerClock]:
    mono = Mono()
    server = Server(mono, offset)
    # the local wall clock: the server's plus a skew (it never enters now() once a sample is in)
    clock = ServerClock(monotonic=mono, wall=lambda: server.at(mono.t) + wall_skew)
    return mono, server, clock


def test_a_sample_bounds_the_offset_by_its_round_trip_and_the_date_resolution() -> None:
    s = Sample(date=1000.0, sent=10.0, received=10.2)
    assert s.lower == pytest.approx(989.8) and s.upper == pytest.approx(991.0)
    b = Bounds.of(s)
    assert b.at(10.2) == pytest.approx((989.8, 991.0))
    lo, hi = b.at(10.2 + 1000)  # widened by DRIFT per second of age
    assert lo == pytest.approx(989.8 - DRIFT * 1000) and hi == pytest.approx(991.0 + DRIFT * 1000)


def test_one_answer_gives_the_server_time_within_a_second() -> None:
    mono, server, clock = make()
    assert not clock.synced
    server.exchange(clock, rtt=0.01)
    assert clock.synced
    assert abs(clock.now() - server.at(mono.t)) <= 0.51
    assert clock.state().uncertainty_seconds == pytest.approx(1.01, abs=1e-6)


def test_the_estimate_converges_to_about_the_round_trip() -> None:
    mono, server, clock = make()
    converge(mono, server, clock, seed=7)  # requests at every fraction of a second
    assert_close(mono, server, clock)
    state = clock.state()
    assert state.restarts == 0 and state.samples == 300


@pytest.mark.parametrize("step", [3600.0, -3600.0, 2.5, -1.5])
def test_a_server_clock_step_restarts_the_estimate_from_the_newest_answer(step: float) -> None:
    mono, server, clock = make()
    converge(mono, server, clock, seed=3)
    server.offset += step  # the server's clock was stepped (or the answer came from another API server)
    server.exchange(clock, rtt=0.005)
    assert clock.state().restarts == 1 and clock.state().samples == 1
    assert abs(clock.now() - server.at(mono.t)) <= 0.51
    converge(mono, server, clock, seed=4)
    assert_close(mono, server, clock)
    assert clock.state().restarts == 1


def test_a_local_wall_clock_jump_changes_nothing() -> None:
    mono, server, clock = make()
    jump = [0.0]
    clock._wall = lambda: server.at(mono.t) + jump[0]
    converge(mono, server, clock, seed=5)
    before = clock.now() - server.at(mono.t)
    assert abs(clock.offset_seconds()) < 0.03
    jump[0] = 3600.0  # someone ran `date -s` (or NTP stepped the clock) on this machine
    mono.t += 1.0
    server.exchange(clock, rtt=0.005)
    assert clock.now() - server.at(mono.t) == pytest.approx(before, abs=0.001)
    assert clock.offset_seconds() == pytest.approx(3600.0, abs=0.03)
    assert clock.state().restarts == 0


def test_a_faked_monotonic_clock_of_any_base_gives_the_same_server_time() -> None:
    """faketime fakes CLOCK_MONOTONIC too unless told not to: its base is then the (shifted) epoch.
    Only differences of the monotonic clock enter the estimate."""
    results = []
    for base in (1000.0, 1_795_000_180.0, 1_794_999_820.0):
        mono = Mono(base)
        server = Server(mono, 1_795_000_000.123 - base)  # the same server time at the start
        clock = ServerClock(monotonic=mono, wall=lambda: 0.0)
        converge(mono, server, clock, seed=11)
        assert_close(mono, server, clock)
        results.append(clock.now() - server.at(mono.t))
    assert max(results) - min(results) < 1e-4  # the same estimate whatever the base


def test_a_server_clock_that_runs_at_another_rate_is_followed_without_restarts() -> None:
    mono, server, clock = make()
    server.rate = 1 + 50e-6  # 50 ppm: the server's oscillator (or ours) is off by that much
    rng = random.Random(9)
    worst = 0.0
    for i in range(2000):  # ~5.5 hours, an answer every 5 to 15 s
        server.exchange(clock, rtt=0.005, answer_at=rng.random())
        mono.t += rng.uniform(5.0, 15.0)
        if i > 100:
            worst = max(worst, abs(clock.now() - server.at(mono.t)))
    assert clock.state().restarts == 0
    assert worst < 0.1


def test_now_does_not_go_backwards_while_the_bounds_narrow() -> None:
    mono, server, clock = make(offset=1_795_000_000.95)
    rng = random.Random(13)
    last = -math.inf
    for _ in range(200):
        server.exchange(clock, rtt=0.003, answer_at=rng.random())
        now = clock.now()
        assert now >= last
        last = now
        mono.t += rng.uniform(0.01, 0.3)


def test_before_any_answer_the_local_wall_clock_is_used_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    mono = Mono()
    clock = ServerClock(monotonic=mono, wall=lambda: 42.0)
    with caplog.at_level(logging.DEBUG, logger="kdesched.kube.clock"):
        assert clock.now() == 42.0 and clock.now() == 42.0
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert not clock.synced and clock.offset_seconds() == 0.0
    assert clock.state().uncertainty_seconds == math.inf


@pytest.mark.parametrize(("skew", "warned"), [(180.0, "ahead of"), (-180.0, "behind"), (3.0, None)])
def test_a_local_clock_far_off_the_servers_is_warned_about_once(caplog: pytest.LogCaptureFixture, skew: float,
                                                                  warned: str | None) -> None:
    mono, server, clock = make(wall_skew=skew)
    with caplog.at_level(logging.WARNING, logger="kdesched.kube.clock"):
        for _ in range(10):
            server.exchange(clock, rtt=0.005)
            mono.t += 0.3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if warned is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warned in warnings[0], warnings
        said = float(warnings[0].split("clock is ")[1].split("s ")[0])
        assert abs(said - 180.0) <= 0.51
    assert clock.offset_seconds() == pytest.approx(skew, abs=0.51)


def test_answers_without_a_usable_date_are_ignored() -> None:
    clock = ServerClock(monotonic=Mono(), wall=lambda: 7.0)
    assert not clock.observe(None, 1.0, 1.1)
    assert not clock.observe({}, 1.0, 1.1)
    assert not clock.observe({"Date": "yesterday"}, 1.0, 1.1)
    assert not clock.observe({"Date": ""}, 1.0, 1.1)
    assert not clock.synced and clock.now() == 7.0


def test_http_dates_and_headers() -> None:
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777.0
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == 784111777.0  # RFC 850 (obsolete)
    assert parse_http_date("Sun Nov  6 08:49:37 1994") is None  # asctime carries no zone: not trusted
    assert parse_http_date("not a date") is None and parse_http_date(None) is None
    assert date_header({"date": "x"}) == "x" and date_header({"Date": "y"}) == "y"
    assert date_header({"DATE": "z"}) == "z" and date_header(None) is None and date_header({"date": 5}) is None


def test_concurrent_answers_and_readers() -> None:
    """Many threads feeding answers and reading the time at once: no error, every reader's times in
    order, and the estimate holds the truth. The monotonic clock is the real one here."""
    import time

    truth = 2_000_000_000.0 - time.monotonic()  # far from this machine's clock: the fallback is not mistaken
    clock = ServerClock(wall=time.time)
    errors: list[BaseException] = []
    stop = threading.Event()

    def feeder(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                sent = time.monotonic()
                date = math.floor(truth + sent + rng.uniform(0, 0.001))
                clock.observe({"Date": email.utils.formatdate(date, usegmt=True)}, sent, time.monotonic() + 0.001)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reader() -> None:
        last = -math.inf
        try:
            for _ in range(3000):
                synced = clock.synced
                now = clock.now()
                if synced:
                    assert now >= last
                    last = now
                    assert abs(now - (truth + time.monotonic())) < 1.1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    feeders = [threading.Thread(target=feeder, args=(i,)) for i in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(4)]
    for t in feeders + readers:
        t.start()
    for t in readers:
        t.join(30)
    stop.set()
    for t in feeders:
        t.join(30)
    assert not errors, errors[:3]
    state = clock.state()
    assert state.samples > 10 and state.restarts == 0
    # within the bounds (narrow only as far as the fractions of a second the test lasted cover)
    assert abs(clock.now() - (truth + time.monotonic())) <= state.uncertainty_seconds + 0.01


# -- whose answers are samples -------------------------------------------------------------------
@pytest.mark.parametrize(("path", "sample"), [
    ("/api/v1/nodes", True),
    ("/api/v1/namespaces/default/pods/web-1/eviction", True),
    ("/api", True),
    ("/apis/apps/v1/namespaces/default/deployments/web", True),
    ("/apis/policy/v1/poddisruptionbudgets", True),
    ("/apis/coordination.k8s.io/v1/namespaces/kdesched/leases/kdesched", True),
    ("/apis/events.k8s.io/v1/namespaces/default/events", True),
    ("/apis/scheduling.k8s.io/v1/priorityclasses", True),
    # aggregated APIs: the backend's Date, passed through by kube-apiserver's aggregator
    ("/apis/metrics.k8s.io/v1beta1/nodes", False),
    ("/apis/metrics.k8s.io/v1beta1/pods", False),
    ("/apis/custom.metrics.k8s.io/v1beta2/pods/x", False),
    ("/apis/external.metrics.k8s.io/v1beta1/namespaces/d/q", False),
    ("/apis/example.com/v1/widgets", False),
    ("/apis", False),
    ("/apiservices", False),
    ("/version", False),
    ("", False),
])
def test_only_the_kube_apiservers_own_answers_are_clock_samples(path: str, sample: bool) -> None:
    """The "one clock" is kube-apiserver's. Its aggregator passes an aggregated API's answer (and its
    Date) through from a backend on some node, whose clock may be minutes off: such an answer would
    restart the estimate on that node's clock. Only the core group and the built-in groups kdesched
    uses are taken (docs/reactor.md "One clock")."""
    assert answered_by_api_server(path) is sample


def test_every_kind_kdesched_reads_or_writes_feeds_the_clock() -> None:
    """A kind added to the client must be a built-in group's (or the rule decided again): the
    clock is fed by the reads every run starts with."""
    from kdesched.kube.resources import RESOURCES
    for res in RESOURCES.values():
        assert answered_by_api_server(res.path(res.scoped("ns"))), res


def test_an_aggregated_apis_answer_does_not_move_the_clock(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A metrics-server 3 minutes ahead (the fake server's Date moved for the metrics reads only):
    the estimate stays the API server's, no restart, no false warning. The API server's own
    answers are still taken: a step of its clock restarts the estimate as before."""
    kube.list_raw("Node")
    before = kube.clock.now() - time.time()
    fake_api.clock_offset = 180.0
    assert kube.get_path("/apis/metrics.k8s.io/v1beta1/nodes") is not None
    assert abs(kube.clock.now() - time.time() - before) < 1.5
    assert kube.clock.state().restarts == 0
    kube.list_raw("Node")  # the API server's clock itself stepped: taken
    assert kube.clock.state().restarts == 1
    assert kube.clock.now() - time.time() == pytest.approx(180.0, abs=1.5)


def test_a_slow_first_answer_is_narrowed_by_the_next_quick_one() -> None:
    """A first answer whose body took 30 s (a large LIST: its Date is of the answer's start) leaves
    the estimate as wide as that round trip; the next quick answer (the ledger's GET) narrows it to
    within a second, whatever the local wall clock says (10 minutes ahead here)."""
    truth = 1_790_000_000.25  # server epoch seconds minus local monotonic
    mono = Mono(100.0)
    clock = ServerClock(monotonic=mono, wall=lambda: mono.t + truth + 600)

    def date(server_time: float) -> dict[str, str]:
        return {"Date": email.utils.formatdate(int(server_time), usegmt=True)}

    clock.observe(date(100.0 + truth), 100.0, 130.0)
    mono.t = 130.0
    assert abs(clock.now() - (130.0 + truth)) <= 16  # within half the 30 s round trip (+ the second)
    clock.observe(date(130.3 + truth), 130.3, 130.305)
    mono.t = 130.4
    assert abs(clock.now() - (130.4 + truth)) <= 1.0
    assert clock.state().restarts == 0

"""An eviction being retried when the process is asked to stop (SIGTERM in serve and the functions,
Ctrl-C in ``kdesched run``): the stop reaches the executor as ``keep_going`` (a stop Event behind
it: kdesched.reactor.run.execution, kdesched.cli.interrupts).

Covers: no new attempt is sent once the stop is requested, during a backoff or a long Retry-After
(the wait is cut short, not slept out); an attempt already on the wire is not interrupted and its
answer stands; an eviction whose earlier answer was lost is read back and, still there before its
deadline, stays ``failed``/unconfirmed (the ledger keeps counting it) with the stop in its message;
one that nothing could have carried out is ``abandoned``/stopped, saying it was cut short.
"""

from __future__ import annotations

import threading

import pytest
from kdesched.evictor.execute import STOP_POLL_SECONDS, UNCONFIRMED, KeepGoing, LiveExecutor
from kdesched.kube.client import KubeClient

from tests.evictor.test_execute import FAST, Clock, Sleeps, planned
from tests.fakeapi import ACT_THEN_DROP, DROP, FakeApiServer, Fault

EVICTION = "/api/v1/namespaces/default/pods/p/eviction"


class StopOnSleep(Sleeps):
    """An injected sleep that records the waits and requests the stop on the ``on``-th call, as a
    SIGTERM arriving while an eviction waits for its next attempt."""

    def __init__(self, stop: threading.Event, on: int = 1) -> None:
        super().__init__()
        self.stop = stop
        self.on = on
        self.lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self.lock:  # (from any eviction's thread)
            super().__call__(seconds)
            if len(self) >= self.on:
                self.stop.set()


def keep_going_for(stop: threading.Event) -> KeepGoing:
    """What serve's runs pass (kdesched.reactor.run.execution): the stop Event behind ``keep_going``."""
    return lambda: "shutting down" if stop.is_set() else None


def test_a_stop_during_the_backoff_sends_no_new_attempt(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Was: the retries went on to their fifth attempt (or the 60 s budget) after SIGTERM."""
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [503, 503, 503, 503, 503])
    stop = threading.Event()
    sleeps = StopOnSleep(stop)
    live = LiveExecutor(kube, FAST, sleep=sleeps, events=False)
    (outcome,) = live.execute([e], keep_going=keep_going_for(stop))
    assert len(fake_api.requests("POST", EVICTION)) == 1
    assert (outcome.result, outcome.cause, outcome.attempts) == ("abandoned", "stopped", 1)
    assert outcome.message.startswith("cut short by the stop (shutting down) after 1 attempt(s)")
    assert "503" in outcome.message  # the last answer
    assert fake_api.get("Pod", "p", "default") is not None


def test_a_long_retry_after_is_not_slept_out_once_stopped(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A 429 asking for 40 s: the wait is cut into short slices, the stop asked between them, so a
    stop does not sit out the Retry-After (past serve's drain and the pod's grace period)."""
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [(429, 40)])
    stop = threading.Event()
    sleeps = StopOnSleep(stop, on=2)
    live = LiveExecutor(kube, FAST, sleep=sleeps, events=False)
    (outcome,) = live.execute([e], keep_going=keep_going_for(stop))
    assert (outcome.result, outcome.cause, outcome.attempts) == ("abandoned", "stopped", 1)
    assert len(fake_api.requests("POST", EVICTION)) == 1
    assert len(sleeps) == 2 and all(s <= STOP_POLL_SECONDS for s in sleeps)


def test_without_a_stop_the_sliced_wait_adds_up_to_the_retry_after(fake_api: FakeApiServer,
                                                                   kube: KubeClient) -> None:
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [(429, 3.5), 200])
    sleeps = Sleeps()
    live = LiveExecutor(kube, FAST, sleep=sleeps, events=False)
    (outcome,) = live.execute([e], keep_going=lambda: None)
    assert (outcome.result, outcome.attempts) == ("evicted", 2)
    assert sum(sleeps) == pytest.approx(3.5, abs=0.05) and all(s <= STOP_POLL_SECONDS for s in sleeps)


def test_an_attempt_on_the_wire_is_not_interrupted(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The stop comes while the attempt is being sent: it finishes, and its answer stands."""
    e = planned(fake_api, "p")
    stop = threading.Event()
    asked = 0

    def keep_going() -> str | None:
        nonlocal asked
        asked += 1
        if asked == 1:  # asked before the eviction starts; the stop follows at once
            stop.set()
            return None
        return "shutting down" if stop.is_set() else None

    fake_api.script_eviction("default/p", [Fault(0, delay=0.2)])
    live = LiveExecutor(kube, FAST, sleep=Sleeps(), events=False)
    (outcome,) = live.execute([e], keep_going=keep_going)
    assert (outcome.result, outcome.attempts) == ("evicted", 1)
    assert fake_api.get("Pod", "p", "default") is None


def test_a_stop_after_a_lost_answer_keeps_the_eviction_in_flight(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The first attempt's answer was lost (it may still land), then the stop: no new attempt, the
    pod is read back, still there before the deadline: ``failed``/unconfirmed, which the ledger
    does not take back, and the message says the stop cut the retries short."""
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [DROP, 503, 503])
    stop = threading.Event()
    clock = Clock()
    live = LiveExecutor(kube, FAST, sleep=StopOnSleep(stop), events=False, clock=clock)
    (outcome,) = live.execute([e], keep_going=keep_going_for(stop), deadline=clock.t + 60)
    assert len(fake_api.requests("POST", EVICTION)) == 1
    assert (outcome.result, outcome.cause, outcome.attempts) == ("failed", UNCONFIRMED, 1)
    assert "cut short by the stop (shutting down)" in outcome.message
    assert len(fake_api.requests("GET", "/api/v1/namespaces/default/pods/p")) == 1  # the read-back


def test_a_stop_after_a_lost_answer_that_landed_is_evicted(fake_api: FakeApiServer, kube: KubeClient) -> None:
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [ACT_THEN_DROP])
    stop = threading.Event()
    live = LiveExecutor(kube, FAST, sleep=StopOnSleep(stop), events=False)
    (outcome,) = live.execute([e], keep_going=keep_going_for(stop))
    assert (outcome.result, outcome.cause, outcome.attempts) == ("evicted", "confirmed", 1)
    assert len(fake_api.requests("POST", EVICTION)) == 1


def test_a_stop_after_a_lost_answer_with_the_pod_unreadable_is_unconfirmed(fake_api: FakeApiServer,
                                                                          kube: KubeClient) -> None:
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [DROP])
    fake_api.script("GET", "/api/v1/namespaces/default/pods/p", [403])
    stop = threading.Event()
    live = LiveExecutor(kube, FAST, sleep=StopOnSleep(stop), events=False)
    (outcome,) = live.execute([e], keep_going=keep_going_for(stop))
    assert (outcome.result, outcome.cause, outcome.attempts) == ("failed", UNCONFIRMED, 1)
    assert "could not be read back" in outcome.message and "cut short by the stop" in outcome.message


def test_concurrent_evictions_all_stop_retrying(fake_api: FakeApiServer, wide: KubeClient) -> None:
    """Four evictions retrying at once (all four first attempts in flight together): the stop ends
    every one's retries, none sends a new attempt."""
    evictions = [planned(fake_api, f"p{i}") for i in range(4)]
    for i in range(4):
        fake_api.script_eviction(f"default/p{i}", [503] * 5)
    fake_api.gather_evictions(4)
    stop = threading.Event()
    live = LiveExecutor(wide, FAST, sleep=StopOnSleep(stop), events=False, max_concurrent=4)
    outcomes = live.execute(evictions, keep_going=keep_going_for(stop))
    assert [(o.result, o.cause) for o in outcomes] == [("abandoned", "stopped")] * 4
    assert len([r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]) == 4


def test_the_read_back_after_a_stop_is_tried_once(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Stopping, the read-back of a lost answer is one GET, not the reads' minute of retries: one
    that fails leaves the eviction ``failed``/unconfirmed (the ledger keeps counting it)."""
    e = planned(fake_api, "p")
    fake_api.script_eviction("default/p", [DROP])
    fake_api.script("GET", "/api/v1/namespaces/default/pods/p", [503, 503])
    stop = threading.Event()
    live = LiveExecutor(kube, FAST, sleep=StopOnSleep(stop), events=False)
    (outcome,) = live.execute([e], keep_going=keep_going_for(stop))
    assert (outcome.result, outcome.cause, outcome.attempts) == ("failed", UNCONFIRMED, 1)
    assert len(fake_api.requests("GET", "/api/v1/namespaces/default/pods/p")) == 1

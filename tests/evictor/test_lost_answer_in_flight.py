"""An eviction whose answer was lost keeps its admission while it can still land (issue 28).

A gateway's 504, or a connection dropped after the request was written, means the API server may
have acted, and may still be acting: the attempt's ``?timeout=`` runs to the admission's deadline.
When the pod is read back still there before that deadline, the eviction has not provably ended:
it is reported ``failed`` with cause ``unconfirmed``, which :func:`kdesched.reactor.run.admit.record_outcomes`
does not take back (the ledger counts it until the deadline, then a run that reads the pod settles
it). Before, the outcome was the last attempt's own (``failed``/server-error, ``blocked``,
``abandoned``...), the admission was released at once, and the next run admitted another pod of
the workload while the first eviction could still land (review J, finding 3). Only once the
deadline plus LANDING_MARGIN_SECONDS has passed (the API server counts an attempt's ``?timeout=``
from receiving it: review L, finding 1) is the last attempt's own outcome reported (and the
admission released).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kdesched.evictor.execute import LANDING_MARGIN_SECONDS, UNCONFIRMED, LiveExecutor, RetrySettings
from kdesched.kube.client import KubeClient
from kdesched.model.records import Pod
from kdesched.reactor.run.admit import EVICTED
from kdesched.strategies.framework import PlannedEviction

from tests.builders import pod_obj
from tests.fakeapi import DROP, PDB_MESSAGE, FakeApiServer, Fault

GATEWAY_504 = Fault(code=504, message="gateway timeout: upstream did not answer in time")
EVICTION = "/api/v1/namespaces/default/pods/web-1/eviction"


def planned(fake: FakeApiServer) -> PlannedEviction:
    raw = pod_obj("web-1", node="n1")
    fake.add(raw)
    return PlannedEviction(Pod.from_api(raw), "n1", "RemoveNodesViolatingNodeTaints", "default", "tainted")


def released(result: str, cause: str) -> bool:
    """record_outcomes' rule: an admission is taken back unless evicted/already-gone or unconfirmed."""
    return result not in EVICTED and cause != UNCONFIRMED


class Clock:
    """A monotonic clock (the deadline's) that the injected sleep moves forward."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_a_lost_answer_is_not_released_while_it_can_still_land(fake_api: FakeApiServer, kube: KubeClient) -> None:
    e = planned(fake_api)
    # both attempts answered 504 by a gateway; the API server behind it is still working on them
    fake_api.script_eviction("default/web-1", [GATEWAY_504, GATEWAY_504])
    live = LiveExecutor(kube, RetrySettings(max_attempts=2, initial_backoff_seconds=0.0, max_backoff_seconds=0.0,
                                            max_total_seconds=60.0), sleep=lambda _s: None, events=False)
    deadline = time.monotonic() + 30.0  # the admission's deadline
    (outcome,) = live.execute([e], deadline=deadline)
    assert time.monotonic() < deadline
    first = fake_api.requests("POST", EVICTION)[0]
    assert float(first.query["timeout"].rstrip("s")) > 20  # the API server may act on it for this long
    assert (outcome.result, outcome.cause, outcome.attempts) == ("failed", UNCONFIRMED, 2), outcome.message
    assert not released(outcome.result, outcome.cause)
    assert "attempt 1 timed out at a gateway (504)" in outcome.message
    assert "the pod is still there" in outcome.message and "deadline" in outcome.message
    # ... and it does: the first attempt's handler finishes on the API server, the pod goes. The
    # ledger still counts it, so no other run admitted a second pod of the workload meanwhile
    fake_api.delete("Pod", "web-1", "default")


# the last attempt's own answer after an earlier lost one; each would release the admission alone
@pytest.mark.parametrize(("script", "own"), [
    ([GATEWAY_504, Fault(429, PDB_MESSAGE)], "blocked"),
    ([GATEWAY_504, 429], "throttled"),
    ([DROP, 403], "failed/rejected"),
    ([DROP, DROP], "failed/connection"),
    ([Fault(500, "etcdserver: leader changed"), 503], "failed/server-error"),
], ids=["504-then-pdb", "504-then-throttled", "drop-then-403", "drop-drop", "500-then-503"])
def test_every_last_answer_after_a_lost_one_is_unconfirmed_before_the_deadline(
        fake_api: FakeApiServer, kube: KubeClient, script: list[Any], own: str) -> None:
    e = planned(fake_api)
    fake_api.script_eviction("default/web-1", script)
    clock = Clock()
    live = LiveExecutor(kube, RetrySettings(max_attempts=2, initial_backoff_seconds=1, max_backoff_seconds=1,
                                            max_total_seconds=60), sleep=clock.sleep, clock=clock, events=False)
    (outcome,) = live.execute([e], deadline=clock.t + 30)
    assert (outcome.result, outcome.cause) == ("failed", UNCONFIRMED), f"{own}: {outcome.message}"
    assert fake_api.get("Pod", "web-1", "default") is not None


def test_a_lost_attempt_with_under_a_second_left_is_not_waited_out(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The retry is not sent (less than an attempt's minimum left), and the lost attempt may still
    be carried out: until the deadline, and a little past it (the API server counts its ?timeout=
    from receiving it). The executor used to wait to exactly the deadline, read the pod again and
    give the admission back (review L, finding 1); waiting out the margin as well would hold the run
    for seconds, for what the ledger's settle finds anyway. So: ``unconfirmed``, kept, read once."""
    e = planned(fake_api)
    fake_api.script_eviction("default/web-1", [GATEWAY_504])
    clock = Clock()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        waits.append(seconds)

    live = LiveExecutor(kube, RetrySettings(max_attempts=3, initial_backoff_seconds=5.5, max_backoff_seconds=5.5,
                                            max_total_seconds=60), sleep=sleep, clock=clock, events=False)
    deadline = clock.t + 6
    (outcome,) = live.execute([e], deadline=deadline)
    assert len(fake_api.requests("POST", EVICTION)) == 1
    assert waits == pytest.approx([5.5])  # the backoff only
    assert len(fake_api.requests("GET", "/api/v1/namespaces/default/pods/web-1")) == 1
    assert (outcome.result, outcome.cause) == ("failed", UNCONFIRMED), outcome.message
    assert not released(outcome.result, outcome.cause)


@pytest.mark.parametrize(("backoff", "timeouts", "kept"), [(4, ["3s", "1s"], True), (11, ["3s"], False)],
                         ids=["read-within-the-margin", "read-past-the-margin"])
def test_past_the_deadline_a_lost_answer_is_released_only_past_the_margin(
        fake_api: FakeApiServer, kube: KubeClient, backoff: float, timeouts: list[str], kept: bool) -> None:
    """Every attempt was bounded by the deadline (its ``?timeout=`` and its connect: 3 s of what was
    left); the API server counts that timeout from receiving the request, so the lost attempt is
    taken to be able to land until the deadline plus LANDING_MARGIN_SECONDS. The pod read back
    unchanged within it: ``unconfirmed``, kept. Read back after it: the eviction provably can no
    longer land, and the admission is given back (the last attempt's own outcome)."""
    e = planned(fake_api)
    fake_api.script_eviction("default/web-1", [GATEWAY_504, GATEWAY_504])
    clock = Clock()
    live = LiveExecutor(kube, RetrySettings(max_attempts=5, initial_backoff_seconds=backoff, max_backoff_seconds=backoff,
                                            max_total_seconds=60), sleep=clock.sleep, clock=clock, events=False)
    deadline = clock.t + 6
    (outcome,) = live.execute([e], deadline=deadline)
    sent = fake_api.requests("POST", EVICTION)
    assert [r.query["timeout"] for r in sent] == timeouts and clock.t >= deadline
    if kept:
        assert clock.t < deadline + LANDING_MARGIN_SECONDS
        assert (outcome.result, outcome.cause) == ("failed", UNCONFIRMED), outcome.message
    else:
        assert clock.t >= deadline + LANDING_MARGIN_SECONDS
        assert outcome.result == "abandoned" and released(outcome.result, outcome.cause), outcome.message


def test_without_a_deadline_the_last_answer_stands(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """No deadline, no admission (``kdesched run``): nothing for the ledger to keep; the report
    gives the last attempt's answer, as before."""
    e = planned(fake_api)
    fake_api.script_eviction("default/web-1", [GATEWAY_504, GATEWAY_504])
    live = LiveExecutor(kube, RetrySettings(max_attempts=2, initial_backoff_seconds=0, max_backoff_seconds=0),
                        sleep=lambda _s: None, events=False)
    (outcome,) = live.execute([e])
    assert (outcome.result, outcome.cause) == ("failed", "server-error")

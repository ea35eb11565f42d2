"""A lost eviction is not released while the API server may still carry it out (review L, finding 1).

The API server counts an eviction's ``?timeout=`` from when it receives the request, after the
client's connect. The transport used to fix it at everything left before connecting, so the server
could act until the connect's time after the admission's deadline; the executor, reading the pod
back just after the deadline (or after waiting for it, with under a second left), found it still
there and reported the last attempt's own outcome (``failed``/connection). record_outcomes then
took the admission back and the next run could admit a second pod of the workload while the first
eviction could still land. Now the transport takes the connect out of the ``?timeout=``
(tests/kube/test_bounded_write_connect.py) and the executor keeps a pod read back still there
``unconfirmed`` until the deadline plus LANDING_MARGIN_SECONDS (the ledger's clock margin): this
fake client times out like the old transport, connect and all, and must still not be released.
"""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.execute import LANDING_MARGIN_SECONDS, UNCONFIRMED, LiveExecutor, RetrySettings
from kdesched.kube.deadline import Deadline
from kdesched.kube.errors import Unavailable
from kdesched.model.records import Pod
from kdesched.reactor.run.admit import EVICTED
from kdesched.strategies.framework import PlannedEviction

from tests.builders import pod_obj
from tests.evictor.test_lost_answer_in_flight import Clock


class SlowConnectClient:
    """One eviction attempt: the connect takes ``connect`` s (so the server's ?timeout= starts that
    late), the answer never comes, the client gives up at its total timeout (?timeout= + 0.5 s)."""

    max_concurrent_evictions = 1

    def __init__(self, clock: Clock, raw: dict[str, Any], connect: float) -> None:
        self.clock, self.raw, self.connect = clock, raw, connect
        self.server_acts_until: float | None = None

    def evict_pod(self, namespace: str, name: str, *, deadline: Deadline | None = None, **_: Any) -> None:
        assert deadline is not None
        timeout = deadline.server_timeout()  # what the transport puts in ?timeout=, before connecting
        sent = self.clock.t
        self.server_acts_until = sent + self.connect + timeout  # the server's timer starts on receipt
        self.clock.t = sent + timeout + 0.5  # urllib3's total timeout: the answer is lost
        raise Unavailable("connection lost: timed out", maybe_sent=True)

    def get_raw(self, kind: str, name: str, namespace: str | None = None, **_: Any) -> dict[str, Any]:
        self.clock.t += 0.05  # a round trip
        return self.raw  # still there: the server's handler has not finished yet

    def post_event(self, **_: Any) -> None:
        pass


# (seconds left at sending, connect time): the second is the new <= 1 s wait, then released at the deadline
@pytest.mark.parametrize(("left", "connect"), [(1.2, 1.0), (2.9, 2.0)], ids=["past-deadline", "waited-to-deadline"])
def test_a_lost_answer_is_not_released_while_the_server_may_still_act(left: float, connect: float) -> None:
    clock = Clock()
    raw = pod_obj("web-1", node="n1")
    e = PlannedEviction(Pod.from_api(raw), "n1", "RemoveNodesViolatingNodeTaints", "default", "tainted")
    client = SlowConnectClient(clock, raw, connect=connect)
    live = LiveExecutor(client, RetrySettings(max_attempts=1), sleep=clock.sleep, clock=clock,  # type: ignore[arg-type]
                        events=False, max_concurrent=1)
    deadline = clock.t + left
    (outcome,) = live.execute([e], deadline=deadline)
    assert client.server_acts_until is not None and client.server_acts_until > clock.t  # it may still land
    released = outcome.result not in EVICTED and outcome.cause != UNCONFIRMED
    assert not released, (
        f"released as {outcome.result}/{outcome.cause} at {clock.t - deadline:+.2f}s past the local deadline, "
        f"while the API server may act on the lost attempt for {client.server_acts_until - clock.t:.2f}s more")



def test_read_back_after_the_margin_a_pod_still_there_is_released() -> None:
    """Read back once the lost attempt provably can no longer land (past the deadline plus the
    margin: the API server received it before the deadline, and its ?timeout= ended by then): the
    last attempt's own outcome, and the admission is given back."""
    clock = Clock()
    raw = pod_obj("web-1", node="n1")
    e = PlannedEviction(Pod.from_api(raw), "n1", "RemoveNodesViolatingNodeTaints", "default", "tainted")
    deadline = clock.t + 1.2

    class SlowToGiveUp(SlowConnectClient):
        def evict_pod(self, namespace: str, name: str, **kwargs: Any) -> None:
            try:
                super().evict_pod(namespace, name, **kwargs)
            finally:  # the client noticed the lost answer only this late
                self.clock.t = deadline + LANDING_MARGIN_SECONDS

    client = SlowToGiveUp(clock, raw, connect=1.0)
    live = LiveExecutor(client, RetrySettings(max_attempts=1), sleep=clock.sleep, clock=clock,  # type: ignore[arg-type]
                        events=False, max_concurrent=1)
    (outcome,) = live.execute([e], deadline=deadline)
    assert (outcome.result, outcome.cause) == ("failed", "connection"), outcome.message

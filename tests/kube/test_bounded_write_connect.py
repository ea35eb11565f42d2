"""A write bounded by a deadline cannot be carried out after it, however long its connect takes.

The API server starts a request's ``?timeout=`` when it receives the request, that is after the
client's connect (TCP, then TLS; urllib3 bounds each by the connect timeout). The transport used
to fix ``?timeout=`` at everything left before connecting (up to DEADLINE_CONNECT_SECONDS), so an
eviction could be carried out up to the connect's time after its admission's deadline, while the
executor and the ledger took that deadline for the last moment it could land (review L, finding 1).
Now the connect's bound comes out of what is left first: connect bound + ``?timeout=`` <= left.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.deadline import DEADLINE_CONNECT_SECONDS, Deadline, DeadlinePassed

from tests.builders import pod_obj
from tests.fakeapi import FakeApiServer


def slow_connects(fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch, share: float) -> list[tuple[float, float]]:
    """Every new connection to ``fake`` takes ``share`` of its connect timeout, then succeeds:
    (the timeout, when it was made)."""
    import urllib3

    real = urllib3.connection.HTTPConnection._new_conn
    port = int(fake.url.rsplit(":", 1)[1])
    made: list[tuple[float, float]] = []

    def slow(conn: Any) -> Any:
        if conn.port != port:
            return real(conn)
        time.sleep(conn.timeout * share)
        sock = real(conn)
        made.append((conn.timeout, time.monotonic()))
        return sock

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "_new_conn", slow)
    return made


def evictions(fake: FakeApiServer) -> list[int]:
    return [int(r.query["timeout"].removesuffix("s")) for r in fake.requests("POST") if r.path.endswith("/eviction")]


@pytest.mark.parametrize("left", [3.0, 6.0], ids=["short", "long"])
def test_a_slow_connect_cannot_carry_an_eviction_past_its_deadline(
        fake_api: FakeApiServer, monkeypatch: pytest.MonkeyPatch, left: float) -> None:
    fake_api.add(pod_obj("a", node="n1"))
    client = KubeClient.for_host(fake_api.url)
    made = slow_connects(fake_api, monkeypatch, share=0.9)
    try:
        deadline = time.monotonic() + left
        client.evict_pod("default", "a", uid=None, grace_period_seconds=None, annotations={},
                         deadline=Deadline(deadline))
        ((connect_timeout, connected),) = made
        (timeout,) = evictions(fake_api)
        # the API server received it no earlier than the connect ended, and acts until its ?timeout=
        assert connected + timeout <= deadline, (
            f"connected {connected - (deadline - left):.2f}s after sending with ?timeout={timeout}s: the API server "
            f"may carry it out until {connected + timeout - deadline:.2f}s after the deadline")
        # the whole connect phase (TCP, then TLS: each bounded by the connect timeout) fits too
        assert 2 * connect_timeout + timeout <= left
    finally:
        client.close()


def test_what_is_left_is_shared_between_the_connect_and_the_timeout() -> None:
    def clock() -> float:
        return 100.0

    assert Deadline(100 + 60.4, clock).write_bounds() == (57, DEADLINE_CONNECT_SECONDS)
    assert Deadline(100 + 4.5, clock).write_bounds() == (1, DEADLINE_CONNECT_SECONDS)
    seconds, connect = Deadline(100 + 2.5, clock).write_bounds()  # the ?timeout= keeps its second
    assert (seconds, connect) == (1, pytest.approx(1.5))
    with pytest.raises(DeadlinePassed):
        Deadline(100 + 0.9, clock).write_bounds()

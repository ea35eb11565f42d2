"""One clock (docs/reactor.md): a client's clock follows the API server's, and every time kdesched
writes to the cluster (the disruption ledger, Events, the run Lease) is the API server's, against
the fake API server whose clock is set an hour off this machine's (tests/fakeapi.py clock_offset).

The same with real processes whose clocks are shifted by faketime, on the real control plane:
tests/realk8s/test_clock_skew.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kdesched.kube.client import NO_READ_RETRY, KubeClient
from kdesched.kube.lease import LeaseLock
from kdesched.model.records import parse_time
from kdesched.reactor import metrics as m
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.reactors import STARTED
from tests.reactor.test_admit import ledger_of, pool

HOUR = 3600.0


def server_now(fake: FakeApiServer) -> float:
    return time.time() + fake.clock_offset


@pytest.mark.parametrize("offset", [HOUR, -HOUR, 180.0, 0.0])
def test_a_clients_clock_follows_the_servers(fake_api: FakeApiServer, kube: KubeClient, offset: float) -> None:
    fake_api.clock_offset = offset
    assert not kube.clock.synced
    assert abs(kube.clock.now() - time.time()) < 1.0  # before any answer: this process's own clock
    for _ in range(5):
        kube.list_raw("Node")
    assert kube.clock.synced
    assert abs(kube.clock.now() - server_now(fake_api)) < 1.1
    assert kube.clock.offset_seconds() == pytest.approx(-offset, abs=1.1)
    sibling = kube.sibling()  # the watch cache's client: the same clock
    try:
        assert sibling.clock is kube.clock
    finally:
        sibling.close()


def test_error_answers_feed_the_clock_too(fake_api: FakeApiServer) -> None:
    from kdesched.kube.errors import ApiError

    fake_api.clock_offset = -HOUR
    client = KubeClient.for_host(fake_api.url, read_retry=NO_READ_RETRY)
    try:
        assert client.get_raw("Node", "nowhere") is None  # a 404
        assert client.clock.synced and abs(client.clock.now() - server_now(fake_api)) < 1.1
        fake_api.clock_offset = HOUR  # the server's clock is stepped: the next answer restarts the estimate
        fake_api.script("GET", "/api/v1/nodes", [500])
        with pytest.raises(ApiError):
            client.list_raw("Node")
        assert abs(client.clock.now() - server_now(fake_api)) < 1.1
        assert client.clock.state().restarts == 1
    finally:
        client.close()


def reactor(kube: KubeClient, identity: str = "test") -> Reactor:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2}
    policy = default_like_policy(kdesched=block)
    r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity=identity)
    STARTED.append(r)
    return r


def taint_event(r: Reactor, node: str) -> dict[str, Any]:
    return r.node_event(Trigger(ev.TAINTS_CHANGED, f"e-{node}"), parse_node_event({"node": node}))


@pytest.mark.parametrize("offset", [HOUR, -HOUR])
def test_the_ledger_and_the_events_are_written_on_the_servers_clock(fake_api: FakeApiServer, kube: KubeClient,
                                                                     offset: float) -> None:
    """A process an hour off the API server: the admission it writes is at the server's time, so
    another process (whatever its own clock) sees a fresh admission, and its Events are dated as
    the server dates its objects."""
    fake_api.clock_offset = offset
    pool(fake_api, 2)
    r = reactor(kube)
    assert r.wall_clock == kube.clock.now
    out = taint_event(r, "p0")
    assert [e["result"] for e in out["evictions"]] == ["evicted"]
    move = ledger_of(fake_api).move("Deployment/default/web")
    assert move is not None and len(move.inflight) == 1
    for t in (move.started, move.inflight[0].at):
        assert abs(t - server_now(fake_api)) < 5, (t, server_now(fake_api))
    # a second process reads it: the admission is fresh, the allowance is spent, p1's pod waits
    other = KubeClient.for_host(fake_api.url)
    try:
        out = taint_event(reactor(other, "other"), "p1")
        assert [e["result"] for e in out["evictions"]] == ["paced"]
    finally:
        other.close()
    events = fake_api.list("Event")
    assert events, "no Event was posted"
    for e in events:
        at = parse_time(e["eventTime"], "eventTime")
        assert at is not None and abs(at.timestamp() - server_now(fake_api)) < 5, e["eventTime"]
    assert m.CLOCK_OFFSET.collect()[0].samples[0].value == pytest.approx(-offset, abs=1.1)


def test_the_lease_is_stamped_on_the_servers_clock(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.clock_offset = HOUR
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    lock = LeaseLock(kube, "kdesched", "run", "me", 15)
    assert lock.try_acquire()
    spec = (fake_api.get("Lease", "run", "kdesched") or {})["spec"]
    for field in ("acquireTime", "renewTime"):
        at = parse_time(spec[field], field)
        assert at is not None and abs(at.timestamp() - server_now(fake_api)) < 2, spec
    assert abs(datetime.now(UTC).timestamp() + HOUR - server_now(fake_api)) < 1


def test_a_process_an_hour_ahead_does_not_keep_the_health_brake_settling(fake_api: FakeApiServer) -> None:
    """The issue's case: the process that saw the cluster unhealthy has its own clock an hour ahead.
    Its "last unhealthy" in the ledger is the API server's time, so once the cluster has been
    healthy for settleSeconds another process (on time) moves again; before, it waited an hour."""
    from kdesched.kube.clock import ServerClock

    from tests.builders import node_obj
    from tests.reactor.test_controls import pool as brake_pool

    brake_pool(fake_api, 1, spares=6, down=3)  # 3 of 10 nodes NotReady: the brake holds
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2, "healthBrake": {"settleSeconds": 2}}
    policy = default_like_policy(kdesched=block)
    ahead = KubeClient.for_host(fake_api.url)
    ahead.clock = ServerClock(wall=lambda: time.time() + HOUR)  # its own wall clock: an hour ahead
    on_time = KubeClient.for_host(fake_api.url)
    try:
        first = Reactor(policy, parse_settings(block, policy=policy, env={}), ahead, identity="ahead")
        second = Reactor(policy, parse_settings(block, policy=policy, env={}), on_time, identity="on-time")
        STARTED.extend([first, second])
        out = taint_event(first, "p0")
        assert [e["result"] for e in out["evictions"]] == ["deferred"]
        first.continuations.cancel_all()  # the on-time process decides next, not this one's repeat
        unhealthy_at = ledger_of(fake_api).unhealthy_at
        assert unhealthy_at is not None and abs(unhealthy_at - time.time()) < 2  # the server's time, not +1 h
        for i in range(3):  # the nodes come back
            fake_api.update(node_obj(f"d{i}"))
        # the settle time, plus what two young estimates may disagree by (each within half a second:
        # a few answers in the same second of Date; docs/reactor.md "One clock", precision)
        time.sleep(2 + 1.2)
        out = taint_event(second, "p0")
        assert [e["result"] for e in out["evictions"]] == ["evicted"], [e.get("message") for e in out["evictions"]]
    finally:
        ahead.close()
        on_time.close()

"""``kdesched serve`` stopping: a node change the leader did not act on is handed to the next one,
and the stop ends within the pod's grace period whatever the API server does.

Why: at SIGTERM (a rolling update) or a step-down, events still queued are cancelled and events in
a settle window end with ``ShuttingDown``. The node record the stopping leader writes last is what
the next leader's start-up reconcile compares the cluster with; if it recorded those nodes as
they are now, the change would wait for the sweep (15 minutes by default). Their nodes are held at
the marks they had when the events were dispatched, so the reconcile sends them again.

After the drain, the leader Lease is released first (the step a standby waits for), then the node
record is written; each request is tried once, and both end by one deadline (the drain plus
SHUTDOWN_MARGIN_SECONDS): a failing API server must not keep ``serve`` past the kubelet's SIGKILL.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.classifier import SemanticEvent
from kdesched.reactor.io.lease import LockBusy, ShuttingDown
from kdesched.reactor.io.reconcile import NodeMark
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.dispatch import Dispatcher
from kdesched.reactor.serve.server import SHUTDOWN_MARGIN_SECONDS, ReactorServer

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.test_serve import TAINT, wait_for
from tests.reactor.test_serve_failures import LEADER, FakeClock, Running, clock, leader  # noqa: F401

BLOCK = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5}


def make(kube: KubeClient, identity: str, **kw: Any) -> ReactorServer:
    policy = default_like_policy(kdesched=BLOCK)
    return ReactorServer(policy, parse_settings(BLOCK, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                         sweep_interval_seconds=0, identity=identity, watch_timeout_seconds=2, drain_seconds=0.2, **kw)


def taint(fake_api: FakeApiServer, name: str) -> None:
    node = fake_api.get("Node", name)
    assert node is not None
    node["spec"]["taints"] = [TAINT]
    fake_api.update(node)


def evicted(fake_api: FakeApiServer, pod: str) -> bool:
    return any(r.path.endswith(f"/pods/{pod}/eviction") for r in fake_api.requests("POST"))


def test_a_taint_event_dropped_at_shutdown_is_sent_again_by_the_next_leader(
        fake_api: FakeApiServer, kube: KubeClient, caplog: pytest.LogCaptureFixture) -> None:
    """One worker: n1's run hangs evicting, n2's event waits in the queue and is cancelled by
    SIGTERM. The next leader's start-up reconcile finds n2's taint and evicts its pod."""
    caplog.set_level(logging.INFO, logger="kdesched")
    fake_api.add(node_obj("n1"), node_obj("n2"), node_obj("n3"))
    fake_api.add(pod_obj("a", "n1", owner_name="web"), pod_obj("b", "n2", owner_name="api"))
    first = make(kube, "old", workers=1)
    t1 = threading.Thread(target=first.run, daemon=True)
    t1.start()
    wait_for(lambda: first.leadership.is_leader.is_set() and first.watcher.listed.is_set()
             and first.node_records.recorded is not None)
    fake_api.gather_evictions(2, timeout=30)  # n1's eviction hangs: the only worker is busy
    taint(fake_api, "n1")
    wait_for(lambda: fake_api.evictions_in_flight == 1)
    taint(fake_api, "n2")  # classified and dispatched, queued behind the busy worker
    wait_for(lambda: "n2" in first.dispatcher.not_acted_on())
    held = first.dispatcher.not_acted_on()["n2"]
    first.write_node_record()  # a periodic write meanwhile records n2 as cached: tainted
    assert first.node_records.recorded is not None and first.node_records.recorded["n2"] != held
    first.shutdown()  # SIGTERM (rolling update)
    t1.join(30)
    fake_api.release_evictions()
    assert not evicted(fake_api, "b")  # the old leader never ran n2's event
    second = make(kube, "new")  # the new pod of the rolling update takes the released Lease
    t2 = threading.Thread(target=second.run, daemon=True)
    t2.start()
    try:
        wait_for(lambda: evicted(fake_api, "b"))
        # (n1's run was still evicting when the drain ended: its change is sent again too)
        reconciled = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up reconcile")]
        assert reconciled and "node.taints.changed n2" in reconciled[-1]
    finally:
        second.shutdown()
        t2.join(30)


def test_an_event_acted_on_is_let_go() -> None:
    """A run that reported (whatever it evicted) acted on the event: its node is not held."""
    reactor = _Refusing(None)
    dispatcher = Dispatcher(reactor, threading.Event(), workers=1, retry_delay_seconds=0,  # type: ignore[arg-type]
                            recorded_mark=lambda node: None)
    dispatcher.dispatch([SemanticEvent(ev.TAINTS_CHANGED, "e1", "n1", {"node": "n1"})])
    dispatcher.pool.shutdown(wait=True)
    assert dispatcher.not_acted_on() == {}


class _Refusing:
    """A reactor whose runs raise ``exc`` before evicting (None: they report, evicting nothing)."""

    def __init__(self, exc: Exception | None) -> None:
        self.exc = exc

    def node_event(self, *args: object, **kw: object) -> dict[str, Any]:
        if self.exc is None:
            return {"evictions": [], "blocked": []}
        raise self.exc

    def run_requested(self, *args: object, **kw: object) -> dict[str, Any]:
        return self.node_event()


@pytest.mark.parametrize("exc", [ShuttingDown("stopping"), LockBusy("busy")])
def test_an_event_given_up_keeps_its_nodes_mark_from_its_dispatch(exc: Exception) -> None:
    """Ended by ShuttingDown (a settle window cut short), or given up after its retries: not acted
    on, so reported with the mark its node had in the record when it was dispatched."""
    before = NodeMark("uid", True, "taints-before", "labels")
    marks = {"n1": before}
    dispatcher = Dispatcher(_Refusing(exc), threading.Event(), workers=1, retry_delay_seconds=0,  # type: ignore[arg-type]
                            recorded_mark=marks.get)
    dispatcher.dispatch([SemanticEvent(ev.TAINTS_CHANGED, "e1", "n1", {"node": "n1"})])
    marks["n1"] = NodeMark("uid", True, "taints-after", "labels")  # a later record write saw the change
    dispatcher.pool.shutdown(wait=True)
    assert dispatcher.not_acted_on() == {"n1": before}


def test_the_stop_ends_within_the_drain_and_the_margin_while_the_api_server_fails(
        leader: Running, fake_api: FakeApiServer) -> None:  # noqa: F811
    """Every read of the leader Lease answers 503: the release and the record write fail at once
    (no read retries for a minute each) and ``run`` returns 0 within the budget."""
    srv = leader.srv
    # (the start-up reconcile done first: its reads, with their read retries, are not the shutdown's)
    wait_for(lambda: srv.node_records.recorded is not None)
    fake_api.script("GET", LEADER, [503] * 100_000)
    fake_api.script("PUT", LEADER, [503] * 100_000)
    started = time.monotonic()
    srv.shutdown()
    assert leader.join() == [0]
    assert time.monotonic() - started <= srv.drain_seconds + SHUTDOWN_MARGIN_SECONDS


def test_the_lease_is_released_before_the_record_is_written(leader: Running, fake_api: FakeApiServer) -> None:  # noqa: F811
    """The release is what a standby waits for: a slow record write must not delay it. The record
    is still written after it (the Lease names no holder then; a new holder's write would refuse it)."""
    srv = leader.srv
    wait_for(lambda: srv.node_records.recorded is not None)
    taint(fake_api, "n2")  # no pod there: acted on at once, and a change the last record must keep
    wait_for(lambda: srv.classifier.digests() and any(d.taints for d in srv.classifier.digests())
             and not srv.dispatcher.not_acted_on())
    fake_api.clear_journal()
    srv.shutdown()
    assert leader.join() == [0]
    puts = [r.body for r in fake_api.requests("PUT", LEADER)]
    released = [i for i, b in enumerate(puts) if not (b.get("spec") or {}).get("holderIdentity")]
    assert released, puts
    lease = fake_api.get("Lease", "kdesched-leader", "kdesched")
    assert lease is not None and not lease["spec"].get("holderIdentity")
    assert len(puts) == released[0] + 2  # the release, then the record write


def test_a_sweep_after_an_event_was_given_up_acts_on_its_node() -> None:
    """The sweep runs the whole policy on every node: an event given up before it began is no
    longer missed, and the next leader does not send it again."""
    before = NodeMark("uid", True, "taints-before", "labels")
    reactor = _Refusing(LockBusy("busy"))
    dispatcher = Dispatcher(reactor, threading.Event(), workers=1, retry_delay_seconds=0,  # type: ignore[arg-type]
                            recorded_mark={"n1": before}.get)
    dispatcher.dispatch([SemanticEvent(ev.TAINTS_CHANGED, "e1", "n1", {"node": "n1"})])
    dispatcher.pool.shutdown(wait=True)
    assert dispatcher.not_acted_on() == {"n1": before}
    assert dispatcher.sweep_once() is None  # a sweep that could not run lets nothing go
    assert dispatcher.not_acted_on() == {"n1": before}
    reactor.exc = None
    assert dispatcher.sweep_once() is not None
    assert dispatcher.not_acted_on() == {}

"""The health brake in a taint run that read only a few Nodes (the node-local read: no watch cache),
when the run may still act: the settle advances the ledger's surge-first moves (and may send a
move's eviction), and the plan may begin one (a pod its PodDisruptionBudget keeps).

83222ae made such a run read every Node (one LIST) only when the probe of its node's pods found
something to evict: "a taint run with nothing to evict has nothing to brake". Not so. Every run's
settle calls ``Surges.advance(..., hold=deferral(held_by))``, and ``held_by`` judged no Node (the
run read a few), so it went by the ledger's last-unhealthy time alone: with 4 of 7 nodes NotReady, a
taint event on a node with nothing to evict sent the surge move's eviction. And a pod its PDB keeps
is no eviction for the probe, yet the run moved it surge-first (a scale-up) past the same brake.
Now the settle reads every Node before it advances a move (reactor/run/admit.py ``decide``,
``every_node``), and the probe counts a surge-first candidate as something to brake
(reactor/io/loaders.py ``read_for_node_run``): one Node LIST at most, and none when the ledger holds
no surge-first move and the node nothing to evict, or the brake is off (the cheap read stays cheap)."""

from __future__ import annotations

import time
from typing import Any

from kdesched.evictor.ledger import InFlight, Ledger, Move
from kdesched.evictor.surge import Surge
from kdesched.kube.client import KubeClient
from kdesched.model.records import Pod
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.io.ledger_store import LedgerRead, LedgerStore
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import NOW, node_obj, pdb_obj, pod, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.reactors import STARTED
from tests.reactor.test_surge import KEY, READY, StubClient, quick_reactor, surges, web

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
STRATEGY = "RemovePodsViolatingNodeTaints"


def cluster(fake_api: FakeApiServer, kube: KubeClient, down: int, *objs: dict[str, Any],
            brake: bool = True) -> Reactor:
    """node-a (tainted, the event's), spare-1 and spare-2 Ready, ``down`` nodes NotReady; a reactor
    with the shipped policy (safety defaults on, surge-first moves on, the health brake ``brake``)."""
    fake_api.add(node_obj("node-a", taints=[TAINT]), node_obj("spare-1"), node_obj("spare-2"),
                 *(node_obj(f"down-{i}", ready=False) for i in range(down)), *objs)
    if brake:
        r = quick_reactor(kube)
    else:
        block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2, "healthBrake": {"enabled": False}}
        policy = default_like_policy(kdesched=block)
        r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="test")
    STARTED.append(r)
    return r


def surge_under_way(reactor: Reactor) -> StubClient:
    """A surge-first move of web-1 (on node-x, a node the taint run does not read) whose new pod is
    Ready on spare-1: the settle's next step is the eviction of web-1. Returns the owners' stub."""
    now = time.time()
    old = web("web-1", "node-x")
    new = pod("web-2", "spare-1", owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
              created=(now - 5) - NOW.timestamp(), conditions=READY)

    class Moving(StubClient):
        def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
            return [old, new]

    client = Moving(2, generation=6)  # the Deployment at kdesched's surged value
    reactor.execution.surges = surges(client)
    store = reactor.execution.store
    f = InFlight(old.uid, old.key, old.node_name, now - 20, scope=f"node:node-x:{STRATEGY}")
    s = Surge(old.uid, old.key, old.node_name, "web", "web-abc", 1, 2, now - 20, now + 100, STRATEGY, 6)
    assert store.write(store.read(), Ledger(moves={KEY: Move(STRATEGY, now - 20, now - 20, 1, 1, (f,))},
                                            surges={KEY: s}))
    return client


def taint_event(reactor: Reactor) -> dict[str, Any]:
    return reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-1"), parse_node_event({"node": "node-a"}))


def node_reads(fake_api: FakeApiServer) -> list[tuple[str, str | None]]:
    """The Node reads since the journal was cleared: (path, page size); ``/api/v1/nodes`` with 500 is
    the LIST of every Node, with 4 a page of the node-local read's witnesses."""
    return [(r.path, r.query.get("limit")) for r in fake_api.requests("GET")
            if r.path.startswith("/api/v1/nodes")]


def every_node_lists(fake_api: FakeApiServer) -> int:
    return sum(1 for path, limit in node_reads(fake_api) if path == "/api/v1/nodes" and limit != "4")


def evictions(client: StubClient) -> list[str]:
    return [c[1][0] for c in client.calls if c[0] == "evict"]


def test_a_node_local_taint_run_does_not_send_a_surge_eviction_past_the_health_brake(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    reactor = cluster(fake_api, kube, 4)  # 4 of 7 nodes NotReady: 57%, far past maxUnhealthyShare 0.2
    client = surge_under_way(reactor)
    fake_api.clear_journal()
    out = taint_event(reactor)
    assert evictions(client) == [], "4 of 7 nodes NotReady, yet the settle sent the surge move's eviction"
    assert KEY in reactor.execution.store.read().ledger.surges  # the move waits (given up at its timeout)
    assert every_node_lists(fake_api) == 1, node_reads(fake_api)  # the brake judged every Node: one LIST
    assert any(n.startswith("nodes read: every Node") for n in out["notes"]), out["notes"]
    assert any(n.startswith("pods read: node node-a") for n in out["notes"]), out["notes"]


def test_the_same_settle_sends_the_eviction_when_the_nodes_are_ready(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Reading every Node does not stall the move: healthy, its eviction goes out."""
    reactor = cluster(fake_api, kube, 0)
    client = surge_under_way(reactor)
    fake_api.clear_journal()
    taint_event(reactor)
    assert evictions(client) == ["web-1"]
    assert every_node_lists(fake_api) == 1, node_reads(fake_api)


def test_control_the_same_settle_holds_when_the_run_reads_every_node(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Something to evict on node-a: the run reads every pod and Node, and the settle holds."""
    other = pod_obj("other-1", "node-a", owner_name="other-rs", conditions=READY)
    reactor = cluster(fake_api, kube, 4, other)
    client = surge_under_way(reactor)
    taint_event(reactor)
    assert evictions(client) == []


def test_with_the_health_brake_off_the_settle_lists_no_nodes(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Nothing judges the Nodes then: the few the taint run read do, and the move goes on."""
    reactor = cluster(fake_api, kube, 4, brake=False)
    client = surge_under_way(reactor)
    fake_api.clear_journal()
    taint_event(reactor)
    assert evictions(client) == ["web-1"]
    assert every_node_lists(fake_api) == 0, node_reads(fake_api)


class LosingStore(LedgerStore):
    """A store whose first write loses its race: another process wrote the ledger meanwhile."""

    def __init__(self, inner: LedgerStore) -> None:
        super().__init__(inner.client, inner.namespace, inner.name)
        self.lost = 0

    def write(self, read: LedgerRead, ledger: Ledger, run: str = "") -> bool:
        if not self.lost:
            self.lost += 1
            fresh = self.read()
            assert super().write(fresh, fresh.ledger)  # a new resourceVersion
        return super().write(read, ledger, run)


def test_a_run_that_decides_again_lists_the_nodes_once(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The settle's ledger write loses its race: the run settles again on the same snapshot, which
    holds every Node by then (no second LIST)."""
    reactor = cluster(fake_api, kube, 0)
    client = surge_under_way(reactor)
    store = reactor.execution.store = LosingStore(reactor.execution.store)
    fake_api.clear_journal()
    taint_event(reactor)
    assert store.lost == 1  # the first attempt's write lost: decided twice
    assert every_node_lists(fake_api) == 1, node_reads(fake_api)
    assert evictions(client) == ["web-1"]  # once


def test_with_no_surge_move_a_taint_run_with_nothing_to_evict_lists_no_nodes(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The cheap read stays cheap: the ledger holds a move (not surge-first), the node nothing to
    evict: the event node (GET) and the witness pages, no LIST of every Node."""
    reactor = cluster(fake_api, kube, 4)
    now = time.time()
    f = InFlight("uid-db", "default/db-1", "node-y", now - 20, scope=f"node:node-y:{STRATEGY}")
    store = reactor.execution.store
    moves = {"Deployment/default/db": Move(STRATEGY, now - 20, now - 20, 1, 1, (f,))}
    assert store.write(store.read(), Ledger(moves=moves))
    fake_api.clear_journal()
    out = taint_event(reactor)
    assert out["evictions"] == []
    # down-0..3 fill the first page of 4 and count for nothing; the second has node-a, spare-1, spare-2
    assert node_reads(fake_api) == [("/api/v1/nodes/node-a", None), ("/api/v1/nodes", "4"),
                                    ("/api/v1/nodes", "4")]
    assert any(n.startswith("nodes read: node-a and") for n in out["notes"]), out["notes"]


def guarded(fake_api: FakeApiServer, kube: KubeClient, down: int) -> tuple[Reactor, StubClient]:
    """node-a's a-web-1, which a PDB keeps (0 disruptions allowed): no eviction for the probe, a
    surge-first candidate for the run (scale web 2 -> 3, evict once the new pod is Ready)."""
    labels = {"app": "web", "pod-template-hash": "abc"}
    reactor = cluster(fake_api, kube, down,
                      pod_obj("a-web-1", "node-a", owner_name="web-abc", labels=labels, conditions=READY),
                      pod_obj("a-web-2", "spare-1", owner_name="web-abc", labels=labels, conditions=READY),
                      pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    client = StubClient(2, generation=6)
    reactor.execution.surges = surges(client)
    fake_api.clear_journal()
    return reactor, client


def test_a_node_local_taint_run_begins_no_surge_first_move_past_the_health_brake(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    reactor, client = guarded(fake_api, kube, 4)
    out = taint_event(reactor)
    scaled = [c for c in client.calls if c[0] == "scale"]
    assert scaled == [], "4 of 7 nodes NotReady, yet the run began a surge-first move (scaled web up)"
    assert ("event", "NoSurge") in client.calls and not reactor.execution.store.read().ledger.surges
    assert every_node_lists(fake_api) == 1, node_reads(fake_api)
    assert any(n.startswith("pods read: node node-a") for n in out["notes"]), out["notes"]


def test_healthy_the_same_run_begins_the_surge_first_move(fake_api: FakeApiServer, kube: KubeClient) -> None:
    reactor, client = guarded(fake_api, kube, 0)
    taint_event(reactor)
    assert [c for c in client.calls if c[0] == "scale"] == [("scale", (3, "41"))]
    assert KEY in reactor.execution.store.read().ledger.surges
    assert every_node_lists(fake_api) == 1, node_reads(fake_api)

"""Surge-first moves, the reactor's side (kdesched.reactor.run.surge): what each step writes to the API
server and to the ledger, against a stub client that records the calls. The real controllers are
tests/realk8s/test_surge.py's; the pure decisions tests/evictor/test_surge.py's."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from kdesched.admission.owner_change import MESSAGE as OWNER_CHANGED
from kdesched.evictor.ledger import InFlight, Ledger, Move, Settled
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import Surge
from kdesched.kube.client import KubeClient, ListResult
from kdesched.kube.errors import Conflict
from kdesched.model.records import Pod
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.run.surge import LONG_HELD_SECONDS, Ended, Surges

from tests.builders import NOW, node_obj, pod, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy

T0 = NOW.timestamp()
KEY = "Deployment/default/web"
READY = [{"type": "Ready", "status": "True"}]


class StubClient:
    """The KubeClient calls a surge-first move makes, recorded; a Deployment and ReplicaSet served."""

    def __init__(self, replicas: int, generation: int = 6, failure: str = "", conflict: bool = False) -> None:
        self.replicas, self.generation, self.failure, self.conflict = replicas, generation, failure, conflict
        self.calls: list[tuple[str, Any]] = []
        self.pods: list[Pod] = []  # the workload's pods a LIST returns now (read again before a scale-back)

    def list_raw(self, kind: str, *, namespace: str | None = None, field_selector: str = "",
                 **_: Any) -> ListResult:
        """The pod read before a surge-first eviction (a LIST of one name: RBAC has no pod get)."""
        assert kind == "Pod" and field_selector.startswith("metadata.name=")
        made = PODS.get(field_selector.removeprefix("metadata.name="))
        if made is None:
            return ListResult([], "1")
        meta: dict[str, Any] = {"name": made.name, "namespace": namespace, "uid": made.uid}
        return ListResult([{"metadata": {**meta, "deletionTimestamp": "2026-01-01T00:00:00Z"}
                            if made.terminating else meta}], "1")

    def get_raw(self, kind: str, name: str, namespace: str | None = None, **_: Any) -> dict[str, Any] | None:
        conditions = ([{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                        "message": self.failure}] if self.failure else [])
        if kind == "Deployment":
            return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "41",
                                 "generation": self.generation},
                    "spec": {"replicas": self.replicas, "selector": {"matchLabels": {"app": "web"}}},
                    "status": {"observedGeneration": self.generation, "replicas": self.replicas,
                               "updatedReplicas": self.replicas, "conditions": conditions}}
        return {"metadata": {"name": name, "namespace": namespace,
                             "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True}]},
                "spec": {"replicas": self.replicas}, "status": {"conditions": conditions}}

    def replace_subresource(self, kind: str, name: str, namespace: str, subresource: str,
                            obj: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        if self.conflict:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.calls.append(("scale", (obj["spec"]["replicas"], obj["metadata"]["resourceVersion"])))
        return dict(obj)

    def evict_pod(self, namespace: str, name: str, **kw: Any) -> None:
        self.calls.append(("evict", (name, kw.get("uid"))))

    def create_event(self, **kw: Any) -> bool:
        self.calls.append(("event", kw["reason"]))
        return True

    def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
        return list(self.pods)


PODS: dict[str, Pod] = {}  # the pods the API server holds, by name (the last web() of the name)


def web(name: str, node: str, created: float = -3600) -> Pod:
    made = pod(name, node, owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
               created=created, conditions=READY)
    PODS[name] = made
    return made


def moving(old: Pod, **kw: Any) -> Ledger:
    f = InFlight(old.uid, old.key, old.node_name, T0 + 0.25, scope="node:node-a:RemovePodsViolatingNodeTaints")
    s = Surge(old.uid, old.key, old.node_name, "web", "web-abc", 1, 2, T0, T0 + 120, "RemovePodsViolatingNodeTaints",
              6)
    return Ledger(moves={KEY: Move("RemovePodsViolatingNodeTaints", T0, T0, 1, 1, (f,))},
                  workloads={KEY: T0 + 0.25}, nodes={"node-a": T0 + 0.25},
                  node_strategies={"node-a": "RemovePodsViolatingNodeTaints"}, surges={KEY: replace(s, **kw)})


def surges(client: StubClient) -> Surges:
    return Surges(client, enabled=True, timeout_seconds=120)  # type: ignore[arg-type]


def quick_reactor(kube: KubeClient) -> Reactor:
    """A Reactor with the shipped policy's strategies, settling and waiting for the Lease briefly."""
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2}
    policy = default_like_policy(kdesched=block)
    return Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="test")


def test_a_pod_already_going_is_not_evicted_again_whatever_the_runs_snapshot_says() -> None:
    """The run's snapshot (serve's cache) still shows the marked pod Running, but the API server has
    it terminating (another eviction just landed): read first, no second eviction."""
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    PODS["web-1"] = replace(old, deletion_time=NOW)
    client = StubClient(2)
    out = surges(client).advance(Settled(moving(old)), {KEY: [old, new]}, T0 + 5, [])
    assert [c for c in client.calls if c[0] == "evict"] == []
    assert out.ledger.surges[KEY].evicted == T0 + 5  # the move goes on: scaled back once seen going


def test_a_ready_replacement_evicts_the_pod_and_the_scale_back_waits_until_it_is_seen_going() -> None:
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    client = StubClient(2)
    ended: list[Ended] = []
    driver = surges(client)
    out = driver.advance(Settled(moving(old)), {KEY: [old, new]}, T0 + 5, ended)
    assert [c for c in client.calls if c[0] != "event"] == [("evict", ("web-1", old.uid))]
    assert out.surges_changed and out.ledger.surges[KEY].evicted == T0 + 5 and not ended
    assert out.ledger.moves[KEY].inflight  # still in flight until the pod is seen gone
    # the next run sees it terminating, and the ReplicaSet's pod for it (proof the ReplicaSet saw it
    # going): now the replicas go back, on the version read
    going = replace(old, deletion_time=NOW)
    out = driver.advance(Settled(out.ledger), {KEY: [going, new]}, T0 + 6, ended)
    assert [c for c in client.calls if c[0] != "event"][-1] == ("evict", ("web-1", old.uid)) and not ended
    client.pods = [going, new, web("web-3", "spare-2", created=6)]
    out = driver.advance(Settled(out.ledger), {KEY: client.pods}, T0 + 7, ended)
    assert [c for c in client.calls if c[0] != "event"][-1] == ("scale", (1, "41"))
    assert [e.outcome for e in ended] == ["done"] and KEY not in out.ledger.surges


def test_the_pod_gone_ends_the_move_done_with_a_checked_move() -> None:
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    client = StubClient(1, generation=7)
    ended: list[Ended] = []
    out = surges(client).advance(Settled(moving(old, evicted=T0 + 5)), {KEY: [new]}, T0 + 6, ended)
    assert [e.outcome for e in ended] == ["done"] and KEY not in out.ledger.surges
    assert KEY not in out.ledger.moves and out.ledger.workloads[KEY] == T0 + 0.25  # the eviction's cool-down stays
    assert [(c.outcome, c.landed) for c in out.checked] == [("achieved", "spare-1")]


def test_a_quota_gives_up_restores_blocks_and_takes_the_cool_downs_back() -> None:
    old = web("web-1", "node-a")
    client = StubClient(2, failure='pods "web-x" is forbidden: exceeded quota: one-pod')
    client.pods = [old]
    ended: list[Ended] = []
    out = surges(client).advance(Settled(moving(old)), {KEY: [old]}, T0 + 2, ended)
    assert ("scale", (1, "41")) in client.calls and not [c for c in client.calls if c[0] == "evict"]
    assert [e.outcome for e in ended] == ["gave-up"] and "exceeded quota" in ended[0].why
    assert out.ledger.surge_blocks[KEY][0] > T0 + 2
    # nothing was evicted: the pod keeps the normal rules at once, not after a cool-down
    assert KEY not in out.ledger.workloads and "node-a" not in out.ledger.nodes
    assert [c.outcome for c in out.checked] == ["unknown"]


def test_a_lost_scale_back_leaves_the_move_for_the_next_run() -> None:
    old = web("web-1", "node-a")
    client = StubClient(2, failure="exceeded quota", conflict=True)
    ended: list[Ended] = []
    out = surges(client).advance(Settled(moving(old)), {KEY: [old]}, T0 + 2, ended)
    assert not out.surges_changed and not ended and KEY in out.ledger.surges


def test_replicas_an_hpa_changed_are_left_alone() -> None:
    old = web("web-1", "node-a")
    client = StubClient(5, generation=8)
    ended: list[Ended] = []
    out = surges(client).advance(Settled(moving(old)), {KEY: [old]}, T0 + 2, ended)
    assert not [c for c in client.calls if c[0] in ("scale", "evict")]
    assert [e.outcome for e in ended] == ["overridden"] and KEY not in out.ledger.surges


def test_a_brake_or_closed_window_holds_the_eviction_then_the_timeout_restores() -> None:
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    braked = Verdict(Reason.HEALTH_BRAKE, "health brake: 3 of 10 nodes are NotReady")
    client = StubClient(2)
    client.pods = [old, new]
    ended: list[Ended] = []
    out = surges(client).advance(Settled(moving(old)), {KEY: [old, new]}, T0 + 5, ended, hold=lambda e: braked)
    assert not client.calls and not out.surges_changed  # nothing evicted while braked: the move waits
    out = surges(client).advance(Settled(moving(old)), {KEY: [old, new]}, T0 + 121, ended, hold=lambda e: braked)
    assert [c for c in client.calls if c[0] != "event"] == [("scale", (1, "41"))]
    assert [e.outcome for e in ended] == ["overridden"] and "health brake" in ended[0].why


def test_a_lost_ledger_write_does_not_make_the_next_attempt_take_its_own_scale_back_for_someone_elses() -> None:
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    client = StubClient(2)
    driver = surges(client)
    ended: list[Ended] = []
    driver.advance(Settled(moving(old)), {KEY: [old, new]}, T0 + 5, ended)  # evicted; the ledger write lost
    # the same snapshot (the pod still shows), the ledger as it was read before
    out = driver.advance(Settled(moving(old)), {KEY: [old, new]}, T0 + 5.2, ended)
    assert not ended  # waits for the pod to go, as after its own eviction
    assert [c[0] for c in client.calls if c[0] != "event"] == ["evict"]  # not evicted twice
    # and writes that eviction, at its time: the lost write did not (before, nothing was written, and
    # only this process knew the pod was evicted; tests/reactor/test_surge_lost_write.py)
    assert out.surges_changed and out.ledger.surges[KEY].evicted == T0 + 5


def test_a_workload_whose_owner_changed_during_the_move_waits_for_the_next_run(fake_api: FakeApiServer,
                                                                               kube: KubeClient) -> None:
    """The run that finds a surge-first move overridden (an HPA set the replicas meanwhile) decides on a
    snapshot taken before the change, while the ReplicaSet controller may still be deleting pods: it
    must not evict the workload's pod (found by tests/realk8s/test_surge.py's HPA storm: a plain
    eviction 30 ms after the override, and a PDB of minAvailable 2 at 1 Ready pod). The next run,
    with the owner no longer changing, evicts it."""
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    fake_api.add(node_obj("node-a", taints=[taint]), node_obj("spare-1"), node_obj("spare-2"),
                 pod_obj("web-1", "node-a", owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
                         conditions=READY),
                 pod_obj("web-2", "spare-1", owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
                         conditions=READY))
    reactor = quick_reactor(kube)
    try:
        hpa = StubClient(5, generation=8)  # the Deployment as an HPA left it: 5 replicas, a new generation
        reactor.execution.surges = surges(hpa)
        store = reactor.execution.store
        old = Pod.from_api(fake_api.get("Pod", "web-1", "default"))  # type: ignore[arg-type]
        now = time.time()
        f = InFlight(old.uid, old.key, old.node_name, now - 5, scope="node:node-a:RemovePodsViolatingNodeTaints")
        s = Surge(old.uid, old.key, old.node_name, "web", "web-abc", 1, 2, now - 5, now + 115,
                  "RemovePodsViolatingNodeTaints", 6)
        read = store.read()
        assert store.write(read, Ledger(moves={KEY: Move("RemovePodsViolatingNodeTaints", now - 5, now - 5, 1, 1, (f,))},
                                        surges={KEY: s}))
        trigger = Trigger(ev.TAINTS_CHANGED, "e-1")
        out = reactor.node_event(trigger, parse_node_event({"node": "node-a"}))
        assert out["evictions"] == [] and not [c for c in hpa.calls if c[0] == "evict"]
        assert [b["reason"] for b in out["blocked"]] == [OWNER_CHANGED.format(key=KEY)]
        assert any("repeated" in n for n in out["notes"])  # it looks again within a second or two
        assert KEY not in store.read().ledger.surges  # the move ended: the owner's replicas stay
        out = reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-2"), parse_node_event({"node": "node-a"}))
        assert [e["pod"] for e in out["evictions"]] == ["web-1"]  # the owner no longer changing: it goes
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()


def test_a_node_run_keeps_repeating_while_a_move_off_its_node_is_under_way(fake_api: FakeApiServer,
                                                                            kube: KubeClient) -> None:
    """The maintenance is cancelled mid-move (the taint removed): the node's plan no longer wants the
    pod, but the move is still in the ledger with the Deployment at +1. The node's run goes on
    repeating (each repeat settles the move) until the move ends, not until the next sweep."""
    fake_api.add(node_obj("node-a"), node_obj("spare-1"),
                 pod_obj("web-1", "node-a", owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
                         conditions=READY))
    reactor = quick_reactor(kube)
    try:
        old = Pod.from_api(fake_api.get("Pod", "web-1", "default"))  # type: ignore[arg-type]

        class Moving(StubClient):
            def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
                return [old]  # the workload's pods: the surge pod not created yet

        client = Moving(2, generation=6)  # the Deployment at kdesched's surged value
        reactor.execution.surges = surges(client)
        store = reactor.execution.store
        now = time.time()
        f = InFlight(old.uid, old.key, old.node_name, now - 2, scope="node:node-a:RemovePodsViolatingNodeTaints")
        s = Surge(old.uid, old.key, old.node_name, "web", "web-abc", 1, 2, now - 2, now + 118,
                  "RemovePodsViolatingNodeTaints", 6)
        assert store.write(store.read(), Ledger(
            moves={KEY: Move("RemovePodsViolatingNodeTaints", now - 2, now - 2, 1, 1, (f,))}, surges={KEY: s}))
        out = reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-1"), parse_node_event({"node": "node-a"}))
        assert out["evictions"] == [] and KEY in store.read().ledger.surges  # the surge pod not Ready yet
        assert any("repeated" in n for n in out["notes"]), out["notes"]
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()


def test_a_move_held_long_past_its_timeout_says_so_loudly(caplog: pytest.LogCaptureFixture) -> None:
    """A held move has no time limit (a rollout that never ends): once it is an hour past its timeout,
    its line is a warning (kdesched.reactor.run.surge.LONG_HELD_SECONDS), before that an info."""
    old = replace(web("web-1", "node-a"), deletion_time=NOW)
    new = web("web-2", "spare-1", created=2)
    rolled = pod("web-3", "spare-2", owner_name="web-def", labels={"app": "web", "pod-template-hash": "def"},
                 created=3, conditions=READY)  # a pod of web's new template: a rollout under way
    driver = surges(StubClient(2))
    with caplog.at_level(logging.INFO, logger="kdesched.reactor.surge"):
        driver.advance(Settled(moving(old, evicted=T0 + 5)), {KEY: [old, new, rolled]}, T0 + 600, [])
        early = [r.levelno for r in caplog.records if "rolling out" in r.getMessage()]
        caplog.clear()
        driver.advance(Settled(moving(old, evicted=T0 + 5)), {KEY: [old, new, rolled]}, T0 + 120 + LONG_HELD_SECONDS, [])
        late = [r for r in caplog.records if "rolling out" in r.getMessage()]
    assert early == [logging.INFO]
    assert [r.levelno for r in late] == [logging.WARNING] and "past its timeout" in late[0].getMessage()

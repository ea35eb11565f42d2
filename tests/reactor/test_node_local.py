"""A taints.changed run over the API reads the event node and just enough other Nodes
(``node_local_snapshot``), not the whole Node list, and decides exactly what it decided with the
whole list: same evictions, same "fewer than 2 Ready nodes" outcome, same policy nodeSelector."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.engine import plan_run
from kdesched.kube.client import KubeClient
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.events.routing import kinds_needed
from kdesched.reactor.io.loaders import node_local_snapshot
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import NOW, node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import make_policy

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
TAINTS = {"RemovePodsViolatingNodeTaints": None}


def decided(policy: Any, snapshot: Any, node: str) -> list[str]:
    plan = plan_run(policy, snapshot, now=NOW, strategies=["RemovePodsViolatingNodeTaints"], nodes=[node])
    return [e.pod.key for e in plan.evictions]


@pytest.mark.parametrize(("others", "selector", "event_ready"), [
    ([("a", True, {}), ("b", True, {}), ("c", True, {})], "", True),        # the usual case
    ([("a", False, {}), ("b", False, {}), ("c", False, {})], "", True),     # no second Ready node: nothing
    ([("a", False, {}), ("b", False, {}), ("z", True, {})], "", True),      # the second Ready node is last
    ([("a", True, {}), ("b", True, {"pool": "x"})], "pool=x", True),        # nodeSelector: only b counts
    ([("a", True, {}), ("b", True, {})], "pool=x", True),                   # ... and none matches
    ([("a", True, {}), ("b", True, {})], "", False),                        # the event node is NotReady
])
def test_same_decisions_as_with_every_node(fake_api: FakeApiServer, kube: KubeClient,
                                           others: list[tuple[str, bool, dict[str, str]]], selector: str,
                                           event_ready: bool) -> None:
    fake_api.add(node_obj("m-event", taints=[TAINT], ready=event_ready, labels={"pool": "x"}))
    for name, ready, labels in others:
        fake_api.add(node_obj(f"n-{name}", ready=ready, labels=labels))
    fake_api.add(pod_obj("intolerant", "m-event", owner_name="web"), pod_obj("other", "m-event", owner_name="db"),
                 pod_obj("elsewhere", "n-a", owner_name="web"))
    policy = make_policy(TAINTS, node_selector=selector or None)
    kinds = kinds_needed(policy)
    fake_api.clear_journal()
    small = node_local_snapshot(kube, "m-event", kinds, policy.node_selector)
    assert not [r for r in fake_api.requests("GET", "/api/v1/nodes") if r.query.get("limit") == "500"]
    full = load_live_snapshot(kube, pod_nodes=["m-event"], include=kinds)
    assert decided(policy, small, "m-event") == decided(policy, full, "m-event")
    assert [p.key for p in small.pods] == [p.key for p in full.pods]


def taint_run(fake_api: FakeApiServer, kube: KubeClient, pods: list[dict[str, Any]],
              brake: bool) -> tuple[dict[str, Any], list[tuple[str, str | None]]]:
    fake_api.add(*(node_obj(f"n{i:02}") for i in range(20)))
    fake_api.add(node_obj("n05", taints=[TAINT]))  # replaces n05
    fake_api.add(*pods, pod_obj("p", "n06", owner_name="db"))
    block = {"settleSeconds": 0.02, "leaseWaitSeconds": 0.1, "safety": {"enabled": False},
             "healthBrake": {"enabled": brake}}
    policy = make_policy(TAINTS, kdesched=block)
    reactor = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="t")
    fake_api.clear_journal()
    report = reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e1", "/t"), parse_node_event({"node": "n05"}))
    return report, [(r.path, r.query.get("limit")) for r in fake_api.requests("GET") if r.path.startswith("/api/v1/nodes")]


def test_a_taint_event_reads_a_few_nodes_not_the_list(fake_api: FakeApiServer, kube: KubeClient) -> None:
    report, node_reads = taint_run(fake_api, kube, [pod_obj("intolerant", "n05", owner_name="web")], brake=False)
    assert [e["pod"] for e in report["evictions"]] == ["intolerant"]
    assert node_reads == [("/api/v1/nodes/n05", None), ("/api/v1/nodes", "4")]
    assert any(n.startswith("nodes read: n05 and 4 other(s)") for n in report["notes"])


def test_with_the_health_brake_a_taint_run_that_evicts_reads_every_node(fake_api: FakeApiServer,
                                                                        kube: KubeClient) -> None:
    """The brake judges every Node (tests/reactor/test_controls.py: half of them NotReady brakes the
    run); the pods stay the node's."""
    report, node_reads = taint_run(fake_api, kube, [pod_obj("intolerant", "n05", owner_name="web")], brake=True)
    assert [e["pod"] for e in report["evictions"]] == ["intolerant"]
    assert node_reads == [("/api/v1/nodes/n05", None), ("/api/v1/nodes", "4"), ("/api/v1/nodes", "500")]
    assert any(n.startswith("nodes read: every Node") for n in report["notes"]), report["notes"]
    assert any(n.startswith("pods read: node n05") for n in report["notes"]), report["notes"]


def test_with_the_health_brake_a_taint_run_with_nothing_to_evict_reads_a_few_nodes(fake_api: FakeApiServer,
                                                                                   kube: KubeClient) -> None:
    tolerant = pod_obj("tolerant", "n05", owner_name="web", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    report, node_reads = taint_run(fake_api, kube, [tolerant], brake=True)
    assert report["evictions"] == []
    assert node_reads == [("/api/v1/nodes/n05", None), ("/api/v1/nodes", "4")]

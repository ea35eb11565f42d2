"""NodeFit (upstream v0.36): each predicate in upstream order, first failure wins, plan-aware usage."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.model.records import Pod
from kdesched.strategies.framework import ClusterState, PlannedEviction
from kdesched.strategies.nodefit import node_fit_failure, pod_fits_any_node, pod_fits_any_other_node

from tests.builders import NOW, node_obj, pod_obj, snapshot


def anti(labels: dict[str, str], topology_key: str = "kubernetes.io/hostname",
         namespaces: list[str] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"labelSelector": {"matchLabels": labels}, "topologyKey": topology_key}
    if namespaces:
        term["namespaces"] = namespaces
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def required_affinity(key: str, values: list[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}}}


def taint(key: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": "v", "effect": effect}


# The candidate pod "p" runs on node "home"; the target node is "t" (cpu 2, memory 4Gi, 10 pods).
def target(**kw: Any) -> dict[str, Any]:
    kw.setdefault("cpu", "2")
    kw.setdefault("memory", "4Gi")
    kw.setdefault("pods", 10)
    return node_obj("t", **kw)


DB = {"app": "db"}

# (id, pod kwargs, target node, other pods, expected failure substring or None)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]], str | None]] = [
    ("fits", {}, target(), [], None),
    # (1) unschedulable, and it wins over every later failure
    ("unschedulable", {}, target(unschedulable=True), [], "is unschedulable"),
    ("unschedulable wins over taint and resources", {"cpu": "8"},
     target(unschedulable=True, taints=[taint("k", "NoSchedule")]), [], "is unschedulable"),
    # (2) nodeSelector + required node affinity
    ("nodeSelector mismatch", {"node_selector": {"disk": "ssd"}}, target(), [], "nodeSelector/required node affinity"),
    ("nodeSelector match", {"node_selector": {"disk": "ssd"}}, target(labels={"disk": "ssd"}), [], None),
    ("required affinity mismatch", {"affinity": required_affinity("zone", ["z1"])}, target(labels={"zone": "z2"}),
     [], "nodeSelector/required node affinity"),
    ("required affinity match", {"affinity": required_affinity("zone", ["z1"])}, target(labels={"zone": "z1"}),
     [], None),
    ("selector wins over taint", {"node_selector": {"disk": "ssd"}}, target(taints=[taint("k", "NoSchedule")]),
     [], "nodeSelector/required node affinity"),
    # (3) taints: NoSchedule and NoExecute only
    ("NoSchedule not tolerated", {}, target(taints=[taint("k", "NoSchedule")]), [], "does not tolerate"),
    ("NoExecute not tolerated", {}, target(taints=[taint("k", "NoExecute")]), [], "does not tolerate"),
    ("PreferNoSchedule ignored", {}, target(taints=[taint("k", "PreferNoSchedule")]), [], None),
    ("Equal toleration", {"tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]},
     target(taints=[taint("k", "NoSchedule")]), [], None),
    ("toleration with wrong value", {"tolerations": [{"key": "k", "operator": "Equal", "value": "w"}]},
     target(taints=[taint("k", "NoSchedule")]), [], "does not tolerate"),
    ("taint wins over anti-affinity", {"affinity": anti(DB)}, target(taints=[taint("k", "NoSchedule")]),
     [pod_obj("db", "t", labels=DB, owner_name="db")], "does not tolerate"),
    # (4) the pod's own required anti-affinity
    ("anti-affinity matches a pod on the node", {"affinity": anti(DB)}, target(),
     [pod_obj("db", "t", labels=DB, owner_name="db")], "anti-affinity matches pod default/db"),
    ("anti-affinity: node lacks the topologyKey", {"affinity": anti(DB, topology_key="zone")}, target(),
     [pod_obj("db", "t", labels=DB, owner_name="db")], None),
    ("anti-affinity: node has the topologyKey", {"affinity": anti(DB, topology_key="zone")},
     target(labels={"zone": "z1"}), [pod_obj("db", "t", labels=DB, owner_name="db")], "anti-affinity"),
    ("anti-affinity: other namespace not matched", {"affinity": anti(DB)}, target(),
     [pod_obj("db", "t", labels=DB, owner_name="db", namespace="other")], None),
    ("anti-affinity: term namespaces", {"affinity": anti(DB, namespaces=["other"])}, target(),
     [pod_obj("db", "t", labels=DB, owner_name="db", namespace="other")], "anti-affinity"),
    ("anti-affinity: terminal pods do not count", {"affinity": anti(DB)}, target(),
     [pod_obj("db", "t", labels=DB, owner_name="db", phase="Succeeded")], None),
    ("anti-affinity is not symmetric", {"labels": DB}, target(),
     [pod_obj("guard", "t", labels={"app": "guard"}, owner_name="g", affinity=anti(DB))], None),
    ("anti-affinity wins over resources", {"affinity": anti(DB), "cpu": "8"}, target(),
     [pod_obj("db", "t", labels=DB, owner_name="db")], "anti-affinity"),
    # (5) resources and pod slots (other node only)
    ("insufficient cpu", {"cpu": "1500m"}, target(), [pod_obj("o", "t", cpu="1", owner_name="o")], "insufficient cpu"),
    ("cpu fits exactly", {"cpu": "1"}, target(), [pod_obj("o", "t", cpu="1", owner_name="o")], None),
    ("insufficient memory", {"cpu": None, "memory": "3Gi"}, target(),
     [pod_obj("o", "t", cpu=None, memory="2Gi", owner_name="o")], "insufficient memory"),
    ("extended resource the node lacks", {"spec_extra": {"overhead": {"example.com/gpu": "1"}}}, target(), [],
     "insufficient example.com/gpu"),
    ("extended resource the node has", {"spec_extra": {"overhead": {"example.com/gpu": "1"}}},
     target(extra_allocatable={"example.com/gpu": "2"}), [], None),
    ("no free pod slot", {"cpu": None}, target(pods=1), [pod_obj("o", "t", cpu=None, owner_name="o")],
     "no free pod slot"),
    ("terminal pods use no slot or resources", {"cpu": "2"}, target(pods=1),
     [pod_obj("o", "t", cpu="2", owner_name="o", phase="Failed")], None),
]


def build(pod_kw: dict[str, Any], node: dict[str, Any], others: list[dict[str, Any]]) -> tuple[Pod, ClusterState]:
    state = ClusterState(snapshot([node_obj("home"), node, pod_obj("p", "home", **pod_kw), *others]), NOW)
    pod = next(p for p in state.snapshot.pods if p.name == "p")
    return pod, state


@pytest.mark.parametrize("name,pod_kw,node,others,failure", CASES, ids=[c[0] for c in CASES])
def test_node_fit(name: str, pod_kw: dict[str, Any], node: dict[str, Any], others: list[dict[str, Any]],
                  failure: str | None) -> None:
    pod, state = build(pod_kw, node, others)
    got = node_fit_failure(pod, state.snapshot.nodes["t"], state)
    if failure is None:
        assert got is None
    else:
        assert got is not None and failure in got, got


def test_resources_not_checked_on_the_current_node() -> None:
    # the pod's own node is full (its own requests are part of the usage): still fits there
    state = ClusterState(snapshot([node_obj("home", cpu="1", pods=1), pod_obj("p", "home", cpu="1")]), NOW)
    pod = state.snapshot.pods[0]
    assert node_fit_failure(pod, state.snapshot.nodes["home"], state) is None
    assert pod_fits_any_node(pod, state.nodes, state)
    assert not pod_fits_any_other_node(pod, state.nodes, state)


def test_current_node_still_checks_taints() -> None:
    state = ClusterState(snapshot([node_obj("home", taints=[taint("k", "NoExecute")]), pod_obj("p", "home")]), NOW)
    pod = state.snapshot.pods[0]
    assert "does not tolerate" in (node_fit_failure(pod, state.snapshot.nodes["home"], state) or "")


@pytest.mark.parametrize("planned,expected", [
    ([], "insufficient cpu"),
    (["big"], None),
    (["small"], "insufficient cpu"),
], ids=["nothing-planned", "big-planned-frees-room", "small-planned-not-enough"])
def test_plan_awareness(planned: list[str], expected: str | None) -> None:
    pod, state = build({"cpu": "1"}, target(),
                       [pod_obj("big", "t", cpu="1500m", owner_name="big"), pod_obj("small", "t", cpu="100m")])
    for name in planned:
        victim = next(p for p in state.snapshot.pods if p.name == name)
        state.mark_planned(PlannedEviction(victim, "t", "S", "prof", "test"))
    got = node_fit_failure(pod, state.snapshot.nodes["t"], state)
    assert got == (None if expected is None else "node t has insufficient cpu")


def test_planned_pod_no_longer_blocks_anti_affinity() -> None:
    pod, state = build({"affinity": anti(DB)}, target(), [pod_obj("db", "t", labels=DB, owner_name="db")])
    assert node_fit_failure(pod, state.snapshot.nodes["t"], state) is not None
    db = next(p for p in state.snapshot.pods if p.name == "db")
    state.mark_planned(PlannedEviction(db, "t", "S", "prof", "test"))
    assert node_fit_failure(pod, state.snapshot.nodes["t"], state) is None


def test_fits_any_other_node_skips_current_and_checks_the_rest() -> None:
    objects = [node_obj("home"), node_obj("full", cpu="1"), node_obj("cordoned", unschedulable=True),
               pod_obj("p", "home", cpu="2")]
    state = ClusterState(snapshot(objects), NOW)
    pod = next(p for p in state.snapshot.pods if p.name == "p")
    assert not pod_fits_any_other_node(pod, state.nodes, state)
    state2 = ClusterState(snapshot(objects + [node_obj("roomy", cpu="8")]), NOW)
    pod2 = next(p for p in state2.snapshot.pods if p.name == "p")
    assert pod_fits_any_other_node(pod2, state2.nodes, state2)

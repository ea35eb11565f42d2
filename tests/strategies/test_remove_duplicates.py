"""RemoveDuplicates: every argument and algorithm step (1)-(5) of upstream v0.36, the limits, PDB
budgets, plan-awareness, and the seed story (a third node joins) together with LowNodeUtilization."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.records import Node
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import (
    DefaultEvictorArgs,
    LowNodeUtilizationArgs,
    Namespaces,
    RemoveDuplicatesArgs,
)
from kdesched.strategies import low_node_utilization
from kdesched.strategies.framework import ClusterState, Handle, PlannedEviction
from kdesched.strategies.remove_duplicates import SPEC, TargetNodes, pod_shape

from tests.builders import NOW, node_obj, pdb_obj, pod, pod_obj, snapshot
from tests.harness import run_strategy

ARGS = RemoveDuplicatesArgs()
ABC = [node_obj("a"), node_obj("b"), node_obj("c")]
AB = [node_obj("a"), node_obj("b")]
NOSCHED = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
CRITICAL = 2_000_000_000


def rs(name: str, node: str, owner: str = "web", **kw: Any) -> dict[str, Any]:
    """A ReplicaSet replica requesting 500m (the seed story's nginx)."""
    kw.setdefault("cpu", "500m")
    return pod_obj(name, node, owner_name=owner, **kw)


def replicas(node: str, names: str, owner: str = "web", **kw: Any) -> list[dict[str, Any]]:
    return [rs(n, node, owner, **kw) for n in names.split()]


def containers(*images: str) -> dict[str, Any]:
    return {"containers": [{"name": f"c{i}", "image": img} for i, img in enumerate(images)]}


def namespace_obj(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def with_owners(obj: dict[str, Any], *owners: tuple[str, str]) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": k, "name": n, "uid": f"{k}-{n}", "controller": i == 0}
        for i, (k, n) in enumerate(owners)]
    return obj


CASES = [
    # -- the basics and step (5) --------------------------------------------------------------
    ("no pods", ARGS, ABC, [], []),
    ("seed story: 2 of 3 replicas on a, node c joined -> one leaves a",
     ARGS, ABC, replicas("a", "p1 p2") + replicas("b", "p3"), ["p2"]),
    ("seed story before c joined: 2 nodes, upperAvg 2 -> nothing",
     ARGS, AB, replicas("a", "p1 p2") + replicas("b", "p3"), []),
    ("all on one node: upperAvg = ceil(4/2) = 2, evict dups[1:]",
     ARGS, AB, replicas("a", "p1 p2 p3 p4"), ["p3", "p4"]),
    ("upperAvg = ceil(7/3) = 3: 7 on a -> the last 4 go",
     ARGS, ABC, replicas("a", "p1 p2 p3 p4 p5 p6 p7"), ["p4", "p5", "p6", "p7"]),
    ("every node at its share -> nothing",
     ARGS, ABC, replicas("a", "p1 p2") + replicas("b", "p3 p4") + replicas("c", "p5"), []),
    ("two owners are handled independently",
     ARGS, ABC, replicas("a", "w1 w2") + replicas("b", "w3") + replicas("b", "d1 d2 d3", owner="db"),
     ["w2", "d2", "d3"]),
    ("terminal pods are not listed",
     ARGS, ABC, replicas("a", "p1") + [rs("done", "a", phase="Succeeded")] + replicas("b", "p3"), []),
    # -- step (1): what is listed ---------------------------------------------------------------
    ("owner-less pods are skipped even when the evict annotation lets them through the Filter",
     ARGS, AB, [pod_obj(n, "a", owner_kind=None, annotations={"descheduler.alpha.kubernetes.io/evict": ""})
                for n in ("bare1", "bare2", "bare3")], []),
    ("excludeOwnerKinds skips that owner kind",
     RemoveDuplicatesArgs(exclude_owner_kinds=("Job",)), AB,
     replicas("a", "j1 j2 j3", owner="batch", owner_kind="Job") + replicas("a", "p1 p2 p3"), ["p3"]),
    ("without excludeOwnerKinds Job pods are duplicates too",
     ARGS, AB, replicas("a", "j1 j2 j3", owner="batch", owner_kind="Job"), ["j3"]),
    ("namespaces include",
     RemoveDuplicatesArgs(namespaces=Namespaces(include=("prod",))), AB,
     replicas("a", "in1 in2 in3", namespace="prod") + replicas("a", "out1 out2 out3", namespace="dev"), ["in3"]),
    ("namespaces exclude",
     RemoveDuplicatesArgs(namespaces=Namespaces(exclude=("prod",))), AB,
     replicas("a", "in1 in2 in3", namespace="prod") + replicas("a", "out1 out2 out3", namespace="dev"), ["out3"]),
    ("pods the Filter rejects are neither duplicates nor counted (DaemonSet)",
     ARGS, AB, replicas("a", "ds1 ds2 ds3", owner="agent", owner_kind="DaemonSet"), []),
    ("non-evictable pods do not count in occurrence: 3 evictable on a, 2 critical on b -> upperAvg 2",
     ARGS, AB, replicas("a", "p1 p2 p3") + replicas("b", "x1 x2", priority=CRITICAL), ["p3"]),
    # -- steps (2)-(3): what a duplicate is -----------------------------------------------------
    ("same owner, different image: not duplicates",
     ARGS, AB, [rs("v1", "a", image="nginx:1.26"), rs("v2", "a", image="nginx:1.27"),
                rs("v3", "a", image="nginx:1.28")], []),
    ("images compared as a sorted list: [x, y] equals [y, x]",
     ARGS, AB, [rs("xy1", "a", spec_extra=containers("x", "y")), rs("yx", "a", spec_extra=containers("y", "x")),
                rs("xy2", "a", spec_extra=containers("x", "y"))], ["xy2"]),
    ("same name, different owner kind: not duplicates",
     ARGS, AB, [rs("r", "a", owner="web"), rs("s", "a", owner="web", owner_kind="StatefulSet"),
                rs("j", "a", owner="web", owner_kind="Job")], []),
    ("same owner name in another namespace: not duplicates",
     ARGS, AB, [rs("n1", "a", namespace="x"), rs("n2", "a", namespace="y"), rs("n3", "a", namespace="z")], []),
    ("two owner references: duplicates only of pods with the same two owners",
     ARGS, AB, [with_owners(rs("m1", "a"), ("ReplicaSet", "web"), ("Foo", "f")),
                with_owners(rs("m2", "a"), ("ReplicaSet", "web"), ("Foo", "f")),
                with_owners(rs("m3", "a"), ("ReplicaSet", "web"), ("Foo", "f")),
                rs("single", "a")], ["m3"]),
    # -- step (4): target nodes ------------------------------------------------------------------
    ("a NoSchedule taint the pods do not tolerate removes the node from the targets",
     ARGS, [node_obj("a"), node_obj("b"), node_obj("c", taints=NOSCHED)],
     replicas("a", "p1 p2") + replicas("b", "p3"), []),
    ("a NoExecute taint too",
     ARGS, [node_obj("a"), node_obj("b"), node_obj("c", taints=[{"key": "k", "effect": "NoExecute"}])],
     replicas("a", "p1 p2") + replicas("b", "p3"), []),
    ("a PreferNoSchedule taint does not",
     ARGS, [node_obj("a"), node_obj("b"), node_obj("c", taints=[{"key": "k", "effect": "PreferNoSchedule"}])],
     replicas("a", "p1 p2") + replicas("b", "p3"), ["p2"]),
    ("a tolerated taint keeps the node a target",
     ARGS, [node_obj("a"), node_obj("b"), node_obj("c", taints=NOSCHED)],
     replicas("a", "p1 p2", tolerations=TOLERATE) + replicas("b", "p3", tolerations=TOLERATE), ["p2"]),
    ("nodeSelector limits the targets",
     ARGS, [node_obj("a", labels={"pool": "x"}), node_obj("b", labels={"pool": "x"}), node_obj("c")],
     replicas("a", "p1 p2", node_selector={"pool": "x"}) + replicas("b", "p3", node_selector={"pool": "x"}), []),
    ("required node affinity limits the targets",
     ARGS, [node_obj("a", labels={"zone": "z1"}), node_obj("b", labels={"zone": "z1"}),
            node_obj("c", labels={"zone": "z2"})],
     replicas("a", "p1 p2", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}})
     + replicas("b", "p3"), []),
    ("a shape matching a single node does not count: targets {a, b} -> upperAvg ceil(5/2) = 3",
     ARGS, [node_obj("a", labels={"pool": "x"}), node_obj("b", labels={"pool": "x"}), node_obj("c"), node_obj("d")],
     replicas("a", "p1 p2 p3", node_selector={"pool": "x"})
     + replicas("c", "p4 p5", node_selector={"kubernetes.io/hostname": "c"}), []),
    ("fewer than two target nodes: the key is skipped",
     ARGS, AB, replicas("a", "p1 p2 p3 p4", node_selector={"kubernetes.io/hostname": "a"}), []),
    ("unschedulable nodes are targets too",
     ARGS, [node_obj("a"), node_obj("b"), node_obj("c", unschedulable=True)],
     replicas("a", "p1 p2") + replicas("b", "p3"), ["p2"]),
]


@pytest.mark.parametrize("_id, args, nodes, pods, expected", CASES, ids=[c[0] for c in CASES])
def test_remove_duplicates(_id: str, args: RemoveDuplicatesArgs, nodes: list[dict[str, Any]],
                           pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, nodes + pods).names == expected


def test_pre_eviction_filter_applies_while_listing() -> None:
    """namespaceLabelSelector (a PreEvictionFilter) hides the pods of other namespaces entirely."""
    objects = [*AB, namespace_obj("prod", {"env": "prod"}), namespace_obj("dev", {"env": "dev"}),
               *replicas("a", "in1 in2 in3", namespace="prod"), *replicas("a", "out1 out2 out3", namespace="dev")]
    evictor = DefaultEvictorArgs(namespace_label_selector=LabelSelector(match_labels=(("env", "prod"),)))
    assert run_strategy(SPEC, ARGS, objects, evictor_args=evictor).names == ["in3"]


def test_target_nodes_come_from_the_plugins_nodes() -> None:
    """Only the nodes the strategy is given count as targets (upstream passes the plugin's nodes)."""
    objects = ABC + replicas("a", "p1 p2") + replicas("b", "p3")
    assert run_strategy(SPEC, ARGS, objects, nodes=["a", "b"]).names == []
    assert run_strategy(SPEC, ARGS, objects, nodes=["a", "b", "c"]).names == ["p2"]


LIMITS = [
    ("node limit: next node", Limits(per_node=1),
     replicas("a", "p1 p2 p3 p4") + replicas("b", "q1 q2 q3", owner="db"), ["p3", "q3"]),
    ("total limit: stop", Limits(total=1),
     replicas("a", "p1 p2 p3 p4") + replicas("b", "q1 q2 q3", owner="db"), ["p3"]),
    ("namespace limit: continue with the next pod", Limits(per_namespace=1),
     replicas("a", "p1 p2 p3 p4") + replicas("b", "q1 q2 q3", owner="db", namespace="other"), ["p3", "q3"]),
]


@pytest.mark.parametrize("_id, limits, pods, expected", LIMITS, ids=[c[0] for c in LIMITS])
def test_limits(_id: str, limits: Limits, pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, ARGS, AB + pods, limits=limits).names == expected


def test_pdb_budget_refusal_moves_on() -> None:
    objects = AB + replicas("a", "p1 p2 p3 p4") + [pdb_obj("web", {"app": "web"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, ARGS, objects)
    assert result.names == ["p3"]
    assert [r.pod.name for r in result.refusals] == ["p4"]
    assert "PodDisruptionBudget default/web" in result.refusals[0].reason


def test_reason_names_the_owner_node_and_share() -> None:
    result = run_strategy(SPEC, ARGS, ABC + replicas("a", "p1 p2") + replicas("b", "p3"))
    assert result.evictions[0].reason == (
        "2 pods of ReplicaSet default/web on node a, 1 more than the even share of 1 "
        "(3 pods over 3 feasible nodes)")
    assert result.evictions[0].strategy == "RemoveDuplicates"


def plan_first(objects: list[dict[str, Any]], names: set[str]) -> tuple[ClusterState, Handle]:
    """A state in which an earlier strategy already planned the pods called ``names``."""
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    for p in state.snapshot.pods:
        if p.name in names:
            state.mark_planned(PlannedEviction(p, p.node_name, "Earlier", "test", "planned before"))
    return state, Handle(state, evictor, "test", SPEC.name)


def test_plan_aware_pod_planned_earlier_is_gone() -> None:
    state, handle = plan_first(ABC + replicas("a", "p1 p2") + replicas("b", "p3"), {"p2"})
    SPEC.run(ARGS, handle, state.nodes)
    assert [e.pod.name for e in state.planned] == ["p2"]  # only the earlier plan; nothing new


def test_seed_story_with_low_node_utilization_plans_exactly_one_eviction() -> None:
    """The default policy's balance plugins on the seed story: RemoveDuplicates moves one replica;
    LowNodeUtilization then sees it gone, finds every node below 20 % and evicts nothing."""
    objects = ABC + replicas("a", "nginx-1 nginx-2", owner="nginx") + replicas("b", "nginx-3", owner="nginx")
    state, handle = plan_first(objects, set())
    SPEC.run(ARGS, handle, state.nodes)
    lnu_args = LowNodeUtilizationArgs(thresholds={"cpu": 20, "memory": 20, "pods": 20},
                                      target_thresholds={"cpu": 50, "memory": 50, "pods": 50})
    low_node_utilization.SPEC.run(lnu_args, Handle(state, handle.evictor, "test", "LowNodeUtilization"), state.nodes)
    assert [(e.pod.name, e.node, e.strategy) for e in state.planned] == [("nginx-2", "a", "RemoveDuplicates")]
    assert state.usage("a")["cpu"] == 500


def test_shapes_are_hashed_once_per_run() -> None:
    """Equal (tolerations, affinity, nodeSelector) shapes share one node match; distinct ones do not."""
    targets = TargetNodes([Node.from_api(n) for n in ABC])
    a = pod("a", "a", tolerations=TOLERATE)
    b = pod("b", "b", tolerations=TOLERATE)
    c = pod("c", "c", node_selector={"kubernetes.io/hostname": "c"})
    assert pod_shape(a) == pod_shape(b) != pod_shape(c)
    assert targets.count([a, b]) == 3
    assert targets.count([c]) == 0  # a shape matching a single node does not count
    assert len(targets._shape_nodes) == 2

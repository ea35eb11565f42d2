"""HighNodeUtilization: every argument and algorithm step of upstream v0.36 (sources, destinations,
skip rules, ascending order, the available-capacity stop, evictionModes, evictableNamespaces),
limits, PDB budgets and plan-awareness.

Nodes are 4 CPU / 16Gi / 110 pods; thresholds are cpu 20 % (800m) unless a row says otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.policy.types import DefaultEvictorArgs, HighNodeUtilizationArgs, Namespaces
from kdesched.strategies.framework import ClusterState, Handle, PlannedEviction
from kdesched.strategies.high_node_utilization import SPEC

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot
from tests.harness import run_strategy


def hnu(thresholds: dict[str, float] | None = None, **kw: Any) -> HighNodeUtilizationArgs:
    return HighNodeUtilizationArgs(thresholds=thresholds or {"cpu": 20}, **kw)


def pods(node: str, count: int, prefix: str | None = None, cpu: str | None = "400m", **kw: Any) -> list[dict[str, Any]]:
    prefix = prefix if prefix is not None else node
    return [pod_obj(f"{prefix}{i}", node, cpu=cpu, owner_name=f"rs-{prefix}", **kw) for i in range(1, count + 1)]


A, B, C, D = node_obj("a"), node_obj("b"), node_obj("c"), node_obj("d")
GPU = {"nvidia.com/gpu": "4"}

CASES = [
    # -- skip rules --------------------------------------------------------------------------------
    ("no underutilized node", hnu(), [A, B], pods("a", 3) + pods("b", 3), []),
    ("all nodes underutilized", hnu(), [A, B], pods("a", 1) + pods("b", 1), []),
    ("#low <= numberOfNodes", hnu(number_of_nodes=1), [A, B], pods("a", 1) + pods("b", 5), []),
    ("#low > numberOfNodes", hnu(number_of_nodes=1), [A, B, C], pods("a", 1) + pods("b", 1) + pods("c", 5),
     ["a1", "b1"]),
    ("no destination: the only other node is unschedulable", hnu(),
     [A, node_obj("b", unschedulable=True)], pods("a", 1) + pods("b", 5), []),
    # -- sources and destinations -------------------------------------------------------------------
    ("the low node's pods go", hnu(), [A, B], pods("a", 2) + pods("b", 5), ["a1", "a2"]),
    ("an empty low node has nothing to move", hnu(), [A, B, C], pods("b", 5) + pods("c", 5), []),
    ("an unschedulable low node is a source", hnu(), [node_obj("a", unschedulable=True), B],
     pods("a", 2) + pods("b", 5), ["a1", "a2"]),
    ("an unschedulable busy node is not a destination, a schedulable one is", hnu(),
     [A, node_obj("b", unschedulable=True), C], pods("a", 1) + pods("b", 5) + pods("c", 5), ["a1"]),
    ("at the threshold is low (<=)", hnu(), [A, B], pods("a", 2) + pods("b", 3), ["a1", "a2"]),
    ("every thresholded resource must be low", hnu({"cpu": 20, "pods": 1}), [A, B],
     pods("a", 2) + pods("b", 5), []),
    ("unthresholded resources do not classify", hnu(), [A, B],
     pods("a", 1) + [pod_obj("mem", "a", cpu=None, memory="15Gi")] + pods("b", 5), ["a1", "mem"]),
    ("pods threshold", hnu({"pods": 20}), [node_obj("a", pods=10), node_obj("b", pods=10)],
     pods("a", 2, cpu=None) + pods("b", 5, cpu=None), ["a1", "a2"]),
    ("extended resource threshold", hnu({"nvidia.com/gpu": 25}),
     [node_obj("a", extra_allocatable=GPU), node_obj("b", extra_allocatable=GPU)],
     [pod_obj("g1", "a", spec_extra={"containers": [{"name": "c", "image": "cuda", "resources": {
         "requests": {"nvidia.com/gpu": "1"}}}]})]
     + [pod_obj(f"h{i}", "b", spec_extra={"containers": [{"name": "c", "image": "cuda", "resources": {
         "requests": {"nvidia.com/gpu": "1"}}}]}) for i in range(1, 4)], ["g1"]),
    # -- order and the available-capacity stop -------------------------------------------------------
    ("sources emptiest first; b (3800m used) has 200m room: d's 300m pod goes, then it is full",
     hnu(), [A, B, D], [pod_obj("a-600", "a", cpu="600m"), pod_obj("d-300", "d", cpu="300m")]
     + pods("b", 19, cpu="200m"), ["d-300"]),
    ("room for pods runs out (destination with 1 free slot)", hnu({"pods": 30}),
     [node_obj("a", pods=10), node_obj("b", pods=10)], pods("a", 3, cpu=None) + pods("b", 9, cpu=None), ["a1"]),
    ("priority low to high within a node", hnu(), [A, B],
     [pod_obj("hi", "a", cpu="100m", priority=10), pod_obj("lo", "a", cpu="100m", priority=1),
      pod_obj("nil", "a", cpu="100m")] + pods("b", 5), ["nil", "lo", "hi"]),
    # -- pod choice ---------------------------------------------------------------------------------
    ("evictionModes OnlyThresholdingResources: pods without a cpu request stay",
     hnu(eviction_modes=("OnlyThresholdingResources",)), [A, B],
     pods("a", 1) + pods("a", 1, "be", cpu=None, memory="1Gi") + pods("b", 5), ["a1"]),
    ("without evictionModes they go too", hnu(), [A, B],
     pods("a", 1) + pods("a", 1, "be", cpu=None, memory="1Gi") + pods("b", 5), ["a1", "be1"]),
    ("OnlyThresholdingResources: an init container's request counts",
     hnu(eviction_modes=("OnlyThresholdingResources",)), [A, B],
     [pod_obj("init", "a", cpu=None, spec_extra={"initContainers": [
         {"name": "i", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]})] + pods("b", 5), ["init"]),
    ("evictableNamespaces.exclude", hnu(evictable_namespaces=Namespaces(exclude=("kube-system",))), [A, B],
     pods("a", 1, "sys", namespace="kube-system") + pods("a", 1) + pods("b", 5), ["a1"]),
    ("non-evictable pods stay (DaemonSet)", hnu(), [A, B],
     pods("a", 1, "ds", owner_kind="DaemonSet") + pods("a", 1) + pods("b", 5), ["a1"]),
    ("destination taints not tolerated: skipped", hnu(),
     [A, node_obj("b", taints=[{"key": "k", "effect": "NoSchedule"}])], pods("a", 1) + pods("b", 5), []),
    ("destination taints tolerated: moved", hnu(),
     [A, node_obj("b", taints=[{"key": "k", "effect": "NoSchedule"}])],
     pods("a", 1, tolerations=[{"key": "k", "operator": "Exists"}]) + pods("b", 5), ["a1"]),
]


@pytest.mark.parametrize("_id, args, nodes, objs, expected", CASES, ids=[c[0] for c in CASES])
def test_high_node_utilization(_id: str, args: HighNodeUtilizationArgs, nodes: list[dict[str, Any]],
                               objs: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, nodes + objs).names == expected


@pytest.mark.parametrize("limits, expected", [
    (Limits(per_node=1), ["a1", "c1"]),
    (Limits(total=1), ["a1"]),
    (Limits(per_namespace=1), ["a1", "x1", "y1"]),
], ids=["node-limit-next-node", "total-limit-stop", "namespace-limit-next-pod"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objs = (pods("a", 2, cpu="100m") + pods("a", 1, "x", cpu="100m", namespace="x", priority=1)
            + pods("c", 1, "c", cpu="200m") + pods("c", 1, "y", cpu="200m", namespace="y", priority=1)
            + pods("b", 5))
    assert run_strategy(SPEC, hnu(), [A, B, C] + objs, limits=limits).names == expected


def test_pdb_refusal_moves_on() -> None:
    objs = pods("a", 3, cpu="100m") + pods("b", 5) + [pdb_obj("budget", {"app": "rs-a"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, hnu(), [A, B] + objs)
    assert result.names == ["a1"]
    assert [r.pod.name for r in result.refusals] == ["a2", "a3"]


def test_reason() -> None:
    result = run_strategy(SPEC, hnu({"cpu": 20, "pods": 20}), [A, B, C] + pods("a", 1) + pods("b", 5) + pods("c", 5))
    assert result.evictions[0].reason == (
        "node a is underutilized (cpu 10% <= 20%, pods 1% <= 20%); packing its pods onto 2 other node(s)")


def test_plan_aware_a_node_emptied_earlier_is_low() -> None:
    """b has 3 pods (30 %) in the snapshot, 2 of them already planned: HNU sees 10 % and empties it."""
    state = ClusterState(snapshot([A, B, *pods("a", 5), *pods("b", 3)]), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    for p in state.snapshot.pods:
        if p.name in ("b1", "b2"):
            state.mark_planned(PlannedEviction(p, p.node_name, "Earlier", "test", "planned before"))
    SPEC.run(hnu(), Handle(state, evictor, "test", SPEC.name), state.nodes)
    assert [(e.pod.name, e.strategy) for e in state.planned] == [("b1", "Earlier"), ("b2", "Earlier"),
                                                                 ("b3", "HighNodeUtilization")]

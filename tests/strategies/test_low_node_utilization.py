"""LowNodeUtilization: every argument and algorithm step (1)-(6) of upstream v0.36, the limits,
PDB budgets, plan-awareness; metrics sources without readings fail (the metrics modes have their
own file, test_low_node_utilization_metrics.py).

Nodes are 4 CPU / 16Gi / 110 pods unless a row says otherwise; pods request 400m (10 %) each, so
"8 pods" means 80 % cpu."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import DefaultEvictorArgs, LowNodeUtilizationArgs, MetricsUtilization, Namespaces
from kdesched.strategies.framework import ClusterState, Handle, PlannedEviction, StrategyError
from kdesched.strategies.low_node_utilization import SPEC

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot
from tests.harness import run_strategy

CRITICAL = 2_000_000_000


def lnu(low: dict[str, float] | None = None, high: dict[str, float] | None = None, **kw: Any) -> LowNodeUtilizationArgs:
    return LowNodeUtilizationArgs(thresholds=low or {"cpu": 20}, target_thresholds=high or {"cpu": 50}, **kw)


def busy(node: str, count: int, prefix: str | None = None, cpu: str = "400m", **kw: Any) -> list[dict[str, Any]]:
    """``count`` pods of ``cpu`` each on ``node``, named ``<prefix>1..<prefix>count``."""
    prefix = prefix if prefix is not None else node
    return [pod_obj(f"{prefix}{i}", node, cpu=cpu, owner_name=f"rs-{prefix}", **kw) for i in range(1, count + 1)]


def gpu_pod(name: str, node: str, gpus: int = 1) -> dict[str, Any]:
    return pod_obj(name, node, spec_extra={"containers": [
        {"name": "c", "image": "cuda:12", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]})


def namespace_obj(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


A, B, C, D = node_obj("a"), node_obj("b"), node_obj("c"), node_obj("d")
GPU = {"nvidia.com/gpu": "4"}

CASES = [
    # -- step 4: when nothing happens ------------------------------------------------------------
    ("no pods: every node underutilized", lnu(), [A, B], [], []),
    ("seed story after RemoveDuplicates: all nodes below 20 %",
     lnu({"cpu": 20, "memory": 20, "pods": 20}, {"cpu": 50, "memory": 50, "pods": 50}), [A, B, C],
     busy("a", 1, "n", cpu="500m") + busy("b", 1, "m", cpu="500m"), []),
    ("no node over the target", lnu(), [A, B], busy("a", 5), []),
    ("no node underutilized", lnu(), [A, B], busy("a", 8) + busy("b", 3), []),
    ("#under <= numberOfNodes", lnu(number_of_nodes=1), [A, B], busy("a", 8), []),
    ("#under > numberOfNodes", lnu(number_of_nodes=1), [A, B, C], busy("a", 8), ["a1", "a2", "a3"]),
    ("an unschedulable empty node is not underutilized", lnu(),
     [A, node_obj("b", unschedulable=True)], busy("a", 8), []),
    # -- steps 5-6: how far it goes ---------------------------------------------------------------
    ("evict until the node is at its cap: 3200m -> 2000m", lnu(), [A, B], busy("a", 8), ["a1", "a2", "a3"]),
    ("stop when the total available reaches 0: b has 2000-1200 = 800m room",
     lnu({"cpu": 30}, {"cpu": 50}), [A, B], busy("a", 8) + busy("b", 3), ["a1", "a2"]),
    ("cap = int(target% x capacity): 33 % of 4000m = 1320m", lnu({"cpu": 20}, {"cpu": 33}), [A, B],
     busy("a", 4), ["a1"]),
    ("the room of every underutilized node adds up", lnu({"cpu": 20}, {"cpu": 50}), [A, B, C],
     busy("a", 10) + busy("b", 1, cpu="700m") + busy("c", 1, cpu="700m"), ["a1", "a2", "a3", "a4", "a5"]),
    ("... and with one of them only 1300m of room: 4 evictions", lnu({"cpu": 20}, {"cpu": 50}), [A, B],
     busy("a", 10) + busy("b", 1, cpu="700m"), ["a1", "a2", "a3", "a4"]),
    ("over nodes busiest first: d (3600m) before a (3200m); 1300m of room runs out on d",
     lnu(), [A, B, D], busy("a", 8) + busy("d", 9) + busy("b", 1, cpu="700m"), ["d1", "d2", "d3", "d4"]),
    # -- step 1: resources -------------------------------------------------------------------------
    ("pods threshold (10-pod nodes): 8 pods -> cap int(50 % x 10) = 5",
     lnu({"pods": 20}, {"pods": 50}), [node_obj("a", pods=10), node_obj("b", pods=10)],
     busy("a", 8, cpu=None), ["a1", "a2", "a3"]),
    ("room for pods runs out: b (2 of 10 pods) has 3 slots up to 50 %",
     lnu({"pods": 20}, {"pods": 50}), [node_obj("a", pods=10), node_obj("b", pods=10)],
     busy("a", 10, cpu=None) + busy("b", 2, cpu=None), ["a1", "a2", "a3"]),
    ("extended resource nvidia.com/gpu: 4 of 4 used -> cap 2",
     lnu({"nvidia.com/gpu": 25}, {"nvidia.com/gpu": 50}),
     [node_obj("a", extra_allocatable=GPU), node_obj("b", extra_allocatable=GPU)],
     [gpu_pod(f"g{i}", "a") for i in range(1, 5)], ["g1", "g2"]),
    ("a node without the extended resource counts as 0 % and adds no room",
     lnu({"nvidia.com/gpu": 25}, {"nvidia.com/gpu": 50}), [node_obj("a", extra_allocatable=GPU), node_obj("b")],
     [gpu_pod(f"g{i}", "a") for i in range(1, 5)], []),
    ("unthresholded resources do not classify: b's memory is irrelevant", lnu(), [A, B],
     busy("a", 8) + [pod_obj("mem", "b", cpu=None, memory="15Gi")], ["a1", "a2", "a3"]),
    ("usage counts non-evictable pods; only evictable ones go", lnu(), [A, B],
     busy("a", 5, "ds", owner_kind="DaemonSet") + busy("a", 3), ["a1", "a2", "a3"]),
    ("terminal pods use nothing", lnu(), [A, B], busy("a", 4) + busy("a", 4, "done", phase="Succeeded"), []),
    # -- step 2: deviation thresholds --------------------------------------------------------------
    ("deviation: avg 50 % +-10 -> a (90 %) is over, c (10 %) under, cap 60 % = 2400m",
     lnu({"cpu": 10}, {"cpu": 10}, use_deviation_thresholds=True), [A, B, C],
     busy("a", 9) + busy("b", 5) + busy("c", 1), ["a1", "a2", "a3"]),
    ("deviation: low clamps at 0 %, so only empty nodes are under",
     lnu({"cpu": 50}, {"cpu": 10}, use_deviation_thresholds=True), [A, B, C],
     busy("a", 9) + busy("b", 1), ["a1", "a2", "a3", "a4", "a5"]),
    ("deviation: a node without the resource is left out of the average (50 %, not 33 %) -> cap 2 GPUs",
     lnu({"nvidia.com/gpu": 10}, {"nvidia.com/gpu": 10}, use_deviation_thresholds=True),
     [node_obj("a", extra_allocatable=GPU), node_obj("b", extra_allocatable=GPU), node_obj("c")],
     [gpu_pod(f"g{i}", "a") for i in range(1, 5)], ["g1", "g2"]),
    ("deviation: all equal -> nobody over", lnu({"cpu": 10}, {"cpu": 10}, use_deviation_thresholds=True),
     [A, B], busy("a", 5) + busy("b", 5), []),
    # -- step 6: which pods -------------------------------------------------------------------------
    ("priority low to high: nil, then lower priority",
     lnu(), [A, B],
     [pod_obj("hi", "a", cpu="1200m", priority=100), pod_obj("lo", "a", cpu="1200m", priority=1),
      pod_obj("nil", "a", cpu="1200m")], ["nil", "lo"]),
    ("same priority: BestEffort, then Burstable, then Guaranteed",
     lnu({"pods": 1}, {"pods": 2}), [node_obj("a", pods=100), node_obj("b", pods=100)],
     [pod_obj("g", "a", cpu="100m", limits={"cpu": "100m"}), pod_obj("bu", "a", cpu="100m"),
      pod_obj("be", "a", cpu=None)], ["be"]),
    ("evictableNamespaces.exclude skips those pods", lnu(evictable_namespaces=Namespaces(exclude=("kube-system",))),
     [A, B], busy("a", 4, "sys", namespace="kube-system") + busy("a", 4), ["a1", "a2", "a3"]),
    ("evictionLimits.node caps evictions per node", lnu(eviction_limits_node=1), [A, B, D],
     busy("a", 8) + busy("d", 8), ["a1", "d1"]),
    ("evictionLimits.node 0: nothing", lnu(eviction_limits_node=0), [A, B], busy("a", 8), []),
    # -- step 6: destination taints (needs #tolerations >= #taints) --------------------------------
    ("a pod that tolerates no underutilized node's taints is skipped", lnu(),
     [A, node_obj("b", taints=[{"key": "k", "effect": "NoSchedule"}])], busy("a", 8), []),
    ("any effect counts, PreferNoSchedule too (a NoSchedule toleration does not cover it)", lnu(),
     [A, node_obj("b", taints=[{"key": "k", "effect": "PreferNoSchedule"}])],
     busy("a", 8, tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]), []),
    ("a pod tolerating the taint may move", lnu(),
     [A, node_obj("b", taints=[{"key": "k", "effect": "NoSchedule"}])],
     busy("a", 6) + busy("a", 2, "tol", tolerations=[{"key": "k", "operator": "Exists"}]), ["tol1", "tol2"]),
    ("one wildcard toleration vs two taints: fewer tolerations than taints -> skipped", lnu(),
     [A, node_obj("b", taints=[{"key": "k", "effect": "NoSchedule"}, {"key": "j", "effect": "NoSchedule"}])],
     busy("a", 8, tolerations=[{"operator": "Exists"}]), []),
    ("one untainted underutilized node is enough", lnu(),
     [A, B, node_obj("c", taints=[{"key": "k", "effect": "NoSchedule"}])], busy("a", 8), ["a1", "a2", "a3"]),
]


@pytest.mark.parametrize("_id, args, nodes, pods, expected", CASES, ids=[c[0] for c in CASES])
def test_low_node_utilization(_id: str, args: LowNodeUtilizationArgs, nodes: list[dict[str, Any]],
                              pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, nodes + pods).names == expected


def test_pre_eviction_filter_is_applied_per_pod() -> None:
    objects = [A, B, namespace_obj("prod", {"env": "prod"}), namespace_obj("dev", {"env": "dev"}),
               *busy("a", 4, "dev", namespace="dev"), *busy("a", 4, "prod", namespace="prod")]
    evictor = DefaultEvictorArgs(namespace_label_selector=LabelSelector(match_labels=(("env", "prod"),)))
    assert run_strategy(SPEC, lnu(), objects, evictor_args=evictor).names == ["prod1", "prod2", "prod3"]


LIMITS = [
    ("node limit: next node", Limits(per_node=1), ["a1", "d1"]),
    ("total limit: stop", Limits(total=2), ["a1", "a2"]),
    ("namespace limit: next pod", Limits(per_namespace=1), ["a1", "x1", "d1"]),
]


@pytest.mark.parametrize("_id, limits, expected", LIMITS, ids=[c[0] for c in LIMITS])
def test_limits(_id: str, limits: Limits, expected: list[str]) -> None:
    # a: 3200m + 400m in ns "other" (x1, evicted after a's nil-priority pods); d: 2800m in ns "third".
    pods = busy("a", 8) + busy("a", 1, "x", namespace="other", priority=1) + busy("d", 7, namespace="third")
    assert run_strategy(SPEC, lnu(), [A, B, C, D] + pods, limits=limits).names == expected


def test_pdb_refusal_is_not_counted_and_moves_on() -> None:
    pods = busy("a", 8) + [pdb_obj("budget", {"app": "rs-a"}, disruptions_allowed=2)]
    result = run_strategy(SPEC, lnu(), [A, B] + pods)
    assert result.names == ["a1", "a2"]
    assert [r.pod.name for r in result.refusals] == [f"a{i}" for i in range(3, 9)]
    assert result.state.usage("a")["cpu"] == 2400


def test_reason_says_which_node_and_resources() -> None:
    result = run_strategy(SPEC, lnu({"cpu": 20, "pods": 20}, {"cpu": 50, "pods": 50}), [A, B, *busy("a", 8)])
    assert result.evictions[0].reason == (
        "node a is above the target utilization (cpu 80% > 50%); 1 underutilized node(s) can take its pods (b)")


def test_plan_aware_usage_excludes_pods_planned_earlier() -> None:
    """a is at 80 % in the snapshot, but an earlier strategy already planned 2 of its pods: LNU
    sees 60 % and evicts only one more."""
    state = ClusterState(snapshot([A, B, *busy("a", 8)]), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    for p in state.snapshot.pods[:2]:
        state.mark_planned(PlannedEviction(p, p.node_name, "Earlier", "test", "planned before"))
    SPEC.run(lnu(), Handle(state, evictor, "test", SPEC.name), state.nodes)
    assert [(e.pod.name, e.strategy) for e in state.planned] == [("a1", "Earlier"), ("a2", "Earlier"),
                                                                 ("a3", "LowNodeUtilization")]


@pytest.mark.parametrize("metrics, message", [
    (MetricsUtilization(source="Prometheus", prometheus_query="q"), "source Prometheus .*no query result was given"),
    (MetricsUtilization(source="KubernetesMetrics"), "source KubernetesMetrics: no metrics.k8s.io readings"),
    (MetricsUtilization(metrics_server=True), "source KubernetesMetrics: no metrics.k8s.io readings"),
], ids=["prometheus", "kubernetes-metrics", "deprecated-metricsServer"])
def test_metrics_sources_without_readings_fail(metrics: MetricsUtilization, message: str) -> None:
    """Metrics sources are supported (tests/strategies/test_low_node_utilization_metrics.py); with
    no readings at all the strategy fails naming the source, and never falls back to requests."""
    with pytest.raises(StrategyError, match=message):
        run_strategy(SPEC, lnu(metrics_utilization=metrics), [A, B] + busy("a", 8))


def test_empty_metrics_block_balances_on_requests() -> None:
    assert run_strategy(SPEC, lnu(metrics_utilization=MetricsUtilization()), [A, B] + busy("a", 8)).names == [
        "a1", "a2", "a3"]

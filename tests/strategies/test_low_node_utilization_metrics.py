"""LowNodeUtilization on measured usage (``metricsUtilization``), hand-computed against upstream.

The upstream cases are those of ``pkg/framework/plugins/nodeutilization/lownodeutilization_test.go``
(``TestLowNodeUtilization`` rows with ``nodemetricses``/``podmetricses``, and
``TestLowNodeUtilizationWithPrometheusMetrics``), rebuilt with the same nodes (4000m cpu, 3000
bytes of memory, 9 or 10 pods), pods (400m requests) and readings; each expectation is upstream's
``expectedPodsWithMetricsEvicted`` / ``expectedPodsEvicted``, with the arithmetic in the comment.
Readings go through the same parsers as ``simulate --usage`` files and live reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.usage import (
    MetricsReadings,
    Usage,
    parse_node_metrics_list,
    parse_pod_metrics_list,
    parse_prometheus_vector,
)
from kdesched.policy.types import DefaultEvictorArgs, LowNodeUtilizationArgs, MetricsUtilization, Namespaces
from kdesched.strategies.framework import ClusterState, Handle, PlannedEviction, StrategyError
from kdesched.strategies.low_node_utilization import SPEC

from tests.builders import NOW, node_obj, pod_obj, snapshot, ts
from tests.harness import run_strategy

CRITICAL = 2_000_000_000
KM = MetricsUtilization(source="KubernetesMetrics")
QUERY = "instance:node_cpu:rate:sum"
PROM = MetricsUtilization(source="Prometheus", prometheus_query=QUERY)


def upstream_node(name: str, pods: int, **kw: Any) -> dict[str, Any]:
    """upstream ``test.BuildTestNode(name, 4000, 3000, pods)``."""
    return node_obj(name, cpu="4", memory="3000", pods=pods, **kw)


def rs(name: str, node: str, **kw: Any) -> dict[str, Any]:
    return pod_obj(name, node, cpu="400m", owner_name="rs-" + node, **kw)


def upstream_pods(evictable_namespace: str = "default") -> list[dict[str, Any]]:
    """p1..p5 evictable on n1; p6 (DaemonSet), p7 (local storage), p8 (system-critical) not; p9 on n2."""
    return [
        *(rs(f"p{i}", "n1", namespace=evictable_namespace) for i in range(1, 6)),
        pod_obj("p6", "n1", cpu="400m", owner_kind="DaemonSet", owner_name="ds"),
        rs("p7", "n1", volumes=[{"name": "sample", "emptyDir": {"sizeLimit": "10"}}]),
        rs("p8", "n1", namespace="kube-system", priority=CRITICAL),
        rs("p9", "n2"),
    ]


NODES = [upstream_node("n1", 9), upstream_node("n2", 10), upstream_node("n3", 10, unschedulable=True)]


def node_metrics(**cpu: int) -> dict[str, Any]:
    """A NodeMetricsList: ``n1=3201`` is 3201m cpu, memory 0 (upstream ``BuildNodeMetrics(n, cpu, 0)``)."""
    return {"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "items": [
        {"metadata": {"name": name}, "timestamp": ts(), "window": "20s", "usage": {"cpu": f"{m}m", "memory": "0"}}
        for name, m in cpu.items()]}


def pod_metrics(pods: dict[str, int], namespace: str = "default") -> dict[str, Any]:
    return {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "items": [
        {"metadata": {"name": name, "namespace": namespace}, "timestamp": ts(), "window": "20s",
         "containers": [{"name": "c", "usage": {"cpu": f"{m}m", "memory": "0"}}]} for name, m in pods.items()]}


def km_usage(nodes: dict[str, int], pods: dict[str, int] | None = None, namespace: str = "default") -> Usage:
    pods = pods if pods is not None else {f"p{i}": 401 for i in range(1, 6)}
    return Usage(metrics=MetricsReadings(nodes=parse_node_metrics_list(node_metrics(**nodes)),
                                         pods=parse_pod_metrics_list(pod_metrics(pods, namespace)),
                                         pods_read=True, source="test"))


def lnu(low: dict[str, float], high: dict[str, float], metrics: MetricsUtilization = KM,
        **kw: Any) -> LowNodeUtilizationArgs:
    return LowNodeUtilizationArgs(thresholds=low, target_thresholds=high, metrics_utilization=metrics, **kw)


CPU_PODS = ({"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50})
CPU = ({"cpu": 30}, {"cpu": 50})


# --------------------------------------------------------------------------- KubernetesMetrics

def test_without_priorities_evicts_four_on_measured_usage() -> None:
    """Upstream "without priorities": n1 3201m (80 %) and 9/9 pods is over; n2 401m (10 %), 1/10
    pods is under; n3 is unschedulable. Available on n2: cpu int(0.5*4000)=2000-401=1599, pods
    5-1=4, memory 3000-0. Each eviction frees 401m and a pod: 1198/3, 797/2, 396/1, -5/0 -> stop
    after 4 (p1..p4, lowest priority first, all equal: snapshot order)."""
    result = run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(), usage=km_usage({"n1": 3201, "n2": 401,
                                                                                          "n3": 11}))
    assert result.names == ["p1", "p2", "p3", "p4"]
    assert result.evictions[0].reason.endswith("on measured usage, KubernetesMetrics; 1 underutilized node(s) "
                                               "can take its pods (n2)")


def test_no_evictable_pods() -> None:
    """Upstream "no evictable pods": n1's pods are a DaemonSet's, local storage, critical: none moves."""
    pods = [pod_obj(f"p{i}", "n1", cpu="400m", owner_kind="DaemonSet", owner_name="ds") for i in range(1, 5)]
    pods += [rs("p9", "n2")]
    result = run_strategy(SPEC, lnu(*CPU_PODS), NODES + pods, usage=km_usage({"n1": 2401, "n2": 401, "n3": 10}))
    assert result.names == []


def test_excluded_namespace() -> None:
    """Upstream "without priorities, but excluding namespaces": p1..p5 in namespace1, excluded."""
    args = lnu(*CPU_PODS, evictable_namespaces=Namespaces(exclude=("namespace1",)))
    result = run_strategy(SPEC, args, NODES + upstream_pods("namespace1"),
                          usage=km_usage({"n1": 3201, "n2": 401, "n3": 11}, namespace="namespace1"))
    assert result.names == []


def test_stop_when_cpu_capacity_is_depleted() -> None:
    """Upstream "without priorities stop when cpu capacity is depleted" (n3 measured 0): 4."""
    result = run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(),
                          usage=km_usage({"n1": 3201, "n2": 401, "n3": 0}))
    assert result.names == ["p1", "p2", "p3", "p4"]


def test_usage_not_requests_decides() -> None:
    """Requests make n1 80 % busy and n2 10 %; measured, n1 uses 1000m (25 %): no node is over the
    50 % cpu target, so nothing moves (on requests, 3200m -> 2000m: 3 pods would)."""
    usage = km_usage({"n1": 1000, "n2": 401, "n3": 11})
    assert run_strategy(SPEC, lnu(*CPU), NODES + upstream_pods(), usage=usage).names == []
    assert run_strategy(SPEC, lnu(*CPU, metrics=MetricsUtilization()), NODES + upstream_pods()).names == [
        "p1", "p2", "p3"]


def test_eviction_frees_measured_pod_usage() -> None:
    """p1 measured at 1200m: after it n1 is 3201-1200=2001m > cap 2000m and n2 has 1599-1200=399m
    left, so p2 (401m) goes too: 1600m, pods 7 > cap 4 still; available -2m -> stop after 2."""
    pods = {"p1": 1200, **{f"p{i}": 401 for i in range(2, 6)}}
    result = run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(),
                          usage=km_usage({"n1": 3201, "n2": 401, "n3": 11}, pods))
    assert result.names == ["p1", "p2"]


def test_pod_without_reading_is_skipped() -> None:
    """Upstream skips a pod whose PodMetrics cannot be read; p1 and p2 have none."""
    pods = {f"p{i}": 401 for i in range(3, 6)}
    result = run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(),
                          usage=km_usage({"n1": 3201, "n2": 401, "n3": 11}, pods))
    assert result.names == ["p3", "p4", "p5"]


def test_deprecated_metrics_server_means_kubernetes_metrics() -> None:
    result = run_strategy(SPEC, lnu(*CPU_PODS, metrics=MetricsUtilization(metrics_server=True)),
                          NODES + upstream_pods(), usage=km_usage({"n1": 3201, "n2": 401, "n3": 11}))
    assert result.names == ["p1", "p2", "p3", "p4"]


def test_missing_node_reading_fails_the_strategy() -> None:
    """Never half the data: n2 has no NodeMetrics -> StrategyError naming it, nothing evicted."""
    with pytest.raises(StrategyError, match=r"no NodeMetrics for node\(s\) n2 in test; not deciding on part of "
                                            r"the cluster \(2 of 3 nodes measured\)"):
        run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(), usage=km_usage({"n1": 3201, "n3": 11}))


def test_readings_that_could_not_be_taken_fail_the_strategy() -> None:
    usage = Usage(metrics=MetricsReadings(source="https://api", error="metrics.k8s.io is not served (404)"))
    with pytest.raises(StrategyError, match=r"KubernetesMetrics: metrics.k8s.io is not served \(404\)"):
        run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(), usage=usage)


def test_node_readings_without_pod_readings_fail() -> None:
    usage = Usage(metrics=MetricsReadings(nodes=parse_node_metrics_list(node_metrics(n1=3201, n2=401, n3=1)),
                                          source="nodes.json"))
    with pytest.raises(StrategyError, match=r"no PodMetrics were given \(nodes.json\)"):
        run_strategy(SPEC, lnu(*CPU_PODS), NODES + upstream_pods(), usage=usage)


def test_extended_resource_threshold_is_not_measured() -> None:
    """Upstream: "unable to find nvidia.com/gpu resource for collected node metric"."""
    with pytest.raises(StrategyError, match="has no 'nvidia.com/gpu'"):
        run_strategy(SPEC, lnu({"nvidia.com/gpu": 10}, {"nvidia.com/gpu": 50}), NODES + upstream_pods(),
                     usage=km_usage({"n1": 3201, "n2": 401, "n3": 11}))


def test_young_node_counts_at_its_requests_on_the_event_path() -> None:
    """n2 was created 60 s ago and measures 0m, but the scheduler already put 8 pods of 400m on it
    (3200m requested, 80 %). With the event path's rule (youngNodeSeconds 300) it counts at 80 %:
    not underutilized, so nothing moves to it. Without the rule (parity path) it looks empty and
    takes pods until its free pod slots (10 - 8) run out: 2."""
    young = node_obj("n2", cpu="4", memory="3000", pods=10)
    young["metadata"]["creationTimestamp"] = ts(-60)
    nodes = [upstream_node("n1", 9), young]
    pods = [rs(f"p{i}", "n1") for i in range(1, 6)] + [rs(f"q{i}", "n2") for i in range(1, 9)]
    measured = km_usage({"n1": 3201, "n2": 0})
    assert run_strategy(SPEC, lnu(*CPU), nodes + pods, usage=measured).names == ["p1", "p2"]
    event = Usage(metrics=measured.metrics, young_node_seconds=300)
    assert run_strategy(SPEC, lnu(*CPU), nodes + pods, usage=event).names == []
    old = Usage(metrics=measured.metrics, young_node_seconds=30)  # 60 s old: no longer young
    assert run_strategy(SPEC, lnu(*CPU), nodes + pods, usage=old).names == ["p1", "p2"]


# --------------------------------------------------------------------------- Prometheus


def prom(values: dict[str, float], query: str = "") -> Usage:
    doc = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": QUERY, "instance": n}, "value": [1700000000.0, repr(v)]} for n, v in values.items()]}}
    return Usage(prometheus=(parse_prometheus_vector(doc, query=query, source="prom.json"),))


UPSTREAM_SAMPLES = {"n1": 0.5695757575757561, "n2": 0.4245454545454522, "n3": 0.20381818181818104}
PROM_NODES = [upstream_node("n1", 9), upstream_node("n2", 10), upstream_node("n3", 10)]
NODE_FIT = DefaultEvictorArgs(node_fit=True)  # as upstream's test handle


@pytest.mark.parametrize("args, samples, expected", [
    # n1 int(56.96)=56 > 50 over; n2 42 fine; n3 20 <= 30 under; no per-pod value: one eviction
    (lnu({"MetricResource": 30}, {"MetricResource": 50}, PROM), UPSTREAM_SAMPLES, ["p1"]),
    # ... with more evictions: evictionLimits.node 3 -> up to 3 from n1
    (lnu({"MetricResource": 30}, {"MetricResource": 50}, PROM, eviction_limits_node=3), UPSTREAM_SAMPLES,
     ["p1", "p2", "p3"]),
    # ... with deviation 5/5, limit 2: avg (56+42+20)/3 = 39.3 -> low 34.3, high 44.3: n1 over, n3 under
    (lnu({"MetricResource": 5}, {"MetricResource": 5}, PROM, eviction_limits_node=2, use_deviation_thresholds=True),
     UPSTREAM_SAMPLES, ["p1", "p2"]),
    # ... and deviation thresholds 10/10 on 1, 0.5, 0: avg 50 -> low 40, high 60: n1 over, n3 under; one
    (lnu({"MetricResource": 10}, {"MetricResource": 10}, PROM, use_deviation_thresholds=True),
     {"n1": 1, "n2": 0.5, "n3": 0}, ["p1"]),
], ids=["query", "query-more-evictions", "query-deviation", "query-deviation-thresholds"])
def test_prometheus_upstream_cases(args: LowNodeUtilizationArgs, samples: dict[str, float],
                                   expected: list[str]) -> None:
    result = run_strategy(SPEC, args, PROM_NODES + upstream_pods(), usage=prom(samples), evictor_args=NODE_FIT)
    assert result.names == expected
    assert f"on Prometheus query '{QUERY}'" in result.evictions[0].reason


def test_prometheus_live_result_of_the_same_query_wins_over_a_file() -> None:
    both = Usage(prometheus=prom({"n1": 0.2, "n2": 0.2, "n3": 0.2}, query=QUERY).prometheus
                 + prom(UPSTREAM_SAMPLES).prometheus)
    args = lnu({"MetricResource": 30}, {"MetricResource": 50}, PROM)
    assert run_strategy(SPEC, args, PROM_NODES + upstream_pods(), usage=both).names == []


@pytest.mark.parametrize("samples, message", [
    ({"n1": 0.5, "n2": 0.4}, (r"has no sample for node\(s\) n3 \(label instance\); not deciding on part of "
                              r"the cluster \(2 of 3 nodes measured\)")),
    ({**UPSTREAM_SAMPLES, "n2": 1.5}, r"the sample for n2 has value 1.5, outside \[0, 1\]"),
    ({**UPSTREAM_SAMPLES, "other": -0.1}, r"the sample for other has value -0.1"),
], ids=["node-missing", "above-one", "negative-for-another-node"])
def test_prometheus_bad_results_fail_the_strategy(samples: dict[str, float], message: str) -> None:
    args = lnu({"MetricResource": 30}, {"MetricResource": 50}, PROM)
    with pytest.raises(StrategyError, match=message):
        run_strategy(SPEC, args, PROM_NODES + upstream_pods(), usage=prom(samples))


def test_prometheus_two_samples_for_one_node_fail() -> None:
    doc = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": n, "cpu": c}, "value": [1, "0.5"]} for n in ("n1", "n2", "n3") for c in ("0", "1")]}}
    usage = Usage(prometheus=(parse_prometheus_vector(doc, source="prom.json"),))
    with pytest.raises(StrategyError, match=r"more than one sample for node\(s\) n1, n2, n3"):
        run_strategy(SPEC, lnu({"MetricResource": 30}, {"MetricResource": 50}, PROM), PROM_NODES, usage=usage)


def test_prometheus_young_node_counts_at_its_requested_share() -> None:
    """n3 is 60 s old and measured at 0.2 (20 %: under 30), but its pods request 1600m of 4000m =
    40 %: on the event path it counts at 40 %, not underutilized -> no destination, nothing moves."""
    young = upstream_node("n3", 10)
    young["metadata"]["creationTimestamp"] = ts(-60)
    pods = upstream_pods() + [rs(f"y{i}", "n3") for i in range(1, 5)]
    args = lnu({"MetricResource": 30}, {"MetricResource": 50}, PROM)
    assert run_strategy(SPEC, args, PROM_NODES[:2] + [young] + pods, usage=prom(UPSTREAM_SAMPLES)).names == ["p1"]
    event = Usage(prometheus=prom(UPSTREAM_SAMPLES).prometheus, young_node_seconds=300)
    assert run_strategy(SPEC, args, PROM_NODES[:2] + [young] + pods, usage=event).names == []


def test_plan_aware_kubernetes_metrics() -> None:
    """Pods planned by an earlier strategy of the run no longer run on n1: their readings are taken
    off (kdesched, as for requests). p1, p2 planned: n1 3201-802=2399m, 6 pods. p3: n1 1998m (under
    the 2000m cap) but 5 pods > cap 4, go on; p4: 1597m, 4 pods: at its cap -> stop after 2."""
    snap = snapshot(NODES + upstream_pods())
    state = ClusterState(replace(snap, actual_usage=km_usage({"n1": 3201, "n2": 401, "n3": 11})), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    for p in state.snapshot.pods[:2]:
        state.mark_planned(PlannedEviction(p, p.node_name, "Earlier", "test", "planned before"))
    SPEC.run(lnu(*CPU_PODS), Handle(state, evictor, "test", SPEC.name), state.nodes)
    assert [e.pod.name for e in state.planned if e.strategy == SPEC.name] == ["p3", "p4"]

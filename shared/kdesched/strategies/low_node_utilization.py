"""LowNodeUtilization (Balance, upstream v0.36): move pods off overutilized nodes while there is
room on underutilized ones.

Why: after a node joins or recovers, the scheduler only places *new* pods on it; this strategy
frees room on the busiest nodes so the evicted pods land on the idle ones. kdesched runs it on
``dev.kdesched.node.added`` / ``dev.kdesched.node.ready`` (the moment it matters) instead of
waiting for a timer.

What "utilization" is depends on ``metricsUtilization`` (upstream
``pkg/framework/plugins/nodeutilization/lownodeutilization.go`` and ``usageclients.go``):

* none (the default): the pods' *requests*, from the plan-aware ``ClusterState.usage``;
* ``source: KubernetesMetrics`` (or the deprecated ``metricsServer: true``): each node's
  measured cpu and memory (``NodeMetrics``), ``pods`` = its pod count; an eviction frees the
  pod's measured usage (``PodMetrics``, summed over its containers), and a pod without a reading
  is skipped;
* ``source: Prometheus``: one sample per node (its ``instance`` label), a fraction in [0, 1]
  turned into the percentage of the single resource ``MetricResource`` (``int(value*100)`` of a
  capacity of 100). No pod has a value, so an eviction frees nothing that can be counted: one
  pod per overutilized node, or up to ``evictionLimits.node`` when that is set.

Usage comes from ``snapshot.actual_usage`` (:mod:`kdesched.model.usage`), read by the caller.
Never from half the data: a node of the run without a reading (or readings that could not be
taken at all) makes the strategy fail with a :class:`StrategyError` naming the source and what is
missing, as upstream's usage clients do ("unable to find node ... in the collected metrics");
the other strategies still run.

kdesched additions, both documented in docs/strategies.md: pods planned for eviction by an
earlier strategy of the same run no longer count on their node (their PodMetrics reading is
taken off, as their requests are in the default mode); on the event path, a node younger than
``kdesched.usage.youngNodeSeconds`` counts at no less than its pods' requests (a new node's
reading lags the pods the scheduler just placed there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kdesched.model.records import Node, Pod
from kdesched.model.usage import KUBERNETES_METRICS, PROMETHEUS, MetricsReadings, PrometheusReadings, Usage
from kdesched.policy.types import LowNodeUtilizationArgs
from kdesched.strategies.framework import ClusterState, Handle, StrategyError, StrategySpec
from kdesched.strategies.nodeutilization import (
    NodeInfo,
    PodUsageFn,
    above_cap,
    all_positive,
    average_percentages,
    cap_capacity,
    describe,
    deviation_thresholds,
    evict_from_sources,
    is_above,
    is_below,
    raw_usage_sum,
    tracked_resources,
    usage_percentages,
)

NAME = "LowNodeUtilization"
METRIC_RESOURCE = "MetricResource"
METRIC_CAPACITY = 100  # upstream referencedResourceListForNodeCapacity: MetricResource is out of 100


def metrics_source(args: LowNodeUtilizationArgs) -> str:
    """"" (requests), KubernetesMetrics or Prometheus; ``metricsServer: true`` is KubernetesMetrics."""
    m = args.metrics_utilization
    if m is None:
        return ""
    if m.metrics_server:
        return KUBERNETES_METRICS
    return m.source


@dataclass(frozen=True, slots=True)
class _Measured:
    """What a run classifies on: per node (in ``nodes`` order) the usage mapping and the capacity
    it is a share of, the tracked resources, and what an eviction frees (``pod_usage``: measured;
    None: requests; ``unconstrained``: nothing countable, Prometheus)."""

    resources: tuple[str, ...]
    usages: Sequence[Mapping[str, int]]  # metrics modes: the strategy's own dicts, updated as pods go
    capacities: Sequence[Mapping[str, int]]
    pod_usage: PodUsageFn | None
    unconstrained: bool
    label: str  # for reasons and logs: "requests", "measured usage, KubernetesMetrics", ...


def _young(node: Node, state: ClusterState, usage: Usage) -> bool:
    limit = usage.young_node_seconds
    if not limit or node.creation_time is None:
        return False
    return (state.now - node.creation_time).total_seconds() < limit


def _kubernetes_metrics(args: LowNodeUtilizationArgs, handle: Handle, nodes: Sequence[Node],
                        usage: Usage | None) -> _Measured:
    readings: MetricsReadings | None = usage.metrics if usage is not None else None
    what = "metricsUtilization source KubernetesMetrics"
    if usage is None or readings is None:
        raise StrategyError(f"{what}: no metrics.k8s.io readings were given (simulate: --usage with the "
                            "NodeMetricsList and PodMetricsList files; run and serve read them from the API "
                            "server)")
    if readings.error:
        raise StrategyError(f"{what}: {readings.error}; not balancing on usage this run")
    if not readings.pods_read:
        raise StrategyError(f"{what}: no PodMetrics were given ({readings.source}): what an eviction frees is "
                            "unknown (simulate: add --usage with kubectl get --raw "
                            "/apis/metrics.k8s.io/v1beta1/pods)")
    missing = [n.name for n in nodes if n.name not in readings.nodes]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise StrategyError(f"{what}: no NodeMetrics for node(s) {shown} in {readings.source}; not deciding on "
                            f"part of the cluster ({len(nodes) - len(missing)} of {len(nodes)} nodes measured)")
    resources = tracked_resources(args.thresholds)
    state = handle.state
    pods = readings.pods
    usages: list[dict[str, int]] = []
    for node in nodes:
        measured = dict(readings.nodes[node.name].usage)
        for resource in resources:  # upstream actualUsageClient.sync: every resource must be measured
            if resource != "pods" and resource not in measured:
                raise StrategyError(f"{what}: node {node.name}'s NodeMetrics has no {resource!r} (metrics.k8s.io "
                                    f"measures cpu and memory only; threshold {resource} needs requests)")
        # kdesched: what an earlier strategy of this run already plans to evict no longer runs here
        for pod in state.snapshot.pods_by_node.get(node.name, ()):
            if state.is_planned(pod):
                for resource, amount in pods.get((pod.namespace, pod.name), {}).items():
                    measured[resource] = max(0, measured.get(resource, 0) - amount)
        measured["pods"] = len(state.pods_on_node(node.name))
        if _young(node, state, usage):
            requested = state.usage(node.name)
            for resource in ("cpu", "memory"):
                if requested.get(resource, 0) > measured.get(resource, 0):
                    measured[resource] = requested.get(resource, 0)
            handle.logger.debug("node %s is young: it counts at no less than its requests", node.name)
        usages.append(measured)

    def pod_usage(pod: Pod) -> Mapping[str, int] | None:
        return pods.get((pod.namespace, pod.name))

    return _Measured(resources, usages, [n.allocatable for n in nodes], pod_usage, False,
                     f"measured usage, {KUBERNETES_METRICS}")


def _prometheus(args: LowNodeUtilizationArgs, handle: Handle, nodes: Sequence[Node],
                usage: Usage | None) -> _Measured:
    m = args.metrics_utilization
    query = m.prometheus_query if m is not None else ""
    what = f"metricsUtilization source Prometheus (query {query!r})"
    readings: PrometheusReadings | None = usage.for_query(query) if usage is not None else None
    if usage is None or readings is None:
        raise StrategyError(f"{what}: no query result was given (simulate: --usage with the query's JSON "
                            "answer; run and serve query the metricsProviders server)")
    source = f"{readings.source}" if readings.source else "the query result"
    if readings.error:
        raise StrategyError(f"{what}: {readings.error}; not balancing on usage this run")
    if readings.duplicates:
        raise StrategyError(f"{what}: {source} has more than one sample for node(s) "
                            f"{', '.join(sorted(set(readings.duplicates))[:5])}: the query must give one value per "
                            f"node (aggregate by instance)")
    for node_name, value in sorted(readings.values.items()):  # upstream checks every sample
        if not 0 <= value <= 1:
            raise StrategyError(f"{what}: {source}: the sample for {node_name} has value {value:g}, outside "
                                "[0, 1] (the query must give a fraction per node)")
    missing = [n.name for n in nodes if n.name not in readings.values]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise StrategyError(f"{what}: {source} has no sample for node(s) {shown} (label instance); not deciding "
                            f"on part of the cluster ({len(nodes) - len(missing)} of {len(nodes)} nodes measured)")
    state = handle.state
    usages: list[dict[str, int]] = []
    for node in nodes:
        percent = int(readings.values[node.name] * 100)  # upstream: int64(sample.Value*100), truncated
        if _young(node, state, usage):
            requested = state.usage(node.name)
            shares = [requested.get(r, 0) / node.allocatable[r] for r in ("cpu", "memory")
                      if node.allocatable.get(r)]
            percent = max(percent, min(METRIC_CAPACITY, math.floor(max(shares, default=0.0) * 100)))
            handle.logger.debug("node %s is young: it counts at no less than its requested share", node.name)
        usages.append({METRIC_RESOURCE: percent})
    return _Measured((METRIC_RESOURCE,), usages, [{METRIC_RESOURCE: METRIC_CAPACITY}] * len(nodes), None, True,
                     f"Prometheus query {query!r}")


def _requests(args: LowNodeUtilizationArgs, handle: Handle, nodes: Sequence[Node]) -> _Measured:
    state = handle.state
    usages = [state.usage(n.name) for n in nodes]  # the run's own mappings: freed as pods are planned
    return _Measured(tracked_resources(args.thresholds), usages, [n.allocatable for n in nodes], None, False,
                     "requests")


MEASURES: Mapping[str, Callable[[LowNodeUtilizationArgs, Handle, Sequence[Node], Usage | None], _Measured]] = {
    KUBERNETES_METRICS: _kubernetes_metrics,
    PROMETHEUS: _prometheus,
}


def run(args: LowNodeUtilizationArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    log = handle.logger
    source = metrics_source(args)
    if source:
        measure = MEASURES.get(source)
        if measure is None:
            raise StrategyError(f"metricsUtilization source {source!r} is not known")
        measured = measure(args, handle, nodes, handle.state.snapshot.actual_usage)
    else:
        measured = _requests(args, handle, nodes)
    resources = measured.resources
    thresholded = tuple(args.thresholds)

    usages = measured.usages
    capacities = measured.capacities
    if args.use_deviation_thresholds:
        percents = [usage_percentages(u, c, thresholded) for c, u in zip(capacities, usages)]
        low, high = deviation_thresholds(average_percentages(percents), args.thresholds, args.target_thresholds)
        log.debug("deviation thresholds: low %s, high %s", low, high)
    else:
        percents = [usage_percentages(u, c, resources) for c, u in zip(capacities, usages)]
        low, high = dict(args.thresholds), dict(args.target_thresholds)

    under: list[NodeInfo] = []
    over: list[NodeInfo] = []
    for node, usage, capacity, percent in zip(nodes, usages, capacities, percents):
        below = is_below(percent, low)
        if below and not node.unschedulable:
            category, bucket, why = "underutilized", under, describe(percent, low, "<=")
        elif is_above(percent, high):
            category, bucket, why = "overutilized", over, describe(percent, high, ">")
        else:
            log.debug("node %s is appropriately utilized%s: %s", node.name,
                      " (unschedulable, so not underutilized)" if below else "", _pct(percent))
            continue
        log.debug("node %s is %s (%s): %s", node.name, category, measured.label, _pct(percent))
        bucket.append(NodeInfo(node, usage, percent, cap_capacity(capacity, high, resources), why))

    log.debug("%d underutilized node(s) (thresholds %s), %d overutilized (targets %s)",
              len(under), _pct(low), len(over), _pct(high))
    if not under:
        log.debug("no node is underutilized, nothing to do (you might tune the thresholds)")
        return
    if len(under) <= args.number_of_nodes:
        log.debug("%d underutilized node(s) <= numberOfNodes %d, nothing to do", len(under), args.number_of_nodes)
        return
    if len(under) == len(nodes):
        log.debug("all nodes are underutilized, nothing to do")
        return
    if not over:
        log.debug("no node is above the target utilization, nothing to do")
        return

    # Busiest first; ties keep the snapshot's node order (upstream's sort is not stable).
    over.sort(key=lambda info: raw_usage_sum(info.usage, resources), reverse=True)
    under_names = ", ".join(i.name for i in under[:3]) + (f" and {len(under) - 3} more" if len(under) > 3 else "")
    basis = f" on {measured.label}" if source else ""

    def keep_going(info: NodeInfo, available: Mapping[str, int]) -> bool:
        return above_cap(info, resources) and all_positive(available)

    def reason(info: NodeInfo) -> str:
        return (f"node {info.name} is above the target utilization ({info.why}){basis}; "
                f"{len(under)} underutilized node(s) can take its pods ({under_names})")

    evict_from_sources(
        handle, over, under, resources, handle.filter, keep_going, reason,
        evictable_namespaces=args.evictable_namespaces, node_limit=args.eviction_limits_node,
        pod_usage=measured.pod_usage, unconstrained=measured.unconstrained,
    )


def _pct(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}%" for k, v in sorted(values.items())) or "-"


SPEC = StrategySpec(
    name=NAME,
    extension_point="balance",
    args_type=LowNodeUtilizationArgs,
    run=run,
    summary="Evict pods from nodes above targetThresholds while nodes below thresholds have room "
            "(requests, or measured usage with metricsUtilization).",
)

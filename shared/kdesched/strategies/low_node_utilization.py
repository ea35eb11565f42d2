"""LowNodeUtilization (Balance, upstream v0.36): move pods off overutilized nodes while there is
room on underutilized ones.

Why: after a node joins or recovers, the scheduler only places *new* pods on it; this strategy
frees room on the busiest nodes so the evicted pods land on the idle ones. kdesched runs it on
``dev.kdesched.node.added`` / ``dev.kdesched.node.ready`` (the moment it matters) instead of
waiting for a timer.

Utilization is computed from pod *requests* (as upstream's default). The metrics modes
(``metricsUtilization`` with KubernetesMetrics or Prometheus) are deliberately not supported:
the run fails with a :class:`StrategyError` saying so, rather than silently balancing on
something else than the operator asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kdesched.model.records import Node
from kdesched.policy.types import LowNodeUtilizationArgs
from kdesched.strategies.framework import Handle, StrategyError, StrategySpec
from kdesched.strategies.nodeutilization import (
    NodeInfo,
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


def check_metrics(args: LowNodeUtilizationArgs) -> None:
    """Refuse a metrics source: kdesched decides on requests only (deliberate difference)."""
    m = args.metrics_utilization
    if m is None:
        return
    source = m.source or ("KubernetesMetrics" if m.metrics_server else "")
    if source:
        raise StrategyError(
            f"metricsUtilization source {source} is not supported by kdesched: it balances on requests "
            f"(remove metricsUtilization from the {NAME} args)")


def run(args: LowNodeUtilizationArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    check_metrics(args)
    log = handle.logger
    state = handle.state
    resources = tracked_resources(args.thresholds)
    thresholded = tuple(args.thresholds)

    usages = [state.usage(n.name) for n in nodes]
    if args.use_deviation_thresholds:
        percents = [usage_percentages(u, n.allocatable, thresholded) for n, u in zip(nodes, usages)]
        low, high = deviation_thresholds(average_percentages(percents), args.thresholds, args.target_thresholds)
        log.debug("deviation thresholds: low %s, high %s", low, high)
    else:
        percents = [usage_percentages(u, n.allocatable, resources) for n, u in zip(nodes, usages)]
        low, high = dict(args.thresholds), dict(args.target_thresholds)

    under: list[NodeInfo] = []
    over: list[NodeInfo] = []
    for node, usage, percent in zip(nodes, usages, percents):
        below = is_below(percent, low)
        if below and not node.unschedulable:
            category, bucket, why = "underutilized", under, describe(percent, low, "<=")
        elif is_above(percent, high):
            category, bucket, why = "overutilized", over, describe(percent, high, ">")
        else:
            log.debug("node %s is appropriately utilized%s: %s", node.name,
                      " (unschedulable, so not underutilized)" if below else "", _pct(percent))
            continue
        log.debug("node %s is %s: %s", node.name, category, _pct(percent))
        bucket.append(NodeInfo(node, usage, percent, cap_capacity(node.allocatable, high, resources), why))

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

    def keep_going(info: NodeInfo, available: Mapping[str, int]) -> bool:
        return above_cap(info, resources) and all_positive(available)

    def reason(info: NodeInfo) -> str:
        return (f"node {info.name} is above the target utilization ({info.why}); "
                f"{len(under)} underutilized node(s) can take its pods ({under_names})")

    evict_from_sources(
        handle, over, under, resources, handle.filter, keep_going, reason,
        evictable_namespaces=args.evictable_namespaces, node_limit=args.eviction_limits_node,
    )


def _pct(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}%" for k, v in sorted(values.items())) or "-"


SPEC = StrategySpec(
    name=NAME,
    extension_point="balance",
    args_type=LowNodeUtilizationArgs,
    run=run,
    summary="Evict pods from nodes above targetThresholds while nodes below thresholds have room (requests).",
)

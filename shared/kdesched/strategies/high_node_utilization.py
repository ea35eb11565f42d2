"""HighNodeUtilization (Balance, upstream v0.36): empty underutilized nodes so their pods pack onto
the others and the cluster autoscaler can remove the emptied nodes.

Why: the counterpart of LowNodeUtilization for bin-packing clusters (usually together with the
scheduler's MostAllocated scoring). Sources are the nodes at or below ``thresholds`` for every
thresholded resource — unschedulable ones included, since a cordoned, nearly empty node is
exactly what should be drained; destinations are the other, schedulable nodes. Utilization is
computed from pod requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kdesched.model.records import Node, Pod
from kdesched.policy.types import HighNodeUtilizationArgs
from kdesched.strategies.framework import Handle, StrategySpec
from kdesched.strategies.nodeutilization import (
    MAX_PERCENTAGE,
    NodeInfo,
    all_positive,
    cap_capacity,
    describe,
    evict_from_sources,
    is_below,
    raw_usage_sum,
    tracked_resources,
    usage_percentages,
)

NAME = "HighNodeUtilization"
ONLY_THRESHOLDING_RESOURCES = "OnlyThresholdingResources"


def run(args: HighNodeUtilizationArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    log = handle.logger
    state = handle.state
    resources = tracked_resources(args.thresholds)
    low = dict(args.thresholds)
    # Destinations may fill up to their full capacity for the thresholded resources.
    high = {name: MAX_PERCENTAGE for name in low}

    sources: list[NodeInfo] = []
    destinations: list[NodeInfo] = []
    for node in nodes:
        usage = state.usage(node.name)
        percent = usage_percentages(usage, node.allocatable, resources)
        if is_below(percent, low):
            bucket, why = sources, describe(percent, low, "<=")
            log.debug("node %s is underutilized: %s", node.name, why)
        elif node.unschedulable:
            log.debug("node %s is unschedulable, not a destination", node.name)
            continue
        else:
            bucket, why = destinations, ""
        bucket.append(NodeInfo(node, usage, percent, cap_capacity(node.allocatable, high, resources), why))

    log.debug("%d underutilized node(s), %d destination node(s)", len(sources), len(destinations))
    if not sources:
        log.debug("no node is underutilized, nothing to do (you might tune the thresholds)")
        return
    if len(sources) <= args.number_of_nodes:
        log.debug("%d underutilized node(s) <= numberOfNodes %d, nothing to do", len(sources), args.number_of_nodes)
        return
    if len(sources) == len(nodes):
        log.debug("all nodes are underutilized, nothing to do")
        return
    if not destinations:
        log.debug("no node is available to take the pods, nothing to do")
        return

    # Emptiest first; ties keep the snapshot's node order (upstream's sort is not stable).
    sources.sort(key=lambda info: raw_usage_sum(info.usage, resources))

    if ONLY_THRESHOLDING_RESOURCES in args.eviction_modes:
        wanted = frozenset(low)

        def pod_filter(pod: Pod) -> bool:
            return handle.filter(pod) and not wanted.isdisjoint(pod.requested_resource_names)
    else:
        pod_filter = handle.filter

    def keep_going(_info: NodeInfo, available: Mapping[str, int]) -> bool:
        return all_positive(available)

    def reason(info: NodeInfo) -> str:
        return (f"node {info.name} is underutilized ({info.why}); packing its pods onto "
                f"{len(destinations)} other node(s)")

    evict_from_sources(handle, sources, destinations, resources, pod_filter, keep_going, reason,
                       evictable_namespaces=args.evictable_namespaces)


SPEC = StrategySpec(
    name=NAME,
    extension_point="balance",
    args_type=HighNodeUtilizationArgs,
    run=run,
    summary="Evict pods from nodes below thresholds so they pack onto the other nodes (requests).",
)

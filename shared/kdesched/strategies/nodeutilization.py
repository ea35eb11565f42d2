"""Shared math of LowNodeUtilization and HighNodeUtilization (upstream v0.36
``pkg/framework/plugins/nodeutilization``): usage percentages, classification, deviation
thresholds, capacity caps, and the eviction loop that moves pods off source nodes.

Why a module of its own: both strategies classify nodes the same way and evict through the same
loop ("continue while the source is above its cap and every total-available value is > 0"), and
the subtle parts — percentages of resources a node does not have, caps computed as
``int(threshold * 0.01 * capacity)``, the destination-taint check that needs
``#tolerations >= #taints`` — must be written once so the two cannot drift apart.

Everything is decided on *requests* (what the scheduler reserves), read from the plan-aware
``ClusterState.usage``: pods planned for eviction by an earlier strategy are already gone, and
each eviction planned here frees its requests immediately.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kdesched.model.records import Node, Pod, Taint, Toleration
from kdesched.model.scheduling import priority_sort_key, tolerates_all
from kdesched.policy.types import Namespaces
from kdesched.strategies.framework import (
    Handle,
    NamespaceLimitReached,
    NodeLimitReached,
    TotalLimitReached,
)

BASIC_RESOURCES = ("cpu", "memory", "pods")
MIN_PERCENTAGE = 0.0
MAX_PERCENTAGE = 100.0

Percentages = dict[str, float]
"""Resource name -> percent of the node's capacity, in [0, 100] (can exceed 100 if overcommitted)."""


def tracked_resources(threshold_keys: Iterable[str]) -> tuple[str, ...]:
    """The thresholded resources plus cpu, memory and pods (upstream ``uniquifyResourceNames``),
    basic ones first, then the others sorted, so logs and reasons are stable."""
    extra = sorted(set(threshold_keys) - set(BASIC_RESOURCES))
    return BASIC_RESOURCES + tuple(extra)


def usage_percentages(usage: Mapping[str, int], capacity: Mapping[str, int],
                      resources: Iterable[str]) -> Percentages:
    """``used / capacity * 100`` for each resource the node has a capacity for.

    A resource missing from the node's capacity gets no entry (it then counts as 0 % when
    compared); a zero capacity gives 0 % (upstream ``ResourceUsageToResourceThreshold``).
    """
    out: Percentages = {}
    for name in resources:
        total = capacity.get(name)
        if total is None:
            continue
        used = usage.get(name, 0)
        out[name] = float(used) / float(total) * 100 if total > 0 else 0.0
    return out


def average_percentages(per_node: Iterable[Mapping[str, float]]) -> Percentages:
    """Mean percentage per resource over the nodes that report it (upstream ``normalizer.Average``)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for values in per_node:
        for name, value in values.items():
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
    return {name: total / counts[name] for name, total in sums.items()}


def _clamp(value: float) -> float:
    return min(max(value, MIN_PERCENTAGE), MAX_PERCENTAGE)


def deviation_thresholds(average: Mapping[str, float], low: Mapping[str, float],
                         high: Mapping[str, float]) -> tuple[Percentages, Percentages]:
    """``useDeviationThresholds``: low = clamp(avg - thresholds), high = clamp(avg + targets).

    Only the resources present in ``average`` get a threshold (upstream ``normalizer.Sum``
    iterates the average), so a thresholded resource no node has is ignored.
    """
    return (
        {name: _clamp(avg - low.get(name, 0.0)) for name, avg in average.items()},
        {name: _clamp(avg + high.get(name, 0.0)) for name, avg in average.items()},
    )


def is_below(percent: Mapping[str, float], thresholds: Mapping[str, float]) -> bool:
    """Every thresholded resource is at or below its threshold (a missing usage counts as 0)."""
    for name, limit in thresholds.items():
        if limit < percent.get(name, 0.0):
            return False
    return True


def is_above(percent: Mapping[str, float], thresholds: Mapping[str, float]) -> bool:
    """Some thresholded resource is strictly above its threshold."""
    for name, limit in thresholds.items():
        if limit < percent.get(name, 0.0):
            return True
    return False


def cap_capacity(capacity: Mapping[str, int], thresholds: Mapping[str, float],
                 resources: Iterable[str]) -> dict[str, int]:
    """The node's capacity capped to ``thresholds`` (upstream ``capNodeCapacitiesToThreshold``):
    0 if the node does not have the resource, the full capacity if it is not thresholded, else
    ``int(threshold * 0.01 * capacity)`` (cpu in millicores)."""
    out: dict[str, int] = {}
    for name in resources:
        total = capacity.get(name)
        if total is None:
            out[name] = 0
        elif name not in thresholds:
            out[name] = total
        else:
            out[name] = int(float(thresholds[name]) * 0.01 * float(total))
    return out


def raw_usage_sum(usage: Mapping[str, int], resources: Iterable[str]) -> int:
    """Σ of the raw usage values (cpu millicores + memory bytes + pods + ...), the sort key
    upstream uses to order source nodes."""
    return sum(usage.get(name, 0) for name in resources)


def describe(percent: Mapping[str, float], thresholds: Mapping[str, float], op: str) -> str:
    """``cpu 75% > 50%, pods 12% > 10%`` for the resources where ``percent op threshold`` holds
    (``op`` is ``>`` or ``<=``); for operators' logs and eviction reasons."""
    parts = []
    for name in sorted(thresholds):
        value, limit = percent.get(name, 0.0), thresholds[name]
        if (value > limit) if op == ">" else (value <= limit):
            parts.append(f"{name} {value:.0f}% {op} {limit:g}%")
    return ", ".join(parts)


@dataclass(slots=True)
class NodeInfo:
    """A classified node: its live (plan-aware) usage, percentages, and capped capacity."""

    node: Node
    usage: Mapping[str, int]  # the ClusterState usage dict: updated as evictions are planned
    percent: Percentages
    cap: dict[str, int]
    why: str = ""  # e.g. "cpu 75% > 50%", used in eviction reasons

    @property
    def name(self) -> str:
        return self.node.name


def total_available(destinations: Iterable[NodeInfo], resources: Sequence[str]) -> dict[str, int]:
    """Σ over destinations of (cap − usage) per resource (upstream ``assessAvailableResourceInNodes``)."""
    out = {name: 0 for name in resources}
    for info in destinations:
        for name in resources:
            out[name] += info.cap.get(name, 0) - info.usage.get(name, 0)
    return out


def all_positive(available: Mapping[str, int]) -> bool:
    for value in available.values():
        if value <= 0:
            return False
    return True


def above_cap(info: NodeInfo, resources: Iterable[str]) -> bool:
    """The node's usage exceeds its cap for some resource (upstream ``isNodeAboveTargetUtilization``)."""
    usage, cap = info.usage, info.cap
    for name in resources:
        if cap.get(name, 0) < usage.get(name, 0):
            return True
    return False


@dataclass
class DestinationTaints:
    """Upstream ``PodToleratesTaints``: a pod may move if, for at least one destination node,
    it has at least as many tolerations as the node has taints *and* tolerates every taint
    (any effect). Destination taint sets are deduplicated and answers cached per toleration
    tuple, so the check costs O(1) per pod in practice."""

    taint_sets: frozenset[tuple[Taint, ...]]
    _cache: dict[tuple[Toleration, ...], bool] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> DestinationTaints:
        return cls(frozenset(n.taints for n in nodes))

    def allows(self, pod: Pod) -> bool:
        tols = pod.tolerations
        cached = self._cache.get(tols)
        if cached is None:
            cached = any(
                len(tols) >= len(taints)
                and tolerates_all(tols, taints, ("NoSchedule", "PreferNoSchedule", "NoExecute"))
                for taints in self.taint_sets
            )
            self._cache[tols] = cached
        return cached


ContinueFn = Callable[[NodeInfo, Mapping[str, int]], bool]
ReasonFn = Callable[[NodeInfo], str]
PodUsageFn = Callable[[Pod], "Mapping[str, int] | None"]
"""A metrics mode's "what does evicting this pod free": the pod's measured usage, or None when it
has no reading (the pod is then skipped, as upstream skips a pod whose PodMetrics GET fails)."""


def evict_from_sources(
    handle: Handle,
    sources: Sequence[NodeInfo],
    destinations: Sequence[NodeInfo],
    resources: Sequence[str],
    pod_filter: Callable[[Pod], bool],
    continue_eviction: ContinueFn,
    reason: ReasonFn,
    evictable_namespaces: Namespaces | None = None,
    node_limit: int | None = None,
    pod_usage: PodUsageFn | None = None,
    unconstrained: bool = False,
) -> int:
    """Move pods off ``sources`` (already in processing order) while ``continue_eviction`` holds
    (upstream ``evictPodsFromSourceNodes`` + ``evictPods``). Returns the number planned.

    Per source node: removable = its pods passing ``pod_filter`` (the evictor's Filter, plus the
    strategy's own), lowest priority first. Per pod: stop at ``node_limit`` successes; skip
    pods no destination's taints allow; skip unless PreEvictionFilter passes and the namespace
    is not excluded; evict; subtract its requests (``pods`` −1) from the total available (the
    node's own usage is freed by the plan-aware state). A refused eviction (PDB budget) or a
    namespace limit moves on to the next pod, a node limit to the next node, a total limit
    ends the loop.

    Metrics modes (upstream ``evictPods`` with an actual-usage or Prometheus usage client):
    ``pod_usage`` (KubernetesMetrics) gives what an eviction frees instead of requests, and it is
    taken off the source node's own usage mapping here (a metrics mapping, which the plan-aware
    state does not track); a pod without a reading is skipped. ``unconstrained`` (Prometheus: no
    per-pod value) frees nothing: without ``node_limit`` one pod per source node is evicted,
    with it up to ``node_limit``, and the stop condition is not checked again after each.
    """
    log = handle.logger
    state = handle.state
    available = total_available(destinations, resources)
    log.debug("total capacity to be moved: %s", _fmt(available))
    taints = DestinationTaints.of(info.node for info in destinations)
    excluded = frozenset(evictable_namespaces.exclude) if evictable_namespaces is not None else frozenset()
    planned = 0
    for info in sources:
        pods = state.pods_on_node(info.name)
        removable = [p for p in pods if pod_filter(p)]
        log.debug("node %s: %d pods, %d removable, usage %s", info.name, len(pods), len(removable),
                  _fmt({r: info.usage.get(r, 0) for r in resources}))
        if not removable:
            continue
        if not continue_eviction(info, available):
            continue
        removable.sort(key=priority_sort_key)
        why = reason(info)
        count = 0
        for pod in removable:
            if node_limit is not None and count >= node_limit:
                log.debug("node %s: evictionLimits.node (%d) reached", info.name, node_limit)
                break
            if not taints.allows(pod):
                log.debug("pod %s tolerates the taints of no destination node; skipped", pod.key)
                continue
            if pod.namespace in excluded or not handle.pre_eviction_filter(pod):
                continue
            freed: Mapping[str, int] | None = pod.requests
            if pod_usage is not None:
                freed = pod_usage(pod)
                if freed is None:
                    log.debug("pod %s has no usage reading (PodMetrics); skipped", pod.key)
                    continue
            try:
                if not handle.evict(pod, why):
                    continue
            except NamespaceLimitReached:
                continue
            except NodeLimitReached:
                break
            except TotalLimitReached:
                return planned
            planned += 1
            if unconstrained:
                if node_limit is None:
                    log.debug("node %s: no per-pod usage, so only one eviction per node", info.name)
                    break
                count += 1
                continue
            count += 1
            own = info.usage if pod_usage is not None else None
            for name in resources:
                amount = 1 if name == "pods" else (freed or {}).get(name, 0)
                available[name] -= amount
                if isinstance(own, dict):
                    own[name] = own.get(name, 0) - amount
            if not continue_eviction(info, available):
                break
    return planned


def _fmt(values: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())

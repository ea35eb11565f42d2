"""Scheduler predicates shared by strategies and the evictor: taints, node affinity, priority order.

Why: NodeFit, RemoveDuplicates' target nodes, LowNodeUtilization's destination check and the
taint strategy must all answer "would the scheduler accept this pod here" the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kdesched.model.records import Node, Pod, Taint, Toleration

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
PREFER_NO_EVICTION = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"

_QOS_RANK = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}


def tolerates_all(tolerations: tuple[Toleration, ...], taints: Iterable[Taint],
                  effects: tuple[str, ...] = ("NoSchedule", "NoExecute")) -> bool:
    """Every taint whose effect is in ``effects`` is tolerated (the scheduler's TaintToleration)."""
    for taint in taints:
        if taint.effect in effects and not any(t.tolerates(taint) for t in tolerations):
            return False
    return True


def matches_node_selector(pod: Pod, node: Node) -> bool:
    """``spec.nodeSelector`` and required node affinity both match the node (NodeAffinity filter)."""
    labels = node.labels
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    aff = pod.affinity
    if aff is not None and aff.node_required is not None:
        return any(term.matches(node.name, labels) for term in aff.node_required)
    return True


def has_required_node_affinity(pod: Pod) -> bool:
    return pod.affinity is not None and pod.affinity.node_required is not None


def preferred_affinity_weight(pod: Pod, node: Node) -> int:
    """Sum of the weights of the pod's preferred node-affinity terms that match the node."""
    if pod.affinity is None:
        return 0
    return sum(p.weight for p in pod.affinity.node_preferred if p.term.matches(node.name, node.labels))


def priority_sort_key(pod: Pod) -> tuple[int, int, int, int]:
    """Upstream's "low to high" eviction order: nil priority first, then lower priority, then
    BestEffort < Burstable < Guaranteed, then pods without prefer-no-eviction first."""
    return (
        0 if pod.priority is None else 1,
        pod.priority or 0,
        _QOS_RANK.get(pod.qos_class, 1),
        1 if PREFER_NO_EVICTION in pod.annotations else 0,
    )


def sort_by_priority_low_to_high(pods: Sequence[Pod]) -> list[Pod]:
    return sorted(pods, key=priority_sort_key)


def is_mirror_pod(pod: Pod) -> bool:
    return "kubernetes.io/config.mirror" in pod.annotations


def is_static_pod(pod: Pod) -> bool:
    source = pod.annotations.get("kubernetes.io/config.source")
    return source is not None and source != "api"


def is_daemonset_pod(pod: Pod) -> bool:
    return any(o.kind == "DaemonSet" for o in pod.owner_refs)

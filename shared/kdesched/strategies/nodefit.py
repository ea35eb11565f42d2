"""NodeFit (upstream v0.36): would the scheduler accept this pod on that node, given the plan so far?

Why: nodeFit (DefaultEvictor), RemovePodsViolatingNodeAffinity, TopologySpread and others ask it;
it reads plan-aware usage, so capacity freed or taken by planned evictions counts.
"""

from __future__ import annotations

from collections.abc import Iterable

from kdesched.model.records import Node, Pod
from kdesched.model.scheduling import matches_node_selector, tolerates_all
from kdesched.strategies.framework import ClusterState


def node_fit_failure(pod: Pod, node: Node, state: ClusterState) -> str | None:
    """The first reason ``pod`` does not fit ``node`` (upstream order), or None if it fits."""
    return static_fit_failure(pod, node) or dynamic_fit_failure(pod, node, state)


def static_fit_failure(pod: Pod, node: Node) -> str | None:
    """The checks that depend only on the pod's spec and the node (cordon, node selector and
    affinity, taints): the same for every pod of one template, so callers may cache them."""
    if node.unschedulable:
        return f"node {node.name} is unschedulable"
    if not matches_node_selector(pod, node):
        return f"pod's nodeSelector/required node affinity does not match node {node.name}"
    if not tolerates_all(pod.tolerations, node.taints):
        return f"pod does not tolerate the taints of node {node.name}"
    return None


def dynamic_fit_failure(pod: Pod, node: Node, state: ClusterState) -> str | None:
    """The checks that depend on what runs on the node (required anti-affinity, free resources)."""
    if pod.affinity is not None and pod.affinity.pod_anti_affinity_required:
        for term in pod.affinity.pod_anti_affinity_required:
            if term.label_selector is None or term.topology_key not in node.labels:
                continue
            namespaces = term.namespaces or (pod.namespace,)
            for other in state.pods_on_node(node.name):
                if other is pod or other.namespace not in namespaces:
                    continue
                if term.label_selector.matches(other.labels):
                    return f"pod's required anti-affinity matches pod {other.key} on node {node.name}"
    if node.name != pod.node_name:
        usage = state.usage(node.name)
        alloc = node.allocatable
        if alloc.get("pods", 0) - usage.get("pods", 0) < 1:
            return f"node {node.name} has no free pod slot"
        for res, amount in pod.requests.items():
            free = alloc.get(res, 0) - usage.get(res, 0)
            if amount > free:
                return f"node {node.name} has insufficient {res}"
    return None


def pod_fits_any_other_node(pod: Pod, nodes: Iterable[Node], state: ClusterState) -> bool:
    return any(n.name != pod.node_name and node_fit_failure(pod, n, state) is None for n in nodes)


def pod_fits_any_node(pod: Pod, nodes: Iterable[Node], state: ClusterState) -> bool:
    return any(node_fit_failure(pod, n, state) is None for n in nodes)

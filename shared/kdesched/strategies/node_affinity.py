"""RemovePodsViolatingNodeAffinity (upstream): evict pods whose node no longer suits their node affinity.

Why: node affinity is checked only when a pod is scheduled. When a node loses a label (or a pod's
preferred node appears), running pods stay where they are; this strategy moves them. kdesched runs
it on the node whose labels changed (``dev.kdesched.node.labels.changed``).

Modes (``nodeAffinityType``, processed in the order given, each over every node):

* ``requiredDuringSchedulingIgnoredDuringExecution``: the pod has required node affinity, fits at
  least one node (``PodFitsAnyNode`` over every Ready selected node, its own included), and its
  ``nodeSelector`` + required affinity do not match its current node.
* ``preferredDuringSchedulingIgnoredDuringExecution``: the pod has preferred terms, and among the
  nodes it fits (NodeFit over every Ready selected node, its own included) the best Σ weight of
  matching preferred terms is **greater** than its current node's Σ weight.

Deliberate difference from upstream (preferred mode): upstream takes the best weight over *all*
nodes, even ones the pod cannot be scheduled on, so a pod whose only better node is full or
tainted is evicted on every cycle and lands back where it was. kdesched takes the best weight over
the nodes the pod fits, which is the set ``PodFitsAnyNode`` already computes.

Pods are the node's non-terminal pods passing Filter, PreEvictionFilter, ``namespaces`` and
``labelSelector``. An unknown type is logged and skipped (the policy loader rejects it already).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from kdesched.model.records import Node, Pod
from kdesched.model.scheduling import matches_node_selector, preferred_affinity_weight
from kdesched.policy.types import (
    PREFERRED_AFFINITY,
    REQUIRED_AFFINITY,
    RemovePodsViolatingNodeAffinityArgs,
    namespace_allowed,
)
from kdesched.strategies.framework import (
    ClusterState,
    Handle,
    StrategySpec,
    evict_node_pods,
)
from kdesched.strategies.nodefit import node_fit_failure, pod_fits_any_node

NAME = "RemovePodsViolatingNodeAffinity"


def required_violation(pod: Pod, node: Node, state: ClusterState) -> str | None:
    """Why ``pod`` should leave ``node`` under the required mode, or None."""
    aff = pod.affinity
    if aff is None or aff.node_required is None:
        return None
    if matches_node_selector(pod, node):
        return None
    if not pod_fits_any_node(pod, state.nodes, state):
        return None
    return f"pod's nodeSelector/required node affinity no longer matches node {node.name}"


def preferred_violation(pod: Pod, node: Node, state: ClusterState) -> str | None:
    """Why ``pod`` should leave ``node`` under the preferred mode, or None.

    The best weight is taken over the nodes the pod fits (its own node included)."""
    aff = pod.affinity
    if aff is None or not aff.node_preferred:
        return None
    current = preferred_affinity_weight(pod, node)
    best: Node | None = None
    best_weight = current
    for candidate in state.nodes:
        weight = preferred_affinity_weight(pod, candidate)
        # Only a strictly better node matters; NodeFit is the expensive part, so check it last.
        if weight > best_weight and node_fit_failure(pod, candidate, state) is None:
            best, best_weight = candidate, weight
    if best is None:
        return None
    return (f"node {best.name} matches preferred node affinity terms of weight {best_weight}, "
            f"node {node.name} only {current}")


_CHECKS = {REQUIRED_AFFINITY: required_violation, PREFERRED_AFFINITY: preferred_violation}


def run(args: RemovePodsViolatingNodeAffinityArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    for affinity_type in args.node_affinity_type:
        check = _CHECKS.get(affinity_type)
        if check is None:
            handle.logger.error("invalid nodeAffinityType %r: skipped", affinity_type)
            continue
        for node in nodes:
            handle.logger.debug("processing node %s (%s)", node.name, affinity_type)
            if not evict_node_pods(handle, _candidates(args, handle, node, check)):
                return


def _candidates(args: RemovePodsViolatingNodeAffinityArgs, handle: Handle, node: Node,
                check: Callable[[Pod, Node, ClusterState], str | None]) -> Iterator[tuple[Pod, str]]:
    selector = args.label_selector
    state = handle.state
    for pod in state.pods_on_node(node.name):
        if not namespace_allowed(args.namespaces, pod.namespace):
            continue
        if selector is not None and not selector.matches(pod.labels):
            continue
        if pod.affinity is None:
            continue
        reason = check(pod, node, state)
        if reason is None or not handle.filter(pod) or not handle.pre_eviction_filter(pod):
            continue
        yield pod, reason

SPEC = StrategySpec(
    name=NAME,
    extension_point="deschedule",
    args_type=RemovePodsViolatingNodeAffinityArgs,
    run=run,
    summary="evict pods whose node no longer matches their required (or best preferred) node affinity",
)

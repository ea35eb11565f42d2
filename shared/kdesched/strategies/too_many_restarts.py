"""RemovePodsHavingTooManyRestarts (upstream v0.36): evict pods whose containers keep restarting.

Why: a pod in a crash loop may be stuck on a node whose local conditions (a broken volume mount,
a bad kernel module, a node-local network problem) make it fail; recreating it elsewhere is often
the fix. Restarts are the sum of ``restartCount`` over the containers (plus the init containers
with ``includingInitContainers``); a pod qualifies when that sum reaches ``podRestartThreshold``.

Upstream behaviour kept: pods of every phase on each node (the "all pods" listing), Filter and
PreEvictionFilter both applied while listing, the optional ``states`` filter (pod phase, or a
container's *waiting* reason, or with the flag an init container's waiting reason), and per node
the pods with the most restarts go first. A node limit moves on to the next node, a namespace
limit to the next pod, the total limit ends the strategy.
"""

from __future__ import annotations

from collections.abc import Sequence

from kdesched.model.records import ContainerStatus, Node, Pod
from kdesched.policy.types import RemovePodsHavingTooManyRestartsArgs, namespace_allowed
from kdesched.strategies.framework import (
    Handle,
    StrategySpec,
    evict_node_pods,
)

NAME = "RemovePodsHavingTooManyRestarts"


def pod_restarts(pod: Pod, including_init_containers: bool) -> int:
    """Σ restartCount of the pod's containers (and init containers if asked)."""
    total = sum(cs.restart_count for cs in pod.container_statuses)
    if including_init_containers:
        total += sum(cs.restart_count for cs in pod.init_container_statuses)
    return total


def _waiting_reason_in(statuses: Sequence[ContainerStatus], states: frozenset[str]) -> bool:
    return any(cs.waiting_reason and cs.waiting_reason in states for cs in statuses)


def matches_states(pod: Pod, states: frozenset[str], including_init_containers: bool) -> bool:
    """Upstream's ``states`` filter: the phase, or a container's waiting reason, is one of them."""
    if pod.phase in states:
        return True
    if _waiting_reason_in(pod.container_statuses, states):
        return True
    return including_init_containers and _waiting_reason_in(pod.init_container_statuses, states)


def run(args: RemovePodsHavingTooManyRestartsArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    threshold = args.pod_restart_threshold
    with_init = args.including_init_containers
    states = frozenset(args.states)
    selector = args.label_selector
    for node in nodes:
        candidates: list[tuple[int, Pod]] = []
        for pod in handle.state.all_pods_on_node(node.name):
            if not namespace_allowed(args.namespaces, pod.namespace):
                continue
            if selector is not None and not selector.matches(pod.labels):
                continue
            restarts = pod_restarts(pod, with_init)
            if restarts < threshold:
                continue
            if states and not matches_states(pod, states, with_init):
                continue
            if not handle.filter(pod) or not handle.pre_eviction_filter(pod):
                continue
            candidates.append((restarts, pod))
        handle.logger.debug("node %s: %d pod(s) with at least %d restarts", node.name, len(candidates), threshold)
        # stable: equal restart counts keep the node's pod order
        candidates.sort(key=lambda item: -item[0])
        reasons = ((pod, (f"{restarts} container restarts on node {node.name}, "
                          f"threshold podRestartThreshold={threshold}")) for restarts, pod in candidates)
        if not evict_node_pods(handle, reasons):
            return

SPEC = StrategySpec(
    name=NAME,
    extension_point="deschedule",
    args_type=RemovePodsHavingTooManyRestartsArgs,
    run=run,
    summary="evict pods whose containers restarted at least podRestartThreshold times",
)

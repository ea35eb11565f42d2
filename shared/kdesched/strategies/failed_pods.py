"""RemoveFailedPods (upstream v0.36): clean up pods in phase ``Failed``.

Why: failed pods (evicted by the kubelet, OOM-killed Jobs, ``UnexpectedAdmissionError``, node
shutdown) stay in the API until someone deletes them; they clutter ``kubectl get pods``, hold IP
and quota bookkeeping and hide real problems. This strategy evicts them once they are old enough.

Upstream behaviour kept (v0.36 code): pods of every phase on each node are listed through Filter
and PreEvictionFilter, the plugin's namespaces and labelSelector; only ``phase=Failed`` pods are
considered; then

* ``minPodLifetimeSeconds`` (default 3600): age in whole seconds since
  ``metadata.creationTimestamp`` (not ``status.startTime``) must be **≥** the minimum;
* ``excludeOwnerKinds``: no ownerRef of the pod may have one of these kinds;
* ``reasons``: a container's waiting or terminated reason, the pod's ``status.reason``, or with
  ``includingInitContainers`` an init container's reason, is one of them;
* ``exitCodes``: a container's terminated exit code (init containers with the flag) is one of them.

Bare failed pods (no ownerRef) are only evictable when the DefaultEvictor's ``FailedBarePods``
protection is disabled; that is the evictor's decision, not this module's. Per node the pods go in
listing order; a node limit moves to the next node, a namespace limit to the next pod, the total
limit ends the strategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from kdesched.model.records import ContainerStatus, Node, Pod
from kdesched.policy.types import RemoveFailedPodsArgs, namespace_allowed
from kdesched.strategies.framework import (
    Handle,
    StrategySpec,
    evict_node_pods,
)
from kdesched.strategies.pod_lifetime import human_duration

NAME = "RemoveFailedPods"


def _reasons(statuses: Iterable[ContainerStatus]) -> Iterable[str]:
    for cs in statuses:
        if cs.waiting_reason:
            yield cs.waiting_reason
        if cs.terminated_reason:
            yield cs.terminated_reason


def failed_reasons(pod: Pod, including_init_containers: bool) -> set[str]:
    """Every reason upstream compares with ``reasons``."""
    out = set(_reasons(pod.container_statuses))
    if pod.status_reason:
        out.add(pod.status_reason)
    if including_init_containers:
        out.update(_reasons(pod.init_container_statuses))
    return out


def exit_codes(pod: Pod, including_init_containers: bool) -> set[int]:
    statuses = list(pod.container_statuses)
    if including_init_containers:
        statuses.extend(pod.init_container_statuses)
    return {cs.terminated_exit_code for cs in statuses if cs.terminated_exit_code is not None}


def age_seconds(pod: Pod, now: datetime) -> int | None:
    """Whole seconds since creation, or None when the creation time is unknown."""
    if pod.creation_time is None:
        return None
    return int((now - pod.creation_time).total_seconds())


def run(args: RemoveFailedPodsArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    now = handle.now
    min_age = args.min_pod_lifetime_seconds
    excluded = frozenset(args.exclude_owner_kinds)
    wanted_reasons = frozenset(args.reasons)
    wanted_codes = frozenset(args.exit_codes)
    selector = args.label_selector
    with_init = args.including_init_containers

    def why(pod: Pod) -> str | None:
        """The eviction reason if the pod qualifies, else None."""
        if pod.phase != "Failed":
            return None
        if not namespace_allowed(args.namespaces, pod.namespace):
            return None
        if selector is not None and not selector.matches(pod.labels):
            return None
        age = age_seconds(pod, now)
        if min_age is not None and (age is None or age < min_age):
            return None
        if excluded and any(o.kind in excluded for o in pod.owner_refs):
            return None
        detail = []
        if wanted_reasons:
            matched = failed_reasons(pod, with_init) & wanted_reasons
            if not matched:
                return None
            detail.append(f"reason {', '.join(sorted(matched))}")
        if wanted_codes:
            matched_codes = exit_codes(pod, with_init) & wanted_codes
            if not matched_codes:
                return None
            detail.append(f"exit code {', '.join(str(c) for c in sorted(matched_codes))}")
        if not handle.filter(pod) or not handle.pre_eviction_filter(pod):
            return None
        text = f"Failed pod ({pod.status_reason})" if pod.status_reason else "Failed pod"
        if age is not None:
            text += f", {human_duration(age)} old"
            if min_age is not None:
                text += f" (minPodLifetimeSeconds={min_age})"
        if detail:
            text += "; " + "; ".join(detail)
        return text

    for node in nodes:
        candidates = [(p, r) for p in handle.state.all_pods_on_node(node.name) if (r := why(p)) is not None]
        handle.logger.debug("node %s: %d failed pod(s) to remove", node.name, len(candidates))
        if not evict_node_pods(handle, candidates):
            return

SPEC = StrategySpec(
    name=NAME,
    extension_point="deschedule",
    args_type=RemoveFailedPodsArgs,
    run=run,
    summary="evict pods in phase Failed older than minPodLifetimeSeconds, optionally by reason or exit code",
)

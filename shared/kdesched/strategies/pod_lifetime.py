"""PodLifeTime (upstream, the v0.36 argument set): evict pods that are too old, or stuck in a
given state, condition or exit code.

Why: long-lived pods drift (leaked memory, stale DNS, old node placement) and pods stuck in
``CrashLoopBackOff``/``ImagePullBackOff``/``ContainerCreating`` never heal on their own; this is the
operator's "recycle what matches" tool. Every configured criterion must hold (they are ANDed):

* ``maxPodLifeTimeSeconds``: age in whole seconds since ``metadata.creationTimestamp`` **>** max
  (a creation time in the future never matches);
* ``states``: the phase, ``status.reason``, or a container's waiting/terminated reason (init and
  ephemeral containers only with their flags);
* ``conditions``: any pod condition matching any filter (unset filter fields are not checked;
  ``minTimeSinceLastTransitionSeconds`` needs a non-zero ``lastTransitionTime`` that old);
* ``exitCodes``: a container's terminated exit code (init containers with the flag);
* ``ownerKinds``: include (some ref has the kind) or exclude (no ref has it).

Pods of every phase on the given nodes pass Filter and PreEvictionFilter, then go oldest first
across all nodes; a node limit skips that pod, a namespace limit too, the total limit ends it.
The clock is ``handle.now`` (the CLI's ``--now``), never the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from kdesched.model.records import ContainerStatus, Node, Pod, PodCondition
from kdesched.policy.types import PodConditionFilter, PodLifeTimeArgs, namespace_allowed
from kdesched.strategies.framework import (
    Handle,
    NamespaceLimitReached,
    NodeLimitReached,
    StrategySpec,
    TotalLimitReached,
)

NAME = "PodLifeTime"


def whole_seconds_since(then: datetime, now: datetime) -> int:
    """Elapsed whole seconds (truncated, like Go's ``uint(d.Seconds())``); negative if ``then`` is
    in the future."""
    return int((now - then).total_seconds())


def human_duration(seconds: int) -> str:
    """``93784`` -> ``1d2h3m``: how an operator reads an age in a log line or an Event."""
    if seconds < 60:
        return f"{seconds}s"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    return "".join(parts)


def _container_state_in(statuses: Iterable[ContainerStatus], states: frozenset[str]) -> bool:
    for cs in statuses:
        if cs.waiting_reason and cs.waiting_reason in states:
            return True
        if cs.terminated_reason and cs.terminated_reason in states:
            return True
    return False


def matches_states(pod: Pod, states: frozenset[str], including_init: bool, including_ephemeral: bool) -> bool:
    if pod.phase in states or (pod.status_reason and pod.status_reason in states):
        return True
    if _container_state_in(pod.container_statuses, states):
        return True
    if including_init and _container_state_in(pod.init_container_statuses, states):
        return True
    return including_ephemeral and _container_state_in(pod.ephemeral_container_statuses, states)


def _condition_fields_match(cond: PodCondition, f: PodConditionFilter) -> bool:
    if f.type and cond.type != f.type:
        return False
    if f.status and cond.status != f.status:
        return False
    return not (f.reason and cond.reason != f.reason)


def matches_conditions(pod: Pod, filters: Sequence[PodConditionFilter], now: datetime) -> bool:
    """Some condition of the pod matches some filter (OR across filters and conditions)."""
    for f in filters:
        for cond in pod.conditions:
            if not _condition_fields_match(cond, f):
                continue
            if f.min_time_since_last_transition_seconds is not None:
                if cond.last_transition_time is None:
                    continue
                idle = whole_seconds_since(cond.last_transition_time, now)
                if idle < 0 or idle < f.min_time_since_last_transition_seconds:
                    continue
            return True
    return False


def _exit_code_in(statuses: Iterable[ContainerStatus], codes: frozenset[int]) -> bool:
    return any(cs.terminated_exit_code is not None and cs.terminated_exit_code in codes for cs in statuses)


def matches_exit_codes(pod: Pod, codes: frozenset[int], including_init: bool) -> bool:
    if _exit_code_in(pod.container_statuses, codes):
        return True
    return including_init and _exit_code_in(pod.init_container_statuses, codes)


def describe(args: PodLifeTimeArgs, pod: Pod, now: datetime) -> str:
    """The eviction reason an operator reads: which criteria the pod met."""
    parts = []
    if args.max_pod_life_time_seconds is not None and pod.creation_time is not None:
        age = whole_seconds_since(pod.creation_time, now)
        parts.append(f"pod is {human_duration(age)} old, "
                     f"more than maxPodLifeTimeSeconds={args.max_pod_life_time_seconds}")
    if args.states:
        parts.append(f"in one of the states {', '.join(args.states)}")
    if args.conditions:
        parts.append("has a matching pod condition")
    if args.exit_codes:
        parts.append(f"a container exited with one of {', '.join(str(c) for c in args.exit_codes)}")
    return "; ".join(parts) or "matches the PodLifeTime criteria"


def run(args: PodLifeTimeArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    now = handle.now
    max_age = args.max_pod_life_time_seconds
    states = frozenset(args.states)
    codes = frozenset(args.exit_codes)
    include_kinds = frozenset(args.owner_kinds.include) if args.owner_kinds else frozenset()
    exclude_kinds = frozenset(args.owner_kinds.exclude) if args.owner_kinds else frozenset()
    selector = args.label_selector

    def selected(pod: Pod) -> bool:
        if not namespace_allowed(args.namespaces, pod.namespace):
            return False
        if selector is not None and not selector.matches(pod.labels):
            return False
        # an unknown creation time never counts as old (upstream would read Go's zero time)
        if max_age is not None and (pod.creation_time is None
                                    or whole_seconds_since(pod.creation_time, now) <= max_age):
            return False
        if states and not matches_states(pod, states, args.including_init_containers,
                                         args.including_ephemeral_containers):
            return False
        kinds = {o.kind for o in pod.owner_refs}
        if include_kinds and not kinds & include_kinds:
            return False
        if exclude_kinds and kinds & exclude_kinds:
            return False
        if args.conditions and not matches_conditions(pod, args.conditions, now):
            return False
        if codes and not matches_exit_codes(pod, codes, args.including_init_containers):
            return False
        return handle.filter(pod) and handle.pre_eviction_filter(pod)

    candidates: list[Pod] = []
    for node in nodes:
        found = [p for p in handle.state.all_pods_on_node(node.name) if selected(p)]
        handle.logger.debug("node %s: %d pod(s) match the PodLifeTime criteria", node.name, len(found))
        candidates.extend(found)
    # oldest first over all nodes; stable, so equal ages keep node order then pod order; pods
    # without a creation time (only possible without maxPodLifeTimeSeconds) go last
    candidates.sort(key=lambda p: (p.creation_time is None, p.creation_time or now))
    for pod in candidates:
        try:
            handle.evict(pod, describe(args, pod, now))
        except (NodeLimitReached, NamespaceLimitReached):
            continue
        except TotalLimitReached:
            return


SPEC = StrategySpec(
    name=NAME,
    extension_point="deschedule",
    args_type=PodLifeTimeArgs,
    run=run,
    summary="evict pods older than maxPodLifeTimeSeconds or stuck in given states, conditions or exit codes",
)

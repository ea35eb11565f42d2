"""A loaded :class:`Policy` back to a ``descheduler/v1alpha2`` document (``kdesched policy convert``).

Why: users migrating off v1alpha1 (removed upstream in v0.31), Deckhouse switches or OpenShift
presets need the equivalent upstream v1alpha2 policy, and a reviewer wants to see what kdesched
actually understood. The output is faithful — loading it again gives an equal Policy — and
short: a field is written when the file wrote it (even with its default value: what a person
wrote is kept) or when it differs from its default (defaults nobody wrote, such as the
DefaultEvictor's ``priorityThreshold`` of 2000000000, ``topologyBalanceNodeFit: true``, are left out), and
DefaultEvictor's ``filter``/``preEvictionFilter`` enablement is left implicit, as upstream adds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kdesched.model.selectors import LabelSelector
from kdesched.policy.args import (
    LEGACY_EVICTOR_FLAGS,
    SYSTEM_CRITICAL_PRIORITY,
    effective_protections,
    format_go_duration,
)
from kdesched.policy.types import (
    DEFAULT_PROTECTIONS,
    EXTRA_PROTECTIONS,
    DefaultEvictorArgs,
    HighNodeUtilizationArgs,
    LowNodeUtilizationArgs,
    MetricsProvider,
    Namespaces,
    PodLifeTimeArgs,
    Policy,
    Profile,
    RemoveDuplicatesArgs,
    RemoveFailedPodsArgs,
    RemovePodsHavingTooManyRestartsArgs,
    RemovePodsViolatingInterPodAntiAffinityArgs,
    RemovePodsViolatingNodeAffinityArgs,
    RemovePodsViolatingNodeTaintsArgs,
    RemovePodsViolatingTopologySpreadConstraintArgs,
)

_LEGACY_FLAGS = tuple(flag for flag, _, _ in LEGACY_EVICTOR_FLAGS)


def policy_to_v1alpha2(policy: Policy) -> dict[str, Any]:
    """The v1alpha2 ``DeschedulerPolicy`` document equivalent to ``policy`` (camelCase keys)."""
    doc: dict[str, Any] = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy"}
    if policy.node_selector:
        doc["nodeSelector"] = policy.node_selector
    for key, value in (
        ("maxNoOfPodsToEvictPerNode", policy.max_pods_to_evict_per_node),
        ("maxNoOfPodsToEvictPerNamespace", policy.max_pods_to_evict_per_namespace),
        ("maxNoOfPodsToEvictTotal", policy.max_pods_to_evict_total),
        ("gracePeriodSeconds", policy.grace_period_seconds),
    ):
        if value is not None:
            doc[key] = value
    if policy.eviction_failure_event_notification:
        doc["evictionFailureEventNotification"] = True
    if policy.metrics_providers:
        doc["metricsProviders"] = [_provider(p) for p in policy.metrics_providers]
    if policy.kdesched:
        doc["kdesched"] = _plain(policy.kdesched)
    for key, value in policy.written.items():  # what the file wrote, even when it equals the default
        if key not in doc and value is not None:
            doc[key] = _plain(value)
    doc["profiles"] = [profile_to_v1alpha2(p) for p in policy.profiles]
    return doc


def profile_to_v1alpha2(profile: Profile) -> dict[str, Any]:
    configs = []
    for name, args in profile.plugin_args.items():
        entry: dict[str, Any] = {"name": name}
        dumped = args_to_v1alpha2(args)
        skip = _LEGACY_FLAGS if name == "DefaultEvictor" else ()
        written = profile.written_args.get(name, {})
        if written:
            # a field written with its default value is kept as written (the dumper leaves it out);
            # legacy evictor flags are either dumped already or deliberately replaced by
            # podProtections. Written fields come first, in the file's order.
            kept = {k: dumped[k] if k in dumped else _plain(v) for k, v in written.items()
                    if k in dumped or (k not in skip and v is not None)}
            dumped = {**kept, **{k: v for k, v in dumped.items() if k not in kept}}
        if dumped:
            entry["args"] = dumped
        configs.append(entry)
    plugins: dict[str, Any] = {}
    if profile.deschedule:
        plugins["deschedule"] = {"enabled": list(profile.deschedule)}
    if profile.balance:
        plugins["balance"] = {"enabled": list(profile.balance)}
    for key, names in (("filter", profile.filter), ("preEvictionFilter", profile.pre_eviction_filter)):
        extra = [n for n in names if n != "DefaultEvictor"]
        if extra:
            plugins[key] = {"enabled": ["DefaultEvictor", *extra]}
    out: dict[str, Any] = {"name": profile.name, "pluginConfig": configs}
    if plugins:
        out["plugins"] = plugins
    return out


def args_to_v1alpha2(args: Any) -> dict[str, Any]:
    """One plugin's args as the v1alpha2 ``args`` mapping (defaults left out)."""
    dumper = _DUMPERS.get(type(args))
    if dumper is None:
        raise TypeError(f"cannot write args of type {type(args).__name__} as v1alpha2")
    return dumper(args)


# --------------------------------------------------------------------------- per plugin

def _default_evictor(a: DefaultEvictorArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.node_selector:
        out["nodeSelector"] = a.node_selector
    _selector(out, "labelSelector", a.label_selector)
    _selector(out, "namespaceLabelSelector", a.namespace_label_selector)
    pt = a.priority_threshold
    if pt is not None:
        if pt.name:
            out["priorityThreshold"] = {"name": pt.name}
        elif pt.value is not None and pt.value != SYSTEM_CRITICAL_PRIORITY:
            out["priorityThreshold"] = {"value": pt.value}
    if a.node_fit:
        out["nodeFit"] = True
    if a.min_replicas:
        out["minReplicas"] = a.min_replicas
    if a.min_pod_age_seconds is not None:
        out["minPodAge"] = format_go_duration(a.min_pod_age_seconds)
    if a.no_eviction_policy:
        out["noEvictionPolicy"] = a.no_eviction_policy

    default_disabled, extra_enabled, legacy = a.default_disabled, a.extra_enabled, dict(a.legacy)
    if effective_protections(default_disabled, extra_enabled, legacy) != a.protections:
        # Built in code rather than loaded: write the protections as the current lists.
        default_disabled = tuple(sorted(DEFAULT_PROTECTIONS - a.protections))
        extra_enabled = tuple(sorted(a.protections & EXTRA_PROTECTIONS))
        legacy = {}
        if not default_disabled and not extra_enabled and a.protections != DEFAULT_PROTECTIONS:
            raise ValueError(f"protections {sorted(a.protections)} cannot be written as a policy")
    protections: dict[str, Any] = {}
    if default_disabled:
        protections["defaultDisabled"] = list(default_disabled)
    if extra_enabled:
        protections["extraEnabled"] = list(extra_enabled)
    if a.protected_storage_classes:
        protections["config"] = {"PodsWithPVC": {"protectedStorageClasses": [
            {"name": name} for name in a.protected_storage_classes]}}
    if protections:
        out["podProtections"] = protections
    out.update(legacy)
    return out


def _remove_duplicates(a: RemoveDuplicatesArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _namespaces(out, "namespaces", a.namespaces)
    if a.exclude_owner_kinds:
        out["excludeOwnerKinds"] = list(a.exclude_owner_kinds)
    return out


def _low_node_utilization(a: LowNodeUtilizationArgs) -> dict[str, Any]:
    out: dict[str, Any] = {"thresholds": dict(a.thresholds), "targetThresholds": dict(a.target_thresholds)}
    if a.use_deviation_thresholds:
        out["useDeviationThresholds"] = True
    if a.number_of_nodes:
        out["numberOfNodes"] = a.number_of_nodes
    _namespaces(out, "evictableNamespaces", a.evictable_namespaces)
    if a.eviction_limits_node is not None:
        out["evictionLimits"] = {"node": a.eviction_limits_node}
    m = a.metrics_utilization
    if m is not None:
        metrics: dict[str, Any] = {}
        if m.metrics_server:
            metrics["metricsServer"] = True
        if m.source:
            metrics["source"] = m.source
        if m.prometheus_query:
            metrics["prometheus"] = {"query": m.prometheus_query}
        out["metricsUtilization"] = metrics
    return out


def _high_node_utilization(a: HighNodeUtilizationArgs) -> dict[str, Any]:
    out: dict[str, Any] = {"thresholds": dict(a.thresholds)}
    if a.number_of_nodes:
        out["numberOfNodes"] = a.number_of_nodes
    if a.eviction_modes:
        out["evictionModes"] = list(a.eviction_modes)
    _namespaces(out, "evictableNamespaces", a.evictable_namespaces)
    return out


def _anti_affinity(a: RemovePodsViolatingInterPodAntiAffinityArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    return out


def _node_affinity(a: RemovePodsViolatingNodeAffinityArgs) -> dict[str, Any]:
    out: dict[str, Any] = {"nodeAffinityType": list(a.node_affinity_type)}
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    return out


def _node_taints(a: RemovePodsViolatingNodeTaintsArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    if a.include_prefer_no_schedule:
        out["includePreferNoSchedule"] = True
    if a.excluded_taints:
        out["excludedTaints"] = list(a.excluded_taints)
    if a.included_taints is not None:
        out["includedTaints"] = list(a.included_taints)
    return out


def _topology_spread(a: RemovePodsViolatingTopologySpreadConstraintArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    if tuple(a.constraints) != ("DoNotSchedule",):
        out["constraints"] = list(a.constraints)
    if not a.topology_balance_node_fit:
        out["topologyBalanceNodeFit"] = False
    return out


def _too_many_restarts(a: RemovePodsHavingTooManyRestartsArgs) -> dict[str, Any]:
    out: dict[str, Any] = {"podRestartThreshold": a.pod_restart_threshold}
    if a.including_init_containers:
        out["includingInitContainers"] = True
    if a.states:
        out["states"] = list(a.states)
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    return out


def _pod_life_time(a: PodLifeTimeArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.max_pod_life_time_seconds is not None:
        out["maxPodLifeTimeSeconds"] = a.max_pod_life_time_seconds
    if a.states:
        out["states"] = list(a.states)
    if a.conditions:
        conditions = []
        for c in a.conditions:
            item: dict[str, Any] = {}
            for key, value in (("type", c.type), ("status", c.status), ("reason", c.reason)):
                if value:
                    item[key] = value
            if c.min_time_since_last_transition_seconds is not None:
                item["minTimeSinceLastTransitionSeconds"] = c.min_time_since_last_transition_seconds
            conditions.append(item)
        out["conditions"] = conditions
    if a.exit_codes:
        out["exitCodes"] = list(a.exit_codes)
    if a.owner_kinds is not None and (a.owner_kinds.include or a.owner_kinds.exclude):
        out["ownerKinds"] = ({"include": list(a.owner_kinds.include)} if a.owner_kinds.include
                             else {"exclude": list(a.owner_kinds.exclude)})
    if a.including_init_containers:
        out["includingInitContainers"] = True
    if a.including_ephemeral_containers:
        out["includingEphemeralContainers"] = True
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    return out


def _remove_failed_pods(a: RemoveFailedPodsArgs) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.min_pod_lifetime_seconds is not None and a.min_pod_lifetime_seconds != 3600:
        out["minPodLifetimeSeconds"] = a.min_pod_lifetime_seconds
    for key, values in (("excludeOwnerKinds", a.exclude_owner_kinds), ("reasons", a.reasons),
                        ("exitCodes", a.exit_codes)):
        if values:
            out[key] = list(values)
    if a.including_init_containers:
        out["includingInitContainers"] = True
    _namespaces(out, "namespaces", a.namespaces)
    _selector(out, "labelSelector", a.label_selector)
    return out


_DUMPERS: Mapping[type, Callable[[Any], dict[str, Any]]] = {
    DefaultEvictorArgs: _default_evictor,
    RemoveDuplicatesArgs: _remove_duplicates,
    LowNodeUtilizationArgs: _low_node_utilization,
    HighNodeUtilizationArgs: _high_node_utilization,
    RemovePodsViolatingInterPodAntiAffinityArgs: _anti_affinity,
    RemovePodsViolatingNodeAffinityArgs: _node_affinity,
    RemovePodsViolatingNodeTaintsArgs: _node_taints,
    RemovePodsViolatingTopologySpreadConstraintArgs: _topology_spread,
    RemovePodsHavingTooManyRestartsArgs: _too_many_restarts,
    PodLifeTimeArgs: _pod_life_time,
    RemoveFailedPodsArgs: _remove_failed_pods,
}


# --------------------------------------------------------------------------- helpers

def _namespaces(out: dict[str, Any], key: str, ns: Namespaces | None) -> None:
    if ns is None:
        return
    if ns.include:
        out[key] = {"include": list(ns.include)}
    elif ns.exclude:
        out[key] = {"exclude": list(ns.exclude)}


def _selector(out: dict[str, Any], key: str, selector: LabelSelector | None) -> None:
    if selector is not None:
        out[key] = selector.to_api()


def _provider(p: MetricsProvider) -> dict[str, Any]:
    out: dict[str, Any] = {"source": p.source}
    if p.prometheus_url:
        prom: dict[str, Any] = {"url": p.prometheus_url}
        if p.secret_name or p.secret_namespace:
            prom["authToken"] = {"secretReference": {"namespace": p.secret_namespace, "name": p.secret_name}}
        out["prometheus"] = prom
    return out


def _plain(value: Any) -> Any:
    """Parsed YAML as plain dicts/lists, so ``yaml.safe_dump`` can write it."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value

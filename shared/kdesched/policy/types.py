"""Validated, defaulted policy objects: what every other layer reads instead of raw YAML.

Why: strategies take these frozen dataclasses and never see a dict; every field here has already
been checked by the loader (:mod:`kdesched.policy.load`), so a strategy can trust it. Field names
are the upstream argument names in snake_case.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdesched.model.selectors import LabelSelector


@dataclass(frozen=True, slots=True)
class Namespaces:
    """``namespaces: {include: [...]}`` or ``{exclude: [...]}`` (never both)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def allows(self, namespace: str) -> bool:
        if self.include:
            return namespace in self.include
        return namespace not in self.exclude


def namespace_allowed(ns: Namespaces | None, namespace: str) -> bool:
    return ns is None or ns.allows(namespace)


@dataclass(frozen=True, slots=True)
class PriorityThreshold:
    value: int | None = None
    name: str | None = None


# DefaultEvictor protections (upstream v0.36).
DEFAULT_PROTECTIONS = frozenset({"PodsWithLocalStorage", "DaemonSetPods", "SystemCriticalPods", "FailedBarePods"})
EXTRA_PROTECTIONS = frozenset({"PodsWithPVC", "PodsWithoutPDB", "PodsWithResourceClaims"})


@dataclass(frozen=True, slots=True)
class DefaultEvictorArgs:
    node_selector: str = ""
    label_selector: LabelSelector | None = None
    namespace_label_selector: LabelSelector | None = None
    priority_threshold: PriorityThreshold | None = None  # resolved to a value by the loader when a snapshot is known
    node_fit: bool = False
    min_replicas: int = 0
    min_pod_age_seconds: float | None = None
    no_eviction_policy: str = ""  # "" | Preferred | Mandatory
    # the effective protection set (defaults - defaultDisabled + extraEnabled, or the legacy booleans)
    protections: frozenset[str] = DEFAULT_PROTECTIONS
    protected_storage_classes: tuple[str, ...] = ()
    # how the user wrote it, kept for `policy convert` round trips
    default_disabled: tuple[str, ...] = ()
    extra_enabled: tuple[str, ...] = ()
    legacy: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RemoveDuplicatesArgs:
    namespaces: Namespaces | None = None
    exclude_owner_kinds: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MetricsUtilization:
    source: str = ""  # "" | KubernetesMetrics | Prometheus
    metrics_server: bool = False  # deprecated
    prometheus_query: str = ""


@dataclass(frozen=True, slots=True)
class LowNodeUtilizationArgs:
    thresholds: Mapping[str, float]
    target_thresholds: Mapping[str, float]
    use_deviation_thresholds: bool = False
    number_of_nodes: int = 0
    evictable_namespaces: Namespaces | None = None  # exclude only
    eviction_limits_node: int | None = None
    metrics_utilization: MetricsUtilization | None = None


@dataclass(frozen=True, slots=True)
class HighNodeUtilizationArgs:
    thresholds: Mapping[str, float]
    number_of_nodes: int = 0
    eviction_modes: tuple[str, ...] = ()  # subset of {OnlyThresholdingResources}
    evictable_namespaces: Namespaces | None = None  # exclude only


@dataclass(frozen=True, slots=True)
class RemovePodsViolatingInterPodAntiAffinityArgs:
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None


REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_AFFINITY = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class RemovePodsViolatingNodeAffinityArgs:
    node_affinity_type: tuple[str, ...]
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class RemovePodsViolatingNodeTaintsArgs:
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None
    include_prefer_no_schedule: bool = False
    excluded_taints: tuple[str, ...] = ()
    included_taints: tuple[str, ...] | None = None  # None = not set; () = set but empty


@dataclass(frozen=True, slots=True)
class RemovePodsViolatingTopologySpreadConstraintArgs:
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None
    constraints: tuple[str, ...] = ("DoNotSchedule",)
    topology_balance_node_fit: bool = True


@dataclass(frozen=True, slots=True)
class RemovePodsHavingTooManyRestartsArgs:
    pod_restart_threshold: int
    including_init_containers: bool = False
    states: tuple[str, ...] = ()
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class PodConditionFilter:
    type: str = ""
    status: str = ""
    reason: str = ""
    min_time_since_last_transition_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class OwnerKinds:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodLifeTimeArgs:
    max_pod_life_time_seconds: int | None = None
    states: tuple[str, ...] = ()
    conditions: tuple[PodConditionFilter, ...] = ()
    exit_codes: tuple[int, ...] = ()
    owner_kinds: OwnerKinds | None = None
    including_init_containers: bool = False
    including_ephemeral_containers: bool = False
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class RemoveFailedPodsArgs:
    min_pod_lifetime_seconds: int | None = 3600
    exclude_owner_kinds: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    including_init_containers: bool = False
    namespaces: Namespaces | None = None
    label_selector: LabelSelector | None = None


PluginArgs = (
    DefaultEvictorArgs
    | RemoveDuplicatesArgs
    | LowNodeUtilizationArgs
    | HighNodeUtilizationArgs
    | RemovePodsViolatingInterPodAntiAffinityArgs
    | RemovePodsViolatingNodeAffinityArgs
    | RemovePodsViolatingNodeTaintsArgs
    | RemovePodsViolatingTopologySpreadConstraintArgs
    | RemovePodsHavingTooManyRestartsArgs
    | PodLifeTimeArgs
    | RemoveFailedPodsArgs
)

EXTENSION_POINTS = ("deschedule", "balance", "filter", "preEvictionFilter")


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    plugin_args: Mapping[str, Any]  # plugin name -> its *Args dataclass (DefaultEvictor always present)
    deschedule: tuple[str, ...] = ()
    balance: tuple[str, ...] = ()
    filter: tuple[str, ...] = ("DefaultEvictor",)
    pre_eviction_filter: tuple[str, ...] = ("DefaultEvictor",)
    written_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)
    """Plugin name -> its ``args`` exactly as the file wrote them (``policy convert`` keeps every
    field that was written, even one equal to its default). Not part of equality."""

    @property
    def evictor_args(self) -> DefaultEvictorArgs:
        args = self.plugin_args.get("DefaultEvictor")
        return args if isinstance(args, DefaultEvictorArgs) else DefaultEvictorArgs()


@dataclass(frozen=True, slots=True)
class MetricsProvider:
    source: str
    prometheus_url: str = ""
    secret_namespace: str = ""
    secret_name: str = ""


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded ``DeschedulerPolicy`` (whatever format it came in) in its v1alpha2 shape."""

    profiles: tuple[Profile, ...]
    node_selector: str | None = None
    max_pods_to_evict_per_node: int | None = None
    max_pods_to_evict_per_namespace: int | None = None
    max_pods_to_evict_total: int | None = None
    grace_period_seconds: int | None = None
    eviction_failure_event_notification: bool = False
    metrics_providers: tuple[MetricsProvider, ...] = ()
    # The kdesched-only top-level ``kdesched:`` block (event map, rate limits, settle windows),
    # validated by its owner (the reactor) and kept here as parsed YAML.
    kdesched: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""  # where it was loaded from, for messages
    api_version: str = "descheduler/v1alpha2"
    written: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """Top-level fields exactly as the file wrote them (see :attr:`Profile.written_args`)."""

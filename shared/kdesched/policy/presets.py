"""The OpenShift Kube Descheduler Operator's profile presets, rendered as the operator renders them.

Why: many operators know the descheduler only through the OpenShift presets
(``AffinityAndTaints``, ``LifecycleAndUtilization``, ...). kdesched reproduces the operator's
rendering (github.com/openshift/cluster-kube-descheduler-operator) so ``--profile NAME`` or a presets file
means exactly what the KubeDescheduler CR means on OpenShift, including its quirks:

* protected namespaces = ``kube-system``, ``hypershift``, ``openshift`` and every ``openshift-*``
  namespace of the namespace list given (the operator lists them once, at start);
* by default every plugin gets ``namespaces.exclude`` = protected + ``excluded``; with
  ``included``, plugins get ``namespaces.include``, LowNodeUtilization keeps
  ``evictableNamespaces.exclude`` = protected, and HighNodeUtilization gets no
  ``evictableNamespaces`` at all (the protected namespaces are not excluded there);
* each profile's DefaultEvictor: ``ignorePvcPods: true`` and ``evictLocalStoragePods: false``
  unless the ``EvictPodsWithPVC``/``EvictPodsWithLocalStorage`` modifiers are listed, plus the
  priority threshold;
* ``evictionLimits.total`` -> ``maxNoOfPodsToEvictTotal``; ``evictionLimits.node`` ->
  ``maxNoOfPodsToEvictPerNode`` and every LowNodeUtilization's ``evictionLimits.node``;
* the CRD's CEL rules: no duplicates, at most 11 entries, and the forbidden pairs of §2.

Differences: ``KubeVirtRelieveAndMigrate`` (and its ``Dev`` alias) is rejected — it needs
Prometheus metrics and the ``KubevirtMigrationAware`` plugin of the openshift/descheduler fork,
which kdesched does not ship. ``devActualUtilizationProfile`` gives LowNodeUtilization the
operator's Prometheus query (``metricsUtilization.source: Prometheus``, ``MetricResource``
thresholds at the same low/high levels); the operator's ``metricsProviders`` URL is the host of the
route ``openshift-monitoring/prometheus-k8s``, which only the live cluster knows, so kdesched uses
the Service behind it, :data:`OPENSHIFT_PROMETHEUS_URL` (write a v1alpha2 policy for another one). ``LongLifecycle`` together with ``DevPreviewLongLifecycle`` is rejected (the CRD
allows it, but it yields two policy profiles with the same name).

Files can select presets with a dedicated document (chosen over a ``kdesched:`` block in a
v1alpha2 policy, so that a DeschedulerPolicy stays a pure upstream document)::

    apiVersion: kdesched.dev/v1alpha1
    kind: Profiles
    profiles: [AffinityAndTaints, LifecycleAndUtilization, EvictPodsWithPVC]
    profileCustomizations:            # the KubeDescheduler CR's names
      namespaces: {excluded: [team-a]}
      thresholdPriorityClassName: important
      podLifetime: 48h
      devLowNodeUtilizationThresholds: High
    evictionLimits: {total: 20, node: 2}
    namespaces: [openshift-monitoring]  # openshift-* namespaces to protect (the operator lists the cluster's)
    kdesched: {}                         # optional kdesched settings, kept as in a DeschedulerPolicy

The KubeDescheduler CR itself (``operator.openshift.io/v1``, ``kind: KubeDescheduler``) is read
the same way from its ``spec``; the operator-only fields (``mode``, ``deschedulingIntervalSeconds``,
``logLevel``, ``managementState``, ...) are accepted and ignored — use ``--dry-run`` for
``Predictive``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kdesched.policy.args import Fields, parse_go_duration, show
from kdesched.policy.errors import PolicyError
from kdesched.policy.types import REQUIRED_AFFINITY, MetricsProvider, Policy

PROFILES_API_VERSION = "kdesched.dev/v1alpha1"
PROFILES_KIND = "Profiles"
OPERATOR_API_VERSION = "operator.openshift.io/v1"
OPERATOR_KIND = "KubeDescheduler"
DOCUMENT_KINDS = frozenset({(PROFILES_API_VERSION, PROFILES_KIND), (OPERATOR_API_VERSION, OPERATOR_KIND)})

PRESETS: Mapping[str, str] = {
    "AffinityAndTaints": "evict pods violating inter-pod anti-affinity, node taints and required node affinity",
    "TopologyAndDuplicates": "spread pods evenly (hard topology spread constraints) and spread duplicates",
    "SoftTopologyAndDuplicates": "TopologyAndDuplicates, also enforcing soft (ScheduleAnyway) spread constraints",
    "LifecycleAndUtilization": "evict pods older than 24h or with 100+ restarts; rebalance low/high utilized nodes",
    "LongLifecycle": "LifecycleAndUtilization without the 24h pod lifetime",
    "DevPreviewLongLifecycle": "deprecated alias of LongLifecycle",
    "CompactAndScale": "empty nodes below 20% utilization onto fewer nodes (HighNodeUtilization)",
    "EvictPodsWithPVC": "modifier: let the other profiles evict pods with PVCs",
    "EvictPodsWithLocalStorage": "modifier: let the other profiles evict pods with local storage",
}
MODIFIERS = ("EvictPodsWithPVC", "EvictPodsWithLocalStorage")
KUBEVIRT = ("KubeVirtRelieveAndMigrate", "DevKubeVirtRelieveAndMigrate")
MAX_PROFILES = 11
_UTILIZATION = ("LifecycleAndUtilization", "LongLifecycle", "DevPreviewLongLifecycle")
# CRD CEL rules (§2), as unordered pairs, plus the duplicate-name pair kdesched adds.
FORBIDDEN_PAIRS: tuple[tuple[str, str], ...] = (
    ("LifecycleAndUtilization", "LongLifecycle"),
    ("LifecycleAndUtilization", "DevPreviewLongLifecycle"),
    ("LifecycleAndUtilization", "CompactAndScale"),
    ("LongLifecycle", "CompactAndScale"),
    ("DevPreviewLongLifecycle", "CompactAndScale"),
    ("SoftTopologyAndDuplicates", "TopologyAndDuplicates"),
    ("CompactAndScale", "TopologyAndDuplicates"),
    ("LongLifecycle", "DevPreviewLongLifecycle"),
)
LOW_NODE_UTILIZATION_LEVELS: Mapping[str, tuple[int, int]] = {"Low": (10, 30), "Medium": (20, 50), "": (20, 50),
                                                               "High": (40, 70)}
HIGH_NODE_UTILIZATION_LEVELS: Mapping[str, int] = {"Minimal": 10, "Modest": 20, "": 20, "Moderate": 30}
# devActualUtilizationProfile -> the Prometheus query the operator writes into LowNodeUtilization
# (cluster-kube-descheduler-operator ``utilizationProfileToPrometheusQuery``); ``query:<PromQL>`` is
# taken as written. The two Combined profiles read recording rules the operator installs.
ACTUAL_UTILIZATION_QUERIES: Mapping[str, str] = {
    "PrometheusCPUUsage": "instance:node_cpu:rate:sum",
    "PrometheusCPUPSIPressure": "rate(node_pressure_cpu_waiting_seconds_total[1m])",
    "PrometheusCPUPSIPressureByUtilization": (
        'avg by (instance) ( rate(node_pressure_cpu_waiting_seconds_total[1m])) and (1 - avg by (instance) '
        '(rate(node_cpu_seconds_total{mode="idle"}[1m]))) > 0.7 or avg by (instance) '
        '( rate(node_pressure_cpu_waiting_seconds_total[1m])) * 0'),
    "PrometheusMemoryPSIPressure": "rate(node_pressure_memory_waiting_seconds_total[1m])",
    "PrometheusIOPSIPressure": "rate(node_pressure_io_waiting_seconds_total[1m])",
    "PrometheusCPUCombined": "descheduler:combined_utilization_and_pressure:avg1m",
    "PrometheusCPUMemoryCombinedProfile": "descheduler:node:linear_amplified_ideal_point_positive_distance:k3:avg1m",
}
QUERY_PREFIX = "query:"
# The operator points metricsProviders at the host of the route openshift-monitoring/prometheus-k8s,
# which only the live cluster knows; kdesched uses the Service behind that route (in-cluster DNS).
OPENSHIFT_PROMETHEUS_URL = "https://prometheus-k8s.openshift-monitoring.svc:9091"
PROTECTED_NAMESPACES = ("kube-system", "hypershift", "openshift")
PROTECTED_PREFIX = "openshift-"
RESOURCES = ("cpu", "memory", "pods")


@dataclass(frozen=True, slots=True)
class PresetCustomizations:
    """The KubeDescheduler CR's ``profileCustomizations`` and ``evictionLimits`` that kdesched honours."""

    namespaces_included: tuple[str, ...] = ()
    namespaces_excluded: tuple[str, ...] = ()
    threshold_priority: int | None = None
    threshold_priority_class_name: str | None = None
    pod_lifetime_seconds: int = 86400
    low_node_utilization_thresholds: str = "Medium"  # Low 10/30, Medium 20/50, High 40/70
    high_node_utilization_thresholds: str = "Modest"  # Minimal 10, Modest 20, Moderate 30
    eviction_limits_total: int | None = None
    eviction_limits_node: int | None = None
    actual_utilization_profile: str = ""  # devActualUtilizationProfile: a key of ACTUAL_UTILIZATION_QUERIES or query:<PromQL>


def actual_utilization_query(profile: str) -> str | None:
    """The PromQL of a ``devActualUtilizationProfile`` value, None for an unknown one."""
    if profile.startswith(QUERY_PREFIX):
        return profile[len(QUERY_PREFIX):] or None
    return ACTUAL_UTILIZATION_QUERIES.get(profile)


def protected_namespaces(namespaces: Collection[str] = ()) -> tuple[str, ...]:
    """The operator's protected namespaces for a cluster with ``namespaces``."""
    return PROTECTED_NAMESPACES + tuple(sorted(n for n in set(namespaces) if n.startswith(PROTECTED_PREFIX)))


def is_protected(namespace: str) -> bool:
    return namespace in PROTECTED_NAMESPACES or namespace.startswith(PROTECTED_PREFIX)


def check_combination(names: Sequence[str], field: str = "profiles") -> list[str]:
    """The CRD's rules on the profile list (§2): known names, no duplicates, no forbidden pairs."""
    errors: list[str] = []
    if not names:
        errors.append(f"{field}: at least one profile is required (known: {', '.join(PRESETS)})")
    if len(names) > MAX_PROFILES:
        errors.append(f"{field}: at most {MAX_PROFILES} profiles may be listed, got {len(names)}")
    seen: list[str] = []
    for i, name in enumerate(names):
        if name in KUBEVIRT:
            errors.append(f"{field}[{i}]: {name} is not supported by kdesched: it needs Prometheus metrics and the "
                          "KubevirtMigrationAware plugin of the openshift/descheduler fork, which kdesched does not ship")
        elif name not in PRESETS:
            errors.append(f"{field}[{i}]: unknown profile {show(name)} (known: {', '.join(PRESETS)})")
        elif name in seen:
            errors.append(f"{field}[{i}]: {name} is listed more than once")
        else:
            seen.append(name)
    for a, b in FORBIDDEN_PAIRS:
        if a in seen and b in seen:
            first, second = sorted((a, b), key=seen.index)
            errors.append(f"{field}: {first} cannot be combined with {second}")
    return errors


def _check_customizations(custom: PresetCustomizations) -> list[str]:
    errors: list[str] = []
    c = "profileCustomizations"
    if custom.namespaces_included and custom.namespaces_excluded:
        errors.append(f"{c}.namespaces: only one of included and excluded may be set")
    for ns in custom.namespaces_included:
        if is_protected(ns):
            errors.append(f"{c}.namespaces.included: {ns} is a protected namespace and cannot be included")
    if custom.threshold_priority is not None and custom.threshold_priority_class_name:
        errors.append(f"{c}: only one of thresholdPriority and thresholdPriorityClassName may be set")
    if custom.low_node_utilization_thresholds not in LOW_NODE_UTILIZATION_LEVELS:
        errors.append(f"{c}.devLowNodeUtilizationThresholds: must be one of Low, Medium, High, got "
                      f"{show(custom.low_node_utilization_thresholds)}")
    if custom.high_node_utilization_thresholds not in HIGH_NODE_UTILIZATION_LEVELS:
        errors.append(f"{c}.devHighNodeUtilizationThresholds: must be one of Minimal, Modest, Moderate, got "
                      f"{show(custom.high_node_utilization_thresholds)}")
    if custom.actual_utilization_profile and actual_utilization_query(custom.actual_utilization_profile) is None:
        errors.append(f"{c}.devActualUtilizationProfile: must be one of {', '.join(ACTUAL_UTILIZATION_QUERIES)} "
                      f"or query:<PromQL>, got {show(custom.actual_utilization_profile)}")
    if custom.pod_lifetime_seconds < 0:
        errors.append(f"{c}.podLifetime: must not be negative, got {custom.pod_lifetime_seconds}s")
    for name, value in (("total", custom.eviction_limits_total), ("node", custom.eviction_limits_node)):
        if value is not None and value < 0:
            errors.append(f"evictionLimits.{name}: must be a non-negative integer, got {value}")
    return errors


def render_presets(names: Sequence[str], custom: PresetCustomizations,
                   namespaces: Collection[str] = ()) -> dict[str, Any]:
    """The ``descheduler/v1alpha2`` document the operator would write for these profiles (§6)."""
    errors = check_combination(list(names)) + _check_customizations(custom)
    if errors:
        raise PolicyError(errors, "presets")
    protected = list(protected_namespaces(namespaces))
    if custom.namespaces_included:
        ns: dict[str, list[str]] = {"include": list(custom.namespaces_included)}
        lnu_ns: dict[str, list[str]] | None = {"exclude": protected}
        hnu_ns: dict[str, list[str]] | None = None
    else:
        excluded = protected + [n for n in custom.namespaces_excluded if n not in protected]
        ns = {"exclude": excluded}
        lnu_ns = hnu_ns = {"exclude": excluded}

    evictor: dict[str, Any] = {"ignorePvcPods": "EvictPodsWithPVC" not in names,
                               "evictLocalStoragePods": "EvictPodsWithLocalStorage" in names}
    if custom.threshold_priority is not None:
        evictor["priorityThreshold"] = {"value": custom.threshold_priority}
    elif custom.threshold_priority_class_name:
        evictor["priorityThreshold"] = {"name": custom.threshold_priority_class_name}

    low, high = LOW_NODE_UTILIZATION_LEVELS[custom.low_node_utilization_thresholds]
    lnu: dict[str, Any] = {}
    if lnu_ns is not None:
        lnu["evictableNamespaces"] = _copy(lnu_ns)
    query = actual_utilization_query(custom.actual_utilization_profile) if custom.actual_utilization_profile else None
    if query is not None:  # load-aware: one Prometheus value per node instead of requests
        lnu["thresholds"] = {"MetricResource": low}
        lnu["targetThresholds"] = {"MetricResource": high}
        lnu["metricsUtilization"] = {"source": "Prometheus", "prometheus": {"query": query}}
    else:
        lnu["thresholds"] = {r: low for r in RESOURCES}
        lnu["targetThresholds"] = {r: high for r in RESOURCES}
    if custom.eviction_limits_node is not None:
        lnu["evictionLimits"] = {"node": custom.eviction_limits_node}
    restarts = {"namespaces": _copy(ns), "podRestartThreshold": 100, "includingInitContainers": True}

    def make(name: str, configs: list[tuple[str, dict[str, Any]]], **points: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "pluginConfig": [{"name": "DefaultEvictor", "args": _copy(evictor)}]
                            + [{"name": n, "args": a} for n, a in configs],
            "plugins": {"filter": {"enabled": ["DefaultEvictor"]}, **{p: {"enabled": e} for p, e in points.items()}},
        }

    profiles: list[dict[str, Any]] = []
    for name in names:
        if name == "AffinityAndTaints":
            profiles.append(make(name, [
                ("RemovePodsViolatingInterPodAntiAffinity", {"namespaces": _copy(ns)}),
                ("RemovePodsViolatingNodeTaints", {"namespaces": _copy(ns)}),
                ("RemovePodsViolatingNodeAffinity", {"namespaces": _copy(ns), "nodeAffinityType": [REQUIRED_AFFINITY]}),
            ], deschedule=["RemovePodsViolatingInterPodAntiAffinity", "RemovePodsViolatingNodeTaints",
                           "RemovePodsViolatingNodeAffinity"]))
        elif name in ("TopologyAndDuplicates", "SoftTopologyAndDuplicates"):
            constraints = ["DoNotSchedule", "ScheduleAnyway"] if name.startswith("Soft") else ["DoNotSchedule"]
            profiles.append(make(name, [
                ("RemovePodsViolatingTopologySpreadConstraint", {"namespaces": _copy(ns), "constraints": constraints}),
                ("RemoveDuplicates", {"namespaces": _copy(ns)}),
            ], balance=["RemovePodsViolatingTopologySpreadConstraint", "RemoveDuplicates"]))
        elif name == "LifecycleAndUtilization":
            profiles.append(make(name, [
                ("PodLifeTime", {"namespaces": _copy(ns), "maxPodLifeTimeSeconds": custom.pod_lifetime_seconds}),
                ("RemovePodsHavingTooManyRestarts", _copy(restarts)),
                ("LowNodeUtilization", _copy(lnu)),
            ], deschedule=["PodLifeTime", "RemovePodsHavingTooManyRestarts"], balance=["LowNodeUtilization"]))
        elif name in ("LongLifecycle", "DevPreviewLongLifecycle"):
            profiles.append(make("LongLifecycle", [
                ("RemovePodsHavingTooManyRestarts", _copy(restarts)),
                ("LowNodeUtilization", _copy(lnu)),
            ], deschedule=["RemovePodsHavingTooManyRestarts"], balance=["LowNodeUtilization"]))
        elif name == "CompactAndScale":
            level = HIGH_NODE_UTILIZATION_LEVELS[custom.high_node_utilization_thresholds]
            hnu: dict[str, Any] = {}
            if hnu_ns is not None:
                hnu["evictableNamespaces"] = _copy(hnu_ns)
            hnu["thresholds"] = {r: level for r in RESOURCES}
            profiles.append(make(name, [("HighNodeUtilization", hnu)], balance=["HighNodeUtilization"]))
        # EvictPodsWith* are modifiers: no profile of their own.

    doc: dict[str, Any] = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy"}
    if query is not None and any(n in _UTILIZATION for n in names):
        doc["metricsProviders"] = [{"source": "Prometheus", "prometheus": {"url": OPENSHIFT_PROMETHEUS_URL}}]
    if custom.eviction_limits_node is not None:
        doc["maxNoOfPodsToEvictPerNode"] = custom.eviction_limits_node
    if custom.eviction_limits_total is not None:
        doc["maxNoOfPodsToEvictTotal"] = custom.eviction_limits_total
    doc["profiles"] = profiles
    return doc


# --------------------------------------------------------------------------- preset documents

OPERATOR_ONLY_FIELDS = ("managementState", "operatorLogLevel", "logLevel", "unsupportedConfigOverrides",
                        "observedConfig", "deschedulingIntervalSeconds", "mode")
IGNORED_CUSTOMIZATIONS = ("devDeviationThresholds", "devEnableEvictionsInBackground", "devEnableSoftTainter",
                          "devMigrationCooldown", "devMaxMigrationCooldown", "devMigrationHistoryWindow")


def document_to_v1alpha2(doc: Mapping[str, Any], errors: list[str]) -> dict[str, Any] | None:
    """Render a ``Profiles`` document or a ``KubeDescheduler`` CR into a v1alpha2 document."""
    start = len(errors)
    top = Fields(doc, "", errors, what=doc.get("kind", PROFILES_KIND))
    top.get("apiVersion")
    top.get("kind")
    extra_namespaces: tuple[str, ...] = ()
    kdesched: Any = None
    if doc.get("kind") == OPERATOR_KIND:
        top.get("metadata")
        top.get("status")
        body = top.child("spec", what="KubeDescheduler spec")
        top.finish()
        if body is None:
            errors.append("spec: is required")
            return None
        for key in OPERATOR_ONLY_FIELDS:
            body.get(key)
    else:
        body = top
        extra_namespaces = top.str_list("namespaces", non_empty_items=True) or ()
        kdesched = top.get("kdesched")
        if kdesched is not None and not isinstance(kdesched, Mapping):
            top.error("kdesched", f"must be a map of kdesched settings, got {show(kdesched)}")
    names = body.str_list("profiles")
    if names is None:
        body.error("profiles", f"is required: a list of {', '.join(PRESETS)}")
    custom = _customizations(body)
    body.finish()
    if len(errors) > start or custom is None or names is None:
        return None
    try:
        rendered = render_presets(names, custom, extra_namespaces)
    except PolicyError as exc:
        errors.extend(f"{body.prefix}{e}" for e in exc.errors)
        return None
    if kdesched is not None:
        rendered["kdesched"] = kdesched
    return rendered


def _customizations(body: Fields) -> PresetCustomizations | None:
    values: dict[str, Any] = {}
    pc = body.child("profileCustomizations", what="profileCustomizations")
    if pc is not None:
        ns = pc.child("namespaces", what="namespaces")
        if ns is not None:
            values["namespaces_included"] = ns.str_list("included", non_empty_items=True) or ()
            values["namespaces_excluded"] = ns.str_list("excluded", non_empty_items=True) or ()
            ns.finish()
        priority = pc.integer("thresholdPriority", minimum=-(2**31), maximum=2_000_000_000)
        if priority is not None:
            values["threshold_priority"] = priority
        class_name = pc.string("thresholdPriorityClassName")
        if class_name:
            values["threshold_priority_class_name"] = class_name
        lifetime = pc.get("podLifetime")
        if lifetime is not None:
            if not isinstance(lifetime, str):
                pc.error("podLifetime", f"must be a duration such as 24h or 5m, got {show(lifetime)}")
            else:
                try:
                    values["pod_lifetime_seconds"] = int(parse_go_duration(lifetime))
                except ValueError as exc:
                    pc.error("podLifetime", str(exc))
        low = pc.string("devLowNodeUtilizationThresholds", default="Medium")
        values["low_node_utilization_thresholds"] = low
        high = pc.string("devHighNodeUtilizationThresholds", default="Modest")
        values["high_node_utilization_thresholds"] = high
        actual = pc.string("devActualUtilizationProfile")
        if actual:
            values["actual_utilization_profile"] = actual
        for key in IGNORED_CUSTOMIZATIONS:
            pc.get(key)
        pc.finish()
    limits = body.child("evictionLimits", what="evictionLimits")
    if limits is not None:
        values["eviction_limits_total"] = limits.integer("total", minimum=0, maximum=2**31 - 1)
        values["eviction_limits_node"] = limits.integer("node", minimum=0, maximum=2**31 - 1)
        limits.finish()
    return PresetCustomizations(**values)


# --------------------------------------------------------------------------- merging

def merge_policies(a: Policy, b: Policy) -> Policy:
    """``a`` with ``b``'s profiles added after its own (the CLI's ``--policy FILE --profile NAME``).

    Profile names must stay unique. Eviction limits take the stricter (smaller) value; every
    other top-level setting comes from ``a`` when ``a`` sets it, else from ``b``. Two different
    top-level ``nodeSelector``s, or two Prometheus providers with different URLs, are errors.
    """
    errors: list[str] = []
    names = {p.name for p in a.profiles}
    for p in b.profiles:
        if p.name in names:
            errors.append(f'profile "{p.name}" is defined by both {a.source or "the policy"} and {b.source or "the presets"}')
    if a.node_selector and b.node_selector and a.node_selector != b.node_selector:
        errors.append(f"nodeSelector: {show(a.node_selector)} ({a.source}) differs from {show(b.node_selector)} ({b.source})")
    providers: dict[str, MetricsProvider] = {p.source: p for p in a.metrics_providers}
    for mp in b.metrics_providers:
        if mp.source in providers and providers[mp.source] != mp:
            errors.append(f"metricsProviders: two different {mp.source} providers")
        providers.setdefault(mp.source, mp)
    if errors:
        raise PolicyError(errors, f"{a.source} + {b.source}")

    def stricter(x: int | None, y: int | None) -> int | None:
        return y if x is None else x if y is None else min(x, y)

    return replace(
        a,
        profiles=a.profiles + b.profiles,
        node_selector=a.node_selector or b.node_selector,
        max_pods_to_evict_per_node=stricter(a.max_pods_to_evict_per_node, b.max_pods_to_evict_per_node),
        max_pods_to_evict_per_namespace=stricter(a.max_pods_to_evict_per_namespace, b.max_pods_to_evict_per_namespace),
        max_pods_to_evict_total=stricter(a.max_pods_to_evict_total, b.max_pods_to_evict_total),
        grace_period_seconds=a.grace_period_seconds if a.grace_period_seconds is not None else b.grace_period_seconds,
        eviction_failure_event_notification=a.eviction_failure_event_notification or b.eviction_failure_event_notification,
        metrics_providers=tuple(providers.values()),
        kdesched={**b.kdesched, **a.kdesched},
        source=f"{a.source} + {b.source}",
    )


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value

"""OpenShift presets: the operator's rendering (openshift/cluster-kube-descheduler-operator), the CRD's
combination rules (§2), the Profiles/KubeDescheduler documents, and merge_policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kdesched.policy.errors import PolicyError
from kdesched.policy.load import expand_presets, load_policy, policy_from_mapping
from kdesched.policy.presets import (
    PRESETS,
    PresetCustomizations,
    merge_policies,
    protected_namespaces,
    render_presets,
)
from kdesched.policy.types import (
    DEFAULT_PROTECTIONS,
    HighNodeUtilizationArgs,
    LowNodeUtilizationArgs,
    MetricsProvider,
    MetricsUtilization,
    Namespaces,
    PodLifeTimeArgs,
    PriorityThreshold,
    RemovePodsHavingTooManyRestartsArgs,
    RemovePodsViolatingNodeAffinityArgs,
    RemovePodsViolatingTopologySpreadConstraintArgs,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
NS = {"exclude": ["kube-system", "hypershift", "openshift"]}
EV = {"ignorePvcPods": True, "evictLocalStoragePods": False}
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PROTECTED = Namespaces(exclude=("kube-system", "hypershift", "openshift"))


def profile_of(names: list[str], which: str, custom: PresetCustomizations | None = None,
               namespaces: tuple[str, ...] = ()) -> Any:
    policy = expand_presets(names, custom or PresetCustomizations(), namespaces)
    return next(p for p in policy.profiles if p.name == which)


# --------------------------------------------------------------------------- §6 rendering

SECTION_6 = {
    "AffinityAndTaints": {
        "name": "AffinityAndTaints",
        "pluginConfig": [
            {"name": "DefaultEvictor", "args": EV},
            {"name": "RemovePodsViolatingInterPodAntiAffinity", "args": {"namespaces": NS}},
            {"name": "RemovePodsViolatingNodeTaints", "args": {"namespaces": NS}},
            {"name": "RemovePodsViolatingNodeAffinity", "args": {"namespaces": NS, "nodeAffinityType": [REQ]}},
        ],
        "plugins": {"filter": {"enabled": ["DefaultEvictor"]},
                    "deschedule": {"enabled": ["RemovePodsViolatingInterPodAntiAffinity", "RemovePodsViolatingNodeTaints",
                                               "RemovePodsViolatingNodeAffinity"]}},
    },
    "TopologyAndDuplicates": {
        "name": "TopologyAndDuplicates",
        "pluginConfig": [
            {"name": "DefaultEvictor", "args": EV},
            {"name": "RemovePodsViolatingTopologySpreadConstraint", "args": {"namespaces": NS, "constraints": ["DoNotSchedule"]}},
            {"name": "RemoveDuplicates", "args": {"namespaces": NS}},
        ],
        "plugins": {"filter": {"enabled": ["DefaultEvictor"]},
                    "balance": {"enabled": ["RemovePodsViolatingTopologySpreadConstraint", "RemoveDuplicates"]}},
    },
    "SoftTopologyAndDuplicates": {
        "name": "SoftTopologyAndDuplicates",
        "pluginConfig": [
            {"name": "DefaultEvictor", "args": EV},
            {"name": "RemovePodsViolatingTopologySpreadConstraint",
             "args": {"namespaces": NS, "constraints": ["DoNotSchedule", "ScheduleAnyway"]}},
            {"name": "RemoveDuplicates", "args": {"namespaces": NS}},
        ],
        "plugins": {"filter": {"enabled": ["DefaultEvictor"]},
                    "balance": {"enabled": ["RemovePodsViolatingTopologySpreadConstraint", "RemoveDuplicates"]}},
    },
    "LifecycleAndUtilization": {
        "name": "LifecycleAndUtilization",
        "pluginConfig": [
            {"name": "DefaultEvictor", "args": EV},
            {"name": "PodLifeTime", "args": {"namespaces": NS, "maxPodLifeTimeSeconds": 86400}},
            {"name": "RemovePodsHavingTooManyRestarts",
             "args": {"namespaces": NS, "podRestartThreshold": 100, "includingInitContainers": True}},
            {"name": "LowNodeUtilization", "args": {
                "evictableNamespaces": NS, "thresholds": {"cpu": 20, "memory": 20, "pods": 20},
                "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50}}},
        ],
        "plugins": {"filter": {"enabled": ["DefaultEvictor"]},
                    "deschedule": {"enabled": ["PodLifeTime", "RemovePodsHavingTooManyRestarts"]},
                    "balance": {"enabled": ["LowNodeUtilization"]}},
    },
    "LongLifecycle": {
        "name": "LongLifecycle",
        "pluginConfig": [
            {"name": "DefaultEvictor", "args": EV},
            {"name": "RemovePodsHavingTooManyRestarts",
             "args": {"namespaces": NS, "podRestartThreshold": 100, "includingInitContainers": True}},
            {"name": "LowNodeUtilization", "args": {
                "evictableNamespaces": NS, "thresholds": {"cpu": 20, "memory": 20, "pods": 20},
                "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50}}},
        ],
        "plugins": {"filter": {"enabled": ["DefaultEvictor"]},
                    "deschedule": {"enabled": ["RemovePodsHavingTooManyRestarts"]},
                    "balance": {"enabled": ["LowNodeUtilization"]}},
    },
    "CompactAndScale": {
        "name": "CompactAndScale",
        "pluginConfig": [
            {"name": "DefaultEvictor", "args": EV},
            {"name": "HighNodeUtilization", "args": {"evictableNamespaces": NS, "thresholds": {"cpu": 20, "memory": 20, "pods": 20}}},
        ],
        "plugins": {"filter": {"enabled": ["DefaultEvictor"]}, "balance": {"enabled": ["HighNodeUtilization"]}},
    },
}


@pytest.mark.parametrize("name", sorted(SECTION_6))
def test_each_preset_renders_as_section_6(name: str) -> None:
    doc = render_presets([name], PresetCustomizations())
    assert doc == {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": [SECTION_6[name]]}
    policy = expand_presets([name], PresetCustomizations())
    (p,) = policy.profiles
    assert p.name == name
    assert p.evictor_args.protections == DEFAULT_PROTECTIONS | {"PodsWithPVC"}
    assert p.evictor_args.priority_threshold == PriorityThreshold(value=2_000_000_000)


def test_dev_preview_alias_emits_long_lifecycle() -> None:
    doc = render_presets(["DevPreviewLongLifecycle"], PresetCustomizations())
    assert doc["profiles"] == [SECTION_6["LongLifecycle"]]


def test_loaded_key_args() -> None:
    policy = expand_presets(["AffinityAndTaints", "SoftTopologyAndDuplicates", "LifecycleAndUtilization"])
    assert [p.name for p in policy.profiles] == ["AffinityAndTaints", "SoftTopologyAndDuplicates", "LifecycleAndUtilization"]
    affinity, topology, lifecycle = policy.profiles
    assert affinity.plugin_args["RemovePodsViolatingNodeAffinity"] == RemovePodsViolatingNodeAffinityArgs((REQ,), PROTECTED)
    assert topology.plugin_args["RemovePodsViolatingTopologySpreadConstraint"] == \
        RemovePodsViolatingTopologySpreadConstraintArgs(PROTECTED, None, ("DoNotSchedule", "ScheduleAnyway"), True)
    assert lifecycle.plugin_args["PodLifeTime"] == PodLifeTimeArgs(max_pod_life_time_seconds=86400, namespaces=PROTECTED)
    assert lifecycle.plugin_args["RemovePodsHavingTooManyRestarts"] == RemovePodsHavingTooManyRestartsArgs(
        100, True, namespaces=PROTECTED)
    assert lifecycle.plugin_args["LowNodeUtilization"] == LowNodeUtilizationArgs(
        {"cpu": 20, "memory": 20, "pods": 20}, {"cpu": 50, "memory": 50, "pods": 50}, evictable_namespaces=PROTECTED)


@pytest.mark.parametrize(("modifiers", "protections"), [
    ([], DEFAULT_PROTECTIONS | {"PodsWithPVC"}),
    (["EvictPodsWithPVC"], DEFAULT_PROTECTIONS),
    (["EvictPodsWithLocalStorage"], (DEFAULT_PROTECTIONS - {"PodsWithLocalStorage"}) | {"PodsWithPVC"}),
    (["EvictPodsWithPVC", "EvictPodsWithLocalStorage"], DEFAULT_PROTECTIONS - {"PodsWithLocalStorage"}),
])
def test_evict_pods_with_modifiers(modifiers: list[str], protections: set[str]) -> None:
    policy = expand_presets(["AffinityAndTaints", *modifiers, "CompactAndScale"])
    assert [p.name for p in policy.profiles] == ["AffinityAndTaints", "CompactAndScale"]
    for p in policy.profiles:
        assert p.evictor_args.protections == protections


def test_only_modifiers_gives_no_profiles() -> None:
    assert expand_presets(["EvictPodsWithPVC"]).profiles == ()


# --------------------------------------------------------------------------- namespaces (§1)

def test_protected_namespaces_include_listed_openshift_ones() -> None:
    cluster = ["default", "openshift-monitoring", "openshift-etcd", "openshiftish", "apps"]
    assert protected_namespaces(cluster) == ("kube-system", "hypershift", "openshift", "openshift-etcd",
                                             "openshift-monitoring")
    p = profile_of(["TopologyAndDuplicates"], "TopologyAndDuplicates", namespaces=tuple(cluster))
    assert p.plugin_args["RemoveDuplicates"].namespaces.exclude == protected_namespaces(cluster)


def test_excluded_namespaces_are_appended() -> None:
    custom = PresetCustomizations(namespaces_excluded=("team-a", "kube-system"))
    p = profile_of(["LongLifecycle"], "LongLifecycle", custom)
    expected = Namespaces(exclude=("kube-system", "hypershift", "openshift", "team-a"))
    assert p.plugin_args["RemovePodsHavingTooManyRestarts"].namespaces == expected
    assert p.plugin_args["LowNodeUtilization"].evictable_namespaces == expected


def test_included_namespaces_quirks() -> None:
    custom = PresetCustomizations(namespaces_included=("apps", "web"))
    policy = expand_presets(["AffinityAndTaints", "LongLifecycle"], custom, ["openshift-x"])
    affinity, long = policy.profiles
    include = Namespaces(include=("apps", "web"))
    assert affinity.plugin_args["RemovePodsViolatingNodeTaints"].namespaces == include
    assert long.plugin_args["RemovePodsHavingTooManyRestarts"].namespaces == include
    # LowNodeUtilization has no include option: it keeps excluding the protected namespaces
    assert long.plugin_args["LowNodeUtilization"].evictable_namespaces == Namespaces(
        exclude=("kube-system", "hypershift", "openshift", "openshift-x"))
    # HighNodeUtilization gets no evictableNamespaces at all (the operator's quirk)
    compact = profile_of(["CompactAndScale"], "CompactAndScale", custom)
    assert compact.plugin_args["HighNodeUtilization"] == HighNodeUtilizationArgs({"cpu": 20, "memory": 20, "pods": 20})


# --------------------------------------------------------------------------- customizations

@pytest.mark.parametrize(("level", "low", "high"), [("Low", 10, 30), ("Medium", 20, 50), ("", 20, 50), ("High", 40, 70)])
def test_low_node_utilization_levels(level: str, low: int, high: int) -> None:
    p = profile_of(["LifecycleAndUtilization"], "LifecycleAndUtilization",
                   PresetCustomizations(low_node_utilization_thresholds=level))
    args = p.plugin_args["LowNodeUtilization"]
    assert args.thresholds == {"cpu": low, "memory": low, "pods": low}
    assert args.target_thresholds == {"cpu": high, "memory": high, "pods": high}


@pytest.mark.parametrize(("level", "value"), [("Minimal", 10), ("Modest", 20), ("", 20), ("Moderate", 30)])
def test_high_node_utilization_levels(level: str, value: int) -> None:
    p = profile_of(["CompactAndScale"], "CompactAndScale", PresetCustomizations(high_node_utilization_thresholds=level))
    assert p.plugin_args["HighNodeUtilization"].thresholds == {"cpu": value, "memory": value, "pods": value}


def test_pod_lifetime_priority_and_eviction_limits() -> None:
    custom = PresetCustomizations(pod_lifetime_seconds=300, threshold_priority=1000,
                                  eviction_limits_total=10, eviction_limits_node=2)
    policy = expand_presets(["LifecycleAndUtilization", "AffinityAndTaints"], custom)
    assert policy.max_pods_to_evict_total == 10 and policy.max_pods_to_evict_per_node == 2
    lifecycle = policy.profiles[0]
    assert lifecycle.plugin_args["PodLifeTime"].max_pod_life_time_seconds == 300
    assert lifecycle.plugin_args["LowNodeUtilization"].eviction_limits_node == 2
    assert all(p.evictor_args.priority_threshold == PriorityThreshold(value=1000) for p in policy.profiles)
    named = expand_presets(["AffinityAndTaints"], PresetCustomizations(threshold_priority_class_name="important"))
    assert named.profiles[0].evictor_args.priority_threshold == PriorityThreshold(name="important")


# --------------------------------------------------------------------------- §2 combination rules

INVALID_COMBINATIONS = [
    (["LifecycleAndUtilization", "LongLifecycle"], "profiles: LifecycleAndUtilization cannot be combined with LongLifecycle"),
    (["DevPreviewLongLifecycle", "LifecycleAndUtilization"],
     "profiles: DevPreviewLongLifecycle cannot be combined with LifecycleAndUtilization"),
    (["CompactAndScale", "LifecycleAndUtilization"], "profiles: CompactAndScale cannot be combined with LifecycleAndUtilization"),
    (["LongLifecycle", "CompactAndScale"], "profiles: LongLifecycle cannot be combined with CompactAndScale"),
    (["DevPreviewLongLifecycle", "CompactAndScale"], "profiles: DevPreviewLongLifecycle cannot be combined with CompactAndScale"),
    (["TopologyAndDuplicates", "SoftTopologyAndDuplicates"],
     "profiles: TopologyAndDuplicates cannot be combined with SoftTopologyAndDuplicates"),
    (["CompactAndScale", "TopologyAndDuplicates"], "profiles: CompactAndScale cannot be combined with TopologyAndDuplicates"),
    (["LongLifecycle", "DevPreviewLongLifecycle"], "profiles: LongLifecycle cannot be combined with DevPreviewLongLifecycle"),
    (["AffinityAndTaints", "AffinityAndTaints"], "profiles[1]: AffinityAndTaints is listed more than once"),
    (["KubeVirtRelieveAndMigrate"], ("profiles[0]: KubeVirtRelieveAndMigrate is not supported by kdesched: it needs "
     "Prometheus metrics and the KubevirtMigrationAware plugin")),
    (["AffinityAndTaints", "DevKubeVirtRelieveAndMigrate"], "profiles[1]: DevKubeVirtRelieveAndMigrate is not supported"),
    (["Affinity"], 'profiles[0]: unknown profile "Affinity" (known: AffinityAndTaints'),
    ([], "profiles: at least one profile is required"),
    (["AffinityAndTaints"] * 12, "profiles: at most 11 profiles may be listed, got 12"),
]


@pytest.mark.parametrize(("names", "message"), INVALID_COMBINATIONS, ids=[str(i) for i in range(len(INVALID_COMBINATIONS))])
def test_forbidden_combinations(names: list[str], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        expand_presets(names)
    assert any(e.startswith(message) for e in info.value.errors), info.value.errors
    assert info.value.source.startswith("presets")


def test_allowed_combinations_of_the_crd() -> None:
    # §2 gaps: CompactAndScale + SoftTopologyAndDuplicates is allowed
    policy = expand_presets(["CompactAndScale", "SoftTopologyAndDuplicates", "AffinityAndTaints",
                             "EvictPodsWithPVC", "EvictPodsWithLocalStorage"])
    assert len(policy.profiles) == 3


@pytest.mark.parametrize(("custom", "message"), [
    (PresetCustomizations(namespaces_included=("a",), namespaces_excluded=("b",)),
     "profileCustomizations.namespaces: only one of included and excluded may be set"),
    (PresetCustomizations(namespaces_included=("openshift-etcd",)),
     "profileCustomizations.namespaces.included: openshift-etcd is a protected namespace"),
    (PresetCustomizations(namespaces_included=("kube-system",)),
     "profileCustomizations.namespaces.included: kube-system is a protected namespace"),
    (PresetCustomizations(threshold_priority=1, threshold_priority_class_name="x"),
     "profileCustomizations: only one of thresholdPriority and thresholdPriorityClassName may be set"),
    (PresetCustomizations(low_node_utilization_thresholds="Huge"),
     'profileCustomizations.devLowNodeUtilizationThresholds: must be one of Low, Medium, High, got "Huge"'),
    (PresetCustomizations(high_node_utilization_thresholds="Max"),
     'profileCustomizations.devHighNodeUtilizationThresholds: must be one of Minimal, Modest, Moderate, got "Max"'),
    (PresetCustomizations(eviction_limits_node=-1), "evictionLimits.node: must be a non-negative integer, got -1"),
])
def test_invalid_customizations(custom: PresetCustomizations, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        expand_presets(["LifecycleAndUtilization"], custom)
    assert any(e.startswith(message) for e in info.value.errors), info.value.errors


def test_presets_table_names() -> None:
    assert set(PRESETS) == {"AffinityAndTaints", "TopologyAndDuplicates", "SoftTopologyAndDuplicates",
                            "LifecycleAndUtilization", "LongLifecycle", "DevPreviewLongLifecycle", "CompactAndScale",
                            "EvictPodsWithPVC", "EvictPodsWithLocalStorage"}


# --------------------------------------------------------------------------- documents

def test_profiles_document_example() -> None:
    policy = load_policy(str(EXAMPLES / "openshift-presets.yaml"))
    assert policy.api_version == "kdesched.dev/v1alpha1"
    assert [p.name for p in policy.profiles] == ["AffinityAndTaints", "LifecycleAndUtilization"]
    assert (policy.max_pods_to_evict_total, policy.max_pods_to_evict_per_node) == (20, 2)
    lifecycle = policy.profiles[1]
    assert lifecycle.plugin_args["PodLifeTime"].max_pod_life_time_seconds == 172800
    lnu = lifecycle.plugin_args["LowNodeUtilization"]
    assert lnu.thresholds == {"cpu": 40, "memory": 40, "pods": 40} and lnu.eviction_limits_node == 2
    assert lnu.evictable_namespaces.exclude == ("kube-system", "hypershift", "openshift", "openshift-ingress",
                                                "openshift-monitoring", "team-legacy")
    assert lifecycle.evictor_args.priority_threshold == PriorityThreshold(name="important")
    assert "PodsWithPVC" not in lifecycle.evictor_args.protections


KUBE_DESCHEDULER = {
    "apiVersion": "operator.openshift.io/v1", "kind": "KubeDescheduler",
    "metadata": {"name": "cluster", "namespace": "openshift-kube-descheduler-operator"},
    "spec": {"managementState": "Managed", "mode": "Predictive", "deschedulingIntervalSeconds": 3600, "logLevel": "Normal",
             "profiles": ["AffinityAndTaints", "CompactAndScale"],
             "profileCustomizations": {"devHighNodeUtilizationThresholds": "Minimal", "namespaces": {"included": ["apps"]},
                                       "devEnableSoftTainter": True},
             "evictionLimits": {"total": 5}},
    "status": {"readyReplicas": 1},
}


def test_kube_descheduler_cr() -> None:
    policy = policy_from_mapping(KUBE_DESCHEDULER, "cr.yaml")
    assert policy.api_version == "operator.openshift.io/v1"
    assert [p.name for p in policy.profiles] == ["AffinityAndTaints", "CompactAndScale"]
    assert policy.max_pods_to_evict_total == 5 and policy.max_pods_to_evict_per_node is None
    assert policy.profiles[1].plugin_args["HighNodeUtilization"] == HighNodeUtilizationArgs({"cpu": 10, "memory": 10, "pods": 10})
    assert policy.profiles[0].plugin_args["RemovePodsViolatingNodeTaints"].namespaces == Namespaces(include=("apps",))


def profiles_doc(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "kdesched.dev/v1alpha1", "kind": "Profiles", **fields}


INVALID_DOCS: list[tuple[dict[str, Any], str]] = [
    (profiles_doc(), "profiles: is required"),
    (profiles_doc(profiles="AffinityAndTaints"), 'profiles: must be a list of strings, got "AffinityAndTaints"'),
    (profiles_doc(profiles=["AffinityAndTaints"], extra=1), "extra: unknown field"),
    (profiles_doc(profiles=["LongLifecycle", "LifecycleAndUtilization"]),
     "profiles: LongLifecycle cannot be combined with LifecycleAndUtilization"),
    (profiles_doc(profiles=["LifecycleAndUtilization"], profileCustomizations={"podLifetime": "1 day"}),
     "profileCustomizations.podLifetime: must be a duration such as 5m or 1h30m"),
    (profiles_doc(profiles=["LifecycleAndUtilization"], profileCustomizations={"podLifetime": 3600}),
     "profileCustomizations.podLifetime: must be a duration such as 24h or 5m, got 3600"),
    (profiles_doc(profiles=["LifecycleAndUtilization"], profileCustomizations={"devActualUtilizationProfile": "CPU"}),
     "profileCustomizations.devActualUtilizationProfile: must be one of PrometheusCPUUsage, PrometheusCPUPSIPressure"),
    (profiles_doc(profiles=["AffinityAndTaints"], profileCustomizations={"thresholdPriority": "high"}),
     'profileCustomizations.thresholdPriority: must be an integer between -2147483648 and 2000000000, got "high"'),
    (profiles_doc(profiles=["AffinityAndTaints"], profileCustomizations={"namespaces": {"include": ["a"]}}),
     "profileCustomizations.namespaces.include: unknown field"),
    (profiles_doc(profiles=["AffinityAndTaints"], evictionLimits={"node": -2}),
     "evictionLimits.node: must be an integer between 0 and 2147483647, got -2"),
    (profiles_doc(profiles=["AffinityAndTaints"], kdesched=[1]), "kdesched: must be a map"),
    ({**KUBE_DESCHEDULER, "spec": {**KUBE_DESCHEDULER["spec"], "profiles": ["KubeVirtRelieveAndMigrate"]}},
     "spec.profiles[0]: KubeVirtRelieveAndMigrate is not supported by kdesched"),
    ({**KUBE_DESCHEDULER, "spec": {**KUBE_DESCHEDULER["spec"], "profile": []}}, "spec.profile: unknown field"),
    ({"apiVersion": "operator.openshift.io/v1", "kind": "KubeDescheduler"}, "spec: is required"),
]


@pytest.mark.parametrize(("doc", "message"), INVALID_DOCS, ids=[str(i) for i in range(len(INVALID_DOCS))])
def test_invalid_preset_documents(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_mapping(doc, "presets.yaml")
    assert any(e.startswith(message) for e in info.value.errors), info.value.errors


def test_profiles_document_keeps_kdesched_block() -> None:
    policy = policy_from_mapping(profiles_doc(profiles=["AffinityAndTaints"], kdesched={"settleSeconds": 3}), "x")
    assert policy.kdesched == {"settleSeconds": 3}


# --------------------------------------------------------------------------- merge_policies

def _file_policy(**top: Any) -> Any:
    return policy_from_mapping({"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", **top, "profiles": [
        {"name": "mine", "plugins": {"balance": {"enabled": ["RemoveDuplicates"]}}}]}, "policy.yaml")


def test_merge_policies() -> None:
    a = _file_policy(maxNoOfPodsToEvictPerNode=5, maxNoOfPodsToEvictTotal=3, nodeSelector="a=b", kdesched={"x": 1})
    b = expand_presets(["AffinityAndTaints"], PresetCustomizations(eviction_limits_node=2, eviction_limits_total=10))
    merged = merge_policies(a, b)
    assert [p.name for p in merged.profiles] == ["mine", "AffinityAndTaints"]
    assert merged.max_pods_to_evict_per_node == 2 and merged.max_pods_to_evict_total == 3
    assert merged.node_selector == "a=b" and merged.kdesched == {"x": 1}
    assert merged.source == "policy.yaml + presets AffinityAndTaints"


def test_merge_policies_conflicts() -> None:
    a = policy_from_mapping({"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "nodeSelector": "x=y",
                             "profiles": [{"name": "AffinityAndTaints"}]}, "policy.yaml")
    b = policy_from_mapping({"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "nodeSelector": "x=z",
                             "profiles": [{"name": "AffinityAndTaints"}]}, "other.yaml")
    with pytest.raises(PolicyError) as info:
        merge_policies(a, b)
    assert info.value.errors == [
        'profile "AffinityAndTaints" is defined by both policy.yaml and other.yaml',
        'nodeSelector: "x=y" (policy.yaml) differs from "x=z" (other.yaml)',
    ]


@pytest.mark.parametrize("profile, query", [
    ("PrometheusCPUUsage", "instance:node_cpu:rate:sum"),
    ("PrometheusMemoryPSIPressure", "rate(node_pressure_memory_waiting_seconds_total[1m])"),
    ("PrometheusCPUCombined", "descheduler:combined_utilization_and_pressure:avg1m"),
    ("query:max by (instance) (up)", "max by (instance) (up)"),
], ids=["cpu-usage", "memory-psi", "cpu-combined", "raw-query"])
def test_dev_actual_utilization_profile_balances_on_prometheus(profile: str, query: str) -> None:
    """The operator's load-aware descheduling (issue 23): LowNodeUtilization on its Prometheus query,
    MetricResource thresholds at the devLowNodeUtilizationThresholds level, a Prometheus provider."""
    policy = policy_from_mapping(profiles_doc(profiles=["LongLifecycle"], profileCustomizations={
        "devActualUtilizationProfile": profile, "devLowNodeUtilizationThresholds": "High"}), "x")
    args = policy.profiles[0].plugin_args["LowNodeUtilization"]
    assert args.thresholds == {"MetricResource": 40} and args.target_thresholds == {"MetricResource": 70}
    assert args.metrics_utilization == MetricsUtilization(source="Prometheus", prometheus_query=query)
    assert policy.metrics_providers == (MetricsProvider("Prometheus", "https://prometheus-k8s.openshift-monitoring.svc:9091"),)


def test_dev_actual_utilization_profile_without_a_utilization_profile_changes_nothing() -> None:
    policy = policy_from_mapping(profiles_doc(profiles=["AffinityAndTaints"], profileCustomizations={
        "devActualUtilizationProfile": "PrometheusCPUUsage"}), "x")
    assert policy.metrics_providers == ()

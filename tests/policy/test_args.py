"""Plugin args parsing: every validation rule of upstream v0.36, defaults, and all-errors-at-once."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.model.selectors import LabelSelector, Requirement
from kdesched.policy.args import format_go_duration, parse_go_duration
from kdesched.policy.plugins import PLUGINS, parse_plugin_args, plugin_where
from kdesched.policy.types import (
    DEFAULT_PROTECTIONS,
    DefaultEvictorArgs,
    HighNodeUtilizationArgs,
    LowNodeUtilizationArgs,
    MetricsUtilization,
    Namespaces,
    OwnerKinds,
    PodConditionFilter,
    PodLifeTimeArgs,
    PriorityThreshold,
    RemoveDuplicatesArgs,
    RemoveFailedPodsArgs,
    RemovePodsHavingTooManyRestartsArgs,
    RemovePodsViolatingInterPodAntiAffinityArgs,
    RemovePodsViolatingNodeAffinityArgs,
    RemovePodsViolatingNodeTaintsArgs,
    RemovePodsViolatingTopologySpreadConstraintArgs,
)

W = plugin_where("cleanup", "X")
LNU_OK = {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}}
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def parse(name: str, raw: Any) -> tuple[Any, list[str]]:
    return parse_plugin_args(name, raw, plugin_where("cleanup", name))


# --------------------------------------------------------------------------- defaults

DEFAULTS = [
    ("DefaultEvictor", None, DefaultEvictorArgs(priority_threshold=PriorityThreshold(value=2_000_000_000))),
    ("RemoveDuplicates", {}, RemoveDuplicatesArgs()),
    ("RemovePodsViolatingInterPodAntiAffinity", None, RemovePodsViolatingInterPodAntiAffinityArgs()),
    ("RemovePodsViolatingNodeTaints", {}, RemovePodsViolatingNodeTaintsArgs(included_taints=None)),
    ("RemovePodsViolatingTopologySpreadConstraint", {},
     RemovePodsViolatingTopologySpreadConstraintArgs(constraints=("DoNotSchedule",), topology_balance_node_fit=True)),
    ("RemoveFailedPods", {}, RemoveFailedPodsArgs(min_pod_lifetime_seconds=3600)),
    ("LowNodeUtilization", LNU_OK, LowNodeUtilizationArgs(thresholds={"cpu": 20}, target_thresholds={"cpu": 50})),
    ("HighNodeUtilization", {"thresholds": {"pods": 10}}, HighNodeUtilizationArgs(thresholds={"pods": 10})),
    ("RemovePodsViolatingNodeAffinity", {"nodeAffinityType": [REQ]}, RemovePodsViolatingNodeAffinityArgs((REQ,))),
    ("RemovePodsHavingTooManyRestarts", {"podRestartThreshold": 5}, RemovePodsHavingTooManyRestartsArgs(5)),
    ("PodLifeTime", {"maxPodLifeTimeSeconds": 60}, PodLifeTimeArgs(max_pod_life_time_seconds=60)),
]


@pytest.mark.parametrize(("name", "raw", "expected"), DEFAULTS, ids=[d[0] for d in DEFAULTS])
def test_defaults(name: str, raw: Any, expected: Any) -> None:
    args, errors = parse(name, raw)
    assert errors == []
    assert args == expected


def test_every_plugin_has_a_default_case_and_a_valid_example() -> None:
    assert {d[0] for d in DEFAULTS} == set(PLUGINS)
    for name, info in PLUGINS.items():
        args, errors = parse(name, dict(info.example))
        assert errors == [], name
        assert args is not None


@pytest.mark.parametrize(("name", "points"), [
    ("DefaultEvictor", {"filter", "preEvictionFilter"}),
    ("RemoveDuplicates", {"balance"}),
    ("LowNodeUtilization", {"balance"}),
    ("HighNodeUtilization", {"balance"}),
    ("RemovePodsViolatingTopologySpreadConstraint", {"balance"}),
    ("RemovePodsViolatingInterPodAntiAffinity", {"deschedule"}),
    ("RemovePodsViolatingNodeAffinity", {"deschedule"}),
    ("RemovePodsViolatingNodeTaints", {"deschedule"}),
    ("RemovePodsHavingTooManyRestarts", {"deschedule"}),
    ("PodLifeTime", {"deschedule"}),
    ("RemoveFailedPods", {"deschedule"}),
])
def test_extension_points(name: str, points: set[str]) -> None:
    assert PLUGINS[name].extension_points == points


# --------------------------------------------------------------------------- validation table

P = 'profile "cleanup" / plugin '
INVALID = [
    # common: unknown fields, namespaces, selectors
    ("RemoveDuplicates", {"excludeOwnerKind": ["Job"]}, P + "RemoveDuplicates: excludeOwnerKind: unknown field"),
    ("RemoveDuplicates", {"namespaces": {"include": ["a"], "exclude": ["b"]}},
     P + "RemoveDuplicates: namespaces: only one of include and exclude may be set"),
    ("RemoveDuplicates", {"namespaces": {"includes": ["a"]}}, P + "RemoveDuplicates: namespaces.includes: unknown field"),
    ("RemoveDuplicates", {"namespaces": ["a"]}, P + "RemoveDuplicates: namespaces: must be a map, got a list"),
    ("RemoveDuplicates", "x", P + 'RemoveDuplicates: args: must be a map, got "x"'),
    ("RemovePodsViolatingInterPodAntiAffinity", {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}},
     P + "RemovePodsViolatingInterPodAntiAffinity: labelSelector.matchExpressions[0].operator: must be one of"),
    ("RemovePodsViolatingInterPodAntiAffinity", {"labelSelector": {"matchLabel": {}}},
     P + "RemovePodsViolatingInterPodAntiAffinity: labelSelector: unknown field(s) matchLabel"),
    # DefaultEvictor §1
    ("DefaultEvictor", {"nodeSelector": "a in (b"}, P + "DefaultEvictor: nodeSelector: cannot parse selector"),
    ("DefaultEvictor", {"namespaceLabelSelector": "x"}, P + "DefaultEvictor: namespaceLabelSelector: must be an object"),
    ("DefaultEvictor", {"priorityThreshold": {"value": 5, "name": "high"}},
     P + "DefaultEvictor: priorityThreshold: only one of value and name may be set"),
    ("DefaultEvictor", {"priorityThreshold": {"value": 2_000_000_001}},
     P + "DefaultEvictor: priorityThreshold.value: must not be greater than 2000000000 (system-critical), got 2000000001"),
    ("DefaultEvictor", {"priorityThreshold": {"value": "10"}}, P + 'DefaultEvictor: priorityThreshold.value: must be an integer'),
    ("DefaultEvictor", {"nodeFit": "yes"}, P + 'DefaultEvictor: nodeFit: must be true or false, got "yes"'),
    ("DefaultEvictor", {"minReplicas": -1}, P + "DefaultEvictor: minReplicas: must be a non-negative integer, got -1"),
    ("DefaultEvictor", {"minPodAge": "5 minutes"}, P + "DefaultEvictor: minPodAge: must be a duration such as 5m"),
    ("DefaultEvictor", {"minPodAge": 300}, P + "DefaultEvictor: minPodAge: must be a duration string"),
    ("DefaultEvictor", {"minPodAge": "-5m"}, P + "DefaultEvictor: minPodAge: must not be negative"),
    ("DefaultEvictor", {"noEvictionPolicy": "Always"},
     P + 'DefaultEvictor: noEvictionPolicy: must be one of "", Preferred, Mandatory, got "Always"'),
    ("DefaultEvictor", {"podProtections": {"defaultDisabled": ["PodsWithPVC"]}},
     P + "DefaultEvictor: podProtections.defaultDisabled[0]: PodsWithPVC is not a default protection"),
    ("DefaultEvictor", {"podProtections": {"extraEnabled": ["DaemonSetPods"]}},
     P + "DefaultEvictor: podProtections.extraEnabled[0]: DaemonSetPods is not an extra protection"),
    ("DefaultEvictor", {"podProtections": {"extraEnabled": ["Nope"]}},
     P + 'DefaultEvictor: podProtections.extraEnabled[0]: unknown protection "Nope"'),
    ("DefaultEvictor", {"podProtections": {"defaultDisabled": ["DaemonSetPods", "DaemonSetPods"]}},
     P + "DefaultEvictor: podProtections.defaultDisabled[1]: duplicate protection DaemonSetPods"),
    ("DefaultEvictor", {"podProtections": {"extraEnabled": ["PodsWithPVC"]}, "ignorePvcPods": True},
     P + "DefaultEvictor: ignorePvcPods: is deprecated and cannot be combined with podProtections"),
    ("DefaultEvictor", {"podProtections": {"defaultDisabled": ["FailedBarePods"]}, "evictSystemCriticalPods": True},
     P + "DefaultEvictor: evictSystemCriticalPods: is deprecated and cannot be combined"),
    ("DefaultEvictor", {"podProtections": {"config": {"PodsWithPVC": {"protectedStorageClasses": [{"name": ""}]}}}},
     P + "DefaultEvictor: podProtections.config.PodsWithPVC.protectedStorageClasses[0].name: must be a non-empty"),
    ("DefaultEvictor", {"podProtections": {"config": {"PodsWithPVCs": {}}}},
     P + "DefaultEvictor: podProtections.config.PodsWithPVCs: unknown field"),
    ("DefaultEvictor", {"evictPods": True}, P + "DefaultEvictor: evictPods: unknown field"),
    # LowNodeUtilization §3
    ("LowNodeUtilization", {"targetThresholds": {"cpu": 50}}, P + "LowNodeUtilization: thresholds: is required"),
    ("LowNodeUtilization", {"thresholds": {"cpu": 20}, "targetThresholds": {}},
     P + "LowNodeUtilization: targetThresholds: is required"),
    ("LowNodeUtilization", {"thresholds": {"cpu": 120}, "targetThresholds": {"cpu": 50}},
     P + "LowNodeUtilization: thresholds.cpu: must be between 0 and 100, got 120"),
    ("LowNodeUtilization", {"thresholds": {"cpu": 20}, "targetThresholds": {"cpu": -1}},
     P + "LowNodeUtilization: targetThresholds.cpu: must be between 0 and 100, got -1"),
    ("LowNodeUtilization", {"thresholds": {"cpu": 20, "pods": 20}, "targetThresholds": {"cpu": 50}},
     P + "LowNodeUtilization: args: thresholds and targetThresholds must name the same resources"),
    ("LowNodeUtilization", {"thresholds": {"cpu": 60}, "targetThresholds": {"cpu": 50}},
     P + "LowNodeUtilization: thresholds.cpu: must not be greater than targetThresholds.cpu (50), got 60"),
    ("LowNodeUtilization", {**LNU_OK, "evictableNamespaces": {"include": ["a"]}},
     P + "LowNodeUtilization: evictableNamespaces.include: is not supported here, only exclude"),
    ("LowNodeUtilization", {**LNU_OK, "numberOfNodes": -2},
     P + "LowNodeUtilization: numberOfNodes: must be a non-negative integer, got -2"),
    ("LowNodeUtilization", {**LNU_OK, "evictionLimits": {"node": -1}},
     P + "LowNodeUtilization: evictionLimits.node: must be a non-negative integer, got -1"),
    ("LowNodeUtilization", {**LNU_OK, "evictionLimits": {"total": 1}},
     P + "LowNodeUtilization: evictionLimits.total: unknown field"),
    ("LowNodeUtilization", {**LNU_OK, "metricsUtilization": {"metricsServer": True, "source": "KubernetesMetrics"}},
     P + "LowNodeUtilization: metricsUtilization: metricsServer (deprecated) cannot be combined with source"),
    ("LowNodeUtilization", {**LNU_OK, "metricsUtilization": {"source": "KubernetesMetrics", "prometheus": {"query": "q"}}},
     P + "LowNodeUtilization: metricsUtilization.prometheus: cannot be set with source: KubernetesMetrics"),
    ("LowNodeUtilization", {"thresholds": {"MetricResource": 10}, "targetThresholds": {"MetricResource": 20},
                            "metricsUtilization": {"source": "Prometheus"}},
     P + "LowNodeUtilization: metricsUtilization.prometheus.query: is required with source: Prometheus"),
    ("LowNodeUtilization", {**LNU_OK, "metricsUtilization": {"source": "Prometheus", "prometheus": {"query": "q"}}},
     P + "LowNodeUtilization: thresholds: with metricsUtilization.source Prometheus must hold exactly one key MetricResource"),
    ("LowNodeUtilization", {"thresholds": {"MetricResource": 10}, "targetThresholds": {"MetricResource": 20}},
     P + "LowNodeUtilization: thresholds.MetricResource: is only measured with metricsUtilization.source: Prometheus"),
    ("LowNodeUtilization", {**LNU_OK, "metricsUtilization": {"source": "Metrics"}},
     P + 'LowNodeUtilization: metricsUtilization.source: must be one of "", KubernetesMetrics, Prometheus, got "Metrics"'),
    # HighNodeUtilization
    ("HighNodeUtilization", {}, P + "HighNodeUtilization: thresholds: is required"),
    ("HighNodeUtilization", {"thresholds": {"cpu": 101}}, P + "HighNodeUtilization: thresholds.cpu: must be between 0 and 100"),
    ("HighNodeUtilization", {"thresholds": {"cpu": 10}, "evictionModes": ["All"]},
     P + 'HighNodeUtilization: evictionModes[0]: must be one of OnlyThresholdingResources, got "All"'),
    ("HighNodeUtilization", {"thresholds": {"cpu": 10}, "evictableNamespaces": {"include": ["a"]}},
     P + "HighNodeUtilization: evictableNamespaces.include: is not supported here, only exclude"),
    # NodeAffinity
    ("RemovePodsViolatingNodeAffinity", {}, P + "RemovePodsViolatingNodeAffinity: nodeAffinityType: is required"),
    ("RemovePodsViolatingNodeAffinity", {"nodeAffinityType": []}, P + "RemovePodsViolatingNodeAffinity: nodeAffinityType: is required"),
    ("RemovePodsViolatingNodeAffinity", {"nodeAffinityType": ["required"]},
     P + 'RemovePodsViolatingNodeAffinity: nodeAffinityType[0]: must be one of requiredDuringSchedulingIgnoredDuringExecution'),
    # NodeTaints
    ("RemovePodsViolatingNodeTaints", {"excludedTaints": ["a"], "includedTaints": ["b"]},
     P + "RemovePodsViolatingNodeTaints: args: only one of excludedTaints and includedTaints may be set"),
    ("RemovePodsViolatingNodeTaints", {"includePreferNoSchedule": 1},
     P + "RemovePodsViolatingNodeTaints: includePreferNoSchedule: must be true or false, got 1"),
    # TopologySpread
    ("RemovePodsViolatingTopologySpreadConstraint", {"constraints": ["DoNotSchedule", "Never"]},
     P + 'RemovePodsViolatingTopologySpreadConstraint: constraints[1]: must be one of DoNotSchedule, ScheduleAnyway, got "Never"'),
    ("RemovePodsViolatingTopologySpreadConstraint", {"topologyBalanceNodeFit": "false"},
     P + "RemovePodsViolatingTopologySpreadConstraint: topologyBalanceNodeFit: must be true or false"),
    # TooManyRestarts
    ("RemovePodsHavingTooManyRestarts", {}, P + "RemovePodsHavingTooManyRestarts: podRestartThreshold: is required"),
    ("RemovePodsHavingTooManyRestarts", {"podRestartThreshold": 0},
     P + "RemovePodsHavingTooManyRestarts: podRestartThreshold: must be an integer between 1 and 2147483647, got 0"),
    ("RemovePodsHavingTooManyRestarts", {"podRestartThreshold": 3.0},
     P + "RemovePodsHavingTooManyRestarts: podRestartThreshold: must be an integer between 1 and 2147483647 without a fraction"),
    ("RemovePodsHavingTooManyRestarts", {"podRestartThreshold": 3, "states": ["Pending"]},
     P + 'RemovePodsHavingTooManyRestarts: states[0]: must be one of Running, CrashLoopBackOff, got "Pending"'),
    # PodLifeTime
    ("PodLifeTime", {}, P + "PodLifeTime: args: at least one of maxPodLifeTimeSeconds, states, conditions or exitCodes"),
    ("PodLifeTime", {"namespaces": {"exclude": ["a"]}}, P + "PodLifeTime: args: at least one of"),
    ("PodLifeTime", {"states": ["Sleeping"]}, P + 'PodLifeTime: states[0]: must be one of Running, Pending'),
    ("PodLifeTime", {"maxPodLifeTimeSeconds": -5}, P + "PodLifeTime: maxPodLifeTimeSeconds: must be a non-negative integer, got -5"),
    ("PodLifeTime", {"conditions": [{"type": "Ready"}, {}]},
     P + "PodLifeTime: conditions[1]: must set at least one of type, status, reason, minTimeSinceLastTransitionSeconds"),
    ("PodLifeTime", {"conditions": [{"typ": "Ready"}]}, P + "PodLifeTime: conditions[0].typ: unknown field"),
    ("PodLifeTime", {"exitCodes": [1, "2"]}, P + 'PodLifeTime: exitCodes[1]: must be an integer, got "2"'),
    ("PodLifeTime", {"states": ["Running"], "ownerKinds": {"include": ["Job"], "exclude": ["DaemonSet"]}},
     P + "PodLifeTime: ownerKinds: only one of include and exclude may be set"),
    # RemoveFailedPods
    ("RemoveFailedPods", {"minPodLifetimeSeconds": -1},
     P + "RemoveFailedPods: minPodLifetimeSeconds: must be a non-negative integer, got -1"),
    ("RemoveFailedPods", {"reasons": "OOMKilled"}, P + 'RemoveFailedPods: reasons: must be a list of strings, got "OOMKilled"'),
]


@pytest.mark.parametrize(("name", "raw", "message"), INVALID, ids=[f"{i}-{c[0]}" for i, c in enumerate(INVALID)])
def test_invalid_args_are_reported_with_profile_plugin_and_field(name: str, raw: Any, message: str) -> None:
    args, errors = parse(name, raw)
    assert args is None
    assert any(e.startswith(message) for e in errors), errors


def test_all_errors_are_reported_at_once() -> None:
    args, errors = parse("LowNodeUtilization", {
        "thresholds": {"cpu": 120, "memory": "x"},
        "targetThresholds": {"cpu": 50},
        "numberOfNodes": -1,
        "evictableNamespaces": {"include": ["a"]},
        "bogus": True,
    })
    assert args is None
    fields = [e.split(": ")[1] for e in errors]
    assert fields == ["thresholds.cpu", "thresholds.memory", "numberOfNodes", "evictableNamespaces.include", "bogus"]


def test_unknown_plugin() -> None:
    args, errors = parse_plugin_args("Example", {}, W)
    assert args is None and "unknown plugin 'Example'" in errors[0]


# --------------------------------------------------------------------------- DefaultEvictor effective protections

@pytest.mark.parametrize(("raw", "expected"), [
    ({}, DEFAULT_PROTECTIONS),
    ({"evictLocalStoragePods": True, "evictDaemonSetPods": True},
     {"SystemCriticalPods", "FailedBarePods"}),
    ({"evictSystemCriticalPods": True, "evictFailedBarePods": True, "ignorePvcPods": True, "ignorePodsWithoutPDB": True},
     {"PodsWithLocalStorage", "DaemonSetPods", "PodsWithPVC", "PodsWithoutPDB"}),
    ({"evictLocalStoragePods": False, "ignorePvcPods": False}, DEFAULT_PROTECTIONS),
    ({"podProtections": {"defaultDisabled": ["DaemonSetPods"], "extraEnabled": ["PodsWithResourceClaims"]}},
     {"PodsWithLocalStorage", "SystemCriticalPods", "FailedBarePods", "PodsWithResourceClaims"}),
    # legacy booleans set to false may accompany the lists (upstream cannot tell them from unset)
    ({"podProtections": {"extraEnabled": ["PodsWithPVC"]}, "evictLocalStoragePods": False},
     DEFAULT_PROTECTIONS | {"PodsWithPVC"}),
])
def test_effective_protections(raw: dict[str, Any], expected: set[str]) -> None:
    args, errors = parse("DefaultEvictor", raw)
    assert errors == []
    assert args.protections == frozenset(expected)


def test_default_evictor_full() -> None:
    args, errors = parse("DefaultEvictor", {
        "nodeSelector": "pool=a,!spot",
        "labelSelector": {"matchLabels": {"app": "x"}},
        "namespaceLabelSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
        "priorityThreshold": {"name": "high-priority"},
        "nodeFit": True,
        "minReplicas": 2,
        "minPodAge": "1h30m",
        "noEvictionPolicy": "Mandatory",
        "podProtections": {"extraEnabled": ["PodsWithPVC"],
                           "config": {"PodsWithPVC": {"protectedStorageClasses": [{"name": "local"}, {"name": "ceph"}]}}},
    })
    assert errors == []
    assert args == DefaultEvictorArgs(
        node_selector="pool=a,!spot",
        label_selector=LabelSelector((("app", "x"),)),
        namespace_label_selector=LabelSelector((), (Requirement("team", "Exists"),)),
        priority_threshold=PriorityThreshold(name="high-priority"),
        node_fit=True, min_replicas=2, min_pod_age_seconds=5400.0, no_eviction_policy="Mandatory",
        protections=DEFAULT_PROTECTIONS | {"PodsWithPVC"}, protected_storage_classes=("local", "ceph"),
        extra_enabled=("PodsWithPVC",),
    )


@pytest.mark.parametrize(("raw", "expected"), [
    ({}, PriorityThreshold(value=2_000_000_000)),
    ({"priorityThreshold": {}}, PriorityThreshold(value=2_000_000_000)),
    ({"priorityThreshold": {"value": -5}}, PriorityThreshold(value=-5)),
    ({"priorityThreshold": {"value": 2_000_000_000}}, PriorityThreshold(value=2_000_000_000)),
    ({"priorityThreshold": {"name": "x"}}, PriorityThreshold(name="x")),
])
def test_priority_threshold(raw: dict[str, Any], expected: PriorityThreshold) -> None:
    args, errors = parse("DefaultEvictor", raw)
    assert errors == [] and args.priority_threshold == expected


# --------------------------------------------------------------------------- other plugins, full args

def test_low_node_utilization_full() -> None:
    args, errors = parse("LowNodeUtilization", {
        "thresholds": {"cpu": 30, "memory": 12.5}, "targetThresholds": {"cpu": 10, "memory": 10},
        "useDeviationThresholds": True, "numberOfNodes": 3,
        "evictableNamespaces": {"exclude": ["kube-system"]}, "evictionLimits": {"node": 2},
        "metricsUtilization": {},
    })
    assert errors == []  # threshold > target is fine with deviation thresholds
    assert args == LowNodeUtilizationArgs(
        thresholds={"cpu": 30, "memory": 12.5}, target_thresholds={"cpu": 10, "memory": 10},
        use_deviation_thresholds=True, number_of_nodes=3, evictable_namespaces=Namespaces(exclude=("kube-system",)),
        eviction_limits_node=2, metrics_utilization=MetricsUtilization())


@pytest.mark.parametrize("metrics, expected", [
    ({"source": "Prometheus", "prometheus": {"query": "instance:node_cpu:rate:sum"}},
     MetricsUtilization(source="Prometheus", prometheus_query="instance:node_cpu:rate:sum")),
    ({"source": "KubernetesMetrics"}, MetricsUtilization(source="KubernetesMetrics")),
    ({"metricsServer": True}, MetricsUtilization(metrics_server=True)),
], ids=["prometheus", "kubernetes-metrics", "metrics-server"])
def test_low_node_utilization_metrics_sources_load(metrics: dict, expected: MetricsUtilization,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    # kdesched balances on measured usage too (it refused these until issue 23)
    thresholds = ({"MetricResource": 0}, {"MetricResource": 10}) if metrics.get("source") == "Prometheus" \
        else ({"cpu": 20}, {"cpu": 50})
    args, errors = parse("LowNodeUtilization", {
        "thresholds": thresholds[0], "targetThresholds": thresholds[1], "useDeviationThresholds": True,
        "metricsUtilization": metrics,
    })
    assert errors == [] and args is not None and args.metrics_utilization == expected
    deprecated = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert deprecated == ([("profile \"cleanup\" / plugin LowNodeUtilization: metricsUtilization.metricsServer is "
                           "deprecated: write metricsUtilization.source: KubernetesMetrics (same meaning)")]
                          if "metricsServer" in metrics else [])


def test_empty_prometheus_block_without_source_is_accepted() -> None:
    # the OpenShift operator renders `metricsUtilization: {prometheus: {}}` for plain profiles
    args, errors = parse("LowNodeUtilization", {**LNU_OK, "metricsUtilization": {"prometheus": {}}})
    assert errors == [] and args.metrics_utilization == MetricsUtilization()


def test_pod_life_time_full() -> None:
    args, errors = parse("PodLifeTime", {
        "states": ["CrashLoopBackOff", "OOMKilled"],
        "conditions": [{"type": "Ready", "status": "False", "minTimeSinceLastTransitionSeconds": 600}],
        "exitCodes": [137], "ownerKinds": {"exclude": ["Job"]}, "includingInitContainers": True,
        "includingEphemeralContainers": True, "namespaces": {"include": ["apps"]},
    })
    assert errors == []
    assert args == PodLifeTimeArgs(
        states=("CrashLoopBackOff", "OOMKilled"),
        conditions=(PodConditionFilter("Ready", "False", "", 600),), exit_codes=(137,),
        owner_kinds=OwnerKinds(exclude=("Job",)), including_init_containers=True, including_ephemeral_containers=True,
        namespaces=Namespaces(include=("apps",)))


@pytest.mark.parametrize(("raw", "included"), [
    ({}, None), ({"includedTaints": []}, ()), ({"includedTaints": ["a=b"]}, ("a=b",)),
])
def test_included_taints_nil_vs_empty(raw: dict[str, Any], included: tuple[str, ...] | None) -> None:
    args, errors = parse("RemovePodsViolatingNodeTaints", raw)
    assert errors == [] and args.included_taints == included


def test_other_plugins_full() -> None:
    tsc, e1 = parse("RemovePodsViolatingTopologySpreadConstraint",
                    {"constraints": ["ScheduleAnyway"], "topologyBalanceNodeFit": False})
    tmr, e2 = parse("RemovePodsHavingTooManyRestarts",
                    {"podRestartThreshold": 10, "includingInitContainers": True, "states": ["CrashLoopBackOff"]})
    rfp, e3 = parse("RemoveFailedPods", {"minPodLifetimeSeconds": 0, "exitCodes": [1], "reasons": ["Evicted"]})
    hnu, e4 = parse("HighNodeUtilization", {"thresholds": {"cpu": 5}, "evictionModes": ["OnlyThresholdingResources"],
                                            "numberOfNodes": 1})
    assert e1 == e2 == e3 == e4 == []
    assert tsc == RemovePodsViolatingTopologySpreadConstraintArgs(constraints=("ScheduleAnyway",), topology_balance_node_fit=False)
    assert tmr == RemovePodsHavingTooManyRestartsArgs(10, True, ("CrashLoopBackOff",))
    assert rfp == RemoveFailedPodsArgs(min_pod_lifetime_seconds=0, exit_codes=(1,), reasons=("Evicted",))
    assert hnu == HighNodeUtilizationArgs({"cpu": 5}, 1, ("OnlyThresholdingResources",))


# --------------------------------------------------------------------------- Go durations

@pytest.mark.parametrize(("text", "seconds"), [
    ("5m", 300), ("1h30m", 5400), ("1.5s", 1.5), ("0", 0), ("90s", 90), ("2h", 7200), ("500ms", 0.5),
    ("1h0m0s", 3600), ("-1m", -60), (".5h", 1800),
])
def test_parse_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "5 m", "5d", "1h-5m", "abc"])
def test_parse_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (300, "5m0s"), (5400, "1h30m0s"), (1.5, "1.5s"), (0, "0s"), (86400, "24h0m0s"), (0.5, "500ms"), (45, "45s"),
])
def test_format_go_duration_round_trips(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
    assert parse_go_duration(text) == pytest.approx(seconds)

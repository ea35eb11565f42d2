"""Policy loading: v1alpha2 (strict), v1alpha1 conversion (as upstream v0.27-v0.30), ConfigMap wrapping,
the default policy, priority-class resolution, and bad input -> PolicyError only."""

from __future__ import annotations

import io
import json
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kdesched.policy.args import SYSTEM_CRITICAL_PRIORITY
from kdesched.policy.defaults import default_policy, default_policy_text
from kdesched.policy.errors import PolicyError
from kdesched.policy.load import (
    load_policy,
    load_policy_text,
    policy_from_mapping,
    resolve_priority_thresholds,
)
from kdesched.policy.types import (
    DEFAULT_PROTECTIONS,
    DefaultEvictorArgs,
    LowNodeUtilizationArgs,
    MetricsProvider,
    MetricsUtilization,
    Namespaces,
    PodLifeTimeArgs,
    PriorityThreshold,
    RemoveDuplicatesArgs,
    RemovePodsViolatingNodeAffinityArgs,
    RemovePodsViolatingNodeTaintsArgs,
    RemovePodsViolatingTopologySpreadConstraintArgs,
)

from tests.builders import POD_LIFETIME_POLICY_YAML

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
V2 = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy"}
V1 = {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy"}
TOP = 2_000_000_000
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def v2(*profiles: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**V2, **top, "profiles": list(profiles)}


def profile(name: str = "p", configs: dict[str, Any] | None = None, **points: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if configs is not None:
        out["pluginConfig"] = [{"name": k, "args": v} for k, v in configs.items()]
    if points:
        out["plugins"] = {point: {"enabled": names} for point, names in points.items()}
    return out


def errors_of(doc: Any) -> list[str]:
    with pytest.raises(PolicyError) as info:
        policy_from_mapping(doc, "test.yaml")
    return info.value.errors


# --------------------------------------------------------------------------- upstream conversion examples

def test_reference_v1alpha2_example() -> None:
    policy = load_policy(str(EXAMPLES / "v1alpha2-cleanup.yaml"))
    assert policy.api_version == "descheduler/v1alpha2"
    assert policy.max_pods_to_evict_per_node == 3
    (p,) = policy.profiles
    assert p.name == "cleanup"
    assert p.deschedule == ("RemovePodsViolatingNodeTaints",)
    assert p.balance == ("LowNodeUtilization",)
    assert p.filter == p.pre_eviction_filter == ("DefaultEvictor",)
    assert list(p.plugin_args) == ["DefaultEvictor", "RemovePodsViolatingNodeTaints", "LowNodeUtilization"]
    ev = p.evictor_args
    assert ev.node_fit is True and ev.protections == DEFAULT_PROTECTIONS | {"PodsWithPVC"}
    assert ev.priority_threshold == PriorityThreshold(value=TOP)
    assert p.plugin_args["RemovePodsViolatingNodeTaints"] == RemovePodsViolatingNodeTaintsArgs(excluded_taints=("maintenance",))
    assert p.plugin_args["LowNodeUtilization"] == LowNodeUtilizationArgs(
        thresholds={"cpu": 25, "pods": 25}, target_thresholds={"cpu": 60, "pods": 60},
        evictable_namespaces=Namespaces(exclude=("kube-system",)))


def test_reference_v1alpha1_example_becomes_exactly_two_profiles() -> None:
    policy = load_policy(str(EXAMPLES / "v1alpha1-legacy.yaml"))
    assert policy.api_version == "descheduler/v1alpha1"
    assert policy.max_pods_to_evict_per_node == 3
    assert [p.name for p in policy.profiles] == [
        "strategy-RemovePodsViolatingNodeTaints-profile", "strategy-LowNodeUtilization-profile"]
    taints, lnu = policy.profiles
    assert taints.deschedule == ("RemovePodsViolatingNodeTaints",) and taints.balance == ()
    assert taints.evictor_args == DefaultEvictorArgs(
        priority_threshold=PriorityThreshold(value=TOP), node_fit=True,
        protections=DEFAULT_PROTECTIONS - {"PodsWithLocalStorage"}, legacy={"evictLocalStoragePods": True})
    assert taints.plugin_args["RemovePodsViolatingNodeTaints"] == RemovePodsViolatingNodeTaintsArgs(
        excluded_taints=("maintenance",))
    assert lnu.balance == ("LowNodeUtilization",) and lnu.deschedule == ()
    assert lnu.evictor_args == DefaultEvictorArgs(
        priority_threshold=PriorityThreshold(value=10000), node_fit=False,
        protections=DEFAULT_PROTECTIONS - {"PodsWithLocalStorage"}, legacy={"evictLocalStoragePods": True})
    assert lnu.plugin_args["LowNodeUtilization"] == LowNodeUtilizationArgs(
        thresholds={"cpu": 25, "pods": 25}, target_thresholds={"cpu": 60, "pods": 60},
        evictable_namespaces=Namespaces(exclude=("kube-system",)))


def test_default_policy_is_the_seed_articles_policy() -> None:
    policy = default_policy()
    assert "descheduler/v1alpha1" in default_policy_text()
    assert policy.api_version == "descheduler/v1alpha1"
    by_plugin = {}
    for p in policy.profiles:
        (plugin,) = p.deschedule + p.balance
        by_plugin[plugin] = p.plugin_args[plugin]
        assert p.evictor_args == DefaultEvictorArgs(priority_threshold=PriorityThreshold(value=TOP))
    assert by_plugin == {
        "RemoveDuplicates": RemoveDuplicatesArgs(),
        "LowNodeUtilization": LowNodeUtilizationArgs(
            thresholds={"cpu": 20, "memory": 20, "pods": 20}, target_thresholds={"cpu": 50, "memory": 50, "pods": 50}),
        "RemovePodsViolatingInterPodAntiAffinity": by_plugin["RemovePodsViolatingInterPodAntiAffinity"],
        "RemovePodsViolatingNodeAffinity": RemovePodsViolatingNodeAffinityArgs((REQ,)),
        "RemovePodsViolatingNodeTaints": RemovePodsViolatingNodeTaintsArgs(),
    }
    example = load_policy(str(EXAMPLES / "default-v1alpha1.yaml"))
    # the shipped copy adds only kdesched's switches (policy.safety: the shipped policies turn the safety
    # defaults on; surge-first moves, on by default in the event path, are said explicitly)
    assert policy.kdesched == {"safety": {"enabled": True}, "moves": {"surge": True}} and example.kdesched == {}
    assert replace(example, source=policy.source, kdesched=policy.kdesched) == policy


BLOG_STYLE = '''\
apiVersion: "descheduler/v1alpha1"
kind: "DeschedulerPolicy"
strategies: {"RemoveDuplicates": {"enabled": true}, "RemovePodsViolatingNodeTaints": {"enabled": true},
  "LowNodeUtilization": {"enabled": false}}
'''


def test_blog_style_flow_mappings_and_disabled_strategies() -> None:
    policy = load_policy_text(BLOG_STYLE, "blog.yaml")
    assert [p.name for p in policy.profiles] == [
        "strategy-RemoveDuplicates-profile", "strategy-RemovePodsViolatingNodeTaints-profile"]


def test_configmap_wrapped_policy() -> None:
    policy = load_policy(str(EXAMPLES / "configmap-wrapped.yaml"))
    assert [p.name for p in policy.profiles] == [
        "strategy-RemovePodsViolatingNodeTaints-profile", "strategy-RemovePodsHavingTooManyRestarts-profile"]
    args = policy.profiles[1].plugin_args["RemovePodsHavingTooManyRestarts"]
    assert args.pod_restart_threshold == 100 and args.including_init_containers


def test_configmap_wrapping_v1alpha2_and_reporting_inner_errors() -> None:
    inner = yaml.safe_dump(v2(profile("p", {"RemoveDuplicates": {"bogus": 1}}, balance=["RemoveDuplicates"])))
    errs = errors_of({"apiVersion": "v1", "kind": "ConfigMap", "data": {"policy.yaml": inner}})
    assert errs == [('profile "p" / plugin RemoveDuplicates: bogus: unknown field (the RemoveDuplicates fields are: '
                    'namespaces, excludeOwnerKinds)')]
    assert errors_of({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "x", "b": "y"}}) == [
        "data: no policy.yaml key (keys: a, b)"]
    assert errors_of({"apiVersion": "v1", "kind": "ConfigMap", "data": {"policy.yaml": "a: [b"}})[0].startswith(
        "data.policy.yaml: not valid YAML")


# --------------------------------------------------------------------------- v1alpha2 rules

def test_v1alpha2_top_level_fields() -> None:
    policy = policy_from_mapping(v2(
        profile("p", balance=["RemoveDuplicates"]),
        nodeSelector="pool=workers,!spot", maxNoOfPodsToEvictPerNode=1, maxNoOfPodsToEvictPerNamespace=2,
        maxNoOfPodsToEvictTotal=0, gracePeriodSeconds=30, evictionFailureEventNotification=True,
        metricsProviders=[{"source": "Prometheus", "prometheus": {
            "url": "https://prometheus.example:9090", "authToken": {"secretReference": {"namespace": "ns", "name": "tok"}}}}],
        kdesched={"events": {"node.ready": ["LowNodeUtilization"]}},
    ), "x.yaml")
    assert policy.node_selector == "pool=workers,!spot"
    assert (policy.max_pods_to_evict_per_node, policy.max_pods_to_evict_per_namespace, policy.max_pods_to_evict_total) == (1, 2, 0)
    assert policy.grace_period_seconds == 30 and policy.eviction_failure_event_notification
    assert policy.metrics_providers == (MetricsProvider("Prometheus", "https://prometheus.example:9090", "ns", "tok"),)
    assert policy.kdesched == {"events": {"node.ready": ["LowNodeUtilization"]}}
    assert policy.source == "x.yaml"


def test_enabled_plugin_without_config_gets_defaults_and_default_evictor_is_added() -> None:
    policy = policy_from_mapping(v2(profile(
        "p", deschedule=["RemovePodsViolatingNodeTaints", "RemoveFailedPods"],
        balance=["RemovePodsViolatingTopologySpreadConstraint"], filter=["DefaultEvictor"],
        preEvictionFilter=["DefaultEvictor"])), "x")
    (p,) = policy.profiles
    assert p.plugin_args["RemoveFailedPods"].min_pod_lifetime_seconds == 3600
    assert p.plugin_args["RemovePodsViolatingTopologySpreadConstraint"] == \
        RemovePodsViolatingTopologySpreadConstraintArgs(constraints=("DoNotSchedule",), topology_balance_node_fit=True)
    assert p.evictor_args.priority_threshold == PriorityThreshold(value=TOP)
    assert next(iter(p.plugin_args)) == "DefaultEvictor"


def test_operator_rendered_document_with_explicit_nulls() -> None:
    # how the OpenShift operator and Go marshalling write policies: empty objects and nulls
    doc = {**V2, "metricsCollector": {}, "profiles": [{
        "name": "LongLifecycle",
        "pluginConfig": [
            {"name": "RemovePodsHavingTooManyRestarts", "args": {
                "includingInitContainers": True, "labelSelector": None, "namespaces": {"exclude": ["kube-system"], "include": []},
                "podRestartThreshold": 100, "states": None}},
            {"name": "LowNodeUtilization", "args": {
                "evictableNamespaces": {"exclude": ["kube-system"], "include": None}, "numberOfNodes": 0,
                "metricsUtilization": {"prometheus": {}}, "thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50},
                "useDeviationThresholds": False}},
            {"name": "DefaultEvictor", "args": {}}],
        "plugins": {"balance": {"disabled": None, "enabled": ["LowNodeUtilization"]},
                    "deschedule": {"disabled": None, "enabled": ["RemovePodsHavingTooManyRestarts"]},
                    "filter": {"disabled": None, "enabled": ["DefaultEvictor"]},
                    "preEvictionFilter": {"disabled": None, "enabled": None}}}]}
    (p,) = policy_from_mapping(doc, "x").profiles
    assert p.plugin_args["RemovePodsHavingTooManyRestarts"].namespaces == Namespaces(exclude=("kube-system",))
    assert p.plugin_args["LowNodeUtilization"].evictable_namespaces == Namespaces(exclude=("kube-system",))
    assert next(iter(p.plugin_args)) == "DefaultEvictor"


def test_disabled_lists_and_unused_points_are_accepted() -> None:
    doc = v2({"name": "p", "plugins": {"balance": {"enabled": ["RemoveDuplicates"], "disabled": ["*"]},
                                       "presort": {"enabled": []}, "sort": {"disabled": ["x"]}}})
    assert policy_from_mapping(doc, "x").profiles[0].balance == ("RemoveDuplicates",)


UPSTREAM_KUBERNETES_METRICS = """
apiVersion: "descheduler/v1alpha2"
kind: "DeschedulerPolicy"
metricsProviders:
- source: KubernetesMetrics
profiles:
  - name: ProfileName
    pluginConfig:
    - name: "LowNodeUtilization"
      args:
        thresholds:
          "cpu" : 20
          "memory": 20
          "pods": 20
        targetThresholds:
          "cpu" : 50
          "memory": 50
          "pods": 50
        metricsUtilization:
          source: KubernetesMetrics
    plugins:
      balance:
        enabled:
          - "LowNodeUtilization"
"""

UPSTREAM_METRICS_COLLECTOR = """
apiVersion: "descheduler/v1alpha2"
kind: "DeschedulerPolicy"
metricsCollector:
  enabled: true
profiles:
  - name: ProfileName
    pluginConfig:
    - name: "LowNodeUtilization"
      args:
        thresholds:
          "cpu" : 20
        targetThresholds:
          "cpu" : 50
        metricsUtilization:
          metricsServer: true
    plugins:
      balance:
        enabled:
          - "LowNodeUtilization"
"""

UPSTREAM_PROMETHEUS = """
apiVersion: "descheduler/v1alpha2"
kind: "DeschedulerPolicy"
metricsProviders:
- source: Prometheus
  prometheus:
    url: http://prometheus-kube-prometheus-prometheus.prom.svc.cluster.local
    authToken:
      secretReference:
        namespace: "kube-system"
        name: "authtoken"
profiles:
  - name: ProfileName
    pluginConfig:
    - name: "LowNodeUtilization"
      args:
        thresholds:
          "MetricResource": 20
        targetThresholds:
          "MetricResource": 70
        metricsUtilization:
          source: Prometheus
          prometheus:
            query: instance:node_cpu:rate:sum
    plugins:
      balance:
        enabled:
          - "LowNodeUtilization"
"""


@pytest.mark.parametrize("text, expected, provider", [
    (UPSTREAM_KUBERNETES_METRICS, MetricsUtilization(source="KubernetesMetrics"), MetricsProvider("KubernetesMetrics")),
    (UPSTREAM_METRICS_COLLECTOR, MetricsUtilization(metrics_server=True), MetricsProvider("KubernetesMetrics")),
    (UPSTREAM_PROMETHEUS, MetricsUtilization(source="Prometheus", prometheus_query="instance:node_cpu:rate:sum"),
     MetricsProvider("Prometheus", "http://prometheus-kube-prometheus-prometheus.prom.svc.cluster.local",
                     "kube-system", "authtoken")),
], ids=["kubernetes-metrics", "deprecated-metrics-collector", "prometheus"])
def test_upstream_readme_metrics_policies_load(text: str, expected: MetricsUtilization,
                                               provider: MetricsProvider, tmp_path: Path) -> None:
    """The metricsUtilization examples of upstream's README load as written."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    policy = load_policy(str(path))
    (p,) = policy.profiles
    assert p.plugin_args["LowNodeUtilization"].metrics_utilization == expected
    assert policy.metrics_providers == (provider,)


def test_metrics_collector_becomes_kubernetes_metrics_provider(caplog: pytest.LogCaptureFixture) -> None:
    policy = policy_from_mapping(v2(metricsCollector={"enabled": True}), "x")
    assert policy.metrics_providers == (MetricsProvider("KubernetesMetrics"),)
    assert [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()] == [
        "x: metricsCollector.enabled is deprecated: write metricsProviders: [{source: KubernetesMetrics}] (same meaning)"]


V2_INVALID = [
    (v2(maxNoOfPodsToEvictPerNode=-1), "maxNoOfPodsToEvictPerNode: must be a non-negative integer, got -1"),
    (v2(maxNoOfPodsToEvictTotal="3"), 'maxNoOfPodsToEvictTotal: must be a non-negative integer, got "3"'),
    (v2(maxNoOfPodsToEvictPerNamespace=1.5), "maxNoOfPodsToEvictPerNamespace: must be a non-negative integer, got 1.5"),
    (v2(gracePeriodSeconds=-3), "gracePeriodSeconds: must be a non-negative integer, got -3"),
    (v2(evictionFailureEventNotification="yes"), 'evictionFailureEventNotification: must be true or false'),
    (v2(nodeSelector="a in (b"), "nodeSelector: cannot parse selector"),
    (v2(nodeSelector={"a": "b"}), "nodeSelector: must be a string, got a map"),
    (v2(strategies={}), "strategies: unknown field (the DeschedulerPolicy fields are: apiVersion, kind, nodeSelector"),
    (v2(kdesched=["x"]), "kdesched: must be a map of kdesched settings, got a list"),
    ({**V2, "profiles": {"name": "p"}}, "profiles: must be a list of profiles, got a map"),
    (v2({"name": ""}), 'profiles[0].name: is required: a non-empty string, got ""'),
    (v2("p"), 'profiles[0]: must be a map, got "p"'),
    (v2(profile("a"), profile("a")), 'profiles[1].name: duplicate profile name "a"'),
    (v2({"name": "p", "pluginConfigs": []}), 'profile "p": pluginConfigs: unknown field'),
    (v2(profile("p", {"Example": {}})), 'profile "p": pluginConfig[0].name: unknown plugin "Example"'),
    (v2({"name": "p", "pluginConfig": [{"name": "RemoveDuplicates"}, {"name": "RemoveDuplicates"}]}),
     'profile "p": pluginConfig[1].name: duplicate pluginConfig for RemoveDuplicates'),
    (v2({"name": "p", "pluginConfig": [{"args": {}}]}), 'profile "p": pluginConfig[0].name: is required'),
    (v2({"name": "p", "pluginConfig": [{"name": "RemoveDuplicates", "arg": {}}]}),
     'profile "p": pluginConfig[0].arg: unknown field'),
    (v2(profile("p", deschedule=["Nope"])), 'profile "p": plugins.deschedule.enabled[0]: unknown plugin "Nope"'),
    (v2(profile("p", deschedule=["RemoveDuplicates"])),
     'profile "p": plugins.deschedule.enabled[0]: RemoveDuplicates does not implement deschedule (it runs at balance)'),
    (v2(profile("p", balance=["DefaultEvictor"])),
     'profile "p": plugins.balance.enabled[0]: DefaultEvictor does not implement balance'),
    (v2(profile("p", filter=["RemovePodsViolatingNodeTaints"])),
     'profile "p": plugins.filter.enabled[0]: RemovePodsViolatingNodeTaints does not implement filter'),
    (v2(profile("p", balance=["RemoveDuplicates", "RemoveDuplicates"])),
     'profile "p": plugins.balance.enabled[1]: RemoveDuplicates is enabled twice'),
    (v2({"name": "p", "plugins": {"balance": {"enabled": [{"name": "LowNodeUtilization"}]}}}),
     'profile "p": plugins.balance.enabled[0]: must be a string, got a map'),
    (v2({"name": "p", "plugins": {"rebalance": {}}}), 'profile "p": plugins.rebalance: unknown field'),
    (v2(profile("p", balance=["LowNodeUtilization"])),
     ('profile "p": plugins.balance.enabled[0]: LowNodeUtilization needs a pluginConfig entry: its args thresholds, '
     'targetThresholds are required')),
    (v2(profile("p", balance=["HighNodeUtilization"])), 'profile "p": plugins.balance.enabled[0]: HighNodeUtilization needs'),
    (v2(profile("p", deschedule=["RemovePodsViolatingNodeAffinity"])),
     'profile "p": plugins.deschedule.enabled[0]: RemovePodsViolatingNodeAffinity needs a pluginConfig entry: its arg nodeAffinityType is required'),
    (v2(profile("p", deschedule=["RemovePodsHavingTooManyRestarts"])),
     'profile "p": plugins.deschedule.enabled[0]: RemovePodsHavingTooManyRestarts needs a pluginConfig entry'),
    (v2(profile("p", deschedule=["PodLifeTime"])), 'profile "p": plugins.deschedule.enabled[0]: PodLifeTime needs a pluginConfig'),
    (v2(profile("cleanup", {"LowNodeUtilization": {"thresholds": {"cpu": 120}, "targetThresholds": {"cpu": 50}}},
                balance=["LowNodeUtilization"])),
     'profile "cleanup" / plugin LowNodeUtilization: thresholds.cpu: must be between 0 and 100, got 120'),
    (v2(profile("p", {"DefaultEvictor": {"priorityThreshold": {"value": 1, "name": "x"}}})),
     'profile "p" / plugin DefaultEvictor: priorityThreshold: only one of value and name may be set'),
    (v2(metricsProviders=[{"source": "Prometheus"}]), "metricsProviders[0].prometheus.url: is required for source Prometheus"),
    (v2(metricsProviders=[{"source": "Prometheus", "prometheus": {"url": "not a url"}}]),
     'metricsProviders[0].prometheus.url: must be an http(s) URL, got "not a url"'),
    (v2(metricsProviders=[{"source": "KubernetesMetrics"}, {"source": "KubernetesMetrics"}]),
     "metricsProviders[1].source: KubernetesMetrics is listed more than once"),
    (v2(metricsProviders=[{"source": "Graphite"}]), 'metricsProviders[0].source: must be one of KubernetesMetrics, Prometheus'),
    (v2(metricsProviders=[{"source": "Prometheus", "prometheus": {
        "url": "https://p", "authToken": {"secretReference": {"name": "x"}}}}]),
     "metricsProviders[0].prometheus.authToken.secretReference: needs both namespace and name"),
    (v2(metricsProviders=[{"source": "KubernetesMetrics", "prometheus": {"url": "https://p"}}]),
     "metricsProviders[0].prometheus: is only used with source Prometheus, not KubernetesMetrics"),
    (v2(metricsCollector={"enabled": True}, metricsProviders=[{"source": "KubernetesMetrics"}]),
     "metricsCollector: the deprecated metricsCollector cannot be combined with a KubernetesMetrics metricsProvider"),
    (v2(metricsCollector={"enable": True}), "metricsCollector.enable: unknown field"),
    # an enabled LowNodeUtilization on usage needs the policy to say where usage comes from
    # (upstream usageClientForMetrics: "prometheus client not initialized" / "metrics client not initialized")
    (v2(profile("p", {"LowNodeUtilization": {
        "thresholds": {"MetricResource": 20}, "targetThresholds": {"MetricResource": 70},
        "metricsUtilization": {"source": "Prometheus", "prometheus": {"query": "q"}}}}, balance=["LowNodeUtilization"])),
     ('profile "p" / plugin LowNodeUtilization: metricsUtilization.source: Prometheus needs a metricsProviders entry '
     'with source: Prometheus')),
    (v2(profile("p", {"LowNodeUtilization": {
        "thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 70},
        "metricsUtilization": {"source": "KubernetesMetrics"}}}, balance=["LowNodeUtilization"]),
        metricsProviders=[{"source": "Prometheus", "prometheus": {"url": "https://p"}}]),
     ('profile "p" / plugin LowNodeUtilization: metricsUtilization.source: KubernetesMetrics needs a metricsProviders '
     'entry with source: KubernetesMetrics')),
    (v2(profile("p", {"LowNodeUtilization": {
        "thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 70},
        "metricsUtilization": {"metricsServer": True}}}, balance=["LowNodeUtilization"])),
     'profile "p" / plugin LowNodeUtilization: metricsUtilization.metricsServer: KubernetesMetrics needs'),
]


@pytest.mark.parametrize(("doc", "message"), V2_INVALID, ids=[str(i) for i in range(len(V2_INVALID))])
def test_v1alpha2_validation(doc: dict[str, Any], message: str) -> None:
    errs = errors_of(doc)
    assert any(e.startswith(message) for e in errs), errs


def test_many_errors_reported_at_once_and_rendered() -> None:
    doc = v2(
        profile("cleanup", {"LowNodeUtilization": {"thresholds": {"cpu": 120}, "targetThresholds": {"cpu": 50}},
                            "RemovePodsViolatingNodeTaints": {"excludedTaints": ["a"], "includedTaints": ["b"]}},
                balance=["LowNodeUtilization"], deschedule=["RemovePodsViolatingNodeTaints", "Nope"]),
        profile("other", deschedule=["PodLifeTime"]),
        maxNoOfPodsToEvictPerNode=-1, surprise=1,
    )
    with pytest.raises(PolicyError) as info:
        policy_from_mapping(doc, "policy.yaml")
    err = info.value
    assert len(err.errors) == 6
    assert str(err).splitlines() == ["policy.yaml:", *[f"  {e}" for e in err.errors]]
    assert set(err.errors) == {
        "maxNoOfPodsToEvictPerNode: must be a non-negative integer, got -1",
        'profile "cleanup" / plugin LowNodeUtilization: thresholds.cpu: must be between 0 and 100, got 120',
        'profile "cleanup" / plugin RemovePodsViolatingNodeTaints: args: only one of excludedTaints and includedTaints may be set',
        ('profile "cleanup": plugins.deschedule.enabled[1]: unknown plugin "Nope" (known: DefaultEvictor, RemoveDuplicates, '
        'LowNodeUtilization, HighNodeUtilization, RemovePodsViolatingInterPodAntiAffinity, RemovePodsViolatingNodeAffinity, '
        'RemovePodsViolatingNodeTaints, RemovePodsViolatingTopologySpreadConstraint, RemovePodsHavingTooManyRestarts, '
        'PodLifeTime, RemoveFailedPods)'),
        ('profile "other": plugins.deschedule.enabled[0]: PodLifeTime needs a pluginConfig entry: at least one of its '
        'args maxPodLifeTimeSeconds, states, conditions, exitCodes is required'),
        ('surprise: unknown field (the DeschedulerPolicy fields are: apiVersion, kind, nodeSelector, maxNoOfPodsToEvictPerNode, '
        'maxNoOfPodsToEvictPerNamespace, maxNoOfPodsToEvictTotal, gracePeriodSeconds, evictionFailureEventNotification, '
        'metricsCollector, metricsProviders, kdesched, profiles)'),
    }
    assert isinstance(err, ValueError)


# --------------------------------------------------------------------------- v1alpha1 conversion (§4)

def v1(strategies: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**V1, **top, "strategies": strategies}


def only_profile(doc: dict[str, Any]) -> Any:
    (p,) = policy_from_mapping(doc, "x").profiles
    return p


def test_v1alpha1_include_soft_constraints() -> None:
    for soft, constraints in ((True, ("DoNotSchedule", "ScheduleAnyway")), (False, ("DoNotSchedule",)), (None, ("DoNotSchedule",))):
        params = {} if soft is None else {"includeSoftConstraints": soft}
        p = only_profile(v1({"RemovePodsViolatingTopologySpreadConstraint": {"enabled": True, "params": params}}))
        assert p.balance == ("RemovePodsViolatingTopologySpreadConstraint",)
        assert p.plugin_args["RemovePodsViolatingTopologySpreadConstraint"] == \
            RemovePodsViolatingTopologySpreadConstraintArgs(constraints=constraints, topology_balance_node_fit=True)


def test_v1alpha1_pod_life_time_phases_appended_and_node_fit_forced_false() -> None:
    p = only_profile(v1({"PodLifeTime": {"enabled": True, "params": {
        "nodeFit": True, "namespaces": {"include": ["apps"]}, "labelSelector": {"matchLabels": {"a": "b"}},
        "podLifeTime": {"maxPodLifeTimeSeconds": 86400, "states": ["Running"], "podStatusPhases": ["Pending"]}}}}))
    assert p.name == "strategy-PodLifeTime-profile" and p.deschedule == ("PodLifeTime",)
    assert p.evictor_args.node_fit is False
    args = p.plugin_args["PodLifeTime"]
    assert isinstance(args, PodLifeTimeArgs)
    assert args.states == ("Running", "Pending") and args.max_pod_life_time_seconds == 86400
    assert args.namespaces == Namespaces(include=("apps",)) and args.label_selector is not None


def test_v1alpha1_early_pod_life_time_form() -> None:
    p = only_profile(v1({"PodLifeTime": {"enabled": True, "params": {"maxPodLifeTimeSeconds": 180}}}))
    assert p.plugin_args["PodLifeTime"] == PodLifeTimeArgs(max_pod_life_time_seconds=180)
    errs = errors_of(v1({"PodLifeTime": {"enabled": True, "params": {
        "maxPodLifeTimeSeconds": 180, "podLifeTime": {"maxPodLifeTimeSeconds": 60}}}}))
    assert errs == [("strategies.PodLifeTime.params.maxPodLifeTimeSeconds: is also set in podLifeTime; "
                    "keep only podLifeTime.maxPodLifeTimeSeconds")]


def test_v1alpha1_node_taints_drops_included_taints() -> None:
    p = only_profile(v1({"RemovePodsViolatingNodeTaints": {"enabled": True, "params": {
        "excludedTaints": ["a"], "includedTaints": ["b"], "includePreferNoSchedule": True, "nodeFit": True}}}))
    assert p.plugin_args["RemovePodsViolatingNodeTaints"] == RemovePodsViolatingNodeTaintsArgs(
        include_prefer_no_schedule=True, excluded_taints=("a",), included_taints=None)
    assert p.evictor_args.node_fit is True


def test_v1alpha1_top_level_flags_priority_and_limits() -> None:
    doc = v1({"RemoveDuplicates": {"enabled": True, "weight": 1, "params": {
        "thresholdPriorityClassName": "important", "namespaces": {"exclude": ["kube-system"]},
        "removeDuplicates": {"excludeOwnerKinds": ["ReplicaSet"]}}}},
        nodeSelector="role=worker", evictFailedBarePods=True, evictSystemCriticalPods=True, evictDaemonSetPods=True,
        ignorePvcPods=True, maxNoOfPodsToEvictPerNode=5, maxNoOfPodsToEvictPerNamespace=2)
    policy = policy_from_mapping(doc, "x")
    assert policy.node_selector == "role=worker"
    assert (policy.max_pods_to_evict_per_node, policy.max_pods_to_evict_per_namespace) == (5, 2)
    (p,) = policy.profiles
    ev = p.evictor_args
    assert ev.priority_threshold == PriorityThreshold(name="important")
    assert ev.protections == {"PodsWithLocalStorage", "PodsWithPVC"}
    assert p.plugin_args["RemoveDuplicates"] == RemoveDuplicatesArgs(
        namespaces=Namespaces(exclude=("kube-system",)), exclude_owner_kinds=("ReplicaSet",))


def test_v1alpha1_other_strategies() -> None:
    policy = policy_from_mapping(v1({
        "HighNodeUtilization": {"enabled": True, "params": {"namespaces": {"exclude": ["x"]},
                                                            "nodeResourceUtilizationThresholds": {
                                                                "thresholds": {"cpu": 10}, "targetThresholds": {"cpu": 90},
                                                                "numberOfNodes": 2}}},
        "RemoveFailedPods": {"enabled": True, "params": {"failedPods": {"reasons": ["NodeAffinity"],
                                                                        "includingInitContainers": True}}},
        "RemovePodsHavingTooManyRestarts": {"enabled": True, "params": {"podsHavingTooManyRestarts": {
            "podRestartThreshold": 10}}},
        "RemovePodsViolatingNodeAffinity": {"enabled": True, "params": {"nodeAffinityType": [REQ]}},
        "RemovePodsViolatingInterPodAntiAffinity": {"enabled": True},
    }), "x")
    args = {name: p.plugin_args[name] for p in policy.profiles for name in p.deschedule + p.balance}
    hnu = args["HighNodeUtilization"]
    assert hnu.thresholds == {"cpu": 10} and hnu.number_of_nodes == 2 and hnu.evictable_namespaces == Namespaces(exclude=("x",))
    assert args["RemoveFailedPods"].min_pod_lifetime_seconds == 3600 and args["RemoveFailedPods"].reasons == ("NodeAffinity",)
    assert args["RemovePodsHavingTooManyRestarts"].pod_restart_threshold == 10
    assert args["RemovePodsViolatingNodeAffinity"].node_affinity_type == (REQ,)


S = "strategies."
V1_INVALID = [
    (v1({"RemoveDuplicate": {"enabled": True}}), "strategies.RemoveDuplicate: unknown strategy"),
    (v1({"RemoveDuplicate": {"enabled": False}}), "strategies.RemoveDuplicate: unknown strategy"),
    (v1({"RemoveDuplicates": {"enabled": "true"}}), 'strategies.RemoveDuplicates.enabled: must be true or false, got "true"'),
    (v1({"RemoveDuplicates": {"enable": True}}), "strategies.RemoveDuplicates.enable: unknown field"),
    (v1({"RemoveDuplicates": True}), "strategies.RemoveDuplicates: must be a map, got true"),
    (v1({"RemoveDuplicates": {"enabled": True, "params": {"thresholdPriority": 1, "thresholdPriorityClassName": "x"}}}),
     "strategies.RemoveDuplicates.params.thresholdPriority: only one of thresholdPriority and thresholdPriorityClassName"),
    (v1({"RemoveDuplicates": {"enabled": True, "params": {"excludeOwnerKinds": ["Job"]}}}),
     "strategies.RemoveDuplicates.params.excludeOwnerKinds: unknown field"),
    (v1({"LowNodeUtilization": {"enabled": True, "params": {"nodeResourceUtilizationThresholds": {
        "thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 150}}}}}),
     ('strategies.LowNodeUtilization (profile "strategy-LowNodeUtilization-profile") / plugin LowNodeUtilization: '
     'targetThresholds.cpu: must be between 0 and 100, got 150')),
    (v1({"LowNodeUtilization": {"enabled": True, "params": {"namespaces": {"include": ["a"]}, "nodeResourceUtilizationThresholds": {
        "thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 50}}}}}),
     ('strategies.LowNodeUtilization (profile "strategy-LowNodeUtilization-profile") / plugin LowNodeUtilization: '
     'evictableNamespaces.include: is not supported here, only exclude')),
    (v1({"LowNodeUtilization": {"enabled": True, "params": {"nodeResourceUtilizationThresholds": {"treshold": {}}}}}),
     "strategies.LowNodeUtilization.params.nodeResourceUtilizationThresholds.treshold: unknown field"),
    (v1({"RemovePodsHavingTooManyRestarts": {"enabled": True}}),
     ('strategies.RemovePodsHavingTooManyRestarts (profile "strategy-RemovePodsHavingTooManyRestarts-profile") / plugin '
     'RemovePodsHavingTooManyRestarts: podRestartThreshold: is required')),
    (v1({"PodLifeTime": {"enabled": True, "params": {"podLifeTime": {"podStatusPhases": "Pending"}}}}),
     "strategies.PodLifeTime.params.podLifeTime: states and podStatusPhases must be lists of strings"),
    (v1({"RemovePodsViolatingTopologySpreadConstraint": {"enabled": True, "params": {"includeSoftConstraints": "yes"}}}),
     'strategies.RemovePodsViolatingTopologySpreadConstraint.params.includeSoftConstraints: must be true or false'),
    (v1({"RemovePodsViolatingNodeTaints": {"enabled": True, "params": {"nodeFit": "true"}}}),
     ('strategies.RemovePodsViolatingNodeTaints (profile "strategy-RemovePodsViolatingNodeTaints-profile") / plugin '
     'DefaultEvictor: nodeFit: must be true or false')),
    (v1({}, evictLocalStoragePods="yes"), 'evictLocalStoragePods: must be true or false, got "yes"'),
    (v1({}, maxNoOfPodsToEvictPerNode=-1), "maxNoOfPodsToEvictPerNode: must be a non-negative integer, got -1"),
    (v1({}, profiles=[]), "profiles: unknown field"),
    ({**V1}, "strategies: is required"),
    ({**V1, "strategies": []}, "strategies: must be a map of strategy name"),
]


@pytest.mark.parametrize(("doc", "message"), V1_INVALID, ids=[str(i) for i in range(len(V1_INVALID))])
def test_v1alpha1_validation(doc: dict[str, Any], message: str) -> None:
    errs = errors_of(doc)
    assert any(e.startswith(message) for e in errs), errs


def test_v1alpha1_disabled_strategy_params_are_not_checked() -> None:
    policy = policy_from_mapping(v1({"LowNodeUtilization": {"enabled": False, "params": {"bogus": 1}},
                                     "RemoveDuplicates": {"enabled": True}}), "x")
    assert [p.name for p in policy.profiles] == ["strategy-RemoveDuplicates-profile"]


# --------------------------------------------------------------------------- files, stdin, formats

def test_load_policy_from_file_stdin_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = v2(profile("p", balance=["RemoveDuplicates"]))
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(doc))
    assert load_policy(str(path)).profiles[0].balance == ("RemoveDuplicates",)
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(doc)))
    policy = load_policy("-")
    assert policy.source == "<stdin>" and policy.profiles[0].name == "p"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(str(tmp_path / "nope.yaml"))
    assert info.value.source.endswith("nope.yaml")
    assert info.value.errors[0].startswith("cannot read the policy file")


BROKEN_TEXT = [
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("apiVersion: [", "not valid YAML or JSON"),
    ("\tkey: value", "not valid YAML or JSON"),
    ("a: 1\n---\nb: 2\n", "holds 2 YAML documents"),
    ("just a string", 'expected a DeschedulerPolicy object (a YAML map), got "just a string"'),
    ("- a\n- b\n", "expected a DeschedulerPolicy object (a YAML map), got a list"),
    ("42", "expected a DeschedulerPolicy object (a YAML map), got 42"),
    ("kind: DeschedulerPolicy\n", "apiVersion: is required"),
    ("foo: bar\n", "apiVersion: is required"),
    ("apiVersion: descheduler/v1alpha2\n", "kind: is required"),
    ("apiVersion: descheduler/v1alpha2\nkind: Policy\n", 'kind: must be DeschedulerPolicy, got "Policy"'),
    ("apiVersion: descheduler/v1beta1\nkind: DeschedulerPolicy\n", 'apiVersion: unsupported "descheduler/v1beta1"'),
    ("apiVersion: 2\nkind: DeschedulerPolicy\n", "apiVersion: must be a string, got 2"),
    ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles: []\nprofiles: []\n", 'duplicate key "profiles"'),
    ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nnodeSelector: 2024-01-01\n",
     "nodeSelector: must be a string, got date"),
    ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\n1: x\n", "1: unknown field"),
    (("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n  pluginConfig:\n  - name: "
     "LowNodeUtilization\n    args: {thresholds: {cpu: .nan}, targetThresholds: {cpu: 50}}\n"),
     'profile "p" / plugin LowNodeUtilization: thresholds.cpu: must be between 0 and 100, got nan'),
    ("? [a, b]\n: c\n", "not valid YAML or JSON"),
    ("a: &x [*x]\n", "apiVersion: is required"),
    ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles: &x [*x]\n", "profiles[0]: must be a map, got a list"),
    ("[" * 5000 + "]" * 5000, "not valid YAML"),
    (("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles: [{name: p, pluginConfig: [{name: "
     "RemovePodsViolatingNodeTaints, args: {labelSelector: {matchLabels: &m {a: *m}}}}]}]\n"), "recursive"),
]


@pytest.mark.parametrize(("text", "message"), BROKEN_TEXT, ids=[str(i) for i in range(len(BROKEN_TEXT))])
def test_broken_input_is_a_policy_error(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_text(text, "bad.yaml")
    assert info.value.source == "bad.yaml"
    assert any(message in e for e in info.value.errors), info.value.errors
    assert str(info.value).startswith("bad.yaml:\n")


JSON_LEAF = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)
PLUGIN_NAMES = st.sampled_from(["DefaultEvictor", "RemoveDuplicates", "LowNodeUtilization", "HighNodeUtilization",
                                "RemovePodsViolatingNodeAffinity", "RemovePodsViolatingNodeTaints", "PodLifeTime",
                                "RemovePodsViolatingTopologySpreadConstraint", "RemovePodsHavingTooManyRestarts",
                                "RemoveFailedPods", "RemovePodsViolatingInterPodAntiAffinity", "Bogus"])
ARG_KEYS = st.sampled_from(["thresholds", "targetThresholds", "namespaces", "labelSelector", "nodeAffinityType", "states",
                            "conditions", "podProtections", "priorityThreshold", "minPodAge", "evictionLimits",
                            "metricsUtilization", "constraints", "podRestartThreshold", "exitCodes", "ownerKinds",
                            "evictableNamespaces", "includedTaints", "nodeSelector", "maxPodLifeTimeSeconds"])
ARGS = st.dictionaries(ARG_KEYS, JSON_LEAF, max_size=4)
V2_DOCS = st.builds(
    lambda name, configs, points, top: {**V2, **top, "profiles": [
        {"name": name, "pluginConfig": [{"name": n, "args": a} for n, a in configs],
         "plugins": {pt: {"enabled": names} for pt, names in points.items()}}]},
    st.text(max_size=5),
    st.lists(st.tuples(PLUGIN_NAMES, ARGS), max_size=3),
    st.dictionaries(st.sampled_from(["deschedule", "balance", "filter", "preEvictionFilter", "sort", "bad"]),
                    st.lists(PLUGIN_NAMES, max_size=3), max_size=3),
    st.dictionaries(st.sampled_from(["nodeSelector", "maxNoOfPodsToEvictPerNode", "metricsProviders", "metricsCollector",
                                     "kdesched", "gracePeriodSeconds"]), JSON_LEAF, max_size=2),
)
V1_DOCS = st.builds(
    lambda strategies, top: {**V1, **top, "strategies": strategies},
    st.dictionaries(st.sampled_from(["RemoveDuplicates", "LowNodeUtilization", "PodLifeTime", "HighNodeUtilization",
                                     "RemovePodsViolatingNodeTaints", "RemoveFailedPods", "Bogus",
                                     "RemovePodsViolatingTopologySpreadConstraint", "RemovePodsHavingTooManyRestarts"]),
                    st.builds(lambda e, p: {"enabled": e, "params": p}, st.booleans() | JSON_LEAF,
                              st.dictionaries(st.sampled_from([
                                  "namespaces", "nodeFit", "thresholdPriority", "nodeResourceUtilizationThresholds",
                                  "podLifeTime", "failedPods", "includeSoftConstraints", "podsHavingTooManyRestarts",
                                  "labelSelector", "removeDuplicates"]), JSON_LEAF, max_size=3) | JSON_LEAF),
                    max_size=3),
    st.dictionaries(st.sampled_from(["nodeSelector", "evictLocalStoragePods", "maxNoOfPodsToEvictPerNode"]), JSON_LEAF,
                    max_size=2),
)


PRESET_NAMES = st.sampled_from(["AffinityAndTaints", "TopologyAndDuplicates", "SoftTopologyAndDuplicates",
                                 "LifecycleAndUtilization", "LongLifecycle", "DevPreviewLongLifecycle", "CompactAndScale",
                                 "EvictPodsWithPVC", "EvictPodsWithLocalStorage", "KubeVirtRelieveAndMigrate", "Bogus"])
PRESET_DOCS = st.builds(
    lambda api, profiles, custom, limits: {"apiVersion": api[0], "kind": api[1], "profiles": profiles,
                                           "profileCustomizations": custom, "evictionLimits": limits},
    st.sampled_from([("kdesched.dev/v1alpha1", "Profiles"), ("operator.openshift.io/v1", "KubeDescheduler")]),
    st.lists(PRESET_NAMES, max_size=4) | JSON_LEAF,
    st.dictionaries(st.sampled_from(["namespaces", "thresholdPriority", "thresholdPriorityClassName", "podLifetime",
                                     "devLowNodeUtilizationThresholds", "devHighNodeUtilizationThresholds"]),
                    JSON_LEAF | st.sampled_from(["5m", "Low", "High", "Moderate"]), max_size=3) | JSON_LEAF,
    st.dictionaries(st.sampled_from(["total", "node"]), JSON_LEAF, max_size=2) | JSON_LEAF,
)
DECKHOUSE_DOCS = st.dictionaries(
    st.sampled_from(["removeDuplicates", "lowNodeUtilization", "podLifeTime", "removePodsViolatingNodeAffinity",
                     "nodeSelector", "unknown"]), st.booleans() | JSON_LEAF, max_size=4,
).flatmap(lambda values: st.sampled_from([values, {"descheduler": values}, {"spec": {"settings": values}},
                                          {"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig",
                                           "metadata": {"name": "descheduler"}, "spec": {"settings": values}}]))


HEADERS = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["descheduler/v1alpha2", "descheduler/v1alpha1", "v1", "kdesched.dev/v1alpha1",
                                   "operator.openshift.io/v1", "deckhouse.io/v1alpha1", "x/y"]) | JSON_LEAF,
    "kind": st.sampled_from(["DeschedulerPolicy", "ConfigMap", "Profiles", "KubeDescheduler", "ModuleConfig"]) | JSON_LEAF,
}, optional={"data": st.dictionaries(st.sampled_from(["policy.yaml", "other"]), JSON_LEAF | st.sampled_from(
    ["apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\n", "kind: ConfigMap\n", "[", ""]), max_size=2) | JSON_LEAF,
    "spec": JSON_LEAF, "metadata": JSON_LEAF, "profiles": JSON_LEAF, "strategies": JSON_LEAF})


@settings(max_examples=300, deadline=None)
@given(st.one_of(V2_DOCS, V1_DOCS, PRESET_DOCS, DECKHOUSE_DOCS, HEADERS, JSON_LEAF))
def test_fuzzed_documents_only_ever_raise_policy_error(doc: Any) -> None:
    try:
        policy_from_mapping(doc, "fuzz")
    except PolicyError as exc:
        assert exc.errors and all(isinstance(e, str) and e for e in exc.errors)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fuzzed_text_only_ever_raises_policy_error(text: str) -> None:
    try:
        load_policy_text(text, "fuzz")
    except PolicyError:
        pass


# --------------------------------------------------------------------------- priority classes

def test_resolve_priority_thresholds() -> None:
    doc = v2(profile("a", {"DefaultEvictor": {"priorityThreshold": {"name": "high"}}}),
             profile("b", {"DefaultEvictor": {"priorityThreshold": {"value": 7}}}), profile("c"))
    policy = policy_from_mapping(doc, "x")
    resolved = resolve_priority_thresholds(policy, {"high": 1000})
    assert [p.evictor_args.priority_threshold for p in resolved.profiles] == [
        PriorityThreshold(value=1000), PriorityThreshold(value=7), PriorityThreshold(value=TOP)]
    assert resolved.profiles[1] is policy.profiles[1]


def test_resolve_priority_thresholds_errors() -> None:
    doc = v2(profile("a", {"DefaultEvictor": {"priorityThreshold": {"name": "missing"}}}),
             profile("b", {"DefaultEvictor": {"priorityThreshold": {"name": "huge"}}}))
    with pytest.raises(PolicyError) as info:
        resolve_priority_thresholds(policy_from_mapping(doc, "x.yaml"), {"huge": SYSTEM_CRITICAL_PRIORITY + 1})
    assert info.value.errors == [
        'profile "a" / plugin DefaultEvictor: priorityThreshold.name: PriorityClass "missing" does not exist',
        ('profile "b" / plugin DefaultEvictor: priorityThreshold.name: PriorityClass "huge" has value 2000000001, above the '
        'maximum 2000000000 (system-critical)'),
    ]
    assert info.value.source == "x.yaml"


def test_policy_error_rendering() -> None:
    err = PolicyError(["a: bad", "b: worse"], "p.yaml")
    assert str(err) == "p.yaml:\n  a: bad\n  b: worse"
    assert err.with_source("q.yaml").source == "q.yaml"
    assert textwrap.dedent(str(PolicyError([]))) == "policy:\n  invalid policy"


def test_unquoted_y_and_n_are_booleans_as_the_upstream_decoder_reads_them() -> None:
    """go-yaml v2 (under the upstream descheduler's decoder) reads y, Y, n and N as booleans and
    PyYAML as strings: ``nodeFit: y`` ran upstream and was refused here, and ``matchLabels: {pick:
    n}`` was refused upstream and ran here (tests/realk8s/test_differential_edges.py asks the
    binary). A label value that is not a string is refused, naming the field."""
    policy = load_policy_text(POD_LIFETIME_POLICY_YAML.replace("{EVICTOR}", "{nodeFit: y}"), "yn.yaml")
    assert policy.profiles[0].evictor_args.node_fit is True
    with pytest.raises(PolicyError) as err:
        load_policy_text(POD_LIFETIME_POLICY_YAML.replace("{EVICTOR}", "{labelSelector: {matchLabels: {pick: n}}}"), "yn.yaml")
    assert "labelSelector.matchLabels.pick: must be a string, got the bool False: quote the value" in str(err.value)
    quoted = load_policy_text(POD_LIFETIME_POLICY_YAML.replace("{EVICTOR}", '{labelSelector: {matchLabels: {pick: "n"}}}'), "yn.yaml")
    assert str(quoted.profiles[0].evictor_args.label_selector) == "pick=n"

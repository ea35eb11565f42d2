"""policy_to_v1alpha2: faithful (load -> dump -> load gives an equal Policy) and minimal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from kdesched.policy.defaults import default_policy
from kdesched.policy.dump import args_to_v1alpha2, policy_to_v1alpha2
from kdesched.policy.errors import PolicyError
from kdesched.policy.load import load_policy, load_policy_text, policy_from_mapping
from kdesched.policy.types import DEFAULT_PROTECTIONS, DefaultEvictorArgs, Policy, PriorityThreshold

from tests.policy.test_load import V1_DOCS, V2_DOCS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"

KITCHEN_SINK = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
nodeSelector: "pool in (a,b),!spot"
maxNoOfPodsToEvictPerNode: 2
maxNoOfPodsToEvictPerNamespace: 1
maxNoOfPodsToEvictTotal: 10
gracePeriodSeconds: 15
evictionFailureEventNotification: true
metricsProviders:
- source: Prometheus
  prometheus: {url: "https://prom:9090", authToken: {secretReference: {namespace: mon, name: token}}}
- source: KubernetesMetrics
kdesched: {events: {dev.kdesched.node.ready: [LowNodeUtilization]}, settleSeconds: 5}
profiles:
- name: everything
  pluginConfig:
  - name: DefaultEvictor
    args:
      nodeSelector: "role=worker"
      labelSelector: {matchLabels: {tier: web}, matchExpressions: [{key: canary, operator: DoesNotExist}]}
      namespaceLabelSelector: {matchLabels: {team: a}}
      priorityThreshold: {name: important}
      nodeFit: true
      minReplicas: 2
      minPodAge: 1h30m
      noEvictionPolicy: Mandatory
      podProtections:
        defaultDisabled: [DaemonSetPods]
        extraEnabled: [PodsWithPVC, PodsWithoutPDB]
        config: {PodsWithPVC: {protectedStorageClasses: [{name: local-path}]}}
  - name: RemoveDuplicates
    args: {excludeOwnerKinds: [Job], namespaces: {include: [apps]}}
  - name: LowNodeUtilization
    args:
      thresholds: {cpu: 12.5, memory: 20, nvidia.com/gpu: 0}
      targetThresholds: {cpu: 50, memory: 60, nvidia.com/gpu: 100}
      numberOfNodes: 1
      evictableNamespaces: {exclude: [kube-system]}
      evictionLimits: {node: 3}
      metricsUtilization: {}
  - name: RemovePodsViolatingTopologySpreadConstraint
    args: {constraints: [ScheduleAnyway], topologyBalanceNodeFit: false, labelSelector: {matchLabels: {a: b}}}
  - name: RemovePodsViolatingNodeTaints
    args: {includePreferNoSchedule: true, includedTaints: []}
  - name: RemovePodsViolatingNodeAffinity
    args: {nodeAffinityType: [requiredDuringSchedulingIgnoredDuringExecution, preferredDuringSchedulingIgnoredDuringExecution]}
  - name: RemovePodsHavingTooManyRestarts
    args: {podRestartThreshold: 5, includingInitContainers: true, states: [CrashLoopBackOff]}
  - name: PodLifeTime
    args:
      maxPodLifeTimeSeconds: 600
      states: [Pending, ImagePullBackOff]
      conditions: [{type: Ready, status: "False", minTimeSinceLastTransitionSeconds: 60}, {reason: Evicted}]
      exitCodes: [137]
      ownerKinds: {exclude: [Job]}
      includingInitContainers: true
      includingEphemeralContainers: true
  - name: RemoveFailedPods
    args: {minPodLifetimeSeconds: 0, reasons: [OOMKilled], exitCodes: [1], excludeOwnerKinds: [Job], includingInitContainers: true}
  plugins:
    deschedule:
      enabled: [RemovePodsViolatingNodeTaints, RemovePodsViolatingNodeAffinity, RemovePodsHavingTooManyRestarts,
                PodLifeTime, RemoveFailedPods]
    balance: {enabled: [RemoveDuplicates, LowNodeUtilization, RemovePodsViolatingTopologySpreadConstraint]}
- name: compact
  pluginConfig:
  - name: DefaultEvictor
    args: {evictLocalStoragePods: true, ignorePvcPods: true, priorityThreshold: {value: 1000}}
  - name: HighNodeUtilization
    args: {thresholds: {cpu: 20}, evictionModes: [OnlyThresholdingResources], evictableNamespaces: {exclude: [x]}}
  - name: LowNodeUtilization
    args:
      thresholds: {cpu: 0}
      targetThresholds: {cpu: 10}
      useDeviationThresholds: true
  plugins:
    balance: {enabled: [HighNodeUtilization]}
"""


def same(a: Policy, b: Policy) -> bool:
    return replace(a, source="", api_version="") == replace(b, source="", api_version="")


def round_trip(policy: Policy) -> Policy:
    text = yaml.safe_dump(policy_to_v1alpha2(policy), sort_keys=False)
    again = load_policy_text(text, "dumped.yaml")
    assert again.api_version == "descheduler/v1alpha2"
    return again


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_round_trips(path: Path) -> None:
    policy = load_policy(str(path))
    assert same(round_trip(policy), policy)


def test_default_policy_and_kitchen_sink_round_trip() -> None:
    for policy in (default_policy(), load_policy_text(KITCHEN_SINK, "sink.yaml")):
        assert same(round_trip(policy), policy)


def test_v1alpha1_example_dumps_to_the_upstream_conversion() -> None:
    doc = policy_to_v1alpha2(load_policy(str(EXAMPLES / "v1alpha1-legacy.yaml")))
    assert doc == {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "maxNoOfPodsToEvictPerNode": 3,
        "profiles": [
            {"name": "strategy-RemovePodsViolatingNodeTaints-profile",
             "pluginConfig": [
                 {"name": "DefaultEvictor", "args": {"nodeFit": True, "evictLocalStoragePods": True}},
                 {"name": "RemovePodsViolatingNodeTaints", "args": {"excludedTaints": ["maintenance"]}}],
             "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}},
            {"name": "strategy-LowNodeUtilization-profile",
             "pluginConfig": [
                 {"name": "DefaultEvictor", "args": {"priorityThreshold": {"value": 10000}, "evictLocalStoragePods": True}},
                 {"name": "LowNodeUtilization", "args": {
                     "thresholds": {"cpu": 25, "pods": 25}, "targetThresholds": {"cpu": 60, "pods": 60},
                     "evictableNamespaces": {"exclude": ["kube-system"]}}}],
             "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}},
        ],
    }


def test_defaults_are_left_out() -> None:
    doc = policy_to_v1alpha2(policy_from_mapping({
        "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
        "profiles": [{"name": "p", "plugins": {"balance": {"enabled": ["RemovePodsViolatingTopologySpreadConstraint"]},
                                               "deschedule": {"enabled": ["RemoveFailedPods"]}}}]}, "x"))
    assert doc["profiles"][0]["pluginConfig"] == [
        {"name": "DefaultEvictor"}, {"name": "RemoveFailedPods"}, {"name": "RemovePodsViolatingTopologySpreadConstraint"}]
    assert set(doc) == {"apiVersion", "kind", "profiles"}


def test_protections_built_in_code_are_written_as_lists() -> None:
    args = DefaultEvictorArgs(priority_threshold=PriorityThreshold(value=5),
                              protections=(DEFAULT_PROTECTIONS - {"FailedBarePods"}) | {"PodsWithResourceClaims"})
    assert args_to_v1alpha2(args) == {"priorityThreshold": {"value": 5}, "podProtections": {
        "defaultDisabled": ["FailedBarePods"], "extraEnabled": ["PodsWithResourceClaims"]}}


def test_unknown_args_type_is_refused() -> None:
    with pytest.raises(TypeError):
        args_to_v1alpha2(object())


@settings(max_examples=300, deadline=None)
@given(st.one_of(V2_DOCS, V1_DOCS))
def test_any_loadable_document_round_trips(doc: Any) -> None:
    try:
        policy = policy_from_mapping(doc, "fuzz")
    except PolicyError:
        return
    assert same(round_trip(policy), policy)


# --------------------------------------------------------------------------- valid random policies

def _opt(**fields: Any) -> Any:
    return st.fixed_dictionaries({}, optional=fields)


_NAMES = st.lists(st.sampled_from(["apps", "web", "kube-system"]), min_size=1, max_size=2, unique=True)
_NS = st.one_of(_NAMES.map(lambda n: {"include": n}), _NAMES.map(lambda n: {"exclude": n}))
_EXCLUDE = _NAMES.map(lambda n: {"exclude": n})
_SEL = st.sampled_from([{}, {"matchLabels": {"a": "b"}},
                        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v", "w"]}]}])
_PCT = st.integers(0, 100) | st.sampled_from([0.5, 12.5, 99.9])
_PAIRS = st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "example.com/gpu"]),
                         st.tuples(_PCT, _PCT).map(lambda t: (min(t), max(t))), min_size=1, max_size=3)
_KINDS = st.lists(st.sampled_from(["Job", "ReplicaSet", "DaemonSet"]), min_size=1, max_size=2, unique=True)
_PROTECTIONS = st.one_of(
    _opt(evictLocalStoragePods=st.booleans(), evictDaemonSetPods=st.booleans(), evictSystemCriticalPods=st.booleans(),
         evictFailedBarePods=st.booleans(), ignorePvcPods=st.booleans(), ignorePodsWithoutPDB=st.booleans()),
    st.fixed_dictionaries({"podProtections": _opt(
        defaultDisabled=st.lists(st.sampled_from(sorted(DEFAULT_PROTECTIONS)), max_size=2, unique=True),
        extraEnabled=st.lists(st.sampled_from(["PodsWithPVC", "PodsWithoutPDB", "PodsWithResourceClaims"]),
                              max_size=2, unique=True),
        config=st.just({"PodsWithPVC": {"protectedStorageClasses": [{"name": "local"}]}}))}),
)
_EVICTOR = st.builds(lambda a, b: {**a, **b}, _opt(
    nodeSelector=st.sampled_from(["", "a=b", "!spot,zone in (x,y)"]), labelSelector=_SEL, namespaceLabelSelector=_SEL,
    priorityThreshold=st.sampled_from([{}, {"value": -3}, {"value": 2_000_000_000}, {"name": "important"}]),
    nodeFit=st.booleans(), minReplicas=st.integers(0, 3), minPodAge=st.sampled_from(["5m", "1h30m", "0s", "1.5s"]),
    noEvictionPolicy=st.sampled_from(["", "Preferred", "Mandatory"])), _PROTECTIONS)
VALID_ARGS = {
    "DefaultEvictor": _EVICTOR,
    "RemoveDuplicates": _opt(namespaces=_NS, excludeOwnerKinds=_KINDS),
    "LowNodeUtilization": st.builds(
        lambda pairs, extra: {"thresholds": {k: v[0] for k, v in pairs.items()},
                              "targetThresholds": {k: v[1] for k, v in pairs.items()}, **extra},
        _PAIRS, _opt(useDeviationThresholds=st.booleans(), numberOfNodes=st.integers(0, 3), evictableNamespaces=_EXCLUDE,
                     evictionLimits=st.builds(lambda n: {"node": n}, st.integers(0, 5)),
                     metricsUtilization=st.just({}))),
    "HighNodeUtilization": st.builds(lambda pairs, extra: {"thresholds": {k: v[0] for k, v in pairs.items()}, **extra},
                                     _PAIRS, _opt(numberOfNodes=st.integers(0, 3), evictableNamespaces=_EXCLUDE,
                                                  evictionModes=st.just(["OnlyThresholdingResources"]))),
    "RemovePodsViolatingInterPodAntiAffinity": _opt(namespaces=_NS, labelSelector=_SEL),
    "RemovePodsViolatingNodeAffinity": st.builds(lambda t, e: {"nodeAffinityType": t, **e}, st.lists(st.sampled_from([
        "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution"]),
        min_size=1, max_size=2, unique=True), _opt(namespaces=_NS, labelSelector=_SEL)),
    "RemovePodsViolatingNodeTaints": st.builds(lambda a, b: {**a, **b}, _opt(
        namespaces=_NS, labelSelector=_SEL, includePreferNoSchedule=st.booleans()),
        st.sampled_from([{}, {"excludedTaints": ["a", "b=c"]}, {"includedTaints": []}, {"includedTaints": ["x"]}])),
    "RemovePodsViolatingTopologySpreadConstraint": _opt(
        namespaces=_NS, labelSelector=_SEL, topologyBalanceNodeFit=st.booleans(),
        constraints=st.lists(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]), min_size=1, max_size=2, unique=True)),
    "RemovePodsHavingTooManyRestarts": st.builds(lambda n, e: {"podRestartThreshold": n, **e}, st.integers(1, 1000), _opt(
        includingInitContainers=st.booleans(), namespaces=_NS, labelSelector=_SEL,
        states=st.lists(st.sampled_from(["Running", "CrashLoopBackOff"]), min_size=1, max_size=2, unique=True))),
    "PodLifeTime": st.builds(lambda m, e: {"maxPodLifeTimeSeconds": m, **e}, st.integers(0, 10**6), _opt(
        states=st.lists(st.sampled_from(["Pending", "Running", "OOMKilled", "Evicted"]), min_size=1, max_size=3, unique=True),
        conditions=st.lists(_opt(type=st.just("Ready"), status=st.sampled_from(["True", "False"]),
                                 minTimeSinceLastTransitionSeconds=st.integers(0, 100)).filter(bool), min_size=1, max_size=2),
        exitCodes=st.lists(st.integers(-5, 255), min_size=1, max_size=2), ownerKinds=_KINDS.map(lambda k: {"exclude": k}),
        includingInitContainers=st.booleans(), includingEphemeralContainers=st.booleans(), namespaces=_NS)),
    "RemoveFailedPods": _opt(minPodLifetimeSeconds=st.integers(0, 10**5), excludeOwnerKinds=_KINDS,
                             reasons=st.just(["OOMKilled"]), exitCodes=st.just([1, 2]),
                             includingInitContainers=st.booleans(), namespaces=_NS, labelSelector=_SEL),
}
_POINT = {"RemoveDuplicates": "balance", "LowNodeUtilization": "balance", "HighNodeUtilization": "balance",
          "RemovePodsViolatingTopologySpreadConstraint": "balance"}


@st.composite
def valid_policies(draw: Any) -> dict[str, Any]:
    profiles = []
    for i in range(draw(st.integers(1, 3))):
        plugins = draw(st.lists(st.sampled_from(sorted(VALID_ARGS)), min_size=1, max_size=4, unique=True))
        configs = [{"name": n, "args": draw(VALID_ARGS[n])} for n in plugins]
        enabled: dict[str, list[str]] = {}
        for n in plugins:
            if n != "DefaultEvictor" and draw(st.booleans()):
                enabled.setdefault(_POINT.get(n, "deschedule"), []).append(n)
        profiles.append({"name": f"p{i}", "pluginConfig": configs,
                         "plugins": {k: {"enabled": v} for k, v in enabled.items()}})
    top = draw(_opt(maxNoOfPodsToEvictPerNode=st.integers(0, 5), maxNoOfPodsToEvictTotal=st.integers(0, 5),
                    gracePeriodSeconds=st.integers(0, 60), evictionFailureEventNotification=st.booleans(),
                    nodeSelector=st.sampled_from(["a=b", "x notin (y)"]), metricsCollector=st.just({"enabled": True})))
    return {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", **top, "profiles": profiles}


@settings(max_examples=200, deadline=None)
@given(valid_policies())
def test_valid_random_policies_load_and_round_trip(doc: dict[str, Any]) -> None:
    policy = policy_from_mapping(doc, "random")
    assert same(round_trip(policy), policy)

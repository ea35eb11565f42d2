"""ReactorSettings validation (every bad field named) and the event -> scope mapping."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.policy.errors import PolicyError
from kdesched.policy.safety import CONTROL_PLANE_TAINTS, SafetySettings
from kdesched.policy.safety import Path as SafetyPath
from kdesched.policy.types import DEFAULT_PROTECTIONS, DefaultEvictorArgs, Policy
from kdesched.reactor.events import routing as ev
from kdesched.reactor.run.settings import BucketSettings, ReactorSettings, parse_settings

from tests.builders import pod_obj, snapshot
from tests.reactor.policies import LNU, default_like_policy, make_policy


def settings(block: Any = None, env: dict[str, str] | None = None, **kw: Any) -> ReactorSettings:
    return ReactorSettings.from_policy(default_like_policy(kdesched=block or {}, **kw), env=env or {})


def test_defaults() -> None:
    s = settings()
    assert s.settle_seconds == 10 and s.lease_wait_seconds == 5 and s.lease_name == "kdesched"
    assert s.balance_delay_seconds == 0.5
    assert s.lease_namespace == "kdesched" and s.cooldown_workload_seconds == 300 and not s.dry_run
    assert s.rate_limits.global_ == BucketSettings(300, 100)  # cluster-wide
    assert s.events[ev.NODE_READY] == ("LowNodeUtilization", "RemoveDuplicates")


def test_lease_renew_deadline_defaults_to_two_thirds_of_the_duration() -> None:
    assert settings().lease_renew_deadline == 40  # of 60 s, as client-go's 10 s of 15 s
    assert settings({"leaseDurationSeconds": 15}).lease_renew_deadline == 10
    s = settings({"leaseDurationSeconds": 30, "leaseRenewDeadlineSeconds": 12.5})
    assert s.lease_renew_deadline_seconds == s.lease_renew_deadline == 12.5


def test_values_and_env() -> None:
    s = settings({"settleSeconds": 0.5, "balanceDelaySeconds": 0, "cooldown": {"workloadSeconds": 60}, "rateLimits": {"perNode": None,
                  "global": {"perMinute": 6, "burst": 2}}, "topologyKeys": ["rack"],
                  "events": {ev.TAINTS_CHANGED: ["RemovePodsViolatingNodeTaints", "RemoveDuplicates"]}},
                 env={"KDESCHED_LEASE_NAME": "ds", "POD_NAMESPACE": "ops", "KDESCHED_DRY_RUN": "true", "K_SINK": "http://b"})
    assert s.settle_seconds == 0.5 and s.balance_delay_seconds == 0 and s.cooldown_workload_seconds == 60 and s.cooldown_node_seconds == 300
    assert s.rate_limits.global_ == BucketSettings(6, 2)
    assert s.topology_keys == ("rack",) and s.lease_name == "ds" and s.lease_namespace == "ops"
    assert s.dry_run
    assert s.events[ev.TAINTS_CHANGED] == ("RemovePodsViolatingNodeTaints", "RemoveDuplicates")
    assert s.events_overridden == {ev.TAINTS_CHANGED}


BAD = [
    ({"settleSeconds": "x"}, {}, 'kdesched.settleSeconds: must be a number >= 0, got "x"'),
    ({"settleSeconds": -1}, {}, "kdesched.settleSeconds: must be a number >= 0, got -1"),
    ({"balanceDelaySeconds": "soon"}, {}, 'kdesched.balanceDelaySeconds: must be a number >= 0, got "soon"'),
    ({"safety": {"controlPlaneTaints": "yes"}}, {}, 'kdesched.safety.controlPlaneTaints: must be true or false, got "yes"'),
    ({"leaseDurationSeconds": 1}, {}, "kdesched.leaseDurationSeconds: must be an integer >= 5, got 1"),
    ({"leaseRenewDeadlineSeconds": 60}, {},
     "kdesched.leaseRenewDeadlineSeconds: must be a number >= 1 and < leaseDurationSeconds (60), got 60"),
    ({"leaseDurationSeconds": 15, "leaseRenewDeadlineSeconds": 20}, {},
     "kdesched.leaseRenewDeadlineSeconds: must be a number >= 1 and < leaseDurationSeconds (15), got 20"),
    ({"leaseRenewDeadlineSeconds": 0.5}, {}, "kdesched.leaseRenewDeadlineSeconds: must be a number >= 1"),
    ({"leaseRenewDeadlineSeconds": ".inf"}, {}, 'kdesched.leaseRenewDeadlineSeconds: must be a number >= 1'),
    ({"leaseRenewDeadlineSeconds": float("nan")}, {}, "kdesched.leaseRenewDeadlineSeconds: must be a number >= 1"),
    ({"cooldown": {"nodeSeconds": True}}, {}, "kdesched.cooldown.nodeSeconds: must be a number >= 0, got true"),
    ({"cooldown": {"nodeSecs": 1}}, {}, "kdesched.cooldown.nodeSecs: unknown field"),
    ({"rateLimits": {"global": {"perMinute": 0}}}, {}, "kdesched.rateLimits.global.perMinute: must be a number > 0"),
    ({"rateLimits": {"perNode": {"burst": 0}}}, {}, "kdesched.rateLimits.perNode: removed in 0.2"),
    ({"rateLimits": {"perNamespace": {"perMinute": 30}}}, {}, "kdesched.rateLimits.perNamespace: removed in 0.2"),
    ({"rateLimits": "fast"}, {}, 'kdesched.rateLimits: must be a mapping, got "fast"'),
    ({"settle": 1}, {}, "kdesched.settle: unknown field"),
    ({"topologyKeys": "zone"}, {}, "kdesched.topologyKeys: must be a list of label keys"),
    ({"events": {"dev.kdesched.node.gone": []}}, {}, "kdesched.events.dev.kdesched.node.gone: unknown event type"),
    ({"events": {ev.NODE_READY: ["Nope"]}}, {}, "kdesched.events.dev.kdesched.node.ready: unknown strategy 'Nope'"),
    ({"events": {ev.NODE_READY: "LowNodeUtilization"}}, {}, "must be a list of strategy names"),
    ({"events": {ev.NODE_READY: ["HighNodeUtilization"]}}, {},
     "kdesched.events.dev.kdesched.node.ready: strategy HighNodeUtilization needs args (thresholds)"),
    ({"dryRun": "yes"}, {}, 'kdesched.dryRun: must be true or false, got "yes"'),
    ({}, {"KDESCHED_DRY_RUN": "maybe"}, 'KDESCHED_DRY_RUN: must be true or false, got "maybe"'),
    ({}, {"KDESCHED_LEASE_NAME": "Bad_Name"}, "KDESCHED_LEASE_NAME: must be a DNS subdomain name"),
    # the one DNS-name rule (kdesched.model.names): a trailing newline is no name ("^...$" let it in)
    ({}, {"KDESCHED_LEASE_NAME": "kdesched\n"}, "KDESCHED_LEASE_NAME: must be a DNS subdomain name"),
    ({}, {"KDESCHED_LEASE_NAMESPACE": "kdesched\n"}, "KDESCHED_LEASE_NAMESPACE: must be a namespace name"),
    ({}, {"KDESCHED_LEASE_NAME": "a..b"}, "KDESCHED_LEASE_NAME: must be a DNS subdomain name"),
]


@pytest.mark.parametrize("block,env,message", BAD, ids=[b[2][:50] for b in BAD])
def test_bad_settings_name_the_field(block: Any, env: dict[str, str], message: str) -> None:
    with pytest.raises(PolicyError) as err:
        settings(block, env)
    assert any(message in e for e in err.value.errors), err.value.errors


def test_all_errors_reported_at_once() -> None:
    with pytest.raises(PolicyError) as err:
        settings({"settleSeconds": "x", "leaseWaitSeconds": -2, "bogus": 1})
    assert len(err.value.errors) == 3


def test_required_args_satisfied_by_plugin_config() -> None:
    policy = make_policy({"RemovePodsViolatingNodeTaints": None}, configs={"HighNodeUtilization": {"thresholds": {"cpu": 20}}},
                         kdesched={"events": {ev.NODE_READY: ["HighNodeUtilization"]}})
    s = ReactorSettings.from_policy(policy, env={})
    assert s.events[ev.NODE_READY] == ("HighNodeUtilization",)
    eff = ev.event_policy(policy, s.events[ev.NODE_READY])
    assert "HighNodeUtilization" in eff.profiles[0].balance
    assert eff.profiles[0].plugin_args["HighNodeUtilization"].thresholds == {"cpu": 20}


def test_default_map_drops_what_cannot_run_instead_of_failing() -> None:
    policy = make_policy({"RemovePodsViolatingNodeTaints": None})  # no LowNodeUtilization anywhere
    s = ReactorSettings.from_policy(policy, env={})
    assert s.events[ev.NODE_READY] == ("RemoveDuplicates",)


def test_event_policy_adds_unenabled_strategy_with_defaults() -> None:
    policy = make_policy({"LowNodeUtilization": LNU})
    eff = ev.event_policy(policy, ["RemovePodsViolatingNodeTaints", "LowNodeUtilization", "RemoveDuplicates"])
    assert eff.profiles[0] == policy.profiles[0]  # the user's profile is left as written
    (events,) = eff.profiles[1:]  # every default-args strategy in kdesched's own profile
    assert events.name == ev.EVENTS_PROFILE
    assert events.deschedule == ("RemovePodsViolatingNodeTaints",) and events.balance == ("RemoveDuplicates",)
    assert ev.event_policy(policy, ["LowNodeUtilization"]) is policy
    with pytest.raises(ev.EventScopeError):
        ev.event_policy(policy, ["HighNodeUtilization"])


@pytest.mark.parametrize("configured", [True, False], ids=["configured", "default-args"])
def test_event_policy_keeps_control_plane_taints_out_of_every_taint_run(configured: bool) -> None:
    """The event path's rule (kdesched.policy.control_plane) covers the policy's own
    RemovePodsViolatingNodeTaints and one the event map adds on default args alike."""
    plugins: dict[str, Any] = {"LowNodeUtilization": LNU, **({"RemovePodsViolatingNodeTaints": None} if configured else {})}
    policy = make_policy(plugins)
    eff = ev.event_policy(policy, ["RemovePodsViolatingNodeTaints"], SafetySettings().resolve(SafetyPath.EVENT))
    (args,) = [p.plugin_args["RemovePodsViolatingNodeTaints"] for p in eff.profiles
               if "RemovePodsViolatingNodeTaints" in p.deschedule]
    assert args.excluded_taints == CONTROL_PLANE_TAINTS
    opted_in = SafetySettings(control_plane_taints=True).resolve(SafetyPath.EVENT)
    eff = ev.event_policy(policy, ["RemovePodsViolatingNodeTaints"], opted_in)
    (args,) = [p.plugin_args["RemovePodsViolatingNodeTaints"] for p in eff.profiles
               if "RemovePodsViolatingNodeTaints" in p.deschedule]
    assert args.excluded_taints == ()


def test_a_default_args_strategy_keeps_the_default_protections_and_the_first_profiles_restrictions() -> None:
    """The first profile's opt-outs (written for its own strategies) do not carry over to a strategy
    the event path runs on default args; its restrictions do."""
    cleanup = make_policy({"RemoveFailedPods": {}}, evictor={
        "evictSystemCriticalPods": True, "evictLocalStoragePods": True, "evictDaemonSetPods": True,
        "evictFailedBarePods": True, "ignorePvcPods": True, "minReplicas": 2, "nodeFit": True,
        "labelSelector": {"matchLabels": {"descheduling": "ok"}}, "priorityThreshold": {"value": 1000}})
    mine = cleanup.profiles[0].evictor_args
    assert not DEFAULT_PROTECTIONS <= mine.protections  # the profile opted out of them
    eff = ev.event_policy(cleanup, ["RemovePodsViolatingNodeTaints"])
    assert eff.profiles[0] == cleanup.profiles[0]
    evictor = eff.profiles[1].evictor_args
    assert evictor.protections == DEFAULT_PROTECTIONS | {"PodsWithPVC"}
    assert (evictor.min_replicas, evictor.node_fit, evictor.label_selector, evictor.priority_threshold) == (
        mine.min_replicas, mine.node_fit, mine.label_selector, mine.priority_threshold)
    # no profile at all: the DefaultEvictor's defaults
    assert ev.event_policy(Policy(profiles=()), ["RemoveDuplicates"]).profiles[0].evictor_args == DefaultEvictorArgs()


SCOPES = [
    (ev.NODE_READY, (), ("LowNodeUtilization", "RemoveDuplicates"), None),
    (ev.NODE_ADDED, (), ("LowNodeUtilization", "RemoveDuplicates"), None),
    (ev.TAINTS_CHANGED, (), ("RemovePodsViolatingNodeTaints",), ("n1",)),
    (ev.LABELS_CHANGED, ("team",), ("RemovePodsViolatingNodeAffinity",), ("n1",)),
    (ev.LABELS_CHANGED, ("topology.kubernetes.io/zone",),
     ("RemovePodsViolatingNodeAffinity", "RemovePodsViolatingTopologySpreadConstraint"), ("n1",)),
    (ev.LABELS_CHANGED, (), ("RemovePodsViolatingNodeAffinity", "RemovePodsViolatingTopologySpreadConstraint"), ("n1",)),
]


@pytest.mark.parametrize("etype,changed,strategies,nodes", SCOPES)
def test_scope_for_event(etype: str, changed: tuple[str, ...], strategies: tuple[str, ...],
                         nodes: tuple[str, ...] | None) -> None:
    scope = ev.scope_for_event(settings(), default_like_policy(), etype, "n1", changed_labels=changed)
    assert scope.strategies == strategies and scope.nodes == nodes and scope.reason


def test_topology_keys_from_pods_and_settings() -> None:
    snap = snapshot([pod_obj("p", "n1", spread=[{"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule",
                                                  "labelSelector": {"matchLabels": {"app": "x"}}}])])
    s = settings({"topologyKeys": ["row"]})
    # the cluster uses "rack" only: a zone change is not a topology change for it
    scope = ev.scope_for_event(s, default_like_policy(), ev.LABELS_CHANGED, "n1", snapshot=snap,
                               changed_labels=["topology.kubernetes.io/zone"])
    assert "RemovePodsViolatingTopologySpreadConstraint" not in scope.strategies
    for key in ("rack", "row"):
        scope = ev.scope_for_event(s, default_like_policy(), ev.LABELS_CHANGED, "n1", snapshot=snap, changed_labels=[key])
        assert "RemovePodsViolatingTopologySpreadConstraint" in scope.strategies


@pytest.mark.parametrize("etype,node,field", [
    ("dev.kdesched.node.exploded", "n1", "type"), (ev.RUN_REQUESTED, "n1", "type"),
    (ev.NODE_READY, "", "node"), (ev.NODE_READY, "Bad Node!", "node"),
])
def test_scope_errors_are_value_errors(etype: str, node: str, field: str) -> None:
    with pytest.raises(ValueError) as err:
        ev.scope_for_event(settings(), default_like_policy(), etype, node)
    assert isinstance(err.value, ev.EventScopeError) and err.value.field == field


def test_needs_all_pods_and_kinds() -> None:
    plain = default_like_policy()
    assert ev.needs_all_pods(plain, ["RemovePodsViolatingNodeTaints"])[0] is False
    assert ev.needs_all_pods(plain, ["RemovePodsViolatingTopologySpreadConstraint"])[0] is True
    assert ev.needs_all_pods(default_like_policy(evictor={"nodeFit": True}), ["RemovePodsViolatingNodeTaints"])[0]
    assert ev.needs_all_pods(default_like_policy(evictor={"minReplicas": 2}), ["RemovePodsViolatingNodeTaints"])[0]
    assert ev.kinds_needed(plain) == ("Node", "Pod", "PodDisruptionBudget")
    assert "Namespace" in ev.kinds_needed(default_like_policy(evictor={"namespaceLabelSelector": {"matchLabels": {"a": "b"}}}))


def test_function_event_types_cover_every_semantic_event() -> None:
    from kdesched_functions import FUNCTION_EVENT_TYPES

    consumed = {t for f, types in FUNCTION_EVENT_TYPES.items() if f != "deadletter" for t in types}
    assert set(ev.NODE_EVENTS) | {ev.RUN_REQUESTED, ev.PING} | set(ev.APISERVER_EVENTS) <= consumed


def test_parse_settings_without_policy() -> None:
    assert parse_settings(None).settle_seconds == 10

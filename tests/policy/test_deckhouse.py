"""Deckhouse descheduler module values -> policy (detection, nesting, defaults, fixed thresholds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kdesched.policy.errors import PolicyError
from kdesched.policy.load import load_policy, policy_from_mapping
from kdesched.policy.types import (
    LowNodeUtilizationArgs,
    PodLifeTimeArgs,
    RemovePodsHavingTooManyRestartsArgs,
    RemovePodsViolatingNodeAffinityArgs,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "policies"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
DECKHOUSE_LNU = LowNodeUtilizationArgs(thresholds={"cpu": 40, "memory": 50, "pods": 40},
                                       target_thresholds={"cpu": 80, "memory": 90, "pods": 80})


def strategies(doc: Any) -> dict[str, Any]:
    policy = policy_from_mapping(doc, "values.yaml")
    # the detected format is named as it is: only a ModuleConfig claims deckhouse.io/v1alpha1
    claimed = doc.get("apiVersion")
    assert policy.api_version == (claimed or "Deckhouse descheduler module values")
    return {name: p.plugin_args[name] for p in policy.profiles for name in p.deschedule + p.balance}


FOUR = {"removeDuplicates": True, "lowNodeUtilization": True,
        "removePodsViolatingInterPodAntiAffinity": True, "removePodsViolatingNodeAffinity": True}


@pytest.mark.parametrize("doc", [
    FOUR,
    {"descheduler": FOUR},
    {"settings": FOUR},
    {"spec": {"settings": FOUR}},
    {"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig", "metadata": {"name": "descheduler"},
     "spec": {"enabled": True, "version": 1, "settings": FOUR}},
], ids=["flat", "descheduler", "settings", "spec.settings", "ModuleConfig"])
def test_the_four_switches_in_every_shape(doc: dict[str, Any]) -> None:
    args = strategies(doc)
    assert set(args) == {"RemoveDuplicates", "LowNodeUtilization", "RemovePodsViolatingInterPodAntiAffinity",
                         "RemovePodsViolatingNodeAffinity"}
    assert args["LowNodeUtilization"] == DECKHOUSE_LNU
    assert args["RemovePodsViolatingNodeAffinity"] == RemovePodsViolatingNodeAffinityArgs((REQ,))


def test_module_defaults_turn_the_affinity_switches_on() -> None:
    assert set(strategies({"removeDuplicates": False})) == {
        "RemovePodsViolatingInterPodAntiAffinity", "RemovePodsViolatingNodeAffinity"}
    assert set(strategies({"removePodsViolatingNodeAffinity": False, "removePodsViolatingInterPodAntiAffinity": False})) == set()


def test_module_config_without_settings_uses_defaults() -> None:
    doc = {"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig", "metadata": {"name": "descheduler"},
           "spec": {"enabled": True}}
    assert set(strategies(doc)) == {"RemovePodsViolatingInterPodAntiAffinity", "RemovePodsViolatingNodeAffinity"}


def test_all_eight_switches() -> None:
    args = strategies({"descheduler": {
        "removeDuplicates": True, "lowNodeUtilization": True, "removePodsViolatingNodeTaints": True,
        "removePodsViolatingTopologySpreadConstraint": True, "removePodsHavingTooManyRestarts": True, "podLifeTime": True,
        "nodeSelector": {"a": "b"}, "tolerations": [{"operator": "Exists"}], "internal": {"x": 1}}})
    assert len(args) == 8
    assert args["RemovePodsHavingTooManyRestarts"] == RemovePodsHavingTooManyRestartsArgs(100, True)
    assert args["PodLifeTime"] == PodLifeTimeArgs(max_pod_life_time_seconds=86400, states=("Pending",))
    assert args["RemovePodsViolatingTopologySpreadConstraint"].constraints == ("DoNotSchedule",)


def test_example_file() -> None:
    policy = load_policy(str(EXAMPLES / "deckhouse-values.yaml"))
    assert [p.name for p in policy.profiles] == [
        "strategy-RemovePodsViolatingNodeAffinity-profile", "strategy-RemovePodsViolatingInterPodAntiAffinity-profile",
        "strategy-RemoveDuplicates-profile", "strategy-LowNodeUtilization-profile"]


@pytest.mark.parametrize(("doc", "message"), [
    ({"removeDuplicates": "yes"}, 'removeDuplicates: must be true or false, got "yes"'),
    ({"descheduler": {"lowNodeUtilization": True, "highNodeUtilization": True}},
     "descheduler.highNodeUtilization: unknown field (the Deckhouse descheduler module fields are: removePodsViolatingNodeAffinity"),
    ({"spec": {"settings": {"podLifeTime": 1}}}, "spec.settings.podLifeTime: must be true or false, got 1"),
    ({"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig", "metadata": {"name": "cni-cilium"}, "spec": {}},
     'metadata.name: a ModuleConfig for the descheduler module must be named descheduler, got "cni-cilium"'),
    ({"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig", "metadata": {"name": "descheduler"},
      "spec": {"enabled": False}}, "spec.enabled: the descheduler module is disabled"),
    ({"apiVersion": "deckhouse.io/v1alpha1", "kind": "ModuleConfig", "metadata": {"name": "descheduler"},
      "spec": {"settings": {"removeDuplicate": True}}}, "spec.settings.removeDuplicate: unknown field"),
    ({"descheduler": {"enabled": True}}, "apiVersion: is required"),
])
def test_invalid_values(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_mapping(doc, "values.yaml")
    assert any(e.startswith(message) for e in info.value.errors), info.value.errors

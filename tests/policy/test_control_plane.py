"""The control-plane taint rule (kdesched.policy.control_plane) from the one Safety value."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.policy.control_plane import TAINTS_PLUGIN, exclude_control_plane_taints, policy_safety
from kdesched.policy.safety import CONTROL_PLANE_TAINTS, Path, SafetySettings

from tests.reactor.policies import make_policy


def excluded(policy: Any) -> tuple[str, ...]:
    return tuple(policy.profiles[0].plugin_args[TAINTS_PLUGIN].excluded_taints)


def test_event_path_excludes_them_and_says_so() -> None:
    policy = make_policy({TAINTS_PLUGIN: {"excludedTaints": ["team"]}})
    out, note = exclude_control_plane_taints(policy, SafetySettings().resolve(Path.EVENT))
    assert excluded(out) == ("team", *CONTROL_PLANE_TAINTS)
    assert "controlPlaneTaints: true" in note
    again, note2 = exclude_control_plane_taints(out, SafetySettings().resolve(Path.EVENT))
    assert again == out and note2 == ""  # idempotent: the result names them


@pytest.mark.parametrize("settings,path", [
    (SafetySettings(), Path.PARITY),  # a plain upstream policy in simulate/run
    (SafetySettings(control_plane_taints=True), Path.EVENT),  # opted in
    (SafetySettings(enabled=False), Path.EVENT),  # safety off
])
def test_unchanged_when_safety_is_off_or_opted_in(settings: SafetySettings, path: Path) -> None:
    policy = make_policy({TAINTS_PLUGIN: None})
    assert exclude_control_plane_taints(policy, settings.resolve(path)) == (policy, "")


@pytest.mark.parametrize(("args", "named"), [
    ({"excludedTaints": ["node.kubernetes.io/unschedulable"]}, "node.kubernetes.io/unschedulable"),
    ({"includedTaints": ["node.kubernetes.io/disk-pressure=true"]}, "node.kubernetes.io/disk-pressure"),
])
def test_the_keys_a_policy_names_stand_as_written_and_the_others_are_excluded(args: dict[str, Any],
                                                                              named: str) -> None:
    """Naming one control-plane taint (upstream's #1114 workaround names the cordon's) is a decision
    about that one, not about disk-pressure or not-ready."""
    policy = make_policy({TAINTS_PLUGIN: args})
    out, note = exclude_control_plane_taints(policy, SafetySettings().resolve(Path.EVENT))
    written = tuple(args.get("excludedTaints", ()))
    assert excluded(out) == (*written, *(k for k in CONTROL_PLANE_TAINTS if k != named))
    assert out.profiles[0].plugin_args[TAINTS_PLUGIN].included_taints == policy.profiles[0].plugin_args[
        TAINTS_PLUGIN].included_taints
    assert "node.kubernetes.io/not-ready" in note and named not in note
    assert exclude_control_plane_taints(out, SafetySettings().resolve(Path.EVENT)) == (out, "")  # idempotent


def test_shipped_policy_switch_applies_in_simulate_run() -> None:
    policy = make_policy({TAINTS_PLUGIN: None}, kdesched={"safety": {"enabled": True}})
    safety = policy_safety(policy, Path.PARITY)
    assert safety.enabled
    assert excluded(exclude_control_plane_taints(policy, safety)[0]) == CONTROL_PLANE_TAINTS

"""No drain on control-plane taints: the safety default behind ``kdesched.safety.controlPlaneTaints``.

Why: ``kubectl cordon`` makes the node controller add ``node.kubernetes.io/unschedulable:NoSchedule``,
a recovering node carries ``not-ready``, a full disk ``disk-pressure``, a new cloud node
``node.cloudprovider.kubernetes.io/uninitialized``. RemovePodsViolatingNodeTaints treats them like
any NoSchedule taint and evicts every pod of the node: upstream at its next tick (its users pin
``excludedTaints``, upstream issue #1114), kdesched's event path within a second of the change.
A cordon is not a drain order, and condition taints come and go on their own.

Rule (docs/reactor.md, "Control-plane taints"), read from the one :class:`~kdesched.policy.safety.Safety`
value resolved per command:

* safety on (the event path, or ``kdesched.safety.enabled: true`` as in the shipped policies) and
  ``controlPlaneTaints`` not true: every RemovePodsViolatingNodeTaints configuration gets the keys
  of :data:`~kdesched.policy.safety.CONTROL_PLANE_TAINTS` appended to its ``excludedTaints``;
* except a configuration that already names one of them (by key or ``key=value``) in
  ``excludedTaints`` or ``includedTaints``: the user decided, it runs as written (as upstream);
* safety off (a plain upstream policy in ``simulate`` / ``run``) or ``controlPlaneTaints: true``:
  unchanged, upstream semantics.

Pure: a Policy in, a Policy out (plus a note for the run report).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kdesched.policy.safety import CONTROL_PLANE_TAINTS, Path, Safety, parse_safety
from kdesched.policy.types import Policy, RemovePodsViolatingNodeTaintsArgs

TAINTS_PLUGIN = "RemovePodsViolatingNodeTaints"


def policy_safety(policy: Policy, path: Path) -> Safety:
    """The Safety of ``policy`` on ``path``, from its ``kdesched.safety`` block (validated where the
    block is loaded: ReactorSettings; a malformed block counts as absent here)."""
    block = policy.kdesched if isinstance(policy.kdesched, Mapping) else {}
    return parse_safety(block.get("safety"), []).resolve(path)


def names_control_plane_taint(args: RemovePodsViolatingNodeTaintsArgs) -> bool:
    """Whether the configuration names a control-plane taint in ``excludedTaints``/``includedTaints``."""
    entries = (*args.excluded_taints, *(args.included_taints or ()))
    return any(entry.split("=", 1)[0] in CONTROL_PLANE_TAINTS for entry in entries)


def exclude_control_plane_taints(policy: Policy, safety: Safety) -> tuple[Policy, str]:
    """``policy`` with the control-plane taints excluded from taint evictions where the rule says so,
    and a note saying what was done ("" when nothing changed)."""
    if not safety.enabled or safety.control_plane_taints:
        return policy, ""
    profiles = list(policy.profiles)
    changed: list[str] = []
    for i, profile in enumerate(profiles):
        args = profile.plugin_args.get(TAINTS_PLUGIN)
        if not isinstance(args, RemovePodsViolatingNodeTaintsArgs) or names_control_plane_taint(args):
            continue
        excluded = (*args.excluded_taints, *(k for k in CONTROL_PLANE_TAINTS if k not in args.excluded_taints))
        plugin_args = {**profile.plugin_args, TAINTS_PLUGIN: replace(args, excluded_taints=excluded)}
        profiles[i] = replace(profile, plugin_args=plugin_args)
        changed.append(profile.name)
    if not changed:
        return policy, ""
    note = (f"control-plane taints ({', '.join(CONTROL_PLANE_TAINTS)}) do not trigger {TAINTS_PLUGIN} "
            f"(safety: {safety.why}; opt in with kdesched.safety.controlPlaneTaints: true)")
    return replace(policy, profiles=tuple(profiles)), note

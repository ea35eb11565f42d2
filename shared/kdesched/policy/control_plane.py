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
* except the keys a configuration already names (by key or ``key=value``) in ``excludedTaints`` or
  ``includedTaints``: for those the user decided, and they stand as written (as upstream). Naming
  one is not a decision about the others: the usual upstream workaround for #1114,
  ``excludedTaints: [node.kubernetes.io/unschedulable]``, once switched the whole rule off for its
  configuration, and a ``disk-pressure`` taint then drained the node in the event path;
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


def unnamed_control_plane_taints(args: RemovePodsViolatingNodeTaintsArgs) -> tuple[str, ...]:
    """The control-plane taint keys the configuration does not name (by key or ``key=value``) in
    ``excludedTaints`` or ``includedTaints``: the ones the rule excludes."""
    named = {entry.split("=", 1)[0] for entry in (*args.excluded_taints, *(args.included_taints or ()))}
    return tuple(k for k in CONTROL_PLANE_TAINTS if k not in named)


def exclude_control_plane_taints(policy: Policy, safety: Safety) -> tuple[Policy, str]:
    """``policy`` with the control-plane taints excluded from taint evictions where the rule says so,
    and a note saying what was done ("" when nothing changed)."""
    if not safety.enabled or safety.control_plane_taints:
        return policy, ""
    profiles = list(policy.profiles)
    added: dict[str, None] = {}
    for i, profile in enumerate(profiles):
        args = profile.plugin_args.get(TAINTS_PLUGIN)
        if not isinstance(args, RemovePodsViolatingNodeTaintsArgs):
            continue
        missing = unnamed_control_plane_taints(args)
        if not missing:
            continue
        plugin_args = {**profile.plugin_args, TAINTS_PLUGIN: replace(args, excluded_taints=(*args.excluded_taints,
                                                                                           *missing))}
        profiles[i] = replace(profile, plugin_args=plugin_args)
        added.update(dict.fromkeys(missing))
    if not added:
        return policy, ""
    keys = [k for k in CONTROL_PLANE_TAINTS if k in added]
    note = (f"control-plane taints ({', '.join(keys)}) do not trigger {TAINTS_PLUGIN} "
            f"(safety: {safety.why}; opt in with kdesched.safety.controlPlaneTaints: true)")
    return replace(policy, profiles=tuple(profiles)), note

"""Semantic event types, which function accepts which, and the event -> strategies map.

Why: one table decides what every event runs, for the Knative functions, ``kdesched serve`` and
``kdesched simulate --event`` alike, so the three can never disagree. The map is a documented
default (docs/reactor.md) that the policy's ``kdesched.events`` block can override per event type.

Two rules the map needs beyond "type -> names":

* A strategy named in the map but not enabled in any profile still runs for that event, with the
  policy's ``pluginConfig`` for it when one exists, else default args. Defaults are only possible
  when every arg is optional: a strategy with required args and no config makes the policy
  invalid when the user named it, and is dropped (with a note) from the *default* map, so the
  default map never makes a user's policy fail to load.
* ``dev.kdesched.node.labels.changed`` runs RemovePodsViolatingTopologySpreadConstraint only when
  a topology label changed: the keys pods use in ``topologySpreadConstraints`` when a snapshot is
  at hand, else :data:`WELL_KNOWN_TOPOLOGY_KEYS`, plus ``kdesched.topologyKeys``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kdesched.model.names import is_dns_subdomain
from kdesched.model.snapshot import Snapshot
from kdesched.policy.control_plane import exclude_control_plane_taints, policy_safety
from kdesched.policy.plugins import PLUGINS, parse_plugin_args
from kdesched.policy.safety import Path as SafetyPath
from kdesched.policy.safety import Safety
from kdesched.policy.types import DEFAULT_PROTECTIONS, DefaultEvictorArgs, Policy, Profile
from kdesched.reactor.events.lifecycle import unusable_reason
from kdesched.reactor.events.types import (  # noqa: F401 - re-exported: the names live in that leaf module
    APISERVER_ADD,
    APISERVER_DELETE,
    APISERVER_EVENTS,
    APISERVER_UPDATE,
    LABELS_CHANGED,
    NODE_ADDED,
    NODE_EVENTS,
    NODE_READY,
    PING,
    PREFIX,
    RUN_COMPLETED,
    RUN_REQUESTED,
    TAINTS_CHANGED,
)

DEFAULT_EVENT_STRATEGIES: Mapping[str, tuple[str, ...]] = {
    NODE_ADDED: ("LowNodeUtilization", "RemoveDuplicates"),
    NODE_READY: ("LowNodeUtilization", "RemoveDuplicates"),
    TAINTS_CHANGED: ("RemovePodsViolatingNodeTaints",),
    LABELS_CHANGED: ("RemovePodsViolatingNodeAffinity", "RemovePodsViolatingTopologySpreadConstraint"),
}

TOPOLOGY_STRATEGIES = frozenset({"RemovePodsViolatingTopologySpreadConstraint"})
"""Strategies of ``labels.changed`` that only run when a topology label changed."""

WELL_KNOWN_TOPOLOGY_KEYS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region", "kubernetes.io/hostname")

RUNNABLE_POINTS = ("deschedule", "balance")


class EventScopeError(ValueError):
    """An event cannot be scoped: unknown type, malformed node name, unknown strategy."""

    def __init__(self, message: str, field: str = "") -> None:
        self.field = field
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class RunScope:
    """What one event runs: these strategies, on these nodes (None = every node), and why."""

    strategies: tuple[str, ...]
    nodes: tuple[str, ...] | None
    reason: str


# --- the map ---------------------------------------------------------------------------------------


def extension_point(name: str) -> str:
    info = PLUGINS[name]
    return next(p for p in RUNNABLE_POINTS if p in info.extension_points)


def _configured(policy: Policy | None, name: str) -> bool:
    """Enabled in a profile, or a pluginConfig exists for it."""
    if policy is None:
        return False
    return any(name in p.deschedule or name in p.balance or name in p.plugin_args for p in policy.profiles)


def validate_event_map(raw: Any, policy: Policy | None, errors: list[str]) -> tuple[dict[str, tuple[str, ...]], frozenset[str]]:
    """The effective map (defaults merged with ``kdesched.events``) and the types the user set."""
    result: dict[str, tuple[str, ...]] = {}
    overridden: set[str] = set()
    if raw is not None and not isinstance(raw, Mapping):
        errors.append(f"kdesched.events: must be a mapping of event type to a list of strategies, got {raw!r}")
        raw = None
    for etype, names in (raw or {}).items():
        where = f"kdesched.events.{etype}"
        if etype not in NODE_EVENTS:
            errors.append(f"{where}: unknown event type (known: {', '.join(NODE_EVENTS)}; run.requested and "
                          f"the sweep run what their data or the policy says)")
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            errors.append(f"{where}: must be a list of strategy names, got {names!r}")
            continue
        ok = True
        for name in names:
            info = PLUGINS.get(name)
            if info is None or not info.extension_points & set(RUNNABLE_POINTS):
                known = ", ".join(n for n, i in PLUGINS.items() if i.extension_points & set(RUNNABLE_POINTS))
                errors.append(f"{where}: unknown strategy {name!r} (known: {known})")
                ok = False
            elif info.required_args and not _configured(policy, name):
                errors.append(f"{where}: strategy {name} needs args ({', '.join(info.required_args)}) and the policy "
                              f"neither enables it in a profile nor has a pluginConfig for it; add one")
                ok = False
        if ok:
            result[etype] = tuple(dict.fromkeys(names))
            overridden.add(etype)
    for etype, names in DEFAULT_EVENT_STRATEGIES.items():
        if etype in result:
            continue
        # the default map never makes a policy invalid: drop what cannot run on defaults
        result[etype] = tuple(n for n in names if not PLUGINS[n].required_args or policy is None
                              or _configured(policy, n))
    return result, frozenset(overridden)


# the profile that runs the strategies an event names and no profile configures (on default args)
EVENTS_PROFILE = "kdesched-events"


def event_policy(policy: Policy, strategies: Iterable[str], safety: Safety | None = None) -> Policy:
    """``policy`` as the event path runs it: every strategy of ``strategies`` enabled somewhere
    (:func:`enable_strategies`), and the safety defaults of the event path applied (``safety``:
    default = the policy's ``kdesched.safety`` resolved for the event path): no taint evictions for
    control-plane taints (:mod:`kdesched.policy.control_plane`). Raises EventScopeError if a
    strategy needs args the policy does not give.

    The control-plane taint rule is applied last, so it covers a RemovePodsViolatingNodeTaints this
    adds on default args as well as the policy's own (applied first, a policy without the strategy
    had its cordons drained by taint events)."""
    enabled = enable_strategies(policy, strategies)
    return exclude_control_plane_taints(enabled, safety or policy_safety(policy, SafetyPath.EVENT))[0]


def enable_strategies(policy: Policy, strategies: Iterable[str]) -> Policy:
    """``policy`` with every strategy of ``strategies`` enabled somewhere, so that an event can run a
    strategy the profiles do not enable: in the first profile holding a pluginConfig for it (the
    user configured it there), else on default args in the profile :data:`EVENTS_PROFILE` (added
    at the end, :func:`events_evictor`). Nothing else changes. Raises EventScopeError if a strategy
    needs args the policy does not give."""
    profiles = list(policy.profiles)
    changed = False
    for name in dict.fromkeys(strategies):
        if any(name in p.deschedule or name in p.balance for p in profiles):
            continue
        idx = next((i for i, p in enumerate(profiles) if name in p.plugin_args), None)
        if idx is None:
            args, errs = parse_plugin_args(name, None, f"kdesched.events / plugin {name}")
            if errs or args is None:
                raise EventScopeError(f"strategy {name} is not configured in the policy and cannot run on default "
                                      f"args: {'; '.join(errs)}", "strategies")
            idx = next((i for i, p in enumerate(profiles) if p.name == EVENTS_PROFILE), None)
            if idx is None:
                base = profiles[0].evictor_args if profiles else DefaultEvictorArgs()
                profiles.append(Profile(name=EVENTS_PROFILE, plugin_args={"DefaultEvictor": events_evictor(base)}))
                idx = len(profiles) - 1
            plugin_args = {**profiles[idx].plugin_args, name: args}
        else:
            plugin_args = dict(profiles[idx].plugin_args)
        p = profiles[idx]
        if extension_point(name) == "deschedule":
            profiles[idx] = replace(p, plugin_args=plugin_args, deschedule=(*p.deschedule, name))
        else:
            profiles[idx] = replace(p, plugin_args=plugin_args, balance=(*p.balance, name))
        changed = True
    return replace(policy, profiles=tuple(profiles)) if changed else policy


def events_evictor(base: DefaultEvictorArgs) -> DefaultEvictorArgs:
    """The DefaultEvictor of strategies the event path runs on default args: ``base`` (the first
    profile's) with every default protection kept. Its restrictions (selectors, the priority
    threshold, minReplicas, minPodAge, nodeFit, extra protections) hold; its opt-outs
    (``evictSystemCriticalPods``, ``evictLocalStoragePods``, ``evictDaemonSetPods``,
    ``evictFailedBarePods``, ``defaultDisabled``) were written for that profile's own strategies
    and do not carry over (docs/reactor.md, "The event → strategies map")."""
    return replace(base, protections=base.protections | DEFAULT_PROTECTIONS, default_disabled=(), legacy={})


def enabled_strategies(policy: Policy) -> tuple[str, ...]:
    """Every strategy enabled in any profile, deschedule ones first (the engine's order)."""
    names: dict[str, None] = {}
    for point in ("deschedule", "balance"):
        for p in policy.profiles:
            for n in getattr(p, point):
                names[n] = None
    return tuple(names)


# --- topology ------------------------------------------------------------------------------------


def topology_keys(settings_keys: Iterable[str], snapshot: Snapshot | None) -> frozenset[str]:
    """Topology label keys: those pods' spread constraints use (if a snapshot is known and has any),
    else the well-known set; plus the configured extra keys."""
    keys: set[str] = set()
    if snapshot is not None:
        for pod in snapshot.pods:
            for c in pod.topology_spread_constraints:
                if c.topology_key:
                    keys.add(c.topology_key)
    if not keys:
        keys.update(WELL_KNOWN_TOPOLOGY_KEYS)
    keys.update(settings_keys)
    return frozenset(keys)


# --- scoping -------------------------------------------------------------------------------------


def validate_node_name(node: Any) -> str:
    if not isinstance(node, str) or not node:
        raise EventScopeError(f"node: must be a non-empty node name, got {node!r}", "node")
    if not is_dns_subdomain(node):  # as the API server validates Node names
        raise EventScopeError(f"node: {node!r} is not a valid node name (lowercase DNS subdomain)", "node")
    return node


def scope_for_event(settings: Any, policy: Policy, event_type: str, node: str, snapshot: Snapshot | None = None,
                    changed_labels: Collection[str] = ()) -> RunScope:
    """What ``event_type`` on ``node`` runs (``settings`` is a ReactorSettings).

    ``changed_labels`` are the label keys the event changed (``labels.changed``); when empty for
    that type (e.g. ``simulate --event``, which knows no change), topology strategies run too: the
    conservative choice. Raises :class:`EventScopeError` (a ValueError) for an unknown type or a
    malformed node name.
    """
    if event_type not in NODE_EVENTS:
        raise EventScopeError(f"unknown event type {event_type!r} (node events: {', '.join(NODE_EVENTS)})", "type")
    validate_node_name(node)
    mapping: Mapping[str, tuple[str, ...]] = getattr(settings, "events", None) or DEFAULT_EVENT_STRATEGIES
    names = tuple(mapping.get(event_type, ()))
    reasons: list[str] = []
    if event_type == LABELS_CHANGED:
        topo = [n for n in names if n in TOPOLOGY_STRATEGIES]
        if topo:
            keys = topology_keys(getattr(settings, "topology_keys", ()), snapshot)
            if changed_labels:
                hit = sorted(set(changed_labels) & keys)
                if hit:
                    reasons.append(f"topology label(s) changed: {', '.join(hit)}")
                else:
                    names = tuple(n for n in names if n not in TOPOLOGY_STRATEGIES)
                    reasons.append("no topology label changed")
            else:
                reasons.append("changed labels unknown: topology strategies run too")
    if event_type in (NODE_ADDED, NODE_READY):
        # the rebalance trigger is the transition to usable (reactor.lifecycle): a node the snapshot
        # shows as not usable for ordinary pods yet runs nothing, as in the rebalance function
        target = snapshot.nodes.get(node) if snapshot is not None else None
        if target is not None:
            why = unusable_reason(target.ready, target.unschedulable,
                                  [(t.key, t.value, t.effect) for t in target.taints])
            if why:
                short = event_type.removeprefix(PREFIX)
                return RunScope((), None, f"{short}: node {node} is not usable for ordinary pods yet ({why}): no "
                                          f"run; waiting for node.ready (sent once it becomes usable)")
        # balance strategies see every node: a new or recovered node is a destination, not a source
        nodes: tuple[str, ...] | None = None
        reasons.insert(0, f"node {node} joined the schedulable set: balance the cluster")
    else:
        nodes = (node,)
        reasons.insert(0, f"{event_type.removeprefix(PREFIX)} on {node}: only that node's pods")
    if not names:
        reasons.append("the event map runs nothing for this event")
    return RunScope(names, nodes, "; ".join(reasons))


def needs_all_pods(policy: Policy, strategies: Collection[str]) -> tuple[bool, str]:
    """Whether a node-scoped run must read every pod of the cluster (and why).

    Pods of the event's node are enough for Deschedule strategies, except when the evictor looks
    beyond that node: DefaultEvictor ``nodeFit`` (another node must fit the pod, which needs those
    nodes' usage) or ``minReplicas`` > 1 (counts an owner's pods everywhere). Balance strategies
    (TopologySpread) count pods across domains and always need all of them.
    """
    for name in strategies:
        if name in PLUGINS and extension_point(name) == "balance":
            return True, f"{name} is a balance strategy (counts pods across the cluster)"
    for p in policy.profiles:
        if not any(n in strategies for n in (*p.deschedule, *p.balance)):
            continue
        ev = p.evictor_args
        if ev.node_fit:
            return True, f'profile "{p.name}": DefaultEvictor nodeFit needs every node\'s usage'
        if ev.min_replicas > 1:
            return True, f'profile "{p.name}": DefaultEvictor minReplicas counts an owner\'s pods everywhere'
    return False, "only the node's pods are needed"


def kinds_needed(policy: Policy) -> tuple[str, ...]:
    """The kinds a run must LIST for this policy (Nodes, Pods and PDBs always; the others only when
    an evictor setting reads them), so that a node-scoped event costs as few requests as possible."""
    kinds = ["Node", "Pod", "PodDisruptionBudget"]
    ev = [p.evictor_args for p in policy.profiles]
    if any(a.priority_threshold is not None and a.priority_threshold.name for a in ev):
        kinds.append("PriorityClass")
    if any(a.namespace_label_selector is not None for a in ev):
        kinds.append("Namespace")
    if any(a.protected_storage_classes for a in ev):  # only then are PVC objects looked up
        kinds.append("PersistentVolumeClaim")
    return tuple(kinds)

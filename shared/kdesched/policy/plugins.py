"""The table of upstream plugins the policy may name: extension points, args parser, example args.

Why: the loader must reject a plugin enabled at an extension point it does not implement, know
which plugins can run on default args, and parse each ``pluginConfig``; the CLI lists the same
table (with example args) for ``kdesched policy plugins``. One explicit table, no registration
side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdesched.policy import args as a
from kdesched.policy.types import REQUIRED_AFFINITY

Parser = Callable[[Any, str], tuple[Any, list[str]]]


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """One upstream plugin as the policy sees it."""

    name: str
    extension_points: frozenset[str]
    parse: Parser
    example: Mapping[str, Any] = field(default_factory=dict)
    # Args a pluginConfig must give (empty = the plugin runs on defaults without a pluginConfig).
    required_args: tuple[str, ...] = ()
    # True when giving any one of ``required_args`` is enough (PodLifeTime's criteria).
    required_any: bool = False

    def requirement(self) -> str:
        """``required_args`` as a phrase for messages."""
        names = ", ".join(self.required_args)
        if self.required_any:
            return f"at least one of its args {names} is required"
        return f"its arg {names} is required" if len(self.required_args) == 1 else f"its args {names} are required"


def _info(name: str, points: tuple[str, ...], parse: Parser, example: Mapping[str, Any],
          required: tuple[str, ...] = (), required_any: bool = False) -> PluginInfo:
    return PluginInfo(name, frozenset(points), parse, example, required, required_any)


PLUGINS: Mapping[str, PluginInfo] = {
    p.name: p
    for p in (
        _info("DefaultEvictor", ("filter", "preEvictionFilter"), a.parse_default_evictor,
              {"nodeFit": True, "minPodAge": "5m", "podProtections": {"extraEnabled": ["PodsWithPVC"]}}),
        _info("RemoveDuplicates", ("balance",), a.parse_remove_duplicates,
              {"excludeOwnerKinds": ["Job"], "namespaces": {"exclude": ["kube-system"]}}),
        _info("LowNodeUtilization", ("balance",), a.parse_low_node_utilization,
              {"thresholds": {"cpu": 20, "memory": 20, "pods": 20},
               "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50},
               "evictableNamespaces": {"exclude": ["kube-system"]}},
              ("thresholds", "targetThresholds")),
        _info("HighNodeUtilization", ("balance",), a.parse_high_node_utilization,
              {"thresholds": {"cpu": 20, "memory": 20, "pods": 20}}, ("thresholds",)),
        _info("RemovePodsViolatingInterPodAntiAffinity", ("deschedule",), a.parse_inter_pod_anti_affinity,
              {"namespaces": {"exclude": ["kube-system"]}}),
        _info("RemovePodsViolatingNodeAffinity", ("deschedule",), a.parse_node_affinity,
              {"nodeAffinityType": [REQUIRED_AFFINITY]}, ("nodeAffinityType",)),
        _info("RemovePodsViolatingNodeTaints", ("deschedule",), a.parse_node_taints,
              {"excludedTaints": ["maintenance"], "includePreferNoSchedule": False}),
        _info("RemovePodsViolatingTopologySpreadConstraint", ("balance",), a.parse_topology_spread,
              {"constraints": ["DoNotSchedule"], "topologyBalanceNodeFit": True}),
        _info("RemovePodsHavingTooManyRestarts", ("deschedule",), a.parse_too_many_restarts,
              {"podRestartThreshold": 100, "includingInitContainers": True}, ("podRestartThreshold",)),
        _info("PodLifeTime", ("deschedule",), a.parse_pod_life_time,
              {"maxPodLifeTimeSeconds": 86400, "states": ["Pending", "CrashLoopBackOff"]},
              ("maxPodLifeTimeSeconds", "states", "conditions", "exitCodes"), required_any=True),
        _info("RemoveFailedPods", ("deschedule",), a.parse_remove_failed_pods,
              {"minPodLifetimeSeconds": 3600, "reasons": ["NodeAffinity"], "excludeOwnerKinds": ["Job"]}),
    )
}


def plugin_where(profile: str, plugin: str) -> str:
    """The message prefix for a plugin's args: ``profile "cleanup" / plugin LowNodeUtilization``."""
    return f'profile "{profile}" / plugin {plugin}'


def parse_plugin_args(name: str, raw: Any, where: str) -> tuple[Any | None, list[str]]:
    """Parse ``raw`` args of plugin ``name``; ``(args, [])`` or ``(None, errors)``.

    ``raw`` may be ``None`` (no args: every default applies, and the plugin's required args are
    reported missing). ``where`` prefixes every message.
    """
    info = PLUGINS.get(name)
    if info is None:
        return None, [f"{where}: unknown plugin {name!r} (known: {', '.join(PLUGINS)})"]
    try:
        return info.parse(raw, where)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # pragma: no cover - a parser bug, not bad input
        return None, [f"{where}: cannot read args: {exc}"]

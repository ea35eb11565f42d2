"""Legacy ``descheduler/v1alpha1`` policies, converted to v1alpha2 exactly as upstream v0.27-v0.30 did.

Why: the blog posts, Helm values and ConfigMaps that people still copy (and the seed articles
kdesched's default policy comes from, see ``examples/seed-*``) are v1alpha1, which upstream
stopped reading in v0.31.
kdesched keeps reading them, with upstream's conversion rules:

* each *enabled* strategy becomes its own profile ``strategy-<Name>-profile`` holding a
  DefaultEvictor (the top-level ``evict*``/``ignorePvcPods`` flags, the strategy's ``nodeFit`` —
  forced false for PodLifeTime — and ``thresholdPriority``/``thresholdPriorityClassName`` as
  ``priorityThreshold``) plus the plugin's own args, enabled at the plugin's extension point;
* ``namespaces`` -> ``namespaces`` (LowNodeUtilization/HighNodeUtilization: ``evictableNamespaces``);
  ``includeSoftConstraints`` -> ``constraints: [DoNotSchedule, ScheduleAnyway]`` and
  ``topologyBalanceNodeFit: true``; ``podStatusPhases`` are appended to ``states``;
  RemovePodsViolatingNodeTaints keeps ``excludedTaints`` but drops ``includedTaints``; params a
  plugin does not take are dropped, as upstream's converter did; PodLifeTime also accepts the
  early ``params.maxPodLifeTimeSeconds`` (before ``params.podLifeTime`` existed), which old
  posts and ConfigMaps still use;
* disabled strategies are dropped (their params are not checked); an unknown strategy is an
  error even when disabled; ``nodeSelector`` and both ``max*`` limits are copied.

Profiles keep the order of the ``strategies`` map in the file (upstream used Go map order, i.e.
random). The result is a v1alpha2 *document*, validated afterwards by the v1alpha2 loader, so
both formats share one set of rules; :func:`convert` also returns message prefixes that name the
strategy the user actually wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdesched.policy.args import Fields, show
from kdesched.policy.plugins import PLUGINS

API_VERSION = "descheduler/v1alpha1"

# Strategy name -> the extension point its plugin runs at (upstream v0.36).
STRATEGIES: Mapping[str, str] = {
    name: next(iter(PLUGINS[name].extension_points))
    for name in (
        "RemoveDuplicates", "LowNodeUtilization", "HighNodeUtilization",
        "RemovePodsViolatingInterPodAntiAffinity", "RemovePodsViolatingNodeAffinity",
        "RemovePodsViolatingNodeTaints", "RemovePodsViolatingTopologySpreadConstraint",
        "RemovePodsHavingTooManyRestarts", "PodLifeTime", "RemoveFailedPods",
    )
}

# Top-level DefaultEvictor flags of v1alpha1, copied into every profile's DefaultEvictor.
EVICTOR_FLAGS = ("evictFailedBarePods", "evictLocalStoragePods", "evictSystemCriticalPods",
                 "evictDaemonSetPods", "ignorePvcPods")

PARAM_FIELDS = (
    "namespaces", "labelSelector", "thresholdPriority", "thresholdPriorityClassName", "nodeFit",
    "includeSoftConstraints", "includePreferNoSchedule", "excludedTaints", "includedTaints",
    "nodeAffinityType", "nodeResourceUtilizationThresholds", "podsHavingTooManyRestarts", "podLifeTime",
    "removeDuplicates", "failedPods",
    "maxPodLifeTimeSeconds",  # the early (pre-v0.20) place of PodLifeTime's limit, still in blog posts
)


def profile_name(strategy: str) -> str:
    return f"strategy-{strategy}-profile"


def strategy_where(strategy: str) -> str:
    """Message prefix for a converted profile: names the strategy as written and the profile it became."""
    return f'strategies.{strategy} (profile "{profile_name(strategy)}")'


def convert(doc: Mapping[str, Any], errors: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The v1alpha2 document for a v1alpha1 one, and ``profile name -> message prefix``.

    Structural problems of the v1alpha1 document itself are appended to ``errors``; the plugin
    args are validated later, by the v1alpha2 loader.
    """
    top = Fields(doc, "", errors, what="v1alpha1 DeschedulerPolicy")
    top.get("apiVersion")
    top.get("kind")
    out: dict[str, Any] = {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy"}
    for key in ("nodeSelector", "maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace", "kdesched"):
        if top.get(key) is not None:
            out[key] = top.raw[key]

    evictor_flags: dict[str, bool] = {}
    for flag in EVICTOR_FLAGS:
        if top.has(flag):
            value = top.boolean(flag)
            if isinstance(top.raw[flag], bool):
                evictor_flags[flag] = value

    labels: dict[str, str] = {}
    profiles: list[dict[str, Any]] = []
    strategies = top.get("strategies")
    if strategies is None:
        top.error("strategies", "is required: a map of strategy name to {enabled, params}")
    elif not isinstance(strategies, Mapping):
        top.error("strategies", f"must be a map of strategy name to {{enabled, params}}, got {show(strategies)}")
    else:
        for name, entry in strategies.items():
            profile = _strategy(str(name), entry, evictor_flags, errors)
            if profile is not None:
                profiles.append(profile)
                labels[profile["name"]] = strategy_where(str(name))
    top.finish()
    out["profiles"] = profiles
    return out, labels


def _strategy(name: str, entry: Any, evictor_flags: Mapping[str, bool], errors: list[str]) -> dict[str, Any] | None:
    s = Fields(entry, "", errors, prefix=f"strategies.{name}.", what="strategy")
    if name not in STRATEGIES:
        errors.append(f"strategies.{name}: unknown strategy (known: {', '.join(STRATEGIES)})")
        return None
    if not s.ok:
        return None
    enabled = s.boolean("enabled")
    s.get("weight")  # accepted and unused, as upstream
    raw_params = s.get("params")
    s.finish()
    if not enabled:
        return None
    p = Fields(raw_params, "", errors, prefix=f"strategies.{name}.params.", what="strategy params")
    if not p.ok:
        return None
    for key in PARAM_FIELDS:
        p.get(key)
    p.finish()

    evictor: dict[str, Any] = dict(evictor_flags)
    node_fit = p.raw.get("nodeFit")
    if node_fit is not None and name != "PodLifeTime":
        evictor["nodeFit"] = node_fit
    value, class_name = p.raw.get("thresholdPriority"), p.raw.get("thresholdPriorityClassName")
    if value is not None and class_name:
        p.error("thresholdPriority", "only one of thresholdPriority and thresholdPriorityClassName may be set")
    elif value is not None:
        evictor["priorityThreshold"] = {"value": value}
    elif class_name:
        evictor["priorityThreshold"] = {"name": class_name}

    args = _plugin_args(name, p)
    if args is None:
        return None
    return {
        "name": profile_name(name),
        "pluginConfig": [{"name": "DefaultEvictor", "args": evictor}, {"name": name, "args": args}],
        "plugins": {STRATEGIES[name]: {"enabled": [name]}},
    }


def _nested(p: Fields, key: str, fields: tuple[str, ...]) -> dict[str, Any] | None:
    """The nested params object ``key`` restricted to ``fields`` (unknown ones reported)."""
    sub = p.child(key, what=key)
    if sub is None:
        return {} if p.raw.get(key) is None else None
    out = {f: sub.raw[f] for f in fields if sub.get(f) is not None}
    sub.finish()
    return out


def _plugin_args(name: str, p: Fields) -> dict[str, Any] | None:
    raw = p.raw
    args: dict[str, Any] = {}

    def copy(*keys: str) -> None:
        for key in keys:
            if raw.get(key) is not None:
                args[key] = raw[key]

    if name in ("LowNodeUtilization", "HighNodeUtilization"):
        nrut = _nested(p, "nodeResourceUtilizationThresholds",
                       ("useDeviationThresholds", "thresholds", "targetThresholds", "numberOfNodes"))
        if nrut is None:
            return None
        if name == "HighNodeUtilization":
            nrut = {k: v for k, v in nrut.items() if k in ("thresholds", "numberOfNodes")}
        args.update(nrut)
        if raw.get("namespaces") is not None:
            args["evictableNamespaces"] = raw["namespaces"]
        return args

    copy("namespaces")
    if name == "RemoveDuplicates":
        rd = _nested(p, "removeDuplicates", ("excludeOwnerKinds",))
        if rd is None:
            return None
        args.update(rd)
        return args
    copy("labelSelector")
    if name == "RemovePodsViolatingNodeAffinity":
        copy("nodeAffinityType")
    elif name == "RemovePodsViolatingNodeTaints":
        copy("includePreferNoSchedule", "excludedTaints")
    elif name == "RemovePodsViolatingTopologySpreadConstraint":
        soft = raw.get("includeSoftConstraints")
        if soft is not None and not isinstance(soft, bool):
            p.error("includeSoftConstraints", f"must be true or false, got {show(soft)}")
            return None
        args["constraints"] = ["DoNotSchedule", "ScheduleAnyway"] if soft else ["DoNotSchedule"]
        args["topologyBalanceNodeFit"] = True
    elif name == "RemovePodsHavingTooManyRestarts":
        restarts = _nested(p, "podsHavingTooManyRestarts", ("podRestartThreshold", "includingInitContainers"))
        if restarts is None:
            return None
        args.update(restarts)
    elif name == "PodLifeTime":
        plt = _nested(p, "podLifeTime", ("maxPodLifeTimeSeconds", "states", "podStatusPhases"))
        if plt is None:
            return None
        early = raw.get("maxPodLifeTimeSeconds")
        if early is not None:
            if "maxPodLifeTimeSeconds" in plt:
                p.error("maxPodLifeTimeSeconds", "is also set in podLifeTime; keep only podLifeTime.maxPodLifeTimeSeconds")
                return None
            plt["maxPodLifeTimeSeconds"] = early
        phases = plt.pop("podStatusPhases", None)
        if phases is not None:
            states = plt.get("states", [])
            if not isinstance(phases, list) or not isinstance(states, list):
                p.error("podLifeTime", "states and podStatusPhases must be lists of strings")
                return None
            plt["states"] = [*states, *[ph for ph in phases if ph not in states]]
        args.update(plt)
    elif name == "RemoveFailedPods":
        failed = _nested(p, "failedPods",
                         ("excludeOwnerKinds", "minPodLifetimeSeconds", "reasons", "includingInitContainers"))
        if failed is None:
            return None
        args.update(failed)
    return args

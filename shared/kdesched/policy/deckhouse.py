"""Deckhouse's descheduler module settings (on/off switches per strategy) as a kdesched policy.

Why: Deckhouse clusters configure the descheduler with a handful of booleans in the module's
values (``modules/400-descheduler/openapi/config-values.yaml`` of deckhouse/deckhouse), not a
DeschedulerPolicy; an operator moving to kdesched should be able to point it at those values.
The module rendered them into a ``descheduler/v1alpha1`` policy
(``templates/config-map.yaml``), and so does this module, followed by the normal v1alpha1
conversion.

Accepted shapes: the values themselves (``{removeDuplicates: true, ...}``), nested as
``descheduler: {...}``, ``settings: {...}`` or ``spec: {settings: {...}}``, and a
``deckhouse.io/v1alpha1`` ``ModuleConfig`` named ``descheduler``. A document without
``apiVersion`` is taken for Deckhouse values only if it holds at least one of the switches.

Switch -> strategy (defaults from config-values.yaml: the two affinity switches are on, the
rest off). The LowNodeUtilization thresholds are the module's fixed ones (cpu 40/80,
memory 50/90, pods 40/80) and NodeAffinity uses ``requiredDuringSchedulingIgnoredDuringExecution``,
both from the module's template. The parameters of the four later switches are not in the
template version found; they follow the module's documentation of each switch (assumption):
RemovePodsHavingTooManyRestarts "more than 100 restarts, init containers included" ->
``podRestartThreshold: 100, includingInitContainers: true``; PodLifeTime "Pending pods older
than 24 hours" -> ``maxPodLifeTimeSeconds: 86400, podStatusPhases: [Pending]``; NodeTaints and
TopologySpreadConstraint use their defaults. ``nodeSelector``/``tolerations`` place the
descheduler's own Deployment and are ignored; ``internal`` is the module's runtime state and is
ignored too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdesched.policy.args import Fields, show
from kdesched.policy.types import REQUIRED_AFFINITY

API_VERSION = "deckhouse.io/v1alpha1"
VALUES_FORMAT = "Deckhouse descheduler module values"
"""How a bare values file (no apiVersion) is named in messages: it claims no apiVersion."""
MODULE_NAME = "descheduler"

# switch -> (strategy, v1alpha1 params, default)
SWITCHES: Mapping[str, tuple[str, Mapping[str, Any], bool]] = {
    "removePodsViolatingNodeAffinity": (
        "RemovePodsViolatingNodeAffinity", {"nodeAffinityType": [REQUIRED_AFFINITY]}, True),
    "removePodsViolatingInterPodAntiAffinity": ("RemovePodsViolatingInterPodAntiAffinity", {}, True),
    "removeDuplicates": ("RemoveDuplicates", {}, False),
    "lowNodeUtilization": ("LowNodeUtilization", {"nodeResourceUtilizationThresholds": {
        "thresholds": {"cpu": 40, "memory": 50, "pods": 40},
        "targetThresholds": {"cpu": 80, "memory": 90, "pods": 80},
    }}, False),
    "removePodsViolatingNodeTaints": ("RemovePodsViolatingNodeTaints", {}, False),
    "removePodsViolatingTopologySpreadConstraint": ("RemovePodsViolatingTopologySpreadConstraint", {}, False),
    "removePodsHavingTooManyRestarts": ("RemovePodsHavingTooManyRestarts", {"podsHavingTooManyRestarts": {
        "podRestartThreshold": 100, "includingInitContainers": True}}, False),
    "podLifeTime": ("PodLifeTime", {"podLifeTime": {
        "maxPodLifeTimeSeconds": 86400, "podStatusPhases": ["Pending"]}}, False),
}
IGNORED_FIELDS = ("nodeSelector", "tolerations", "internal")


def _has_switch(value: Any) -> bool:
    return isinstance(value, Mapping) and any(key in SWITCHES for key in value)


def find_values(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """``(values, path prefix)`` if ``doc`` (without apiVersion) holds Deckhouse descheduler values."""
    if _has_switch(doc):
        return doc, ""
    for key in ("descheduler", "settings"):
        if _has_switch(doc.get(key)):
            return doc[key], f"{key}."
    spec = doc.get("spec")
    if isinstance(spec, Mapping) and _has_switch(spec.get("settings")):
        return spec["settings"], "spec.settings."
    return None


def module_config_values(doc: Mapping[str, Any], errors: list[str]) -> tuple[Mapping[str, Any], str] | None:
    """The settings of a ``ModuleConfig`` for the descheduler module."""
    metadata = doc.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if name != MODULE_NAME:
        errors.append(f"metadata.name: a ModuleConfig for the {MODULE_NAME} module must be named {MODULE_NAME}, "
                      f"got {show(name)}")
        return None
    spec = doc.get("spec")
    if spec is None:
        return {}, "spec.settings."
    if not isinstance(spec, Mapping):
        errors.append(f"spec: must be a map, got {show(spec)}")
        return None
    if spec.get("enabled") is False:
        errors.append("spec.enabled: the descheduler module is disabled in this ModuleConfig; there is nothing to run")
        return None
    settings = spec.get("settings")
    if settings is None:
        return {}, "spec.settings."
    if not isinstance(settings, Mapping):
        errors.append(f"spec.settings: must be a map, got {show(settings)}")
        return None
    return settings, "spec.settings."


def to_v1alpha1(found: tuple[Mapping[str, Any], str], errors: list[str]) -> dict[str, Any] | None:
    """The ``descheduler/v1alpha1`` policy the module would render for these values."""
    values, prefix = found
    start = len(errors)
    f = Fields(values, "", errors, prefix=prefix, what="Deckhouse descheduler module")
    strategies: dict[str, Any] = {}
    for switch, (strategy, params, default) in SWITCHES.items():
        on = f.boolean(switch, default=default)
        entry: dict[str, Any] = {"enabled": on}
        if on and params:
            entry["params"] = {k: _copy(v) for k, v in params.items()}
        strategies[strategy] = entry
    for key in IGNORED_FIELDS:
        f.get(key)
    f.finish()
    if len(errors) > start:
        return None
    return {"apiVersion": "descheduler/v1alpha1", "kind": "DeschedulerPolicy", "strategies": strategies}


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value

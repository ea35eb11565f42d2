"""Policies for reactor tests, built through the real plugin-args parsers (no YAML loader needed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdesched.policy.plugins import parse_plugin_args
from kdesched.policy.types import Policy, Profile

LNU = {"thresholds": {"cpu": 20, "memory": 20, "pods": 20}, "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50}}


def make_policy(plugins: Mapping[str, Any], *, evictor: Mapping[str, Any] | None = None,
                configs: Mapping[str, Any] | None = None, kdesched: Mapping[str, Any] | None = None,
                **top: Any) -> Policy:
    """One profile enabling ``plugins`` (name -> raw args or None), with optional pluginConfig-only
    entries ``configs`` (configured but not enabled) and a ``kdesched`` block."""
    args: dict[str, Any] = {}
    deschedule, balance = [], []
    ev, errs = parse_plugin_args("DefaultEvictor", dict(evictor or {}), "DefaultEvictor")
    assert not errs, errs
    args["DefaultEvictor"] = ev
    for name, raw in {**plugins, **(configs or {})}.items():
        parsed, errs = parse_plugin_args(name, raw, name)
        assert not errs, errs
        args[name] = parsed
    from kdesched.reactor.events.routing import extension_point

    for name in plugins:
        (deschedule if extension_point(name) == "deschedule" else balance).append(name)
    profile = Profile(name="default", plugin_args=args, deschedule=tuple(deschedule), balance=tuple(balance))
    return Policy(profiles=(profile,), kdesched=dict(kdesched or {}), **top)


DEFAULT_PLUGINS: dict[str, Any] = {
    "RemoveDuplicates": None,
    "LowNodeUtilization": LNU,
    "RemovePodsViolatingInterPodAntiAffinity": None,
    "RemovePodsViolatingNodeAffinity": {"nodeAffinityType": ["requiredDuringSchedulingIgnoredDuringExecution"]},
    "RemovePodsViolatingNodeTaints": None,
}


def default_like_policy(**kw: Any) -> Policy:
    return make_policy(DEFAULT_PLUGINS, **kw)

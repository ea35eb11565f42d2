"""The one explicit list of built-in strategies (no import-time magic).

Why: the engine, the CLI's ``--help``, the policy validator's cross-check and the reactor's event
map all need "which strategies exist and at which extension point"; they read it here. Tests
build a fresh :class:`Registry` when they need a custom one.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from kdesched.strategies.framework import StrategySpec

# (module under kdesched.strategies, exporting SPEC)
BUILTIN_MODULES = (
    "remove_duplicates",
    "low_node_utilization",
    "high_node_utilization",
    "node_taints",
    "node_affinity",
    "inter_pod_anti_affinity",
    "topology_spread",
    "too_many_restarts",
    "pod_lifetime",
    "failed_pods",
)


class Registry(Mapping[str, StrategySpec]):
    def __init__(self) -> None:
        self._specs: dict[str, StrategySpec] = {}

    def register(self, spec: StrategySpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"strategy {spec.name} registered twice")
        if spec.extension_point not in ("deschedule", "balance"):
            raise ValueError(f"strategy {spec.name}: unknown extension point {spec.extension_point!r}")
        self._specs[spec.name] = spec

    def __getitem__(self, name: str) -> StrategySpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def register_builtin(registry: Registry) -> Registry:
    for module in BUILTIN_MODULES:
        registry.register(importlib.import_module(f"kdesched.strategies.{module}").SPEC)
    return registry


_DEFAULT: Registry | None = None


def default_registry() -> Registry:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = register_builtin(Registry())
    return _DEFAULT

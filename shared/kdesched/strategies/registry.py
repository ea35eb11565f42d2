"""The one explicit list of built-in strategies (no import-time magic).

Why: the engine, the CLI's ``--help``, the policy validator's cross-check and the reactor's event
map all need "which strategies exist and at which extension point"; they read it here. Tests
build a fresh :class:`Registry` when they need a custom one.

A strategy's module is imported the first time the strategy is looked up, not when the registry is
built: a ``taints`` function's run needs RemovePodsViolatingNodeTaints only, and importing all ten
cost about 25 ms of its first event after a cold start (docs/benchmarks.md, "Function cold
start"). Listing the names imports nothing; reading every entry (values, items) imports them all.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping

from kdesched.strategies.framework import StrategySpec

BUILTIN_MODULES: Mapping[str, str] = {
    # plugin name -> its module under kdesched.strategies, which exports SPEC (checked on import)
    "RemoveDuplicates": "remove_duplicates",
    "LowNodeUtilization": "low_node_utilization",
    "HighNodeUtilization": "high_node_utilization",
    "RemovePodsViolatingNodeTaints": "node_taints",
    "RemovePodsViolatingNodeAffinity": "node_affinity",
    "RemovePodsViolatingInterPodAntiAffinity": "inter_pod_anti_affinity",
    "RemovePodsViolatingTopologySpreadConstraint": "topology_spread",
    "RemovePodsHavingTooManyRestarts": "too_many_restarts",
    "PodLifeTime": "pod_lifetime",
    "RemoveFailedPods": "failed_pods",
}


class Registry(Mapping[str, StrategySpec]):
    def __init__(self) -> None:
        self._names: list[str] = []  # registration order (iteration order)
        self._specs: dict[str, StrategySpec] = {}
        self._modules: dict[str, str] = {}  # registered by module, not imported yet
        self._lock = threading.Lock()  # runs look strategies up from several threads

    def register(self, spec: StrategySpec) -> None:
        self._check(spec)
        with self._lock:
            self._add(spec.name)
            self._specs[spec.name] = spec

    def register_module(self, name: str, module: str) -> None:
        """Register strategy ``name`` from ``module`` (which exports ``SPEC``), imported on first lookup."""
        with self._lock:
            self._add(name)
            self._modules[name] = module

    def _add(self, name: str) -> None:
        if name in self._specs or name in self._modules:
            raise ValueError(f"strategy {name} registered twice")
        self._names.append(name)

    @staticmethod
    def _check(spec: StrategySpec) -> None:
        if spec.extension_point not in ("deschedule", "balance"):
            raise ValueError(f"strategy {spec.name}: unknown extension point {spec.extension_point!r}")

    def __getitem__(self, name: str) -> StrategySpec:
        spec = self._specs.get(name)
        if spec is not None:
            return spec
        with self._lock:
            if name not in self._specs:
                module = self._modules[name]  # KeyError: no such strategy
                spec = importlib.import_module(module).SPEC
                if spec.name != name:
                    raise ValueError(f"{module}: exports strategy {spec.name}, registered as {name}")
                self._check(spec)
                self._specs[name] = spec
                del self._modules[name]
            return self._specs[name]

    def __contains__(self, name: object) -> bool:
        return name in self._specs or name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)


def register_builtin(registry: Registry) -> Registry:
    for name, module in BUILTIN_MODULES.items():
        registry.register_module(name, f"kdesched.strategies.{module}")
    return registry


_DEFAULT: Registry | None = None


def default_registry() -> Registry:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = register_builtin(Registry())
    return _DEFAULT

"""The strategy registry: every built-in strategy under its own name, each module imported on first lookup."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kdesched.policy.plugins import PLUGINS
from kdesched.strategies.framework import StrategySpec
from kdesched.strategies.registry import BUILTIN_MODULES, Registry, default_registry, register_builtin

REPO = Path(__file__).resolve().parents[2]


def test_every_builtin_strategy_is_registered_under_the_name_its_module_exports() -> None:
    registry = register_builtin(Registry())
    assert list(registry) == list(BUILTIN_MODULES)
    for name in registry:
        spec = registry[name]
        assert spec.name == name and spec.extension_point in ("deschedule", "balance")
    # every plugin the policy accepts is one the engine can run
    assert set(PLUGINS) >= set(registry)


def test_a_lookup_imports_only_that_strategy() -> None:
    code = ("import sys, json; from kdesched.strategies.registry import default_registry; r = default_registry(); "
            "before = {m for m in sys.modules if m.startswith('kdesched.strategies.')}; "
            "r.get('RemovePodsViolatingNodeTaints'); missing = r.get('NoSuchStrategy'); "
            "after = {m for m in sys.modules if m.startswith('kdesched.strategies.')}; "
            "print(json.dumps({'new': sorted(after - before), 'missing': missing, 'len': len(r), "
            "'in': 'PodLifeTime' in r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    out = json.loads(proc.stdout)
    assert out == {"new": ["kdesched.strategies.node_taints"], "missing": None, "len": 10, "in": True}


def test_concurrent_first_lookups_all_get_the_strategy() -> None:
    registry = register_builtin(Registry())
    barrier = threading.Barrier(8)
    got: list[StrategySpec | None] = []

    def look() -> None:
        barrier.wait()
        got.append(registry.get("RemovePodsViolatingNodeAffinity"))

    threads = [threading.Thread(target=look) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(s is not None and s.name == "RemovePodsViolatingNodeAffinity" for s in got)
    assert len({id(s) for s in got}) == 1


def test_a_module_that_exports_another_strategy_is_refused() -> None:
    registry = Registry()
    registry.register_module("PodLifeTime", "kdesched.strategies.failed_pods")
    with pytest.raises(ValueError, match="exports strategy RemoveFailedPods, registered as PodLifeTime"):
        registry["PodLifeTime"]


def test_a_name_registered_twice_is_refused() -> None:
    registry = register_builtin(Registry())
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_module("PodLifeTime", "kdesched.strategies.pod_lifetime")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(default_registry()["RemoveFailedPods"])

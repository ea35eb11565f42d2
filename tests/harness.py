"""Run one strategy on built objects through the real DefaultEvictor and planner.

Why: every strategy's table-driven tests share one runner (upstream's ``runPodLifeTimeTest``
pattern), so a test row is just objects + args -> expected evicted pod names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor, Refusal
from kdesched.model.usage import Usage
from kdesched.policy.types import DefaultEvictorArgs
from kdesched.strategies.framework import ClusterState, Handle, PlannedEviction, StrategySpec
from kdesched.strategies.registry import Registry

from tests.builders import NOW, snapshot


@dataclass
class Result:
    evictions: list[PlannedEviction]
    refusals: list[Refusal]
    state: ClusterState

    @property
    def names(self) -> list[str]:
        return [e.pod.name for e in self.evictions]


def run_strategy(spec: StrategySpec, args: Any, objects: list[dict[str, Any]], *,
                 nodes: Sequence[str] | None = None, evictor_args: DefaultEvictorArgs | None = None,
                 limits: Limits | None = None, now: datetime = NOW, profile: str = "test",
                 usage: Usage | None = None) -> Result:
    """``usage``: measured usage (LowNodeUtilization's metrics modes), attached to the snapshot."""
    snap = snapshot(objects)
    if usage is not None:
        snap = replace(snap, actual_usage=usage)
    state = ClusterState(snap, now)
    counter = LimitCounter(limits or Limits())
    evictor = PlanningEvictor(state, DefaultEvictor(evictor_args or DefaultEvictorArgs(), state), counter)
    handle = Handle(state, evictor, profile, spec.name)
    run_nodes = state.nodes if nodes is None else [n for n in state.nodes if n.name in nodes]
    spec.run(args, handle, run_nodes)
    return Result(list(state.planned), list(counter.refusals), state)


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SNAPSHOT_NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)  # when every bundled snapshot was taken


def registry_of(*modules: ModuleType) -> Registry:
    """A registry holding only these strategy modules: an example's outcome then provably comes
    from its own strategies."""
    reg = Registry()
    for module in modules:
        reg.register(module.SPEC)
    return reg

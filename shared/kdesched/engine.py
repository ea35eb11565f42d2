"""One descheduling run: plan (pure) with every enabled strategy, then act through an executor.

Why: the CLI (simulate/run), the Knative functions and ``kdesched serve`` all run strategies the
same way: upstream's cycle order (all Deschedule plugins of every profile, then all Balance
plugins), fewer than two Ready nodes -> nothing, one shared set of limits, plan-aware state. The
only thing that differs between a simulation and a live run is the executor passed in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.execute import EvictionOutcome, Executor
from kdesched.evictor.planner import Gate, LimitCounter, Limits, PlanningEvictor, Refusal
from kdesched.model.gcpause import paused_gc
from kdesched.model.selectors import parse_selector
from kdesched.model.snapshot import Snapshot
from kdesched.policy.types import DefaultEvictorArgs, Policy, PriorityThreshold
from kdesched.strategies.framework import (
    ClusterState,
    Handle,
    LimitReached,
    PlannedEviction,
    StrategyError,
    TotalLimitReached,
)
from kdesched.strategies.registry import Registry, default_registry

log = logging.getLogger("kdesched.engine")


class PlanError(ValueError):
    """The policy cannot be applied to this cluster (e.g. a priority class it names is missing)."""


@dataclass(frozen=True, slots=True)
class StrategyRun:
    profile: str
    strategy: str
    extension_point: str
    planned: int
    seconds: float
    error: str = ""


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run decided, before anything touched the cluster."""

    evictions: tuple[PlannedEviction, ...]
    refusals: tuple[Refusal, ...]
    strategy_runs: tuple[StrategyRun, ...]
    notes: tuple[str, ...]
    errors: tuple[str, ...]
    nodes: tuple[str, ...]  # the nodes the run worked on (Ready, matching nodeSelector)
    pods_before: Mapping[str, int]  # non-terminal pods per node before the run
    now: datetime


@dataclass(frozen=True, slots=True)
class RunReport:
    """A plan plus what happened when it was carried out (or would have been, in dry-run)."""

    plan: RunPlan
    outcomes: tuple[EvictionOutcome, ...]
    dry_run: bool
    trigger: str = "manual"
    duration_seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.result] = out.get(o.result, 0) + 1
        return out

    def pods_after(self) -> dict[str, int]:
        after = dict(self.plan.pods_before)
        for o in self.outcomes:
            if o.result in ("evicted", "dry-run", "already-gone") and o.eviction.node in after:
                after[o.eviction.node] -= 1
        return after

    def to_json(self) -> dict[str, Any]:
        by_strategy: dict[str, int] = {}
        for o in self.outcomes:
            by_strategy[o.eviction.strategy] = by_strategy.get(o.eviction.strategy, 0) + 1
        after = self.pods_after()
        return {
            "dryRun": self.dry_run,
            "evictions": [o.to_json() for o in self.outcomes],
            "blocked": [r.to_json() for r in self.plan.refusals]
            + [o.to_json() for o in self.outcomes if o.result == "blocked"],
            "summary": {
                "trigger": self.trigger,
                "nodes": len(self.plan.nodes),
                "planned": len(self.plan.evictions),
                "results": self.counts(),
                "byStrategy": by_strategy,
                "podsPerNode": {n: {"before": b, "after": after.get(n, b)} for n, b in self.plan.pods_before.items()},
                "strategies": [
                    {"profile": s.profile, "strategy": s.strategy, "extensionPoint": s.extension_point,
                     "planned": s.planned, "seconds": round(s.seconds, 6), **({"error": s.error} if s.error else {})}
                    for s in self.plan.strategy_runs
                ],
                "notes": list(self.plan.notes),
                "errors": list(self.plan.errors),
                "durationSeconds": round(self.duration_seconds, 6),
                **dict(self.extra),
            },
        }


def resolve_evictor_args(args: DefaultEvictorArgs, snapshot: Snapshot, profile: str) -> DefaultEvictorArgs:
    """Turn ``priorityThreshold.name`` into a value using the cluster's PriorityClasses."""
    pt = args.priority_threshold
    if pt is None or pt.name is None or pt.value is not None:
        return args
    pc = snapshot.priority_classes.get(pt.name)
    if pc is None:
        raise PlanError(f'profile "{profile}" / plugin DefaultEvictor: priorityThreshold.name: '
                        f'PriorityClass {pt.name!r} does not exist in the cluster')
    return replace(args, priority_threshold=PriorityThreshold(value=pc.value, name=pt.name))


@paused_gc()  # planning builds many short-lived lists and no cycles (kdesched.model.gcpause)
def plan_run(
    policy: Policy,
    snapshot: Snapshot,
    *,
    now: datetime | None = None,
    strategies: Collection[str] | None = None,
    nodes: Collection[str] | None = None,
    registry: Registry | None = None,
    gate: Gate | None = None,
) -> RunPlan:
    """Decide a run. ``strategies`` limits which plugins run (None = all enabled in the policy);
    ``nodes`` scopes Deschedule plugins to those nodes (Balance plugins always see every node);
    ``gate`` is an extra admission check applied to every planned eviction (cool-downs, buckets)."""
    registry = registry if registry is not None else default_registry()
    now = now or datetime.now(timezone.utc)
    node_sel = parse_selector(policy.node_selector, "nodeSelector") if policy.node_selector else None
    state = ClusterState(snapshot, now, node_sel)
    pods_before = {n.name: len(state.pods_on_node(n.name)) for n in state.nodes}
    notes: list[str] = list(snapshot.notes)
    errors: list[str] = []
    runs: list[StrategyRun] = []
    counter = LimitCounter(Limits(policy.max_pods_to_evict_per_node, policy.max_pods_to_evict_per_namespace,
                                  policy.max_pods_to_evict_total))

    def done() -> RunPlan:
        return RunPlan(tuple(state.planned), tuple(counter.refusals), tuple(runs), tuple(notes), tuple(errors),
                       tuple(n.name for n in state.nodes), pods_before, now)

    if len(state.nodes) < 2:
        notes.append(f"{len(state.nodes)} Ready node(s) selected; at least 2 are needed, nothing to do")
        return done()
    scoped = state.nodes
    if nodes is not None:
        wanted = set(nodes)
        scoped = [n for n in state.nodes if n.name in wanted]
        for name in sorted(wanted - {n.name for n in scoped}):
            notes.append(f"node {name} is not a Ready node selected by the policy; skipped")
    evictors = {
        p.name: PlanningEvictor(state, DefaultEvictor(resolve_evictor_args(p.evictor_args, snapshot, p.name), state),
                                counter, gate)
        for p in policy.profiles
    }
    for ext in ("deschedule", "balance"):
        for profile in policy.profiles:
            for name in getattr(profile, ext):
                if strategies is not None and name not in strategies:
                    continue
                spec = registry.get(name)
                if spec is None:
                    errors.append(f'profile "{profile.name}" / plugin {name}: not implemented by this kdesched')
                    continue
                handle = Handle(state, evictors[profile.name], profile.name, name)
                before = len(state.planned)
                started = time.perf_counter()
                error = ""
                try:
                    spec.run(profile.plugin_args[name], handle, scoped if ext == "deschedule" else state.nodes)
                except TotalLimitReached as exc:
                    notes.append(f"{profile.name}/{name}: {exc}")
                except LimitReached as exc:
                    notes.append(f"{profile.name}/{name}: {exc}")
                except StrategyError as exc:  # an expected refusal to run: one line, no traceback
                    log.error("strategy %s/%s did not run: %s", profile.name, name, exc)
                    error = str(exc)
                    errors.append(f'profile "{profile.name}" / plugin {name}: {error}')
                except Exception as exc:  # one broken plugin must not stop the others (upstream rule)
                    log.exception("strategy %s/%s failed", profile.name, name)
                    error = f"{type(exc).__name__}: {exc}"
                    errors.append(f'profile "{profile.name}" / plugin {name}: {error}')
                runs.append(StrategyRun(profile.name, name, ext, len(state.planned) - before,
                                        time.perf_counter() - started, error))
    return done()


def execute_plan(plan: RunPlan, executor: Executor, *, dry_run: bool, trigger: str = "manual",
                 grace_period_seconds: int | None = None, failure_events: bool = False,
                 started: float | None = None) -> RunReport:
    """Carry a plan out through ``executor`` (live or recording) and report."""
    t0 = started if started is not None else time.perf_counter()
    with paused_gc():  # outcomes are many small cycle-free objects on a large heap
        outcomes = executor.execute(plan.evictions, grace_period_seconds=grace_period_seconds,
                                    failure_events=failure_events)
    return RunReport(plan, tuple(outcomes), dry_run, trigger, time.perf_counter() - t0)

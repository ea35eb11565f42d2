"""One descheduling run: plan (pure) with every enabled strategy, then act through an executor.

Why: the CLI (simulate/run), the Knative functions and ``kdesched serve`` all run strategies the
same way: upstream's cycle order (all Deschedule plugins of every profile, then all Balance
plugins), fewer than two Ready nodes -> nothing, one shared set of limits, plan-aware state. The
only thing that differs between a simulation and a live run is the executor passed in.

With kdesched's safety defaults on (``safety``, resolved by the caller from
:mod:`kdesched.policy.safety`), every eviction of every strategy must also have somewhere to go
and fits a per-workload allowance, and a plan is carried out in waves
(:mod:`kdesched.evictor.pacing`, :mod:`kdesched.evictor.waves`). Without it (a plain upstream
policy in ``simulate``/``run``), nothing of that runs: upstream parity.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kdesched.errors import CannotRun
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.execute import EvictionOutcome, Executor, KeepGoing
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.metrics import mark_workload_below, observe_strategy, record_refused, workloads_below
from kdesched.evictor.pacing import PacedStep, Pacer, PacingPlan, workload_status
from kdesched.evictor.planner import Gate, LimitCounter, Limits, PlanningEvictor, Refusal
from kdesched.evictor.waves import WaveSettings, WorkloadReader, execute_waves
from kdesched.model.gcpause import paused_gc
from kdesched.model.selectors import parse_selector
from kdesched.model.snapshot import Snapshot
from kdesched.policy.safety import Safety
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


class PlanError(CannotRun, ValueError):
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
    safety: Safety | None = None  # None: the caller did not say (treated as off: upstream parity)
    pacing: PacingPlan | None = None  # set when the safety defaults are on


@dataclass(frozen=True, slots=True)
class RunReport:
    """A plan plus what happened when it was carried out (or would have been, in dry-run)."""

    plan: RunPlan
    outcomes: tuple[EvictionOutcome, ...]
    dry_run: bool
    trigger: str = "manual"
    duration_seconds: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    events_lost: int = 0  # Events about this run's evictions that could not be posted (live runs)

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

    def mode(self) -> dict[str, Any]:
        """Which mode the run decided in: kdesched's safety defaults, or upstream parity."""
        safety = self.plan.safety
        if safety is None:
            return {"enabled": False, "why": "no safety settings given: upstream parity"}
        return safety.to_json()

    def eviction_json(self) -> list[dict[str, Any]]:
        """Each outcome; with pacing, also its wave, workload and the evictions it waits for."""
        pacing = self.plan.pacing
        rows: list[dict[str, Any]] = [o.to_json() for o in self.outcomes]
        if pacing is None or len(pacing.steps) != len(rows):
            for row in rows:
                row["destination"] = None  # no pacer, no reservation: where the pod goes is not predicted
            return rows
        by_wave: dict[tuple[Any, int], list[str]] = {}
        for e, s in zip(self.plan.evictions, pacing.steps, strict=True):
            if s.workload is not None:
                by_wave.setdefault((s.workload, s.wave), []).append(f"{e.pod.namespace}/{e.pod.name}")
        for row, step in zip(rows, pacing.steps, strict=True):  # each row is a new dict: extended in place
            row["wave"] = step.wave
            row["workload"] = str(step.workload) if step.workload else ""
            if step.wave > 0:
                row["waitsFor"] = list(by_wave.get((step.workload, step.wave - 1), ()))
            if step.destination:
                row["likelyDestination"] = step.destination
            # the node the planner reserved (compared with where the replacement became Ready: checked moves)
            row["destination"] = step.destination or None
        return rows

    def waves_json(self) -> list[dict[str, Any]]:
        """The waves in order: which evictions happen at once (wave 0), which wait (wave k waits for
        its workload's wave k-1 replacements to be Ready)."""
        pacing = self.plan.pacing
        if pacing is None:
            return []
        grouped: list[list[tuple[PlannedEviction, PacedStep]]] = [[] for _ in range(pacing.waves)]
        for e, s in zip(self.plan.evictions, pacing.steps, strict=True):
            grouped[s.wave].append((e, s))
        waves: list[dict[str, Any]] = []
        for k, members in enumerate(grouped):
            waves.append({"wave": k, "evictions": [f"{e.pod.namespace}/{e.pod.name}" for e, _ in members],
                          "after": "" if k == 0 else f"the replacements of wave {k - 1} of each workload are Ready",
                          "workloads": sorted({str(s.workload) for _, s in members if s.workload})})
        return waves

    def to_json(self) -> dict[str, Any]:
        by_strategy: dict[str, int] = {}
        for o in self.outcomes:
            by_strategy[o.eviction.strategy] = by_strategy.get(o.eviction.strategy, 0) + 1
        after = self.pods_after()
        pacing = self.plan.pacing
        paced: dict[str, Any] = {}
        if pacing is not None:
            paced = {"waves": self.waves_json(),
                     "workloads": [p.to_json() for p in pacing.workloads.values()],
                     "paced": [o.to_json() for o in self.outcomes if o.result == "paced"]}
        return {
            "dryRun": self.dry_run,
            "evictions": self.eviction_json(),
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
                "safety": self.mode(),
                **({"pacing": paced} if paced else {}),
                **({} if self.dry_run else {"eventsLost": self.events_lost}),
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
    safety: Safety | None = None,
    ledger: Ledger | None = None,
) -> RunPlan:
    """Decide a run. ``strategies`` limits which plugins run (None = all enabled in the policy);
    ``nodes`` scopes Deschedule plugins to those nodes (Balance plugins always see every node);
    ``gate`` is an extra admission check applied to every planned eviction (cool-downs, buckets);
    ``safety`` (resolved for the command) turns on "somewhere to go" and per-workload pacing;
    ``ledger`` (the event path) adds what other runs have in flight to both."""
    registry = registry if registry is not None else default_registry()
    now = now or datetime.now(UTC)
    node_sel = parse_selector(policy.node_selector, "nodeSelector") if policy.node_selector else None
    state = ClusterState(snapshot, now, node_sel)
    pods_before = {n.name: len(state.pods_on_node(n.name)) for n in state.nodes}
    notes: list[str] = list(snapshot.notes)
    errors: list[str] = []
    runs: list[StrategyRun] = []
    counter = LimitCounter(Limits(policy.max_pods_to_evict_per_node, policy.max_pods_to_evict_per_namespace,
                                  policy.max_pods_to_evict_total))

    pacer = Pacer(safety, state, ledger) if safety is not None and safety.enabled else None

    def done() -> RunPlan:
        pacing = None
        if pacer is not None:
            pacing = pacer.plan(e.pod for e in state.planned)
            notes.extend(pacer.notes)
            _refresh_below(pacer)
        return RunPlan(tuple(state.planned), tuple(counter.refusals), tuple(runs), tuple(notes), tuple(errors),
                       tuple(n.name for n in state.nodes), pods_before, now, safety, pacing)

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
                                counter, gate, pacer)
        for p in policy.profiles
    }
    spent = ""  # set when the event path's run-wide eviction budget ran out (EvictionBudgetSpent)
    for ext in ("deschedule", "balance"):
        for profile in policy.profiles:
            for name in getattr(profile, ext):
                if strategies is not None and name not in strategies:
                    continue
                spec = registry.get(name)
                if spec is None:
                    errors.append(f'profile "{profile.name}" / plugin {name}: not implemented by this kdesched')
                    continue
                if spent:  # nothing more can be sent by this run: do not plan what would be refused
                    notes.append(f"{profile.name}/{name}: not run: {spent}")
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
                seconds = time.perf_counter() - started
                observe_strategy(name, profile.name, seconds)  # kdesched_strategy_duration_seconds
                runs.append(StrategyRun(profile.name, name, ext, len(state.planned) - before, seconds, error))
                if counter.ended:  # this strategy alone stopped (DeferralsPlanned): the others run
                    notes.append(f"{profile.name}/{name}: {counter.ended}")
                    counter.ended = ""
                if counter.spent and not spent:  # strategies catch EvictionBudgetSpent like the total limit
                    spent = counter.spent
                    notes.append(f"{profile.name}/{name}: {spent}")
    return done()


def _refresh_below(pacer: Pacer) -> None:
    """Drop from ``kdesched_workloads_below_ready`` the workloads this snapshot shows back at their
    Ready count (only workloads kdesched evicted from are tracked; see evictor.metrics)."""
    tracked = workloads_below()
    if not tracked:
        return
    for w, pods in pacer.index().items():
        if str(w) in tracked and workload_status(w, pods).unavailable == 0:
            mark_workload_below(str(w), False)


def execute_plan(plan: RunPlan, executor: Executor, *, dry_run: bool, trigger: str = "manual",
                 grace_period_seconds: int | None = None, failure_events: bool = False,
                 started: float | None = None, reader: WorkloadReader | None = None,
                 waves: WaveSettings | None = None, keep_going: KeepGoing | None = None,
                 deadline: float | None = None) -> RunReport:
    """Carry a plan out through ``executor`` (live or recording) and report.

    A paced plan (safety on) is carried out in waves: ``reader`` reads workloads back (live) and
    ``waves`` says how long held evictions may wait; without them nothing waits and held evictions
    are reported ``paced`` (what the event path wants). ``keep_going`` is asked before each
    eviction is started (:class:`~kdesched.evictor.execute.LiveExecutor`): a reason to stop makes
    the rest ``abandoned``. ``deadline`` (local monotonic): the admission's; nothing is sent, and no
    attempt is under way, after it. The report counts the Events the executor could not post."""
    t0 = started if started is not None else time.perf_counter()
    lost_before = executor.events_lost
    for refusal in plan.refusals:
        record_refused(refusal.kind, strategy=refusal.strategy, namespace=refusal.pod.namespace)
    with paused_gc():  # outcomes are many small cycle-free objects on a large heap
        if plan.pacing is None:
            outcomes = executor.execute(plan.evictions, grace_period_seconds=grace_period_seconds,
                                        failure_events=failure_events, keep_going=keep_going,
                                        **({"deadline": deadline} if deadline is not None else {}))
        else:
            settings = waves or WaveSettings(plan.pacing.safety.replacement_timeout_seconds, budget_seconds=0)
            outcomes = execute_waves(plan.evictions, plan.pacing, executor, dry_run=dry_run, reader=reader,
                                     settings=settings, grace_period_seconds=grace_period_seconds,
                                     failure_events=failure_events, keep_going=keep_going, deadline=deadline)
    return RunReport(plan, tuple(outcomes), dry_run, trigger, time.perf_counter() - t0,
                     events_lost=executor.events_lost - lost_before)

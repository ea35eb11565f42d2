"""The admission pipeline: every control, in one documented order, built once per policy.

Why: "may this pod go now" had no home (reactor/admit.py, reactor/controls.py, reactor/limits.py,
the engine and six evictor modules), nothing said in which order an eviction is checked, and a new
control touched about seven places. Now ``run``, ``serve``, the functions and ``simulate --event``
build one :class:`Pipeline` from the policy's settings and ask it, in this order:

=====  =====================  ==========  =====================================================
order  control                moment      answer
=====  =====================  ==========  =====================================================
1      health brake           run         defer every eviction (too many nodes down, settling)
2      alert brake            run         defer every eviction (named Prometheus alerts firing)
3      in flight elsewhere    pod         refuse (another run's eviction)
4      owner changed          pod         refuse until the next run (its Deployment changed
                                          during a surge-first move this run ended)
5      wasted-move back-off   pod         refuse until the back-off ends
6      cool-downs             pod         refuse until the workload's / node's cool-down ends
7      ledger capacity        pod         refuse (the workload's record is full)
8      disruption windows     pod, plan   defer until the window opens
9      fresh node change      pod, plan   defer a node event's eviction until the scheduler has
                                          seen the taint or label written seconds ago (3 s)
10     cluster-wide bucket    pod         refuse (balance runs: stop planning) until a token
11     disruption budgets     plan        refuse while the budget is spent
=====  =====================  ==========  =====================================================

The cheap, run-wide answers come first; the pod checks run while the planner plans (its ``gate``:
the planner itself adds the PodDisruptionBudgets, the per-workload allowance and "somewhere to
go", and counts a pod only once it planned it: a pod it refuses spends no token); the plan checks
see the finished plan's waves (a pod pacing holds for a later wave is counted
by the run that sends it). A surge-first move of a pod the planner refused or held (no check counted
it) goes through every pod and plan check at once and is counted then (:meth:`RunAdmission.take`).

A control that *defers* (1, 2, 8, 9) answers before the bucket: a pod it holds is still planned
(and reported ``deferred`` with its wave and destination), but no check after it refuses or counts
it, since this run does not send it. So a deferred pod spends no token and takes no room in its
ledger record, and a pod a window holds is never reported ``rate-limit`` (with the bucket before
the windows, deferred pods drew its tokens: the pods after them were refused ``rate-limit``, and
the ones that could go, of a strategy the window does not cover, were not sent). A balance run
plans at most a burst of a strategy's deferred evictions (what the bucket could let go at once when
they may go), then that strategy returns. A new control is one module and one line in
:meth:`Pipeline.build`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kdesched.admission.alerts import AlertBrake, AlertBrakeSettings
from kdesched.admission.backoff import WastedMoveBackoff
from kdesched.admission.bucket import ClusterBucket
from kdesched.admission.budgets import Budget, BudgetControl
from kdesched.admission.capacity import RecordCapacity
from kdesched.admission.control import Check, Control, RunContext
from kdesched.admission.cooldown import Cooldowns
from kdesched.admission.fresh_change import FreshChange
from kdesched.admission.health import BrakeState, HealthBrake, HealthBrakeSettings, HealthCheck
from kdesched.admission.inflight import InFlight
from kdesched.admission.owner_change import OwnerChanged
from kdesched.admission.windows import Window, WindowControl
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod
from kdesched.strategies.framework import EvictionBudgetSpent


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """Every control's settings (parsed once from the ``kdesched:`` block, kdesched.reactor.run.settings)."""

    health: HealthBrakeSettings = field(default_factory=HealthBrakeSettings)
    alerts: AlertBrakeSettings = field(default_factory=AlertBrakeSettings)
    cooldown_workload_seconds: float = 300.0
    cooldown_node_seconds: float = 300.0
    backoff_base_seconds: float = 300.0
    backoff_max_seconds: float = 3600.0
    bucket: ClusterBucket | None = field(default_factory=lambda: ClusterBucket(300, 100))
    windows: tuple[Window, ...] = ()
    budgets: tuple[Budget, ...] = ()


class Pipeline:
    """The controls of one policy, in order."""

    def __init__(self, controls: Sequence[Control]) -> None:
        self.controls = tuple(controls)

    @classmethod
    def build(cls, s: AdmissionSettings) -> Pipeline:
        controls: list[Control | None] = [
            HealthBrake(s.health),
            AlertBrake(s.alerts),
            InFlight(),
            OwnerChanged(),
            WastedMoveBackoff(s.backoff_base_seconds, s.backoff_max_seconds),
            Cooldowns(s.cooldown_workload_seconds, s.cooldown_node_seconds),
            RecordCapacity(),
            WindowControl(s.windows),
            FreshChange(),
            s.bucket,
            BudgetControl(s.budgets),
        ]
        return cls([c for c in controls if c is not None])

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.controls)

    def begin(self, ctx: RunContext) -> RunAdmission:
        """Start every control for one run (the run-wide answers are taken now)."""
        return RunAdmission(ctx, tuple(c.start(ctx) for c in self.controls))


@dataclass
class RunAdmission:
    """The pipeline during one run: what it answered, for the report, metrics and the repeat."""

    ctx: RunContext
    checks: tuple[Check, ...]
    refused: list[Verdict] = field(default_factory=list)  # every pod-stage refusal (metrics)
    until: float | None = None  # the earliest time a cool-down, back-off or bucket that held a pod ends
    _pending: tuple[str, int | None] = ("", None)  # the pod check() let through: its uid, deferred after

    def __post_init__(self) -> None:
        self.brake: Verdict | None = next((v for v in (c.run() for c in self.checks) if v is not None), None)

    @property
    def health(self) -> BrakeState:
        """The health brake's state this run (for /readyz and the gauge)."""
        return next((c.state for c in self.checks if isinstance(c, HealthCheck)), BrakeState(False))

    def check(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        """The planner's gate (:class:`~kdesched.evictor.planner.Gate`): the pod checks in order, the
        first refusal wins. A deferral (a brake, or a check whose verdict defers) lets the pod be
        planned, to be deferred by the plan checks (:meth:`finish`), and the checks after it neither
        refuse nor count it. Nothing is counted here: :meth:`passed` does, once the planner has
        planned the pod (it may still refuse it: a PodDisruptionBudget, nowhere to go)."""
        if self.brake is not None:
            self._pending = (pod.uid, 0)
            return None
        for i, c in enumerate(self.checks):
            verdict = c.pod(pod, strategy, held)
            if verdict is not None and verdict.reason.defers:
                self._pending = (pod.uid, i + 1)
                return None
            if verdict is not None:
                self.refused.append(verdict)
                # (the bucket's next token too: a node run it refused is repeated then, not left
                # to the sweep; the pool storm left a node's pods behind for exactly this)
                if verdict.until is not None and verdict.reason in (Reason.BACKOFF, Reason.COOLDOWN_WORKLOAD,
                                                                    Reason.COOLDOWN_NODE, Reason.RATE_LIMIT):
                    self.until = verdict.until if self.until is None else min(self.until, verdict.until)
                return verdict
        self._pending = (pod.uid, None)
        return None

    def passed(self, pod: Pod, strategy: str, held: bool) -> None:
        """The planner planned ``pod``, which :meth:`check` just let through: every check counts it
        (a token, a record's room), or, if a check deferred it, the checks after that one note a
        deferral (which may end the strategy's planning: DeferralsPlanned)."""
        uid, deferred_after = self._pending
        if uid != pod.uid:
            raise RuntimeError(f"admission: passed({pod.key}) without check() just before it")
        self._pending = ("", None)
        if deferred_after is not None:
            for c in self.checks[deferred_after:]:
                c.deferred(pod, strategy, held)
            return
        for c in self.checks:
            c.passed(pod, strategy, held)

    def take(self, eviction: PlannedEviction) -> Verdict | None:
        """One more eviction of this run that the planner did not plan as one (a surge-first move of a
        pod it refused for its PodDisruptionBudget or held for a later wave, which no check counted):
        the pod checks, then the plan checks, as for a planned pod sent now; if every check lets it
        through, it is counted (a bucket's token, a record's room, a budget). The first verdict that
        refuses or defers it is returned, and nothing is counted for it; a pod check that refuses it is
        kept in :attr:`refused` like the planner's gate's (a refusal at the pod stage, once: the
        planner's gate let this pod through)."""
        pod, strategy = eviction.pod, eviction.strategy
        if self.brake is not None:
            return self.brake
        try:
            verdict = next((v for v in (c.pod(pod, strategy, False) for c in self.checks) if v is not None), None)
        except EvictionBudgetSpent as exc:  # (a balance run's empty bucket: this one pod is refused)
            verdict = Verdict(Reason.RATE_LIMIT, str(exc))
        if verdict is not None and not verdict.reason.defers:
            self.refused.append(verdict)
        if verdict is None:
            verdict = next((v for v in (c.planned(eviction, False) for c in self.checks) if v is not None), None)
        if verdict is None:
            for c in self.checks:
                c.passed(pod, strategy, False)
        return verdict

    def finish(self, evictions: Sequence[PlannedEviction], held: Sequence[bool]) -> list[Verdict | None]:
        """The plan checks over the finished plan, in plan order: a verdict per eviction (a brake
        defers them all), or None for the evictions that may go."""
        if self.brake is not None:
            return [self.brake] * len(evictions)
        out: list[Verdict | None] = []
        for e, h in zip(evictions, held, strict=True):
            out.append(next((v for v in (c.planned(e, h) for c in self.checks) if v is not None), None))
        return out

    @property
    def writes(self) -> bool:
        """Must the run write the ledger although it admits nothing (a control's state changed)?"""
        return any(c.writes for c in self.checks)

    def record(self, ledger: Ledger, admitted: int, stamp: float) -> Ledger:
        """The ledger with every control's state after ``admitted`` evictions were admitted."""
        for c in self.checks:
            ledger = c.record(ledger, admitted, stamp)
        return ledger

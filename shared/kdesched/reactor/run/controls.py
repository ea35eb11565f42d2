"""The admission pipeline's answers applied to a run's plan and report, and the brake's /readyz state.

Why: the controls themselves are pure, in :mod:`kdesched.admission` (one module each, in one
order: :mod:`kdesched.admission.pipeline`). What is left for the reactor is shaping: a plan split
into what may be admitted, what is deferred (a brake, a closed window: reported ``deferred`` with
why, nothing written for them, re-decided when they may pass) and what a budget refused (reported
``blocked``); the deferred evictions added back to the report; the health brake's last decision
for ``/readyz`` and its gauge; and the Namespace LIST a per-namespace budget needs when the run's
snapshot has no Namespaces.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import Gauge

from kdesched.admission.health import BrakeState
from kdesched.engine import RunPlan, RunReport
from kdesched.evictor.execute import EvictionOutcome
from kdesched.evictor.pacing import PacedStep
from kdesched.evictor.planner import Refusal
from kdesched.evictor.reasons import Verdict
from kdesched.reactor.metrics import REGISTRY

log = logging.getLogger("kdesched.reactor.controls")

DEFERRED = "deferred"

HEALTH_BRAKE = Gauge("kdesched_health_brake", "1 while the cluster-health brake holds every eviction, by reason: "
                     "share (too many nodes NotReady or unreachable), zone (every node of a zone), settling (healthy "
                     "again, waiting healthBrake.settleSeconds); as this process last decided.", ["reason"],
                     registry=REGISTRY)
BRAKE_REASONS = ("share", "zone", "settling")


@dataclass(frozen=True, slots=True)
class Controlled:
    """A plan after the pipeline's plan checks: what may be admitted, what is deferred, what a budget refused."""

    plan: RunPlan
    deferred: tuple[EvictionOutcome, ...] = ()
    deferred_steps: tuple[PacedStep, ...] = ()  # their pacing steps (when the plan is paced), in order
    retry_at: float | None = None  # re-decide then (epoch seconds): a window opens, the brake lifts
    notes: tuple[str, ...] = ()


def held_flags(plan: RunPlan) -> list[bool]:
    """Per eviction of ``plan``: does pacing hold it for a later wave?"""
    pacing = plan.pacing
    return [pacing is not None and pacing.steps[i].wave > 0 for i in range(len(plan.evictions))]


def apply_verdicts(plan: RunPlan, verdicts: Sequence[Verdict | None]) -> Controlled:
    """Split ``plan`` by the pipeline's plan verdicts (kdesched.admission.pipeline.RunAdmission.finish)."""
    if not any(v is not None for v in verdicts):
        return Controlled(plan)
    deferred: list[EvictionOutcome] = []
    deferred_idx: list[int] = []
    refusals: list[Refusal] = []
    retry: list[float] = []
    for i, (e, v) in enumerate(zip(plan.evictions, verdicts, strict=True)):
        if v is None:
            continue
        if v.until is not None:
            retry.append(v.until)
        if v.reason.defers:
            deferred.append(EvictionOutcome(e, DEFERRED, f"deferred: {v.message}", 0, v.reason.value))
            deferred_idx.append(i)
        else:
            refusals.append(Refusal(e.pod, e.strategy, e.profile, v.message, v.reason))
    keep = [i for i, v in enumerate(verdicts) if v is None]
    pacing = plan.pacing
    new = replace(plan, evictions=tuple(plan.evictions[i] for i in keep), refusals=(*plan.refusals, *refusals),
                  pacing=replace(pacing, steps=tuple(pacing.steps[i] for i in keep)) if pacing is not None else None)
    steps = tuple(pacing.steps[i] for i in deferred_idx) if pacing is not None else ()
    notes = []
    if deferred:
        notes.append(f"{len(deferred)} eviction(s) deferred: {deferred[0].message.removeprefix('deferred: ')}")
    if refusals:
        notes.append(f"{len(refusals)} eviction(s) held back by disruption budgets (reported blocked)")
    return Controlled(new, tuple(deferred), steps, min(retry) if retry else None, tuple(notes))


class BrakeStatus:
    """The health brake's last decision in this process, for /readyz and the gauge."""

    def __init__(self, *, clock: Callable[[], float]) -> None:  # the API server's (runner: client.clock.now)
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, BrakeState] | None = None

    def remember(self, state: BrakeState, now: float) -> None:
        """Keep the run's brake state, unless it judged no Node and does not hold while the last one
        held on a judgement (a taint run that read a few Nodes knows nothing about an outage that
        one which read every Node saw: it must not reset /readyz and the gauge; /readyz says the
        hold may have lifted once its time has passed, and the next run that judges does lift it)."""
        with self._lock:
            last = self._last
            if (not state.holds and state.verdict is None and last is not None and last[1].holds
                    and last[1].verdict is not None):
                return
            self._last = (now, state)
        for reason in BRAKE_REASONS:
            HEALTH_BRAKE.labels(reason).set(1 if state.holds and state.reason == reason else 0)

    def status(self) -> str:
        """One line for /readyz ("" when the brake did not hold at the last decision)."""
        with self._lock:
            last = self._last
        if last is None or not last[1].holds:
            return ""
        at, brake = last
        now = self.clock()
        stale = "; it may have lifted since: the next run decides" if brake.until is not None and now >= brake.until \
            else ""
        return f"{brake.message} (as of {max(0, int(now - at))}s ago{stale}; not a failure: kdesched is ready)"


def with_deferred(report: RunReport, controlled: Controlled) -> RunReport:
    """The run's report with the evictions the controls deferred (never sent) added to it, so the
    report lists every eviction the run would have made, each ``deferred`` with why."""
    if not controlled.deferred:
        return report
    plan = report.plan
    pacing = plan.pacing
    if pacing is not None:
        steps = controlled.deferred_steps
        if len(steps) != len(controlled.deferred):
            steps = tuple(PacedStep(None, 0) for _ in controlled.deferred)
        pacing = replace(pacing, steps=(*pacing.steps, *steps))
    plan = replace(plan, evictions=(*plan.evictions, *(o.eviction for o in controlled.deferred)), pacing=pacing)
    return replace(report, plan=plan, outcomes=(*report.outcomes, *controlled.deferred))


class NamespaceLabels:
    """Namespace labels for per-namespace budgets when the run's snapshot has no Namespaces (the
    policy reads none): one LIST of the Namespaces (the RBAC kdesched ships grants list, not get),
    kept ``ttl`` seconds. An error answers None (the budget then applies: the cautious answer)."""

    def __init__(self, list_all: Callable[[], Iterable[Mapping[str, Any]]], ttl: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.list_all = list_all
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._at: float | None = None
        self._labels: dict[str, dict[str, str]] = {}

    def __call__(self, namespace: str) -> Mapping[str, str] | None:
        now = self.clock()
        with self._lock:
            if self._at is not None and now - self._at < self.ttl:
                return self._labels.get(namespace, {})
            try:
                labels: dict[str, dict[str, str]] = {}
                for raw in self.list_all():
                    meta = raw.get("metadata") or {}
                    got = meta.get("labels") if isinstance(meta, Mapping) else None
                    labels[str(meta.get("name", ""))] = (
                        {str(k): str(v) for k, v in got.items()} if isinstance(got, Mapping) else {})
            except Exception as exc:  # noqa: BLE001 - the budget applies (cautious); logged
                log.info("could not list namespaces for a disruption budget: %s", exc)
                return None
            self._at, self._labels = now, labels
            return labels.get(namespace, {})

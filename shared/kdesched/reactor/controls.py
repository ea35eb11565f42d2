"""The operator's controls at admission: the cluster-health brake, disruption windows and budgets.

Why: these decide whether a planned eviction may be admitted at all, for every kind of run, so
they belong where every run admits its evictions (:func:`kdesched.reactor.admit.decide`), after
the plan and before the ledger write:

* the **health brake** (:mod:`kdesched.evictor.health`): while too many nodes (or a whole zone)
  are NotReady or unreachable, and for ``healthBrake.settleSeconds`` after, nothing is admitted.
  The last time a run saw the cluster unhealthy is kept in the disruption ledger, so every
  process (the functions' pods, ``serve`` replicas) waits the same settle time;
* **disruption windows** (:mod:`kdesched.evictor.windows`): an eviction whose strategy and trigger
  a closed window covers is not admitted;
* both report the evictions ``deferred`` (cause ``health-brake`` / ``window``), write nothing to
  the ledger for them, and give the time the run should re-decide (the reactor repeats it then,
  :mod:`kdesched.reactor.continuation`): the old plan is never replayed;
* **disruption budgets** (:mod:`kdesched.evictor.budgets`): counted from the ledger's in-flight
  pods plus this run's admissions; a refusal is reported ``blocked`` with the budget that stopped
  it, like a cool-down, and the run is repeated shortly while something is in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import Gauge

from kdesched.engine import RunPlan, RunReport
from kdesched.evictor.budgets import Budget, BudgetCheck
from kdesched.evictor.execute import EvictionOutcome
from kdesched.evictor.health import HealthBrakeSettings, HealthVerdict, judge, settling
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.pacing import PacedStep
from kdesched.evictor.planner import Refusal
from kdesched.evictor.windows import Window, Windows
from kdesched.model.snapshot import Snapshot
from kdesched.reactor.metrics import REGISTRY

log = logging.getLogger("kdesched.reactor.controls")

DEFERRED = "deferred"
CAUSE_BRAKE = "health-brake"
CAUSE_WINDOW = "window"
BUDGET_RETRY_SECONDS = 5.0  # a run a budget held back looks again this soon (in-flight pods settle)
UNHEALTHY_WRITE_SECONDS = 5.0  # the ledger's "last unhealthy" is moved at most this often

HEALTH_BRAKE = Gauge("kdesched_health_brake", "1 while the cluster-health brake holds every eviction, by reason: "
                     "share (too many nodes NotReady or unreachable), zone (every node of a zone), settling (healthy "
                     "again, waiting healthBrake.settleSeconds); as this process last decided.", ["reason"],
                     registry=REGISTRY)
BRAKE_REASONS = ("share", "zone", "settling")


@dataclass(frozen=True, slots=True)
class Brake:
    """The health brake's decision for one run."""

    holds: bool
    reason: str = ""  # share | zone | settling
    message: str = ""
    until: float | None = None  # when the run should look again
    verdict: HealthVerdict | None = None  # None: the snapshot does not hold every node (not judged)
    record_unhealthy: bool = False  # move the ledger's "last unhealthy" to now


@dataclass(frozen=True, slots=True)
class Controlled:
    """A plan after the controls: what may be admitted, what is deferred, what a budget refused."""

    plan: RunPlan
    deferred: tuple[EvictionOutcome, ...] = ()
    deferred_steps: tuple[PacedStep, ...] = ()  # their pacing steps (when the plan is paced), in order
    retry_at: float | None = None  # re-decide then (epoch seconds): a window opens, the brake lifts
    notes: tuple[str, ...] = ()


class Controls:
    """The controls of one process (settings plus the state /readyz shows)."""

    def __init__(self, brake: HealthBrakeSettings | None = None, windows: Sequence[Window] = (),
                 budgets: Sequence[Budget] = (),
                 namespace_labels: Callable[[str], Mapping[str, str] | None] = lambda _ns: None,
                 *, clock: Callable[[], float]) -> None:  # the API server's (runner: client.clock.now)
        self.brake_settings = brake or HealthBrakeSettings()
        self.windows = Windows(windows)
        self.budgets = tuple(budgets)
        self.namespace_labels = namespace_labels
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, Brake] | None = None

    # -- the health brake ------------------------------------------------------------------------
    def brake(self, snapshot: Snapshot, complete: bool, ledger: Ledger, now: float) -> Brake:
        """Judge the run's snapshot (when it holds every node: ``complete``), else go by the
        ledger's "last unhealthy" alone; then the settle time."""
        s = self.brake_settings
        if not s.enabled:
            return self._remember(now, Brake(False))
        verdict = judge(snapshot.nodes.values(), s) if complete else None
        if verdict is not None and verdict.unhealthy:
            due = ledger.unhealthy_at is None or now - ledger.unhealthy_at >= min(UNHEALTHY_WRITE_SECONDS,
                                                                                  s.settle_seconds / 4)
            return self._remember(now, Brake(True, verdict.reason, verdict.message, now + max(s.settle_seconds, 1.0),
                                             verdict, record_unhealthy=due))
        ends = settling(ledger.unhealthy_at, now, s)
        if ends is not None:
            ago = max(0, int(now - (ledger.unhealthy_at or now)))
            return self._remember(now, Brake(True, "settling", (
                f"health brake: the cluster was last seen unhealthy {ago}s ago; evictions resume once it has been "
                f"healthy for healthBrake.settleSeconds ({s.settle_seconds:g}s), in {max(0.0, ends - now):.0f}s"),
                ends, verdict))
        return self._remember(now, Brake(False, verdict=verdict))

    def _remember(self, now: float, brake: Brake) -> Brake:
        with self._lock:
            self._last = (now, brake)
        for reason in BRAKE_REASONS:
            HEALTH_BRAKE.labels(reason).set(1 if brake.holds and brake.reason == reason else 0)
        return brake

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

    # -- windows and budgets ----------------------------------------------------------------------
    def apply(self, plan: RunPlan, brake: Brake, ledger: Ledger, snapshot: Snapshot, trigger: str,
              now: float) -> Controlled:
        """Split ``plan``: deferred (brake, closed window), refused (budget), admitted (the rest)."""
        if not plan.evictions or (not brake.holds and not self.windows and not self.budgets):
            return Controlled(plan)
        drop: dict[int, None] = {}
        deferred: list[EvictionOutcome] = []
        refusals: list[Refusal] = []
        deferred_idx: list[int] = []  # plan positions of ``deferred``, in order
        retry: list[float] = []
        if brake.holds:
            msg = f"deferred: {brake.message}"
            deferred = [EvictionOutcome(e, DEFERRED, msg, 0, CAUSE_BRAKE) for e in plan.evictions]
            drop = dict.fromkeys(range(len(plan.evictions)))
            deferred_idx = list(range(len(plan.evictions)))
            if brake.until is not None:
                retry.append(brake.until)
        else:
            if self.windows:
                states: dict[str, tuple[bool, str, float | None]] = {}
                for i, e in enumerate(plan.evictions):
                    if e.strategy not in states:
                        st = self.windows.state(e.strategy, trigger, now)
                        states[e.strategy] = (st.open, st.reason, st.opens_at)
                    is_open, why, opens = states[e.strategy]
                    if is_open:
                        continue
                    when = ("it re-decides then" if opens is not None else
                            "no opening within 8 days: the next event or sweep re-decides")
                    deferred.append(EvictionOutcome(e, DEFERRED, f"deferred: {why}; {when}", 0, CAUSE_WINDOW))
                    drop[i] = None
                    deferred_idx.append(i)
                    if opens is not None:
                        retry.append(opens)
            if self.budgets:
                check = BudgetCheck(self.budgets, ledger, snapshot.pods, self._labels(snapshot))
                pacing = plan.pacing
                for i, e in enumerate(plan.evictions):
                    if i in drop or (pacing is not None and pacing.steps[i].wave > 0):
                        continue  # held for a later wave: counted when its run sends it
                    refused = check.admit(e.pod, e.strategy)
                    if refused is not None:
                        refusals.append(Refusal(e.pod, e.strategy, e.profile, refused))
                        drop[i] = None
                if refusals:
                    retry.append(now + BUDGET_RETRY_SECONDS)
        if not drop:
            return Controlled(plan)
        keep = [i for i in range(len(plan.evictions)) if i not in drop]
        pacing = plan.pacing
        if pacing is not None:
            pacing = replace(pacing, steps=tuple(pacing.steps[i] for i in keep))
        new = replace(plan, evictions=tuple(plan.evictions[i] for i in keep),
                      refusals=(*plan.refusals, *refusals), pacing=pacing)
        steps: tuple[PacedStep, ...] = ()
        if plan.pacing is not None:
            steps = tuple(plan.pacing.steps[i] for i in deferred_idx)
        notes = []
        if deferred:
            notes.append(f"{len(deferred)} eviction(s) deferred: {deferred[0].message.removeprefix('deferred: ')}")
        if refusals:
            notes.append(f"{len(refusals)} eviction(s) held back by disruption budgets (reported blocked)")
        return Controlled(new, tuple(deferred), steps, min(retry) if retry else None, tuple(notes))

    def _labels(self, snapshot: Snapshot) -> Callable[[str], Mapping[str, str] | None]:
        def labels(namespace: str) -> Mapping[str, str] | None:
            ns = snapshot.namespaces.get(namespace)
            return ns.labels if ns is not None else self.namespace_labels(namespace)
        return labels


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

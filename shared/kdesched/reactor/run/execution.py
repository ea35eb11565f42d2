"""One decided run: admitted against the disruption ledger, executed, recorded, told about, and
its repeat scheduled.

Why: every kind of run (node-scoped, balance, manual, sweep, a paced repeat) ends the same way
once its snapshot is read and its locks are held, and that ending is where kdesched's safety
lives: nothing is evicted that the ledger did not admit, an admission whose eviction did not
happen is taken back, and a run that held pods is repeated until its move is done. The
:class:`~kdesched.reactor.run.runner.Reactor` decides *which* run; this decides and carries it out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kdesched.admission.alerts import fail_open_note
from kdesched.admission.pipeline import Pipeline
from kdesched.engine import RunReport, execute_plan
from kdesched.evictor.execute import Executor
from kdesched.evictor.ledger import workload_key
from kdesched.evictor.metrics import observe_run, record_refused
from kdesched.model.snapshot import Snapshot
from kdesched.policy.safety import Safety
from kdesched.policy.types import Policy
from kdesched.reactor import metrics as m
from kdesched.reactor.events.requests import Trigger
from kdesched.reactor.io.lease import LeaseGuard, LockBusy, ShuttingDown
from kdesched.reactor.io.ledger_store import LedgerStore
from kdesched.reactor.io.readings import RunReadings
from kdesched.reactor.run.admit import (
    Decided,
    Retention,
    RunScope,
    decide,
    record_outcomes,
    waiting_workloads,
)
from kdesched.reactor.run.continuation import Continuations, node_scope
from kdesched.reactor.run.controls import BrakeStatus, NamespaceLabels, with_deferred
from kdesched.reactor.run.notices import RunNotices
from kdesched.reactor.run.reports import RunResult, result_of
from kdesched.reactor.run.surge import Surges

log = logging.getLogger("kdesched.reactor")


class Execution:
    """Decide and carry out runs for one process (its ledger, admission pipeline and surge-first moves)."""

    def __init__(self, store: LedgerStore, pipeline: Pipeline, retention: Retention, safety: Safety, *,
                 surges: Surges, namespace_labels: NamespaceLabels, brake_status: BrakeStatus,
                 readings: RunReadings, notices: RunNotices, continuations: Continuations,
                 executor_factory: Callable[[bool], Executor], wall_clock: Callable[[], float],
                 stop: threading.Event) -> None:
        self.store = store
        self.pipeline = pipeline
        self.retention = retention
        self.safety = safety
        self.surges = surges
        self.namespace_labels = namespace_labels
        self.brake_status = brake_status
        self.readings = readings
        self.notices = notices
        self.continuations = continuations
        self.executor_factory = executor_factory
        self.wall_clock = wall_clock
        self.stop = stop
        # serve's leader tenure (None while it may act): node-local runs take no run Lease, so
        # this and the stop event are what stop them when the leader's renew deadline passes
        self.still_leading: Callable[[], str | None] = _always_leading
        self.active_runs = 0
        self.max_active_runs = 0  # for tests: never more than one balance run at a time
        self._active_lock = threading.Lock()

    def decide_and_execute(self, policy: Policy, snapshot: Any, scope: RunScope, dry_run: bool, label: str,
                           triggers: Sequence[Trigger], *, guard: LeaseGuard | None = None,
                           stop_when_spent: bool = False, cooldown_repeat: bool = False, origin: str = "",
                           every_node: Callable[[Snapshot], Snapshot] | None = None) -> RunResult:
        """Plan against the ledger, admit, evict what was admitted, record, schedule the repeat.
        ``every_node``: how a snapshot that holds only a few Nodes gets the others (decide)."""
        with self._active_lock:
            self.active_runs += 1
            self.max_active_runs = max(self.max_active_runs, self.active_runs)
        try:
            m.REACTOR_RUNS.labels(label).inc()
            started = time.perf_counter()
            now = self.wall_clock()

            def checkpoint() -> None:
                held = self._held(guard)
                if held is not None:
                    raise LockBusy(f"not evicting: {held}")
                if self.stop.is_set():
                    raise ShuttingDown("shutting down: plan abandoned before evicting")

            alerts = self.readings.alerts()
            decided = decide(self.store, policy, snapshot, scope, safety=self.safety, dry_run=dry_run, now=now,
                             pipeline=self.pipeline, retention=self.retention, stop_when_spent=stop_when_spent,
                             checkpoint=checkpoint, trigger=label, origin=origin, clock=self.wall_clock,
                             namespace_labels=self.namespace_labels, alerts=alerts,
                             brake_status=self.brake_status, surges=self.surges, every_node=every_node)
            for verdict in decided.admission.refused:
                m.REFUSALS.labels(verdict.reason.value).inc()
            # (a surge-first move refused by the pipeline: the plan's refusals are counted by execute_plan)
            if decided.chosen is not None:
                decided.chosen.tell_fallbacks()
                for c, reason in decided.chosen.refused(decided.plan):
                    record_refused(reason, strategy=c.strategy, namespace=c.pod.namespace)
            # from here on the admissions are in the ledger: whatever happens, report (never raise)
            # so a redelivery does not run again what this run already did
            def keep_going() -> str | None:
                """Asked before each eviction: the Leases' renew deadlines (client-go's rule), and SIGTERM."""
                held = self._held(guard)
                if held is not None:
                    return held
                return "shutting down" if self.stop.is_set() else None

            report = execute_plan(decided.plan, self.executor_factory(dry_run), dry_run=dry_run, trigger=label,
                                  grace_period_seconds=policy.grace_period_seconds,
                                  failure_events=policy.eviction_failure_event_notification, started=started,
                                  keep_going=keep_going, deadline=decided.deadline)
            if decided.controlled is not None:
                report = with_deferred(report, decided.controlled)  # the evictions the controls deferred
            notes = list(decided.notes)
            unread = fail_open_note(alerts, self.readings.alert_brake)
            if unread:
                log.warning("%s (%s)", unread, label)
                notes.append(unread)
            note = record_outcomes(self.store, decided, report.outcomes)
            if note:
                notes.append(note)
            if not dry_run:  # the timed-out holds, checked moves (summary.moves), then the "why not" Events
                report = self.notices.live_run_done(scope, decided, report)
            observe_run(label, "error" if decided.plan.errors else "success", report.duration_seconds)
            if not dry_run:
                repeat = self._after_run(scope, report, decided, cooldown_repeat)
                if repeat:
                    notes.append(repeat)
            return result_of(report, scope.strategies or (), triggers).with_notes(after=notes)
        finally:
            with self._active_lock:
                self.active_runs -= 1

    def _held(self, guard: LeaseGuard | None) -> str | None:
        """None while the run may act: its run Lease (if any) and serve's leader tenure are both held."""
        held = guard.still_held() if guard is not None else None
        return held if held is not None else self.still_leading()

    def resume(self) -> int:
        """Continue the moves the ledger holds pods for (a restarted process, a new leader): each
        scope is repeated soon. Returns how many; an unreadable ledger resumes nothing (logged)."""
        try:
            held = self.store.read().ledger.held_scopes()
        except Exception as exc:  # noqa: BLE001 - the next event or sweep re-decides anyway
            log.warning("could not read the disruption ledger to resume paced moves: %s", exc)
            return 0
        scopes = []
        for key in held:
            try:
                known = self.continuations.long_scopes.resolve(key)
            except ValueError:
                log.warning("ledger: ignoring held pods of an unknown run scope %r", key)
                continue
            if known is None:  # a long scope another process started (continuation.LongScopes)
                log.warning("ledger: not resuming %s, a run over more nodes or strategies than its key keeps; its "
                            "%d held pod(s) are given up at the replacement timeout", key, len(held[key]))
                continue
            scopes.append(key)
        n = self.continuations.resume(scopes)
        if n:
            log.info("resuming %d paced move(s) from the disruption ledger: %s", n, ", ".join(scopes))
        return n

    def _after_run(self, scope: RunScope, report: RunReport, decided: Decided, cooldown_repeat: bool) -> str:
        # looked at again: held back for a later wave, refused by a PDB or throttled, or failed (the
        # API server said no this time: a fault is retried by the repeat, a lasting refusal ends at the
        # replacement timeout like a paced move)
        # (node, workload) pairs: a batch of node scopes reports back to each scope what is its own
        held = {(o.eviction.pod.node_name, workload_key(o.eviction.pod)) for o in report.outcomes
                if o.result in ("paced", "blocked", "throttled", "failed", "abandoned")}
        held |= waiting_workloads(decided)  # refused for a passing reason (a PDB at 0, no room yet)
        evicted = {(o.eviction.pod.node_name, workload_key(o.eviction.pod)) for o in report.outcomes
                   if o.result in ("evicted", "already-gone")}
        # a surge-first move begun or advanced: repeated like a paced move until it ends (its repeats
        # settle the ledger, which finishes it: kdesched.reactor.run.surge)
        # (a move under way counts as progress: its repeat comes every first-repeat interval, 1 s, so
        # the replacement is seen Ready, or the move given up at its timeout, within a second)
        chosen = decided.chosen.surges if decided.chosen is not None else {}
        begun = {(chosen[k][0].node if k in chosen else "", k) for k, why in decided.surges_started.items() if not why}
        # (a move off one of the scope's nodes keeps the chain going whatever the plan says: a taint
        # removed mid-move drops its workload from the plan, and nothing else would settle it before
        # the sweep, with the Deployment at +1 meanwhile)
        surges = decided.settled.ledger.surges
        wanted, nodes = _scope_workloads(decided), set(scope.nodes or ())
        surging = {(s.node, k) for k, s in surges.items()
                   if k in wanted or (s.node in nodes and (not scope.strategies or s.strategy in scope.strategies))}
        evicted |= begun | surging | {(e.surge.node, e.workload) for e in decided.surges_ended}
        held |= begun | surging
        until = decided.admission.until if cooldown_repeat else None
        why = "a cool-down"
        if decided.retry_at is not None and (until is None or decided.retry_at < until):
            # the controls deferred evictions: re-decide when they may pass (reactor.run.controls)
            brake = decided.admission.brake
            deferred = decided.controlled.deferred if decided.controlled is not None else ()
            cause = brake.reason.value if brake is not None else deferred[0].cause if deferred else ""
            until, why = decided.retry_at, (f"the {cause.replace('-', ' ')}" if cause
                                            else "a disruption window or budget")
        cooldown_in = None if until is None else until - self.wall_clock()
        if not scope.per_node:
            return self.continuations.after_run(scope.key, held={w for _, w in held}, evicted={w for _, w in evicted},
                                                cooldown_in=cooldown_in, why=why)
        notes: dict[str, None] = {}
        for node in scope.nodes or ():  # every scope of the batch reports back: its chain goes on or ends
            note = self.continuations.after_run(node_scope(node, scope.strategies or ()),
                                                held={w for n, w in held if n == node},
                                                evicted={w for n, w in evicted if n == node},
                                                cooldown_in=cooldown_in, why=why)
            if note:
                notes[note] = None
        return "; ".join(notes)

def _always_leading() -> str | None:
    return None


def _scope_workloads(decided: Decided) -> set[str]:
    """The workloads this run's scope wanted to move (its plan, its refusals, its surge-first moves)."""
    out = {workload_key(e.pod) for e in decided.plan.evictions} | {workload_key(r.pod) for r in decided.plan.refusals}
    return out | set(decided.surges_started)

"""The reactor's runs: what each kind of event does, coordinated, on fresh state.

Why: the Knative functions and ``kdesched serve`` must behave identically, so the whole "event ->
coordinated run -> report" path lives here and both call it (functions over HTTP, serve
in-process), with requests already parsed at the edge (:mod:`.requests`). This module only
orchestrates; each concern has its own module:

* :mod:`.coordination`: coalescing a burst into one run (leading edge plus one follow-up), the
  per-node locks, and the Lease that serialises balance runs across processes;
* :mod:`.loaders`: where a run's snapshot comes from (a LIST, a taint run's node-local reads, the
  watch cache);
* :mod:`.admit`: planning against the disruption ledger and admitting the evictions atomically,
  for EVERY run (node-scoped, balance, manual, sweep, a paced repeat), so no workload ever has more
  pods down because of kdesched than its allowance, whichever runs decide at once;
* :mod:`.continuation`: repeating a run that held paced evictions until its move is done;
* :mod:`.reports`: the reply.

Balance runs (``node.added``/``node.ready``, ``run.requested``, the sweep, and a node-scoped run
that includes a Balance strategy such as TopologySpread) hold the process's balance lock and the
run Lease while deciding and evicting. Node-scoped Deschedule runs (``taints.changed``,
``labels.changed``) hold only a per-node lock. Every eviction passes the gate (cool-downs from the
ledger, then the token buckets) and the ledger's allowance (docs/reactor.md).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kdesched.admission.pipeline import Pipeline
from kdesched.engine import RunReport, execute_plan
from kdesched.evictor.execute import Executor, LiveExecutor, RecordingExecutor
from kdesched.evictor.ledger import (
    ACHIEVED,
    PENDING_TIMEOUT,
    UNKNOWN,
    WASTED,
    CheckedMove,
    backoff_key,
    workload_key,
)
from kdesched.evictor.metrics import observe_run
from kdesched.kube.client import KubeClient
from kdesched.kube.usage import MetricsCollector, read_brake_alerts, read_usage
from kdesched.model.alerts import AlertsReading
from kdesched.policy.control_plane import TAINTS_PLUGIN, exclude_control_plane_taints
from kdesched.policy.safety import Path as SafetyPath
from kdesched.policy.types import Policy
from kdesched.reactor import metrics as m
from kdesched.reactor.admit import Decided, Retention, RunScope, decide, record_outcomes, waiting_workloads
from kdesched.reactor.classifier import digest_of
from kdesched.reactor.continuation import Continuations, balance_scope, node_scope, parse_scope
from kdesched.reactor.controls import BrakeStatus, NamespaceLabels, with_deferred
from kdesched.reactor.coordination import (
    Coalescer,
    KeyedCoalescers,
    LeaseGuard,
    LockBusy,
    NodeLocks,
    ShuttingDown,
    default_identity,
)
from kdesched.reactor.events import (
    LABELS_CHANGED,
    NODE_ADDED,
    NODE_READY,
    PING,
    RUN_REQUESTED,
    TAINTS_CHANGED,
    EventScopeError,
    event_policy,
    extension_point,
    kinds_needed,
    scope_for_event,
)
from kdesched.reactor.ledger_store import LedgerStore
from kdesched.reactor.lifecycle import taints_from_json, unusable_reason
from kdesched.reactor.loaders import NODE_LOCAL_STRATEGIES, SnapshotLoader, default_loader, read_for_node_run
from kdesched.reactor.reports import RunResult, empty_result, reply, result_of
from kdesched.reactor.requests import NodeEventRequest, RequestError, RunRequest, Trigger
from kdesched.reactor.settings import ReactorSettings
from kdesched.reactor.surge import Surges
from kdesched.reactor.whynot import WhyNotEvents

log = logging.getLogger("kdesched.reactor")
MAX_CHECKED_LISTED = 20  # checked moves listed one by one in a report (the counts cover them all)

CONTINUATION_SOURCE = "/kdesched/continuation"
PACED_SUFFIX = "/paced"  # trigger id suffix of a repeat


@dataclass(frozen=True, slots=True)
class _NodeReq:
    trigger: Trigger
    changed_labels: frozenset[str] | None  # None = unknown
    strategies: tuple[str, ...] | None = None  # a repeat: exactly these (the scope that held pods)


class Reactor:
    """Runs for every event kind, with coalescing, locks, the Lease, the disruption ledger, cool-downs,
    rate limits and paced repeats."""

    def __init__(self, policy: Policy, settings: ReactorSettings, client: KubeClient, *,
                 executor_factory: Callable[[bool], Executor] | None = None, loader: SnapshotLoader = default_loader,
                 identity: str | None = None, wall_clock: Callable[[], float] | None = None,
                 mono_clock: Callable[[], float] = time.monotonic, stop: threading.Event | None = None) -> None:
        """``wall_clock``: the time of everything written to the ledger and compared with it (and
        with the cluster's own timestamps); default the API server's clock (``client.clock``,
        :mod:`kdesched.kube.clock`), never this process's own, which may be minutes off the others'."""
        # the event path's safety defaults (kdesched.policy.safety), resolved once for this process
        self.safety = settings.safety.resolve(SafetyPath.EVENT)
        self.policy, self.safety_note = exclude_control_plane_taints(policy, self.safety)
        self.settings = settings
        self.client = client
        self.executor_factory = executor_factory or self._default_executor
        self.loader = loader
        self.identity = identity or default_identity()
        self.wall_clock = wall_clock if wall_clock is not None else client.clock.now
        m.follow_clock(client.clock)
        self.stop = stop or threading.Event()
        self.store = LedgerStore(client, settings.lease_namespace, settings.lease_name)
        # surge-first moves (docs/safety.md): need the safety defaults' pacing and the ledger
        self.surges = Surges(client, enabled=settings.surge_enabled and self.safety.enabled,
                             timeout_seconds=self.safety.replacement_timeout_seconds)
        # every control at admission, in one order, built once for this policy (kdesched.admission)
        self.pipeline = Pipeline.build(settings.admission)
        self.retention = Retention.of(settings.admission)
        self.namespace_labels = NamespaceLabels(lambda: client.list_raw("Namespace").items)
        self.brake_status = BrakeStatus(clock=self.wall_clock)  # the health brake's last decision, for /readyz
        # named per object, reason and minute: at most one per minute cluster-wide (reactor.whynot)
        self.why_not = WhyNotEvents(client.post_event, wall=self.wall_clock)
        self.balance_lock = threading.Lock()
        self.node_locks = NodeLocks()
        # kdesched serve's moving average of node usage (kdesched.kube.usage.MetricsCollector), set
        # by the server when the policy balances on KubernetesMetrics; None: fresh readings per run
        self.metrics_collector: MetricsCollector | None = None
        # leading edge: the first balance event runs after a short gather, a burst's follow-up no
        # sooner than settleSeconds after it; node-scoped runs start at once (docs/reactor.md)
        self.balance_events: Coalescer[Trigger, RunResult] = Coalescer(
            self._balance_batch, delay_seconds=settings.balance_delay_seconds,
            min_interval_seconds=settings.settle_seconds, run_lock=self.balance_lock, stop=self.stop,
            clock=mono_clock)
        self.node_events: KeyedCoalescers[_NodeReq, RunResult] = KeyedCoalescers(self._node_coalescer)
        # taint events of several nodes that queue behind a run (a pool maintenance tainting 20
        # nodes at once) are decided as one run; with the safety defaults only (they read every pod)
        # (node -> the result its events get)
        self.taint_events: Coalescer[_NodeReq, Mapping[str, RunResult]] = Coalescer(self._taints_burst,
                                                                                     stop=self.stop)
        # paced evictions: the run is repeated later, never waited for in a run
        self.continuations = Continuations(self._continue, stop=self.stop,
                                           timeout_seconds=self.safety.replacement_timeout_seconds,
                                           run_batch=self._continue_batch)
        self.active_runs = 0
        self.max_active_runs = 0  # for tests: never more than one balance run at a time
        self._active_lock = threading.Lock()

    # the repeat delays (tests and benchmarks shorten them)
    @property
    def paced_recheck_first_seconds(self) -> float:
        return self.continuations.first

    @paced_recheck_first_seconds.setter
    def paced_recheck_first_seconds(self, value: float) -> None:
        self.continuations.first = value

    @property
    def paced_recheck_seconds(self) -> float:
        return self.continuations.longest

    @paced_recheck_seconds.setter
    def paced_recheck_seconds(self, value: float) -> None:
        self.continuations.longest = value

    # -- public entry points ----------------------------------------------------------------------
    def node_event(self, trigger: Trigger, request: NodeEventRequest, *, wait: bool = True) -> dict[str, Any]:
        """A semantic node event (rebalance, taints, affinity functions), parsed at the edge
        (:func:`kdesched.reactor.requests.parse_node_event`). ``wait=False`` (``kdesched serve``): a
        balance event that joins a batch another event opened returns at once with a short
        ``joined`` report instead of holding the caller's thread until that run ends."""
        node, changed = request.node, request.changed
        trigger = Trigger(trigger.type, trigger.id, trigger.source, node)
        if trigger.type in (NODE_ADDED, NODE_READY):
            waiting = self._not_usable(trigger.type, node, request.after)
            if waiting:
                m.WAITING.labels(trigger.type.removeprefix("dev.kdesched.")).inc()
                log.info("%s for %s: no run (%s)", trigger.type, node, waiting)
                return self._reply(trigger, empty_result(self._dry(), waiting, [trigger]), 1)
            offered = self.balance_events.offer(trigger, wait=wait)
            if offered is None:
                m.COALESCED.labels("rebalance").inc()
                note = "joined the queued balance run (its report lists this event in coalescedTriggers)"
                return {**self._reply(trigger, empty_result(self._dry(), note, [trigger]), 1), "joined": True}
            if offered.coalesced > 1:
                m.COALESCED.labels("rebalance").inc()
            return self._reply(trigger, offered.result, offered.coalesced)
        if trigger.type in (TAINTS_CHANGED, LABELS_CHANGED):
            kind = "taints" if trigger.type == TAINTS_CHANGED else "affinity"
            if kind == "taints" and self.safety.enabled:
                burst = self.taint_events.submit(_NodeReq(trigger, changed))
                return self._reply(trigger, burst.result[node], burst.coalesced)
            served = self.node_events.get(f"{kind}/{node}").submit(_NodeReq(trigger, changed))
            return self._reply(trigger, served.result, served.coalesced)
        raise RequestError(f"type: {trigger.type!r} is not a node event", "type")

    def run_requested(self, trigger: Trigger, request: RunRequest) -> dict[str, Any]:
        """``run.requested`` (manual) or the PingSource sweep (whole policy), parsed at the edge
        (:func:`kdesched.reactor.requests.parse_run_request` / ``parse_sweep_data``)."""
        if trigger.type not in (PING, RUN_REQUESTED):
            raise RequestError(f"type: {trigger.type!r} is not a run request", "type")
        strategies, nodes, dry = request.strategies, request.nodes, request.dry_run
        if trigger.type == PING:
            strategies, nodes = None, None
        try:
            policy = event_policy(self.policy, strategies, self.safety) if strategies else self.policy
        except EventScopeError as exc:
            raise RequestError(str(exc), "data.strategies") from None
        dry_run = self._dry() or bool(dry)
        label = "sweep" if trigger.type == PING else "manual"
        result = self._balance_locked(label, lambda: self._leased_run(policy, strategies, nodes, dry_run, label,
                                                                      [trigger]))
        return self._reply(trigger, result, 1)

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
                parse_scope(key)
            except ValueError:
                log.warning("ledger: ignoring held pods of an unknown run scope %r", key)
                continue
            scopes.append(key)
        n = self.continuations.resume(scopes)
        if n:
            log.info("resuming %d paced move(s) from the disruption ledger: %s", n, ", ".join(scopes))
        return n

    # -- batches ------------------------------------------------------------------------------------
    def _balance_locked(self, label: str, run: Callable[[], RunResult]) -> RunResult:
        if not self.balance_lock.acquire(timeout=max(self.settings.lease_wait_seconds, 0.001)):
            m.LOCK_BUSY.labels(label).inc()
            raise LockBusy("another balance run is in progress in this instance")
        try:
            return run()
        finally:
            self.balance_lock.release()

    def _balance_batch(self, triggers: Sequence[Trigger]) -> RunResult:
        names: dict[str, None] = {}
        for t in triggers:
            for n in self.settings.events.get(t.type, ()):
                names[n] = None
        strategies = tuple(names)
        if not strategies:
            return empty_result(self._dry(), "the event map runs nothing for this event", triggers)
        policy = event_policy(self.policy, strategies, self.safety)
        return self._leased_run(policy, strategies, None, self._dry(), "rebalance", triggers)

    def _node_coalescer(self, key: str) -> Coalescer[_NodeReq, RunResult]:
        kind, node = key.split("/", 1)
        return Coalescer(lambda reqs: self._node_batch(kind, node, reqs), run_lock=self.node_locks.get(node),
                         stop=self.stop)

    def _node_batch(self, kind: str, node: str, reqs: Sequence[_NodeReq]) -> RunResult:
        etype = reqs[0].trigger.type
        triggers = [r.trigger for r in reqs]
        repeat = next((r.strategies for r in reqs if r.strategies), None)
        if repeat is not None:
            strategies: tuple[str, ...] = repeat
            scoped_nodes: tuple[str, ...] | None = (node,)
            reason = f"continuing a paced move: {', '.join(repeat)} on node {node}"
        else:
            unknown = any(r.changed_labels is None for r in reqs)
            changed: set[str] = set()
            for r in reqs:
                changed |= r.changed_labels or set()
            scope = scope_for_event(self.settings, self.policy, etype, node,
                                    changed_labels=() if unknown else tuple(sorted(changed)))
            strategies, scoped_nodes, reason = scope.strategies, scope.nodes, scope.reason
        dry_run = self._dry()
        if not strategies:
            return empty_result(dry_run, reason, triggers)
        try:
            policy = event_policy(self.policy, strategies, self.safety)
        except EventScopeError as exc:
            raise RequestError(str(exc), "strategies") from None
        if any(extension_point(s) == "balance" for s in strategies):
            # counts across the cluster: must not run beside a balance run (here or elsewhere)
            result = self._balance_locked(kind, lambda: self._leased_run(policy, strategies, scoped_nodes, dry_run,
                                                                         kind, triggers))
            return result.with_notes(before=[reason])
        read = read_for_node_run(self.client, self.loader, policy, strategies, node, scoped_nodes,
                                 safety_on=self.safety.enabled, now=self.wall_clock())
        snapshot, all_pods, why = read.snapshot, read.all_pods, read.why
        scope_key = node_scope(node, strategies)
        result = self._decide_and_execute(policy, snapshot, RunScope(scope_key, strategies, scoped_nodes, all_pods),
                                          dry_run, kind, triggers, cooldown_repeat=True)
        return result.with_notes(before=[reason, f"pods read: {'all' if all_pods else 'node ' + node} ({why})",
                                         *([self.safety_note] if self.safety_note and TAINTS_PLUGIN in strategies
                                           else [])])

    def _continue(self, scope_key: str) -> None:
        """Repeat the run of ``scope_key`` (a paced move, or a cool-down that has ended)."""
        scope = parse_scope(scope_key)
        trigger_id = f"continue-{uuid.uuid4().hex[:12]}{PACED_SUFFIX}"
        if scope.kind == "node":
            strategies = scope.strategies or ()
            taints = set(strategies) <= NODE_LOCAL_STRATEGIES
            kind, etype = ("taints", TAINTS_CHANGED) if taints else ("affinity", LABELS_CHANGED)
            trigger = Trigger(etype, trigger_id, CONTINUATION_SOURCE, scope.node)
            result = self.node_events.get(f"{kind}/{scope.node}").submit(
                _NodeReq(trigger, None, tuple(strategies))).result
        else:
            trigger = Trigger(RUN_REQUESTED, trigger_id, CONTINUATION_SOURCE)
            policy = event_policy(self.policy, scope.strategies, self.safety) if scope.strategies else self.policy
            result = self._balance_locked("continuation", lambda: self._leased_run(
                policy, scope.strategies, scope.nodes, self._dry(), "continuation", [trigger]))
        results = [e.get("result") for e in result.evictions]
        log.info("continuing %s: %d eviction(s), %d still paced", scope_key, results.count("evicted"),
                 results.count("paced"))

    def _continue_batch(self, scope_keys: Sequence[str]) -> None:
        """Repeat node scopes of the same strategies as one run (kdesched.reactor.continuation).
        A node whose lock is taken (an event's run on it right now) is repeated on its own after."""
        scopes = {parse_scope(k).node: k for k in scope_keys}
        strategies = parse_scope(scope_keys[0]).strategies or ()
        taints = set(strategies) <= NODE_LOCAL_STRATEGIES
        kind, etype = ("taints", TAINTS_CHANGED) if taints else ("affinity", LABELS_CHANGED)
        trigger_id = f"continue-{uuid.uuid4().hex[:12]}{PACED_SUFFIX}"
        busy: list[str] = []
        result = self._nodes_run(kind, tuple(strategies), sorted(scopes),
                                 lambda n: [Trigger(etype, trigger_id, CONTINUATION_SOURCE, n)], busy=busy)
        if result is not None:
            results = [e.get("result") for e in result.evictions]
            log.info("continuing %d node scopes of %s in one run: %d eviction(s), %d still paced",
                     len(scopes) - len(busy), "+".join(strategies), results.count("evicted"), results.count("paced"))
        for node in busy:
            self._continue(scopes[node])

    def _taints_burst(self, reqs: Sequence[_NodeReq]) -> Mapping[str, RunResult]:
        """Taint events that queued behind a run: one node's as before, several nodes' as one run
        (whose report every one of them gets, listing them in ``coalescedTriggers``)."""
        by_node: dict[str, list[_NodeReq]] = {}
        for r in reqs:
            by_node.setdefault(r.trigger.node or "", []).append(r)
        names = {scope_for_event(self.settings, self.policy, TAINTS_CHANGED, n).strategies for n in by_node}
        strategies = next(iter(names))
        if len(by_node) == 1 or len(names) != 1 or not strategies or not set(strategies) <= NODE_LOCAL_STRATEGIES:
            out: dict[str, RunResult] = {}
            for node, node_reqs in by_node.items():
                with self.node_locks.get(node):
                    out[node] = self._node_batch("taints", node, node_reqs)
            return out
        result = self._nodes_run("taints", strategies, sorted(by_node),
                                 lambda n: [r.trigger for r in by_node[n]], busy=None)
        assert result is not None
        result = result.with_notes(before=[(f"taint changes on {len(by_node)} nodes, decided as one run: "
                                            f"{', '.join(strategies)} on nodes {', '.join(sorted(by_node))}")])
        return dict.fromkeys(by_node, result)

    def _nodes_run(self, kind: str, strategies: tuple[str, ...], nodes: Sequence[str],
                   triggers_of: Callable[[str], list[Trigger]], *, busy: list[str] | None) -> RunResult | None:
        """Node-scoped runs of several nodes decided as one: one read of every pod, one plan over
        their nodes, one ledger commit; each pod's admission keeps its own node's scope and each
        node's scope gets its repeat (RunScope.per_node). Holds the nodes' locks, taken in order:
        ``busy`` given, a node whose lock is taken is left out and listed there; None: waited for.
        None when no node was left."""
        held: list[tuple[str, threading.Lock]] = []
        try:
            for node in sorted(nodes):  # always in the same order
                lock = self.node_locks.get(node)
                if lock.acquire(blocking=busy is None):
                    held.append((node, lock))
                elif busy is not None:
                    busy.append(node)
            if not held:
                return None
            ran = tuple(n for n, _ in held)
            triggers = [t for n in ran for t in triggers_of(n)]
            policy = event_policy(self.policy, strategies, self.safety)
            snapshot = self.loader(self.client, None, kinds_needed(policy))
            scope = RunScope(f"nodes:{len(ran)}:{'+'.join(strategies)}", strategies, ran, True, per_node=True)
            return self._decide_and_execute(policy, snapshot, scope, self._dry(), kind, triggers,
                                            cooldown_repeat=True)
        finally:
            for _, lock in held:
                lock.release()

    # -- the run itself -------------------------------------------------------------------------------
    def _leased_run(self, policy: Policy, strategies: Sequence[str] | None, nodes: Sequence[str] | None,
                    dry_run: bool, label: str, triggers: Sequence[Trigger]) -> RunResult:
        """A run under the Lease (the caller holds the in-process balance lock)."""
        scope = RunScope(balance_scope(strategies, nodes), tuple(strategies) if strategies else None,
                         tuple(nodes) if nodes else None, complete=True)
        try:
            guard = LeaseGuard(self.client, self.settings.lease_namespace, self.settings.lease_name, self.identity,
                               duration_seconds=self.settings.lease_duration_seconds,
                               wait_seconds=self.settings.lease_wait_seconds, stop=self.stop,
                               renew_deadline_seconds=self.settings.lease_renew_deadline)
            with guard:
                snapshot = self.loader(self.client, None, kinds_needed(policy))
                snapshot = self._with_usage(policy, snapshot)
                # leased runs stop planning once the cluster-wide bucket is empty (kdesched.admission.bucket)
                return self._decide_and_execute(policy, snapshot, scope, dry_run, label, triggers, guard=guard,
                                                stop_when_spent=True)
        except LockBusy:
            m.LOCK_BUSY.labels(label).inc()
            raise

    def _alerts(self) -> AlertsReading | None:
        """The alert brake's reading for one run (kdesched.admission.alerts), when it is on."""
        s = self.settings.alert_brake
        if not s.enabled:
            return None
        return read_brake_alerts(self.client, s.url, secret_namespace=s.token_secret_namespace,
                                 secret_name=s.token_secret_name, token_file=s.token_file, ca_file=s.ca_file,
                                 timeout=s.timeout_seconds, settle_seconds=s.settle_seconds)

    def _with_usage(self, policy: Policy, snapshot: Any) -> Any:
        """The snapshot plus the measured usage the policy balances on (LowNodeUtilization's
        metricsUtilization), read now, with the event path's young-node rule; unchanged when no
        strategy of ``policy`` reads usage (kdesched.kube.usage)."""
        usage = read_usage(self.client, policy, self.settings.usage, event_path=True,
                           collector=self.metrics_collector)
        if usage is None:
            return snapshot
        return replace(snapshot, actual_usage=usage, notes=(*snapshot.notes, *usage.notes()))

    def _decide_and_execute(self, policy: Policy, snapshot: Any, scope: RunScope, dry_run: bool, label: str,
                            triggers: Sequence[Trigger], *, guard: LeaseGuard | None = None,
                            stop_when_spent: bool = False, cooldown_repeat: bool = False) -> RunResult:
        """Plan against the ledger, admit, evict what was admitted, record, schedule the repeat."""
        with self._active_lock:
            self.active_runs += 1
            self.max_active_runs = max(self.max_active_runs, self.active_runs)
        try:
            m.REACTOR_RUNS.labels(label).inc()
            started = time.perf_counter()
            now = self.wall_clock()

            def checkpoint() -> None:
                held = guard.still_held() if guard is not None else None
                if held is not None:
                    raise LockBusy(f"not evicting: {held}")
                if self.stop.is_set():
                    raise ShuttingDown("shutting down: plan abandoned before evicting")

            decided = decide(self.store, policy, snapshot, scope, safety=self.safety, dry_run=dry_run, now=now,
                             pipeline=self.pipeline, retention=self.retention, stop_when_spent=stop_when_spent,
                             checkpoint=checkpoint, trigger=label, clock=self.wall_clock,
                             namespace_labels=self.namespace_labels, alerts=self._alerts(),
                             brake_status=self.brake_status, surges=self.surges)
            for verdict in decided.admission.refused:
                m.REFUSALS.labels(verdict.reason.value).inc()
            # from here on the admissions are in the ledger: whatever happens, report (never raise)
            # so a redelivery does not run again what this run already did
            def keep_going() -> str | None:
                """Asked before each eviction: the Lease's renew deadline (client-go's rule), and SIGTERM."""
                held = guard.still_held() if guard is not None else None
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
            note = record_outcomes(self.store, decided, report.outcomes)
            if note:
                notes.append(note)
            if decided.written and not dry_run:
                self._post_timed_out(decided)
            if not dry_run:  # checked moves (summary.moves), then the "why not" Events
                report = replace(report, extra={**report.extra, "moves": self._checked_moves(decided, report),
                                                **_surge_summary(decided)})
                self._post_why_not(scope, report)
            observe_run(label, "error" if decided.plan.errors else "success", report.duration_seconds)
            if not dry_run:
                repeat = self._after_run(scope, report, decided, cooldown_repeat)
                if repeat:
                    notes.append(repeat)
            return result_of(report, scope.strategies or (), triggers).with_notes(after=notes)
        finally:
            with self._active_lock:
                self.active_runs -= 1

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
        # settle the ledger, which finishes it: kdesched.reactor.surge)
        # (a move under way counts as progress: its repeat comes every first-repeat interval, 1 s, so
        # the replacement is seen Ready, or the move given up at its timeout, within a second)
        chosen = decided.chosen.surges if decided.chosen is not None else {}
        begun = {(chosen[k][0].node if k in chosen else "", k) for k, why in decided.surges_started.items() if not why}
        surges = decided.settled.ledger.surges
        surging = {(surges[k].node, k) for k in set(surges) & _scope_workloads(decided)}
        evicted |= begun | surging | {(e.surge.node, e.workload) for e in decided.surges_ended}
        held |= begun | surging
        until = decided.admission.until if cooldown_repeat else None
        why = "a cool-down"
        if decided.retry_at is not None and (until is None or decided.retry_at < until):
            # the controls deferred evictions: re-decide when they may pass (reactor.controls)
            brake = decided.admission.brake
            until, why = decided.retry_at, (f"the {brake.reason.value.replace('-', ' ')}" if brake is not None
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

    def _post_why_not(self, scope: RunScope, report: RunReport) -> None:
        """The "why not" Events of the run (reactor.whynot): on the node for a node event's run (on
        each pod's own node for a batch of node scopes)."""
        try:
            node = parse_scope(scope.key).node or None
        except ValueError:
            node = None
        try:
            self.why_not.run_done(report, node, own_nodes=scope.per_node)
        except Exception:  # an Event must never fail a run whose evictions happened
            log.exception("could not post the run's \"why not\" Events")

    def _checked_moves(self, decided: Decided, report: RunReport) -> dict[str, Any]:
        """Checked moves (docs/safety.md): the moves this run made, and the outcome of those its
        settle of the ledger ended (counted once cluster-wide: only by the run whose write of the
        settled ledger went through), as metrics, ``WastedMove`` Events and the report's
        ``summary.moves``."""
        admitted = decided.admitted_uids
        made = [o for o in report.outcomes if o.result in ("evicted", "already-gone") and o.eviction.pod.uid in admitted]
        for o in made:
            m.MOVES_MADE.labels(o.eviction.strategy).inc()
        checked = decided.settled.checked if decided.written else ()
        for c in checked:
            m.MOVES.labels(c.strategy, c.outcome).inc()
            if c.seconds is not None:
                m.MOVE_READY.labels(c.strategy).observe(c.seconds)
        backoffs = decided.settled.ledger.backoffs
        cd = self.settings.admission

        def backoff_note(c: CheckedMove) -> str:
            b = backoffs.get(backoff_key(c.workload, c.strategy))
            if b is None:
                return ""
            until = datetime.fromtimestamp(b.ends(cd.backoff_base_seconds, cd.backoff_max_seconds), UTC)
            return (f"{c.workload} is backed off for {c.strategy} after {b.wasted} wasted move(s) until "
                    f"{until:%Y-%m-%dT%H:%M:%SZ}")

        if checked:
            try:
                self.why_not.wasted(checked, backoff_note)
            except Exception:  # an Event must never fail a run whose evictions happened
                log.exception("could not post the run's WastedMove Events")
        outcomes = [c.outcome for c in checked]
        return {"made": len(made), "checked": len(checked), "achieved": outcomes.count(ACHIEVED),
                "wasted": outcomes.count(WASTED), "pendingTimeout": outcomes.count(PENDING_TIMEOUT),
                "unknown": outcomes.count(UNKNOWN), "outcomes": [c.to_json() for c in checked[:MAX_CHECKED_LISTED]]}

    def _post_timed_out(self, decided: Decided) -> None:
        """An Event on each held pod the ledger gave up at the replacement timeout (the move ends paced)."""
        m.REPLACEMENT_TIMEOUTS.inc(len({key for key, _ in decided.settled.timed_out}))
        for key, h in decided.settled.timed_out:
            namespace, _, name = h.pod.partition("/")
            self.client.create_event(namespace=namespace, name=name, uid=h.uid, reason="EvictionPaced",
                                     note=(f"kdesched held this pod's eviction ({h.scope}) until {key} was back at its "
                                           f"Ready count, which did not happen within replacementTimeoutSeconds "
                                           f"({self.safety.replacement_timeout_seconds:g}s); the next event or sweep "
                                           "re-decides"))

    # -- helpers -----------------------------------------------------------------------------------
    def _dry(self) -> bool:
        return self.settings.dry_run

    def _dry_run_why(self, dry_run: bool) -> str:
        """The report's ``dryRunWhy``, as ``kdesched run`` gives it: what made this run a dry run."""
        if not dry_run:
            return ("live: not a dry-run deployment (no --dry-run, kdesched.dryRun or $KDESCHED_DRY_RUN) "
                    "and the event did not ask for one")
        if self._dry():
            return self.settings.dry_run_why or "a dry-run deployment"
        return "the event asked for one (data.dryRun: true)"

    def _default_executor(self, dry_run: bool) -> Executor:
        return RecordingExecutor() if dry_run else LiveExecutor(self.client)

    def _not_usable(self, etype: str, node: str, after: Mapping[str, Any]) -> str:
        """Why a rebalance trigger runs nothing ("" = it runs): the node is not usable for ordinary
        pods (:mod:`kdesched.reactor.lifecycle`). Decided on the event's own ``after`` when it says
        (the classifier's view at that write: so exactly one event of a node's way to usable runs,
        however late it is delivered); else, for a ``node.added`` without those fields, on the node
        as the API server has it now."""
        usable = after.get("usable")
        if isinstance(usable, bool):
            if usable:
                return ""
            why = after.get("unusable")
            if not isinstance(why, str) or not why:
                taints = taints_from_json(after.get("taints")) or []
                why = unusable_reason(bool(after.get("ready")), bool(after.get("unschedulable")), taints) \
                    or "not usable"
            return self._waiting_note(etype, node, why)
        if etype == NODE_READY:
            return ""  # a node.ready without the field: a sender that only sends it on the transition
        raw = self.client.get_raw("Node", node)
        if raw is None:
            return f"node {node} no longer exists; nothing to do"
        why = digest_of(raw).unusable_reason
        return self._waiting_note(etype, node, why) if why else ""

    @staticmethod
    def _waiting_note(etype: str, node: str, why: str) -> str:
        short = etype.removeprefix("dev.kdesched.")
        return (f"{short}: node {node} is not usable for ordinary pods yet ({why}): no run; waiting for "
                f"node.ready (sent once it becomes usable)")

    def _reply(self, trigger: Trigger, result: RunResult, coalesced: int) -> dict[str, Any]:
        return reply(trigger, result, coalesced, self._dry_run_why(bool(result.body.get("dryRun"))))


def _scope_workloads(decided: Decided) -> set[str]:
    """The workloads this run's scope wanted to move (its plan, its refusals, its surge-first moves)."""
    out = {workload_key(e.pod) for e in decided.plan.evictions} | {workload_key(r.pod) for r in decided.plan.refusals}
    return out | set(decided.surges_started)


def _surge_summary(decided: Decided) -> dict[str, Any]:
    """``summary.surge`` of a run report: the surge-first moves begun, those that ended in its settle,
    and the pods that could not move surge-first and kept the normal rules (with why)."""
    chosen = decided.chosen
    if chosen is None and not decided.surges_ended:
        return {}
    started = []
    for key, (s, _) in (chosen.surges.items() if chosen is not None else ()):
        why = decided.surges_started.get(key)
        started.append({"workload": key, "pod": s.pod, "node": s.node, "replicas": s.original, "surged": s.surged,
                        "why": chosen.candidates[key].why if chosen else "",
                        "result": "begun" if why == "" else ("not written" if why is None else "not begun"),
                        **({"message": why} if why else {})})
    fallbacks = [{"workload": workload_key(c.pod), "pod": c.pod.key, "node": c.pod.node_name, "reason": n.reason.value,
                  "message": n.message, "why": c.why} for c, n in (chosen.fallbacks if chosen is not None else ())]
    return {"surge": {"started": started, "ended": [e.to_json() for e in decided.surges_ended],
                      "fallbacks": fallbacks}}

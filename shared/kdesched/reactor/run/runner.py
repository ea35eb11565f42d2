"""The reactor's runs: what each kind of event does, coordinated, on fresh state.

Why: the Knative functions and ``kdesched serve`` must behave identically, so the whole "event ->
coordinated run -> report" path lives here and both call it (functions over HTTP, serve
in-process), with requests already parsed at the edge (:mod:`kdesched.reactor.events.requests`).
:class:`Reactor` only decides which run an event makes and under which locks; each other concern
is a collaborator with one job:

* :mod:`.coalescing` and :mod:`kdesched.reactor.io.lease`: coalescing a burst into one run (leading
  edge plus one follow-up), the per-node locks, and the Lease that serialises balance runs across
  processes; :mod:`.noderuns`: node-scoped runs, several nodes' decided as one when due together;
* :mod:`kdesched.reactor.io.loaders` and :mod:`kdesched.reactor.io.readings`: where a run's
  snapshot comes from (a LIST, a taint run's node-local reads, the watch cache), and its alerts
  and measured usage; :mod:`kdesched.reactor.io.probe`: whether a new node is usable yet;
* :mod:`.execution`: the run itself, planned against the disruption ledger and admitted atomically
  (:mod:`.admit`) for EVERY run (node-scoped, balance, manual, sweep, a paced repeat), so no
  workload ever has more pods down because of kdesched than its allowance, whichever runs decide
  at once; then executed, recorded and told about (:mod:`.notices`);
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
from typing import Any

from kdesched.admission.pipeline import Pipeline
from kdesched.evictor.execute import Executor, LiveExecutor, RecordingExecutor
from kdesched.evictor.ledger import workload_key
from kdesched.kube.client import KubeClient
from kdesched.policy.control_plane import TAINTS_PLUGIN, exclude_control_plane_taints
from kdesched.policy.safety import Path as SafetyPath
from kdesched.policy.types import Policy
from kdesched.reactor import metrics as m
from kdesched.reactor.events.requests import (
    NodeEventRequest,
    RequestError,
    RunRequest,
    Trigger,
    request_policy,
)
from kdesched.reactor.events.routing import (
    LABELS_CHANGED,
    NODE_ADDED,
    NODE_READY,
    PING,
    RUN_REQUESTED,
    TAINTS_CHANGED,
    enable_strategies,
    event_policy,
    kinds_needed,
)
from kdesched.reactor.io.lease import LeaseGuard, LockBusy, default_identity
from kdesched.reactor.io.ledger_store import LedgerStore
from kdesched.reactor.io.loaders import (
    NODE_LOCAL_STRATEGIES,
    SnapshotLoader,
    default_loader,
)
from kdesched.reactor.io.probe import NodeProbe
from kdesched.reactor.io.readings import RunReadings
from kdesched.reactor.io.whynot import WhyNotEvents
from kdesched.reactor.run.admit import (
    Retention,
    RunScope,
)
from kdesched.reactor.run.coalescing import Coalescer, KeyedCoalescers
from kdesched.reactor.run.continuation import (
    ORIGINS,
    READY_WAKE_SECONDS,
    Continuations,
    balance_scope,
    parse_scope,
)
from kdesched.reactor.run.controls import BrakeStatus, NamespaceLabels
from kdesched.reactor.run.execution import Execution
from kdesched.reactor.run.noderuns import NodeReq, NodeRuns
from kdesched.reactor.run.notices import RunNotices
from kdesched.reactor.run.reports import AnsweredRuns, RunResult, dry_run_why, empty_result, reply
from kdesched.reactor.run.settings import ReactorSettings
from kdesched.reactor.run.surge import Surges

log = logging.getLogger("kdesched.reactor")

CONTINUATION_SOURCE = "/kdesched/continuation"
PACED_SUFFIX = "/paced"  # trigger id suffix of a repeat


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
        self.policy = exclude_control_plane_taints(policy, self.safety)[0]
        # what a taint run reports about the rule: for the policy's own RemovePodsViolatingNodeTaints,
        # or the one the event map runs on default args when the policy has none (event_policy)
        self.safety_note = exclude_control_plane_taints(enable_strategies(policy, [TAINTS_PLUGIN]), self.safety)[1]
        self.settings = settings
        self.client = client
        self.loader = loader
        self.identity = identity or default_identity()
        self.wall_clock = wall_clock if wall_clock is not None else client.clock.now
        m.follow_clock(client.clock)
        self.stop = stop or threading.Event()
        self.brake_status = BrakeStatus(clock=self.wall_clock)  # the health brake's last decision, for /readyz
        self.readings = RunReadings(client, settings.alert_brake, settings.usage)
        self.probe = NodeProbe(client)
        self.balance_lock = threading.Lock()
        self.answered = AnsweredRuns()  # run.requested events this process ran (their redeliveries)
        # node-scoped runs, each under its node's lock; several nodes' as one when due together
        self.node_runs = NodeRuns(self.policy, settings, self.safety, client, decide=self._decide_and_execute,
                                  balanced=self._balanced, loader=lambda: self.loader, wall_clock=self.wall_clock,
                                  safety_note=self.safety_note, stop=self.stop)
        self.node_locks = self.node_runs.node_locks
        # leading edge: the first balance event runs after a short gather, a burst's follow-up no
        # sooner than settleSeconds after it; node-scoped runs start at once (docs/reactor.md)
        self.balance_events: Coalescer[Trigger, RunResult] = Coalescer(
            self._balance_batch, delay_seconds=settings.balance_delay_seconds,
            min_interval_seconds=settings.settle_seconds, run_lock=self.balance_lock, stop=self.stop,
            clock=mono_clock)
        self.node_events: KeyedCoalescers[NodeReq, RunResult] = KeyedCoalescers(self.node_runs.coalescer)
        # taint events of several nodes that queue behind a run (a pool maintenance tainting 20
        # nodes at once) are decided as one run; with the safety defaults only (they read every pod)
        # (node -> the result its events get)
        self.taint_events: Coalescer[NodeReq, Mapping[str, RunResult]] = Coalescer(self.node_runs.taints_burst,
                                                                                   stop=self.stop)
        # paced evictions: the run is repeated later, never waited for in a run
        self.continuations = Continuations(self._continue, stop=self.stop,
                                           timeout_seconds=self.safety.replacement_timeout_seconds,
                                           run_batch=self._continue_batch)
        # the run itself: the ledger, every control at admission in one order (built once for this
        # policy: kdesched.admission), surge-first moves (docs/safety.md: they need the safety
        # defaults' pacing) and what a live run tells (its Events named per object, reason and minute)
        timeout = self.safety.replacement_timeout_seconds
        self.execution = Execution(
            LedgerStore(client, settings.lease_namespace, settings.lease_name), Pipeline.build(settings.admission),
            Retention.of(settings.admission), self.safety,
            surges=Surges(client, enabled=settings.surge_enabled and self.safety.enabled, timeout_seconds=timeout),
            namespace_labels=NamespaceLabels(lambda: client.list_raw("Namespace").items),
            brake_status=self.brake_status, readings=self.readings,
            notices=RunNotices(client, WhyNotEvents(client.post_event, wall=self.wall_clock), settings.admission,
                               timeout),
            continuations=self.continuations,
            executor_factory=executor_factory or (lambda dry: RecordingExecutor() if dry else LiveExecutor(client)),
            wall_clock=self.wall_clock, stop=self.stop)

    # -- public entry points ----------------------------------------------------------------------
    def node_event(self, trigger: Trigger, request: NodeEventRequest, *, wait: bool = True) -> dict[str, Any]:
        """A semantic node event (rebalance, taints, affinity functions), parsed at the edge
        (:func:`kdesched.reactor.events.requests.parse_node_event`). ``wait=False`` (``kdesched serve``): a
        balance event that joins a batch another event opened returns at once with a short
        ``joined`` report instead of holding the caller's thread until that run ends."""
        node, changed = request.node, request.changed
        trigger = Trigger(trigger.type, trigger.id, trigger.source, node)
        if trigger.type in (NODE_ADDED, NODE_READY):
            waiting = self.probe.not_usable(trigger.type, node, request.after)
            if waiting:
                m.WAITING.labels(trigger.type.removeprefix("dev.kdesched.")).inc()
                log.info("%s for %s: no run (%s)", trigger.type, node, waiting)
                return self._reply(trigger, empty_result(self.settings.dry_run, waiting, [trigger]), 1)
            offered = self.balance_events.offer(trigger, wait=wait)
            if offered is None:
                m.COALESCED.labels("rebalance").inc()
                note = "joined the queued balance run (its report lists this event in coalescedTriggers)"
                return {**self._reply(trigger, empty_result(self.settings.dry_run, note, [trigger]), 1), "joined": True}
            if offered.coalesced > 1:
                m.COALESCED.labels("rebalance").inc()
            return self._reply(trigger, offered.result, offered.coalesced)
        if trigger.type in (TAINTS_CHANGED, LABELS_CHANGED):
            kind = "taints" if trigger.type == TAINTS_CHANGED else "affinity"
            if kind == "taints" and self.safety.enabled:
                burst = self.taint_events.submit(NodeReq(trigger, changed))
                return self._reply(trigger, burst.result[node], burst.coalesced)
            served = self.node_events.get(f"{kind}/{node}").submit(NodeReq(trigger, changed))
            return self._reply(trigger, served.result, served.coalesced)
        raise RequestError(f"type: {trigger.type!r} is not a node event", "type")

    def run_requested(self, trigger: Trigger, request: RunRequest) -> dict[str, Any]:
        """``run.requested`` (manual) or the PingSource sweep (whole policy), parsed at the edge
        (:func:`kdesched.reactor.events.requests.parse_run_request` / ``parse_sweep_data``)."""
        if trigger.type not in (PING, RUN_REQUESTED):
            raise RequestError(f"type: {trigger.type!r} is not a run request", "type")
        strategies, nodes, dry = request.strategies, request.nodes, request.dry_run
        if trigger.type == PING:
            strategies, nodes = None, None
        policy = request_policy(self.policy, self.safety, strategies, nodes)
        dry_run = self.settings.dry_run or bool(dry)
        label = "sweep" if trigger.type == PING else "manual"
        manual = trigger.type == RUN_REQUESTED
        ran: list[RunResult] = []  # a redelivery's first run (looked up again under the lock: it may just have ended)

        def once() -> RunResult:
            if manual and (done := self.answered.get(trigger, request)) is not None:
                ran.append(done)
                return done
            result = self._leased_run(policy, strategies, nodes, dry_run, label, [trigger])
            if manual:
                self.answered.put(trigger, request, result)
            return result

        found = self.answered.get(trigger, request) if manual else None
        result = found if found is not None else self._balance_locked(label, once)
        if found is None and not ran:
            return self._reply(trigger, result, 1)
        log.info("run.requested %s from %s: a redelivery of a run this process made; its report again",
                 trigger.id, trigger.source)
        return {**self._reply(trigger, result, 1), "redelivered": True}

    def resume(self) -> int:
        """Continue the moves the ledger holds pods for (a restarted process, a new leader)."""
        return self.execution.resume()

    def pod_turned_ready(self, pod: Any) -> None:
        """A watch cache saw ``pod`` turn Ready (a replacement): the paced moves of its workload go on
        now, not at their timer, and one that timed out waiting for it starts again."""
        self.continuations.wake({workload_key(pod)}, within=READY_WAKE_SECONDS)

    # -- batches ------------------------------------------------------------------------------------
    def _balance_locked(self, label: str, run: Callable[[], RunResult]) -> RunResult:
        if not self.balance_lock.acquire(timeout=max(self.settings.lease_wait_seconds, 0.001)):
            m.LOCK_BUSY.labels(label).inc()
            raise LockBusy("another balance run is in progress in this instance")
        try:
            return run()
        finally:
            self.balance_lock.release()

    def _balanced(self, label: str, policy: Policy, strategies: Sequence[str] | None, nodes: Sequence[str] | None,
                  dry_run: bool, triggers: Sequence[Trigger]) -> RunResult:
        """A run under the process's balance lock and the Lease."""
        return self._balance_locked(label, lambda: self._leased_run(policy, strategies, nodes, dry_run, label,
                                                                    triggers))

    def _balance_batch(self, triggers: Sequence[Trigger]) -> RunResult:
        names: dict[str, None] = {}
        for t in triggers:
            for n in self.settings.events.get(t.type, ()):
                names[n] = None
        strategies = tuple(names)
        if not strategies:
            return empty_result(self.settings.dry_run, "the event map runs nothing for this event", triggers)
        policy = event_policy(self.policy, strategies, self.safety)
        return self._leased_run(policy, strategies, None, self.settings.dry_run, "rebalance", triggers)

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
                NodeReq(trigger, None, tuple(strategies))).result
        else:
            full = self.continuations.long_scopes.resolve(scope_key)
            if full is None:  # a long scope this process did not start: its held pods lapse (LongScopes)
                log.warning("not continuing %s: its nodes and strategies were not kept by this process; its held "
                            "pods are given up at the replacement timeout, and the next request or sweep "
                            "re-decides them", scope_key)
                self.continuations.after_run(scope_key, held=(), evicted=())
                return
            trigger = Trigger(RUN_REQUESTED, trigger_id, CONTINUATION_SOURCE)
            policy = event_policy(self.policy, full.strategies, self.safety) if full.strategies else self.policy
            # labelled a continuation, and the run it repeats kept as its origin (disruption windows
            # that filter on sweep or manual cover the repeats too)
            result = self._balance_locked("continuation", lambda: self._leased_run(
                policy, full.strategies, full.nodes, self.settings.dry_run, "continuation", [trigger],
                origin=full.origin))
        results = [e.get("result") for e in result.evictions]
        log.info("continuing %s: %d eviction(s), %d still paced", scope_key, results.count("evicted"),
                 results.count("paced"))

    def _continue_batch(self, scope_keys: Sequence[str]) -> None:
        """Repeat node scopes of the same strategies as one run (kdesched.reactor.run.continuation).
        A node whose lock is taken (an event's run on it right now) is repeated on its own after."""
        scopes = {parse_scope(k).node: k for k in scope_keys}
        strategies = parse_scope(scope_keys[0]).strategies or ()
        taints = set(strategies) <= NODE_LOCAL_STRATEGIES
        kind, etype = ("taints", TAINTS_CHANGED) if taints else ("affinity", LABELS_CHANGED)
        trigger_id = f"continue-{uuid.uuid4().hex[:12]}{PACED_SUFFIX}"
        busy: list[str] = []
        result = self.node_runs.nodes_run(kind, tuple(strategies), sorted(scopes),
                                          lambda n: [Trigger(etype, trigger_id, CONTINUATION_SOURCE, n)], busy=busy)
        if result is not None:
            results = [e.get("result") for e in result.evictions]
            log.info("continuing %d node scopes of %s in one run: %d eviction(s), %d still paced",
                     len(scopes) - len(busy), "+".join(strategies), results.count("evicted"), results.count("paced"))
        for node in busy:
            self._continue(scopes[node])

    # -- the run itself -------------------------------------------------------------------------------
    def _leased_run(self, policy: Policy, strategies: Sequence[str] | None, nodes: Sequence[str] | None,
                    dry_run: bool, label: str, triggers: Sequence[Trigger], *, origin: str = "") -> RunResult:
        """A run under the Lease (the caller holds the in-process balance lock). ``origin``: the
        label of the run a continuation repeats (its scope key keeps it)."""
        origin = origin or (label if label in ORIGINS else "")
        key = balance_scope(strategies, nodes, origin)
        self.continuations.long_scopes.remember(key, strategies, nodes)
        scope = RunScope(key, tuple(strategies) if strategies else None,
                         tuple(nodes) if nodes else None, complete=True)
        try:
            guard = LeaseGuard(self.client, self.settings.lease_namespace, self.settings.lease_name, self.identity,
                               duration_seconds=self.settings.lease_duration_seconds,
                               wait_seconds=self.settings.lease_wait_seconds, stop=self.stop,
                               renew_deadline_seconds=self.settings.lease_renew_deadline)
            with guard:
                snapshot = self.loader(self.client, None, kinds_needed(policy))
                snapshot = self.readings.with_usage(policy, snapshot)
                # leased runs stop planning once the cluster-wide bucket is empty (kdesched.admission.bucket)
                return self._decide_and_execute(policy, snapshot, scope, dry_run, label, triggers, guard=guard,
                                                stop_when_spent=True, origin=origin)
        except LockBusy:
            m.LOCK_BUSY.labels(label).inc()
            raise

    def _decide_and_execute(self, policy: Policy, snapshot: Any, scope: RunScope, dry_run: bool, label: str,
                            triggers: Sequence[Trigger], **kw: Any) -> RunResult:
        """The run itself, once its snapshot is read and its locks are held (:mod:`.execution`); the
        seam a benchmark wraps to hold the Lease around every run (bench/bench_ledger.py)."""
        return self.execution.decide_and_execute(policy, snapshot, scope, dry_run, label, triggers, **kw)

    def _reply(self, trigger: Trigger, result: RunResult, coalesced: int) -> dict[str, Any]:
        return reply(trigger, result, coalesced, dry_run_why(bool(result.body.get("dryRun")), self.settings))

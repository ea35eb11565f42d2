"""The reactor's runs: what each kind of event does, coordinated, on fresh state.

Why: the Knative functions and ``kdesched serve`` must behave identically, so the whole "event ->
coordinated run -> report" path lives here and both call it (functions over HTTP, serve
in-process). Rules (docs/reactor.md):

* Balance runs (``node.added``/``node.ready``, ``run.requested``, the sweep, and any node-scoped
  run that includes a Balance strategy such as TopologySpread) hold the process's balance lock and
  the Lease while deciding and evicting; bursts of node events are coalesced into one run.
* Node-scoped Deschedule runs (``taints.changed``, ``labels.changed``) hold only a per-node lock:
  they read that node's pods again and evict only pods that violate a rule on that node, so a
  second instance repeating the run finds the same pods already terminating (filtered) or gone
  (404 = already-gone) and evicts nothing more. They read the cool-down history from the Lease.
* Every eviction passes the gate: cool-downs (history) then token buckets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kdesched.engine import RunReport, execute_plan, plan_run
from kdesched.evictor.execute import Executor, LiveExecutor, RecordingExecutor
from kdesched.evictor.metrics import observe_run
from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.model.records import Node
from kdesched.model.selectors import parse_selector
from kdesched.model.snapshot import Snapshot
from kdesched.policy.control_plane import TAINTS_PLUGIN, exclude_control_plane_taints
from kdesched.policy.safety import Path as SafetyPath
from kdesched.policy.types import Policy
from kdesched.reactor import metrics as m
from kdesched.reactor.classifier import digest_of
from kdesched.reactor.coordination import (
    Coalescer,
    KeyedCoalescers,
    LeaseGuard,
    LockBusy,
    NodeLocks,
    ShuttingDown,
    default_identity,
    read_history,
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
    needs_all_pods,
    scope_for_event,
)
from kdesched.reactor.lifecycle import taints_from_json, unusable_reason
from kdesched.reactor.limits import EvictionHistory, RateLimiter, make_gate, owner_uid
from kdesched.reactor.requests import NodeEventRequest, RequestError, RunRequest, Trigger
from kdesched.reactor.settings import ReactorSettings

log = logging.getLogger("kdesched.reactor")

SnapshotLoader = Callable[[KubeClient, "Collection[str] | None", Sequence[str]], Snapshot]
MAX_TRIGGERS_LISTED = 20
PACED_RECHECK_FIRST_SECONDS = 1.0  # first repeat of a node-scoped run with paced evictions, after it evicted
PACED_RECHECK_SECONDS = 10.0  # longest delay between repeats: the delay doubles while nothing moves
PACED_SUFFIX = "/paced"  # trigger id suffix of such a repeat


@dataclass(frozen=True, slots=True)
class _NodeReq:
    trigger: Trigger
    changed_labels: frozenset[str] | None  # None = unknown


def default_loader(client: KubeClient, pod_nodes: Collection[str] | None, include: Sequence[str]) -> Snapshot:
    return load_live_snapshot(client, pod_nodes=pod_nodes, include=include)


CACHE_NOTE = "read from the watch cache"

# Deschedule strategies whose decision for a node reads only that node (its taints) and the run's
# "at least 2 Ready nodes" rule: a node-scoped run of these alone need not LIST every Node.
# (RemovePodsViolatingNodeAffinity is not one: it asks whether the pod fits any other node.)
NODE_LOCAL_STRATEGIES = frozenset({"RemovePodsViolatingNodeTaints"})
# Deschedule strategies that ask whether a pod fits another node (resources, pod slots, inter-pod
# anti-affinity), which the event node's pods alone cannot answer (they make other nodes look empty)
FITS_ANOTHER_NODE = frozenset({"RemovePodsViolatingNodeAffinity"})
WITNESS_PAGE = 4  # nodes per page while looking for a second Ready node


def node_local_snapshot(client: KubeClient, node: str, include: Sequence[str],
                        node_selector: str | None = None) -> Snapshot:
    """What a node-scoped run of :data:`NODE_LOCAL_STRATEGIES` needs, read over the API: the node's
    pods (``spec.nodeName``), the other ``include`` kinds but Nodes, the event node (one GET) and
    just enough other Nodes (small LIST pages) to know whether the run's "at least 2 Ready nodes
    selected by the policy" rule holds. It decides exactly what the full Node list would; when the
    run has something to evict, the safety defaults read everything anyway (somewhere to go)."""
    pods = load_live_snapshot(client, pod_nodes=[node], include=[k for k in include if k != "Node"])
    selector = parse_selector(node_selector, "nodeSelector") if node_selector else None

    def counts(n: Node) -> bool:
        return n.ready and (selector is None or selector.matches(n.labels))

    nodes: list[Node] = []
    raw = client.get_raw("Node", node)
    if raw is not None:
        nodes.append(Node.from_api(raw))
    read = 0
    if sum(map(counts, nodes)) < 2:
        for page in client.list_pages("Node", page_size=WITNESS_PAGE):
            read += len(page)
            nodes.extend(n for n in map(Node.from_api, page) if n.name != node and counts(n))
            if sum(map(counts, nodes)) >= 2:
                break
    note = (f"nodes read: {node} and {read} other(s) ({len(nodes) - (raw is not None)} Ready and selected; "
            "a taint decision needs only its node and whether 2+ Ready nodes exist)")
    return Snapshot.build(nodes, pods.pods, pods.pdbs, pods.priority_classes.values(), pods.namespaces.values(),
                          pods.pvcs.values(), (*pods.notes, note))


class CachedLoader:
    """A :data:`SnapshotLoader` that plans from a warm :class:`~kdesched.kube.cache.ClusterCache`
    once it has listed every kind the run reads (and is under its ceiling), else LISTs like
    :func:`default_loader`. ``kdesched serve`` and a function with ``KDESCHED_CACHE=1`` use it."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.from_cache = 0
        self.listed = 0

    def __call__(self, client: KubeClient, pod_nodes: Collection[str] | None, include: Sequence[str]) -> Snapshot:
        if self.cache.usable(include):
            try:
                snapshot = self.cache.snapshot(pod_nodes, include, notes=(CACHE_NOTE,))
            except LookupError:  # gave up in between: LIST
                pass
            else:
                self.from_cache += 1
                return snapshot
        self.listed += 1
        return load_live_snapshot(client, pod_nodes=pod_nodes, include=include)


def empty_report(dry_run: bool, note: str) -> dict[str, Any]:
    return {"dryRun": dry_run, "evictions": [], "blocked": [], "durationSeconds": 0.0, "notes": [note],
            "errors": [], "summary": {}}


class Reactor:
    """Runs for every event kind, with coalescing, locks, the Lease, cool-downs and rate limits."""

    def __init__(self, policy: Policy, settings: ReactorSettings, client: KubeClient, *,
                 executor_factory: Callable[[bool], Executor] | None = None, loader: SnapshotLoader = default_loader,
                 identity: str | None = None, wall_clock: Callable[[], float] = time.time,
                 mono_clock: Callable[[], float] = time.monotonic, stop: threading.Event | None = None) -> None:
        # the event path's safety defaults (kdesched.policy.safety), resolved once for this process
        self.safety = settings.safety.resolve(SafetyPath.EVENT)
        self.policy, self.safety_note = exclude_control_plane_taints(policy, self.safety)
        self.settings = settings
        self.client = client
        self.executor_factory = executor_factory or self._default_executor
        self.loader = loader
        self.identity = identity or default_identity()
        self.wall_clock = wall_clock
        self.stop = stop or threading.Event()
        self.limiter = RateLimiter(settings.rate_limits, mono_clock)
        self.balance_lock = threading.Lock()
        self.node_locks = NodeLocks()
        self._history_lock = threading.Lock()
        self._unsaved = EvictionHistory()  # evictions of lock-free runs, not yet written to the Lease
        # leading edge: the first balance event runs after a short gather, a burst's follow-up no
        # sooner than settleSeconds after it; node-scoped runs start at once (docs/reactor.md)
        self.balance_events: Coalescer[Trigger, dict[str, Any]] = Coalescer(
            self._balance_batch, delay_seconds=settings.balance_delay_seconds,
            min_interval_seconds=settings.settle_seconds, run_lock=self.balance_lock, stop=self.stop,
            clock=mono_clock)
        self.node_events: KeyedCoalescers[_NodeReq, dict[str, Any]] = KeyedCoalescers(self._node_coalescer)
        self.active_runs = 0
        self.max_active_runs = 0  # for tests: never more than one balance run at a time
        self._active_lock = threading.Lock()
        # paced evictions of node-scoped runs: the run is repeated later (never waited for in a run)
        self.paced_recheck_first_seconds = PACED_RECHECK_FIRST_SECONDS
        self.paced_recheck_seconds = PACED_RECHECK_SECONDS
        self._paced_delay: dict[str, float] = {}  # node-run key -> its next repeat's delay (backoff)
        self._paced_lock = threading.Lock()
        self._paced_progress: dict[str, float] = {}  # node-run key -> when it last evicted (monotonic)
        self._paced_scheduled: set[str] = set()
        # node-run key -> the owner uids and nodes its chain evicted from: a repeat continues the same
        # run, so its own evictions do not put it in cool-down (pacing already waits for the Ready count)
        self._paced_chain: dict[str, tuple[set[str], set[str]]] = {}

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
                return self._reply(trigger, empty_report(self._dry(), waiting), (), 1, [trigger])
            offered = self.balance_events.offer(trigger, wait=wait)
            if offered is None:
                m.COALESCED.labels("rebalance").inc()
                note = "joined the queued balance run (its report lists this event in coalescedTriggers)"
                return {**self._reply(trigger, empty_report(self._dry(), note), (), 1, [trigger]), "joined": True}
            served = offered
            if served.coalesced > 1:
                m.COALESCED.labels("rebalance").inc()
            return self._reply_from(trigger, served.result, served.coalesced)
        if trigger.type in (TAINTS_CHANGED, LABELS_CHANGED):
            kind = "taints" if trigger.type == TAINTS_CHANGED else "affinity"
            served = self.node_events.get(f"{kind}/{node}").submit(_NodeReq(trigger, changed))
            return self._reply_from(trigger, served.result, served.coalesced)
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
            policy = event_policy(self.policy, strategies) if strategies else self.policy
        except EventScopeError as exc:
            raise RequestError(str(exc), "data.strategies") from None
        dry_run = self._dry() or bool(dry)
        if not self.balance_lock.acquire(timeout=max(self.settings.lease_wait_seconds, 0.001)):
            m.LOCK_BUSY.labels("manual").inc()
            raise LockBusy("another balance run is in progress in this instance")
        try:
            label = "sweep" if trigger.type == PING else "manual"
            base = self._leased_run(policy, strategies, nodes, dry_run, label, [trigger])
        finally:
            self.balance_lock.release()
        return self._reply_from(trigger, base, 1)

    # -- batches ------------------------------------------------------------------------------------
    def _balance_batch(self, triggers: Sequence[Trigger]) -> dict[str, Any]:
        names: dict[str, None] = {}
        for t in triggers:
            for n in self.settings.events.get(t.type, ()):
                names[n] = None
        strategies = tuple(names)
        if not strategies:
            return {**empty_report(self._dry(), "the event map runs nothing for this event"), "_triggers": triggers}
        policy = event_policy(self.policy, strategies)
        return self._leased_run(policy, strategies, None, self._dry(), "rebalance", triggers)

    def _node_coalescer(self, key: str) -> Coalescer[_NodeReq, dict[str, Any]]:
        kind, node = key.split("/", 1)
        return Coalescer(lambda reqs: self._node_batch(kind, node, reqs), run_lock=self.node_locks.get(node),
                         stop=self.stop)

    def _node_batch(self, kind: str, node: str, reqs: Sequence[_NodeReq]) -> dict[str, Any]:
        etype = reqs[0].trigger.type
        triggers = [r.trigger for r in reqs]
        unknown = any(r.changed_labels is None for r in reqs)
        changed: set[str] = set()
        for r in reqs:
            changed |= r.changed_labels or set()
        scope = scope_for_event(self.settings, self.policy, etype, node,
                                changed_labels=() if unknown else tuple(sorted(changed)))
        dry_run = self._dry()
        if not scope.strategies:
            return {**empty_report(dry_run, scope.reason), "_triggers": triggers}
        try:
            policy = event_policy(self.policy, scope.strategies)
        except EventScopeError as exc:
            raise RequestError(str(exc), "strategies") from None
        if any(extension_point(s) == "balance" for s in scope.strategies):
            # counts across the cluster: must not run beside a balance run (here or elsewhere)
            if not self.balance_lock.acquire(timeout=max(self.settings.lease_wait_seconds, 0.001)):
                m.LOCK_BUSY.labels(kind).inc()
                raise LockBusy("a balance run is in progress in this instance")
            try:
                base = self._leased_run(policy, scope.strategies, scope.nodes, dry_run, kind, triggers)
            finally:
                self.balance_lock.release()
            base.setdefault("notes", []).insert(0, scope.reason)
            return base
        history = read_history(self.client, self.settings.lease_namespace, self.settings.lease_name)
        with self._history_lock:
            history.merge(self._unsaved)
        if any(r.trigger.id.endswith(PACED_SUFFIX) for r in reqs):
            with self._paced_lock:
                owners, chain_nodes = self._paced_chain.get(f"{kind}/{node}", (set(), set()))
                for uid in owners:
                    history.owners.pop(uid, None)
                for name in chain_nodes:
                    history.nodes.pop(name, None)
        all_pods, why = needs_all_pods(policy, scope.strategies)
        if not all_pods and self.loader is default_loader and set(scope.strategies) <= NODE_LOCAL_STRATEGIES:
            snapshot = node_local_snapshot(self.client, node, kinds_needed(policy), policy.node_selector)
        else:
            snapshot = self.loader(self.client, None if all_pods else [node], kinds_needed(policy))
        fits_elsewhere = sorted(set(scope.strategies) & FITS_ANOTHER_NODE)
        if not all_pods and (self.safety.enabled or fits_elsewhere):
            # somewhere to go needs other nodes' usage, pacing the workload's other pods, and
            # RemovePodsViolatingNodeAffinity evicts only a pod that fits some node: read them all,
            # but only when the node's pods give the strategies something to evict. Exact: other
            # nodes' pods only add usage and anti-affinity, so they can only turn an eviction
            # planned from the node's pods into no eviction, never the reverse
            probe = plan_run(policy, snapshot, now=datetime.fromtimestamp(self.wall_clock(), UTC),
                             strategies=scope.strategies, nodes=scope.nodes)
            if probe.evictions:
                all_pods, why = True, ("safety defaults: somewhere to go and per-workload pacing read every pod"
                                       if self.safety.enabled else
                                       f"{', '.join(fits_elsewhere)} evicts only a pod that fits another node: "
                                       "that needs every node's pods")
                snapshot = self.loader(self.client, None, kinds_needed(policy))
        report, recorded = self._plan_and_execute(policy, snapshot, scope.strategies, scope.nodes, dry_run,
                                                  history, kind)
        if recorded:
            with self._history_lock:
                self._unsaved.merge(recorded)
            self._try_flush()
        base = self._base(report, scope.strategies, triggers)
        base["notes"] = [scope.reason, f"pods read: {'all' if all_pods else 'node ' + node} ({why})",
                         *([self.safety_note] if self.safety_note and TAINTS_PLUGIN in scope.strategies else []),
                         *base.get("notes", [])]
        self._repeat_if_paced(f"{kind}/{node}", reqs[-1], base, report)
        return base

    def _repeat_if_paced(self, key: str, req: _NodeReq, base: dict[str, Any], report: RunReport) -> None:
        """A node-scoped run that held evictions back (``paced``) is repeated on a timer: no lock,
        request or thread waits for it. The repeat re-decides from fresh state, as a continuation of
        the same run (its own evictions do not put it in cool-down); the chain stops when nothing is
        paced, or when no eviction happened within max(replacementTimeoutSeconds, the longest delay).
        The first repeat after an eviction comes ``paced_recheck_first_seconds`` (1 s) later, since a
        replacement is usually Ready within a second or two; each repeat that evicts nothing doubles
        the delay up to ``paced_recheck_seconds`` (10 s), so a slow replacement costs a few cheap
        node-scoped reads, not one a second. A restart loses the timer, not the safety: the next
        event or sweep re-decides the same way."""
        evictions = base.get("evictions", [])
        now = time.monotonic()
        longest = max(self.paced_recheck_seconds, self.paced_recheck_first_seconds)
        with self._paced_lock:
            if not any(e.get("result") == "paced" for e in evictions) or self.stop.is_set():
                # another event's run in between (say, a second delivery) leaves a scheduled chain alone
                if self.stop.is_set() or req.trigger.id.endswith(PACED_SUFFIX) or key not in self._paced_scheduled:
                    self._forget_chain(key)
                return
            owners, chain_nodes = self._paced_chain.setdefault(key, (set(), set()))
            for o in report.outcomes:
                if o.result in ("evicted", "already-gone"):
                    owners.add(owner_uid(o.eviction.pod))
                    chain_nodes.add(o.eviction.node)
            if any(e.get("result") == "evicted" for e in evictions) or key not in self._paced_progress:
                # progress: the replacement is usually Ready within a second or two, look again soon
                self._paced_progress[key] = now
                delay = self.paced_recheck_first_seconds
            else:  # nothing moved since the last look: back off, up to the longest delay
                delay = min(longest, self._paced_delay.get(key, self.paced_recheck_first_seconds) * 2)
            self._paced_delay[key] = delay
            bound = max(self.safety.replacement_timeout_seconds, longest)
            if now - self._paced_progress[key] >= bound:
                self._forget_chain(key)
                base.setdefault("notes", []).append(
                    f"paced evictions: no progress for {bound:g}s; left to the next event or sweep")
                return
            if key in self._paced_scheduled:
                return
            self._paced_scheduled.add(key)
        base.setdefault("notes", []).append(f"paced evictions: this run is repeated in {delay:g}s, to evict the "
                                            "next pods of each workload once it is back at its Ready count")
        trigger_id = req.trigger.id if req.trigger.id.endswith(PACED_SUFFIX) else req.trigger.id + PACED_SUFFIX
        again = _NodeReq(Trigger(req.trigger.type, trigger_id, req.trigger.source,
                                 req.trigger.node), req.changed_labels)
        timer = threading.Timer(delay, self._repeat, (key, again))
        timer.daemon = True
        timer.start()

    def _forget_chain(self, key: str) -> None:
        """Drop a finished (or abandoned) paced chain's state; the caller holds ``_paced_lock``."""
        self._paced_progress.pop(key, None)
        self._paced_chain.pop(key, None)
        self._paced_delay.pop(key, None)

    def _repeat(self, key: str, req: _NodeReq) -> None:
        with self._paced_lock:
            self._paced_scheduled.discard(key)
        if self.stop.is_set():
            return
        try:
            self.node_events.get(key).submit(req)
        except Exception as exc:  # noqa: BLE001 - best effort: the next event or sweep re-decides
            log.warning("repeating the paced run %s failed: %s", key, exc)

    # -- the run itself -------------------------------------------------------------------------------
    def _leased_run(self, policy: Policy, strategies: Sequence[str] | None, nodes: Sequence[str] | None,
                    dry_run: bool, label: str, triggers: Sequence[Trigger]) -> dict[str, Any]:
        """A run under the Lease (the caller holds the in-process balance lock)."""
        try:
            guard = LeaseGuard(self.client, self.settings.lease_namespace, self.settings.lease_name, self.identity,
                               duration_seconds=self.settings.lease_duration_seconds,
                               wait_seconds=self.settings.lease_wait_seconds, stop=self.stop)
            with guard:
                history = guard.history
                with self._history_lock:
                    history.merge(self._unsaved)
                snapshot = self.loader(self.client, None, kinds_needed(policy))
                # leased runs are never repeated for paced evictions: once the global bucket is
                # empty they stop planning (reactor.limits.make_gate, stop_when_spent)
                report, recorded = self._plan_and_execute(policy, snapshot, strategies, nodes, dry_run, history,
                                                          label, guard=guard, stop_when_spent=True)
                if recorded or self._unsaved:
                    now = self.wall_clock()
                    history.merge(recorded)
                    history.prune(now, max(self.settings.cooldown_workload_seconds, self.settings.cooldown_node_seconds),
                                  self.settings.history_max_entries)
                    if guard.save_history(history):
                        with self._history_lock:
                            self._unsaved = EvictionHistory()
                    else:
                        with self._history_lock:
                            self._unsaved.merge(recorded)
        except LockBusy:
            m.LOCK_BUSY.labels(label).inc()
            raise
        return self._base(report, strategies or (), triggers)

    def _plan_and_execute(self, policy: Policy, snapshot: Snapshot, strategies: Sequence[str] | None,
                          nodes: Sequence[str] | None, dry_run: bool, history: EvictionHistory, label: str,
                          guard: LeaseGuard | None = None, stop_when_spent: bool = False,
                          ) -> tuple[RunReport, EvictionHistory]:
        with self._active_lock:
            self.active_runs += 1
            self.max_active_runs = max(self.max_active_runs, self.active_runs)
        try:
            m.REACTOR_RUNS.labels(label).inc()
            started = time.perf_counter()
            now = self.wall_clock()
            # a dry run spends a copy of the buckets: it reports what a live run would be allowed
            limiter = self.limiter.clone() if dry_run else self.limiter
            gate, refusals = make_gate(history, limiter, now=now,
                                       workload_seconds=self.settings.cooldown_workload_seconds,
                                       node_seconds=self.settings.cooldown_node_seconds, consume=True,
                                       stop_when_spent=stop_when_spent)
            plan = plan_run(policy, snapshot, now=datetime.fromtimestamp(now, UTC), strategies=strategies,
                            nodes=nodes, gate=gate, safety=self.safety)
            for why in refusals:
                m.REFUSALS.labels(m.refusal_kind(why)).inc()
            if guard is not None and guard.lost:
                raise LockBusy("the Lease was lost while deciding; not evicting")
            if self.stop.is_set():
                raise ShuttingDown("shutting down: plan abandoned before evicting")
            # the event path never waits for replacements inside a run: held evictions are reported
            # "paced" and the next run re-decides (evictor/waves.py)
            report = execute_plan(plan, self.executor_factory(dry_run), dry_run=dry_run, trigger=label,
                                  grace_period_seconds=policy.grace_period_seconds,
                                  failure_events=policy.eviction_failure_event_notification, started=started)
            recorded = EvictionHistory()
            if not dry_run:
                recorded.record(report.outcomes, now)
            observe_run(label, "error" if plan.errors else "success", report.duration_seconds)
            return report, recorded
        finally:
            with self._active_lock:
                self.active_runs -= 1

    def _try_flush(self) -> None:
        """Write the lock-free runs' evictions into the Lease if it is free right now (never waits)."""
        if not self.balance_lock.acquire(blocking=False):
            return
        try:
            with LeaseGuard(self.client, self.settings.lease_namespace, self.settings.lease_name, self.identity,
                            duration_seconds=self.settings.lease_duration_seconds, wait_seconds=0,
                            stop=self.stop) as guard:
                with self._history_lock:
                    pending = self._unsaved.copy()
                history = guard.history
                history.merge(pending)
                now = self.wall_clock()
                history.prune(now, max(self.settings.cooldown_workload_seconds, self.settings.cooldown_node_seconds),
                              self.settings.history_max_entries)
                if guard.save_history(history):
                    with self._history_lock:
                        for table, saved in ((self._unsaved.owners, pending.owners), (self._unsaved.nodes, pending.nodes)):
                            for k, t in saved.items():
                                if table.get(k) == t:
                                    del table[k]
        except (LockBusy, ShuttingDown):
            pass  # the next run that holds the Lease writes it
        except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
            log.warning("could not write the eviction history to the Lease yet: %s", exc)
        finally:
            self.balance_lock.release()

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

    def _base(self, report: RunReport, strategies: Sequence[str], triggers: Sequence[Trigger]) -> dict[str, Any]:
        j = report.to_json()
        summary = j.get("summary", {})
        return {"dryRun": j["dryRun"], "evictions": j["evictions"], "blocked": j["blocked"],
                "strategies": list(strategies) or [s["strategy"] for s in summary.get("strategies", [])],
                "durationSeconds": summary.get("durationSeconds", round(report.duration_seconds, 6)),
                "notes": list(summary.get("notes", [])), "errors": list(summary.get("errors", [])),
                "summary": summary, "_triggers": list(triggers)}

    def _reply_from(self, trigger: Trigger, base: dict[str, Any], coalesced: int) -> dict[str, Any]:
        triggers = base.get("_triggers", [trigger])
        body = {k: v for k, v in base.items() if k != "_triggers"}
        return self._reply(trigger, body, body.get("strategies", ()), coalesced, triggers)

    def _reply(self, trigger: Trigger, body: dict[str, Any], strategies: Sequence[str], coalesced: int,
               triggers: Sequence[Trigger]) -> dict[str, Any]:
        out = {"trigger": trigger.to_json(), "strategies": list(strategies), **body, "coalesced": coalesced}
        if "dryRun" in body:
            out["dryRunWhy"] = self._dry_run_why(bool(body["dryRun"]))
        if coalesced > 1:
            out["coalescedTriggers"] = [t.to_json() for t in list(triggers)[:MAX_TRIGGERS_LISTED]]
        return out

"""Node-scoped runs: one node's events coalesced under its lock, and several nodes' runs decided
as one when they fall due together.

Why: a node event (``taints.changed``, ``labels.changed``) or a node scope's paced repeat decides
over one node's pods, under that node's lock, so taints and affinity runs of a node never overlap.
A pool maintenance taints twenty nodes at once: twenty runs one after the other, each reading every
pod and committing the ledger, is where it spent its time. So taint events of several nodes that
queue behind a run, and repeats of node scopes of the same strategies that are due together, are
decided as one run (one read, one plan, one commit), each pod still admitted under its own node's
scope (:attr:`~kdesched.reactor.run.admit.RunScope.per_node`) so that node's repeat continues it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from kdesched.kube.client import KubeClient
from kdesched.policy.control_plane import TAINTS_PLUGIN
from kdesched.policy.safety import Safety
from kdesched.policy.types import Policy
from kdesched.reactor.events.requests import RequestError, Trigger
from kdesched.reactor.events.routing import (
    TAINTS_CHANGED,
    EventScopeError,
    event_policy,
    extension_point,
    kinds_needed,
    scope_for_event,
)
from kdesched.reactor.io.loaders import (
    NODE_LOCAL_STRATEGIES,
    SnapshotLoader,
    read_for_node_run,
    with_every_node,
)
from kdesched.reactor.run.admit import RunScope
from kdesched.reactor.run.coalescing import Coalescer, NodeLocks
from kdesched.reactor.run.continuation import node_scope
from kdesched.reactor.run.reports import RunResult, empty_result
from kdesched.reactor.run.settings import ReactorSettings

# the run itself once read and locked: (policy, snapshot, scope, dry_run, label, triggers, cooldown_repeat)
Decide = Callable[..., RunResult]
# a run under the balance lock and the Lease: (label, policy, strategies, nodes, dry_run, triggers)
Balanced = Callable[[str, Policy, Sequence[str] | None, Sequence[str] | None, bool, Sequence[Trigger]], RunResult]


@dataclass(frozen=True, slots=True)
class NodeReq:
    trigger: Trigger
    changed_labels: frozenset[str] | None  # None = unknown
    strategies: tuple[str, ...] | None = None  # a repeat: exactly these (the scope that held pods)


class NodeRuns:
    """The node-scoped runs of one process. ``loader`` is asked at each run (``serve`` and a function
    with the cache switch the reactor to the cache's loader after start)."""

    def __init__(self, policy: Policy, settings: ReactorSettings, safety: Safety, client: KubeClient, *,
                 decide: Decide, balanced: Balanced, loader: Callable[[], SnapshotLoader],
                 wall_clock: Callable[[], float], safety_note: str, stop: threading.Event) -> None:
        self.policy = policy
        self.settings = settings
        self.safety = safety
        self.client = client
        self.decide = decide
        self.balanced = balanced
        self.loader = loader
        self.wall_clock = wall_clock
        self.safety_note = safety_note
        self.stop = stop
        self.node_locks = NodeLocks()

    def coalescer(self, key: str) -> Coalescer[NodeReq, RunResult]:
        kind, node = key.split("/", 1)
        return Coalescer(lambda reqs: self.batch(kind, node, reqs), run_lock=self.node_locks.get(node),
                         stop=self.stop)

    def batch(self, kind: str, node: str, reqs: Sequence[NodeReq]) -> RunResult:
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
        dry_run = self.settings.dry_run
        if not strategies:
            return empty_result(dry_run, reason, triggers)
        try:
            policy = event_policy(self.policy, strategies, self.safety)
        except EventScopeError as exc:
            raise RequestError(str(exc), "strategies") from None
        if any(extension_point(s) == "balance" for s in strategies):
            # counts across the cluster: must not run beside a balance run (here or elsewhere)
            result = self.balanced(kind, policy, strategies, scoped_nodes, dry_run, triggers)
            return result.with_notes(before=[reason])
        brake = self.settings.admission.health.enabled
        read = read_for_node_run(self.client, self.loader(), policy, strategies, node, scoped_nodes,
                                 safety_on=self.safety.enabled, now=self.wall_clock(), health_brake=brake,
                                 surge_first=self.settings.surge_enabled and self.safety.enabled)
        snapshot, all_pods, why = read.snapshot, read.all_pods, read.why
        scope_key = node_scope(node, strategies)
        # a few Nodes read: the settle reads the others before it advances a surge-first move, for
        # the health brake (the only control that judges Nodes)
        every_node = partial(with_every_node, self.client) if brake and not read.all_nodes else None
        result = self.decide(policy, snapshot, RunScope(scope_key, strategies, scoped_nodes, all_pods,
                                                        all_nodes=read.all_nodes),
                             dry_run, kind, triggers, cooldown_repeat=True, every_node=every_node)
        return result.with_notes(before=[reason, f"pods read: {'all' if all_pods else 'node ' + node} ({why})",
                                         *([self.safety_note] if self.safety_note and TAINTS_PLUGIN in strategies
                                           else [])])

    def taints_burst(self, reqs: Sequence[NodeReq]) -> Mapping[str, RunResult]:
        """Taint events that queued behind a run: one node's as before, several nodes' as one run
        (whose report every one of them gets, listing them in ``coalescedTriggers``)."""
        by_node: dict[str, list[NodeReq]] = {}
        for r in reqs:
            by_node.setdefault(r.trigger.node or "", []).append(r)
        names = {scope_for_event(self.settings, self.policy, TAINTS_CHANGED, n).strategies for n in by_node}
        strategies = next(iter(names))
        if len(by_node) == 1 or len(names) != 1 or not strategies or not set(strategies) <= NODE_LOCAL_STRATEGIES:
            out: dict[str, RunResult] = {}
            for node, node_reqs in by_node.items():
                with self.node_locks.get(node):
                    out[node] = self.batch("taints", node, node_reqs)
            return out
        result = self.nodes_run("taints", strategies, sorted(by_node),
                                lambda n: [r.trigger for r in by_node[n]], busy=None)
        assert result is not None
        result = result.with_notes(before=[(f"taint changes on {len(by_node)} nodes, decided as one run: "
                                            f"{', '.join(strategies)} on nodes {', '.join(sorted(by_node))}")])
        return dict.fromkeys(by_node, result)

    def nodes_run(self, kind: str, strategies: tuple[str, ...], nodes: Sequence[str],
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
            snapshot = self.loader()(self.client, None, kinds_needed(policy))
            scope = RunScope(f"nodes:{len(ran)}:{'+'.join(strategies)}", strategies, ran, True, per_node=True)
            return self.decide(policy, snapshot, scope, self.settings.dry_run, kind, triggers, cooldown_repeat=True)
        finally:
            for _, lock in held:
                lock.release()

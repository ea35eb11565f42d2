"""The contract between strategies and the rest: plan-aware cluster state, the handle a strategy
receives, the evictor view it evicts through, and the typed limit errors that steer its loops.

Why: strategies are pure decisions. They read a :class:`ClusterState` and call
``handle.evict(pod, reason)``; what that does (plan, enforce limits, later act on the API or just
record) is the evictor's business. Once a pod is planned for eviction the state treats it as gone
and its requests as freed, so later strategies in the same run decide on what will be, not on
what was (upstream does not, and over-evicts in its own seed scenario).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from kdesched.model.derived import TERMINAL_PHASES, add_pod_usage, empty_usage
from kdesched.model.records import Node, Pod
from kdesched.model.selectors import LabelSelector
from kdesched.model.snapshot import Snapshot

log = logging.getLogger("kdesched.strategies")

_TERMINAL_PHASES = TERMINAL_PHASES  # Pod.terminal, for the loops that run over every pod


class LimitReached(Exception):
    """An eviction was refused by a per-run limit. Subclasses tell the strategy what to do next."""


class NodeLimitReached(LimitReached):
    """``maxNoOfPodsToEvictPerNode`` (or a plugin's node limit): move on to the next node."""


class NamespaceLimitReached(LimitReached):
    """``maxNoOfPodsToEvictPerNamespace``: log and continue with the next pod."""


class TotalLimitReached(LimitReached):
    """``maxNoOfPodsToEvictTotal``: the strategy returns."""


class EvictionBudgetSpent(TotalLimitReached):
    """The event path's run-wide eviction budget (the reactor's global token bucket) is empty: no
    further eviction can be sent by this run, so the strategy returns and the engine runs no more
    strategies (each would only plan evictions to refuse). Never raised on the parity path."""


class DeferralsPlanned(TotalLimitReached):
    """The event path's balance run has planned, for this strategy, as many evictions a brake or a
    closed disruption window defers as the cluster-wide bucket could let go at once: the strategy
    returns (planning more would decide nothing this run sends), the other strategies still run.
    Never raised on the parity path."""


class StrategyError(Exception):
    """A strategy could not run (logged; the other strategies still run)."""


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    """One decision: evict ``pod`` from ``node`` because of ``reason``."""

    pod: Pod
    node: str
    strategy: str
    profile: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"namespace": self.pod.namespace, "pod": self.pod.name, "node": self.node,
                "strategy": self.strategy, "profile": self.profile, "reason": self.reason}


class ClusterState:
    """A snapshot plus the evictions planned so far in this run.

    ``nodes`` are the nodes the run works on: Ready and matching the policy's top-level
    ``nodeSelector`` (upstream cycle rule). Pod lists exclude planned pods; usage is the sum of
    requests of the non-terminal pods still on the node, with ``pods`` as their count.
    """

    def __init__(self, snapshot: Snapshot, now: datetime, node_selector: LabelSelector | None = None) -> None:
        self.snapshot = snapshot
        self.now = now
        self.nodes: list[Node] = [
            n for n in snapshot.nodes.values()
            if n.ready and (node_selector is None or node_selector.matches(n.labels))
        ]
        self._planned: set[int] = set()  # id(pod)
        self._usage: dict[str, dict[str, int]] = {}
        self._live: dict[str, list[Pod]] = {}
        self._owner_counts: dict[str, int] = dict(snapshot.owner_pod_counts)
        self.planned: list[PlannedEviction] = []
        self._memos: list[tuple[Any, dict[Any, Any]]] = []

    def memo(self, owner: Any) -> dict[Any, Any]:
        """A dictionary for memoizing facts about this run that never change during it, shared by
        every caller passing an ``owner`` equal to this one (e.g. the DefaultEvictors of several
        profiles with the same arguments)."""
        for known, memo in self._memos:
            if known == owner:
                return memo
        memo = {}
        self._memos.append((owner, memo))
        return memo

    # -- pods ------------------------------------------------------------------------------------
    def is_planned(self, pod: Pod) -> bool:
        return id(pod) in self._planned

    def pods_on_node(self, node: str) -> list[Pod]:
        """Non-terminal pods on ``node`` not yet planned for eviction (upstream's normal list).

        Cached per node and dropped when a pod of that node is planned; callers get a copy."""
        cached = self._live.get(node)
        if cached is None:
            planned = self._planned
            cached = [p for p in self.snapshot.pods_by_node.get(node, ())
                      if p.phase not in _TERMINAL_PHASES and id(p) not in planned]  # not p.terminal, inlined
            self._live[node] = cached
        return list(cached)

    def all_pods_on_node(self, node: str) -> list[Pod]:
        """Pods of every phase on ``node`` not yet planned (PodLifeTime, failed pods, restarts)."""
        planned = self._planned
        return [p for p in self.snapshot.pods_by_node.get(node, ()) if id(p) not in planned]

    def owner_pod_count(self, owner_uid: str) -> int:
        """Pods (any node, any phase) that name ``owner_uid`` as an owner, minus planned ones."""
        return self._owner_counts.get(owner_uid, 0)

    # -- resources -------------------------------------------------------------------------------
    def usage(self, node: str) -> Mapping[str, int]:
        """Requested resources of the node's remaining non-terminal pods, plus ``pods``. The same
        mapping for the whole run, updated in place as pods of the node are planned (the pacer
        keeps it to sort nodes by free CPU)."""
        cached = self._usage.get(node)
        if cached is None:
            known = self.snapshot.node_usage
            if known is not None:  # kept by the watch cache; mark_planned keeps this copy up to date
                base = known.get(node)
                cached = dict(base) if base is not None else empty_usage()
            else:
                cached = empty_usage()
                planned = self._planned
                for p in self.snapshot.pods_by_node.get(node, ()):
                    if id(p) not in planned:
                        add_pod_usage(cached, p)  # nothing for a terminal pod
            self._usage[node] = cached
        return cached

    def allocatable(self, node: Node) -> Mapping[str, int]:
        return node.allocatable

    # -- planning --------------------------------------------------------------------------------
    def mark_planned(self, eviction: PlannedEviction) -> None:
        """Record a decision: the pod is gone for the rest of the run and its requests are freed."""
        pod = eviction.pod
        if id(pod) in self._planned:
            return
        self._planned.add(id(pod))
        self._live.pop(pod.node_name, None)
        self.planned.append(eviction)
        for ref in pod.owner_refs:
            self._owner_counts[ref.uid] = self._owner_counts.get(ref.uid, 0) - 1
        usage = self._usage.get(pod.node_name)
        if usage is None and pod.node_name and self.snapshot.node_usage is not None:
            self.usage(pod.node_name)  # a copy of the cache's, which still counts this pod
            usage = self._usage[pod.node_name]
        if usage is not None:
            add_pod_usage(usage, pod, -1)  # nothing for a terminal pod


class EvictorView(Protocol):
    """What a strategy may ask of the evictor (implemented in :mod:`kdesched.evictor`)."""

    def filter(self, pod: Pod) -> bool:
        """Is the pod evictable at all (DefaultEvictor Filter and the profile's filter plugins)?"""

    def pre_eviction_filter(self, pod: Pod) -> bool:
        """The checks right before evicting (nodeFit, namespaceLabelSelector)."""

    def evict(self, pod: Pod, *, strategy: str, profile: str, reason: str) -> bool:
        """Plan the eviction. True if planned, False if refused for this pod (e.g. its PDB has no
        budget left); raises a :class:`LimitReached` subclass when a limit is hit."""


@dataclass
class Handle:
    """Everything a strategy gets: state to read, an evictor to evict through, and its names."""

    state: ClusterState
    evictor: EvictorView
    profile: str
    strategy: str
    logger: logging.LoggerAdapter[logging.Logger] = field(init=False)

    def __post_init__(self) -> None:
        self.logger = logging.LoggerAdapter(log, {"profile": self.profile, "strategy": self.strategy})

    @property
    def now(self) -> datetime:
        return self.state.now

    def filter(self, pod: Pod) -> bool:
        return self.evictor.filter(pod)

    def pre_eviction_filter(self, pod: Pod) -> bool:
        return self.evictor.pre_eviction_filter(pod)

    def evict(self, pod: Pod, reason: str) -> bool:
        return self.evictor.evict(pod, strategy=self.strategy, profile=self.profile, reason=reason)


StrategyFn = Callable[[Any, Handle, Sequence[Node]], None]
"""``run(args, handle, nodes)``: decide on ``nodes`` (the run's nodes, or the event's node)."""


@dataclass(frozen=True, slots=True)
class StrategySpec:
    name: str
    extension_point: str  # "deschedule" | "balance"
    args_type: type
    run: StrategyFn
    summary: str = ""


def evict_node_pods(handle: Handle, candidates: Iterable[tuple[Pod, str]],
                    on_evicted: Callable[[Pod], None] | None = None) -> bool:
    """Evict one node's ``(pod, reason)`` candidates in order, with upstream's limit handling for
    Deschedule plugins: a node limit ends this node, a namespace limit skips the pod, the total
    limit ends the strategy. ``candidates`` may be a generator, so checks that read plan-aware state
    (NodeFit) see the evictions planned before them. Returns False when the strategy must stop."""
    for pod, reason in candidates:
        try:
            if handle.evict(pod, reason) and on_evicted is not None:
                on_evicted(pod)
        except NodeLimitReached:
            return True
        except NamespaceLimitReached as exc:
            handle.logger.debug("%s", exc)
        except TotalLimitReached:
            return False
    return True


def by_node_order(pods: Iterable[Pod], nodes: Sequence[Node]) -> dict[str, list[Pod]]:
    """Group pods by node, keeping the order of ``nodes``."""
    out: dict[str, list[Pod]] = {n.name: [] for n in nodes}
    for p in pods:
        if p.node_name in out:
            out[p.node_name].append(p)
    return out

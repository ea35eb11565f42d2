"""The disruption ledger: what kdesched has taken down, per workload, shared by every run.

Why: the safety defaults promised "at most ``maxUnavailable`` pods of a workload down because of
kdesched", but each run derived that from its own snapshot. Two runs deciding at once (six taint
events of a maintenance, a rebalance beside a taint, two replicas of a function) each saw the
workload at full strength and each evicted a pod. And a workload whose evicted pod is terminating
and whose replacement the ReplicaSet has not created yet looks whole in any snapshot. The ledger is
the state no snapshot shows: one record, kept in the cluster (:mod:`kdesched.reactor.io.ledger_store`),
read and written by every evicting run of every process, atomically (optimistic concurrency on
the record's ``resourceVersion``: a run admits evictions only against the ledger it planned with).

Per workload, a :class:`Move`:

* **in flight**: pods admitted for eviction and not yet replaced, with the capacity reserved for
  each on the node it will most likely land on ("somewhere to go" across runs). A pod in flight
  counts as unavailable whatever a (possibly stale) snapshot says, and the workload's expected
  count never drops below what it was when the move began. The move's in-flight pods are *settled*
  once a snapshot that holds every pod shows the workload back at the Ready count it had before
  (not counting the in-flight pods themselves), or expire after ``replacementTimeoutSeconds``.
* **held**: pods a run planned but held for a later wave (``paced``), with the run *scope* that
  planned them, so any process (after a restart or a leader change too) can continue the move.
* the move's **strategy** and start: a run of the same strategy continuing the move (a pod that
  existed when the move began) is not held back by the cool-down the move's own earlier waves
  recorded; a different strategy, or a pod created after the move began (a replacement: the
  flapping case), is.

And the cool-downs (workload -> last eviction, node -> last eviction), which were the "eviction
history" before, and ``unhealthy_at``: the last time a run saw the cluster unhealthy enough for the
health brake (:mod:`kdesched.admission.health`), so that every process waits the same settle time
before evicting again. A record without it (written before it existed) parses as "never".

**Checked moves** (:mod:`kdesched.evictor.checked_moves`): when :meth:`Ledger.settle` ends a move's in-flight pods
(their workload is back at its Ready count, or the replacement timeout passed) it follows each
evicted pod's replacement in the same snapshot (no extra read): the node it became Ready on, how
long that took, and whether the move was **wasted** (:func:`wasted_reason`: it landed back on the
node it left, or on another node the same move is draining for the same reason, or stayed
Pending past the timeout). A wasted move **backs the workload off for that strategy** (:class:`Backoff`:
exponentially, reset by a move that achieved its purpose); the back-offs live in the record
beside the cool-downs, so restarts and every replica share them.

Everything here is pure: no I/O, a clock passed in.

Where the parts live (one role a module; every name is also importable from here, as callers do):

* :mod:`kdesched.evictor.ledger_records`: the records and their JSON (the on-cluster format);
* :mod:`kdesched.evictor.checked_moves`: where a replacement went, wasted moves, back-offs;
* :mod:`kdesched.evictor.ledger_state`: the tables and the questions the controls ask of them;
* :mod:`kdesched.evictor.ledger_accounting`: how runs change them (admit, settle, take back, prune);
* here: :class:`Ledger` (all of that as one immutable value) and its encoding as records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kdesched.evictor import ledger_accounting as accounting
from kdesched.evictor.checked_moves import (
    ACHIEVED,
    DRAINS,
    FRESH_POD,
    NODE_AFFINITY,
    PENDING_TIMEOUT,
    TAINTS,
    UNKNOWN,
    WASTED,
    CheckedMove,
    check_moves,
    replacements,
    wasted_reason,
)
from kdesched.evictor.ledger_accounting import Admission
from kdesched.evictor.ledger_records import (
    CLOCK_MARGIN_SECONDS,
    LEDGER_VERSION,
    MAX_BACKOFFS,
    MAX_HELD_PER_MOVE,
    MAX_INFLIGHT_BYTES,
    MAX_INFLIGHT_PER_MOVE,
    MAX_LINGERING_PER_MOVE,
    MAX_WHY,
    RECORD_MAX_BYTES,
    RECORD_VERSION,
    STALE_ADMISSION_SECONDS,
    Backoff,
    ClusterRecord,
    Held,
    InFlight,
    Move,
    WorkloadRecord,
    backoff_key,
    backoff_seconds,
    entry_bytes,
    key_of,
    move_from_json,
    times_from_json,
    workload_key,
)
from kdesched.evictor.ledger_state import LedgerState
from kdesched.evictor.surge import Surge
from kdesched.model.records import Node, Pod

__all__ = [
    "ACHIEVED", "CLOCK_MARGIN_SECONDS", "DRAINS", "FRESH_POD", "LEDGER_VERSION", "MAX_BACKOFFS", "MAX_HELD_PER_MOVE",
    "MAX_INFLIGHT_BYTES", "MAX_INFLIGHT_PER_MOVE", "MAX_LINGERING_PER_MOVE", "MAX_WHY", "NODE_AFFINITY",
    "PENDING_TIMEOUT", "RECORD_MAX_BYTES", "RECORD_VERSION", "STALE_ADMISSION_SECONDS", "TAINTS", "UNKNOWN", "WASTED",
    "Admission", "Backoff", "CheckedMove", "ClusterRecord", "Held", "InFlight", "Ledger", "LedgerState", "Move",
    "Settled", "WorkloadRecord", "backoff_key", "backoff_seconds", "check_moves", "entry_bytes", "key_of",
    "replacements", "wasted_reason", "workload_key",
]


@dataclass(frozen=True, slots=True)
class Settled:
    """What :meth:`Ledger.settle` found: moves whose replacements are Ready, and held pods given up
    at the replacement timeout (each reported ``paced`` with an Event by the caller)."""

    ledger: Ledger
    done: tuple[str, ...] = ()  # workload keys whose in-flight pods are all replaced
    timed_out: tuple[tuple[str, Held], ...] = ()  # (workload key, held pod) dropped at the timeout
    expired: tuple[tuple[str, InFlight], ...] = ()  # in-flight pods not replaced within the timeout
    abandoned: tuple[tuple[str, InFlight], ...] = ()  # admitted, never evicted: back to held
    checked: tuple[CheckedMove, ...] = ()  # the moves whose outcome this settle found (checked moves)
    surges_changed: bool = False  # a surge-first move advanced or ended (kdesched.reactor.run.surge)

    @property
    def changed(self) -> bool:
        return bool(self.done or self.timed_out or self.expired or self.abandoned or self.checked
                    or self.surges_changed)


@dataclass(frozen=True, slots=True)
class Ledger(LedgerState):
    """The whole record: the tables and their questions (:class:`LedgerState`), how runs change them
    (:mod:`kdesched.evictor.ledger_accounting`) and the records it is stored as. Immutable: every
    change returns a new ledger."""

    # -- changing ----------------------------------------------------------------------------------
    def settle(self, pods_of: Mapping[str, Sequence[Pod]] | None, now: float, timeout_seconds: float,
               nodes: Mapping[str, Node] | None = None) -> Settled:
        """Settle moves against a snapshot holding EVERY pod and check the moves it ends
        (:func:`~kdesched.evictor.ledger_accounting.settle`)."""
        s = accounting.settle(self, pods_of, now, timeout_seconds, nodes)
        return Settled(replace(self, moves=s.moves, backoffs=s.backoffs), s.done, s.timed_out, s.expired,
                       s.abandoned, s.checked)

    def admit(self, admissions: Iterable[Admission], now: float, run: str = "", deadline_seconds: float = 0.0) -> Ledger:
        """Record a run's admitted and held evictions (:func:`~kdesched.evictor.ledger_accounting.admit`)."""
        return accounting.admit(self, admissions, now, run, deadline_seconds)

    def without_run(self, run: str) -> Ledger:
        """The ledger without what ``run`` wrote (:func:`~kdesched.evictor.ledger_accounting.without_run`)."""
        return accounting.without_run(self, run)

    def with_unhealthy(self, at: float) -> Ledger:
        """The ledger with the health brake's "last seen unhealthy" moved to ``at`` (never back)."""
        if self.unhealthy_at is not None and self.unhealthy_at >= at:
            return self
        return replace(self, unhealthy_at=at)

    def record_outcomes(self, failed: Iterable[Pod], admitted_at: float,
                        previous: Ledger | None = None, scopes: Mapping[str, str] | None = None) -> Ledger:
        """Take back the evictions that did not happen
        (:func:`~kdesched.evictor.ledger_accounting.record_outcomes`)."""
        return accounting.record_outcomes(self, failed, admitted_at, previous, scopes)

    def prune(self, now: float, keep_seconds: float, max_entries: int, backoff_keep_seconds: float = 0.0) -> Ledger:
        """Drop cool-downs and back-offs past their time or bound (:func:`~kdesched.evictor.ledger_accounting.prune`)."""
        return accounting.prune(self, now, keep_seconds, max_entries, backoff_keep_seconds)

    # -- the records it is stored as (kdesched.reactor.io.ledger_store) -------------------------------
    def split(self, owners: Mapping[str, str] = {},
              previous: Mapping[str, WorkloadRecord] = {}) -> tuple[dict[str, WorkloadRecord], ClusterRecord]:
        """The ledger as one record per workload plus the small cluster record. A node's cool-down
        goes with the workload whose eviction started it (the in-flight entry of that time), else
        with the workload ``owners`` (node -> workload key, from :func:`join`) says held it, else
        (a record of 0.1) into the cluster record, where it lasts until it is pruned."""
        moves: dict[str, Move] = dict(self.moves)
        last: dict[str, float] = dict(self.workloads)
        backoffs: dict[str, dict[str, Backoff]] = {}
        for bkey, b in self.backoffs.items():
            workload, _, strategy = bkey.partition("|")
            backoffs.setdefault(workload, {})[strategy] = b
        started: dict[tuple[str, float], str] = {}
        for key in sorted(moves):
            for f in moves[key].inflight:
                started.setdefault((f.node, round(f.at, 3)), key)
        nodes: dict[str, dict[str, tuple[float, str]]] = {}
        loose: dict[str, tuple[float, str]] = {}
        for node, t in self.nodes.items():
            entry = (t, self.node_strategies.get(node, ""))
            owner = started.get((node, round(t, 3))) or owners.get(node)
            if owner:
                nodes.setdefault(owner, {})[node] = entry
            else:
                loose[node] = entry
        # a record keeps the node cool-downs it held (while they last), even where a later eviction
        # by another workload now holds the node: moving the entry would rewrite the older record
        for key, prev in previous.items():
            for node, entry in prev.nodes.items():
                if node in self.nodes and entry[0] <= self.nodes[node] + 0.002:
                    nodes.setdefault(key, {}).setdefault(node, entry)
        records: dict[str, WorkloadRecord] = {}
        for key in set(moves) | set(last) | set(backoffs) | set(nodes) | set(self.surges) | set(self.surge_blocks):
            mv = moves.get(key)
            records[key] = WorkloadRecord(key, mv if mv is not None and mv.kept else None, last.get(key),
                                          nodes.get(key, {}), backoffs.get(key, {}), self.surges.get(key),
                                          self.surge_blocks.get(key))
        return records, ClusterRecord(self.unhealthy_at, self.bucket, loose)

    @classmethod
    def join(cls, records: Iterable[WorkloadRecord], cluster: ClusterRecord) -> tuple[Ledger, dict[str, str]]:
        """The whole ledger from its records, and which workload record holds each node's cool-down
        (for :meth:`split`). A node two records name takes the later time."""
        moves: dict[str, Move] = {}
        workloads: dict[str, float] = {}
        backoffs: dict[str, Backoff] = {}
        nodes: dict[str, tuple[float, str]] = dict(cluster.nodes)
        owners: dict[str, str] = {}
        surges: dict[str, Surge] = {}
        blocks: dict[str, tuple[float, str]] = {}
        for r in records:
            if r.surge is not None:
                surges[r.key] = r.surge
            if r.surge_block is not None:
                blocks[r.key] = r.surge_block
            if r.move is not None:
                moves[r.key] = r.move
            if r.last is not None:
                workloads[r.key] = r.last
            for strategy, b in r.backoffs.items():
                backoffs[backoff_key(r.key, strategy)] = b
            for node, entry in r.nodes.items():
                if node not in nodes or entry[0] > nodes[node][0]:
                    nodes[node] = entry
                    owners[node] = r.key
        return cls(moves, workloads, {n: e[0] for n, e in nodes.items()}, cluster.unhealthy_at, backoffs,
                   {n: e[1] for n, e in nodes.items() if e[1]}, cluster.bucket, surges, blocks), owners

    # -- the record --------------------------------------------------------------------------------
    def to_annotation(self) -> str:
        return json.dumps({"v": LEDGER_VERSION, "m": {k: m.to_json() for k, m in sorted(self.moves.items())},
                           "o": {k: round(t, 3) for k, t in sorted(self.workloads.items())},
                           "n": {k: round(t, 3) for k, t in sorted(self.nodes.items())},
                           **({} if self.unhealthy_at is None else {"u": round(self.unhealthy_at, 3)}),
                           **({"b": {k: b.to_json() for k, b in sorted(self.backoffs.items())}} if self.backoffs
                              else {}),
                           **({"ns": dict(sorted(self.node_strategies.items()))} if self.node_strategies else {})},
                          separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> tuple[Ledger, str]:
        """Parse the record: (ledger, "") or (an empty ledger, why it could not be read). An
        unreadable record is not fatal (the snapshot still shows most unavailability), but the
        caller reports it: the cool-downs and moves in it are lost."""
        if not text:
            return cls(), ""
        try:
            raw: Any = json.loads(text)
        except ValueError as exc:
            return cls(), f"the disruption ledger is not JSON ({exc}); starting from an empty one"
        if not isinstance(raw, Mapping) or raw.get("v") != LEDGER_VERSION:
            version = raw.get("v") if isinstance(raw, Mapping) else None
            return cls(), f"the disruption ledger has version {version!r}, not {LEDGER_VERSION}; starting from an empty one"
        try:
            moves = {str(k): move_from_json(v) for k, v in (raw.get("m") or {}).items()}
            unhealthy = raw.get("u")  # absent in a record written before the health brake
            if unhealthy is not None and (not isinstance(unhealthy, (int, float)) or isinstance(unhealthy, bool)):
                raise ValueError(f"u (last unhealthy) must be a number, got {unhealthy!r}")
            backoffs = {str(k): Backoff(int(v[0]), float(v[1]), str(v[2]))
                        for k, v in (raw.get("b") or {}).items()}  # absent before checked moves
            return cls(moves, times_from_json(raw.get("o")), times_from_json(raw.get("n")),
                       None if unhealthy is None else float(unhealthy), backoffs,
                       {str(k): str(v) for k, v in (raw.get("ns") or {}).items()}), ""
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            return cls(), f"the disruption ledger is malformed ({type(exc).__name__}: {exc}); starting from an empty one"


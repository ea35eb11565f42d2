"""The disruption ledger: what kdesched has taken down, per workload, shared by every run.

Why: the safety defaults promised "at most ``maxUnavailable`` pods of a workload down because of
kdesched", but each run derived that from its own snapshot. Two runs deciding at once (six taint
events of a maintenance, a rebalance beside a taint, two replicas of a function) each saw the
workload at full strength and each evicted a pod. And a workload whose evicted pod is terminating
and whose replacement the ReplicaSet has not created yet looks whole in any snapshot. The ledger is
the state no snapshot shows: one record, kept in the cluster (:mod:`kdesched.reactor.ledger_store`),
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

**Checked moves** (:class:`CheckedMove`): when :meth:`Ledger.settle` ends a move's in-flight pods
(their workload is back at its Ready count, or the replacement timeout passed) it follows each
evicted pod's replacement in the same snapshot (no extra read): the node it became Ready on, how
long that took, and whether the move was **wasted** (:func:`wasted_reason`: it landed back on the
node it left, or on another node the same move is draining for the same reason, or stayed
Pending past the timeout). A wasted move **backs the workload off for that strategy** (:class:`Backoff`:
exponentially, reset by a move that achieved its purpose); the back-offs live in the record
beside the cool-downs, so restarts and every replica share them.

Everything here is pure: no I/O, a clock passed in.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kdesched.evictor.surge import Surge
from kdesched.evictor.workloads import Workload, pod_ready, workload_of
from kdesched.model.records import Node, Pod
from kdesched.model.scheduling import matches_node_selector

LEDGER_VERSION = 2  # the single-annotation record of 0.1 (read once, then split: kdesched.reactor.ledger_store)
RECORD_VERSION = 3  # the records the ledger is stored as since (WorkloadRecord, ClusterRecord)
MAX_HELD_PER_MOVE = 200  # held pods remembered per workload (a larger move re-plans the rest anyway)
MAX_INFLIGHT_PER_MOVE = 1000  # pods of one workload in flight at once: bounds one record (docs/design.md)
# the bytes one workload's in-flight and lingering entries may take in its record; with the held
# pods and node cool-downs trimmed to fit (kdesched.reactor.ledger_store) a record stays under
# RECORD_MAX_BYTES, far below the API server's 256 KiB of annotations, whatever the names' length
MAX_INFLIGHT_BYTES = 128 * 1024
RECORD_MAX_BYTES = 192 * 1024
MAX_LINGERING_PER_MOVE = 200  # timed-out evictions still counted by budgets, per workload
# an admission written before admissions carried their deadline (ledger records of 0.1) is taken for
# abandoned this long after it, if its pod is still there: one eviction's retries (60 s) plus a margin
STALE_ADMISSION_SECONDS = 75.0
# the uncertainty of the API server's clock as a process estimates it (kdesched.kube.clock: the Date
# header's one-second resolution plus a round trip), added before another process's deadline is judged
CLOCK_MARGIN_SECONDS = 5.0
MAX_BACKOFFS = 200  # back-off entries kept, the oldest beyond dropped: ~50 kB at most of 256 kB of annotations
MAX_WHY = 120  # characters of a wasted move's reason kept in a back-off entry

# the strategies whose "would it evict the replacement again?" rule wasted_reason knows
TAINTS = "RemovePodsViolatingNodeTaints"
NODE_AFFINITY = "RemovePodsViolatingNodeAffinity"
# a node's taint or lost label is a drain order: the cool-downs do not hold the same strategy back
# from the pods that were there already (they stop flapping: replacements, other strategies)
DRAINS = frozenset({TAINTS, NODE_AFFINITY})
# their purpose is a fresh pod, wherever it runs: landing on the same node wastes nothing
FRESH_POD = frozenset({"PodLifeTime", "RemoveFailedPods", "RemovePodsHavingTooManyRestarts"})
ACHIEVED, WASTED, PENDING_TIMEOUT, UNKNOWN = "achieved", "wasted", "pending_timeout", "unknown"


def workload_key(pod: Pod) -> str:
    """The ledger's key of a pod's workload: ``Kind/namespace/name`` (a Deployment through its
    ReplicaSets, so a rollout's pods are one workload); a bare pod is its own ``Pod/ns/name``."""
    w = workload_of(pod)
    return key_of(w) if w is not None else f"Pod/{pod.namespace}/{pod.name}"


def key_of(workload: Workload) -> str:
    return f"{workload.kind}/{workload.namespace}/{workload.name}"


@dataclass(frozen=True, slots=True)
class InFlight:
    """A pod admitted for eviction whose workload is not back at its Ready count yet."""

    uid: str
    pod: str  # namespace/name
    node: str
    at: float  # admitted (epoch seconds)
    destination: str = ""  # the node its replacement most likely lands on ("" = none reserved)
    requests: Mapping[str, int] = field(default_factory=dict)  # reserved there, plus one pod slot
    run: str = ""  # the admitting run (a write whose answer was lost is recognised by it)
    scope: str = ""  # the run scope that admitted it (the move goes on from there if it was abandoned)
    # when its eviction can no longer land (epoch seconds, API server clock): the executor sends no
    # attempt after it and bounds each attempt by it (kdesched.evictor.execute); 0: an older record
    deadline: float = 0.0

    @property
    def lands_by(self) -> float:
        """The latest time its eviction can still be carried out."""
        return self.deadline if self.deadline > 0 else self.at + STALE_ADMISSION_SECONDS

    def may_still_land(self, now: float) -> bool:
        """Can the admitting run still be evicting this pod? Judged with the clock margin: another
        process's estimate of the server clock may be a little off ours."""
        return now < self.lands_by + CLOCK_MARGIN_SECONDS

    def to_json(self) -> list[Any]:
        return [self.uid, self.pod, self.node, round(self.at, 3), self.destination, dict(self.requests), self.run,
                self.scope, round(self.deadline, 3)]


@dataclass(frozen=True, slots=True)
class Held:
    """A pod planned and held for a later wave: the move continues with it."""

    uid: str
    pod: str
    node: str
    scope: str  # the run to repeat to continue (kdesched.reactor.continuation scope keys)
    since: float
    run: str = ""

    def to_json(self) -> list[Any]:
        return [self.uid, self.pod, self.node, self.scope, round(self.since, 3), self.run]


@dataclass(frozen=True, slots=True)
class Move:
    """One workload's disruption by kdesched, from its first admitted (or held) eviction until its
    last replacement is Ready and nothing is held."""

    strategy: str
    started: float
    progress: float  # last admission or settlement (a held pod waits at most the timeout after it)
    expected: int  # the workload's expected pods when the move began
    ready: int  # and how many of them were Ready: the count to get back to
    inflight: tuple[InFlight, ...] = ()
    held: tuple[Held, ...] = ()
    # evictions past the replacement timeout whose workload is not whole yet: they no longer hold
    # the workload's allowance (the snapshot shows the pods still down), but disruption budgets
    # count them until the workload is back at its Ready count (kdesched.admission.budgets)
    lingering: tuple[InFlight, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.inflight or self.held)

    @property
    def kept(self) -> bool:
        """Does the record still need this move (active, or evictions budgets still count)?"""
        return bool(self.inflight or self.held or self.lingering)

    def inflight_bytes(self) -> int:
        """What its in-flight and lingering entries take in the record (bounded by the gate)."""
        return sum(len(json.dumps(f.to_json(), separators=(",", ":"))) + 1 for f in (*self.inflight, *self.lingering))


    def inflight_uids(self) -> frozenset[str]:
        return frozenset(f.uid for f in self.inflight)

    def to_json(self) -> dict[str, Any]:
        return {"s": self.strategy, "t0": round(self.started, 3), "p": round(self.progress, 3), "e": self.expected,
                "r": self.ready, "f": [f.to_json() for f in self.inflight], "h": [h.to_json() for h in self.held],
                **({"l": [f.to_json() for f in self.lingering]} if self.lingering else {})}


def entry_bytes(pod: Pod, scope_hint: int = 96) -> int:
    """An upper estimate of one in-flight entry of ``pod`` in its record (uid, names, the node twice,
    requests, run, scope, times)."""
    return 160 + len(pod.namespace) + len(pod.name) + 3 * len(pod.node_name) + scope_hint + 24 * len(pod.requests)


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
    surges_changed: bool = False  # a surge-first move advanced or ended (kdesched.reactor.surge)

    @property
    def changed(self) -> bool:
        return bool(self.done or self.timed_out or self.expired or self.abandoned or self.checked
                    or self.surges_changed)


@dataclass(frozen=True, slots=True)
class CheckedMove:
    """One evicted pod's move, checked against where its replacement went (module docstring)."""

    workload: str  # ledger key
    strategy: str
    pod: str  # the evicted pod, namespace/name
    source: str  # the node it left
    destination: str  # the node the planner reserved for it ("" = none)
    landed: str  # the node its replacement became Ready on ("" = none found)
    seconds: float | None  # eviction admitted -> replacement Ready (None: not Ready)
    outcome: str  # achieved | wasted | pending_timeout | unknown (no replacement to tell by)
    why: str = ""  # why it was wasted ("landed back on node X", ...)

    @property
    def counts_as_wasted(self) -> bool:
        return self.outcome in (WASTED, PENDING_TIMEOUT)

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "strategy": self.strategy, "pod": self.pod, "source": self.source,
                "destination": self.destination or None, "landed": self.landed or None,
                "secondsToReady": None if self.seconds is None else round(self.seconds, 3),
                "outcome": self.outcome, **({"why": self.why} if self.why else {})}


@dataclass(frozen=True, slots=True)
class Backoff:
    """A workload's consecutive wasted moves for one strategy: it is not moved by that strategy
    again before ``at + base * 2**(wasted-1)`` (capped); a move that achieved its purpose ends it."""

    wasted: int
    at: float  # the last wasted move was found
    why: str  # its reason ("landed back on node X")

    def ends(self, base: float, cap: float) -> float:
        return self.at + backoff_seconds(self.wasted, base, cap)

    def to_json(self) -> list[Any]:
        return [self.wasted, round(self.at, 3), self.why]


def backoff_seconds(wasted: int, base: float, cap: float) -> float:
    """The back-off after ``wasted`` consecutive wasted moves: ``base * 2**(wasted-1)``, at most ``cap``."""
    if wasted <= 0 or base <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(wasted - 1, 30))


def backoff_key(workload: str, strategy: str) -> str:
    return f"{workload}|{strategy}"


def wasted_reason(strategy: str, replacement: Pod, source: str, landed: Node | None,
                  move_sources: Collection[str]) -> str | None:
    """Why a replacement that became Ready on ``replacement.node_name`` made its move a waste, or
    None. Decided only from what the run already holds (docs/safety.md, "Checked moves"):

    * it landed back on ``source``, the node it left;
    * it landed on another node the same move was taking pods off when the eviction was admitted
      (``move_sources``: the nodes of the move's in-flight and held pods of that time), which for RemovePodsViolatingNodeTaints still has a
      NoSchedule/NoExecute taint the replacement does not tolerate, and for
      RemovePodsViolatingNodeAffinity still fails its nodeSelector / required node affinity (for
      LowNodeUtilization, HighNodeUtilization, RemoveDuplicates and the others: being a node the
      move drains is enough).

    Only nodes the move drains: the scheduler never places a pod on an untolerated taint or a
    failing required affinity, so a violation on any other node appeared after the placement (the
    next node of a rolling maintenance) and is a new reason to move, not a wasted move. And never
    for the strategies whose purpose is a fresh pod, wherever it runs (:data:`FRESH_POD`)."""
    if strategy in FRESH_POD:
        return None
    node = replacement.node_name
    if node == source:
        return f"landed back on node {node}"
    if node not in move_sources:
        return None
    if strategy == TAINTS:
        for taint in landed.taints if landed is not None else ():
            if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in
                                                                      replacement.tolerations):
                shown = f"{taint.key}={taint.value}" if taint.value else taint.key
                return (f"landed on node {node}, which the same move is draining for its taint "
                        f"{shown}:{taint.effect}")
        return None
    if strategy == NODE_AFFINITY:
        if landed is not None and not matches_node_selector(replacement, landed):
            return f"landed on node {node}, which the same move is draining for failing its node affinity"
        return None
    return f"landed on node {node}, which the same move is taking pods off"


@dataclass(frozen=True, slots=True)
class Admission:
    """One planned eviction as a run asks the ledger to admit it (wave 0) or hold it (later wave)."""

    pod: Pod
    strategy: str
    held: bool
    scope: str
    destination: str = ""
    expected: int = 0  # the workload's status in the run's snapshot (for a new move)
    ready: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """One workload's share of the ledger, as one object in the cluster holds it: its move (in
    flight, held, lingering), its cool-down, the node cool-downs its evictions started, and its
    wasted-move back-offs. Bounded by the workload, never by the cluster: at most
    :data:`MAX_INFLIGHT_PER_MOVE` in flight, :data:`MAX_HELD_PER_MOVE` held,
    :data:`MAX_LINGERING_PER_MOVE` lingering, a node per pod it evicted within the cool-down, a
    back-off per strategy (docs/design.md, "The disruption ledger at scale")."""

    key: str
    move: Move | None = None
    last: float | None = None  # the workload's last eviction (its cool-down)
    nodes: Mapping[str, tuple[float, str]] = field(default_factory=dict)  # node -> (last eviction, strategy)
    backoffs: Mapping[str, Backoff] = field(default_factory=dict)  # strategy -> consecutive wasted moves
    # a surge-first move under way (kdesched.evictor.surge): the original and surged replicas, the
    # marked pod, when it began and when it is given up; any process finishes or restores it
    surge: Surge | None = None
    surge_block: tuple[float, str] | None = None  # no surge before this time (the last one was given up), why

    @property
    def empty(self) -> bool:
        return (self.move is None and self.last is None and not self.nodes and not self.backoffs
                and self.surge is None and self.surge_block is None)

    def to_json(self) -> dict[str, Any]:
        return {"v": RECORD_VERSION, "k": self.key, **({"m": self.move.to_json()} if self.move is not None else {}),
                **({"o": round(self.last, 3)} if self.last is not None else {}),
                **({"n": {n: [round(t, 3), s] for n, (t, s) in sorted(self.nodes.items())}} if self.nodes else {}),
                **({"b": {k: b.to_json() for k, b in sorted(self.backoffs.items())}} if self.backoffs else {}),
                **({"s": self.surge.to_json()} if self.surge is not None else {}),
                **({"sb": [round(self.surge_block[0], 3), self.surge_block[1]]} if self.surge_block is not None
                   else {})}

    def to_text(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    def fitted(self, limit: int = RECORD_MAX_BYTES) -> WorkloadRecord:
        """The record trimmed to ``limit`` bytes: the oldest node cool-downs, then the last held pods
        go (a held pod is planned again by the next run; a node's cool-down is a courtesy). In-flight
        and lingering entries are never dropped: the gate bounds them (MAX_INFLIGHT_BYTES)."""
        rec = self
        while len(rec.to_text()) > limit:
            if rec.nodes:
                oldest = sorted(rec.nodes.items(), key=lambda kv: kv[1][0])
                rec = replace(rec, nodes=dict(oldest[max(1, len(oldest) // 4):]))
            elif rec.move is not None and rec.move.held:
                held = rec.move.held
                rec = replace(rec, move=replace(rec.move, held=held[:len(held) * 3 // 4]))
            else:
                break
        return rec

    @classmethod
    def from_text(cls, text: str) -> WorkloadRecord:
        """Parse one record; ValueError naming what is wrong."""
        try:
            raw: Any = json.loads(text)
            if not isinstance(raw, Mapping) or raw.get("v") != RECORD_VERSION:
                raise ValueError(f"not a version {RECORD_VERSION} workload record")
            last = raw.get("o")
            block = raw.get("sb")
            return cls(str(raw["k"]), _move(raw["m"]) if raw.get("m") is not None else None,
                       float(last) if last is not None else None,
                       {str(n): (float(v[0]), str(v[1])) for n, v in (raw.get("n") or {}).items()},
                       {str(k): Backoff(int(v[0]), float(v[1]), str(v[2])) for k, v in (raw.get("b") or {}).items()},
                       Surge.from_json(raw["s"]) if raw.get("s") is not None else None,
                       (float(block[0]), str(block[1])) if block is not None else None)
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """What the ledger holds for the whole cluster, in one small object of fixed size: the health
    brake's last unhealthy time, the cluster-wide eviction bucket, and node cool-downs of a record
    written before the ledger was split by workload (they expire with the cool-down)."""

    unhealthy_at: float | None = None
    bucket: tuple[float, float] | None = None
    nodes: Mapping[str, tuple[float, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"v": RECORD_VERSION, **({"u": round(self.unhealthy_at, 3)} if self.unhealthy_at is not None else {}),
                **({"q": [round(self.bucket[0], 3), round(self.bucket[1], 3)]} if self.bucket is not None else {}),
                **({"n": {n: [round(t, 3), s] for n, (t, s) in sorted(self.nodes.items())}} if self.nodes else {})}

    @classmethod
    def from_json(cls, raw: Any) -> ClusterRecord:
        if not isinstance(raw, Mapping) or raw.get("v") != RECORD_VERSION:
            raise ValueError(f"not a version {RECORD_VERSION} cluster record")
        u, q = raw.get("u"), raw.get("q")
        return cls(float(u) if u is not None else None, (float(q[0]), float(q[1])) if q is not None else None,
                   {str(n): (float(v[0]), str(v[1])) for n, v in (raw.get("n") or {}).items()})


@dataclass(frozen=True, slots=True)
class Ledger:
    """The whole record. Immutable: every change returns a new ledger."""

    moves: Mapping[str, Move] = field(default_factory=dict)
    workloads: Mapping[str, float] = field(default_factory=dict)  # workload key -> last eviction (cool-down)
    nodes: Mapping[str, float] = field(default_factory=dict)  # node -> last eviction (cool-down)
    unhealthy_at: float | None = None  # the health brake: last time a run saw the cluster unhealthy
    backoffs: Mapping[str, Backoff] = field(default_factory=dict)  # backoff_key(workload, strategy) -> wasted moves
    node_strategies: Mapping[str, str] = field(default_factory=dict)  # node -> the strategy of its last eviction
    # the cluster-wide eviction bucket (kdesched.rateLimits.global): (tokens, at), None = full
    bucket: tuple[float, float] | None = None
    surges: Mapping[str, Surge] = field(default_factory=dict)  # workload key -> its surge-first move
    surge_blocks: Mapping[str, tuple[float, str]] = field(default_factory=dict)  # workload key -> (until, why)

    # -- reading -----------------------------------------------------------------------------------
    def move(self, key: str) -> Move | None:
        return self.moves.get(key)

    def held_scopes(self) -> dict[str, list[str]]:
        """scope -> the pods held for it (what a process continues after a restart)."""
        out: dict[str, list[str]] = {}
        surging = {s.uid for s in self.surges.values()}
        for mv in self.moves.values():
            for h in mv.held:
                out.setdefault(h.scope, []).append(h.pod)
            for f in mv.inflight:  # a surge-first move is finished by repeating the run that began it
                if f.uid in surging and f.scope:
                    out.setdefault(f.scope, []).append(f.pod)
        return out

    def reservations(self) -> dict[str, dict[str, int]]:
        """node -> requests reserved there by pods in flight (plus one pod slot each)."""
        out: dict[str, dict[str, int]] = {}
        for mv in self.moves.values():
            for f in mv.inflight:
                if not f.destination:
                    continue
                r = out.setdefault(f.destination, {"pods": 0})
                for res, amount in f.requests.items():
                    r[res] = r.get(res, 0) + amount
                r["pods"] += 1
        return out

    def in_flight(self, uid: str, now: float) -> bool:
        """Is this pod admitted for eviction by some run already, recently enough that the run may
        still be evicting it (its eviction is that run's)? An older admission of a pod still there
        was abandoned (its process died between admitting and evicting): see :meth:`settle`."""
        return bool(uid) and (any(f.uid == uid and f.may_still_land(now)
                                  for mv in self.moves.values() for f in mv.inflight)
                              or any(s.uid == uid for s in self.surges.values()))  # until its surge ends

    def continuing(self, pod: Pod, key: str, strategy: str) -> bool:
        """Does evicting ``pod`` for ``strategy`` continue its workload's move in progress? Only a
        pod held for the move, or one that already existed when the move began (never a
        replacement the move itself created: evicting that again would be flapping)."""
        mv = self.moves.get(key)
        if mv is None or not mv.active or mv.strategy != strategy:
            return False
        if any(h.uid == pod.uid for h in mv.held):
            return True
        created = pod.creation_time  # the API server always sets it; a hand-made pod without one is old
        return created is None or created.timestamp() < mv.started

    def cooldown_refusal(self, pod: Pod, strategy: str, now: float, workload_seconds: float,
                         node_seconds: float) -> str | None:
        """Why the cool-downs hold ``pod`` back from ``strategy`` now, or None."""
        return (self.workload_cooldown(pod, strategy, now, workload_seconds)
                or self.node_cooldown(pod, strategy, now, node_seconds))

    def workload_cooldown(self, pod: Pod, strategy: str, now: float, workload_seconds: float) -> str | None:
        """Why the workload's cool-down (or another strategy's move of it) holds ``pod`` back, or None."""
        key = workload_key(pod)
        if self.continuing(pod, key, strategy):
            return None
        mv = self.moves.get(key)
        if mv is not None and mv.active and mv.strategy != strategy:
            return (f"cool-down: workload {key} is being moved by {mv.strategy} (began {max(0, int(now - mv.started))}s "
                    f"ago); {strategy} waits for that move to end")
        last = self.workloads.get(key)
        if workload_seconds > 0 and last is not None and now - last < workload_seconds:
            # as the node cool-down: it holds a pod created after the workload's last eviction (a
            # replacement: flapping) and another strategy; a pod the same strategy would have moved
            # with the last one (it existed then) is not held, so a maintenance that reaches the
            # workload's pods on its nodes one after the other is paced by the allowance, not stalled
            # for cooldown.workloadSeconds per pod (measured: bench/bench_pool_maintenance.py)
            created = pod.creation_time
            newcomer = created is None or created.timestamp() >= last
            if strategy not in DRAINS or newcomer or (mv is not None and mv.strategy != strategy):
                return (f"cool-down: workload {key} lost a pod {max(0, int(now - last))}s ago "
                        f"(cooldown.workloadSeconds {workload_seconds:g})")
        return None

    def node_cooldown(self, pod: Pod, strategy: str, now: float, node_seconds: float) -> str | None:
        """Why the node cool-down holds ``pod`` back, or None (a pod continuing its move never)."""
        if self.continuing(pod, workload_key(pod), strategy):
            return None
        last = self.nodes.get(pod.node_name)
        if node_seconds > 0 and pod.node_name and last is not None and now - last < node_seconds:
            # the node cool-down stops flapping: a pod that came to the node after kdesched evicted
            # from it (a replacement placed back, a newcomer), or another strategy taking its turn
            # on the node. It does not stop the same strategy draining the pods that were there
            # already: a maintenance taint empties its nodes at pacing speed (docs/safety.md)
            by = self.node_strategies.get(pod.node_name, "")
            created = pod.creation_time
            newcomer = created is not None and created.timestamp() >= last
            if strategy not in DRAINS or newcomer or (by and by != strategy):
                what = "arrived after" if newcomer else f"is judged by {strategy}, not {by}, after"
                return (f"cool-down: node {pod.node_name} was evicted from {max(0, int(now - last))}s ago and "
                        f"this pod {what} that (cooldown.nodeSeconds {node_seconds:g})")
        return None

    def cooldown_ends(self, pod: Pod, now: float, workload_seconds: float, node_seconds: float) -> float | None:
        """When the cool-downs that hold ``pod`` end (epoch seconds), or None if none holds it."""
        ends = [t + workload_seconds for t in (self.workloads.get(workload_key(pod)),) if t is not None]
        ends += [t + node_seconds for t in (self.nodes.get(pod.node_name),) if t is not None]
        ends = [e for e in ends if e > now]
        return max(ends) if ends else None

    def backoff_refusal(self, pod: Pod, strategy: str, now: float, base: float, cap: float) -> str | None:
        """Why wasted moves hold ``pod``'s workload back from ``strategy`` now, or None. Applies to a
        move's continuation too: the replacement of a wasted wave would only be wasted again."""
        b = self.backoffs.get(backoff_key(workload_key(pod), strategy))
        if b is None:
            return None
        ends = b.ends(base, cap)
        if now >= ends:
            return None
        when = datetime.fromtimestamp(ends, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (f"backed off after {b.wasted} wasted move(s) (last: {b.why}); next try after {when} "
                f"({max(1, int(ends - now))}s)")

    def backoff_ends(self, pod: Pod, strategy: str, base: float, cap: float) -> float | None:
        b = self.backoffs.get(backoff_key(workload_key(pod), strategy))
        return None if b is None else b.ends(base, cap)

    # -- changing ----------------------------------------------------------------------------------
    def settle(self, pods_of: Mapping[str, Sequence[Pod]] | None, now: float, timeout_seconds: float,
               nodes: Mapping[str, Node] | None = None) -> Settled:
        """Settle moves against a snapshot holding EVERY pod (``pods_of``: workload key -> its pods;
        None when the run's snapshot does not hold every pod: then only the timeouts apply), and
        check the moves it ends (``nodes``: the snapshot's nodes, for :func:`wasted_reason`)."""
        moves: dict[str, Move] = {}
        done: list[str] = []
        timed_out: list[tuple[str, Held]] = []
        expired: list[tuple[str, InFlight]] = []
        abandoned: list[tuple[str, InFlight]] = []
        checked: list[CheckedMove] = []
        governed = {s.uid for s in self.surges.values()}  # their surge-first move ends them (kdesched.reactor.surge)
        for key, mv in self.moves.items():
            inflight, held, progress, lingering = mv.inflight, mv.held, mv.progress, mv.lingering
            surging = tuple(f for f in inflight if f.uid in governed)
            if surging:
                inflight = tuple(f for f in inflight if f.uid not in governed)
            if inflight and pods_of is not None:
                # an admission whose eviction can no longer land (past its deadline, kdesched.evictor.execute)
                # and whose pod is still there, not terminating: its run died between admitting and
                # evicting, or gave up. The pod goes back to the move's held pods, so the move goes on
                # (and is not stopped by its cool-down)
                alive = {p.uid for p in pods_of.get(key, ()) if not p.terminating and not p.terminal}
                stale = tuple(f for f in inflight if not f.may_still_land(now) and f.uid in alive)
                if stale:
                    inflight = tuple(f for f in inflight if f not in stale)
                    held += tuple(Held(f.uid, f.pod, f.node, f.scope, now, f.run) for f in stale
                                  if f.scope and all(h.uid != f.uid for h in held))
                    abandoned += [(key, f) for f in stale]
            whole = False
            if pods_of is not None:
                gone = frozenset(f.uid for f in (*inflight, *lingering))
                ready = sum(1 for p in pods_of.get(key, ()) if p.uid not in gone and pod_ready(p))
                whole = ready >= mv.ready
            if inflight and whole:
                done.append(key)
                checked += check_moves(key, mv, inflight, pods_of.get(key, ()) if pods_of is not None else (),
                                       nodes or {}, now, timeout_seconds, timed_out=False)
                inflight, progress = (), now
            if inflight:
                # past the replacement timeout, and past the point where its eviction could still land
                keep = tuple(f for f in inflight if now - f.at < timeout_seconds or f.may_still_land(now))
                gone_now = tuple(f for f in inflight if f not in keep)
                expired += [(key, f) for f in gone_now]
                if gone_now and pods_of is not None:
                    checked += check_moves(key, mv, gone_now, pods_of.get(key, ()), nodes or {}, now,
                                           timeout_seconds, timed_out=True)
                inflight = keep
                # budgets still count them until the workload is whole again
                lingering = (*lingering, *gone_now)[-MAX_LINGERING_PER_MOVE:]
            if lingering and (whole or (pods_of is not None and not pods_of.get(key))):
                lingering = ()  # whole again (or the workload is gone): nothing of it is down
            if held and pods_of is not None:
                present = {p.uid for p in pods_of.get(key, ())}
                held = tuple(h for h in held if h.uid in present)  # a held pod that is gone needs no move
            if held and not inflight and not surging and now - progress >= timeout_seconds:
                timed_out += [(key, h) for h in held]
                held = ()
            inflight = (*inflight, *surging)
            if inflight or held or lingering:
                moves[key] = replace(mv, inflight=inflight, held=held, progress=progress, lingering=lingering)
        ledger = replace(self, moves=moves, backoffs=_backoffs_after(self.backoffs, checked, now))
        return Settled(ledger, tuple(done), tuple(timed_out), tuple(expired), tuple(abandoned), tuple(checked))

    def written_by(self, run: str) -> bool:
        """Does the record hold an admission of ``run`` (its write went through, even if its answer
        was lost)?"""
        if not run:
            return False
        return any(f.run == run for mv in self.moves.values() for f in mv.inflight) or any(
            h.run == run for mv in self.moves.values() for h in mv.held)

    def admit(self, admissions: Iterable[Admission], now: float, run: str = "", deadline_seconds: float = 0.0) -> Ledger:
        """Record a run's admitted (in flight) and held evictions, and the cool-downs they start.
        ``deadline_seconds``: how long after ``now`` the admitted evictions may still land (the
        executor's deadline, kdesched.evictor.execute); each in-flight entry carries it."""
        moves = dict(self.moves)
        workloads, nodes, node_by = dict(self.workloads), dict(self.nodes), dict(self.node_strategies)
        for a in admissions:
            key = workload_key(a.pod)
            mv = moves.get(key)
            if mv is None or not mv.active:
                mv = Move(a.strategy, now, now, a.expected, a.ready, lingering=mv.lingering if mv is not None else ())
            held = tuple(h for h in mv.held if h.uid != a.pod.uid)
            pod = f"{a.pod.namespace}/{a.pod.name}"
            if a.held:
                if len(held) < MAX_HELD_PER_MOVE:
                    held += (Held(a.pod.uid, pod, a.pod.node_name, a.scope, now, run),)
                mv = replace(mv, held=held)
            else:
                requests = dict(a.pod.requests) if a.destination else {}
                entry = InFlight(a.pod.uid, pod, a.pod.node_name, now, a.destination, requests, run, a.scope,
                                 now + deadline_seconds if deadline_seconds > 0 else 0.0)
                mv = replace(mv, held=held, inflight=(*(f for f in mv.inflight if f.uid != a.pod.uid), entry),
                             progress=now)
                workloads[key] = now
                if a.pod.node_name:
                    nodes[a.pod.node_name] = now
                    node_by[a.pod.node_name] = a.strategy
            moves[key] = mv
        return replace(self, moves=moves, workloads=workloads, nodes=nodes, node_strategies=node_by)

    def without_run(self, run: str) -> Ledger:
        """The ledger without the admissions and held pods ``run`` wrote: a run whose commit lost a
        race re-plans as if it had written nothing (its earlier write of a workload's record is then
        replaced by what it admits now; kdesched.reactor.ledger_store)."""
        if not run:
            return self
        moves: dict[str, Move] = {}
        dropped: set[str] = set()
        workloads, nodes = dict(self.workloads), dict(self.nodes)
        for key, mv in self.moves.items():
            mine = [f for f in mv.inflight if f.run == run]
            if mine or any(h.run == run for h in mv.held):
                dropped |= {f.uid for f in mine}
                mv = replace(mv, inflight=tuple(f for f in mv.inflight if f.run != run),
                             held=tuple(h for h in mv.held if h.run != run))
                # and the cool-downs those admissions started (the workload's, their nodes'), unless
                # another admission of that time holds them: a run must not hold back its own pods
                # with the cool-down of an attempt that was never committed (found by the pool
                # maintenance benchmark: "lost a pod 0s ago" for pods nobody had evicted)
                times = {round(f.at, 3) for f in mine}
                if key in workloads and round(workloads[key], 3) in times and not any(
                        round(f.at, 3) in times for f in mv.inflight):
                    del workloads[key]
                for f in mine:
                    if f.node in nodes and round(nodes[f.node], 3) == round(f.at, 3) and not any(
                            g.node == f.node and round(g.at, 3) == round(f.at, 3)
                            for m in self.moves.values() for g in m.inflight if g.run != run):
                        del nodes[f.node]
            if mv.kept:
                moves[key] = mv
        # a surge-first move the run recorded goes with its admission (it acts only after its commit)
        surges = {k: s for k, s in self.surges.items() if s.uid not in dropped}
        return replace(self, moves=moves, workloads=workloads, nodes=nodes, surges=surges,
                       node_strategies={k: v for k, v in self.node_strategies.items() if k in nodes})

    def with_unhealthy(self, at: float) -> Ledger:
        """The ledger with the health brake's "last seen unhealthy" moved to ``at`` (never back)."""
        if self.unhealthy_at is not None and self.unhealthy_at >= at:
            return self
        return replace(self, unhealthy_at=at)

    def record_outcomes(self, failed: Iterable[Pod], admitted_at: float,
                        previous: Ledger | None = None, scopes: Mapping[str, str] | None = None) -> Ledger:
        """After a run's evictions: pods whose eviction did not happen (refused, failed, abandoned)
        leave the in-flight set, and the cool-downs their admission started are taken back (to what
        ``previous``, the ledger before the admission, had) unless another pod of the same workload
        or node was evicted meanwhile. A pod whose run scope is in ``scopes`` (uid -> scope) goes
        back to the move's held pods: the move goes on with it (its repeat is not held back by the
        cool-downs of the move's own other evictions, found at 30% API faults)."""
        failed = list(failed)
        if not failed:
            return self
        moves = dict(self.moves)
        workloads, nodes = dict(self.workloads), dict(self.nodes)
        for pod in failed:
            key = workload_key(pod)
            mv = moves.get(key)
            if mv is not None:
                held = mv.held
                scope = (scopes or {}).get(pod.uid)
                if scope and not any(h.uid == pod.uid for h in held) and len(held) < MAX_HELD_PER_MOVE:
                    held += (Held(pod.uid, f"{pod.namespace}/{pod.name}", pod.node_name, scope, admitted_at),)
                mv = replace(mv, inflight=tuple(f for f in mv.inflight if f.uid != pod.uid), held=held)
                if mv.kept:
                    moves[key] = mv
                else:
                    del moves[key]
            still = mv is not None and any(_same(f.at, admitted_at) for f in mv.inflight)
            if _same(workloads.get(key), admitted_at) and not still:
                _restore(workloads, key, previous.workloads if previous else {})
            if pod.node_name and _same(nodes.get(pod.node_name), admitted_at) and not any(
                    f.node == pod.node_name and _same(f.at, admitted_at)
                    for m in moves.values() for f in m.inflight):
                _restore(nodes, pod.node_name, previous.nodes if previous else {})
        return replace(self, moves=moves, workloads=workloads, nodes=nodes)

    def prune(self, now: float, keep_seconds: float, max_entries: int, backoff_keep_seconds: float = 0.0) -> Ledger:
        """Drop cool-downs past ``keep_seconds``, then the oldest beyond ``max_entries`` per table
        (moves are never dropped here: they end by settling or at their timeout); back-offs whose
        last wasted move is ``backoff_keep_seconds`` old (0: kept until :data:`MAX_BACKOFFS`), then
        the oldest beyond :data:`MAX_BACKOFFS`."""
        tables = []
        for table in (self.workloads, self.nodes):
            kept = {k: t for k, t in table.items() if now - t < keep_seconds}
            if 0 < max_entries < len(kept):
                kept = dict(sorted(kept.items(), key=lambda kv: kv[1])[len(kept) - max_entries:])
            tables.append(kept)
        backoffs = {k: b for k, b in self.backoffs.items() if backoff_keep_seconds <= 0 or now - b.at < backoff_keep_seconds}
        if max_entries > 0 and len(backoffs) > MAX_BACKOFFS:
            backoffs = dict(sorted(backoffs.items(), key=lambda kv: kv[1].at)[len(backoffs) - MAX_BACKOFFS:])
        node_by = {k: v for k, v in self.node_strategies.items() if k in tables[1]}
        blocks = {k: b for k, b in self.surge_blocks.items() if b[0] > now}
        return replace(self, moves=dict(self.moves), workloads=tables[0], nodes=tables[1], backoffs=backoffs,
                       node_strategies=node_by, surge_blocks=blocks)

    def __bool__(self) -> bool:
        return bool(self.moves or self.workloads or self.nodes or self.unhealthy_at is not None or self.backoffs
                    or self.surges or self.surge_blocks)

    # -- the records it is stored as (kdesched.reactor.ledger_store) -------------------------------
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
            moves = {str(k): _move(v) for k, v in (raw.get("m") or {}).items()}
            unhealthy = raw.get("u")  # absent in a record written before the health brake
            if unhealthy is not None and (not isinstance(unhealthy, (int, float)) or isinstance(unhealthy, bool)):
                raise ValueError(f"u (last unhealthy) must be a number, got {unhealthy!r}")
            backoffs = {str(k): Backoff(int(v[0]), float(v[1]), str(v[2]))
                        for k, v in (raw.get("b") or {}).items()}  # absent before checked moves
            return cls(moves, _times(raw.get("o")), _times(raw.get("n")),
                       None if unhealthy is None else float(unhealthy), backoffs,
                       {str(k): str(v) for k, v in (raw.get("ns") or {}).items()}), ""
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            return cls(), f"the disruption ledger is malformed ({type(exc).__name__}: {exc}); starting from an empty one"


def _same(recorded: float | None, at: float) -> bool:
    """Is ``recorded`` the time ``at`` (the record keeps milliseconds)?"""
    return recorded is not None and abs(recorded - at) < 0.002


def _restore(table: dict[str, float], key: str, before: Mapping[str, float]) -> None:
    if key in before:
        table[key] = before[key]
    else:
        table.pop(key, None)


def _times(raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _move(raw: Mapping[str, Any]) -> Move:
    held = tuple(Held(str(h[0]), str(h[1]), str(h[2]), str(h[3]), float(h[4]), str(h[5]) if len(h) > 5 else "")
                 for h in raw.get("h") or ())
    return Move(str(raw["s"]), float(raw["t0"]), float(raw["p"]), int(raw["e"]), int(raw["r"]),
                tuple(_inflight(f) for f in raw.get("f") or ()), held,
                tuple(_inflight(f) for f in raw.get("l") or ()))


def _inflight(f: Sequence[Any]) -> InFlight:
    return InFlight(str(f[0]), str(f[1]), str(f[2]), float(f[3]), str(f[4]),
                    {str(k): int(v) for k, v in dict(f[5]).items()}, str(f[6]) if len(f) > 6 else "",
                    str(f[7]) if len(f) > 7 else "", float(f[8]) if len(f) > 8 else 0.0)


def _created(p: Pod) -> float:
    return p.creation_time.timestamp() if p.creation_time is not None else 0.0


def _ready_at(p: Pod) -> float | None:
    for c in p.conditions:
        if c.type == "Ready" and c.status == "True":
            return c.last_transition_time.timestamp() if c.last_transition_time is not None else None
    return None


def replacements(inflight: Sequence[InFlight], pods: Sequence[Pod], spare: int | None = None) -> dict[str, Pod]:
    """Each evicted pod's replacement (uid -> pod), from the workload's pods as the snapshot has
    them: the pods created after its eviction was admitted, matched in order (earliest eviction,
    earliest replacement). ``creationTimestamp`` and the Ready condition's time have second
    resolution, so a pod created in the admission's second is:

    * never a replacement if it was Ready in an earlier second (it existed before);
    * a replacement if it became Ready in a later second, or is not Ready yet;
    * ambiguous if it became Ready in the admission's own second: a fast replacement, or one of a
      Deployment's original pods created a moment before. Such a pod is taken only when no other
      fits, and only up to ``spare`` of them: the pods the workload has beyond what it had left
      after the evictions (None: no limit). A workload back at its count with no new pod has none.

    A pod created in an earlier second is never a replacement: taking one for it would report the
    move landed on that pod's node (found on a real control plane: a Deployment created a second
    before)."""
    gone = {f.uid for f in inflight}
    candidates = sorted((p for p in pods if p.uid not in gone and not p.terminating and not p.terminal
                         and p.creation_time is not None), key=_created)
    out: dict[str, Pod] = {}
    used: set[str] = set()
    ambiguous_left = len(candidates) if spare is None else spare
    for f in sorted(inflight, key=lambda f: f.at):
        second = int(f.at)
        clear: Pod | None = None
        ambiguous: Pod | None = None
        for p in candidates:
            if p.uid in used or _created(p) < second:
                continue
            ready_at = _ready_at(p)
            if ready_at is not None and int(ready_at) < second:
                continue  # Ready before the eviction was admitted: it was there already
            if ready_at is not None and int(ready_at) == second:
                ambiguous = ambiguous or p
                continue
            clear = p
            break
        chosen = clear
        if chosen is None and ambiguous is not None and ambiguous_left > 0:
            chosen = ambiguous
            ambiguous_left -= 1
        if chosen is not None:
            out[f.uid] = chosen
            used.add(chosen.uid)
    return out


def check_moves(key: str, mv: Move, inflight: Sequence[InFlight], pods: Sequence[Pod], nodes: Mapping[str, Node],
                now: float, timeout_seconds: float, *, timed_out: bool) -> list[CheckedMove]:
    """The checked moves of ``inflight`` (settled because the workload is back at its Ready count,
    or ``timed_out`` at the replacement timeout). A bare pod (no controller) has no replacement to
    follow: not checked."""
    if key.startswith("Pod/"):
        return []
    gone = {f.uid for f in inflight}
    present = sum(1 for p in pods if p.uid not in gone and not p.terminating and not p.terminal)
    # the pods beyond what the workload had left after these evictions (mv.expected: its count when
    # the move began; 0 when unknown, then no limit is derived)
    spare = present - (mv.expected - len(inflight)) if mv.expected else None
    found = replacements(inflight, pods, spare)
    out: list[CheckedMove] = []
    for f in inflight:
        # the nodes the move was draining when this eviction was admitted: a node the move took on
        # later (the next step of a rolling maintenance held in the same move) was fine at placement
        sources = {g.node for g in mv.inflight if g.at <= f.at + 0.002} | {h.node for h in mv.held if h.since <= f.at + 0.002}
        r = found.get(f.uid)
        if r is None or not pod_ready(r) or not r.node_name:
            if not timed_out:
                out.append(CheckedMove(key, mv.strategy, f.pod, f.node, f.destination, "", None, UNKNOWN))
                continue
            state = "no replacement" if r is None else f"replacement {r.namespace}/{r.name} still {r.phase or 'Pending'}"
            out.append(CheckedMove(key, mv.strategy, f.pod, f.node, f.destination, r.node_name if r else "", None,
                                   PENDING_TIMEOUT, f"{state} {int(now - f.at)}s after the eviction "
                                   f"(replacementTimeoutSeconds {timeout_seconds:g})"))
            continue
        ready_at = _ready_at(r)
        seconds = max(0.0, (ready_at if ready_at is not None else now) - f.at)
        why = wasted_reason(mv.strategy, r, f.node, nodes.get(r.node_name), sources)
        out.append(CheckedMove(key, mv.strategy, f.pod, f.node, f.destination, r.node_name, seconds,
                               WASTED if why else ACHIEVED, why or ""))
    return out


def _backoffs_after(backoffs: Mapping[str, Backoff], checked: Sequence[CheckedMove], now: float) -> dict[str, Backoff]:
    """The back-offs after a settle's checked moves: one more wasted move per workload and strategy
    whose settled wave had a wasted move (a wave of three wasted pods is one step, not three), and
    the entry dropped when a wave only achieved its purpose (an unknown outcome changes nothing)."""
    out = dict(backoffs)
    waves: dict[str, list[CheckedMove]] = {}
    for c in checked:
        waves.setdefault(backoff_key(c.workload, c.strategy), []).append(c)
    for k, wave in waves.items():
        wasted = [c for c in wave if c.counts_as_wasted]
        if wasted:
            before = out.get(k)
            out[k] = Backoff((before.wasted if before else 0) + 1, now, wasted[0].why[:MAX_WHY])
        elif any(c.outcome == ACHIEVED for c in wave):
            out.pop(k, None)
    return out

"""The disruption ledger's records and their JSON: what one workload's share holds (its
:class:`Move` of :class:`InFlight` and :class:`Held` pods, its :class:`Backoff` entries), the two
objects it is stored as in the cluster (:class:`WorkloadRecord`, :class:`ClusterRecord`), and the
bounds that keep each of them small.

Why a module of its own: the encoding is the on-cluster format. A record written by one version is
read by the next (and by another replica during a rollout), so it changes only on purpose, in one
place, pinned byte for byte by ``tests/evictor/test_ledger_encoding.py``. What the ledger means and
how runs change it: :mod:`kdesched.evictor.ledger`. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kdesched.evictor.surge import Surge
from kdesched.evictor.workloads import Workload, workload_of
from kdesched.model.records import Pod

LEDGER_VERSION = 2  # the single-annotation record of 0.1 (read once, then split: kdesched.reactor.io.ledger_store)
RECORD_VERSION = 3  # the records the ledger is stored as since (WorkloadRecord, ClusterRecord)
MAX_HELD_PER_MOVE = 200  # held pods remembered per workload (a larger move re-plans the rest anyway)
MAX_INFLIGHT_PER_MOVE = 1000  # pods of one workload in flight at once: bounds one record (docs/design.md)
# the bytes one workload's in-flight and lingering entries may take in its record; with the held
# pods and node cool-downs trimmed to fit (kdesched.reactor.io.ledger_store) a record stays under
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
    scope: str  # the run to repeat to continue (kdesched.reactor.run.continuation scope keys)
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
            return cls(str(raw["k"]), move_from_json(raw["m"]) if raw.get("m") is not None else None,
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


def times_from_json(raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def move_from_json(raw: Mapping[str, Any]) -> Move:
    held = tuple(Held(str(h[0]), str(h[1]), str(h[2]), str(h[3]), float(h[4]), str(h[5]) if len(h) > 5 else "")
                 for h in raw.get("h") or ())
    return Move(str(raw["s"]), float(raw["t0"]), float(raw["p"]), int(raw["e"]), int(raw["r"]),
                tuple(inflight_from_json(f) for f in raw.get("f") or ()), held,
                tuple(inflight_from_json(f) for f in raw.get("l") or ()))


def inflight_from_json(f: Sequence[Any]) -> InFlight:
    return InFlight(str(f[0]), str(f[1]), str(f[2]), float(f[3]), str(f[4]),
                    {str(k): int(v) for k, v in dict(f[5]).items()}, str(f[6]) if len(f) > 6 else "",
                    str(f[7]) if len(f) > 7 else "", float(f[8]) if len(f) > 8 else 0.0)


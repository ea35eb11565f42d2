"""How runs change the disruption ledger: admitting and holding evictions, settling moves against a
snapshot, taking back what did not happen, dropping a lost commit's admissions, pruning.

Each function takes a ledger and returns a new one (of the same class: ``dataclasses.replace``);
:class:`kdesched.evictor.ledger.Ledger` offers them as its methods, which is how callers use them.
What they maintain (moves, in flight, held, lingering, cool-downs, back-offs) is described in
:mod:`kdesched.evictor.ledger`. Pure: no I/O, a clock passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from kdesched.evictor.checked_moves import CheckedMove, backoffs_after, check_moves, replacements
from kdesched.evictor.ledger_records import (
    MAX_BACKOFFS,
    MAX_HELD_PER_MOVE,
    MAX_LINGERING_PER_MOVE,
    Backoff,
    Held,
    InFlight,
    Move,
    workload_key,
)
from kdesched.evictor.ledger_state import LedgerState
from kdesched.model.derived import pod_ready
from kdesched.model.records import Node, Pod

L = TypeVar("L", bound=LedgerState)


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
class Settlement:
    """What :func:`settle` found (:class:`kdesched.evictor.ledger.Settled` holds it with the new ledger)."""

    moves: dict[str, Move]
    backoffs: dict[str, Backoff]
    done: tuple[str, ...]
    timed_out: tuple[tuple[str, Held], ...]
    expired: tuple[tuple[str, InFlight], ...]
    abandoned: tuple[tuple[str, InFlight], ...]
    checked: tuple[CheckedMove, ...]


def settle(ledger: LedgerState, pods_of: Mapping[str, Sequence[Pod]] | None, now: float, timeout_seconds: float,
           nodes: Mapping[str, Node] | None = None) -> Settlement:
    """Settle moves against a snapshot holding EVERY pod (``pods_of``: workload key -> its pods;
    None when the run's snapshot does not hold every pod: then only the timeouts apply), and
    check the moves it ends (``nodes``: the snapshot's nodes, for :func:`~kdesched.evictor.checked_moves.wasted_reason`)."""
    moves: dict[str, Move] = {}
    done: list[str] = []
    timed_out: list[tuple[str, Held]] = []
    expired: list[tuple[str, InFlight]] = []
    abandoned: list[tuple[str, InFlight]] = []
    checked: list[CheckedMove] = []
    governed = {s.uid for s in ledger.surges.values()}  # their surge-first move ends them (kdesched.reactor.run.surge)
    for key, mv in ledger.moves.items():
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
        elif lingering and pods_of is not None:
            lingering = _still_down(lingering, inflight, pods_of.get(key, ()))
        if held and pods_of is not None:
            present = {p.uid for p in pods_of.get(key, ())}
            held = tuple(h for h in held if h.uid in present)  # a held pod that is gone needs no move
        if held and not inflight and not surging and now - progress >= timeout_seconds:
            timed_out += [(key, h) for h in held]
            held = ()
        inflight = (*inflight, *surging)
        if inflight or held or lingering:
            moves[key] = replace(mv, inflight=inflight, held=held, progress=progress, lingering=lingering)
    return Settlement(moves, backoffs_after(ledger.backoffs, checked, now), tuple(done), tuple(timed_out),
                      tuple(expired), tuple(abandoned), tuple(checked))


def _still_down(lingering: tuple[InFlight, ...], inflight: tuple[InFlight, ...],
                pods: Sequence[Pod]) -> tuple[InFlight, ...]:
    """The lingering evictions budgets still count, where the workload is not back at the Ready
    count it had when the move began (scaled down since, or another of its pods unready): those
    whose replacement is not Ready yet, unless every pod the workload has now is Ready (it is whole
    at its current size). Without this, a scale-down or an unrelated crash-looping replica kept the
    pod counted for ever, and a cluster-wide budget of 1 refused every eviction."""
    live = [p for p in pods if not p.terminating and not p.terminal]
    if live and all(pod_ready(p) for p in live):
        return ()
    found = replacements((*lingering, *inflight), pods, spare=0)  # only pods clearly created after
    return tuple(f for f in lingering if not (f.uid in found and pod_ready(found[f.uid])))


def admit(ledger: L, admissions: Iterable[Admission], now: float, run: str = "", deadline_seconds: float = 0.0) -> L:
    """Record a run's admitted (in flight) and held evictions, and the cool-downs they start.
    ``deadline_seconds``: how long after ``now`` the admitted evictions may still land (the
    executor's deadline, kdesched.evictor.execute); each in-flight entry carries it."""
    moves = dict(ledger.moves)
    workloads, nodes, node_by = dict(ledger.workloads), dict(ledger.nodes), dict(ledger.node_strategies)
    for a in admissions:
        key = workload_key(a.pod)
        mv = moves.get(key)
        if mv is None or not mv.active:
            mv = Move(a.strategy, now, now, a.expected, a.ready, lingering=mv.lingering if mv is not None else ())
        held = tuple(h for h in mv.held if h.uid != a.pod.uid)
        pod = f"{a.pod.namespace}/{a.pod.name}"
        if a.held:
            if any(h.uid == a.pod.uid and h.scope == a.scope and h.node == a.pod.node_name for h in mv.held):
                # held again by the scope that held it: the entry stays as it was (its first run and
                # time), so the workload's record is not rewritten by every repeat of a move. A pool
                # maintenance holds 50 workloads' pods for minutes: rewritten, that was 50 record
                # writes per run, most of the client's request budget (bench_pool_maintenance)
                held = mv.held
            elif len(held) < MAX_HELD_PER_MOVE:
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
    return replace(ledger, moves=moves, workloads=workloads, nodes=nodes, node_strategies=node_by)


def without_run(ledger: L, run: str) -> L:
    """The ledger without the admissions and held pods ``run`` wrote: a run whose commit lost a
    race re-plans as if it had written nothing (its earlier write of a workload's record is then
    replaced by what it admits now; kdesched.reactor.io.ledger_store)."""
    if not run:
        return ledger
    moves: dict[str, Move] = {}
    dropped: set[str] = set()
    workloads, nodes = dict(ledger.workloads), dict(ledger.nodes)
    for key, mv in ledger.moves.items():
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
                        for m in ledger.moves.values() for g in m.inflight if g.run != run):
                    del nodes[f.node]
        if mv.kept:
            moves[key] = mv
    # a surge-first move the run recorded goes with its admission (it acts only after its commit)
    surges = {k: s for k, s in ledger.surges.items() if s.uid not in dropped}
    return replace(ledger, moves=moves, workloads=workloads, nodes=nodes, surges=surges,
                   node_strategies={k: v for k, v in ledger.node_strategies.items() if k in nodes})


def record_outcomes(ledger: L, failed: Iterable[Pod], admitted_at: float,
                    previous: LedgerState | None = None, scopes: Mapping[str, str] | None = None) -> L:
    """After a run's evictions: pods whose eviction did not happen (refused, failed, abandoned)
    leave the in-flight set, and the cool-downs their admission started are taken back (to what
    ``previous``, the ledger before the admission, had) unless another pod of the same workload
    or node was evicted meanwhile. A pod whose run scope is in ``scopes`` (uid -> scope) goes
    back to the move's held pods: the move goes on with it (its repeat is not held back by the
    cool-downs of the move's own other evictions, found at 30% API faults)."""
    failed = list(failed)
    if not failed:
        return ledger
    moves = dict(ledger.moves)
    workloads, nodes = dict(ledger.workloads), dict(ledger.nodes)
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
    return replace(ledger, moves=moves, workloads=workloads, nodes=nodes)


def prune(ledger: L, now: float, keep_seconds: float, max_entries: int, backoff_keep_seconds: float = 0.0) -> L:
    """Drop cool-downs past ``keep_seconds``, then the oldest beyond ``max_entries`` per table
    (moves are never dropped here: they end by settling or at their timeout); back-offs whose
    last wasted move is ``backoff_keep_seconds`` old (0: kept until :data:`MAX_BACKOFFS`), then
    the oldest beyond :data:`MAX_BACKOFFS`."""
    tables = []
    for table in (ledger.workloads, ledger.nodes):
        kept = {k: t for k, t in table.items() if now - t < keep_seconds}
        if 0 < max_entries < len(kept):
            kept = dict(sorted(kept.items(), key=lambda kv: kv[1])[len(kept) - max_entries:])
        tables.append(kept)
    backoffs = {k: b for k, b in ledger.backoffs.items() if backoff_keep_seconds <= 0 or now - b.at < backoff_keep_seconds}
    if max_entries > 0 and len(backoffs) > MAX_BACKOFFS:
        backoffs = dict(sorted(backoffs.items(), key=lambda kv: kv[1].at)[len(backoffs) - MAX_BACKOFFS:])
    node_by = {k: v for k, v in ledger.node_strategies.items() if k in tables[1]}
    blocks = {k: b for k, b in ledger.surge_blocks.items() if b[0] > now}
    return replace(ledger, moves=dict(ledger.moves), workloads=tables[0], nodes=tables[1], backoffs=backoffs,
                   node_strategies=node_by, surge_blocks=blocks)



def _same(recorded: float | None, at: float) -> bool:
    """Is ``recorded`` the time ``at`` (the record keeps milliseconds)?"""
    return recorded is not None and abs(recorded - at) < 0.002


def _restore(table: dict[str, float], key: str, before: Mapping[str, float]) -> None:
    if key in before:
        table[key] = before[key]
    else:
        table.pop(key, None)



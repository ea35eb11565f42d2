"""Paced moves that finish: a run that held evictions is repeated until nothing is held.

Why: on the event path a run never waits for a replacement (a Knative request, the node and
balance locks must not be held for it): it evicts wave 0 and reports the rest ``paced``. Something
must then come back for them, for every kind of run (node-scoped, balance, manual, sweep), or the
cluster stays half-moved until the next sweep. This module keeps, per *scope* (what the run decided
over: :func:`node_scope` / :func:`balance_scope`), one timer that repeats the run:

* 1 s after a run that evicted (a replacement is usually Ready within seconds), every second
  for the first ``PATIENT_REPEATS`` (4) seconds of no progress (the replacements of the wave it
  evicted are starting: the next wave should go the second they are Ready, not at the end of a
  back-off), then 1.5x longer each time nothing moved, up to ``longest`` (10 s);
* at once (``first``) when another run made progress on a workload this scope holds pods of
  (:meth:`Continuations.wake`: the maintenance taint of six nodes is six scopes sharing one
  workload; the one that evicts wakes the others when it settles);
* within ``READY_WAKE_SECONDS`` (0.2 s) when ``kdesched serve``'s watch cache sees a pod of such a
  workload turn Ready: the replacement the next wave waits for (a timer would find it up to a
  repeat interval later; the 0.2 s gathers the Ready pods of one wave into one batched run);
* until a run of the scope holds nothing, or nothing moved for the replacement timeout: then the
  move ends ``paced`` (the ledger gives its held pods up with a note and an Event), and the next
  event or the sweep re-decides;
* a move that ended on the timeout stays *dormant* (its scope and the workloads it held, up to
  ``DORMANT_SECONDS``, at most ``MAX_DORMANT`` of them): progress on one of those workloads later
  (:meth:`Continuations.wake`: a replacement slower than the timeout turns Ready at last, or another
  run evicts one of its pods) starts its repeats again. Without this, a replacement that took longer
  than ``replacementTimeoutSeconds`` left the rest of a tainted node's pods where they were until
  another event for the node or the sweep (900 s by default; off in the pool-storm test, where one
  pod was left on a tainted node in CI).

Repeats of node-scoped runs that fall due together are decided as **one run** (``run_batch``):
when one fires, every other node scope of the same strategies due within ``batch_window`` (the
longest back-off, 10 s) comes along. A pool maintenance is many node scopes sharing workloads: 20
tainted nodes are 20 repeats per wave, and run one by one (one admission at a time in a process)
they cost a wave seconds of planning each; batched, one plan and one ledger commit serve them all
(docs/benchmarks.md, "Pool maintenance"). Each scope's chain goes on as before: the batch reports
back per scope (``after_run`` for every one of them).

A node-scoped run whose only obstacle was a cool-down, a wasted-move back-off or the cluster-wide
bucket is repeated once when it ends (the bucket: at its next token).
The state of a move lives in the disruption ledger, not here: a restarted process or a new leader
calls :meth:`Continuations.resume` with the scopes the ledger still holds pods for.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from kdesched.reactor import metrics as m

log = logging.getLogger("kdesched.reactor.continuation")

FIRST_SECONDS = 1.0
LONGEST_SECONDS = 10.0
BACKOFF = 1.5
PATIENT_REPEATS = 4  # repeats at the first interval after progress, before backing off
READY_WAKE_SECONDS = 0.2  # a pod of a held workload turned Ready: its scopes repeat this soon
DORMANT_SECONDS = 3600.0  # how long a timed-out move may be woken again (the sweep re-decides after)
MAX_DORMANT = 10_000  # timed-out moves remembered at most (the oldest forgotten first)


def node_scope(node: str, strategies: Iterable[str]) -> str:
    """The scope of a node-scoped run (its repeat runs these strategies on this node)."""
    return f"node:{node}:{'+'.join(strategies)}"


def batch_group(key: str) -> str | None:
    """Which repeats may be decided as one run with ``key``'s: node scopes of the same strategies
    (their group), never a balance scope (None)."""
    kind, _, rest = key.partition(":")
    if kind != "node":
        return None
    node, sep, names = rest.partition(":")
    return names if node and sep and names else None


#: the longest scope key kept as written; a longer one (a manual run over many nodes or strategies)
#: is kept as a digest, because every ledger entry of the run stores its scope, and the entries'
#: budget assumes this many bytes of it (kdesched.evictor.ledger_records.entry_bytes)
SCOPE_KEY_MAX = 96
#: the run labels a balance scope may carry as its origin (what a repeat of it is, for windows)
ORIGINS = ("taints", "affinity", "rebalance", "sweep", "manual")


def balance_scope(strategies: Iterable[str] | None, nodes: Iterable[str] | None = None, origin: str = "") -> str:
    """The scope of a run under the Lease (rebalance, manual, sweep, topology): ``*`` = the whole policy.

    ``origin`` is the label of the run (``sweep``, ``manual``...): its repeats keep it, so a
    disruption window that filters on it still covers them. A key longer than ``SCOPE_KEY_MAX``
    (its nodes and strategies) is replaced by ``balance:~<digest>``: :func:`parse_scope` then
    cannot give them back, and the caller keeps them (:class:`LongScopes`)."""
    names = "+".join(strategies) if strategies is not None else "*"
    body = names + (f"@{','.join(nodes)}" if nodes else "")
    if len("balance:") + len(body) > SCOPE_KEY_MAX:
        body = "~" + hashlib.sha256(body.encode()).hexdigest()[:20]
    return f"balance:{body}" + (f"#{origin}" if origin else "")


@dataclass(frozen=True, slots=True)
class Scope:
    """A parsed scope key."""

    kind: str  # "node" | "balance"
    strategies: tuple[str, ...] | None  # None: the whole policy
    node: str = ""
    nodes: tuple[str, ...] | None = None
    origin: str = ""  # the label of the run a balance scope repeats ("" in keys written before 0.2)
    digest: str = ""  # a long balance scope: its strategies and nodes are not in the key (LongScopes)


def parse_scope(key: str) -> Scope:
    """The inverse of :func:`node_scope` / :func:`balance_scope`; ValueError for anything else (a
    ledger written by another version)."""
    kind, _, rest = key.partition(":")
    if kind == "node":
        node, sep, names = rest.partition(":")
        if not node or not sep or not names:
            raise ValueError(f"not a node scope: {key!r}")
        return Scope("node", tuple(names.split("+")), node=node)
    if kind == "balance" and rest:
        rest, _, origin = rest.partition("#")
        if origin and origin not in ORIGINS:
            raise ValueError(f"not a run scope: {key!r} (origin {origin!r})")
        if rest.startswith("~"):
            if len(rest) < 2:
                raise ValueError(f"not a run scope: {key!r}")
            return Scope("balance", None, origin=origin, digest=rest[1:])
        names, _, nodes = rest.partition("@")
        if not names:
            raise ValueError(f"not a run scope: {key!r}")
        return Scope("balance", None if names == "*" else tuple(names.split("+")),
                     nodes=tuple(nodes.split(",")) if nodes else None, origin=origin)
    raise ValueError(f"not a run scope: {key!r}")


class LongScopes:
    """What the digest of a long scope key stands for, in this process (the ledger stores the digest
    only). A restarted process cannot resume such a scope: its held pods lapse at the replacement
    timeout and the next request or sweep re-decides them (docs/reactor.md). Bounded: the oldest
    are forgotten first, and a forgotten scope's repeats end the same way."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._scopes: dict[str, Scope] = {}
        self._lock = threading.Lock()

    def remember(self, key: str, strategies: Iterable[str] | None, nodes: Iterable[str] | None) -> None:
        if "~" not in key:
            return
        with self._lock:
            self._scopes.pop(key, None)
            self._scopes[key] = Scope("balance", tuple(strategies) if strategies is not None else None,
                                      nodes=tuple(nodes) if nodes else None, origin=parse_scope(key).origin)
            while len(self._scopes) > self.limit:
                del self._scopes[next(iter(self._scopes))]

    def resolve(self, key: str) -> Scope | None:
        """The scope of ``key`` with its strategies and nodes; None for a digest this process does not know."""
        scope = parse_scope(key)
        if not scope.digest:
            return scope
        with self._lock:
            return self._scopes.get(key)


@dataclass
class _Chain:
    delay: float
    progress: float
    workloads: set[str] = field(default_factory=set)
    timer: threading.Timer | None = None
    due: float = 0.0
    #: a wake that came while the chain's run was in flight (no timer to bring forward): the delay
    #: it asked for, applied from the run's end by the scheduling that follows it (from the end,
    #: not from the wake: the scopes a batched run reports back on one after another then fall
    #: due together, and the first to fire takes the others along, one run again)
    woken: float | None = None


class DormantMoves:
    """Moves whose repeats timed out, that progress on a workload they held may start again (the
    module docstring). Not thread-safe: :class:`Continuations` calls it under its lock."""

    def __init__(self) -> None:
        # scope -> (the workloads it held, when it ended), oldest first; and workload -> those scopes
        # (a wake, on every Ready pod in serve, looks up its own workloads only)
        self._moves: dict[str, tuple[frozenset[str], float]] = {}
        self._by_workload: dict[str, set[str]] = {}

    def keep(self, scope: str, workloads: Collection[str], now: float) -> None:
        self.forget(scope)
        if not workloads:
            return
        self._moves[scope] = (frozenset(workloads), now)
        for w in workloads:
            self._by_workload.setdefault(w, set()).add(scope)
        while len(self._moves) > MAX_DORMANT:
            self.forget(next(iter(self._moves)))

    def take(self, wanted: Collection[str], now: float, *, but: str = "") -> list[tuple[str, frozenset[str]]]:
        """Remove and return the moves that held one of ``wanted`` (but ``but``): scope, workloads."""
        self.expire(now)
        out = []
        for scope in sorted(set().union(*(self._by_workload.get(w, ()) for w in wanted))):
            if scope != but:
                out.append((scope, self._moves[scope][0]))
                self.forget(scope)
        return out

    def expire(self, now: float) -> None:
        while self._moves:
            scope, (_, since) = next(iter(self._moves.items()))
            if now - since < DORMANT_SECONDS:
                break
            self.forget(scope)

    def forget(self, scope: str) -> None:
        """``scope`` is no longer a dormant move (if it was one)."""
        entry = self._moves.pop(scope, None)
        for w in entry[0] if entry is not None else ():
            scopes = self._by_workload.get(w)
            if scopes is not None:
                scopes.discard(scope)
                if not scopes:
                    del self._by_workload[w]

    def clear(self) -> None:
        self._moves.clear()
        self._by_workload.clear()

    def moves(self, now: float) -> dict[str, frozenset[str]]:
        self.expire(now)
        return {k: w for k, (w, _) in self._moves.items()}


class Continuations:
    """Timers that repeat runs holding paced evictions (see the module docstring). ``run`` repeats
    one scope (the reactor's); it is called in a timer thread and may raise (logged, retried)."""

    def __init__(self, run: Callable[[str], None], *, stop: threading.Event, timeout_seconds: float,
                 first: float = FIRST_SECONDS, longest: float = LONGEST_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 run_batch: Callable[[list[str]], None] | None = None, batch_window: float | None = None) -> None:
        self.run = run
        # repeats of node scopes due together, decided as one run (module docstring); it must call
        # after_run() for every scope it is given
        self.run_batch = run_batch
        # every chain of the group due within it joins (the longest back-off: a wave's scopes drift
        # apart by their runs' lengths, and one run costs less than two however early it comes;
        # a cool-down's one-shot repeat, minutes away, waits for its time)
        self._batch_window = batch_window
        self.stop = stop
        self.timeout_seconds = timeout_seconds
        self.first = first
        self.longest = max(longest, first)
        self.clock = clock
        self._lock = threading.Lock()
        self._chains: dict[str, _Chain] = {}
        self._dormant = DormantMoves()  # moves that ended on the timeout
        self.long_scopes = LongScopes()  # what the digests of long balance scopes stand for

    @property
    def batch_window(self) -> float:
        return self.longest if self._batch_window is None else self._batch_window

    def scheduled(self) -> dict[str, float]:
        """scope -> seconds until its repeat (for tests and /readyz)."""
        now = self.clock()
        with self._lock:
            return {k: max(0.0, c.due - now) for k, c in self._chains.items() if c.timer is not None}

    def dormant(self) -> dict[str, frozenset[str]]:
        """Moves that ended on the timeout and may still be woken: scope -> the workloads they held."""
        now = self.clock()
        with self._lock:
            return self._dormant.moves(now)

    def delay(self, scope: str) -> float | None:
        """The delay the next repeat of ``scope`` waits (its back-off), None when none is due."""
        with self._lock:
            chain = self._chains.get(scope)
            return None if chain is None else chain.delay

    def after_run(self, scope: str, *, held: Collection[str], evicted: Collection[str],
                  cooldown_in: float | None = None, why: str = "a cool-down") -> str:
        """Called after every run of ``scope``: ``held`` / ``evicted`` are the workload keys it held
        pods of / evicted pods of, ``cooldown_in`` the seconds until the cool-down that held a pod
        back ends (None: none did; ``why`` names what held it: a cool-down, or the controls'
        deferral of :mod:`kdesched.reactor.run.controls`, which uses the same one-shot repeat). Returns a note for the report ("" when nothing is repeated)."""
        if evicted:
            self.wake(evicted, but=scope)
        now = self.clock()
        bound = max(self.timeout_seconds, self.longest)
        with self._lock:
            self._dormant.forget(scope)  # a run of the scope decides afresh: its own chain, or none
            chain = self._chains.get(scope)
            if not held:
                if chain is not None:
                    self._drop(scope, chain)
                    m.CONTINUATIONS.labels("ended").inc()
                if cooldown_in is None or self.stop.is_set():
                    return ""
                delay = max(self.first, cooldown_in + 0.5)
                chain = self._chains[scope] = _Chain(delay, now)
                self._schedule(scope, chain, delay)
                m.CONTINUATIONS.labels("scheduled").inc()
                return f"held by {why}: this run is repeated in {delay:.0f}s, when it ends"
            if self.stop.is_set():
                return ""
            fresh = chain is None
            if chain is None:
                chain = self._chains[scope] = _Chain(self.first, now)
            chain.workloads |= set(held)
            if evicted:
                chain.progress, chain.delay = now, self.first
            elif chain.timer is None and not fresh and now - chain.progress >= PATIENT_REPEATS * self.first:
                chain.delay = min(self.longest, chain.delay * BACKOFF)  # a repeat that moved nothing: back off
            if now - chain.progress >= bound:
                self._time_out(scope, chain, now, bound)
                return (f"paced evictions: no progress for {bound:g}s (replacementTimeoutSeconds); they go on when a "
                        "pod of their workloads turns Ready or is evicted, or at the next event or sweep")
            if chain.timer is None:
                self._schedule(scope, chain, chain.delay)
                m.CONTINUATIONS.labels("scheduled").inc()
            delay = max(0.0, chain.due - now)
        return (f"paced evictions: this run is repeated in {round(delay, 2):g}s, to evict the next pods of each workload "
                "once it is back at its Ready count")

    def wake(self, workloads: Collection[str], but: str = "", *, within: float | None = None) -> int:
        """Progress on ``workloads`` (another run evicted some, or, ``within`` given, a replacement of
        theirs turned Ready): the scopes holding their pods look again within ``within`` seconds
        (default: the first interval). Returns how many scopes were brought forward."""
        now = self.clock()
        wanted = set(workloads)
        soon = self.first if within is None else within
        n = 0
        with self._lock:
            for scope, chain in self._chains.items():
                if scope == but or not (chain.workloads & wanted):
                    continue
                chain.progress, chain.delay = now, self.first
                if chain.timer is None:  # its run is in flight and may have read before the change
                    chain.woken = soon if chain.woken is None else min(chain.woken, soon)
                    n += 1
                elif chain.due - now > soon:
                    chain.timer.cancel()
                    self._schedule(scope, chain, soon)
                    n += 1
            n += self._revive(wanted, but, soon, now)
        return n

    def resume(self, scopes: Iterable[str]) -> int:
        """Continue moves found in the ledger (at start, or after winning the leadership)."""
        now = self.clock()
        n = 0
        with self._lock:
            for scope in scopes:
                if scope in self._chains or self.stop.is_set():
                    continue
                self._dormant.forget(scope)
                chain = self._chains[scope] = _Chain(self.first, now)
                self._schedule(scope, chain, self.first)
                n += 1
        if n:
            m.CONTINUATIONS.labels("resumed").inc(n)
        return n

    def cancel_all(self) -> None:
        with self._lock:
            for scope, chain in list(self._chains.items()):
                self._drop(scope, chain)
            self._dormant.clear()

    # -- internals (the caller holds _lock) ------------------------------------------------------------
    def _schedule(self, scope: str, chain: _Chain, delay: float) -> None:
        if chain.woken is not None:  # woken while its run was in flight
            delay, chain.woken = min(delay, chain.woken), None
        chain.due = self.clock() + delay
        chain.timer = threading.Timer(delay, self._fire, (scope, chain))
        chain.timer.daemon = True
        chain.timer.name = f"kdesched-continue-{scope}"[:60]
        chain.timer.start()

    def _drop(self, scope: str, chain: _Chain) -> None:
        if chain.timer is not None:
            chain.timer.cancel()
            chain.timer = None
        if self._chains.get(scope) is chain:
            del self._chains[scope]

    def _time_out(self, scope: str, chain: _Chain, now: float, bound: float) -> None:
        """End ``scope``'s repeats (nothing moved for ``bound`` seconds) and keep it dormant."""
        self._drop(scope, chain)
        m.CONTINUATIONS.labels("timed-out").inc()
        self._dormant.keep(scope, chain.workloads, now)
        log.info("paced move %s: nothing moved for %gs (replacementTimeoutSeconds), its repeats end; it goes on "
                 "when a pod of %s turns Ready or is evicted, or at the next event or sweep", scope, bound,
                 ", ".join(sorted(chain.workloads)[:5]) + (" ..." if len(chain.workloads) > 5 else ""))

    def _revive(self, wanted: set[str], but: str, soon: float, now: float) -> int:
        """Start again the dormant moves that held one of ``wanted`` (progress on it)."""
        if self.stop.is_set():
            return 0
        n = 0
        for scope, workloads in self._dormant.take(wanted, now, but=but):
            if scope in self._chains:  # never: every new chain forgets its dormant move first
                continue
            chain = self._chains[scope] = _Chain(self.first, now, set(workloads))
            self._schedule(scope, chain, soon)
            n += 1
            m.CONTINUATIONS.labels("revived").inc()
            log.info("paced move %s goes on: progress on %s", scope, ", ".join(sorted(workloads & wanted)[:5]))
        return n

    def _due_with(self, scope: str, now: float) -> list[tuple[str, _Chain]]:
        """The other chains whose repeat may run in one batch with ``scope``'s now (their timers
        cancelled: the batch is their repeat). The caller holds _lock."""
        group = batch_group(scope) if self.run_batch is not None else None
        if group is None:
            return []
        out: list[tuple[str, _Chain]] = []
        for other, c in self._chains.items():
            if other != scope and c.timer is not None and c.due - now <= self.batch_window \
                    and batch_group(other) == group:
                c.timer.cancel()
                c.timer = None
                out.append((other, c))
        return out

    def _fire(self, scope: str, chain: _Chain) -> None:
        with self._lock:
            if self._chains.get(scope) is not chain or chain.timer is None:
                return  # dropped or rescheduled meanwhile
            chain.timer = None
            batch = [(scope, chain), *self._due_with(scope, self.clock())]
        if self.stop.is_set():
            return
        try:
            if len(batch) == 1:
                self.run(scope)  # its after_run() schedules the next repeat, or ends the chain
            else:
                assert self.run_batch is not None
                m.CONTINUATIONS.labels("batched").inc(len(batch) - 1)
                self.run_batch([s for s, _ in batch])  # after_run() for each
        except Exception as exc:  # noqa: BLE001 - a busy Lease, an API error: look again later
            log.info("repeating %s failed (%s); trying again", ", ".join(s for s, _ in batch), exc)
            for s, c in batch:
                self._again(s, c, backoff=True)
            return
        for s, c in batch if len(batch) > 1 else ():  # a scope the batch did not report back on
            self._again(s, c, backoff=True)                 # is not lost: it is repeated (bounded)

    def _again(self, scope: str, chain: _Chain, *, backoff: bool) -> None:
        """Schedule ``scope``'s next repeat if nothing did (its run failed, or never called after_run)."""
        with self._lock:
            if self._chains.get(scope) is not chain or chain.timer is not None or self.stop.is_set():
                return
            if backoff:
                chain.delay = min(self.longest, chain.delay * BACKOFF)
            now = self.clock()
            bound = max(self.timeout_seconds, self.longest)
            if now - chain.progress >= bound:
                self._time_out(scope, chain, now, bound)
            else:
                self._schedule(scope, chain, chain.delay)

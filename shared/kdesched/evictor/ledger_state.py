"""What the disruption ledger holds, and what the controls ask of it.

:class:`LedgerState` is the ledger's tables (moves, cool-downs, back-offs, the health brake's last
unhealthy time, the cluster-wide bucket, surge-first moves) with every question a run asks before
it evicts: is this pod in flight elsewhere, does it continue its workload's move, which cool-down
or back-off holds it back and until when, what is reserved where. It only reads; how runs change
the ledger is :mod:`kdesched.evictor.ledger_accounting`, and :class:`kdesched.evictor.ledger.Ledger`
(the class every caller uses) is this state with those changes and its encoding as records.

Pure: no I/O, a clock passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kdesched.evictor.checked_moves import DRAINS
from kdesched.evictor.ledger_records import Backoff, Move, backoff_key, workload_key
from kdesched.evictor.surge import Surge
from kdesched.model.records import Pod


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The ledger's tables. Immutable: every change (:mod:`kdesched.evictor.ledger_accounting`)
    returns a new ledger."""

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

    def written_by(self, run: str) -> bool:
        """Does the record hold an admission of ``run`` (its write went through, even if its answer
        was lost)?"""
        if not run:
            return False
        return any(f.run == run for mv in self.moves.values() for f in mv.inflight) or any(
            h.run == run for mv in self.moves.values() for h in mv.held)

    def __bool__(self) -> bool:
        return bool(self.moves or self.workloads or self.nodes or self.unhealthy_at is not None or self.backoffs
                    or self.surges or self.surge_blocks)

"""Eviction admission over time: the cluster-wide bucket, and the gate that applies it with the cool-downs.

Why: upstream's limits are per cycle, and an event-driven descheduler has no cycle: twenty events
in a minute would each get a fresh per-run budget. One token bucket bounds evictions per unit of
time across the cluster (its state is in the disruption ledger, so N function instances share it;
the per-process, per-node and per-namespace buckets of 0.1 bounded nothing cluster-wide and
choked a maintenance: the node cool-down and the namespace budgets cover what they meant). The
cool-downs (workload -> last eviction, node -> last eviction, kept in the ledger,
:mod:`kdesched.evictor.ledger`) stop the next event from evicting a workload's replacement pods
before the scheduler has placed them (upstream descheduler issues #1712, #994). Both plug into the
engine's ``gate=`` hook; a refusal is reported in the run report as blocked, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kdesched.evictor.ledger import (
    MAX_INFLIGHT_BYTES,
    MAX_INFLIGHT_PER_MOVE,
    Ledger,
    entry_bytes,
    workload_key,
)
from kdesched.evictor.planner import Gate
from kdesched.model.records import Pod
from kdesched.strategies.framework import EvictionBudgetSpent


@dataclass(frozen=True, slots=True)
class ClusterBucket:
    """The cluster-wide eviction bucket (``kdesched.rateLimits.global``): ``per_minute`` tokens a
    minute, at most ``burst`` stored. Its state (tokens, when) lives in the disruption ledger's
    commit record, so every process and replica draws from the same bucket, and a run's draw is
    committed with its admissions (kdesched.reactor.ledger_store). Times are the API server's."""

    per_minute: float
    burst: int

    def tokens(self, state: tuple[float, float] | None, now: float) -> float:
        """The tokens available at ``now`` (a bucket never drawn from is full)."""
        if state is None:
            return float(self.burst)
        tokens, at = state
        return min(float(self.burst), tokens + max(0.0, now - at) * self.per_minute / 60.0)

    def drawn(self, state: tuple[float, float] | None, now: float, n: int) -> tuple[float, float] | None:
        """The state after ``n`` evictions admitted at ``now`` (None: full, nothing to record)."""
        left = self.tokens(state, now) - n
        return None if left >= self.burst else (max(-float(self.burst), left), now)

    def seconds_until(self, tokens: float, n: float = 1.0) -> float:
        missing = n - tokens
        return 0.0 if missing <= 0 or self.per_minute <= 0 else missing * 60.0 / self.per_minute


IN_FLIGHT_ELSEWHERE = "already admitted for eviction by another run (in flight in the disruption ledger)"


@dataclass
class GateLog:
    """What a run's gate refused: every reason (for metrics), and when the earliest cool-down that
    held a pod back ends (epoch seconds; the reactor repeats a node-scoped run then)."""

    refusals: list[str] = field(default_factory=list)
    cooldown_until: float | None = None


def make_gate(ledger: Ledger, bucket: ClusterBucket | None, *, now: float, workload_seconds: float,
              node_seconds: float, stop_when_spent: bool = False, backoff_base_seconds: float = 0.0,
              backoff_max_seconds: float = 0.0) -> tuple[Gate, GateLog]:
    """The engine's ``gate=``: wasted-move back-offs and cool-downs first (they cost nothing; read
    from the disruption ledger, so a move in progress is not held back by its own earlier waves'
    cool-downs), then the cluster-wide bucket, which only evictions sent in this run draw from (not
    the ones pacing holds for a later wave): the run's draw is written with its admissions.

    ``stop_when_spent`` (balance runs): once the bucket is empty the gate raises
    :class:`~kdesched.strategies.framework.EvictionBudgetSpent`, so the run stops planning and runs
    no further strategy (upstream's ``maxNoOfPodsToEvictTotal`` stops each strategy the same way). A balance run over 150,000 pods may find tens of
    thousands of candidates of which the bucket lets a few dozen go: planning (and reporting) the
    rest, one refusal each, was most of its decision time. Node-scoped runs keep refusing pod by
    pod: their ``paced`` outcomes schedule their repeat, and they are small."""
    log = GateLog()
    tokens = [bucket.tokens(ledger.bucket, now) if bucket is not None else 0.0]
    inflight: dict[str, int] = {}
    weights: dict[str, int] = {}

    def spent() -> str:
        assert bucket is not None
        return (f"rate limit: the cluster-wide eviction bucket (rateLimits.global, {bucket.per_minute:g}/min, burst "
                f"{bucket.burst}) is empty; next token in {bucket.seconds_until(tokens[0]):.1f}s")

    def gate(pod: Pod, strategy: str, held: bool) -> str | None:
        if stop_when_spent and bucket is not None and not held and tokens[0] < 1:
            empty = spent()
            log.refusals.append(empty)
            raise EvictionBudgetSpent(empty)
        if ledger.in_flight(pod.uid, now):
            # another run admitted it (a second delivery of the same event, another replica of the
            # function): its eviction is that run's; evicting it again would count it twice
            log.refusals.append(IN_FLIGHT_ELSEWHERE)
            return IN_FLIGHT_ELSEWHERE
        # wasted moves back the workload off for this strategy (checked moves, docs/safety.md); a
        # node-scoped run held back by it is repeated when it ends, like after a cool-down (the
        # back-off doubles per wasted move, so that repeat is no loop)
        why: str | None = ledger.backoff_refusal(pod, strategy, now, backoff_base_seconds, backoff_max_seconds)
        ends = ledger.backoff_ends(pod, strategy, backoff_base_seconds, backoff_max_seconds) if why else None
        if why is None:
            why = ledger.cooldown_refusal(pod, strategy, now, workload_seconds, node_seconds)
            if why is not None:
                ends = ledger.cooldown_ends(pod, now, workload_seconds, node_seconds)
            elif not held:
                key = workload_key(pod)
                mv = ledger.moves.get(key)
                count = inflight.get(key, len(mv.inflight) if mv is not None else 0)
                weight = weights.get(key, mv.inflight_bytes() if mv is not None else 0) + entry_bytes(pod)
                if count >= MAX_INFLIGHT_PER_MOVE or weight > MAX_INFLIGHT_BYTES:
                    why = (f"ledger: workload {key} already has {count} pods in flight, the most one ledger record "
                           "holds; the rest wait for them")
                elif bucket is not None and tokens[0] < 1:
                    why = spent()
                else:
                    tokens[0] -= 1
                    inflight[key] = count + 1
                    weights[key] = weight
        if ends is not None and (log.cooldown_until is None or ends < log.cooldown_until):
            log.cooldown_until = ends
        if why is not None:
            log.refusals.append(why)
        return why

    return gate, log

"""The cluster-wide eviction bucket: at most ``rateLimits.global`` evictions a minute, across every process.

Why: upstream's limits are per cycle and an event-driven descheduler has no cycle. 0.1 kept three
token buckets per process (global, per node, per namespace): N function instances allowed N times
the rate, and one ``serve`` choked a pool maintenance (30/min per namespace). One bucket now, its
state (tokens, when) in the disruption ledger's commit record, so every process draws from it and
a run's draw is committed with its admissions. The per-node and per-namespace buckets are gone:
the node cool-down and namespace budgets say what they meant (docs/safety.md).

Only evictions sent in this run draw: not those pacing holds for a later wave, nor those a brake, a
closed window or a fresh node change defers (they come before the bucket in the pipeline's order, so
a deferred pod is neither counted nor refused ``rate-limit``). A balance run (``stop_when_spent``)
stops planning once the bucket is empty: a run over 150,000 pods may find tens of thousands of
candidates of which the bucket lets a few dozen go, and planning the rest was most of its decision
time. For the same reason it plans at most ``burst`` deferred evictions of a strategy (as many as
could go at once when they may), then that strategy returns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod
from kdesched.strategies.framework import DeferralsPlanned, EvictionBudgetSpent


@dataclass(frozen=True, slots=True)
class ClusterBucket:
    """``per_minute`` tokens a minute, at most ``burst`` stored; the state is (tokens, at)."""

    per_minute: float
    burst: int
    name: str = "rate-limit"

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

    def start(self, ctx: RunContext) -> Check:
        return _Check(self, ctx)


class _Check(Check):
    def __init__(self, s: ClusterBucket, ctx: RunContext) -> None:
        self.s, self.ctx = s, ctx
        self.left = s.tokens(ctx.ledger.bucket, ctx.now)
        self.deferrals: dict[str, int] = {}  # per strategy, the deferred evictions a balance run planned

    def _empty(self) -> Verdict:
        s = self.s
        return Verdict(Reason.RATE_LIMIT, f"rate limit: the cluster-wide eviction bucket (rateLimits.global, "
                       f"{s.per_minute:g}/min, burst {s.burst}) is empty; next token in "
                       f"{s.seconds_until(self.left):.1f}s", self.ctx.now + s.seconds_until(self.left))

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        if held:
            return None
        if self.left < 1:
            empty = self._empty()
            if self.ctx.stop_when_spent:
                raise EvictionBudgetSpent(empty.message)
            return empty
        return None

    def passed(self, pod: Pod, strategy: str, held: bool) -> None:
        if not held:
            self.left -= 1

    def deferred(self, pod: Pod, strategy: str, held: bool) -> None:
        if held or not self.ctx.stop_when_spent:
            return
        n = self.deferrals.get(strategy, 0)
        if n >= self.s.burst:
            raise DeferralsPlanned(f"planned {n} deferred eviction(s) (see deferred), as many as the cluster-wide "
                                   f"eviction bucket (rateLimits.global, burst {self.s.burst}) lets go at once; a "
                                   "later run decides the rest")
        self.deferrals[strategy] = n + 1

    def record(self, ledger: Ledger, admitted: int, stamp: float) -> Ledger:
        return replace(ledger, bucket=self.s.drawn(self.ctx.ledger.bucket, stamp, admitted))

"""Eviction admission over time: token buckets, and the gate that applies them with the cool-downs.

Why: upstream's limits are per cycle, and an event-driven descheduler has no cycle: twenty events
in a minute would each get a fresh per-run budget. Token buckets (global, per node, per
namespace) bound evictions per unit of time, and the cool-downs (workload -> last eviction, node
-> last eviction, kept in the disruption ledger, :mod:`kdesched.evictor.ledger`) stop the next
event from evicting a workload's replacement pods before the scheduler has placed them (upstream
descheduler issues #1712, #994). Both plug into the engine's ``gate=`` hook; a refusal is reported
in the run report as blocked, with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kdesched.evictor.ledger import Ledger
from kdesched.evictor.planner import Gate
from kdesched.model.records import Pod
from kdesched.reactor.settings import BucketSettings, RateLimitSettings
from kdesched.strategies.framework import EvictionBudgetSpent

Clock = Callable[[], float]  # seconds, monotonic



class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` stored; starts full. Not thread-safe on its own
    (the :class:`RateLimiter` holds a lock)."""

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1, got rate={rate}, burst={burst}")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def tokens(self) -> float:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now
        return self._tokens

    def available(self, n: float = 1.0) -> bool:
        return self.tokens() >= n

    def take(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens if there are that many; False (nothing taken) otherwise."""
        if self.tokens() >= n:
            self._tokens -= n
            return True
        return False

    def charge(self, n: float = 1.0) -> None:
        """Take ``n`` tokens whether or not they are there (an eviction admitted elsewhere already
        happened): the bucket may go below zero, down to ``-burst``, and refills from there."""
        self._tokens = max(-float(self.burst), self.tokens() - n)

    def seconds_until(self, n: float = 1.0) -> float:
        missing = n - self.tokens()
        return 0.0 if missing <= 0 else missing / self.rate


class RateLimiter:
    """The three bucket families of ``kdesched.rateLimits``; thread-safe, per process."""

    MAX_KEYS = 10000  # per-node / per-namespace buckets kept (oldest dropped beyond; they refill anyway)

    def __init__(self, settings: RateLimitSettings, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self._lock = threading.Lock()
        self._global = self._bucket(settings.global_)
        self._nodes: dict[str, TokenBucket] = {}
        self._namespaces: dict[str, TokenBucket] = {}

    def _bucket(self, s: BucketSettings | None) -> TokenBucket | None:
        return None if s is None else TokenBucket(s.rate_per_second, s.burst, self.clock)

    def _keyed(self, table: dict[str, TokenBucket], key: str, s: BucketSettings | None) -> TokenBucket | None:
        if s is None:
            return None
        bucket = table.get(key)
        if bucket is None:
            if len(table) >= self.MAX_KEYS:
                del table[next(iter(table))]
            bucket = table[key] = TokenBucket(s.rate_per_second, s.burst, self.clock)
        return bucket

    def global_spent(self) -> str | None:
        """The reason no eviction at all can pass right now (the global bucket is empty), else None."""
        with self._lock:
            bucket = self._global
            if bucket is None or bucket.available():
                return None
            return (f"rate limit: global eviction bucket is empty (next token in {bucket.seconds_until():.1f}s); "
                    "this run plans no further evictions")

    def clone(self) -> RateLimiter:
        """A copy with the same tokens: a dry run consumes from it, so it reports what a live run
        would be allowed, without spending the real budget."""
        with self._lock:
            other = RateLimiter(self.settings, self.clock)
            other._global = _copy_bucket(self._global)
            other._nodes = {k: b for k, v in self._nodes.items() if (b := _copy_bucket(v)) is not None}
            other._namespaces = {k: b for k, v in self._namespaces.items() if (b := _copy_bucket(v)) is not None}
            return other

    def admit(self, node: str, namespace: str, *, consume: bool = True) -> str | None:
        """None if one eviction from ``node`` in ``namespace`` is within every bucket (taking a token
        from each when ``consume``), else the reason naming the exhausted bucket."""
        with self._lock:
            checks = (("global", self._global, ""),
                      ("per-node", self._keyed(self._nodes, node, self.settings.per_node), f" for node {node}"),
                      ("per-namespace", self._keyed(self._namespaces, namespace, self.settings.per_namespace),
                       f" for namespace {namespace}"))
            for label, bucket, what in checks:
                if bucket is not None and not bucket.available():
                    return (f"rate limit: {label} eviction bucket{what} is empty "
                            f"(next token in {bucket.seconds_until():.1f}s)")
            if consume:
                for _, bucket, _ in checks:
                    if bucket is not None:
                        bucket.take()
            return None


    def charge(self, node: str, namespace: str) -> None:
        """Spend one token from every bucket an eviction from ``node`` in ``namespace`` passes (the
        run planned on a copy of the buckets, :meth:`clone`, and its admission succeeded)."""
        with self._lock:
            for bucket in (self._global, self._keyed(self._nodes, node, self.settings.per_node),
                           self._keyed(self._namespaces, namespace, self.settings.per_namespace)):
                if bucket is not None:
                    bucket.charge()


def _copy_bucket(bucket: TokenBucket | None) -> TokenBucket | None:
    if bucket is None:
        return None
    copy = TokenBucket(bucket.rate, bucket.burst, bucket.clock)
    copy._tokens, copy._at = bucket._tokens, bucket._at
    return copy


IN_FLIGHT_ELSEWHERE = "already admitted for eviction by another run (in flight in the disruption ledger)"


@dataclass
class GateLog:
    """What a run's gate refused: every reason (for metrics), and when the earliest cool-down that
    held a pod back ends (epoch seconds; the reactor repeats a node-scoped run then)."""

    refusals: list[str] = field(default_factory=list)
    cooldown_until: float | None = None


def make_gate(ledger: Ledger, limiter: RateLimiter | None, *, now: float, workload_seconds: float,
              node_seconds: float, consume: bool, stop_when_spent: bool = False, backoff_base_seconds: float = 0.0,
              backoff_max_seconds: float = 0.0) -> tuple[Gate, GateLog]:
    """The engine's ``gate=``: wasted-move back-offs and cool-downs first (they cost nothing; read
    from the disruption ledger, so a move in progress is not held back by its own earlier waves'
    cool-downs), then the buckets, which only evictions sent in this run spend (not the ones
    pacing holds for a later wave).

    ``stop_when_spent`` (balance runs): once the global bucket is empty the gate raises
    :class:`~kdesched.strategies.framework.EvictionBudgetSpent`, so the run stops planning and runs
    no further strategy (upstream's ``maxNoOfPodsToEvictTotal`` stops each strategy the same way). A balance run over 150,000 pods may find tens of
    thousands of candidates of which the bucket lets a few dozen go: planning (and reporting) the
    rest, one refusal each, was most of its decision time. Node-scoped runs keep refusing pod by
    pod: their ``paced`` outcomes schedule their repeat, and they are small."""
    log = GateLog()

    def gate(pod: Pod, strategy: str, held: bool) -> str | None:
        if stop_when_spent and limiter is not None and not held:
            spent = limiter.global_spent()
            if spent is not None:
                log.refusals.append(spent)
                raise EvictionBudgetSpent(spent)
        if ledger.in_flight(pod.uid, now):
            # another run admitted it (a second delivery of the same event, another replica of the
            # function): its eviction is that run's; evicting it again would count it twice
            log.refusals.append(IN_FLIGHT_ELSEWHERE)
            return IN_FLIGHT_ELSEWHERE
        # wasted moves back the workload off for this strategy (checked moves, docs/safety.md); a
        # node-scoped run held back by it is repeated when it ends, like after a cool-down (the
        # back-off doubles per wasted move, so that repeat is no loop)
        why = ledger.backoff_refusal(pod, strategy, now, backoff_base_seconds, backoff_max_seconds)
        ends = ledger.backoff_ends(pod, strategy, backoff_base_seconds, backoff_max_seconds) if why else None
        if why is None:
            why = ledger.cooldown_refusal(pod, strategy, now, workload_seconds, node_seconds)
            if why is not None:
                ends = ledger.cooldown_ends(pod, now, workload_seconds, node_seconds)
            elif limiter is not None and not held:
                why = limiter.admit(pod.node_name, pod.namespace, consume=consume)
        if ends is not None and (log.cooldown_until is None or ends < log.cooldown_until):
            log.cooldown_until = ends
        if why is not None:
            log.refusals.append(why)
        return why

    return gate, log

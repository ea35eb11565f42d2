"""Eviction admission over time: token buckets and the anti-flapping eviction history.

Why: upstream's limits are per cycle, and an event-driven descheduler has no cycle: twenty events
in a minute would each get a fresh per-run budget. Token buckets (global, per node, per
namespace) bound evictions per unit of time, and the eviction history (owner uid -> last eviction,
node -> last eviction) keeps a cool-down so the next event does not evict a workload's replacement
pods before the scheduler has placed them (upstream descheduler issues #1712, #994). Both plug
into the engine's ``gate=`` hook; a refusal is reported in the run report as blocked, with the reason.

The history is persisted as compact JSON in an annotation of the coordination Lease (see
:mod:`kdesched.reactor.coordination`) so every instance sees it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdesched.evictor.execute import EvictionOutcome
from kdesched.evictor.planner import Gate
from kdesched.model.records import Pod
from kdesched.reactor.settings import BucketSettings, RateLimitSettings
from kdesched.strategies.framework import EvictionBudgetSpent

Clock = Callable[[], float]  # seconds, monotonic for buckets, wall clock (epoch) for history

HISTORY_ANNOTATION = "kdesched.dev/eviction-history"
HISTORY_VERSION = 1


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


def _copy_bucket(bucket: TokenBucket | None) -> TokenBucket | None:
    if bucket is None:
        return None
    copy = TokenBucket(bucket.rate, bucket.burst, bucket.clock)
    copy._tokens, copy._at = bucket._tokens, bucket._at
    return copy


def owner_uid(pod: Pod) -> str:
    """The workload a pod belongs to: its controller owner's uid (else its first owner's), else the pod."""
    refs = pod.owner_refs
    if not refs:
        return f"pod:{pod.uid or pod.key}"
    ctrl = next((r for r in refs if r.controller), refs[0])
    return ctrl.uid or f"{ctrl.kind}:{pod.namespace}/{ctrl.name}"


@dataclass
class EvictionHistory:
    """When each workload (owner uid) and each node last lost a pod to kdesched (epoch seconds)."""

    owners: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, float] = field(default_factory=dict)

    def refusal(self, pod: Pod, now: float, workload_seconds: float, node_seconds: float) -> str | None:
        uid = owner_uid(pod)
        last = self.owners.get(uid)
        if workload_seconds > 0 and last is not None and now - last < workload_seconds:
            return (f"cool-down: workload {uid} lost a pod {int(now - last)}s ago "
                    f"(cooldown.workloadSeconds {workload_seconds:g})")
        last = self.nodes.get(pod.node_name)
        if node_seconds > 0 and pod.node_name and last is not None and now - last < node_seconds:
            return (f"cool-down: node {pod.node_name} was evicted from {int(now - last)}s ago "
                    f"(cooldown.nodeSeconds {node_seconds:g})")
        return None

    def record(self, outcomes: Iterable[EvictionOutcome], now: float) -> int:
        """Remember the pods that were really evicted (or were already gone); returns how many."""
        n = 0
        for o in outcomes:
            if o.result not in ("evicted", "already-gone"):
                continue
            self.owners[owner_uid(o.eviction.pod)] = now
            if o.eviction.node:
                self.nodes[o.eviction.node] = now
            n += 1
        return n

    def merge(self, other: EvictionHistory) -> None:
        for mine, theirs in ((self.owners, other.owners), (self.nodes, other.nodes)):
            for k, t in theirs.items():
                if t > mine.get(k, float("-inf")):
                    mine[k] = t

    def prune(self, now: float, keep_seconds: float, max_entries: int) -> None:
        """Drop entries past the cool-down, then the oldest beyond ``max_entries`` per table."""
        for table in (self.owners, self.nodes):
            for k in [k for k, t in table.items() if now - t >= keep_seconds]:
                del table[k]
            if len(table) > max_entries:
                for k, _ in sorted(table.items(), key=lambda kv: kv[1])[: len(table) - max_entries]:
                    del table[k]

    def copy(self) -> EvictionHistory:
        return EvictionHistory(dict(self.owners), dict(self.nodes))

    def __bool__(self) -> bool:
        return bool(self.owners or self.nodes)

    def to_annotation(self) -> str:
        """Compact JSON: ``{"v":1,"o":{uid: epoch},"n":{node: epoch}}`` (whole seconds)."""
        return json.dumps({"v": HISTORY_VERSION, "o": {k: int(t) for k, t in sorted(self.owners.items())},
                           "n": {k: int(t) for k, t in sorted(self.nodes.items())}}, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> EvictionHistory:
        """Parse the annotation; a missing or garbled one is an empty history (it is only a hint)."""
        if not text:
            return cls()
        try:
            raw: Any = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(raw, Mapping) or raw.get("v") != HISTORY_VERSION:
            return cls()

        def table(key: str) -> dict[str, float]:
            t = raw.get(key)
            if not isinstance(t, Mapping):
                return {}
            return {str(k): float(v) for k, v in t.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

        return cls(table("o"), table("n"))


def make_gate(history: EvictionHistory, limiter: RateLimiter | None, *, now: float, workload_seconds: float,
              node_seconds: float, consume: bool, stop_when_spent: bool = False) -> tuple[Gate, list[str]]:
    """The engine's ``gate=``: cool-downs first (they cost nothing), then the buckets. Also returns a
    list that collects every refusal reason (for metrics).

    ``stop_when_spent`` (balance runs): once the global bucket is empty the gate raises
    :class:`~kdesched.strategies.framework.EvictionBudgetSpent`, so the run stops planning and runs
    no further strategy (upstream's ``maxNoOfPodsToEvictTotal`` stops each strategy the same way). A balance run over 150,000 pods may find tens of
    thousands of candidates of which the bucket lets a few dozen go: planning (and reporting) the
    rest, one refusal each, was most of its decision time. Node-scoped runs keep refusing pod by
    pod: their ``paced`` outcomes schedule their repeat, and they are small."""
    refusals: list[str] = []

    def gate(pod: Pod) -> str | None:
        if stop_when_spent and limiter is not None:
            spent = limiter.global_spent()
            if spent is not None:
                refusals.append(spent)
                raise EvictionBudgetSpent(spent)
        why = history.refusal(pod, now, workload_seconds, node_seconds)
        if why is None and limiter is not None:
            why = limiter.admit(pod.node_name, pod.namespace, consume=consume)
        if why is not None:
            refusals.append(why)
        return why

    return gate, refusals

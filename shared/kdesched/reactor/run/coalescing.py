"""Coalescing bursts and per-node locks: the in-process half of coordination.

Why: Knative delivers at least once, in parallel, and retries; an autoscaler adds twenty nodes in
ten seconds; a node flaps. Without coordination that is twenty overlapping runs deciding on the
same stale state and evicting the same workload twenty times. Three mechanisms, from the inside
out (the third, across processes, is the run Lease: :mod:`kdesched.reactor.io.lease`):

* :class:`Coalescer` (per process, threads), leading edge: when nothing of its key is queued or
  running, the first request starts a run at once (after ``delay_seconds``: 0 for node-scoped
  keys, a short gather for balance runs). Requests arriving while a batch is queued join it;
  requests arriving while a run is in flight open ONE follow-up batch, which starts when that
  run ends and no sooner than ``min_interval_seconds`` after it started, and decides on fresh
  state for all of them (each delivery gets the same report, marked coalesced). So a burst gives
  one immediate run plus at most one follow-up per interval. The timing rule is the pure
  :class:`CoalescingCore` (tested with a fake clock); runs of one key never overlap (its run lock).
* :class:`NodeLocks`: one lock per node, shared by every node-scoped function of the process, so
  taints and affinity runs on the same node never overlap. Per-node state is dropped once idle
  (:class:`NodeLocks`, :class:`KeyedCoalescers`): a cluster with node churn must not grow it forever.
* :class:`~kdesched.reactor.io.lease.LeaseGuard` (across processes): the Lease that serialises
  balance runs.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kdesched.reactor.io.lease import LockBusy, ShuttingDown

log = logging.getLogger("kdesched.reactor.coordination")

WAIT_SLICE_SECONDS = 0.1
Req = TypeVar("Req")
Res = TypeVar("Res")


@dataclass
class _Batch(Generic[Req, Res]):
    opened_at: float
    requests: list[Req] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    result: Res | None = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Served(Generic[Res]):
    """What a request got back: the batch's result and how many requests that run served."""

    result: Res
    coalesced: int


class CoalescingCore(Generic[Req, Res]):
    """The timing rule of one key, without threads or clocks (the caller passes ``now``).

    At most one *open* batch (queued, still joinable) and one *running* batch. A batch may start at
    :meth:`start_time`: ``opened_at + delay`` (leading edge), but never before
    ``last_start + min_interval`` (a follow-up of a burst waits), and only once the running batch
    has ended (the caller's run lock). Not thread-safe: :class:`Coalescer` guards it.
    """

    def __init__(self, delay_seconds: float = 0.0, min_interval_seconds: float = 0.0) -> None:
        self.delay_seconds = delay_seconds
        self.min_interval_seconds = min_interval_seconds
        self.open: _Batch[Req, Res] | None = None
        self.running: _Batch[Req, Res] | None = None
        self.last_start: float | None = None
        self.runs = 0

    def offer(self, request: Req, now: float) -> tuple[_Batch[Req, Res], bool]:
        """Add ``request`` to the open batch (opening one if there is none): (batch, opened it)."""
        batch, opened = self.open, False
        if batch is None:
            batch, opened = _Batch(opened_at=now), True
            self.open = batch
        batch.requests.append(request)
        return batch, opened

    def start_time(self, batch: _Batch[Req, Res]) -> float:
        """The earliest time ``batch`` may start (the running batch must also have ended)."""
        at = batch.opened_at + self.delay_seconds
        if self.last_start is not None:
            at = max(at, self.last_start + self.min_interval_seconds)
        return at

    def begin(self, batch: _Batch[Req, Res], now: float) -> None:
        """``batch`` starts running: it is no longer joinable; later requests open the follow-up."""
        if self.open is batch:
            self.open = None
        self.running = batch
        self.last_start = now
        self.runs += 1

    def end(self, batch: _Batch[Req, Res]) -> None:
        if self.running is batch:
            self.running = None

    def abandon(self, batch: _Batch[Req, Res]) -> None:
        """``batch`` will never run (shutdown, lock timeout): close it."""
        if self.open is batch:
            self.open = None


class Coalescer(Generic[Req, Res]):
    """Leading-edge coalescing of concurrent requests into batches, each run once, serialised by
    ``run_lock`` (see :class:`CoalescingCore` for the timing).

    ``run(batch)`` is called in the thread of the request that opened the batch, once its start
    time has come and ``run_lock`` is free. ``stop`` (a threading.Event) cuts waits short and
    makes pending batches fail with :class:`ShuttingDown`.
    """

    def __init__(self, run: Callable[[Sequence[Req]], Res], *, delay_seconds: float = 0.0,
                 min_interval_seconds: float = 0.0, run_lock: threading.Lock | None = None,
                 stop: threading.Event | None = None, lock_timeout: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.run = run
        self.core: CoalescingCore[Req, Res] = CoalescingCore(delay_seconds, min_interval_seconds)
        self.run_lock = run_lock or threading.Lock()
        self.stop = stop or threading.Event()
        self.lock_timeout = lock_timeout  # None = wait for the run lock as long as it takes
        self.clock = clock
        self._lock = threading.Lock()

    @property
    def runs(self) -> int:
        """How many batches have started (for tests and metrics)."""
        return self.core.runs

    def idle(self) -> bool:
        """No batch open or running, and the minimum interval since the last start has passed:
        nothing would change if this coalescer were replaced by a fresh one."""
        with self._lock:
            core = self.core
            if core.open is not None or core.running is not None:
                return False
            return core.last_start is None or self.clock() >= core.last_start + core.min_interval_seconds

    def submit(self, request: Req) -> Served[Res]:
        """Join or open a batch and wait for its run's result (what an HTTP request needs)."""
        served = self.offer(request, wait=True)
        assert served is not None
        return served

    def offer(self, request: Req, *, wait: bool) -> Served[Res] | None:
        """Like :meth:`submit`; with ``wait=False`` a request that joined a batch opened by another
        request returns None at once (that batch's run serves it), so a caller with a bounded
        thread pool (``kdesched serve``) does not hold a thread per waiting event. The request that
        opens a batch always leads its run and gets the result."""
        with self._lock:
            batch, leader = self.core.offer(request, self.clock())
        if not leader:
            if not wait:
                return None
            batch.done.wait()
        else:
            self._lead(batch)
        if batch.error is not None:
            raise batch.error
        assert batch.result is not None
        return Served(batch.result, len(batch.requests))

    def _lead(self, batch: _Batch[Req, Res]) -> None:
        began = False
        try:
            while not self.stop.is_set():
                with self._lock:
                    remaining = self.core.start_time(batch) - self.clock()
                if remaining <= 0:
                    break
                # short slices: the clock is injectable (tests drive it), and stop cuts the wait short
                self.stop.wait(min(remaining, WAIT_SLICE_SECONDS))
            acquired = self._acquire()
            if self.stop.is_set():
                if acquired:
                    self.run_lock.release()
                raise ShuttingDown("shutting down: run not started")
            if not acquired:
                raise LockBusy(f"another run is in progress (waited {self.lock_timeout:g}s)")
            try:
                # the batch stays open (joinable) until its run starts
                with self._lock:
                    self.core.begin(batch, self.clock())
                began = True
                batch.result = self.run(list(batch.requests))
            finally:
                self.run_lock.release()
        except BaseException as exc:  # noqa: BLE001 - every joined request must learn what happened
            batch.error = exc
        finally:
            with self._lock:
                if began:
                    self.core.end(batch)
                else:
                    self.core.abandon(batch)
            batch.done.set()

    def _acquire(self) -> bool:
        deadline = None if self.lock_timeout is None else time.monotonic() + self.lock_timeout
        while True:
            if self.run_lock.acquire(timeout=0.05):
                return True
            if self.stop.is_set():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False


class KeyedCoalescers(Generic[Req, Res]):
    """One :class:`Coalescer` per key (e.g. per node), created on first use, dropped once idle.

    Idle = no open or running batch, and its ``min_interval_seconds`` since the last start has
    passed (so dropping it forgets nothing its timing rule still needs). Dropping never races a new
    request for the same key: every coalescer anyone still holds (a caller between :meth:`get` and
    ``submit``, a batch's leader) stays reachable through a weak map, so :meth:`get` hands out that
    same object, never a second one. Idle coalescers are dropped by :meth:`prune`, which
    :meth:`get` runs whenever the map has doubled since the last prune (amortised O(1) per get; at
    most about twice the busy keys, plus ``PRUNE_FLOOR``, are kept).
    """

    PRUNE_FLOOR = 64

    def __init__(self, factory: Callable[[str], Coalescer[Req, Res]]) -> None:
        self.factory = factory
        self._lock = threading.Lock()
        self._by_key: dict[str, Coalescer[Req, Res]] = {}
        self._alive: weakref.WeakValueDictionary[str, Coalescer[Req, Res]] = weakref.WeakValueDictionary()
        self._prune_at = self.PRUNE_FLOOR

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)

    def get(self, key: str) -> Coalescer[Req, Res]:
        with self._lock:
            c = self._by_key.get(key)
            if c is None:
                c = self._alive.get(key)  # pruned, but someone still uses it: the same one again
                if c is None:
                    c = self.factory(key)
                    self._alive[key] = c
                self._by_key[key] = c
            if len(self._by_key) >= self._prune_at:
                self._prune_locked()
            return c

    def prune(self) -> int:
        """Drop every idle coalescer; returns how many were dropped."""
        with self._lock:
            return self._prune_locked()

    def _prune_locked(self) -> int:
        idle = [k for k, c in self._by_key.items() if c.idle()]
        for k in idle:
            del self._by_key[k]
        self._prune_at = max(self.PRUNE_FLOOR, 2 * len(self._by_key))
        return len(idle)


class NodeLocks:
    """One lock per node name, shared by all node-scoped work of the process.

    A node's lock lives exactly as long as someone holds a reference to it: a ``with
    locks.get(node):`` block, a thread waiting to acquire it, a :class:`Coalescer` using it as its
    run lock. Then :meth:`get` returns that same lock; once nobody does (so nobody holds it or
    waits for it), it is dropped, and the next :meth:`get` makes a fresh one. So a cluster with
    node churn keeps no lock per node ever seen, and dropping can never hand out a second lock for
    a node while the first is in use. Keep the returned lock referenced while you hold it (a
    ``with`` block does); do not re-:meth:`get` it to release it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()

    def __len__(self) -> int:
        with self._lock:
            return len(self._locks)

    def get(self, node: str) -> threading.Lock:
        with self._lock:
            lock = self._locks.get(node)
            if lock is None:
                lock = threading.Lock()
                self._locks[node] = lock
            return lock

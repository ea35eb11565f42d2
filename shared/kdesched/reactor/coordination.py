"""Coordination: coalescing bursts, per-node locks, and the Lease that serialises balance runs.

Why: Knative delivers at least once, in parallel, and retries; an autoscaler adds twenty nodes in
ten seconds; a node flaps. Without coordination that is twenty overlapping runs deciding on the
same stale state and evicting the same workload twenty times. Three mechanisms, from the inside
out:

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
* :class:`LeaseGuard` (across processes): the ``coordination.k8s.io/v1`` Lease. Balance runs take it
  before deciding and give it up after; a run that finds it held waits ``leaseWaitSeconds`` then
  fails with :class:`LockBusy` (HTTP 429, Knative retries later). While held it is renewed
  (:class:`RenewTiming`, client-go's LeaseDuration / RenewDeadline / RetryPeriod): when no renew
  has succeeded for the renew deadline, shorter than the duration, the holder steps down
  (:meth:`LeaseGuard.still_held` says so, between eviction batches) before anyone else may take
  the Lease. The Lease also carries the disruption ledger (an annotation every run writes with
  optimistic concurrency: :mod:`kdesched.reactor.ledger_store`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Self, TypeVar

from kdesched.errors import TryLater, Unavailable
from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock

log = logging.getLogger("kdesched.reactor.coordination")

WAIT_SLICE_SECONDS = 0.1
Req = TypeVar("Req")
Res = TypeVar("Res")


class LockBusy(TryLater):
    """Another run holds the lock (or the Lease): try again later (HTTP 429)."""


class ShuttingDown(Unavailable):
    """The process is stopping; the request was not run (HTTP 503, Knative retries elsewhere)."""


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


def default_identity() -> str:
    """Holder identity: the pod name (or host name) plus a random suffix, unique per process."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "kdesched"
    return f"{base}-{uuid.uuid4().hex[:8]}"


DEFAULT_RENEW_DEADLINE_FRACTION = 2 / 3  # client-go's core components: 10 s of 15 s
MAX_RETRY_SECONDS = 2.0  # client-go's RetryPeriod


@dataclass(frozen=True, slots=True)
class RenewTiming:
    """When a Lease holder renews, retries and gives up: client-go's LeaseDuration, RenewDeadline
    and RetryPeriod.

    The holder renews every ``interval_seconds`` (a third of the duration, and at most half the
    deadline so a healthy holder never nears it); a failed renew is retried every
    ``retry_seconds``; once no renew has succeeded for ``deadline_seconds`` (measured from the
    start of the last successful one) the holder steps down. Another candidate takes the Lease
    only after seeing its record unchanged for ``duration_seconds`` by its own clock (kube.lease),
    so ``duration - deadline`` is the margin that keeps the two from acting at once: for the
    in-flight eviction batch to end, and for clocks running at slightly different rates.
    """

    duration_seconds: float
    deadline_seconds: float
    interval_seconds: float
    retry_seconds: float

    @classmethod
    def for_lease(cls, duration_seconds: float, deadline_seconds: float | None = None) -> RenewTiming:
        """The timing of a Lease of ``duration_seconds`` (deadline: 2/3 of it unless given).
        ValueError unless 0 < deadline < duration."""
        deadline = duration_seconds * DEFAULT_RENEW_DEADLINE_FRACTION if deadline_seconds is None else deadline_seconds
        if not 0 < deadline < duration_seconds:
            raise ValueError(f"the renew deadline must be > 0 and shorter than the Lease duration "
                             f"({duration_seconds:g}s), got {deadline:g}s")
        return cls(duration_seconds, deadline, min(duration_seconds / 3, deadline / 2),
                   min(MAX_RETRY_SECONDS, deadline / 5))


class Tenure:
    """Whether a holder may still act on its Lease: no I/O, thread-safe, cheap enough to ask
    between every two eviction batches.

    Held until :meth:`end` is called (the Lease is definitely someone else's) or until
    ``deadline_seconds`` pass without :meth:`renewed`; from then on :meth:`check` returns the
    reason, for good (a late successful renew does not undo a step-down: whoever acted on it, the
    evictor or the leader loop, has already stopped).
    """

    def __init__(self, deadline_seconds: float, *, clock: Callable[[], float] = time.monotonic,
                 since: float | None = None, what: str = "the Lease") -> None:
        self.deadline_seconds = deadline_seconds
        self.clock = clock
        self.what = what
        self._lock = threading.Lock()
        self._last_renewed = clock() if since is None else since
        self._reason: str | None = None

    def renewed(self, started: float) -> None:
        """A renew that started at ``started`` (monotonic) succeeded."""
        with self._lock:
            if self._reason is None:
                self._last_renewed = max(self._last_renewed, started)

    def end(self, reason: str) -> None:
        with self._lock:
            if self._reason is None:
                self._reason = reason

    def check(self) -> str | None:
        """None while held; else why not."""
        with self._lock:
            if self._reason is None:
                elapsed = self.clock() - self._last_renewed
                if elapsed > self.deadline_seconds:
                    self._reason = (f"{self.what} not renewed for {elapsed:.1f}s (renew deadline "
                                    f"{self.deadline_seconds:g}s)")
            return self._reason

    @property
    def since_renewed(self) -> float:
        with self._lock:
            return self.clock() - self._last_renewed


class LeaseGuard:
    """Hold the Lease for the duration of a ``with`` block (after waiting up to ``wait_seconds``).

    On entry: acquire (else :class:`LockBusy`) and start renewing (:class:`RenewTiming`: every
    third of the duration; a failed renew, API error or repeated 409, retried every retry period).
    On exit: stop renewing and release.

    Stepping down: when the Lease is definitely another's (renew found another holder, or it is
    gone), or no renew has succeeded within ``renew_deadline_seconds`` (default 2/3 of the
    duration), the guard stops renewing and :meth:`still_held` returns the reason (``lost`` is
    then True). The evictor asks :meth:`still_held` between eviction batches and stops there; the
    deadline leaves ``duration - deadline`` for the batch in flight before any other instance may
    take the Lease over (it waits a full duration of an unchanged record, kube.lease).
    """

    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *, duration_seconds: int,
                 wait_seconds: float, stop: threading.Event | None = None, poll_seconds: float = 0.2,
                 renew_deadline_seconds: float | None = None, timing: RenewTiming | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.timing = timing or RenewTiming.for_lease(duration_seconds, renew_deadline_seconds)
        self.clock = clock
        self.lock = LeaseLock(client, namespace, name, identity, duration_seconds, monotonic=clock)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds
        self.stop = stop or threading.Event()
        self._tenure: Tenure | None = None
        self._released = False
        self._renewer: threading.Thread | None = None
        self._done = threading.Event()

    @property
    def lost(self) -> bool:
        """True once the guard stepped down while held (see :meth:`still_held`); False before
        entry and after a normal release."""
        return self._tenure is not None and not self._released and self._tenure.check() is not None

    def still_held(self) -> str | None:
        """None while this guard holds the Lease and the renew deadline since the last successful
        renew has not passed; else the reason, e.g. "Lease kdesched/kdesched not renewed for 41.2s
        (renew deadline 40s)". Cheap (no API call: a clock read under a lock) and
        thread-safe: meant to be called between eviction batches; a reason means stop evicting."""
        if self._released:
            return f"Lease {self.namespace}/{self.name} released"
        if self._tenure is None:
            return f"Lease {self.namespace}/{self.name} not held yet"
        return self._tenure.check()

    def __enter__(self) -> Self:
        deadline = time.monotonic() + self.wait_seconds
        while True:
            started = self.clock()
            if self.lock.try_acquire():
                break
            if self.stop.is_set():
                raise ShuttingDown("shutting down: Lease not taken")
            if time.monotonic() >= deadline:
                raise LockBusy(f"Lease {self.namespace}/{self.name} is held by another run "
                               f"({self.lock.holder() or 'unknown holder'}); waited {self.wait_seconds:g}s")
            self.stop.wait(self.poll_seconds)
        self._tenure = Tenure(self.timing.deadline_seconds, clock=self.clock, since=started,
                              what=f"Lease {self.namespace}/{self.name}")
        self._renewer = threading.Thread(target=self._renew_loop, name=f"lease-renew-{self.name}", daemon=True)
        self._renewer.start()
        return self

    def _renew_loop(self) -> None:
        tenure = self._tenure
        assert tenure is not None
        wait = self.timing.interval_seconds
        while not self._done.wait(wait):
            if tenure.check() is not None:
                break  # the deadline passed while we waited (e.g. a request hung): stepped down
            started = self.clock()
            try:
                renewed = self.lock.renew()
            except Exception as exc:  # noqa: BLE001 - retried until the renew deadline
                log.warning("renewing Lease %s/%s failed (%.1fs since the last renew, deadline %gs; retrying in %gs): %s",
                            self.namespace, self.name, tenure.since_renewed, self.timing.deadline_seconds,
                            self.timing.retry_seconds, exc)
                if tenure.check() is not None:
                    break
                wait = self.timing.retry_seconds
                continue
            if renewed:
                tenure.renewed(started)
                wait = self.timing.interval_seconds
                continue
            tenure.end(f"Lease {self.namespace}/{self.name} is no longer ours (gone or taken over)")
            break
        if not self._done.is_set():
            log.error("stepping down: %s; not renewing it any more", tenure.check())

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        self._released = True
        try:
            self.lock.release()
        except Exception as err:  # noqa: BLE001 - it expires by itself
            log.warning("releasing Lease %s/%s failed (it will expire): %s", self.namespace, self.name, err)

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
  taints and affinity runs on the same node never overlap.
* :class:`LeaseGuard` (across processes): the ``coordination.k8s.io/v1`` Lease. Balance runs take it
  before deciding and give it up after; a run that finds it held waits ``leaseWaitSeconds`` then
  fails with :class:`LockBusy` (HTTP 429, Knative retries later). While held it is renewed every
  third of its duration. The Lease also carries the disruption ledger
  (an annotation every run writes with optimistic concurrency: :mod:`kdesched.reactor.ledger_store`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Self, TypeVar

from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock

log = logging.getLogger("kdesched.reactor.coordination")

WAIT_SLICE_SECONDS = 0.1
Req = TypeVar("Req")
Res = TypeVar("Res")


class LockBusy(Exception):
    """Another run holds the lock (or the Lease): try again later (HTTP 429)."""


class ShuttingDown(Exception):
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
    """One :class:`Coalescer` per key (e.g. per node), created on first use."""

    def __init__(self, factory: Callable[[str], Coalescer[Req, Res]]) -> None:
        self.factory = factory
        self._lock = threading.Lock()
        self._by_key: dict[str, Coalescer[Req, Res]] = {}

    def get(self, key: str) -> Coalescer[Req, Res]:
        with self._lock:
            c = self._by_key.get(key)
            if c is None:
                c = self._by_key[key] = self.factory(key)
            return c


class NodeLocks:
    """One lock per node name, shared by all node-scoped work of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def get(self, node: str) -> threading.Lock:
        with self._lock:
            lock = self._locks.get(node)
            if lock is None:
                lock = self._locks[node] = threading.Lock()
            return lock


def default_identity() -> str:
    """Holder identity: the pod name (or host name) plus a random suffix, unique per process."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "kdesched"
    return f"{base}-{uuid.uuid4().hex[:8]}"


class LeaseGuard:
    """Hold the Lease for the duration of a ``with`` block (after waiting up to ``wait_seconds``).

    On entry: acquire (else :class:`LockBusy`) and start renewing. On exit: stop renewing and
    release. A lost Lease (renew failed) sets ``lost``; the runner checks it before evicting.
    """

    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str, *, duration_seconds: int,
                 wait_seconds: float, stop: threading.Event | None = None, poll_seconds: float = 0.2) -> None:
        self.client = client
        self.lock = LeaseLock(client, namespace, name, identity, duration_seconds)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds
        self.stop = stop or threading.Event()
        self.lost = False
        self._renewer: threading.Thread | None = None
        self._done = threading.Event()

    def __enter__(self) -> Self:
        deadline = time.monotonic() + self.wait_seconds
        while not self.lock.try_acquire():
            if self.stop.is_set():
                raise ShuttingDown("shutting down: Lease not taken")
            if time.monotonic() >= deadline:
                raise LockBusy(f"Lease {self.namespace}/{self.name} is held by another run "
                               f"({self.lock.holder() or 'unknown holder'}); waited {self.wait_seconds:g}s")
            self.stop.wait(self.poll_seconds)
        self._renewer = threading.Thread(target=self._renew_loop, name=f"lease-renew-{self.name}", daemon=True)
        self._renewer.start()
        return self

    def _renew_loop(self) -> None:
        interval = max(1.0, self.lock.lease_duration_seconds / 3)
        while not self._done.wait(interval):
            try:
                if not self.lock.renew():
                    self.lost = True
                    log.error("Lease %s/%s lost while running", self.namespace, self.name)
                    return
            except Exception as exc:  # noqa: BLE001 - keep trying until the lease would expire
                log.warning("renewing Lease %s/%s failed: %s", self.namespace, self.name, exc)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        try:
            self.lock.release()
        except Exception as err:  # noqa: BLE001 - it expires by itself
            log.warning("releasing Lease %s/%s failed (it will expire): %s", self.namespace, self.name, err)

"""The run Lease across processes: taking it, renewing it, and stepping down in time.

Why: in-process locks (:mod:`kdesched.reactor.run.coalescing`) keep one process's runs apart; balance
runs of different processes (several pods of a function, ``serve`` replicas) must not interleave
either. :class:`LeaseGuard` holds the ``coordination.k8s.io/v1`` Lease around a balance run: a run
that finds it held waits ``leaseWaitSeconds`` then fails with :class:`LockBusy` (HTTP 429, Knative
retries later). While held it is renewed (:class:`RenewTiming`, client-go's LeaseDuration /
RenewDeadline / RetryPeriod): when no renew has succeeded for the renew deadline, shorter than the
duration, the holder steps down (:meth:`LeaseGuard.still_held` says so, between eviction batches)
before anyone else may take the Lease. :class:`Tenure` is that judgement alone (no I/O), which the
leader election of ``kdesched serve`` uses too. The disruption ledger is written beside it, with
optimistic concurrency (:mod:`kdesched.reactor.io.ledger_store`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from kdesched.errors import TryLater, Unavailable
from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock

log = logging.getLogger("kdesched.reactor.coordination")


class LockBusy(TryLater):
    """Another run holds the lock (or the Lease): try again later (HTTP 429)."""


class ShuttingDown(Unavailable):
    """The process is stopping; the request was not run (HTTP 503, Knative retries elsewhere)."""


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

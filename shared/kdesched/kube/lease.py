"""coordination.k8s.io/v1 Lease primitives and a small non-blocking lock built on them.

Why: two balancing runs must never overlap, and Knative may deliver events to several replicas
at once. A Lease with optimistic concurrency (replace with ``resourceVersion``; a 409 means another
writer got there first) is the API server's own mutual exclusion, and it expires by itself when a
holder dies. ``LeaseLock`` only *tries*: the caller decides whether to skip, retry or wait.

Expiry is judged by OUR clock, never by the holder's (client-go's leaderelection rule): the
``renewTime`` in the record was written with the holder's wall clock, which may be minutes off
ours. So a candidate remembers the record it last saw and the local monotonic time it first saw
it (:class:`LeaseObservations`); another holder's Lease is expired only once that record has not
changed for its ``leaseDurationSeconds`` by our clock. The first sight of a held Lease is
therefore never expired: a fresh candidate waits one full duration, as client-go's does. The
record's timestamps only serve to notice a change. What counts as a change is the spec
(holder, acquire/renew time, duration, transitions), not ``resourceVersion``: an annotation
written by someone else must not keep a dead holder's Lease alive.

Observations belong to the process and the API server, not to one ``LeaseLock``: the reactor
builds a lock per run, and a candidate that forgot what it saw between two attempts would never
see a dead holder's Lease expire. They are kept per :class:`~kdesched.kube.client.KubeClient`
(:func:`observations_for`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from kdesched.kube.client import KubeClient, micro_time
from kdesched.kube.errors import Conflict
from kdesched.kube.transport import LEASES, lane
from kdesched.model.records import parse_time

log = logging.getLogger("kdesched.kube.lease")

Clock = Callable[[], datetime]
Monotonic = Callable[[], float]

R = TypeVar("R")
RENEW_ATTEMPTS = 3  # a renew that meets a 409 re-reads and tries again, this many times in all
_RECORD_FIELDS = ("holderIdentity", "acquireTime", "renewTime", "leaseDurationSeconds", "leaseTransitions")


@dataclass(frozen=True, slots=True)
class ObservedRecord:
    """A Lease record as this process last saw it, and when (local monotonic seconds) it first
    saw that record unchanged."""

    record: tuple[Any, ...]  # the spec's _RECORD_FIELDS, as read
    resource_version: str
    seen_at: float

    @property
    def holder(self) -> str:
        return str(self.record[0] or "")

    @property
    def duration_seconds(self) -> int | None:
        """The record's ``leaseDurationSeconds`` (None when absent or not a positive integer)."""
        value = self.record[3]
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _record(lease: Mapping[str, Any]) -> tuple[tuple[Any, ...], str]:
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    return tuple(spec.get(k) for k in _RECORD_FIELDS), str(meta.get("resourceVersion") or "")


class LeaseObservations:
    """What this process last saw of each Lease (by namespace and name), thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], ObservedRecord] = {}

    def observe(self, namespace: str, name: str, lease: Mapping[str, Any], now: float) -> ObservedRecord:
        """Remember ``lease`` as read (or written) at ``now``: a changed record restarts the clock,
        an unchanged one keeps the time it was first seen."""
        record, rv = _record(lease)
        with self._lock:
            seen = self._seen.get((namespace, name))
            if seen is None or seen.record != record:
                seen = ObservedRecord(record, rv, now)
            elif seen.resource_version != rv:
                seen = ObservedRecord(record, rv, seen.seen_at)  # same record, another writer's change
            self._seen[(namespace, name)] = seen
            return seen

    def get(self, namespace: str, name: str) -> ObservedRecord | None:
        with self._lock:
            return self._seen.get((namespace, name))

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._seen.pop((namespace, name), None)


_OBSERVATIONS: weakref.WeakKeyDictionary[KubeClient, LeaseObservations] = weakref.WeakKeyDictionary()
_OBSERVATIONS_LOCK = threading.Lock()


def observations_for(client: KubeClient) -> LeaseObservations:
    """The observations shared by every :class:`LeaseLock` on ``client`` (kept while it lives)."""
    with _OBSERVATIONS_LOCK:
        seen = _OBSERVATIONS.get(client)
        if seen is None:
            seen = _OBSERVATIONS[client] = LeaseObservations()
        return seen


def get_lease(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The Lease, or None if it does not exist."""
    return cast("dict[str, Any] | None", client.get_raw("Lease", name, namespace))


def create_lease(client: KubeClient, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Create the Lease; :class:`Conflict` if it already exists."""
    return cast("dict[str, Any]", client.create_raw("Lease", {"metadata": {"name": name, "namespace": namespace},
                                                               "spec": spec}))


def update_lease(client: KubeClient, lease: dict[str, Any]) -> dict[str, Any]:
    """Replace the Lease as read (its ``metadata.resourceVersion``); :class:`Conflict` if it changed."""
    return cast("dict[str, Any]", client.replace_raw("Lease", lease))


def _time(spec: Mapping[str, Any], key: str) -> datetime | None:
    try:
        return cast("datetime | None", parse_time(spec.get(key), f"spec.{key}"))
    except ValueError:  # a garbled time is treated as absent
        return None


def _leases_lane(method: Callable[[LeaseLock], R]) -> Callable[[LeaseLock], R]:
    """The lock's requests go through the client's Lease lane (:func:`kdesched.kube.transport.lane`):
    a renew never waits for a token behind a maintenance's evictions and Events."""
    @functools.wraps(method)
    def wrapped(self: LeaseLock) -> R:
        with lane(LEASES):
            return method(self)
    return wrapped


class LeaseLock:
    """A named Lease held by ``holder_identity``, renewed by the holder well within
    ``lease_duration_seconds``.

    The lease is free when absent, when it names no holder, or when its record has not changed for
    its ``leaseDurationSeconds`` as measured by ``monotonic`` since this process first saw it (see
    the module docstring: never by comparing the holder's ``renewTime`` with our wall clock).
    ``clock`` only stamps the times we write (default: the API server's, ``client.clock``). API errors other than a lost race
    (:class:`Conflict`) propagate to the caller. Locks sharing a client share their observations,
    so they must share their ``monotonic`` clock too.
    """

    def __init__(self, client: KubeClient, namespace: str, name: str, holder_identity: str,
                 lease_duration_seconds: int = 60, *, clock: Clock | None = None,
                 monotonic: Monotonic = time.monotonic, observations: LeaseObservations | None = None) -> None:
        if not holder_identity:
            raise ValueError("holder_identity must be a non-empty string")
        if lease_duration_seconds < 1:
            raise ValueError(f"lease_duration_seconds must be >= 1, got {lease_duration_seconds}")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder_identity = holder_identity
        self.lease_duration_seconds = lease_duration_seconds
        # the API server's time (kube.clock), as kubectl shows it beside the server's own timestamps
        self.clock = clock if clock is not None else lambda: datetime.fromtimestamp(client.clock.now(), UTC)
        self.monotonic = monotonic
        self.observations = observations if observations is not None else observations_for(client)

    def __repr__(self) -> str:
        return f"LeaseLock({self.namespace}/{self.name} for {self.holder_identity})"

    def observed(self) -> ObservedRecord | None:
        """The record this process last saw of the Lease (None before the first read)."""
        return self.observations.get(self.namespace, self.name)

    def _observe(self, lease: Mapping[str, Any], now: float) -> ObservedRecord:
        return self.observations.observe(self.namespace, self.name, lease, now)

    def _expired(self, seen: ObservedRecord, now: float) -> bool:
        """Another holder's record unchanged for its duration by our clock (ours when it has none)."""
        duration = seen.duration_seconds or self.lease_duration_seconds
        return seen.seen_at + duration < now

    @_leases_lane
    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired or already ours. False if someone else holds it or
        won the race for it."""
        mono = self.monotonic()
        lease = get_lease(self.client, self.namespace, self.name)
        now = self.clock()  # after the read: the client's first answer has set the API server's clock
        if lease is None:
            try:
                created = create_lease(self.client, self.namespace, self.name,
                                       self._spec(now, acquired=now, transitions=0))
            except Conflict:
                log.debug("%r: lost the race to create the lease", self)
                return False
            self._observe(created, mono)
            log.info("%r: acquired (new lease)", self)
            return True
        seen = self._observe(lease, mono)
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        if holder == self.holder_identity:
            return self._write(lease, self._spec(now, acquired=_time(spec, "acquireTime") or now,
                                                 transitions=int(spec.get("leaseTransitions") or 0)), mono)
        if holder and not self._expired(seen, mono):
            log.debug("%r: held by %s", self, holder)
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if holder else 0)
        taken = self._write(lease, self._spec(now, acquired=now, transitions=transitions), mono)
        if taken:
            log.info("%r: acquired (previous holder %s%s)", self, holder or "none",
                     f", its record unchanged for {mono - seen.seen_at:.1f}s by our clock" if holder else "")
        return taken

    @_leases_lane
    def renew(self) -> bool:
        """Extend our hold. True once renewed; False only when the lease is definitely not ours
        (gone, or held by someone else). A 409 (another writer changed the Lease between our read and
        our write, e.g. an annotation update) is not a loss: we re-read and, if it is still ours,
        renew again; :class:`Conflict` is raised (an error to retry, like any API error) only after
        ``RENEW_ATTEMPTS`` such races in a row."""
        for attempt in range(1, RENEW_ATTEMPTS + 1):
            now, mono = self.clock(), self.monotonic()
            lease = get_lease(self.client, self.namespace, self.name)
            if lease is None:
                self.observations.forget(self.namespace, self.name)
                return False
            self._observe(lease, mono)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.holder_identity:
                return False
            try:
                self._replace(lease, {**spec, "renewTime": micro_time(now),
                                      "leaseDurationSeconds": self.lease_duration_seconds}, mono)
            except Conflict:
                if attempt == RENEW_ATTEMPTS:
                    raise
                log.debug("%r: the Lease changed between our read and our renew (409): re-reading", self)
                continue
            return True
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @_leases_lane
    def release(self) -> bool:
        """Give the lease up (only if we hold it) so that another holder can take it at once."""
        now, mono = self.clock(), self.monotonic()
        lease = get_lease(self.client, self.namespace, self.name)
        if lease is None:
            return False
        self._observe(lease, mono)
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.holder_identity:
            return False
        spec.pop("holderIdentity", None)
        spec.update({"leaseDurationSeconds": 1, "renewTime": micro_time(now)})
        released = self._write(lease, spec, mono)
        if released:
            log.info("%r: released", self)
        return released

    @_leases_lane
    def holder(self) -> str | None:
        """The current holder, or None when the lease is absent, free or expired (by our clock)."""
        mono = self.monotonic()
        lease = get_lease(self.client, self.namespace, self.name)
        if lease is None:
            return None
        seen = self._observe(lease, mono)
        holder = seen.holder or None
        if holder is None or (holder != self.holder_identity and self._expired(seen, mono)):
            return None
        return holder

    def _spec(self, now: datetime, *, acquired: datetime, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.holder_identity, "leaseDurationSeconds": self.lease_duration_seconds,
                "acquireTime": micro_time(acquired), "renewTime": micro_time(now), "leaseTransitions": transitions}

    def _replace(self, lease: Mapping[str, Any], spec: dict[str, Any], mono: float) -> None:
        """Replace the Lease as read (its resourceVersion); :class:`Conflict` if it changed since."""
        meta = lease.get("metadata") or {}
        body: dict[str, Any] = {"metadata": {"name": self.name, "namespace": self.namespace,
                                             "resourceVersion": meta.get("resourceVersion")}, "spec": spec}
        # A replace drops whatever the body leaves out: keep what others store on the Lease (the
        # reactor's eviction history lives in an annotation).
        for key in ("annotations", "labels"):
            if meta.get(key):
                body["metadata"][key] = dict(meta[key])
        written = update_lease(self.client, body)
        self._observe(written if isinstance(written, Mapping) and written.get("spec") else body, mono)

    def _write(self, lease: Mapping[str, Any], spec: dict[str, Any], mono: float) -> bool:
        try:
            self._replace(lease, spec, mono)
        except Conflict:
            log.debug("%r: lost the race (resourceVersion changed)", self)
            return False
        return True

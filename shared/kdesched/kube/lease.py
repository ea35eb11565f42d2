"""coordination.k8s.io/v1 Lease primitives and a small non-blocking lock built on them.

Why: two balancing runs must never overlap, and Knative may deliver events to several replicas
at once. A Lease with optimistic concurrency (replace with ``resourceVersion``; a 409 means another
holder won the race) is the API server's own mutual exclusion, and it expires by itself when a
holder dies. ``LeaseLock`` only *tries*: the caller decides whether to skip, retry or wait.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from kdesched.kube.client import KubeClient, micro_time
from kdesched.kube.errors import Conflict
from kdesched.model.records import parse_time

log = logging.getLogger("kdesched.kube.lease")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


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


def _time(spec: dict[str, Any], key: str) -> datetime | None:
    try:
        return cast("datetime | None", parse_time(spec.get(key), f"spec.{key}"))
    except ValueError:  # a garbled time is treated as absent: the lease counts as expired
        return None


class LeaseLock:
    """A named Lease held by ``holder_identity`` for ``lease_duration_seconds`` after each renew.

    The lease is free when absent, when it names no holder, or when
    ``renewTime + leaseDurationSeconds`` is in the past. API errors other than a lost race
    (:class:`Conflict`) propagate to the caller.
    """

    def __init__(self, client: KubeClient, namespace: str, name: str, holder_identity: str,
                 lease_duration_seconds: int = 60, *, clock: Clock = utc_now) -> None:
        if not holder_identity:
            raise ValueError("holder_identity must be a non-empty string")
        if lease_duration_seconds < 1:
            raise ValueError(f"lease_duration_seconds must be >= 1, got {lease_duration_seconds}")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder_identity = holder_identity
        self.lease_duration_seconds = lease_duration_seconds
        self.clock = clock

    def __repr__(self) -> str:
        return f"LeaseLock({self.namespace}/{self.name} for {self.holder_identity})"

    def _expired(self, spec: dict[str, Any], now: datetime) -> bool:
        renewed = _time(spec, "renewTime") or _time(spec, "acquireTime")
        duration = spec.get("leaseDurationSeconds")
        if renewed is None or not isinstance(duration, int):
            return True
        return renewed + timedelta(seconds=duration) < now

    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired or already ours. False if someone else holds it or
        won the race for it."""
        now = self.clock()
        lease = get_lease(self.client, self.namespace, self.name)
        if lease is None:
            try:
                create_lease(self.client, self.namespace, self.name, self._spec(now, acquired=now, transitions=0))
            except Conflict:
                log.debug("%r: lost the race to create the lease", self)
                return False
            log.info("%r: acquired (new lease)", self)
            return True
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        if holder == self.holder_identity:
            return self._write(lease, self._spec(now, acquired=_time(spec, "acquireTime") or now,
                                                 transitions=int(spec.get("leaseTransitions") or 0)))
        if holder and not self._expired(spec, now):
            log.debug("%r: held by %s", self, holder)
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if holder else 0)
        taken = self._write(lease, self._spec(now, acquired=now, transitions=transitions))
        if taken:
            log.info("%r: acquired (previous holder %s)", self, holder or "none")
        return taken

    def renew(self) -> bool:
        """Extend our hold. False if the lease is gone, held by someone else, or the race was lost."""
        now = self.clock()
        lease = get_lease(self.client, self.namespace, self.name)
        if lease is None:
            return False
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.holder_identity:
            return False
        return self._write(lease, {**spec, "renewTime": micro_time(now),
                                   "leaseDurationSeconds": self.lease_duration_seconds})

    def release(self) -> bool:
        """Give the lease up (only if we hold it) so that another holder can take it at once."""
        now = self.clock()
        lease = get_lease(self.client, self.namespace, self.name)
        if lease is None:
            return False
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.holder_identity:
            return False
        spec.pop("holderIdentity", None)
        spec.update({"leaseDurationSeconds": 1, "renewTime": micro_time(now)})
        released = self._write(lease, spec)
        if released:
            log.info("%r: released", self)
        return released

    def holder(self) -> str | None:
        """The current holder, or None when the lease is absent, free or expired."""
        lease = get_lease(self.client, self.namespace, self.name)
        if lease is None:
            return None
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or None
        return None if holder is None or self._expired(spec, self.clock()) else str(holder)

    def _spec(self, now: datetime, *, acquired: datetime, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.holder_identity, "leaseDurationSeconds": self.lease_duration_seconds,
                "acquireTime": micro_time(acquired), "renewTime": micro_time(now), "leaseTransitions": transitions}

    def _write(self, lease: dict[str, Any], spec: dict[str, Any]) -> bool:
        meta = lease.get("metadata") or {}
        body: dict[str, Any] = {"metadata": {"name": self.name, "namespace": self.namespace,
                                             "resourceVersion": meta.get("resourceVersion")}, "spec": spec}
        # A replace drops whatever the body leaves out: keep what others store on the Lease (the
        # reactor's eviction history lives in an annotation).
        for key in ("annotations", "labels"):
            if meta.get(key):
                body["metadata"][key] = dict(meta[key])
        try:
            update_lease(self.client, body)
        except Conflict:
            log.debug("%r: lost the race (resourceVersion changed)", self)
            return False
        return True

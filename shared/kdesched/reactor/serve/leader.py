"""Leader election for ``kdesched serve``: one replica watches and runs, the others stand by.

Why: two leaders would classify every Node change twice and run twice. Only the holder of the
``<lease>-leader`` Lease (default ``kdesched-leader``) leads; the Lease is separate from the run
Lease, because a run releases the run Lease when it ends.

Never idle silently: before campaigning, :meth:`Leadership.preflight` reads both Leases and makes
the first leader-election attempt with errors surfaced. A namespace that does not exist or RBAC that
refuses the Lease is a :class:`LeaseAccessError` naming the namespace and the fix. Later election
errors are kept in :attr:`Leadership.error` (``/readyz`` answers 503 with it).

Stepping down (client-go's rules, :class:`~kdesched.reactor.io.lease.RenewTiming`): the leader
renews its Lease every third of ``leaseDurationSeconds`` and retries a failed renew every retry
period; when the Lease is found held by someone else, or no renew has succeeded for
``leaseRenewDeadlineSeconds``, it steps down: ``is_leader`` is cleared and the stop event set, so
``serve`` shuts down as on SIGTERM (the Deployment restarts it as a standby). The deadline is
judged by the clock every retry period on a thread of its own (a watchdog), never only when a
renew answers: a hanging renew request cannot extend the tenure. Runs ask
:meth:`Leadership.still_leading` between evictions, so they stop at the deadline itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError, Forbidden, NotFound
from kdesched.kube.lease import LeaseLock, get_lease
from kdesched.reactor import metrics as m
from kdesched.reactor.io.lease import RenewTiming, Tenure
from kdesched.reactor.io.ledger_store import LEDGER_LABEL
from kdesched.reactor.run.settings import ReactorSettings

log = logging.getLogger("kdesched.reactor.serve")

LEADER_SUFFIX = "-leader"


class LeaseAccessError(Exception):
    """``kdesched serve`` cannot use its Leases (namespace missing, RBAC refusing): exit 1 at start."""


def lease_access_message(exc: ApiError, verb: str, namespace: str, name: str, names: tuple[str, ...]) -> str:
    """The start-up error for a refused Lease request, naming the namespace and the fix."""
    if isinstance(exc, NotFound):
        return (f"the Lease namespace {namespace!r} does not exist ({verb} Lease {namespace}/{name}: {exc}). "
                f"Fix: create it (kubectl create namespace {namespace}) or pass --lease-namespace with the namespace "
                f"kdesched is installed in (the Deployment sets it from the pod's namespace)")
    return (f"RBAC refuses {verb} on Lease {namespace}/{name} ({exc}). Fix: bind a Role in namespace {namespace!r} "
            f"allowing get and update on leases named {', '.join(names)} and create on leases (the Role "
            f"kdesched-lease in knative/common/rbac-evictor.yaml), or pass --lease-namespace with the namespace "
            f"where that Role is bound")


class Leadership:
    """The leader Lease of one ``serve`` process (``enabled`` False: it always leads, alone)."""

    def __init__(self, client: KubeClient, settings: ReactorSettings, identity: str, *, enabled: bool,
                 clock: Callable[[], float]) -> None:
        self.client = client
        self.settings = settings
        self.identity = identity
        self.enabled = enabled
        self.lock = LeaseLock(client, settings.lease_namespace, f"{settings.lease_name}{LEADER_SUFFIX}",
                              identity, settings.lease_duration_seconds)
        self.checked = threading.Event()  # preflight passed
        self.error = ""  # the last leader-election failure ("" = none)
        self.is_leader = threading.Event()
        self.clock = clock  # monotonic: judges the leader Lease's renew deadline
        self.timing = RenewTiming.for_lease(settings.lease_duration_seconds, settings.lease_renew_deadline)
        self.stepped_down = ""  # why this leader stepped down ("" = it did not)
        self._tenure: Tenure | None = None  # since we last won the Lease (None: never)
        self._step_lock = threading.Lock()

    def lease_names(self) -> tuple[str, ...]:
        run = self.settings.lease_name
        return (run, f"{run}{LEADER_SUFFIX}") if self.enabled else (run,)

    def preflight(self) -> bool:
        """Check, before anything else, that this identity can use its Leases: GET both (RBAC get),
        then the first leader-election attempt with its errors surfaced (create: the namespace must
        exist; update). The run Lease is created now if it is missing (then released), so a refused
        create shows here and not at the first event. Returns whether we lead already; raises
        :class:`LeaseAccessError` (exit 1). A Lease held by another replica cannot prove ``update``
        without taking it: that is checked at the takeover, and a refusal then turns /readyz 503."""
        ns = self.settings.lease_namespace
        names = self.lease_names()
        for name in names:
            try:
                get_lease(self.client, ns, name)
            except (Forbidden, NotFound) as exc:
                raise LeaseAccessError(lease_access_message(exc, "get", ns, name, names)) from None
        try:  # the disruption ledger's workload records are LISTed by every evicting run
            self.client.list_raw("Lease", namespace=ns, label_selector=f"{LEDGER_LABEL}={self.settings.lease_name}")
        except (Forbidden, NotFound) as exc:
            raise LeaseAccessError(lease_access_message(exc, "list", ns, f"(ledger records {LEDGER_LABEL}="
                                                        f"{self.settings.lease_name})", names)) from None
        run_lock = LeaseLock(self.client, ns, self.settings.lease_name, self.identity,
                             self.settings.lease_duration_seconds)
        try:
            if get_lease(self.client, ns, self.settings.lease_name) is None and run_lock.try_acquire():
                run_lock.release()
        except (Forbidden, NotFound) as exc:
            raise LeaseAccessError(lease_access_message(exc, "create/update", ns, self.settings.lease_name,
                                                        names)) from None
        leading = True
        if self.enabled:
            try:
                started = self.clock()
                leading = self._took(self.lock.try_acquire(), started)
            except (Forbidden, NotFound) as exc:
                raise LeaseAccessError(lease_access_message(exc, "create/update", ns, self.lock.name,
                                                            names)) from None
        self.checked.set()
        log.info("Leases %s in namespace %s: usable (%s)", ", ".join(names), ns,
                 "leading" if leading else f"standby, leader Lease held by {self.lock.holder() or 'another'}")
        return leading

    def acquire(self) -> bool:
        """One leader-election attempt: whether we lead now (a failure is kept in :attr:`error`)."""
        if not self.enabled:
            return True
        try:
            started = self.clock()
            taken = self._took(self.lock.try_acquire(), started)
        except Exception as exc:  # noqa: BLE001 - boundary: reported (log + /readyz), never raised further
            if isinstance(exc, (Forbidden, NotFound)):
                self.error = lease_access_message(exc, "create/update", self.settings.lease_namespace,
                                                  self.lock.name, self.lease_names())
            else:
                self.error = f"leader election failed: {exc}"
            log.warning("%s", self.error)
            return False
        self.error = ""
        return taken

    def _took(self, taken: bool, started: float) -> bool:
        """After an election attempt that started at ``started``: a won one starts our tenure."""
        if taken:
            self._tenure = Tenure(self.timing.deadline_seconds, clock=self.clock, since=started,
                                  what=f"leader Lease {self.settings.lease_namespace}/{self.lock.name}")
        return taken

    @property
    def won(self) -> bool:
        """Whether an election attempt of this process won the Lease (whether or not it then led):
        a stopping process releases it on this, so a SIGTERM during the first attempt does not
        leave it held."""
        return self._tenure is not None

    def still_leading(self) -> str | None:
        """None unless our leader tenure has lapsed (then why): no I/O, asked between evictions.
        A replica that never led (a standby answering a manual run) is not held back by it."""
        tenure = self._tenure
        return tenure.check() if tenure is not None else None

    def hold(self, stop: threading.Event) -> None:
        """Keep the leader Lease until ``stop``; step down (and set ``stop``) when it cannot be kept.

        The renews run on their own thread; this thread is the watchdog: it judges the tenure by
        the clock every retry period, so a renew request that hangs (a half-open connection, reads
        retried for a minute) cannot keep us leading past the renew deadline."""
        tenure = self._tenure
        if tenure is None:  # not won through preflight()/acquire(): judged from now
            tenure = self._tenure = Tenure(self.timing.deadline_seconds, clock=self.clock, since=self.clock(),
                                           what=f"leader Lease {self.settings.lease_namespace}/{self.lock.name}")
        threading.Thread(target=self._renew, args=(tenure, stop), name="kdesched-leader-renew", daemon=True).start()
        while not stop.wait(self.timing.retry_seconds):
            reason = tenure.check()
            if reason is not None:
                self.step_down(reason, stop)
                return

    def _renew(self, tenure: Tenure, stop: threading.Event) -> None:
        """Renew every interval, retry a failure every retry period; a definite loss steps down at once."""
        timing = self.timing
        wait = timing.interval_seconds
        while not stop.wait(wait) and tenure.check() is None:
            started = self.clock()
            try:
                renewed = self.lock.renew()
            except Exception as exc:  # noqa: BLE001 - boundary: retried until the renew deadline
                log.warning("renewing the leader Lease failed (%.1fs since the last renew, deadline %gs; retrying "
                            "in %gs): %s", tenure.since_renewed, timing.deadline_seconds, timing.retry_seconds, exc)
                wait = timing.retry_seconds
                continue
            if renewed:
                tenure.renewed(started)
                wait = timing.interval_seconds
                continue
            tenure.end(f"the leader Lease {self.settings.lease_namespace}/{self.lock.name} is no longer "
                       f"ours (gone or taken over)")
            self.step_down(tenure.check() or "", stop)
            return

    def release(self, client: KubeClient) -> None:
        """Release the leader Lease through ``client`` (the stop's, with its own bounds), only if it
        still names us; a failure is logged (the Lease then expires by itself)."""
        lock = LeaseLock(client, self.lock.namespace, self.lock.name, self.identity, self.lock.lease_duration_seconds,
                         observations=self.lock.observations)
        try:
            lock.release()
        except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
            log.warning("releasing the leader Lease failed (it will expire): %s", exc)

    def step_down(self, reason: str, stop: threading.Event) -> None:
        """Stop leading at once, then stop the process as on SIGTERM (the Deployment restarts it and
        it campaigns again as a standby): the watch and the sweep end with the stop event, runs in
        flight are told to stop, and the Lease is released if it still names us."""
        with self._step_lock:
            if self.stepped_down:
                return  # the watchdog and the renewer may both find it
            self.stepped_down = reason
        self.is_leader.clear()
        m.LEADER.labels(self.identity).set(0)
        log.error("stepping down as leader: %s; stopping (restarted, this replica campaigns again)", reason)
        stop.set()

"""Acting on planned evictions: the Eviction API with bounded retries, events, logs and metrics.

Why: strategies only plan. This is the one place that turns plans into API calls, so the rules
live here once. What is retried is decided by :func:`kdesched.kube.errors.is_transient` (the same
rule as reads): throttling (429 without a PDB cause), 502/503/504, a 5xx with Retry-After and
dropped connections, with exponential backoff and jitter inside a total time budget, honouring
Retry-After (one that runs past the admission's deadline ends the retries at once: no attempt could
follow it). A PodDisruptionBudget's 429 is retried too, within the same budget: upstream does not
retry within a cycle, but an event-driven run may be the only run for a while, so a PDB that is
briefly at its limit (a rollout in progress) gets a few bounded chances here. So is a 500 without
Retry-After (the server may have failed after acting: it is confirmed as a lost answer is), except
the API server's "more than one PodDisruptionBudget", which says the same for as long as both
PDBs exist. Anything deterministic (403, 400, 422, that 500, 501) fails at once.

Each outcome says what happened and why (``result`` and ``cause``): ``blocked`` is only a PDB's
refusal, ``throttled`` a 429 that no PDB sent, ``failed`` a server error, a lost connection or a
refusal, each with its cause. An eviction whose answer was lost (the connection dropped after the
request was written, a gateway timed out, or a 500) is confirmed before it is reported: the pod is read
back, and gone, replaced or terminating means ``evicted`` (with its Event), so only a pod that was
already gone before kdesched's first request is ``already-gone``. A pod read back still there
before the admission's deadline plus :data:`LANDING_MARGIN_SECONDS` is ``failed``/``unconfirmed``:
the lost attempt may still land until its ``?timeout=`` runs out on the API server (by the deadline,
counted from when it got there), so the ledger keeps counting it (issue 28).

Events are posted beside the evictions, on their own workers, each retried within a small budget
by the same rule; an Event that still cannot be posted is counted (``events_lost``, the report's
``summary.eventsLost``, ``kdesched_events_lost_total``), never silently dropped and never a delay
for the next eviction. ``keep_going`` lets the caller stop a run between evictions (a Lease past
its renew deadline, SIGTERM, Ctrl-C): evictions not started yet are ``abandoned`` with the caller's
reason, and one being retried sends no new attempt (the attempt on the wire finishes; a wait for
the next one is cut short): ``abandoned`` too, saying so, unless an earlier attempt's answer was
lost, when it is confirmed as above (``unconfirmed`` keeps it in the ledger while it may land).
Dry-run is the same path with :class:`RecordingExecutor`: no API call, the same log and metric.
A live run evicts a bounded number of pods concurrently (:class:`LiveExecutor`), so 700 evictions
are not 700 round trips in a row; outcomes still come back in the plan's order.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_any
from tenacity.stop import stop_base

from kdesched.evictor.ledger_records import CLOCK_MARGIN_SECONDS
from kdesched.evictor.metrics import record_cause, record_event_lost, record_eviction, record_paced
from kdesched.kube.deadline import MIN_ATTEMPT_SECONDS, Deadline, DeadlinePassed
from kdesched.kube.errors import (
    ApiError,
    Cause,
    Conflict,
    NotFound,
    StopAfterBudget,
    Unavailable,
    WaitHonouringRetryAfter,
    cause_of,
    is_pdb_refusal,
    is_transient,
)
from kdesched.strategies.framework import PlannedEviction

if TYPE_CHECKING:  # only a type here: simulate never loads the kubernetes client
    from kdesched.kube.client import KubeClient

log = logging.getLogger("kdesched.evictor")

RESULTS = ("evicted", "dry-run", "already-gone", "blocked", "throttled", "failed", "paced", "abandoned", "deferred")
# the cause of each result (docs/cli.md): evicted accepted | confirmed; already-gone not-found | replaced;
# blocked disruption-budget; throttled throttled; failed server-error | connection | rejected | not-found |
# conflict | gone | unexpected | unconfirmed; paced allowance; abandoned stopped; deferred health-brake | window (never sent:
# kdesched.reactor.run.controls); dry-run none
CONFIRMED = "confirmed"
UNCONFIRMED = "unconfirmed"  # failed: the answer was lost; the pod unreadable, or still there while it may land
# how long after an admission's deadline a lost attempt is still taken to be able to land: each
# attempt's ?timeout= and connect end by the deadline (kdesched.kube.deadline.Deadline.write_bounds),
# but the API server counts that timeout from receiving the request, which a host name's DNS look-up,
# the way there, and a write it commits as it gives up can put a little later. The ledger's clock
# margin: other processes count the admission that long past its deadline too (InFlight.may_still_land)
LANDING_MARGIN_SECONDS = CLOCK_MARGIN_SECONDS
ACCEPTED = "accepted"
REPLACED = "replaced"
UNEXPECTED = "unexpected"
ALLOWANCE = "allowance"
STOPPED = "stopped"
# while an eviction waits for its next attempt (a backoff, a Retry-After), the stop is asked at
# least this often: a stop (SIGTERM, Ctrl-C, a Lease past its renew deadline) must not sit out a
# wait that can run to the admission's deadline, past serve's drain and the pod's grace period
STOP_POLL_SECONDS = 1.0
REASON_ANNOTATION = "kdesched.dev/reason"
REQUESTED_BY_ANNOTATION = "kdesched.dev/requested-by"
REQUESTED_BY = "kdesched"
FAILURE_EVENT_REASON = "EvictionFailed"
PACED_EVENT_REASON = "EvictionPaced"
PACED_EVENT_INTERVAL_SECONDS = 60.0


class OncePerInterval:
    """Per process, thread-safe: is an Event about ``key`` due (none posted in the last
    ``interval`` seconds)? A paced move's repeats re-decide every few seconds, and each would post
    ``EvictionPaced`` on every held pod again: a storm of node events must not become a storm of
    Events (at most one per pod and reason per minute per process; kdesched.reactor.io.whynot does
    the same for the node and owner Events)."""

    MAX_KEYS = 10000

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def due(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                return False
            if len(self._last) >= self.MAX_KEYS:
                self._last = {k: t for k, t in self._last.items() if now - t < self.interval}
            self._last[key] = now
            return True


PACED_EVENTS = OncePerInterval(PACED_EVENT_INTERVAL_SECONDS)

Sleep = Callable[[float], None]

KeepGoing = Callable[[], "str | None"]
"""Asked before each eviction is started: None = go on, a string = why to stop (every eviction not
started yet is then ``abandoned`` with that reason)."""


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """Bounds for retrying one eviction: attempts, backoff range and a total time budget."""

    max_attempts: int = 5
    initial_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 10.0
    max_total_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("initial_backoff_seconds", "max_backoff_seconds", "max_total_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_backoff_seconds < self.initial_backoff_seconds:
            raise ValueError(f"max_backoff_seconds ({self.max_backoff_seconds}) must be >= "
                             f"initial_backoff_seconds ({self.initial_backoff_seconds})")


# An Event is worth a few quick tries, not an eviction's minute: the evictions do not wait for it,
# but the run reports only when every Event was posted or counted lost.
EVENT_RETRY = RetrySettings(max_attempts=4, initial_backoff_seconds=0.2, max_backoff_seconds=2.0,
                            max_total_seconds=10.0)


@dataclass(frozen=True, slots=True)
class EvictionOutcome:
    """What happened to one planned eviction: ``result`` (one of RESULTS) and its ``cause``."""

    eviction: PlannedEviction
    result: str  # one of RESULTS
    message: str
    attempts: int
    cause: str = ""

    def to_json(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {**self.eviction.to_json(), "result": self.result, "message": self.message,
                                     "attempts": self.attempts}
        if self.cause:
            out["cause"] = self.cause
        return out


class Executor(Protocol):
    """Acts on a run's planned evictions; one outcome per eviction, in order, never raising for one."""

    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False, keep_going: KeepGoing | None = None,
                deadline: float | None = None) -> list[EvictionOutcome]:
        """``deadline`` (local monotonic seconds): no eviction is sent, and no attempt is under way,
        after it; the ledger admitted the evictions until then (kdesched.reactor.run.admit)."""
        ...

    def pace(self, held: Sequence[tuple[PlannedEviction, str]]) -> list[EvictionOutcome]:
        """Report evictions the per-workload allowance held back (``paced``, with why): log, metrics
        and, live, an Event on each pod. Nothing is evicted."""
        ...

    @property
    def events_lost(self) -> int:
        """Events this executor could not post within their retry budget, so far."""
        ...


def _paced(held: Sequence[tuple[PlannedEviction, str]], record_metrics: bool) -> list[EvictionOutcome]:
    out = []
    for e, why in held:
        log.info("pacing %s (%s): %s", _label(e), e.strategy, why)
        if record_metrics:
            record_eviction("paced", strategy=e.strategy, profile=e.profile, namespace=e.pod.namespace, node=e.node)
            record_paced(strategy=e.strategy, profile=e.profile, namespace=e.pod.namespace)
            record_cause("paced", ALLOWANCE)
        out.append(EvictionOutcome(e, "paced", why, 0, ALLOWANCE))
    return out


def _abandoned(e: PlannedEviction, why: str) -> EvictionOutcome:
    return EvictionOutcome(e, "abandoned", f"not started: {why}", 0, STOPPED)


class _StoppedBetweenAttempts(Exception):
    """Raised instead of sending the next attempt of an eviction once the run is asked to stop."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _cut_short(e: PlannedEviction, why: str, attempts: int, last: BaseException | None) -> EvictionOutcome:
    """The outcome of an eviction the stop cut short between attempts, none of which can have been
    carried out (each was answered): like one not started, the ledger takes its admission back."""
    return EvictionOutcome(e, "abandoned", f"cut short by the stop ({why}) after {attempts} attempt(s), no "
                           f"new attempt sent; the last answer: {last}", attempts, STOPPED)


def _label(e: PlannedEviction) -> str:
    return f"{e.pod.key} from {e.node or '-'}"


def ask_keep_going(keep_going: KeepGoing | None) -> str | None:
    """Ask the hook once: None = go on, else why to stop (logged). A hook that raises stops the
    run: evicting on is the unsafe side, and the outcomes so far must not be lost to its error."""
    if keep_going is None:
        return None
    try:
        reason = keep_going()
    except Exception as exc:
        log.exception("the keep-going check failed")
        reason = f"the keep-going check failed: {type(exc).__name__}: {exc}"
    if reason is not None:
        log.warning("stopping evictions: %s", reason)
    return reason


class _StopLatch:
    """Asks ``keep_going`` before each eviction until it names a reason, then keeps that reason."""

    def __init__(self, keep_going: KeepGoing | None) -> None:
        self.keep_going = keep_going
        self.reason: str | None = None
        self.lock = threading.Lock()

    def stop_reason(self) -> str | None:
        if self.keep_going is None:
            return None
        with self.lock:
            if self.reason is None:
                self.reason = ask_keep_going(self.keep_going)
            return self.reason


class RecordingExecutor:
    """Dry run: log and count what would be evicted, call nothing. ``outcomes`` keeps every result."""

    def __init__(self, record_metrics: bool = True) -> None:
        # ``kdesched simulate`` exposes no /metrics: it turns them off (a 150,000-pod simulation
        # would otherwise spend seconds creating label children nobody scrapes).
        self.record_metrics = record_metrics
        self.outcomes: list[EvictionOutcome] = []

    @property
    def events_lost(self) -> int:
        return 0

    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False, keep_going: KeepGoing | None = None,
                deadline: float | None = None) -> list[EvictionOutcome]:
        out = []
        latch = _StopLatch(keep_going)
        for e in evictions:
            why = latch.stop_reason()
            if why is not None:
                out.append(_abandoned(e, why))
                continue
            log.info("would evict %s (%s, %s) [dry run]", _label(e), e.strategy, e.reason)
            if self.record_metrics:
                record_eviction("dry-run", strategy=e.strategy, profile=e.profile, namespace=e.pod.namespace,
                                node=e.node)
            out.append(EvictionOutcome(e, "dry-run", "dry run: not evicted", 0))
        self.outcomes.extend(out)
        return out

    def pace(self, held: Sequence[tuple[PlannedEviction, str]]) -> list[EvictionOutcome]:
        out = _paced(held, self.record_metrics)
        self.outcomes.extend(out)
        return out


def _blocked_message(exc: ApiError, attempts: int) -> str:
    """Name the disruption problem: the Status message plus its DisruptionBudget causes, if any."""
    causes = exc.details.get("causes")
    budget = [str(c.get("message") or "") for c in (causes if isinstance(causes, list) else ()) if isinstance(c, dict)
              and c.get("reason") == "DisruptionBudget" and c.get("message")]
    text = " ".join([exc.message or str(exc), *budget])
    return f"blocked by a PodDisruptionBudget after {attempts} attempt(s): {text}"


class _RetryAfterPastDeadline(stop_base):
    """Stop when the answer's Retry-After runs past ``deadline`` (less than an attempt's minimum
    would be left after waiting it): no attempt could be sent then, and sleeping would hold a
    concurrency slot, and every eviction queued behind it, for nothing. The answer stands."""

    def __init__(self, deadline: float, clock: Callable[[], float]) -> None:
        self.deadline = deadline
        self.clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        exc = retry_state.outcome.exception() if retry_state.outcome is not None else None
        return (isinstance(exc, ApiError) and exc.retry_after is not None
                and self.clock() + exc.retry_after > self.deadline - MIN_ATTEMPT_SECONDS)


def _retrying(settings: RetrySettings, retry: Callable[[BaseException], bool], sleep: Sleep,
              what: Callable[[], str], give_up: stop_base | None = None) -> Retrying:
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.info("%s: attempt %d/%d failed (%s); retrying in %.2fs", what(), state.attempt_number,
                 settings.max_attempts, exc, state.upcoming_sleep)

    return Retrying(
        retry=retry_if_exception(retry),
        stop=stop_any(stop_after_attempt(settings.max_attempts), StopAfterBudget(settings.max_total_seconds),
                      *([give_up] if give_up is not None else [])),
        wait=WaitHonouringRetryAfter(settings.initial_backoff_seconds, settings.max_backoff_seconds,
                                     settings.max_total_seconds),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


# the API server's 500 for a pod under two PodDisruptionBudgets: the same answer for as long as both exist
MULTIPLE_PDBS_MESSAGE = "more than one PodDisruptionBudget"


def _plain_500(exc: BaseException) -> bool:
    """A 500 that may have been a passing failure (etcd, a webhook) after the server acted: read
    the pod back and retry it, unlike the deterministic 500 of a pod under more than one PDB."""
    return (isinstance(exc, ApiError) and exc.status == 500
            and MULTIPLE_PDBS_MESSAGE.lower() not in (exc.message or "").lower())


def _eviction_retryable(exc: BaseException) -> bool:
    """Transient by the one rule, a PDB's refusal (a budget comes back within the retry budget), or
    a 500 other than the two-PDB one (its outcome is confirmed by reading the pod back)."""
    return is_transient(exc, read=False) or is_pdb_refusal(exc) or _plain_500(exc)


class _EventSender:
    """Posts Events beside the evictions, on their own worker threads, so an Event never delays the
    next eviction. Each Event keeps its name across retries (a retry after a lost answer gets 409
    AlreadyExists: posted once) and is retried within ``retry``; one that still fails is counted
    in ``lost`` and ``kdesched_events_lost_total``. :meth:`drain` waits for every one."""

    def __init__(self, client: KubeClient, workers: int, retry: RetrySettings, sleep: Sleep) -> None:
        self.client = client
        self.retry = retry
        self.sleep = sleep
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="kdesched-event")
        self.pending: list[Future[bool]] = []
        self.lock = threading.Lock()
        self.lost = 0

    def send(self, **event: Any) -> None:
        future = self.pool.submit(self._post, event)
        with self.lock:
            self.pending.append(future)

    def _post(self, event: dict[str, Any]) -> bool:
        from kdesched.kube.client import event_object_name  # only when live: simulate never loads it

        name = event_object_name(str(event["name"]))
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            try:
                self.client.post_event(**event, event_name=name)
            except Conflict:
                if attempts == 1:
                    raise
                # an earlier attempt's answer was lost and it was posted: that is success

        label = f"{event['namespace']}/{event['name']}"
        try:
            # an Event is posted under one name, so sending it again is harmless (a repeat gets
            # 409): it is retried as a read is, a plain 500 included, and a refused connection too
            _retrying(self.retry, lambda exc: is_transient(exc, read=True) or isinstance(exc, Unavailable),
                      self.sleep, lambda: f"posting event {event['reason']} for {label}")(attempt)
        except ApiError as exc:
            log.warning("could not post event %s for %s after %d attempt(s): %s", event["reason"], label,
                        attempts, exc)
            record_event_lost(str(event["reason"]))
            with self.lock:
                self.lost += 1
            return False
        return True

    def drain(self) -> None:
        self.pool.shutdown(wait=True)
        for f in self.pending:
            if f.exception() is not None:  # _post handles API errors itself; this is a bug's surprise
                log.error("posting an event failed unexpectedly: %s", f.exception())
                with self.lock:
                    self.lost += 1


def _last_answer(e: PlannedEviction, exc: DeadlinePassed | ApiError, attempts: int) -> EvictionOutcome:
    """The outcome the last attempt's own answer (or the deadline) gives, with no lost answer before it."""
    if isinstance(exc, DeadlinePassed):
        return _abandoned(e, f"{exc}; the ledger no longer counts it, the next run re-decides")
    if isinstance(exc, NotFound):
        return EvictionOutcome(e, "already-gone", f"pod no longer exists: {exc.message or exc}", attempts,
                               Cause.NOT_FOUND)
    if isinstance(exc, Conflict):
        return EvictionOutcome(e, "already-gone", "a different pod now has this name (uid precondition "
                               f"failed): {exc.message or exc}", attempts, REPLACED)
    if is_pdb_refusal(exc):
        return EvictionOutcome(e, "blocked", _blocked_message(exc, attempts), attempts, Cause.DISRUPTION_BUDGET)
    cause = cause_of(exc)
    if cause == Cause.THROTTLED:
        return EvictionOutcome(e, "throttled", "still refused with 429 Too Many Requests (API throttling, not a "
                               f"PodDisruptionBudget) after {attempts} attempt(s): {exc.message or exc}", attempts,
                               cause)
    return EvictionOutcome(e, "failed", f"eviction failed after {attempts} attempt(s): {exc}", attempts, cause)


class LiveExecutor:
    """Evicts through the API server (policy/v1 Eviction), with retries, events, logs and metrics.

    Up to ``max_concurrent`` evictions are in flight at once (a thread pool; default: the client's
    ``max_concurrent_evictions``, 1 = strictly one after another). Each eviction keeps its own
    retries, backoff and Retry-After (a worker that waits holds its slot, so the bound is exact);
    its log line, metric and Event follow as soon as it is decided, Events on their own workers;
    ``execute`` returns when every eviction is decided and every Event posted or counted lost,
    with the outcomes in the plan's order whatever order they finished in.

    Two evictions under one PodDisruptionBudget in flight at once: the API server checks and
    decrements the PDB's ``disruptionsAllowed`` with an optimistic-concurrency update of its status,
    retried on conflict, so the second eviction sees the first one's decrement and gets a 429 when
    the budget is spent: concurrency never evicts more than the PDB allows. That 429 is retried
    within the retry budget exactly as it would be sequentially, and ends ``blocked`` if the budget
    is still spent. Per-run limits are applied by the planner before execution, and waves
    (:mod:`kdesched.evictor.waves`) call ``execute`` once per batch, so concurrency is only ever
    inside one batch. ``keep_going`` is asked before each eviction is started (so before every
    batch of concurrent evictions, and between them), and before each retry and during its wait:
    a stop sends no new attempt. Interrupted while it waits for the batch (a
    KeyboardInterrupt in the caller's thread), it starts no eviction more, lets those in flight
    finish and raises (``kdesched run`` turns the first SIGINT/SIGTERM into ``keep_going`` instead).
    """

    def __init__(self, client: KubeClient, retry: RetrySettings = RetrySettings(), events: bool = True,
                 sleep: Sleep = time.sleep, max_concurrent: int | None = None,
                 event_retry: RetrySettings = EVENT_RETRY, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.retry = retry
        self.events = events
        self.sleep = sleep
        self.clock = clock  # the deadline's clock (local monotonic)
        self.event_retry = event_retry
        self.max_concurrent = max_concurrent if max_concurrent is not None else client.max_concurrent_evictions
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {self.max_concurrent}")
        self._events_lost = 0
        self._lost_lock = threading.Lock()

    @property
    def events_lost(self) -> int:
        with self._lost_lock:
            return self._events_lost

    def _event_sender(self, evictions: int) -> _EventSender:
        workers = min(max(evictions, 1), max(1, self.max_concurrent // 2))
        return _EventSender(self.client, workers, self.event_retry, self.sleep)

    def _drain(self, sender: _EventSender) -> None:
        sender.drain()
        with self._lost_lock:
            self._events_lost += sender.lost

    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False, keep_going: KeepGoing | None = None,
                deadline: float | None = None) -> list[EvictionOutcome]:
        sender = self._event_sender(len(evictions))
        latch = _StopLatch(keep_going)
        interrupted = threading.Event()  # the caller's thread was interrupted (Ctrl-C): start nothing more

        def stop_reason() -> str | None:
            """Asked before each eviction starts and before each of its retries (and during their waits)."""
            return "interrupted" if interrupted.is_set() else latch.stop_reason()

        def one(e: PlannedEviction) -> EvictionOutcome:
            why = stop_reason()
            if why is None and deadline is not None and self.clock() > deadline - MIN_ATTEMPT_SECONDS:
                why = ("its admission's deadline passed before it could be sent (queued behind other evictions); "
                       "the ledger no longer counts it, the next run re-decides")
            if why is not None:
                outcome = _abandoned(e, why)
            else:
                try:
                    # (the waits are sliced only where a stop can come while this thread sleeps:
                    # keep_going; a Ctrl-C in the caller's thread is seen before the next attempt)
                    outcome = self._evict(e, grace_period_seconds, deadline, stop_reason,
                                          poll_waits=keep_going is not None)
                except Exception as exc:  # one eviction's bug or surprise must not stop the others
                    log.exception("evicting %s failed unexpectedly", _label(e))
                    outcome = EvictionOutcome(e, "failed", f"unexpected error: {type(exc).__name__}: {exc}", 1,
                                              UNEXPECTED)
            try:
                self._report(outcome, failure_events, sender)
            except Exception:  # the outcome stands even if reporting it failed
                log.exception("reporting the eviction of %s failed unexpectedly", _label(e))
            return outcome

        try:
            workers = min(self.max_concurrent, len(evictions))
            if workers <= 1:
                return [one(e) for e in evictions]
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kdesched-evict") as pool:
                futures = [pool.submit(one, e) for e in evictions]
                try:
                    return [f.result() for f in futures]  # plan order, whatever order they finished in
                except BaseException:
                    # a KeyboardInterrupt (Ctrl-C) in this thread while it waits: leaving the pool
                    # waits for its work, so nothing queued may start; those in flight finish
                    interrupted.set()
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
        finally:
            self._drain(sender)

    def pace(self, held: Sequence[tuple[PlannedEviction, str]]) -> list[EvictionOutcome]:
        out = _paced(held, True)
        if self.events:
            sender = self._event_sender(len(out))
            try:
                for o in out:
                    pod = o.eviction.pod
                    if not PACED_EVENTS.due(pod.uid or pod.key):
                        continue  # posted for this pod less than a minute ago (a repeat of the move)
                    sender.send(namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
                                reason=PACED_EVENT_REASON,
                                note=f"pod eviction from {o.eviction.node} node by kdesched paced: {o.message}")
            finally:
                self._drain(sender)
        return out

    def _evict(self, e: PlannedEviction, grace_period_seconds: int | None,
               deadline: float | None = None, stop_reason: Callable[[], str | None] | None = None,
               poll_waits: bool = False) -> EvictionOutcome:
        """Evict ``e`` with retries. ``stop_reason`` is asked before every retry: once it names a
        reason no new attempt is sent (one on the wire finishes; its answer stands). With
        ``poll_waits`` it is asked during the waits between attempts too (every
        :data:`STOP_POLL_SECONDS`), so a stop does not sleep out a backoff or a Retry-After."""
        pod = e.pod
        annotations = {REASON_ANNOTATION: f"triggered by {e.profile}/{e.strategy}: {e.reason}",
                       REQUESTED_BY_ANNOTATION: REQUESTED_BY}
        attempts = 0
        lost = ""  # set when an attempt may have been carried out but its answer never came back
        last: BaseException | None = None  # the last attempt's error (for a stop's message)

        def wait(seconds: float) -> None:
            if stop_reason is None or not poll_waits:
                self.sleep(seconds)
                return
            slices = max(1, math.ceil(seconds / STOP_POLL_SECONDS))
            for _ in range(slices):
                if stop_reason() is not None:
                    return  # the next attempt() sees the stop and sends nothing
                self.sleep(seconds / slices)

        def attempt() -> None:
            nonlocal attempts, lost, last
            if attempts and stop_reason is not None:
                why = stop_reason()
                if why is not None:
                    raise _StoppedBetweenAttempts(why)
            try:
                send()
            except Exception as exc:
                last = exc
                raise

        def send() -> None:
            nonlocal attempts, lost
            bound: Deadline | None = None
            if deadline is not None:
                # each attempt ends by the deadline, on the API server too (?timeout=, fixed by the
                # transport after the client-side rate limit's wait): an eviction the ledger
                # stopped counting can never land afterwards
                bound = Deadline(deadline, self.clock, MIN_ATTEMPT_SECONDS)
                if bound.remaining() < MIN_ATTEMPT_SECONDS:
                    raise DeadlinePassed(f"its admission's deadline passed after {attempts} attempt(s)")
            attempts += 1
            try:
                self.client.evict_pod(pod.namespace, pod.name, uid=pod.uid or None,
                                      grace_period_seconds=grace_period_seconds, annotations=annotations,
                                      deadline=bound)
            except DeadlinePassed:  # not sent: the rate limit held it until too little was left
                attempts -= 1
                raise DeadlinePassed(f"its admission's deadline passed after {attempts} attempt(s) (the last one "
                                     "waited for the client-side rate limit and was not sent)") from None
            except Unavailable as exc:
                if exc.maybe_sent:
                    lost = lost or f"the answer to attempt {attempts} was lost ({exc.message})"
                raise
            except ApiError as exc:
                if exc.status == 504:  # a gateway gave up waiting: the API server may have acted
                    lost = lost or f"attempt {attempts} timed out at a gateway (504)"
                elif _plain_500(exc):  # it may have acted before failing: confirmed like a lost answer
                    lost = lost or f"attempt {attempts} was answered 500 ({exc.message or exc.reason})"
                raise

        try:
            _retrying(self.retry, _eviction_retryable, wait, lambda: f"evicting {_label(e)}",
                      _RetryAfterPastDeadline(deadline, self.clock) if deadline is not None else None)(attempt)
        except _StoppedBetweenAttempts as stopped:
            log.warning("evicting %s: stopping (%s): no new attempt after %d", _label(e), stopped.why, attempts)
            own = _cut_short(e, stopped.why, attempts, last)
            if not lost:
                return own
            # an earlier attempt may still land: read back, kept in flight (unconfirmed) while it can;
            # one read, not the reads' minute of retries: stopping, one that fails is unconfirmed
            from kdesched.kube.transport import NO_READ_RETRY  # only when live: simulate never loads it

            outcome = _after_lost(self.client, self.clock, e, lost, attempts, own, deadline, read_retry=NO_READ_RETRY)
            if outcome.result == "failed" and own.message not in outcome.message:
                outcome = replace(outcome, message=f"{outcome.message}; {own.message}")
            return outcome
        except (DeadlinePassed, ApiError) as exc:
            own = _last_answer(e, exc, attempts)
            return _after_lost(self.client, self.clock, e, lost, attempts, own, deadline) if lost else own
        return EvictionOutcome(e, "evicted", f"evicted from {e.node}", attempts, ACCEPTED)

    def _report(self, o: EvictionOutcome, failure_events: bool, sender: _EventSender) -> None:
        e, pod = o.eviction, o.eviction.pod
        metric = "success" if o.result == "evicted" else o.result
        record_eviction(metric, strategy=e.strategy, profile=e.profile, namespace=pod.namespace, node=e.node)
        record_cause(o.result, o.cause)
        if o.result == "evicted":
            log.info("evicted %s: strategy=%s profile=%s reason=%s", _label(e), e.strategy, e.profile, e.reason)
            if self.events:
                sender.send(namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
                            reason=e.strategy, note=f"pod eviction from {e.node} node by kdesched")
            return
        if o.result == "already-gone":
            log.info("not evicting %s: %s", _label(e), o.message)
            return
        if o.result == "abandoned":
            log.warning("not evicting %s (strategy=%s profile=%s): %s", _label(e), e.strategy, e.profile, o.message)
            return
        log.warning("could not evict %s (strategy=%s profile=%s) [%s]: %s", _label(e), e.strategy, e.profile, o.result,
                    o.message)
        if failure_events and self.events:
            sender.send(namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
                        reason=FAILURE_EVENT_REASON, event_type="Warning",
                        note=f"pod eviction from {e.node} node by kdesched failed: {o.message}")


def _after_lost(client: KubeClient, clock: Callable[[], float], e: PlannedEviction, lost: str, attempts: int,
                own: EvictionOutcome, deadline: float | None, read_retry: Any = None) -> EvictionOutcome:
    """After an attempt whose answer was lost, the last attempt failed (``own``: its outcome):
    read the pod back. Carried out: ``evicted`` (cause ``confirmed``). Cannot be read:
    ``failed`` with cause ``unconfirmed``, which the ledger does not take back (the eviction may
    have landed; its admission counts until its deadline, then a run that reads the pod settles
    it). Still there as it was: the lost attempt may still be carried out until its
    ``?timeout=``, which the API server counts from receiving it and which ends by the
    admission's deadline; so, until the deadline plus :data:`LANDING_MARGIN_SECONDS` (what the
    way there and the clocks may add; issue 28: an admission is released only once its eviction
    provably can no longer land), ``unconfirmed`` too. Waiting that out instead would hold a
    concurrency slot, and every eviction queued behind it, for what the ledger's settle finds
    anyway. Read back after it, or without a deadline (no admission): ``own``. ``read_retry``: the
    read-back's bounds (a ``ReadRetry``; None: the client's)."""
    try:
        read_at = clock()  # the pod as it was at or after this moment
        confirmed = _confirm(client, e, lost, read_retry)
    except ApiError as exc:
        log.warning("evicting %s: %s, and the pod could not be read back: %s", _label(e), lost, exc)
        return EvictionOutcome(e, "failed", f"may have been evicted: {lost}, and the pod could not be read "
                               f"back ({exc}); the ledger keeps counting it", attempts, UNCONFIRMED)
    if confirmed is not None:
        return EvictionOutcome(e, "evicted", confirmed, attempts, CONFIRMED)
    left = deadline + LANDING_MARGIN_SECONDS - read_at if deadline is not None else 0.0
    if left <= 0:
        return own
    log.warning("evicting %s: %s, and the pod is still there; that attempt may still be carried out for "
                "%.1fs (until its admission's deadline, plus %gs)", _label(e), lost, left, LANDING_MARGIN_SECONDS)
    return EvictionOutcome(e, "failed", f"may still be evicted: {lost}, and the pod is still there, but the API "
                           f"server may carry that attempt out until the admission's deadline (plus "
                           f"{LANDING_MARGIN_SECONDS:g}s; {left:.0f}s from now); the ledger keeps counting it. "
                           f"The last attempt: {own.message}", attempts, UNCONFIRMED)

def _confirm(client: KubeClient, e: PlannedEviction, lost: str, read_retry: Any = None) -> str | None:
    """Read the pod back. Gone, replaced (another uid) or terminating means the eviction was
    carried out: the message for ``evicted``; None when the pod is still there as it was. An
    ApiError when it cannot be read."""
    pod = e.pod
    obj = client.get_raw("Pod", pod.name, pod.namespace, retry=read_retry)
    if obj is None:
        state = "the pod is gone"
    else:
        meta = obj.get("metadata") or {}
        if pod.uid and meta.get("uid") != pod.uid:
            state = "the pod is gone (a different pod now has its name)"
        elif meta.get("deletionTimestamp"):
            state = "the pod is terminating"
        else:
            return None
    log.info("evicting %s: %s; %s: counted as evicted", _label(e), lost, state)
    return f"evicted from {e.node}: {lost}; {state}"

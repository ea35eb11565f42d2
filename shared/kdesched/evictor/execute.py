"""Acting on planned evictions: the Eviction API with bounded retries, events, logs and metrics.

Why: strategies only plan. This is the one place that turns plans into API calls, so the rules
live here once: retry only what can succeed later (429 throttling or PDB, 5xx, connection
failures) with exponential backoff and jitter inside a total time budget, honouring Retry-After;
a 404 or a uid-precondition 409 means the judged pod is already gone; a 403 or other 4xx is final.
Upstream does not retry within a cycle; an event-driven run may be the only run for a while, so a
PDB that is briefly at its limit (a rollout in progress) gets a few bounded chances here.
Dry-run is the same path with :class:`RecordingExecutor`: no API call, the same log and metric.
A live run evicts a bounded number of pods concurrently (:class:`LiveExecutor`), so 700 evictions
are not 700 round trips in a row; outcomes still come back in the plan's order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from kdesched.evictor.metrics import record_eviction, record_paced
from kdesched.kube.errors import ApiError, Conflict, NotFound, TooManyRequests
from kdesched.strategies.framework import PlannedEviction

if TYPE_CHECKING:  # only a type here: simulate never loads the kubernetes client
    from kdesched.kube.client import KubeClient

log = logging.getLogger("kdesched.evictor")

RESULTS = ("evicted", "dry-run", "already-gone", "blocked", "failed", "paced")
REASON_ANNOTATION = "kdesched.dev/reason"
REQUESTED_BY_ANNOTATION = "kdesched.dev/requested-by"
REQUESTED_BY = "kdesched"
FAILURE_EVENT_REASON = "EvictionFailed"
PACED_EVENT_REASON = "EvictionPaced"

Sleep = Callable[[float], None]


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


@dataclass(frozen=True, slots=True)
class EvictionOutcome:
    """What happened to one planned eviction."""

    eviction: PlannedEviction
    result: str  # one of RESULTS
    message: str
    attempts: int

    def to_json(self) -> dict[str, str | int]:
        return {**self.eviction.to_json(), "result": self.result, "message": self.message, "attempts": self.attempts}


class Executor(Protocol):
    """Acts on a run's planned evictions; one outcome per eviction, in order, never raising for one."""

    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False) -> list[EvictionOutcome]: ...

    def pace(self, held: Sequence[tuple[PlannedEviction, str]]) -> list[EvictionOutcome]:
        """Report evictions the per-workload allowance held back (``paced``, with why): log, metrics
        and, live, an Event on each pod. Nothing is evicted."""
        ...


def _paced(held: Sequence[tuple[PlannedEviction, str]], record_metrics: bool) -> list[EvictionOutcome]:
    out = []
    for e, why in held:
        log.info("pacing %s (%s): %s", _label(e), e.strategy, why)
        if record_metrics:
            record_eviction("paced", strategy=e.strategy, profile=e.profile, namespace=e.pod.namespace, node=e.node)
            record_paced(strategy=e.strategy, profile=e.profile, namespace=e.pod.namespace)
        out.append(EvictionOutcome(e, "paced", why, 0))
    return out


def _label(e: PlannedEviction) -> str:
    return f"{e.pod.key} from {e.node or '-'}"


class RecordingExecutor:
    """Dry run: log and count what would be evicted, call nothing. ``outcomes`` keeps every result."""

    def __init__(self, record_metrics: bool = True) -> None:
        # ``kdesched simulate`` exposes no /metrics: it turns them off (a 150,000-pod simulation
        # would otherwise spend seconds creating label children nobody scrapes).
        self.record_metrics = record_metrics
        self.outcomes: list[EvictionOutcome] = []

    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False) -> list[EvictionOutcome]:
        out = []
        for e in evictions:
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


def _budget_used(state: RetryCallState) -> float:
    """Time spent so far: wall clock, or the (possibly injected, instant) sleeps if larger."""
    return max(state.seconds_since_start or 0.0, state.idle_for)


class _StopAfterBudget(stop_base):
    """Like ``stop_after_delay``, but also counts the sleeps, so an injected sleep keeps the budget."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, retry_state: RetryCallState) -> bool:
        # the wait is clipped to the remaining budget, so the attempt after it finds the budget spent
        return _budget_used(retry_state) >= self.seconds


class _WaitHonouringRetryAfter(wait_base):
    """Exponential backoff with jitter; a 429's Retry-After wins; never past the total budget."""

    def __init__(self, settings: RetrySettings) -> None:
        self.settings = settings
        self.backoff = wait_exponential_jitter(multiplier=settings.initial_backoff_seconds,
                                               max=settings.max_backoff_seconds,
                                               jitter=settings.initial_backoff_seconds)

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
            wait = exc.retry_after
        else:
            wait = float(self.backoff(retry_state))
        remaining = self.settings.max_total_seconds - _budget_used(retry_state)
        return float(max(0.0, min(wait, remaining)))


def _blocked_message(exc: TooManyRequests, attempts: int) -> str:
    """Name the disruption problem: the Status message plus its DisruptionBudget causes, if any."""
    causes = exc.details.get("causes")
    budget = [str(c.get("message") or "") for c in (causes if isinstance(causes, list) else ()) if isinstance(c, dict)
              and c.get("reason") == "DisruptionBudget" and c.get("message")]
    text = " ".join([exc.message or str(exc), *budget])
    if budget or "disruption budget" in text.lower():
        return f"blocked by a PodDisruptionBudget after {attempts} attempt(s): {text}"
    return f"still refused with 429 Too Many Requests after {attempts} attempt(s): {text}"


class _EventSender:
    """Posts Events beside the evictions: queued on a few worker threads so an Event never delays
    the next eviction; :meth:`drain` waits until every one was posted or failed (and was logged:
    ``create_event`` never raises). Inline (posted at once) when ``workers`` is 0."""

    def __init__(self, client: KubeClient, workers: int) -> None:
        self.client = client
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kdesched-event") if workers else None
        self.pending: list[Future[bool]] = []
        self.lock = threading.Lock()

    def send(self, **event: Any) -> None:
        if self.pool is None:
            self.client.create_event(**event)
            return
        future = self.pool.submit(self.client.create_event, **event)
        with self.lock:
            self.pending.append(future)

    def drain(self) -> None:
        if self.pool is None:
            return
        self.pool.shutdown(wait=True)
        for f in self.pending:
            if f.exception() is not None:  # create_event logs API errors itself; this is a bug's surprise
                log.error("posting an event failed unexpectedly: %s", f.exception())


class LiveExecutor:
    """Evicts through the API server (policy/v1 Eviction), with retries, events, logs and metrics.

    Up to ``max_concurrent`` evictions are in flight at once (a thread pool; default: the client's
    ``max_concurrent_evictions``, 1 = strictly one after another). Each eviction keeps its own
    retries, backoff and Retry-After (a worker that waits holds its slot, so the bound is exact);
    its log line, metric and Event follow as soon as it is decided, Events on their own workers;
    ``execute`` returns when every eviction is decided and every Event posted or logged as failed,
    with the outcomes in the plan's order whatever order they finished in.

    Two evictions under one PodDisruptionBudget in flight at once: the API server checks and
    decrements the PDB's ``disruptionsAllowed`` with an optimistic-concurrency update of its status,
    retried on conflict, so the second eviction sees the first one's decrement and gets a 429 when
    the budget is spent: concurrency never evicts more than the PDB allows. That 429 is retried
    within the retry budget exactly as it would be sequentially, and ends ``blocked`` if the budget
    is still spent. Per-run limits are applied by the planner before execution, and waves
    (:mod:`kdesched.evictor.waves`) call ``execute`` once per batch, so concurrency is only ever
    inside one batch.
    """

    def __init__(self, client: KubeClient, retry: RetrySettings = RetrySettings(), events: bool = True,
                 sleep: Sleep = time.sleep, max_concurrent: int | None = None) -> None:
        self.client = client
        self.retry = retry
        self.events = events
        self.sleep = sleep
        self.max_concurrent = max_concurrent if max_concurrent is not None else client.max_concurrent_evictions
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {self.max_concurrent}")

    def _event_sender(self, evictions: int) -> _EventSender:
        workers = 0 if self.max_concurrent == 1 or not self.events else min(evictions, max(1, self.max_concurrent // 2))
        return _EventSender(self.client, workers)

    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False) -> list[EvictionOutcome]:
        sender = self._event_sender(len(evictions))

        def one(e: PlannedEviction) -> EvictionOutcome:
            try:
                outcome = self._evict(e, grace_period_seconds)
            except Exception as exc:  # one eviction's bug or surprise must not stop the others
                log.exception("evicting %s failed unexpectedly", _label(e))
                outcome = EvictionOutcome(e, "failed", f"unexpected error: {type(exc).__name__}: {exc}", 1)
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
                return [f.result() for f in futures]  # plan order, whatever order they finished in
        finally:
            sender.drain()

    def pace(self, held: Sequence[tuple[PlannedEviction, str]]) -> list[EvictionOutcome]:
        out = _paced(held, True)
        if self.events:
            sender = self._event_sender(len(out))
            try:
                for o in out:
                    pod = o.eviction.pod
                    sender.send(namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
                                reason=PACED_EVENT_REASON,
                                note=f"pod eviction from {o.eviction.node} node by kdesched paced: {o.message}")
            finally:
                sender.drain()
        return out

    def _retrying(self, e: PlannedEviction) -> Retrying:
        s = self.retry

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.info("evicting %s: attempt %d/%d failed (%s); retrying in %.2fs", _label(e), state.attempt_number,
                     s.max_attempts, exc, state.upcoming_sleep)

        return Retrying(
            retry=retry_if_exception(lambda exc: isinstance(exc, ApiError) and exc.retryable),
            stop=stop_after_attempt(s.max_attempts) | _StopAfterBudget(s.max_total_seconds),
            wait=_WaitHonouringRetryAfter(s),
            sleep=self.sleep,
            before_sleep=before_sleep,
            reraise=True,
        )

    def _evict(self, e: PlannedEviction, grace_period_seconds: int | None) -> EvictionOutcome:
        pod = e.pod
        annotations = {REASON_ANNOTATION: f"triggered by {e.profile}/{e.strategy}: {e.reason}",
                       REQUESTED_BY_ANNOTATION: REQUESTED_BY}
        attempts = 0

        def attempt() -> None:
            nonlocal attempts
            attempts += 1
            self.client.evict_pod(pod.namespace, pod.name, uid=pod.uid or None,
                                  grace_period_seconds=grace_period_seconds, annotations=annotations)

        try:
            self._retrying(e)(attempt)
        except NotFound as exc:
            return EvictionOutcome(e, "already-gone", f"pod no longer exists: {exc.message or exc}", attempts)
        except Conflict as exc:
            return EvictionOutcome(e, "already-gone", "a different pod now has this name (uid precondition "
                                   f"failed): {exc.message or exc}", attempts)
        except TooManyRequests as exc:
            return EvictionOutcome(e, "blocked", _blocked_message(exc, attempts), attempts)
        except ApiError as exc:
            return EvictionOutcome(e, "failed", f"eviction failed after {attempts} attempt(s): {exc}", attempts)
        return EvictionOutcome(e, "evicted", f"evicted from {e.node}", attempts)

    def _report(self, o: EvictionOutcome, failure_events: bool, sender: _EventSender) -> None:
        e, pod = o.eviction, o.eviction.pod
        metric = "success" if o.result == "evicted" else o.result
        record_eviction(metric, strategy=e.strategy, profile=e.profile, namespace=pod.namespace, node=e.node)
        if o.result == "evicted":
            log.info("evicted %s: strategy=%s profile=%s reason=%s", _label(e), e.strategy, e.profile, e.reason)
            if self.events:
                sender.send(namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
                            reason=e.strategy, note=f"pod eviction from {e.node} node by kdesched")
            return
        if o.result == "already-gone":
            log.info("not evicting %s: %s", _label(e), o.message)
            return
        log.warning("could not evict %s (strategy=%s profile=%s): %s", _label(e), e.strategy, e.profile, o.message)
        if failure_events and self.events:
            sender.send(namespace=pod.namespace, name=pod.name, uid=pod.uid or None,
                        reason=FAILURE_EVENT_REASON, event_type="Warning",
                        note=f"pod eviction from {e.node} node by kdesched failed: {o.message}")

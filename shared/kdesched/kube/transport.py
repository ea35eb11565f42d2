"""The client's transport: one request to the API server, rate limited, counted, timed, retried
when it is a read, its failure typed.

Why a module of its own: every verb of the client (:mod:`kdesched.kube.verbs`) and every kind
goes through the same few steps, and they are where kdesched's promises to the API server are
kept, once: a token from the client-side rate limit first (:class:`TokenBucket`, the only one in
kdesched: the admission package's cluster-wide bucket limits evictions, not requests; one bucket
per :func:`lane`, below), the
request through ``ApiClient.param_serialize`` + ``call_api`` (auth, TLS, proxies, token refresh
and impersonation from the official client), the ``Date`` of the answer into the API server's
clock (:mod:`kdesched.kube.clock`; only kube-apiserver's own answers, never an aggregated API's), every request and byte counted (:class:`RequestStats`,
:data:`kdesched.kube.traffic.TRAFFIC`), and every failure mapped to :mod:`kdesched.kube.errors`.
Reads are retried here by the one rule of :func:`kdesched.kube.errors.is_transient`
(:class:`ReadRetry`, the module docstring of :mod:`kdesched.kube.client`). A request's
timeout, a read's or a write's, bounds each attempt's whole answer, not each ``recv``
(:mod:`kdesched.kube.read_deadline`: a server trickling its answer is cut off at it); a watch's
timeouts are its own.

Lanes. Events and the coordination Leases each draw from a bucket of their own, with the same
``qps`` and ``burst`` as the main one, as kube-scheduler gives its event recorder and its leader
election a client of their own (``createClients`` in cmd/kube-scheduler: three clientsets, each
with its own rate limiter). A maintenance posts an Event per
eviction and per paced pod: in the main bucket they made the ledger writes and the evictions of the
next wave wait (measured: a third of a batched run's wall time spent waiting for a token), and a
Lease renew could queue behind them. The API server still sees at most ``qps`` requests a second
per lane; its own API Priority and Fairness guards it beyond that. A caller picks a lane with
``with lane(EVENTS): ...`` (a context variable: per thread, nothing to pass down the verbs).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from kdesched.kube.clock import ServerClock, answered_by_api_server
from kdesched.kube.config import ClientLimits, Impersonation
from kdesched.kube.deadline import DEADLINE_CONNECT_SECONDS, Deadline
from kdesched.kube.errors import (
    ApiError,
    StopAfterBudget,
    WaitHonouringRetryAfter,
    error_from_api_exception,
    error_from_response,
    is_transient,
    unavailable_from,
)
from kdesched.kube.read_deadline import bound_reads, whole_request_timeout
from kdesched.kube.traffic import TRAFFIC

log = logging.getLogger("kdesched.kube")

T = TypeVar("T")

#: a WATCH's connect timeout, and its read timeout's slack over the watch's ``timeoutSeconds``
#: (the server ends the stream by then; a longer silence is a dead peer: :meth:`ResourceClient.watch`)
WATCH_CONNECT_SECONDS = 10.0
WATCH_READ_SLACK_SECONDS = 30.0

#: the lanes of the client-side rate limit (module docstring); the main lane is ``MAIN``
MAIN, EVENTS, LEASES = "main", "events", "leases"
_LANE: ContextVar[str] = ContextVar("kdesched_kube_lane", default=MAIN)


@contextmanager
def lane(name: str) -> Iterator[None]:
    """Send this thread's requests of the ``with`` block through the bucket of lane ``name``."""
    if name not in (MAIN, EVENTS, LEASES):
        raise ValueError(f"unknown rate-limit lane {name!r}")
    token = _LANE.set(name)
    try:
        yield
    finally:
        _LANE.reset(token)


@dataclass(frozen=True, slots=True)
class ReadRetry:
    """How reads are retried (see the module docstring): attempts per request, the backoff range,
    the longest ``Retry-After`` honoured, a total time budget per request, and how many times a
    LIST whose continue token expired starts over. client-go makes up to 10 retries of 1 s
    (or ``Retry-After``) each; these bounds are of the same order, with backoff instead of a fixed
    second, so a flapping API server is not hit in lockstep by every reader."""

    max_attempts: int = 8
    initial_backoff_seconds: float = 0.2
    max_backoff_seconds: float = 5.0
    max_retry_after_seconds: float = 10.0
    max_total_seconds: float = 60.0
    max_list_restarts: int = 3

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_list_restarts < 0:
            raise ValueError(f"max_attempts must be >= 1 and max_list_restarts >= 0: {self}")
        for name in ("initial_backoff_seconds", "max_backoff_seconds", "max_retry_after_seconds",
                     "max_total_seconds"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


NO_READ_RETRY = ReadRetry(max_attempts=1, max_list_restarts=0)
DEFAULT_READ_RETRY = ReadRetry()


@dataclass(frozen=True, slots=True)
class RequestStats:
    """API requests sent (every attempt, failed ones too) and response body bytes read."""

    requests: int = 0
    bytes_read: int = 0


class TokenBucket:
    """Client-side rate limit, as client-go's ``flowcontrol.NewTokenBucketRateLimiter``: ``burst``
    tokens, refilled at ``qps`` per second; each request takes one, waiting for it if none is left.

    Thread-safe and first come, first served: a caller *reserves* its token under the lock (the
    bucket may go negative: a debt later callers wait behind) and sleeps outside it, so concurrent
    callers never sleep while holding the lock and the long-run rate never exceeds ``qps``. The
    clock and sleep are injectable (tests use a fake clock)."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not qps > 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock()
        self.waited_seconds = 0.0  # total time callers spent waiting for a token (reported by runs)

    def reserve(self) -> float:
        """Take a token; return how long the caller must wait before using it (0 if one was there)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited_seconds += wait
            return wait

    def acquire(self) -> float:
        """Take a token, sleeping until it is due; return how long that was (0: a token was there)."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait


class Transport:
    """Sends requests for the client: see the module docstring. Thread-safe."""

    def __init__(self, api_client: ApiClient, *, request_timeout: float | None = 60.0,
                 impersonation: Impersonation | None = None, limits: ClientLimits | None = None,
                 read_retry: ReadRetry = ReadRetry(), sleep: Callable[[float], None] = time.sleep,
                 clock: ServerClock | None = None) -> None:
        self.api_client = api_client
        # a request's timeout bounds the whole answer, not each recv (kdesched.kube.read_deadline)
        bound_reads(api_client.rest_client.pool_manager)
        self.clock = clock if clock is not None else ServerClock()
        self.limits = limits
        self.rate_limiter = TokenBucket(limits.qps, limits.burst) if limits is not None else None
        #: the buckets of the other lanes (module docstring), the same limits as the main one
        self.lane_limiters: dict[str, TokenBucket] = (
            {EVENTS: TokenBucket(limits.qps, limits.burst), LEASES: TokenBucket(limits.qps, limits.burst)}
            if limits is not None else {})
        self.impersonation = impersonation
        self.request_timeout = request_timeout
        self.read_retry = read_retry
        #: a watch's read timeout is its ``timeoutSeconds`` plus this (tests make it short)
        self.watch_read_slack_seconds = WATCH_READ_SLACK_SECONDS
        self._sleep = sleep
        self._lock = threading.Lock()
        self._requests = 0
        self._bytes = 0
        self._read_retries = 0

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def close(self) -> None:
        self.api_client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- accounting ------------------------------------------------------------------------------
    @property
    def read_retries(self) -> int:
        """Reads retried so far (each retry of a LIST page or GET, and each LIST started over)."""
        with self._lock:
            return self._read_retries

    @property
    def stats(self) -> RequestStats:
        with self._lock:
            return RequestStats(self._requests, self._bytes)

    def reset_stats(self) -> None:
        with self._lock:
            self._requests = 0
            self._bytes = 0

    def _count(self, requests: int = 0, nbytes: int = 0, read_retries: int = 0) -> None:
        with self._lock:
            self._requests += requests
            self._bytes += nbytes
            self._read_retries += read_retries

    def _retry_read(self, what: str, call: Callable[[], T], retry: ReadRetry | None = None) -> T:
        """``call()`` (one read request), retried by :func:`is_transient` within :class:`ReadRetry`
        (``retry``, else the client's)."""
        r = retry if retry is not None else self.read_retry
        if r.max_attempts <= 1:
            return call()

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            self._count(read_retries=1)
            log.info("%s: attempt %d/%d failed (%s); retrying in %.2fs", what, state.attempt_number,
                     r.max_attempts, exc, state.upcoming_sleep)

        retrying = Retrying(
            retry=retry_if_exception(lambda exc: is_transient(exc, read=True)),
            stop=stop_after_attempt(r.max_attempts) | StopAfterBudget(r.max_total_seconds),
            wait=WaitHonouringRetryAfter(r.initial_backoff_seconds, r.max_backoff_seconds, r.max_total_seconds,
                                         r.max_retry_after_seconds),
            sleep=self._sleep, before_sleep=before_sleep, reraise=True)
        return retrying(call)

    # -- one request -----------------------------------------------------------------------------
    def _send(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Mapping[str, Any] | None = None, timeout: float | tuple[float, float] | None = None,
              content_type: str = "application/json", server_timeout: float | None = None,
              deadline: Deadline | None = None) -> Any:
        """Send one request; return the unread response (a 2xx) or raise the typed error.

        ``server_timeout`` / ``deadline`` (a write): the API server abandons the request at its
        ``?timeout=``, and this client stops waiting shortly after. Both are fixed after the wait
        for a token: the time left until ``deadline`` then, less what the connection may take (the
        API server counts the ``?timeout=`` from receiving the request; at most ``server_timeout``), and
        :class:`DeadlinePassed` (nothing sent) when too little is left (kdesched.kube.deadline).

        ``timeout``: seconds (the whole request) or ``(connect, read)``, the only forms the kubernetes
        client takes as ``_request_timeout`` (it silently sends anything else, a ``urllib3.Timeout``
        included, with no timeout at all); None: the client's :attr:`request_timeout`. A request (a
        read or a write) with the client's request timeout ends by it whole, its body read later
        included, and a write with a deadline by the wait that deadline gives it
        (:mod:`kdesched.kube.read_deadline`); a watch (its own ``timeout``) is not bounded so."""
        bucket = self.lane_limiters.get(_LANE.get(), self.rate_limiter) if self.rate_limiter is not None else None
        if bucket is not None:
            TRAFFIC.waited(bucket.acquire())
        connect: float | None = None  # a bounded write's whole connect (TCP, then TLS)
        if server_timeout is not None or deadline is not None:
            limit = max(1, int(server_timeout)) if server_timeout is not None else None
            seconds: int | None = limit
            if deadline is not None:  # raises DeadlinePassed; the connect's time comes out of what is left
                seconds, connect = deadline.write_bounds(DEADLINE_CONNECT_SECONDS)
            seconds = min(x for x in (seconds, limit) if x is not None)
            query = [*(query or []), ("timeout", f"{seconds}s")]
            timeout = seconds + 0.5  # the API server answers by then (a timeout error at worst)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, header_params, serialized, post_params = self.api_client.param_serialize(
            method=method, resource_path=path, query_params=query or [], header_params=headers,
            body=dict(body) if body is not None else None, auth_settings=["BearerToken"],
        )
        sent: Mapping[str, str] = header_params
        if self.impersonation is not None:
            # a multi-valued header (one Impersonate-Group line per group): urllib3 sends each value
            multi = urllib3.HTTPHeaderDict(header_params)
            for key, value in self.impersonation.headers():
                multi.add(key, value)
            sent = multi
        self._count(requests=1)
        # the Date of the answer: the API server's clock (kube.clock), if the answer is its own
        clock = self.clock if answered_by_api_server(path) else None
        sent_at = time.monotonic()
        # the request's timeout bounds its whole answer, a read's or a write's (from after the rate
        # limit's wait: it is the request's); a watch passes its own timeout and is not bounded so
        whole = self.request_timeout if timeout is None and self.request_timeout else None
        try:
            if connect is not None and isinstance(timeout, float) and content_type == "application/json":
                with whole_request_timeout(timeout):  # a bounded write: its answer too, by its deadline
                    resp = self._send_once(method, url, sent, serialized, timeout, connect)
            else:
                with whole_request_timeout(whole):
                    resp = self.api_client.call_api(
                        method, url, sent, serialized, post_params,
                        _request_timeout=timeout if timeout is not None else self.request_timeout)
        except ApiException as exc:
            if clock is not None:
                clock.observe(exc.headers, sent_at, time.monotonic())
            TRAFFIC.request(method, exc.status or "error")
            raise error_from_api_exception(exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            TRAFFIC.request(method, "error")
            raise unavailable_from(exc) from None
        if clock is not None:
            clock.observe(resp.headers, sent_at, time.monotonic())
        TRAFFIC.request(method, resp.status)
        if not 200 <= resp.status <= 299:
            data = self._read(resp)
            raise error_from_response(resp.status, str(resp.reason or ""), data, resp.headers)
        return resp

    def _send_once(self, method: str, url: str, headers: Mapping[str, str], body: Any, total: float,
                   connect: float) -> Any:
        """A write bounded by a deadline, sent once: no transport retry. urllib3 retries a failed
        connect with the same request, whose ``?timeout=`` was fixed before the first connect; after
        one that hung (a SYN to a dead endpoint behind the Service) the eviction went out late with
        its whole ``?timeout=`` and could land after the deadline. A failed connect is raised
        (:class:`Unavailable`, never sent) for the executor to retry, timed from what is left then.

        ``connect``: what the connection may take in all, already taken out of the ``?timeout=``
        (:meth:`~kdesched.kube.deadline.Deadline.write_bounds`): the API server starts that timeout
        only when it receives the request, so a connection made later could let the write land
        after the deadline. urllib3 bounds the TCP connect and then the TLS handshake each by the
        connect timeout: half of it each. (A host name's DNS look-up is not bounded; in a cluster
        the API server is an address. The ledger's clock margin covers the rest: execute.py.)
        The JSON write the API client would make (``kubernetes.client.rest``), minus its retries."""
        return self.api_client.rest_client.pool_manager.request(
            method, url, body=json.dumps(body) if body is not None else None,
            timeout=urllib3.Timeout(connect=min(connect / 2, total), total=total),
            headers=headers, preload_content=False, retries=False)

    def _read(self, resp: Any) -> bytes:
        try:
            data: bytes = resp.read() or b""
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise unavailable_from(exc) from None
        self._count(nbytes=len(data))
        return data

    def _json(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Mapping[str, Any] | None = None, content_type: str = "application/json") -> dict[str, Any]:
        resp = self._send(method, path, query=query, body=body, content_type=content_type)
        return self._parse(resp, method, path, self._read(resp))

    @staticmethod
    def _parse(resp: Any, method: str, path: str, data: bytes) -> dict[str, Any]:
        if not data:
            return {}
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise ApiError(resp.status, "Bad Response", f"{method} {path}: response is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise ApiError(resp.status, "Bad Response", f"{method} {path}: expected a JSON object")
        return parsed


__all__ = ["DEFAULT_READ_RETRY", "NO_READ_RETRY", "ReadRetry", "RequestStats", "TokenBucket", "Transport"]

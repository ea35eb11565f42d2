"""KubeClient: the only object in kdesched that sends requests to the API server.

Why: decisions need raw JSON for six kinds, one eviction verb, events, leases and a watch; the
official client's generated models are far too slow and large for 150,000 pods. So every request
goes through ``ApiClient.param_serialize`` + ``call_api`` (auth, TLS, proxies and token refresh
still come from the official client) with a path we build, and each response body is parsed once
with ``json.loads``. HTTP and transport failures become the typed errors of
:mod:`kdesched.kube.errors` here, once. Every request and every byte read is counted, so a run can
report (and a benchmark can compare) what it cost the API server, and every request first takes a
token from the client-side rate limit (:class:`TokenBucket`), so no caller can flood it. The client
is thread-safe: evictions and LISTs run concurrently over one urllib3 pool sized for them. The
``Date`` of every answer feeds :attr:`KubeClient.clock`, the API server's clock
(:mod:`kdesched.kube.clock`): the one clock of every time kdesched writes to the cluster.

Every read (each LIST page and each GET of one object) is retried as client-go's REST client
retries it (``rest/with_retry.go`` ``IsNextRetry``/``checkWait``: a 429 or 5xx with ``Retry-After``
waits that long, up to 10 retries; ``rest/request.go``: a GET whose connection was reset or ended
early is retried), by the one rule of :func:`kdesched.kube.errors.is_transient`: 429 honouring
``Retry-After`` (capped), 5xx but 501, a dropped or reset connection and a read timeout, with
exponential backoff and jitter inside a total budget (:class:`ReadRetry`); each retry takes a token
from the rate limit again, as client-go's do. A LIST continued with a ``continue`` token that
expired meanwhile (410) starts over from the first page, as a reflector re-lists. Writes are not
retried here: the evictor decides (:mod:`kdesched.evictor.execute`). Watches are not retried here
either: the watch cache re-lists and re-watches (:mod:`kdesched.kube.cache`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from kdesched.kube.clock import ServerClock
from kdesched.kube.config import (
    ClientLimits,
    Impersonation,
    host_configuration,
    limits_from_env,
    load_configuration,
    load_impersonation,
)
from kdesched.kube.errors import (
    ApiError,
    Gone,
    NotFound,
    StopAfterBudget,
    Unavailable,
    WaitHonouringRetryAfter,
    error_from_api_exception,
    error_from_response,
    error_from_status,
    is_transient,
    trim,
    unavailable_from,
)
from kdesched.kube.traffic import TRAFFIC
from kdesched.model.fastload import decode_list_page
from kdesched.model.records import Pod

log = logging.getLogger("kdesched.kube")

REPORTING_CONTROLLER = "kdesched.dev/descheduler"
EVENT_ACTION = "Descheduled"
MAX_EVENT_NOTE = 1024  # events.k8s.io/v1 validation limit for ``note``
WATCH_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the API: ``/api/v1/...`` or ``/apis/<group>/<version>/...``."""

    kind: str
    group_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self.kind} is cluster-scoped: no namespace may be given")
            base += f"/namespaces/{quote(namespace, safe='')}"
        elif name is not None and self.namespaced:
            raise ValueError(f"{self.kind} {name!r} is namespaced: a namespace is required")
        path = f"{base}/{self.plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
            if subresource:
                path += f"/{subresource}"
        return path


RESOURCES: dict[str, Resource] = {r.kind: r for r in (
    Resource("Node", "v1", "nodes", False),
    Resource("Pod", "v1", "pods", True),
    Resource("Namespace", "v1", "namespaces", False),
    Resource("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True),
    Resource("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True),
    Resource("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", False),
    Resource("Lease", "coordination.k8s.io/v1", "leases", True),
    Resource("Event", "events.k8s.io/v1", "events", True),
    Resource("Secret", "v1", "secrets", True),  # only the Prometheus token Secret (kdesched.kube.usage)
    # surge-first moves (kdesched.kube.owners): read one Deployment / ReplicaSet, write the Deployment's scale
    Resource("Deployment", "apps/v1", "deployments", True),
    Resource("ReplicaSet", "apps/v1", "replicasets", True),
)}


def resource_for(kind: str) -> Resource:
    try:
        return RESOURCES[kind]
    except KeyError:
        raise ValueError(f"unsupported kind {kind!r}; known kinds: {', '.join(sorted(RESOURCES))}") from None


T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class ListResult:
    """The items of a (paginated) LIST, each with ``kind`` filled in, and the list's resourceVersion."""

    items: list[dict[str, Any]]
    resource_version: str


@dataclass(frozen=True, slots=True)
class RequestStats:
    """API requests sent (every attempt, failed ones too) and response body bytes read."""

    requests: int = 0
    bytes_read: int = 0


def micro_time(when: datetime | None = None) -> str:
    """A ``metav1.MicroTime``: RFC 3339 in UTC with microseconds (``2026-01-02T03:04:05.000006Z``)."""
    when = (when or datetime.now(UTC)).astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_object_name(regarding: str) -> str:
    """An Event's name as client-go makes it: ``<object>.<unix nanos in hex>``."""
    return f"{regarding}.{time.time_ns():x}"


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


class KubeClient:
    """Raw-JSON access to the API server for the kinds kdesched reads and the verbs it uses."""

    def __init__(self, api_client: ApiClient, *, request_timeout: float | None = 60.0,
                 reporting_instance: str | None = None, impersonation: Impersonation | None = None,
                 limits: ClientLimits | None = None, read_retry: ReadRetry = ReadRetry(),
                 sleep: Callable[[float], None] = time.sleep, clock: ServerClock | None = None) -> None:
        """``limits``: the client-side rate limit and the eviction concurrency this client is sized
        for (None: no rate limit, one eviction at a time; the constructors below always pass one).
        Build ``api_client`` from a Configuration whose ``connection_pool_maxsize`` is at least
        ``limits.connections`` (:meth:`from_config` and :meth:`for_host` do). ``clock``: the API
        server's clock, fed by every answer (:mod:`kdesched.kube.clock`; shared with siblings)."""
        self.api_client = api_client
        self.clock = clock if clock is not None else ServerClock()
        self.limits = limits
        self.rate_limiter = TokenBucket(limits.qps, limits.burst) if limits is not None else None
        self.impersonation = impersonation
        self.request_timeout = request_timeout
        self.reporting_instance = reporting_instance or os.environ.get("POD_NAME") or socket.gethostname()
        self.read_retry = read_retry
        self._sleep = sleep
        self._lock = threading.Lock()
        self._requests = 0
        self._bytes = 0
        self._read_retries = 0

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, *,
                    limits: ClientLimits | None = None) -> KubeClient:
        """Explicit kubeconfig, else in-cluster, else $KUBECONFIG / ~/.kube/config (ConfigError if none).

        ``limits`` None: ``$KDESCHED_KUBE_API_QPS`` / ``_BURST`` / ``$KDESCHED_MAX_CONCURRENT_EVICTIONS``,
        else the defaults (:mod:`kdesched.kube.config`); so the functions pick them up from their env."""
        limits = limits if limits is not None else limits_from_env()
        configuration = load_configuration(kubeconfig, context)
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, limits.connections)
        return cls(ApiClient(configuration=configuration), impersonation=load_impersonation(kubeconfig, context),
                   limits=limits)

    @classmethod
    def for_host(cls, url: str, *, request_timeout: float | None = 10.0,
                 limits: ClientLimits | None = None, read_retry: ReadRetry = ReadRetry(),
                 sleep: Callable[[float], None] = time.sleep) -> KubeClient:
        """Plain HTTP, no auth (tests against the in-repo fake API server). Without ``limits``: no
        rate limit, one eviction at a time (tests are not slowed by a bucket they do not test)."""
        configuration = host_configuration(url)
        if limits is not None:
            configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                        limits.connections)
        return cls(ApiClient(configuration=configuration), request_timeout=request_timeout,
                   reporting_instance="kdesched-test", limits=limits, read_retry=read_retry, sleep=sleep)

    @property
    def max_concurrent_evictions(self) -> int:
        """How many evictions an executor on this client may have in flight (1 without limits)."""
        return self.limits.max_concurrent_evictions if self.limits is not None else 1

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

    def _retry_read(self, what: str, call: Callable[[], T], retry: ReadRetry | None = None) -> T:
        """``call()`` (one read request), retried by :func:`is_transient` within :class:`ReadRetry`
        (``retry``, else the client's)."""
        r = retry if retry is not None else self.read_retry
        if r.max_attempts <= 1:
            return call()

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            with self._lock:
                self._read_retries += 1
            log.info("%s: attempt %d/%d failed (%s); retrying in %.2fs", what, state.attempt_number,
                     r.max_attempts, exc, state.upcoming_sleep)

        retrying = Retrying(
            retry=retry_if_exception(lambda exc: is_transient(exc, read=True)),
            stop=stop_after_attempt(r.max_attempts) | StopAfterBudget(r.max_total_seconds),
            wait=WaitHonouringRetryAfter(r.initial_backoff_seconds, r.max_backoff_seconds, r.max_total_seconds,
                                         r.max_retry_after_seconds),
            sleep=self._sleep, before_sleep=before_sleep, reraise=True)
        return retrying(call)

    @property
    def stats(self) -> RequestStats:
        with self._lock:
            return RequestStats(self._requests, self._bytes)

    def reset_stats(self) -> None:
        with self._lock:
            self._requests = 0
            self._bytes = 0

    def _count(self, requests: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            self._requests += requests
            self._bytes += nbytes

    # -- transport -------------------------------------------------------------------------------
    def _send(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Mapping[str, Any] | None = None, timeout: Any = None,
              content_type: str = "application/json") -> Any:
        """Send one request; return the unread response (a 2xx) or raise the typed error."""
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
        if self.rate_limiter is not None:
            TRAFFIC.waited(self.rate_limiter.acquire())
        self._count(requests=1)
        sent_at = time.monotonic()  # the Date of the answer: the API server's clock (kube.clock)
        try:
            resp = self.api_client.call_api(method, url, sent, serialized, post_params,
                                            _request_timeout=timeout if timeout is not None else self.request_timeout)
        except ApiException as exc:
            self.clock.observe(exc.headers, sent_at, time.monotonic())
            TRAFFIC.request(method, exc.status or "error")
            raise error_from_api_exception(exc) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            TRAFFIC.request(method, "error")
            raise unavailable_from(exc) from None
        self.clock.observe(resp.headers, sent_at, time.monotonic())
        TRAFFIC.request(method, resp.status)
        if not 200 <= resp.status <= 299:
            data = self._read(resp)
            raise error_from_response(resp.status, str(resp.reason or ""), data, resp.headers)
        return resp

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

    # -- reads -----------------------------------------------------------------------------------
    def list_raw(self, kind: str, *, namespace: str | None = None, field_selector: str | None = None,
                 label_selector: str | None = None, page_size: int = 500) -> ListResult:
        """All objects of ``kind`` (in ``namespace``, or cluster-wide), paginated with limit/continue.

        The items of a LIST carry no kind/apiVersion; both are filled in. The resourceVersion is the
        first page's (every page of a continued list is served from the same snapshot).
        """
        items, resource_version = self._list(kind, namespace, field_selector, label_selector, page_size, False)
        return ListResult(items, resource_version)

    def list_for_snapshot(self, kind: str, *, field_selector: str | None = None, page_size: int = 500,
                          from_cache: bool = False) -> list[Pod | dict[str, Any]]:
        """What :meth:`list_raw` lists, for ``Snapshot.from_objects``: Pods come out as records,
        decoded by msgspec into only the fields kdesched reads (:mod:`kdesched.model.fastload`);
        any pod or page that path does not take is decoded exactly as :meth:`list_raw` does.

        ``from_cache``: ask with ``resourceVersion=0`` ("any version"), which the API server answers
        from its watch cache in one response (it ignores ``limit`` then) instead of paging through
        etcd: what client-go informers do for their first LIST. The list may be slightly stale (see
        docs/cli.md); an eviction's uid precondition still protects the pod that was judged."""
        return self._list(kind, None, field_selector, None, page_size, kind == "Pod",
                          resource_version="0" if from_cache else None)[0]

    def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
        """The pods of one namespace that match ``label_selector``, as records (one workload's pods)."""
        items = self._list("Pod", namespace, None, label_selector, 500, True)[0]
        return [p if isinstance(p, Pod) else Pod.from_api(p) for p in items]

    def list_for_cache(self, kind: str, *, page_size: int = 500) -> tuple[list[Pod | dict[str, Any]], str]:
        """:meth:`list_for_snapshot` plus the list's resourceVersion (what a watch starts from):
        the watch cache (:mod:`kdesched.kube.cache`) lists each kind through this once."""
        return self._list(kind, None, None, None, page_size, kind == "Pod")

    def count_objects(self, kind: str) -> int | None:
        """How many objects of ``kind`` exist (cluster-wide), from one LIST of a single object and
        the list's ``remainingItemCount``; None when the server does not say (it may omit the
        count, e.g. for some selectors or an older server)."""
        res = resource_for(kind)
        path = res.path(None)
        items, meta = self._retry_read(f"LIST {path}", lambda: self._list_page(
            path, [("limit", "1")], res.kind, res.group_version, False))
        if not meta.get("continue"):
            return len(items)
        remaining = meta.get("remainingItemCount")
        if isinstance(remaining, int) and not isinstance(remaining, bool) and remaining >= 0:
            return len(items) + remaining
        return None

    def list_pages(self, kind: str, *, page_size: int = 500) -> Iterator[list[dict[str, Any]]]:
        """The pages of a LIST of ``kind`` (cluster-wide), one request each, read only as far as the
        caller iterates: for a question the first few objects usually answer (a node-scoped run
        asking whether two Ready nodes exist) without reading the whole list."""
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        res = resource_for(kind)
        token: str | None = None
        while True:
            query = [("limit", str(page_size))] + ([("continue", token)] if token else [])
            path = res.path(None)
            items, meta = self._retry_read(f"LIST {path}", functools.partial(
                self._list_page, path, query, res.kind, res.group_version, False))
            yield items
            token = meta.get("continue") or None
            if not token:
                return

    def sibling(self, *, pool_size: int | None = None) -> KubeClient:
        """A new client to the same server with the same credentials and the same :attr:`clock`, its
        own connection pool and its own request counters (the watch cache holds one long-lived watch
        per kind; it must not take the run's pooled connections, and its traffic is reported separately)."""
        import copy

        configuration = copy.deepcopy(self.api_client.configuration)
        if pool_size is not None:
            configuration.connection_pool_maxsize = max(int(pool_size), 1)
        return KubeClient(ApiClient(configuration=configuration), request_timeout=self.request_timeout,
                          reporting_instance=self.reporting_instance, impersonation=self.impersonation,
                          read_retry=self.read_retry, sleep=self._sleep, clock=self.clock)

    def _list(self, kind: str, namespace: str | None, field_selector: str | None, label_selector: str | None,
              page_size: int, fast: bool, resource_version: str | None = None) -> tuple[list[Any], str]:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        res = resource_for(kind)
        path = res.path(namespace)
        restarts = 0
        while True:
            items: list[Any] = []
            list_rv = ""
            token: str | None = None
            try:
                while True:
                    query = [("limit", str(page_size))]
                    if resource_version is not None and not token:
                        query.append(("resourceVersion", resource_version))
                    if field_selector:
                        query.append(("fieldSelector", field_selector))
                    if label_selector:
                        query.append(("labelSelector", label_selector))
                    if token:
                        query.append(("continue", token))
                    page_items, meta = self._retry_read(f"LIST {path}", functools.partial(
                        self._list_page, path, query, res.kind, res.group_version, fast))
                    items.extend(page_items)
                    if not list_rv:
                        list_rv = str(meta.get("resourceVersion") or "")
                    token = meta.get("continue") or None
                    if not token:
                        return items, list_rv
            except Gone as exc:
                if token is None or restarts >= self.read_retry.max_list_restarts:
                    raise
                restarts += 1
                with self._lock:
                    self._read_retries += 1
                log.info("LIST %s: the continue token expired (%s); listing again from the first page (%d/%d)",
                         path, exc.message or exc, restarts, self.read_retry.max_list_restarts)

    def _list_page(self, path: str, query: list[tuple[str, str]], kind: str, api_version: str,
                   fast: bool) -> tuple[list[Any], dict[str, Any]]:
        """One LIST page: its items (dicts with kind and apiVersion filled in, non-objects dropped;
        with ``fast``, Pods as records where msgspec takes them) and the list's metadata."""
        resp = self._send("GET", path, query=query)
        data = self._read(resp)
        decoded = decode_list_page(data, kind, api_version) if fast else None
        if decoded is not None:
            return decoded
        page = self._parse(resp, "GET", path, data)
        items: list[Any] = []
        for item in page.get("items") or ():
            if isinstance(item, dict):
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", api_version)
                items.append(item)
        return items, page.get("metadata") or {}

    def get_raw(self, kind: str, name: str, namespace: str | None = None, *,
                retry: ReadRetry | None = None) -> dict[str, Any] | None:
        """One object, or None when it does not exist. ``retry``: this read's bounds instead of the
        client's (a Lease renewal must not wait past its renew deadline)."""
        res = resource_for(kind)
        path = res.path(namespace, name)
        try:
            obj = self._retry_read(f"GET {path}", lambda: self._json("GET", path), retry)
        except NotFound:
            return None
        obj.setdefault("kind", res.kind)
        obj.setdefault("apiVersion", res.group_version)
        return obj

    def get_path(self, path: str, *, retry: ReadRetry | None = None) -> dict[str, Any]:
        """GET an API path that is no kind of :data:`RESOURCES` (``/apis/metrics.k8s.io/...``):
        the JSON object, or the typed error (NotFound when the group is not served)."""
        return self._retry_read(f"GET {path}", lambda: self._json("GET", path), retry)

    # -- writes ----------------------------------------------------------------------------------
    def create_raw(self, kind: str, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """POST ``obj``; Conflict if an object of that name exists."""
        res = resource_for(kind)
        ns = namespace if namespace is not None else (obj.get("metadata") or {}).get("namespace")
        body = {"apiVersion": res.group_version, "kind": res.kind, **obj}
        return self._json("POST", res.path(ns if res.namespaced else None), body=body)

    def replace_raw(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``obj``; with ``metadata.resourceVersion`` set, Conflict if it changed meanwhile."""
        res = resource_for(kind)
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{kind}: metadata.name is required to replace an object")
        body = {"apiVersion": res.group_version, "kind": res.kind, **obj}
        return self._json("PUT", res.path(meta.get("namespace") if res.namespaced else None, name), body=body)

    def merge_patch(self, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any], *,
                    subresource: str | None = None) -> dict[str, Any]:
        """PATCH one object with a JSON merge patch (RFC 7386: ``null`` removes a key). A
        ``metadata.uid`` in the patch is a precondition: Conflict if the object is another one."""
        res = resource_for(kind)
        path = res.path(namespace if res.namespaced else None, name, subresource)
        return self._json("PATCH", path, body=patch, content_type="application/merge-patch+json")

    def get_subresource(self, kind: str, name: str, namespace: str, subresource: str) -> dict[str, Any] | None:
        """GET ``.../<name>/<subresource>`` (a Deployment's ``scale``); None when the object does not exist."""
        path = resource_for(kind).path(namespace, name, subresource)
        try:
            return self._retry_read(f"GET {path}", lambda: self._json("GET", path))
        except NotFound:
            return None

    def replace_subresource(self, kind: str, name: str, namespace: str, subresource: str,
                            obj: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``.../<name>/<subresource>``; with ``metadata.resourceVersion`` set, Conflict if the
        object changed meanwhile."""
        return self._json("PUT", resource_for(kind).path(namespace, name, subresource), body=obj)

    def delete_raw(self, kind: str, name: str, namespace: str | None = None, *, resource_version: str = "") -> None:
        """DELETE one object; with ``resource_version``, Conflict if it changed meanwhile. NotFound if absent."""
        res = resource_for(kind)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if resource_version:
            body["preconditions"] = {"resourceVersion": resource_version}
        self._json("DELETE", res.path(namespace if res.namespaced else None, name), body=body)

    def evict_pod(self, namespace: str, name: str, *, uid: str | None, grace_period_seconds: int | None,
                  annotations: Mapping[str, str], timeout: float | None = None) -> None:
        """POST a policy/v1 Eviction; the API server enforces PDBs (429) and the uid precondition (409).

        The uid precondition makes sure a same-named replacement (a StatefulSet pod) is never
        evicted in place of the pod that was judged.
        """
        delete_options: dict[str, Any] = {}
        if grace_period_seconds is not None:
            delete_options["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            delete_options["preconditions"] = {"uid": uid}
        body: dict[str, Any] = {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace, **({"annotations": dict(annotations)} if annotations else {})},
        }
        if delete_options:
            body["deleteOptions"] = delete_options
        path = RESOURCES["Pod"].path(namespace, name, "eviction")
        if timeout is None:
            self._json("POST", path, body=body)
            return
        # bounded on both sides: the API server abandons the request at ``timeout`` too (its
        # request deadline, ?timeout=), so an eviction whose answer this client stopped waiting for
        # cannot land later (an admission's deadline, kdesched.evictor.execute)
        seconds = max(1, int(timeout))
        resp = self._send("POST", path, query=[("timeout", f"{seconds}s")], body=body, timeout=seconds + 0.5)
        self._read(resp)

    def create_event(self, *, namespace: str, name: str, uid: str | None = None, reason: str, note: str,
                     event_type: str = "Normal", action: str = EVENT_ACTION, kind: str = "Pod",
                     api_version: str = "v1", now: datetime | None = None) -> bool:
        """Post an events.k8s.io/v1 Event regarding an object. Never raises: an event that cannot be
        posted is logged (an event must not fail an eviction). True if it was posted."""
        try:
            self.post_event(namespace=namespace, name=name, uid=uid, reason=reason, note=note,
                            event_type=event_type, action=action, kind=kind, api_version=api_version, now=now)
        except ApiError as exc:
            log.warning("could not post event %s for %s %s/%s: %s", reason, kind, namespace, name, exc)
            return False
        return True

    def post_event(self, *, namespace: str, name: str, uid: str | None = None, reason: str, note: str,
                   event_type: str = "Normal", action: str = EVENT_ACTION, kind: str = "Pod",
                   api_version: str = "v1", now: datetime | None = None, event_name: str | None = None) -> None:
        """:meth:`create_event` that raises the typed error (one attempt; the evictor retries it).
        ``event_name``: the Event's name, kept by a caller that retries, so an Event whose answer was
        lost is not posted twice (the retry gets 409 AlreadyExists instead)."""
        when = now or datetime.fromtimestamp(self.clock.now(), UTC)  # the API server's time, as Events' own
        regarding: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name}
        known = RESOURCES.get(kind)
        if known is not None and not known.namespaced:
            del regarding["namespace"]  # a Node's Event lives in the namespace given; the Node has none
        if uid:
            regarding["uid"] = uid
        event = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            # client-go names events "<object>.<unix nanos in hex>"
            "metadata": {"name": event_name or event_object_name(name), "namespace": namespace},
            "eventTime": micro_time(when),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.reporting_instance[:128],
            "action": action, "reason": reason[:128], "note": note[:MAX_EVENT_NOTE], "type": event_type,
            "regarding": regarding,
        }
        self._json("POST", RESOURCES["Event"].path(namespace), body=event)

    # -- watch -----------------------------------------------------------------------------------
    def watch_raw(self, kind: str, *, resource_version: str, timeout_seconds: int,
                  allow_bookmarks: bool = True, namespace: str | None = None,
                  field_selector: str | None = None, label_selector: str | None = None,
                  ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` changes after ``resource_version`` until the server ends the watch.

        Types: ADDED, MODIFIED, DELETED, BOOKMARK. A 410 (HTTP or an ``ERROR`` event) raises
        :class:`Gone`: the caller must re-list and watch from the new resourceVersion. The request is
        sent by this call (so HTTP errors raise here and the watch is open when it returns); the
        returned iterator reads the stream. Closing the iterator early drops the connection.
        """
        res = resource_for(kind)
        query = [("watch", "true"), ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(int(timeout_seconds)))]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if label_selector:
            query.append(("labelSelector", label_selector))
        # the server closes the stream after timeoutSeconds; the read timeout only catches a dead peer
        timeout = urllib3.Timeout(connect=10.0, read=float(timeout_seconds) + 30.0)
        resp = self._send("GET", res.path(namespace), query=query, timeout=timeout)
        return self._events(resp.response, res)

    def _events(self, raw: Any, res: Resource) -> Iterator[tuple[str, dict[str, Any]]]:
        finished = False
        try:
            for line in self._lines(raw):
                event = self._decode_event(line)
                if event is None:
                    continue
                etype, obj = event
                if etype == "ERROR":
                    code = obj.get("code")
                    status = code if isinstance(code, int) else 500
                    raise error_from_status(status, str(obj.get("reason") or ""), trim(str(obj.get("message") or "")),
                                            status_reason=str(obj.get("reason") or ""))
                if etype not in WATCH_EVENT_TYPES:
                    log.debug("ignoring watch event of type %r", etype)
                    continue
                obj.setdefault("kind", res.kind)
                obj.setdefault("apiVersion", res.group_version)
                yield etype, obj
            finished = True
        finally:
            if not finished:
                raw.close()  # unread stream data must never reach a pooled connection
            raw.release_conn()

    def _lines(self, raw: Any) -> Iterator[bytes]:
        buffer = b""
        try:
            for chunk in raw.stream(amt=None, decode_content=True):
                self._count(nbytes=len(chunk))
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield line
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise unavailable_from(exc) from None
        if buffer.strip():
            yield buffer

    @staticmethod
    def _decode_event(line: bytes) -> tuple[str, dict[str, Any]] | None:
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("ignoring a watch line that is not JSON: %s", trim(line.decode("utf-8", "replace"), 200))
            return None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            return None
        return str(event.get("type") or ""), event["object"]


__all__ = [
    "NO_READ_RETRY", "RESOURCES", "ApiError", "ClientLimits", "Gone", "KubeClient", "ListResult", "ReadRetry",
    "RequestStats", "Resource",
    "TokenBucket", "Unavailable",
    "event_object_name", "micro_time", "resource_for",
]

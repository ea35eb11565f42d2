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
``Date`` of every answer kube-apiserver makes itself (not an aggregated API's, such as
metrics.k8s.io) feeds :attr:`KubeClient.clock`, the API server's clock
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
either: the reflector re-lists and re-watches (:mod:`kdesched.kube.reflector`).

The client is built in layers, each class a role: :class:`~kdesched.kube.transport.Transport`
sends one request (rate limit, counters, clock, retries of reads, typed errors);
:class:`~kdesched.kube.verbs.ResourceClient` adds the generic verbs (get, list, create, replace,
patch, delete, watch, subresources) over typed resource descriptors
(:mod:`kdesched.kube.resources`); :class:`KubeClient` here adds how a client is made and the
kind-named methods the rest of kdesched calls, each a few lines over the verbs.
"""


from __future__ import annotations

import copy
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient

from kdesched.kube.clock import ServerClock
from kdesched.kube.config import (
    ClientLimits,
    Impersonation,
    host_configuration,
    limits_from_env,
    load_configuration,
    load_impersonation,
)
from kdesched.kube.deadline import Deadline
from kdesched.kube.errors import ApiError, Gone, Unavailable
from kdesched.kube.resources import (
    EVENT_ACTION,
    MAX_EVENT_NOTE,
    REPORTING_CONTROLLER,
    RESOURCES,
    Resource,
    event_body,
    event_object_name,
    eviction_body,
    micro_time,
    resource_for,
)
from kdesched.kube.transport import (
    DEFAULT_READ_RETRY,
    EVENTS,
    NO_READ_RETRY,
    ReadRetry,
    RequestStats,
    TokenBucket,
    lane,
)
from kdesched.kube.verbs import WATCH_EVENT_TYPES, ResourceClient
from kdesched.model.records import Pod

log = logging.getLogger("kdesched.kube")


def _at_version_retry(resource_version: str | None, page_size: int | None) -> ReadRetry | None:
    """The retry of a LIST at ``resource_version`` without a limit (a re-LIST from the API server's
    watch cache): one attempt. A v1.24 API server whose watch cache of the kind is behind that
    version waits 3 s for it, then answers 504 "Too large resource version" with Retry-After 1;
    retried within the client's read bounds that is up to half a minute before the caller falls
    back to a consistent read (a quiet kind's watch cache stays behind a version the etcd LIST
    gave). The caller (:meth:`kdesched.kube.reflector.ListWatch.list_at`) falls back at once, or
    backs off and asks again. None: the client's bounds."""
    return NO_READ_RETRY if resource_version not in (None, "", "0") and page_size is None else None


@dataclass(frozen=True, slots=True)
class ListResult:
    """The items of a (paginated) LIST, each with ``kind`` filled in, and the list's resourceVersion."""

    items: list[dict[str, Any]]
    resource_version: str


class KubeClient(ResourceClient):
    """Raw-JSON access to the API server for the kinds kdesched reads and the verbs it uses."""

    def __init__(self, api_client: ApiClient, *, request_timeout: float | None = 60.0,
                 reporting_instance: str | None = None, impersonation: Impersonation | None = None,
                 limits: ClientLimits | None = None, read_retry: ReadRetry = DEFAULT_READ_RETRY,
                 sleep: Callable[[float], None] = time.sleep, clock: ServerClock | None = None) -> None:
        """``limits``: the client-side rate limit and the eviction concurrency this client is sized
        for (None: no rate limit, one eviction at a time; the constructors below always pass one).
        Build ``api_client`` from a Configuration whose ``connection_pool_maxsize`` is at least
        ``limits.connections`` (:meth:`from_config` and :meth:`for_host` do). ``clock``: the API
        server's clock, fed by kube-apiserver's own answers (:mod:`kdesched.kube.clock`; shared with siblings)."""
        super().__init__(api_client, request_timeout=request_timeout, impersonation=impersonation, limits=limits,
                         read_retry=read_retry, sleep=sleep, clock=clock)
        self.reporting_instance = reporting_instance or os.environ.get("POD_NAME") or socket.gethostname()

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
                 limits: ClientLimits | None = None, read_retry: ReadRetry = DEFAULT_READ_RETRY,
                 sleep: Callable[[float], None] = time.sleep) -> KubeClient:
        """Plain HTTP, no auth (tests against the in-repo fake API server). Without ``limits``: no
        rate limit, one eviction at a time (tests are not slowed by a bucket they do not test)."""
        configuration = host_configuration(url)
        if limits is not None:
            configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                        limits.connections)
        return cls(ApiClient(configuration=configuration), request_timeout=request_timeout,
                   reporting_instance="kdesched-test", limits=limits, read_retry=read_retry, sleep=sleep)

    def sibling(self, *, pool_size: int | None = None, read_retry: ReadRetry | None = None,
                request_timeout: float | None = None) -> KubeClient:
        """A new client to the same server with the same credentials and the same :attr:`clock`, its
        own connection pool and its own request counters (the watch cache holds one long-lived watch
        per kind; it must not take the run's pooled connections, and its traffic is reported separately).
        ``read_retry`` and ``request_timeout``: other bounds than this client's (None: the same)."""
        configuration = copy.deepcopy(self.api_client.configuration)
        if pool_size is not None:
            configuration.connection_pool_maxsize = max(int(pool_size), 1)
        return KubeClient(ApiClient(configuration=configuration),
                          request_timeout=self.request_timeout if request_timeout is None else request_timeout,
                          reporting_instance=self.reporting_instance, impersonation=self.impersonation,
                          read_retry=self.read_retry if read_retry is None else read_retry, sleep=self._sleep,
                          clock=self.clock)

    @property
    def max_concurrent_evictions(self) -> int:
        """How many evictions an executor on this client may have in flight (1 without limits)."""
        return self.limits.max_concurrent_evictions if self.limits is not None else 1

    # -- reads -----------------------------------------------------------------------------------
    def list_raw(self, kind: str, *, namespace: str | None = None, field_selector: str | None = None,
                 label_selector: str | None = None, page_size: int | None = 500,
                 resource_version: str | None = None) -> ListResult:
        """All objects of ``kind`` (in ``namespace``, or cluster-wide), paginated with limit/continue.

        The items of a LIST carry no kind/apiVersion; both are filled in. The resourceVersion is the
        first page's (every page of a continued list is served from the same snapshot).
        ``resource_version`` and ``page_size`` None: a re-LIST from the API server's watch cache
        (:meth:`list_for_cache`).
        """
        items, list_rv = self.list_all(resource_for(kind), namespace=namespace, page_size=page_size,
                                       field_selector=field_selector, label_selector=label_selector,
                                       resource_version=resource_version,
                                       retry=_at_version_retry(resource_version, page_size))
        return ListResult(items, list_rv)

    def list_for_snapshot(self, kind: str, *, field_selector: str | None = None, page_size: int = 500,
                          from_cache: bool = False) -> list[Pod | dict[str, Any]]:
        """What :meth:`list_raw` lists, for ``Snapshot.from_objects``: Pods come out as records,
        decoded by msgspec into only the fields kdesched reads (:mod:`kdesched.model.fastload`);
        any pod or page that path does not take is decoded exactly as :meth:`list_raw` does.

        ``from_cache``: ask with ``resourceVersion=0`` ("any version"), which the API server answers
        from its watch cache in one response (it ignores ``limit`` then) instead of paging through
        etcd: what client-go informers do for their first LIST. The list may be slightly stale (see
        docs/cli.md); an eviction's uid precondition still protects the pod that was judged."""
        return self.list_all(resource_for(kind), field_selector=field_selector, page_size=page_size,
                             fast=kind == "Pod", resource_version="0" if from_cache else None)[0]

    def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
        """The pods of one namespace that match ``label_selector``, as records (one workload's pods)."""
        items = self.list_all(RESOURCES["Pod"], namespace=namespace, label_selector=label_selector, fast=True)[0]
        return [p if isinstance(p, Pod) else Pod.from_api(p) for p in items]

    def list_for_cache(self, kind: str, *, page_size: int | None = 500, resource_version: str | None = None
                       ) -> tuple[list[Pod | dict[str, Any]], str]:
        """:meth:`list_for_snapshot` plus the list's resourceVersion (what a watch starts from): how
        the watch cache (:mod:`kdesched.kube.cache`) lists a kind. By default a consistent read
        from etcd in pages of ``page_size`` (the first LIST, and after a 410). A re-LIST after a
        failed watch asks ``resource_version`` (the last one seen) with ``page_size`` None, as
        client-go's reflector: a v1.24 API server answers that from its watch cache, in one
        response, at least as fresh as that version (a ``limit`` would send it to etcd). That
        LIST is one attempt (:func:`_at_version_retry`)."""
        return self.list_all(resource_for(kind), page_size=page_size, fast=kind == "Pod",
                             resource_version=resource_version, retry=_at_version_retry(resource_version, page_size))

    def count_objects(self, kind: str) -> int | None:
        """How many objects of ``kind`` exist (cluster-wide), from one LIST of a single object and
        the list's ``remainingItemCount``; None when the server does not say (it may omit the
        count, e.g. for some selectors or an older server)."""
        items, meta = next(self.pages(resource_for(kind), page_size=1))
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
        for items, _ in self.pages(resource_for(kind), page_size=page_size):
            yield items

    def get_raw(self, kind: str, name: str, namespace: str | None = None, *,
                retry: ReadRetry | None = None) -> dict[str, Any] | None:
        """One object, or None when it does not exist. ``retry``: this read's bounds instead of the
        client's (a Lease renewal must not wait past its renew deadline)."""
        return self.get(resource_for(kind), name, namespace, retry=retry)

    def get_path(self, path: str, *, retry: ReadRetry | None = None) -> dict[str, Any]:
        """GET an API path that is no kind of :data:`RESOURCES` (``/apis/metrics.k8s.io/...``):
        the JSON object, or the typed error (NotFound when the group is not served)."""
        return self._retry_read(f"GET {path}", lambda: self._json("GET", path), retry)

    def get_subresource(self, kind: str, name: str, namespace: str, subresource: str) -> dict[str, Any] | None:
        """GET ``.../<name>/<subresource>`` (a Deployment's ``scale``); None when the object does not exist."""
        return self.get(resource_for(kind), name, namespace, subresource=subresource)

    # -- writes ----------------------------------------------------------------------------------
    def create_raw(self, kind: str, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """POST ``obj``; Conflict if an object of that name exists."""
        res = resource_for(kind)
        ns = namespace if namespace is not None else (obj.get("metadata") or {}).get("namespace")
        return self.create(res, res.body(obj), res.scoped(ns))

    def replace_raw(self, kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``obj``; with ``metadata.resourceVersion`` set, Conflict if it changed meanwhile."""
        res = resource_for(kind)
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{kind}: metadata.name is required to replace an object")
        return self.replace(res, name, res.scoped(meta.get("namespace")), res.body(obj))

    def merge_patch(self, kind: str, name: str, namespace: str | None, patch: Mapping[str, Any], *,
                    subresource: str | None = None) -> dict[str, Any]:
        """PATCH one object with a JSON merge patch (RFC 7386: ``null`` removes a key). A
        ``metadata.uid`` in the patch is a precondition: Conflict if the object is another one."""
        res = resource_for(kind)
        return self.patch(res, name, res.scoped(namespace), patch, subresource=subresource)

    def replace_subresource(self, kind: str, name: str, namespace: str, subresource: str,
                            obj: Mapping[str, Any], *, field_manager: str = "") -> dict[str, Any]:
        """PUT ``.../<name>/<subresource>``; with ``metadata.resourceVersion`` set, Conflict if the
        object changed meanwhile. ``field_manager``: recorded in managedFields for what it changes."""
        return self.replace(resource_for(kind), name, namespace, obj, subresource=subresource,
                            field_manager=field_manager)

    def delete_raw(self, kind: str, name: str, namespace: str | None = None, *, resource_version: str = "") -> None:
        """DELETE one object; with ``resource_version``, Conflict if it changed meanwhile. NotFound if absent."""
        res = resource_for(kind)
        self.delete(res, name, res.scoped(namespace), resource_version=resource_version)

    def evict_pod(self, namespace: str, name: str, *, uid: str | None, grace_period_seconds: int | None,
                  annotations: Mapping[str, str], timeout: float | None = None,
                  deadline: Deadline | None = None) -> None:
        """POST a policy/v1 Eviction; the API server enforces PDBs (429) and the uid precondition (409).

        The uid precondition makes sure a same-named replacement (a StatefulSet pod) is never
        evicted in place of the pod that was judged. ``timeout``: bounded on both sides (the
        API server's ``?timeout=`` too), so an eviction whose answer this client stopped waiting for
        cannot land later. ``deadline``: an admission's (kdesched.evictor.execute); the ``?timeout=``
        is what is left of it when the request goes out, after the client-side rate limit's wait,
        and :class:`~kdesched.kube.deadline.DeadlinePassed` (nothing sent) when too little is left.
        """
        body = eviction_body(namespace, name, uid=uid, grace_period_seconds=grace_period_seconds,
                             annotations=annotations)
        self.create(RESOURCES["Pod"], body, namespace, name=name, subresource="eviction", timeout=timeout,
                    deadline=deadline)

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
        event = event_body(namespace=namespace, name=name, uid=uid, reason=reason, note=note, event_type=event_type,
                           action=action, kind=kind, api_version=api_version, when=when,
                           reporting_instance=self.reporting_instance, event_name=event_name)
        with lane(EVENTS):  # best effort: never ahead of an eviction or a ledger write (kube.transport)
            self.create(RESOURCES["Event"], event, namespace)

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
        return self.watch(resource_for(kind), resource_version=resource_version, timeout_seconds=timeout_seconds,
                          allow_bookmarks=allow_bookmarks, namespace=namespace, field_selector=field_selector,
                          label_selector=label_selector)


__all__ = [
    "EVENT_ACTION", "MAX_EVENT_NOTE", "NO_READ_RETRY", "REPORTING_CONTROLLER", "RESOURCES", "WATCH_EVENT_TYPES",
    "ApiError", "ClientLimits", "Gone", "KubeClient", "ListResult", "ReadRetry", "RequestStats", "Resource",
    "TokenBucket", "Unavailable", "event_object_name", "micro_time", "resource_for",
]

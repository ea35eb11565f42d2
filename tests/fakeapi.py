"""A small in-repo fake Kubernetes API server for HTTP-level tests of the kube layer.

Why: the kube layer must be tested through the real ``kubernetes`` client over real HTTP (paths,
query strings, Status bodies, chunked watch streams), and the behaviour a descheduler depends on
is exactly what existing fakes skip: ``fieldSelector``
``spec.nodeName``, label selectors, the eviction subresource with PDB 429s and uid preconditions,
Lease optimistic concurrency and watch 410s. This implements only those endpoints, in memory, on
127.0.0.1 with a random port, plus a request journal and per-request scripted failures: status
codes (with ``Retry-After``), and :class:`Fault` for a Status with a chosen message and details, a
dropped connection, a delay, or "act then drop" (the request is carried out, its answer is lost).
"""

from __future__ import annotations

import base64
import bisect
import copy
import email.utils
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl, unquote, urlsplit

from kdesched.model.errors import ModelError
from kdesched.model.selectors import LabelSelector, parse_selector

# (group/version, plural) -> (kind, namespaced): written out here, independent of the client's table
KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "nodes"): ("Node", False),
    ("v1", "pods"): ("Pod", True),
    ("v1", "namespaces"): ("Namespace", False),
    ("v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True),
    ("policy/v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True),
    ("scheduling.k8s.io/v1", "priorityclasses"): ("PriorityClass", False),
    ("coordination.k8s.io/v1", "leases"): ("Lease", True),
    ("events.k8s.io/v1", "events"): ("Event", True),
    ("v1", "secrets"): ("Secret", True),
    # metrics-server's aggregated API (read-only here); ``metrics_served = False`` answers 404 for it
    ("metrics.k8s.io/v1beta1", "nodes"): ("NodeMetrics", False),
    ("metrics.k8s.io/v1beta1", "pods"): ("PodMetrics", True),
}
METRICS_GROUP = "metrics.k8s.io/v1beta1"
API_VERSION = {kind: gv for (gv, _), (kind, _) in KINDS.items()}
PLURAL = {kind: plural for (_, plural), (kind, _) in KINDS.items()}
FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace"),
          "spec.nodeName": ("spec", "nodeName"), "status.phase": ("status", "phase")}
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}

Key = tuple[str, str]  # (namespace or "", name)
STOP_JOIN_SECONDS = 5.0  # stop(): the most it waits for the server's threads to end


@dataclass(frozen=True)
class Fault:
    """One scripted answer beyond a bare status code.

    ``code``: answer with this Status (``message``, ``details``, ``retry_after``); 0 = carry the
    request out normally. ``drop``: close the connection without an answer; with ``after`` the
    request is carried out first (the answer is lost). ``after`` with a ``code``: carried out, then
    answered with that Status. ``delay``: seconds to wait first."""

    code: int = 0
    message: str = ""
    retry_after: float | None = None
    details: dict[str, Any] | None = None
    drop: bool = False
    after: bool = False
    delay: float = 0.0


DROP = Fault(drop=True)
ACT_THEN_DROP = Fault(drop=True, after=True)


class Dropped(Exception):
    """Raised by the fake to close a connection without an answer."""


@dataclass(frozen=True)
class Request:
    """One journal entry."""

    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


class Reply(Exception):
    """Raised by a route to answer with a Status (or any JSON) at once."""

    def __init__(self, code: int, message: str = "", body: Any = None, retry_after: float | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.body, self.retry_after = code, body, retry_after
        if body is None and code >= 400:
            self.body = status_body(code, message, details)


def _seconds(text: str) -> float | None:
    """A ``?timeout=`` value (``5s``, ``1m``) in seconds, None when absent or not understood."""
    units = {"s": 1, "m": 60, "h": 3600}
    if text and text[-1] in units and text[:-1].replace(".", "", 1).isdigit():
        return float(text[:-1]) * units[text[-1]]
    return None


def status_body(code: int, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": REASONS.get(code, "Unknown"), "code": code}
    if details:
        body["details"] = details
    return body


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta["name"])


class FakeApiServer:
    """In-memory objects per kind behind the few API endpoints kdesched calls."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.objects: dict[str, dict[Key, dict[str, Any]]] = {kind: {} for kind, _ in KINDS.values()}
        self._sorted: dict[str, list[Key]] = {}  # kind -> its keys in LIST order; dropped when a key comes or goes
        self.rv = 1
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, kind, type, object)
        self.compacted_rv = 0
        self.journal: list[Request] = []
        self.scripts: dict[tuple[str, str], deque[int | tuple[int, float] | Fault]] = {}
        self.report_remaining = True  # False: LIST pages omit remainingItemCount (as the server may)
        self.metrics_served = True  # False: metrics.k8s.io is not served (no metrics-server): 404
        # every answer carries Date (RFC 7231), as the real API server's: this server's clock is the
        # local one plus clock_offset seconds (a server whose clock differs from the client's)
        self.clock_offset = 0.0
        self._bookmarks = 0
        # eviction concurrency: how many eviction requests are being handled at once, the most seen,
        # and an optional gate that holds them until that many are in flight (see gather_evictions)
        self.evictions_in_flight = 0
        self.max_evictions_in_flight = 0
        self._gather = 0
        self._gather_timeout = 0.0
        self._uids = itertools.count(1)
        self._stopping = False
        self._sockets: set[socket.socket] = set()
        self._handlers: set[threading.Thread] = set()  # request threads; stop() joins them
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        server = self

        class Handler(_Handler):
            fake = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-api", daemon=True)
        self._thread.start()
        return self

    def cut_connections(self) -> None:
        """Drop every open connection (the watch streams among them); the server keeps listening."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        """Stop listening and cut every open connection (kept-alive ones and watch streams)."""
        if self._httpd is None:
            return
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            for sock in list(self._sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            threads = [*self._handlers, *([self._thread] if self._thread is not None else [])]
        # the handlers' threads are daemons, which server_close() does not join: one still serving
        # (a scripted delay, a watch) would otherwise run on into a later test. Their waits end at
        # _stopping and their sockets are cut, so this takes milliseconds.
        deadline = time.monotonic() + STOP_JOIN_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig(self, path: str | Path, namespace: str | None = None) -> str:
        """Write a kubeconfig for this server (a token user; ``namespace``: the context's) to ``path``."""
        context: dict[str, str] = {"cluster": "fake", "user": "u", **({"namespace": namespace} if namespace else {})}
        Path(path).write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "contexts": [{"name": "fake", "context": context}],
            "users": [{"name": "u", "user": {"token": "t"}}]}))
        return str(path)

    # -- test helpers ----------------------------------------------------------------------------
    def add(self, *objs: dict[str, Any]) -> None:
        """Store objects (ADDED for watchers); uid, resourceVersion and creationTimestamp are filled."""
        with self._lock:
            for obj in objs:
                self._store(copy.deepcopy(obj), "ADDED")

    def update(self, obj: dict[str, Any]) -> None:
        with self._lock:
            kind = obj["kind"]
            if key_of(obj) not in self.objects[kind]:
                raise KeyError(f"{kind} {key_of(obj)} does not exist")
            self._store(copy.deepcopy(obj), "MODIFIED")

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        with self._lock:
            self._remove(kind, (namespace, name))

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            obj = self.objects[kind].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self.objects[kind].items())]

    def compact(self) -> None:
        """Forget the change history: watches and continue tokens from before now get 410 Gone."""
        with self._lock:
            self.history.clear()
            self.compacted_rv = self.rv

    def send_bookmark(self) -> None:
        """Make every open watch that allows bookmarks send a BOOKMARK now."""
        with self._lock:
            self._bookmarks += 1
            self._lock.notify_all()

    def script(self, method: str, path: str, responses: Iterable[int | tuple[int, float] | Fault]) -> None:
        """Answer the next requests to ``method path`` with these codes in order (a 2xx = behave
        normally; ``(429, 3)`` adds ``Retry-After: 3``; a :class:`Fault` for the rest); afterwards
        behave normally."""
        with self._lock:
            self.scripts.setdefault((method.upper(), path), deque()).extend(responses)

    def script_eviction(self, pod_key: str, responses: Iterable[int | tuple[int, float] | Fault]) -> None:
        namespace, name = pod_key.split("/", 1)
        self.script("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", responses)

    def gather_evictions(self, count: int, timeout: float = 10.0) -> None:
        """Hold eviction requests until ``count`` are in flight at once (or ``timeout`` passed for
        the waiting ones), then let them all through; only once. Proves overlap without timing: a
        client that sends one at a time never gets past ``max_evictions_in_flight == 1``."""
        with self._lock:
            self._gather, self._gather_timeout = count, timeout

    def release_evictions(self) -> None:
        """Let the evictions held by :meth:`gather_evictions` through now."""
        with self._lock:
            self._gather = 0
            self._lock.notify_all()

    def _eviction_started(self) -> None:
        with self._lock:
            self.evictions_in_flight += 1
            self.max_evictions_in_flight = max(self.max_evictions_in_flight, self.evictions_in_flight)
            self._lock.notify_all()
            deadline = time.monotonic() + self._gather_timeout
            while self._gather and self.evictions_in_flight < self._gather and not self._stopping:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            self._gather = 0  # gathered (or given up): from now on every eviction goes straight through

    def _eviction_finished(self) -> None:
        with self._lock:
            self.evictions_in_flight -= 1

    def requests(self, method: str | None = None, path: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.journal
                    if (method is None or r.method == method) and (path is None or r.path == path)]

    def clear_journal(self) -> None:
        with self._lock:
            self.journal.clear()

    # -- storage (callers hold the lock) ---------------------------------------------------------
    def _store(self, obj: dict[str, Any], etype: str) -> dict[str, Any]:
        kind = obj["kind"]
        obj.setdefault("apiVersion", API_VERSION[kind])
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uids):05d}"
        old = self.objects[kind].get(key_of(obj))
        meta.setdefault("uid", old["metadata"]["uid"] if old else f"fake-uid-{next(self._uids)}")
        meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        if old is None:
            self._sorted.pop(kind, None)
        self.objects[kind][key_of(obj)] = obj
        self.history.append((self.rv, kind, etype, copy.deepcopy(obj)))
        self._lock.notify_all()
        return obj

    def _remove(self, kind: str, key: Key) -> dict[str, Any]:
        obj = self.objects[kind].pop(key)
        self._sorted.pop(kind, None)
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, "DELETED", copy.deepcopy(obj)))
        self._lock.notify_all()
        return obj

    # -- request handling ------------------------------------------------------------------------
    def route(self, method: str, path: str) -> tuple[str, str, str, str, str]:
        """``(kind, namespace, name, subresource, group_version)`` of an API path, or a 404 Reply."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            gv, rest = "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise Reply(404, f"the server could not find the requested resource ({path})")
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or (gv, rest[0]) not in KINDS or len(rest) > 3:
            raise Reply(404, f"the server could not find the requested resource ({path})")
        kind, namespaced = KINDS[(gv, rest[0])]
        if namespace and not namespaced:
            raise Reply(404, f"the server could not find the requested resource ({path})")
        return kind, namespace, rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else "", gv

    def admit(self, method: str, path: str, query: dict[str, str], body: Any,
              headers: dict[str, str] | None = None) -> Fault | None:
        """Journal the request and play the next scripted answer for it, if any: a status code is
        raised as a Reply; a :class:`Fault` that drops or delays is returned for the caller."""
        with self._lock:
            self.journal.append(Request(method, path, dict(query), body, dict(headers or {})))
            scripted = self.scripts.get((method, path))
            if not scripted:
                return None
            entry = scripted.popleft()
        if isinstance(entry, Fault):
            limit = _seconds(query.get("timeout", ""))
            if entry.delay and limit is not None and entry.delay > limit:
                # the real API server abandons a request at its ?timeout= (its request deadline):
                # 504, and nothing carried out
                self._pause(limit)
                raise Reply(504, f"Timeout: request did not complete within the requested timeout - context "
                                 f"deadline exceeded ({limit:g}s)")
            if entry.delay:
                self._pause(entry.delay)
            if entry.drop and not entry.after:
                raise Dropped
            if entry.code >= 300 and not entry.after:
                raise Reply(entry.code, entry.message or f"scripted failure {entry.code}",
                            retry_after=entry.retry_after, details=entry.details)
            return entry if entry.after else None
        code, retry_after = entry if isinstance(entry, tuple) else (entry, None)
        if code >= 300:
            raise Reply(code, f"scripted failure {code}", retry_after=retry_after)
        return None

    def _pause(self, seconds: float) -> None:
        """A scripted delay that stop() cuts short: the request is then dropped, not carried out."""
        with self._lock:
            if self._lock.wait_for(lambda: self._stopping, timeout=seconds):
                raise Dropped

    def handle(self, method: str, path: str, query: dict[str, str], body: Any,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
        fault = self.admit(method, path, query, body, headers)
        result = self._handle(method, path, query, body)
        if fault is not None and fault.after:
            if fault.code >= 300:  # carried out, then answered with an error (a 500 after etcd wrote)
                raise Reply(fault.code, fault.message or f"scripted failure {fault.code}",
                            retry_after=fault.retry_after, details=fault.details)
            raise Dropped  # carried out; the answer is lost
        return result

    def _handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self._lock:
            kind, namespace, name, sub, gv = self.route(method, path)
            if gv == METRICS_GROUP and not self.metrics_served:
                raise Reply(404, f"the server could not find the requested resource ({path})")
            if sub == "eviction" and kind == "Pod" and method == "POST":
                return self._evict(namespace, name, body)
            if sub:
                raise Reply(404, f"the server could not find the requested resource ({path})")
            if method == "GET" and name:
                obj = self.objects[kind].get((namespace, name))
                if obj is None:
                    raise Reply(404, f'{PLURAL[kind]} "{name}" not found', details={"name": name, "kind": PLURAL[kind]})
                return 200, copy.deepcopy(obj)
            if method == "GET":
                return 200, self._list(kind, namespace, query)
            if method == "POST" and not name:
                return self._create(kind, namespace, body)
            if method == "PUT" and name:
                return self._replace(kind, namespace, name, body)
            if method == "DELETE" and name:
                return self._delete(kind, namespace, name, body)
            raise Reply(405, f"method {method} not allowed on {path}")

    def _selectors(self, query: dict[str, str]) -> tuple[LabelSelector | None, list[tuple[str, str, str]]]:
        labels = None
        if query.get("labelSelector"):
            try:
                labels = parse_selector(query["labelSelector"], "labelSelector")
            except ModelError as exc:
                raise Reply(400, f"unable to parse requirement: {exc}") from None
        fields = []
        for term in filter(None, (query.get("fieldSelector") or "").split(",")):
            for op in ("!=", "==", "="):
                if op in term:
                    name, value = term.split(op, 1)
                    break
            else:
                raise Reply(400, f"invalid field selector: {term!r}")
            if name.strip() not in FIELDS:
                raise Reply(400, f"field label not supported: {name.strip()}")
            fields.append((name.strip(), "!=" if op == "!=" else "=", value.strip()))
        return labels, fields

    @staticmethod
    def _matches(obj: dict[str, Any], namespace: str, labels: LabelSelector | None,
                 fields: list[tuple[str, str, str]]) -> bool:
        meta = obj.get("metadata") or {}
        if namespace and meta.get("namespace") != namespace:
            return False
        if labels is not None and not labels.matches(meta.get("labels") or {}):
            return False
        for name, op, value in fields:
            section, attr = FIELDS[name]
            have = str((obj.get(section) or {}).get(attr) or "")
            if (have == value) != (op == "="):
                return False
        return True

    def _sorted_keys(self, kind: str) -> list[Key]:
        keys = self._sorted.get(kind)
        if keys is None:
            keys = self._sorted[kind] = sorted(self.objects[kind])
        return keys

    def _list(self, kind: str, namespace: str, query: dict[str, str]) -> dict[str, Any]:
        if query.get("watch") in ("true", "1"):
            raise Reply(400, "watch is served by the streaming handler")
        labels, fields = self._selectors(query)
        after: list[str] | None = None
        list_rv = self.rv
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
                after, list_rv = list(token["after"]), int(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise Reply(400, "continue key is not valid") from None
            if list_rv < self.compacted_rv:
                raise Reply(410, "The provided continue parameter is too old to display a consistent list result.")
        objects = self.objects[kind]
        keys = self._sorted_keys(kind)
        start = bisect.bisect_right(keys, tuple(after)) if after is not None else 0
        limit = int(query.get("limit") or 0)
        if not namespace and labels is None and not fields:
            # no filter: slice the sorted keys (a 150,000-pod LIST in 300 pages must not scan and
            # sort the whole store for every page)
            matched = len(keys) - start
            page = [(k, objects[k]) for k in (keys[start:start + limit] if limit > 0 else keys[start:])]
        else:
            matching = [(k, objects[k]) for k in keys[start:] if self._matches(objects[k], namespace, labels, fields)]
            matched = len(matching)
            page = matching[:limit] if limit > 0 else matching
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit > 0 and matched > limit:
            last = list(page[-1][0])
            meta["continue"] = base64.urlsafe_b64encode(json.dumps({"after": last, "rv": list_rv}).encode()).decode()
            if self.report_remaining:
                meta["remainingItemCount"] = matched - limit
        items = []
        for _, obj in page:
            item = copy.deepcopy(obj)
            item.pop("kind", None)  # LIST items carry no kind/apiVersion
            item.pop("apiVersion", None)
            items.append(item)
        return {"kind": f"{kind}List", "apiVersion": API_VERSION[kind], "metadata": meta, "items": items}

    def _create(self, kind: str, namespace: str, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise Reply(400, "the body must be an object with metadata")
        obj = copy.deepcopy(body)
        obj["kind"] = kind
        if namespace:
            obj["metadata"]["namespace"] = namespace
        if not obj["metadata"].get("name") and not obj["metadata"].get("generateName"):
            raise Reply(400, "metadata.name: Required value: name or generateName is required")
        obj["metadata"].pop("resourceVersion", None)
        self._check_annotations(obj)
        if obj["metadata"].get("name") and key_of(obj) in self.objects[kind]:
            name = obj["metadata"]["name"]
            raise Reply(409, f'{PLURAL[kind]} "{name}" already exists', details={"name": name})
        return 201, copy.deepcopy(self._store(obj, "ADDED"))

    def _replace(self, kind: str, namespace: str, name: str, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise Reply(400, "the body must be an object with metadata")
        current = self.objects[kind].get((namespace, name))
        if current is None:
            raise Reply(404, f'{PLURAL[kind]} "{name}" not found')
        wanted = body["metadata"].get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise Reply(409, f'Operation cannot be fulfilled on {PLURAL[kind]} "{name}": the object has been '
                             "modified; please apply your changes to the latest version and try again")
        obj = copy.deepcopy(body)
        self._check_annotations(obj)
        obj["kind"] = kind
        obj["metadata"].update({"name": name, "namespace": namespace or None,
                                "uid": current["metadata"]["uid"],
                                "creationTimestamp": current["metadata"].get("creationTimestamp")})
        if not namespace:
            obj["metadata"].pop("namespace")
        obj["metadata"].pop("resourceVersion", None)
        return 200, copy.deepcopy(self._store(obj, "MODIFIED"))

    def _delete(self, kind: str, namespace: str, name: str, body: Any) -> tuple[int, Any]:
        current = self.objects[kind].get((namespace, name))
        if current is None:
            raise Reply(404, f'{PLURAL[kind]} "{name}" not found', details={"name": name, "kind": PLURAL[kind]})
        wanted = ((body or {}).get("preconditions") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise Reply(409, f'Operation cannot be fulfilled on {PLURAL[kind]} "{name}": the ResourceVersion in the '
                             "precondition does not match")
        return 200, copy.deepcopy(self._remove(kind, (namespace, name)))

    @staticmethod
    def _check_annotations(obj: dict[str, Any]) -> None:
        """The real API server's limit: metadata.annotations at most 256 KiB in all (422 past it)."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
        if size > 256 * 1024:
            raise Reply(422, f"metadata.annotations: Too long: must have at most 262144 bytes (got {size})")

    def _evict(self, namespace: str, name: str, body: Any) -> tuple[int, Any]:
        pod = self.objects["Pod"].get((namespace, name))
        if pod is None:
            raise Reply(404, f'pods "{name}" not found', details={"name": name, "kind": "pods"})
        options = (body or {}).get("deleteOptions") or {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise Reply(409, f"Precondition failed: UID in precondition: {uid}, "
                             f"UID in object meta: {pod['metadata'].get('uid')}")
        # The real (v1.24) API server's rules, checked in tests/realk8s/test_pdb_verdicts.py: a
        # Pending, Succeeded, Failed or terminating pod ignores PDBs; a not-Ready pod passes without
        # spending the budget while currentHealthy >= desiredHealthy > 0.
        status = pod.get("status") or {}
        ignores_pdbs = (status.get("phase") in ("Pending", "Succeeded", "Failed")
                        or bool(pod["metadata"].get("deletionTimestamp")))
        pdbs = [b for b in self.objects["PodDisruptionBudget"].values()
                if b["metadata"].get("namespace") == namespace
                and (b.get("spec") or {}).get("selector") is not None
                and LabelSelector.from_api(b["spec"]["selector"]).matches(pod["metadata"].get("labels") or {})]
        if not ignores_pdbs and len(pdbs) > 1:
            raise Reply(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                             "does not support.")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
        if pdbs and not ready:
            health = pdbs[0].get("status") or {}
            current, desired = health.get("currentHealthy"), health.get("desiredHealthy")
            if isinstance(current, int) and isinstance(desired, int) and desired > 0 and current >= desired:
                ignores_pdbs = True
        if not ignores_pdbs and pdbs:
            pdb = pdbs[0]
            allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
            if allowed < 1:
                raise Reply(429, PDB_MESSAGE, details={"causes": [{
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pdb['metadata']['name']} needs more healthy pods "
                               "and has 0 disruptions allowed"}]})
            updated = copy.deepcopy(pdb)
            updated.setdefault("status", {})["disruptionsAllowed"] = allowed - 1
            self._store(updated, "MODIFIED")
        self._remove("Pod", (namespace, name))
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # -- watch -----------------------------------------------------------------------------------
    def watch(self, handler: _Handler, path: str, query: dict[str, str]) -> None:
        kind, namespace, _, _, _ = self.route("GET", path)
        labels, fields = self._selectors(query)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        rv_text = query.get("resourceVersion") or "0"
        with self._lock:
            if rv_text == "0":
                pending = [("ADDED", copy.deepcopy(o)) for _, o in sorted(self.objects[kind].items())]
                pos = self.rv
            else:
                pos = int(rv_text)
                if pos < self.compacted_rv:
                    pending = [("ERROR", status_body(410, f"too old resource version: {pos} ({self.compacted_rv})"))]
                    pos = -1
                else:
                    pending = []
            seen_bookmarks = self._bookmarks
        handler.start_stream()
        while True:
            for etype, obj in pending:
                handler.send_chunk({"type": etype, "object": obj})
            if pos < 0:
                break
            with self._lock:
                while True:
                    if pos < self.compacted_rv:
                        # compacted before this watch sent the changes it had not sent yet: they are gone
                        # from the history, so it ends with 410 as a watcher the API server's watch cache
                        # has left behind does (before, it went on without them: a cache that missed a
                        # delete and an add made back to back with compact(), under load, for ever)
                        changes, wants_bookmark, remaining = [("ERROR", status_body(
                            410, f"too old resource version: {pos} ({self.compacted_rv})"))], False, 0.0
                        pos = -1
                        break
                    changes = [(t, copy.deepcopy(o)) for rv, k, t, o in self.history
                               if rv > pos and k == kind and self._matches(o, namespace, labels, fields)]
                    pos = self.rv
                    remaining = deadline - time.monotonic()
                    wants_bookmark = bookmarks and (self._bookmarks != seen_bookmarks or remaining <= 0)
                    if changes or wants_bookmark or remaining <= 0 or self._stopping:
                        break
                    self._lock.wait(min(remaining, 0.5))
                seen_bookmarks = self._bookmarks
                pending = changes
                if wants_bookmark:
                    pending.append(("BOOKMARK", {"kind": kind, "apiVersion": API_VERSION[kind],
                                                 "metadata": {"resourceVersion": str(self.rv)}}))
                done = remaining <= 0 or self._stopping or pos < 0
            if done:
                for etype, obj in pending:
                    handler.send_chunk({"type": etype, "object": obj})
                break
        handler.end_stream()


class _Handler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; watch responses are chunked like the real API server's."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    fake: FakeApiServer

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._sockets.add(self.connection)
            self.fake._handlers = {t for t in self.fake._handlers if t.is_alive()}
            self.fake._handlers.add(threading.current_thread())

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._sockets.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The ``Date`` of every answer (send_response adds it): the fake's clock (``clock_offset``)."""
        when = time.time() + self.fake.clock_offset if timestamp is None else timestamp
        return email.utils.formatdate(when, usegmt=True)

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise Reply(400, "request body is not JSON") from None
            if self.command == "GET" and query.get("watch") in ("true", "1"):
                self.fake.admit("GET", split.path, query, None, {k.lower(): v for k, v in self.headers.items()})
                self.fake.watch(self, split.path, query)
                return
            eviction = self.command == "POST" and split.path.endswith("/eviction")
            if eviction:
                self.fake._eviction_started()
            try:
                code, payload = self.fake.handle(self.command, split.path, query, body,
                                                 {k.lower(): v for k, v in self.headers.items()})
            finally:
                if eviction:
                    self.fake._eviction_finished()
            self._json(code, payload)
        except Reply as reply:
            self._json(reply.code, reply.body, reply.retry_after)
        except Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    def _json(self, code: int, payload: Any, retry_after: float | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", f"{retry_after:g}")
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, event: dict[str, Any]) -> None:
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@dataclass(frozen=True)
class Connect:
    """One new connection a client opened: when (monotonic), with which connect timeout."""

    at: float
    timeout: float | None


def blackhole_first_connect(fake: FakeApiServer, monkeypatch: Any) -> list[Connect]:
    """From now on, record every new connection to ``fake``; the first hangs until its connect timeout,
    then fails (a SYN to a dead endpoint behind the Service). Connections elsewhere (a thread another
    test left running) pass through untouched. ``monkeypatch``: pytest's, which undoes it."""
    import urllib3

    real = urllib3.connection.HTTPConnection._new_conn
    port = int(fake.url.rsplit(":", 1)[1])
    connects: list[Connect] = []

    def blackholed_once(conn: Any) -> Any:
        if conn.port != port:
            return real(conn)
        connects.append(Connect(time.monotonic(), conn.timeout))
        if len(connects) == 1:
            time.sleep(conn.timeout)
            raise urllib3.exceptions.ConnectTimeoutError(conn, f"connect timed out ({conn.timeout})")
        return real(conn)

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "_new_conn", blackholed_once)
    return connects

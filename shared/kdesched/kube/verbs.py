"""The client's generic verbs: get, list (paginated), create, replace, patch, delete and watch of
any :class:`~kdesched.kube.resources.Resource`, subresources included.

Why a module of its own: the verbs are where the API's protocol lives (pagination with
``limit``/``continue`` and starting over when a continue token expired, NotFound as "absent",
``kind``/``apiVersion`` filled into listed objects, the watch stream's lines and its ``ERROR``
events), and none of it depends on the kind. As in lightkube, the verbs take a typed resource
descriptor; :class:`~kdesched.kube.client.KubeClient` adds the kind-named methods the rest of
kdesched calls, each a few lines over these. Reads are retried by the transport
(:class:`~kdesched.kube.transport.Transport`); writes and watches are not (the evictor and the
reflector, :mod:`kdesched.kube.reflector`, decide).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3

from kdesched.kube.deadline import Deadline
from kdesched.kube.errors import Gone, NotFound, error_from_status, trim, unavailable_from
from kdesched.kube.resources import Resource, delete_options
from kdesched.kube.transport import WATCH_CONNECT_SECONDS, ReadRetry, Transport
from kdesched.model.fastload import decode_list_page

log = logging.getLogger("kdesched.kube")

WATCH_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")


def decode_event(line: bytes) -> tuple[str, dict[str, Any]] | None:
    """One line of a watch stream: ``(type, object)``, or None for a line that is no event."""
    try:
        event = json.loads(line)
    except ValueError:
        log.warning("ignoring a watch line that is not JSON: %s", trim(line.decode("utf-8", "replace"), 200))
        return None
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        return None
    return str(event.get("type") or ""), event["object"]


class ResourceClient(Transport):
    """The generic verbs over :class:`Resource` descriptors (module docstring)."""

    # -- reads -----------------------------------------------------------------------------------
    def get(self, res: Resource, name: str, namespace: str | None = None, *, subresource: str | None = None,
            retry: ReadRetry | None = None) -> dict[str, Any] | None:
        """One object (or its ``subresource``), or None when it does not exist. ``retry``: this
        read's bounds instead of the client's."""
        path = res.path(namespace, name, subresource)
        try:
            obj = self._retry_read(f"GET {path}", lambda: self._json("GET", path), retry)
        except NotFound:
            return None
        return obj if subresource else res.typed(obj)

    def list_all(self, res: Resource, *, namespace: str | None = None, field_selector: str | None = None,
                 label_selector: str | None = None, page_size: int | None = 500, fast: bool = False,
                 resource_version: str | None = None, retry: ReadRetry | None = None) -> tuple[list[Any], str]:
        """Every object of ``res`` (in ``namespace``, or cluster-wide) through limit/continue pages,
        and the list's resourceVersion (the first page's: a continued list is one snapshot). A
        continue token that expired (410) starts the list over, at most ``max_list_restarts``
        times. ``fast``: Pods as records where msgspec takes them (:mod:`kdesched.model.fastload`).
        ``page_size`` None: no ``limit``, one answer (with a ``resource_version`` other than "0",
        the API server's watch cache serves it; with a limit etcd would). ``retry``: each page's
        bounds instead of the client's."""
        if page_size is not None and page_size < 1:
            raise ValueError(f"page_size must be >= 1 or None, got {page_size}")
        path = res.path(namespace)
        restarts = 0
        while True:
            items: list[Any] = []
            list_rv = ""
            token: str | None = None
            try:
                while True:
                    query = [("limit", str(page_size))] if page_size is not None else []
                    if resource_version is not None and not token:
                        query.append(("resourceVersion", resource_version))
                    if field_selector:
                        query.append(("fieldSelector", field_selector))
                    if label_selector:
                        query.append(("labelSelector", label_selector))
                    if token:
                        query.append(("continue", token))
                    page_items, meta = self._retry_read(f"LIST {path}", functools.partial(
                        self._list_page, path, query, res.kind, res.group_version, fast), retry)
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
                self._count(read_retries=1)
                log.info("LIST %s: the continue token expired (%s); listing again from the first page (%d/%d)",
                         path, exc.message or exc, restarts, self.read_retry.max_list_restarts)

    def pages(self, res: Resource, *, page_size: int = 500, limit_one: bool = False
              ) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
        """The pages of a cluster-wide LIST of ``res`` with their list metadata, one request each,
        read only as far as the caller iterates."""
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        path = res.path(None)
        token: str | None = None
        while True:
            query = [("limit", str(page_size))] + ([("continue", token)] if token else [])
            page = self._retry_read(f"LIST {path}", functools.partial(
                self._list_page, path, query, res.kind, res.group_version, False))
            yield page
            token = page[1].get("continue") or None
            if not token:
                return

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

    # -- writes (one attempt each) ---------------------------------------------------------------
    def create(self, res: Resource, body: Mapping[str, Any], namespace: str | None = None, *,
               name: str | None = None, subresource: str | None = None,
               timeout: float | None = None, deadline: Deadline | None = None) -> dict[str, Any]:
        """POST ``body`` to the collection (or to ``name``'s ``subresource``). ``timeout`` (seconds)
        and ``deadline`` (an absolute one): bounded on both sides, the API server abandons the
        request at it too (``?timeout=``), so a write whose answer this client stopped waiting for
        cannot land later. The time left until ``deadline`` is taken when the request goes out,
        after the client-side rate limit's wait; :class:`~kdesched.kube.deadline.DeadlinePassed`
        when too little is left."""
        path = res.path(namespace, name, subresource)
        if timeout is None and deadline is None:
            return self._json("POST", path, body=body)
        resp = self._send("POST", path, body=body, server_timeout=timeout, deadline=deadline)
        return self._parse(resp, "POST", path, self._read(resp))

    def replace(self, res: Resource, name: str, namespace: str | None, body: Mapping[str, Any], *,
                subresource: str | None = None, field_manager: str = "") -> dict[str, Any]:
        """PUT ``body``; with ``metadata.resourceVersion`` set, Conflict if it changed meanwhile.
        ``field_manager``: the name the API server records in managedFields for the fields it changes."""
        query = [("fieldManager", field_manager)] if field_manager else None
        return self._json("PUT", res.path(namespace, name, subresource), query=query, body=body)

    def patch(self, res: Resource, name: str, namespace: str | None, patch: Mapping[str, Any], *,
              subresource: str | None = None, content_type: str = "application/merge-patch+json") -> dict[str, Any]:
        """PATCH one object (a JSON merge patch unless ``content_type`` says otherwise)."""
        path = res.path(namespace, name, subresource)
        return self._json("PATCH", path, body=patch, content_type=content_type)

    def delete(self, res: Resource, name: str, namespace: str | None = None, *, resource_version: str = "") -> None:
        """DELETE one object; with ``resource_version``, Conflict if it changed meanwhile."""
        self._json("DELETE", res.path(namespace, name), body=delete_options(resource_version))

    # -- watch -----------------------------------------------------------------------------------
    def watch(self, res: Resource, *, resource_version: str, timeout_seconds: int, allow_bookmarks: bool = True,
              namespace: str | None = None, field_selector: str | None = None,
              label_selector: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Open a WATCH after ``resource_version`` (HTTP errors raise here) and return the stream of
        ``(type, object)``: ADDED, MODIFIED, DELETED, BOOKMARK. An ``ERROR`` event raises its typed
        error (410: :class:`Gone`). Closing the iterator early drops the connection. Connect
        timeout :data:`WATCH_CONNECT_SECONDS`; a silence longer than ``timeout_seconds`` plus
        :attr:`watch_read_slack_seconds` ends the stream with :class:`Unavailable` ("timed out")."""
        query = [("watch", "true"), ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(int(timeout_seconds)))]
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if label_selector:
            query.append(("labelSelector", label_selector))
        # The server ends the stream after timeoutSeconds, so a longer silence is a dead peer (a node
        # lost, a load balancer failed over, a NAT entry expired: no reset ever comes). urllib3's
        # read timeout is per read, so it never cuts a healthy stream; no total timeout, which
        # would. A (connect, read) tuple: the kubernetes client drops anything else it does not
        # know as _request_timeout (a urllib3.Timeout object included) and sends without one.
        timeout = (WATCH_CONNECT_SECONDS, float(timeout_seconds) + self.watch_read_slack_seconds)
        resp = self._send("GET", res.path(namespace), query=query, timeout=timeout)
        return self._events(resp.response, res)

    def _events(self, raw: Any, res: Resource) -> Iterator[tuple[str, dict[str, Any]]]:
        finished = False
        try:
            for line in self._lines(raw):
                event = decode_event(line)
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
                yield etype, res.typed(obj)
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


__all__ = ["WATCH_EVENT_TYPES", "ResourceClient", "decode_event"]

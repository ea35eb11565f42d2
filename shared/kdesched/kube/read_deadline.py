"""One deadline for the whole of a kube request: the connect, the header lines and the body.

Why: the client's request timeout reaches urllib3 as a socket timeout, which bounds each ``recv``,
not the answer. An API server, or a proxy in front of it, that sends a byte every few seconds holds
a GET or a LIST page for as long as it trickles, and with it the run, the settle or the cache's
re-list behind it; and a write the same way (a ledger PUT, a Lease renewal, an Event). kdesched
bounds its Prometheus reads the same way already (:mod:`kdesched.bounded_http`, whose bounded
answer this reuses); a write with a deadline is bounded on the API server by its ``?timeout=``
(:mod:`kdesched.kube.deadline`) and here by the wait that deadline gives it. A write cut off so
has lost its answer, as one whose connection broke: its callers read back what it did.

How: the transport sets :func:`whole_request_timeout` around one request
(:meth:`kdesched.kube.transport.Transport._send`). The pools of the client's urllib3 pool manager
(:func:`bound_reads`) turn it into a deadline when an attempt starts (each of urllib3's own transport
attempts: its one re-send of a read after a dropped connection or a timeout gets the timeout anew,
as its per-attempt ``Timeout(total=...)`` always did), and their connections honour it when they
connect (the connect's timeout is at most what is left) and when the answer comes (every read of
it shrinks the socket's timeout to what is left, and one when nothing is left is a timeout, which
urllib3 reports as a read timeout). A request without one (a watch: long-lived by design, bounded
by its ``timeoutSeconds`` plus a slack) is unchanged. Both are context variables: urllib3
connects and reads the answer's head in the caller's thread, inside the request, and the answer
keeps the deadline it was made with for its body, read later. urllib3 puts the connection's own
timeout back on the socket before its next request (keep-alive).
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from urllib3 import HTTPConnectionPool, PoolManager

from kdesched.bounded_http import bounded_response_class, time_left

_TIMEOUT: ContextVar[float | None] = ContextVar("kdesched_kube_whole_request_timeout", default=None)
_DEADLINE: ContextVar[float | None] = ContextVar("kdesched_kube_read_deadline", default=None)


@contextmanager
def whole_request_timeout(seconds: float | None) -> Iterator[None]:
    """Each attempt of the requests this thread sends in the ``with`` block ends within ``seconds``
    of its start (None: no such bound), its answer's body included, wherever it is read."""
    token = _TIMEOUT.set(seconds)
    try:
        yield
    finally:
        _TIMEOUT.reset(token)


class _DeadlineConnection:
    """Mixed into the pool's connection class (HTTP, HTTPS, SOCKS alike)."""

    timeout: Any
    response_class: Any

    def connect(self) -> None:
        deadline = _DEADLINE.get()
        if deadline is not None:
            left = time_left(deadline)
            self.timeout = min(self.timeout, left) if isinstance(self.timeout, (int, float)) else left
        super().connect()  # type: ignore[misc]

    def getresponse(self) -> Any:
        deadline = _DEADLINE.get()
        if deadline is not None:
            self.response_class = bounded_response_class(deadline)
        else:
            self.response_class = http.client.HTTPResponse
        return super().getresponse()  # type: ignore[misc]


class _DeadlinePool:
    """Mixed into the pool class: an attempt (``urlopen``; urllib3's re-send calls it again) starts
    its deadline."""

    def urlopen(self, *args: Any, **kwargs: Any) -> Any:
        seconds = _TIMEOUT.get()
        token = _DEADLINE.set(time.monotonic() + seconds if seconds is not None else None)
        try:
            return super().urlopen(*args, **kwargs)  # type: ignore[misc]
        finally:
            _DEADLINE.reset(token)


_POOLS: dict[type[HTTPConnectionPool], type[HTTPConnectionPool]] = {}


def _bounded_pool(cls: type[HTTPConnectionPool]) -> type[HTTPConnectionPool]:
    bounded = _POOLS.get(cls)
    if bounded is None:
        connection = type(f"Deadline{cls.ConnectionCls.__name__}", (_DeadlineConnection, cls.ConnectionCls), {})
        bounded = _POOLS[cls] = type(f"Deadline{cls.__name__}", (_DeadlinePool, cls), {"ConnectionCls": connection})
    return bounded


def bound_reads(pool_manager: PoolManager) -> None:
    """Make the pools ``pool_manager`` opens from now on honour :func:`whole_request_timeout` (a
    proxy manager too; call it before the first request: pools already made keep their class)."""
    pool_manager.pool_classes_by_scheme = {scheme: _bounded_pool(cls)
                                           for scheme, cls in pool_manager.pool_classes_by_scheme.items()}


__all__ = ["bound_reads", "whole_request_timeout"]

"""One HTTP(S) request through ``urllib`` with one deadline for all of it: the TCP connect, the TLS
handshake, the request, the status line, the header lines and the body.

Used for every outbound HTTP request that is not to the API server: the Prometheus reads of the kube
layer (the alert brake, the usage query: :mod:`kdesched.kube.prometheus`) and the functions' posts to
the Knative broker (:func:`kdesched_functions.common.post_events`). A leaf, like
:mod:`kdesched.httpserver`: the standard library only, no layer (import-linter, pyproject.toml), so
every layer may import it and a function that imports it loads nothing else (a cold start).

Why: a socket timeout bounds each ``recv``, not the answer. A server (or a proxy in front of it) that
sends a header line, or a byte of the body, a little faster than the timeout holds the caller for as
long as it likes: ``http.client`` reads up to 100 header lines of 64 KiB each, and a body of any size.
Here every read first shrinks the socket's timeout to what is left before the deadline, and a read
when nothing is left is a :class:`TimeoutError`. The TLS handshake and ``sendall`` take the socket
timeout as a bound on the whole operation (Python >= 3.5), so setting it to what is left bounds them
too. No thread, no signal: the caller's own thread does every read.

Not bounded: the name lookup. ``getaddrinfo`` takes no timeout, and the only ways around it are a
thread left blocked in the resolver after the deadline (a leak at every lookup of a dead DNS) or a
resolver of our own: neither is worth it. The resolver's own limits (``resolv.conf``: ``timeout``,
``attempts``, and in a pod each name of the search list that ``ndots`` makes it try) apply; a pod
bounds them with ``dnsConfig.options``. A name with several addresses gets what is left for each
connect attempt.

Everything else is ``urllib``'s (proxies from the environment, redirects, ``HTTPError`` for a
non-2xx answer): only the connection classes are swapped.
"""

from __future__ import annotations

import functools
import http.client
import io
import math
import ssl
import time
import urllib.request
from socket import socket
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


def time_left(deadline: float) -> float:
    """Seconds left before ``deadline`` (``time.monotonic``); none left is a :class:`TimeoutError`."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket's own raw stream (``socket.makefile``'s: it holds the socket open until the answer
    is closed, which urllib relies on), each read bounded by what is left before the deadline."""

    def __init__(self, raw: io.RawIOBase, sock: socket, deadline: float) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int | None:
        self._sock.settimeout(time_left(self._deadline))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _BoundedResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket, debuglevel: int = 0, method: str | None = None, url: str | None = None,
                 *, deadline: float = math.inf) -> None:
        super().__init__(sock, debuglevel, method, url)
        # nothing is read yet: the buffer is empty, and the raw stream is the socket's own
        self.fp = io.BufferedReader(_DeadlineReader(self.fp.detach(), sock, deadline))


def bounded_response_class(deadline: float) -> type[http.client.HTTPResponse]:
    """An ``http.client`` connection's ``response_class`` whose every read (the status line, the
    header lines, the body) ends by ``deadline`` (``time.monotonic``): a read when nothing is left is
    a :class:`TimeoutError`. For a connection made elsewhere (the kube client's urllib3 pool:
    :mod:`kdesched.kube.read_deadline`)."""
    # HTTPConnection only calls it (the answer, a proxy's answer to CONNECT): a class is not needed
    return cast(type[http.client.HTTPResponse], functools.partial(_BoundedResponse, deadline=deadline))


class _Bounded(http.client.HTTPConnection):
    """The TCP connect (and, below :class:`_BoundedHTTPS` in its MRO, what comes before its TLS
    handshake) within the deadline; every answer read through :class:`_BoundedResponse`."""

    deadline: float = math.inf

    def _arm(self, deadline: float) -> None:
        self.deadline = deadline
        self.response_class = bounded_response_class(deadline)

    def connect(self) -> None:
        self.timeout = time_left(self.deadline)
        super().connect()
        self.sock.settimeout(time_left(self.deadline))  # the request's send; for https, the handshake


class _BoundedHTTP(_Bounded):
    def __init__(self, host: str, *, deadline: float = math.inf, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._arm(deadline)


class _BoundedHTTPS(http.client.HTTPSConnection, _Bounded):
    """MRO: HTTPSConnection.connect -> _Bounded.connect (TCP, timeout = what is left) -> the TLS
    handshake on that socket, bounded as a whole by what was left after the connect."""

    def __init__(self, host: str, *, deadline: float = math.inf, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._arm(deadline)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_BoundedHTTP, req, deadline=self.deadline)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self.deadline, self.context = deadline, context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_BoundedHTTPS, req, context=self.context, deadline=self.deadline)


def open_by(request: urllib.request.Request, deadline: float, context: ssl.SSLContext | None = None) -> Any:
    """``urllib.request.urlopen(request, context=context)`` with every step before ``deadline``
    (``time.monotonic``); a step that would outlive it raises :class:`TimeoutError` (wrapped in
    ``URLError`` when it happens while connecting or sending, as urllib wraps every ``OSError`` there)."""
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline, context))
    return opener.open(request, timeout=time_left(deadline))

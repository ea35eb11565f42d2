"""A fault-injecting HTTP proxy on loopback in front of a real API server.

Why: the fake API server (tests/fakeapi.py) scripts faults request by request, but only the real
API server shows what a fault does to a whole run: an eviction carried out whose answer is lost,
the disruption controller and the kubelet acting meanwhile, Events refused by real validation.
This proxy terminates plain HTTP from kdesched (a kubeconfig whose server is ``http://127.0.0.1:PORT``
and which carries no credentials) and forwards each request over HTTPS to the API server with the
admin token of tests/realk8s/controlplane.py. A seeded share of the requests gets one of these
faults instead of (or on top of) the real answer:

- ``429``: ``Too Many Requests`` with ``Retry-After: 1`` and no PDB cause, as API Priority and
  Fairness answers a busy server;
- ``500``: ``InternalError`` (a Status without ``Retry-After``);
- ``503``: ``ServiceUnavailable``;
- ``drop``: the connection is closed without an answer, the request never forwarded;
- ``delay``: the request is forwarded 2 s late;
- ``act-drop``: the request is forwarded and carried out, its answer is lost (the connection is
  closed).

Which request gets which fault follows a ``random.Random(seed)`` drawn once per request in the
order requests arrive, so a seed gives the same sequence of decisions (concurrent requests may
arrive in another order between runs). Watches pass through untouched (``kdesched run`` does not
watch). Every decision is kept in ``injected`` for the test's report.
"""

from __future__ import annotations

import json
import random
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

import urllib3
import yaml

FAULTS = ("429", "500", "503", "drop", "delay", "act-drop")
DELAY_SECONDS = 2.0
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade", "content-length", "authorization", "host"}


@dataclass(frozen=True)
class Injected:
    """One request that got a fault."""

    method: str
    path: str
    fault: str


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()


class _Drop(Exception):
    """Close the client's connection without an answer."""


class FaultProxy:
    """``http://127.0.0.1:<port>`` -> ``upstream`` (HTTPS, bearer ``token``, CA ``ca_file``), with
    ``share`` of the requests (those ``match`` accepts; all by default) faulted, seeded."""

    def __init__(self, upstream: str, token: str, ca_file: str | Path, *, share: float = 0.3, seed: int = 0,
                 faults: Sequence[str] = FAULTS, match: Callable[[str, str], bool] | None = None,
                 delay_seconds: float = DELAY_SECONDS) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown or not faults:
            raise ValueError(f"faults must be among {FAULTS}, got {list(faults)}")
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be between 0 and 1, got {share}")
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.share = share
        self.faults = tuple(faults)
        self.match = match
        self.delay_seconds = delay_seconds
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: list[Injected] = []
        self.requests = 0
        self.pool = urllib3.PoolManager(maxsize=32, cert_reqs=ssl.CERT_REQUIRED, ca_certs=str(ca_file),
                                        retries=False)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        self.pool.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig for kdesched pointing at the proxy (plain HTTP, no credentials: the proxy
        adds the admin token)."""
        path = Path(path)
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "faulty",
            "clusters": [{"name": "faulty", "cluster": {"server": self.url}}],
            "users": [{"name": "nobody", "user": {}}],
            "contexts": [{"name": "faulty", "context": {"cluster": "faulty", "user": "nobody"}}],
        }, sort_keys=False))
        return path

    def set_share(self, share: float) -> None:
        with self.lock:
            self.share = share

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(i.fault for i in self.injected)

    # -- decisions ---------------------------------------------------------------------------------
    def decide(self, method: str, path: str, watch: bool) -> str | None:
        with self.lock:
            self.requests += 1
            # one draw per request whatever it is, so a seed's sequence does not depend on which
            # requests are eligible
            roll, pick = self.rng.random(), self.rng.choice(self.faults)
            if watch or roll >= self.share or (self.match is not None and not self.match(method, path)):
                return None
            self.injected.append(Injected(method, path, pick))
            return pick

    def forward(self, method: str, target: str, headers: dict[str, str], body: bytes | None,
                stream: bool) -> urllib3.BaseHTTPResponse:
        sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
        sent["Authorization"] = f"Bearer {self.token}"
        return self.pool.request(method, self.upstream + target, body=body, headers=sent,
                                 preload_content=not stream, redirect=False,
                                 timeout=urllib3.Timeout(connect=10.0, read=None if stream else 120.0))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    owner: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        split = urlsplit(self.path)
        watch = "watch=true" in split.query or "watch=1" in split.query
        fault = self.owner.decide(self.command, split.path, watch)
        try:
            if fault == "drop":
                raise _Drop
            if fault in ("429", "500", "503"):
                code = int(fault)
                reason, message, extra = {
                    429: ("TooManyRequests", "Too many requests, please try again later.", {"Retry-After": "1"}),
                    500: ("InternalError", "Internal error occurred: injected fault", {}),
                    503: ("ServiceUnavailable", "The server is currently unable to handle the request", {}),
                }[code]
                self._answer(code, _status(code, reason, message), extra)
                return
            if fault == "delay":
                time.sleep(self.owner.delay_seconds)
            headers = {k: v for k, v in self.headers.items()}
            if watch:
                self._stream(self.owner.forward(self.command, self.path, headers, body, stream=True))
                return
            resp = self.owner.forward(self.command, self.path, headers, body, stream=False)
            if fault == "act-drop":
                raise _Drop
            extra = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
            self._answer(resp.status, resp.data or b"", extra)
        except _Drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except urllib3.exceptions.HTTPError as exc:  # the API server itself is unreachable
            self._answer(502, _status(502, "BadGateway", f"fault proxy: upstream failed: {exc}"), {})

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    def _answer(self, code: int, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, resp: urllib3.BaseHTTPResponse) -> None:
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.headers.get("Content-Type", "application/json"))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in resp.stream(8192):
                if chunk:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            resp.release_conn()

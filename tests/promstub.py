"""A stub Prometheus on loopback (tests/kube/test_usage.py, tests/kube/test_alerts.py,
tests/reactor/test_alert_fail_open.py): answers every GET with ``answer(handler)`` and records the
requests. ``stop()`` leaves no thread behind: it cuts the open connections, ends a :func:`pause`
and joins the accept loop and every handler (tests/conftest.py fails a test that leaves one)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[BaseHTTPRequestHandler], None]
STOP_JOIN_SECONDS = 5.0  # stop(): the most it waits for the stub's threads to end


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.handlers: dict[threading.Thread, socket.socket] = {}

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that gave up (the point of the slow stubs): no traceback on stderr
        super().handle_error(request, client_address)


class Stub:
    """A loopback HTTP server answering every GET with ``answer(handler)``; records requests."""

    def __init__(self, answer: Answer) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                server = stub.httpd
                with server.lock:
                    server.handlers = {t: s for t, s in server.handlers.items() if t.is_alive()}
                    server.handlers[threading.current_thread()] = self.connection

            def do_GET(self) -> None:
                stub.requests.append((self.path, dict(self.headers)))
                answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = _Server(Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="prometheus-stub", daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.httpd.lock:
            handlers = dict(self.httpd.handlers)
        for sock in handlers.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_JOIN_SECONDS
        for thread in [self.thread, *handlers]:
            thread.join(max(0.0, deadline - time.monotonic()))


def pause(handler: BaseHTTPRequestHandler, seconds: float) -> None:
    """A slow Prometheus: wait ``seconds`` before answering, or less if the stub is stopped."""
    server = handler.server
    assert isinstance(server, _Server)
    server.stopping.wait(seconds)


def reply(code: int, body: Any, content_type: str = "application/json") -> Answer:
    def answer(h: BaseHTTPRequestHandler) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
    return answer

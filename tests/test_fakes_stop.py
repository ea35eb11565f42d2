"""The test servers stop what they start: once ``stop()`` returns, none of their threads (the
accept loop, the request handlers) is left running into a later test, even while one is still
serving a scripted delay (tests/conftest.py fails a test that leaves a thread behind)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from tests.fakeapi import FakeApiServer, Fault


def _send_get(url: str, path: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return sock


def _wait_until(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition(), "timed out"


def test_stopping_the_fake_api_ends_the_request_it_is_delaying() -> None:
    before = set(threading.enumerate())
    fake = FakeApiServer().start()
    fake.script("GET", "/api/v1/nodes", [Fault(delay=30.0)])
    sock = _send_get(fake.url, "/api/v1/nodes")
    try:
        _wait_until(lambda: fake.requests("GET", "/api/v1/nodes"))  # its handler is in the delay now
        started = time.monotonic()
        fake.stop()
        took = time.monotonic() - started
        left = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
        assert left == []
        assert took < 5.0
        assert sock.recv(1024) == b""  # dropped, not answered after the stop
    finally:
        sock.close()

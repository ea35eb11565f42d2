"""The test servers stop what they start: once ``stop()`` returns, none of their threads (the
accept loop, the request handlers) is left running into a later test, even while one is still
serving a scripted delay (tests/conftest.py fails a test that leaves a thread behind)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.fakeapi import FakeApiServer, Fault
from tests.promstub import Stub, pause


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


def test_stopping_the_prometheus_stub_ends_an_answer_waiting_on_its_client() -> None:
    """The stub's handler threads are daemons too: one reading a request the client never finishes
    (or still answering) went on after stop()."""
    _stop_while_answering(lambda h: h.rfile.read(1))  # waits for a byte the client never sends


def test_stopping_the_prometheus_stub_cuts_a_pause_short() -> None:
    """A slow Prometheus is played with pause(), which stop() ends: a sleeping handler would outlive
    its test by the rest of the sleep."""
    _stop_while_answering(lambda h: pause(h, 30.0))


def _stop_while_answering(answer: Callable[[Any], object]) -> None:
    """A stub whose handler is inside ``answer`` when stop() comes: stop() ends it within 5 s and
    leaves no thread of its own."""
    before = set(threading.enumerate())
    stub = Stub(answer)
    sock = _send_get(stub.url, "/api/v1/query")
    try:
        _wait_until(lambda: stub.requests)
        started = time.monotonic()
        stub.stop()
        assert time.monotonic() - started < 5.0
        assert [t.name for t in threading.enumerate() if t not in before and t.is_alive()] == []
    finally:
        sock.close()

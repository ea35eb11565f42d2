"""The HTTP server (kdesched.httpserver: gunicorn's threaded worker in this process) with a real
function app on loopback: the probes are answered while every event slot is taken, one more event
is 503 with Retry-After, a stop lets the request in flight finish, and the CPU quota is the
cgroup's, not the host's."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kdesched.httpserver import PROBE_THREADS, READ_TIMEOUT_SECONDS, WSGIServer, container_cpus, threads_for
from kdesched.reactor.events import types as ev
from kdesched_functions.common import Ack, Incoming, create_function_app

from tests.functions.helpers import ce_request


def request(port: int, method: str, path: str, body: bytes = b"",
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


class Slow:
    """A handler that holds its event until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, incoming: Incoming) -> Ack:
        self.entered.set()
        assert self.release.wait(30)
        return Ack()


@pytest.fixture
def served() -> Any:
    servers: list[tuple[WSGIServer, threading.Thread]] = []

    def serve(handler: Any, concurrency: int, read_timeout_seconds: float = READ_TIMEOUT_SECONDS) -> WSGIServer:
        app = create_function_app("t", handler, (ev.RUN_REQUESTED,), max_events=concurrency)
        server = WSGIServer("127.0.0.1", 0, app, threads=threads_for(concurrency), graceful_seconds=5,
                            read_timeout_seconds=read_timeout_seconds)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server

    yield serve
    for server, thread in servers:
        server.shutdown(timeout=10)
        thread.join(timeout=10)


def post_event(port: int, out: list[Any]) -> None:
    headers, body = ce_request(ev.RUN_REQUESTED, {})
    out.append(request(port, "POST", "/", body, headers))


def test_probes_answer_while_the_event_slot_is_taken_and_one_more_event_is_503(served: Any) -> None:
    slow = Slow()
    server = served(slow, 1)  # containerConcurrency 1, as the evicting functions
    first: list[Any] = []
    port = server.server_port
    t = threading.Thread(target=post_event, args=(port, first))
    t.start()
    assert slow.entered.wait(10)
    for path in ("/healthz", "/readyz", "/metrics"):  # the probe threads
        assert request(port, "GET", path)[0] == 200, path
    second: list[Any] = []
    post_event(port, second)
    status, headers, body = second[0]
    assert status == 503 and headers["Retry-After"] == "1" and b"event(s) in progress" in body
    slow.release.set()
    t.join(10)
    assert first[0][0] == 202
    assert threads_for(1) == 1 + PROBE_THREADS


def test_a_stop_lets_the_request_in_flight_finish_and_refuses_new_connections(served: Any) -> None:
    slow = Slow()
    server = served(slow, 2)
    port = server.server_port
    first: list[Any] = []
    t = threading.Thread(target=post_event, args=(port, first))
    t.start()
    assert slow.entered.wait(10)
    stopped = threading.Thread(target=server.shutdown, kwargs={"timeout": 10})
    started = time.monotonic()
    stopped.start()
    time.sleep(0.3)
    with pytest.raises(OSError):  # no longer accepting: refused at once, not held until the stop ends
        request(port, "GET", "/healthz")
    assert time.monotonic() - started < 2
    slow.release.set()
    t.join(10)
    stopped.join(10)
    assert not stopped.is_alive() and time.monotonic() - started < 4, "the stop ended with the request"
    assert first and first[0][0] == 202, "the request in flight got its answer"


def test_stalled_request_heads_do_not_starve_the_liveness_probe(served: Any) -> None:
    """gthread reads a request's head in a pool thread. Connections that sent half a head and
    stalled (a buggy client, a peer gone on a half-open connection) once held every thread for
    ever, so /healthz stopped answering and the liveness probe restarted the pod (for serve, the
    leader). A stalled connection is closed after the read timeout, its thread freed: /healthz
    answers within the kubelet's probe timeout (5 s) while as many stalled clients as threads
    came first (the timeout shortened here; 10 s in production). The stalled connections are shut
    at once: gunicorn's graceful close would linger up to 2 s each for a peer that never closes,
    on the one loop that accepts every connection."""
    server = served(Slow(), 1, read_timeout_seconds=1.0)
    stalled: list[socket.socket] = []
    try:
        for _ in range(threads_for(1)):
            s = socket.create_connection(("127.0.0.1", server.server_port))
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\n")  # the head never finished
            stalled.append(s)
        time.sleep(0.3)  # each has a thread now
        conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)  # the probe's timeout
        try:
            conn.request("GET", "/healthz")
            status = conn.getresponse().status
        except TimeoutError as exc:
            raise AssertionError(f"/healthz did not answer in 5 s while {len(stalled)} stalled clients held "
                                 f"the {threads_for(1)} threads") from exc
        finally:
            conn.close()
        assert status == 200
        for s in stalled:  # closed by the server, no answer, at once (no graceful linger on its event loop)
            s.settimeout(1.0)
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
    finally:
        for s in stalled:
            s.close()


def test_keep_alive_and_slowly_sent_bodies_still_work_with_the_read_timeout(served: Any) -> None:
    """The read timeout is for a connection that stalls, not for a slow one: a body sent in pieces
    with pauses shorter than the timeout is read whole, and a kept-alive connection idle for
    longer than the timeout between two requests (it waits on the poller, not in a thread, up to
    the keep-alive time) serves the second one too."""
    received: list[Incoming] = []

    def handler(incoming: Incoming) -> Ack:
        received.append(incoming)
        return Ack()

    server = served(handler, 1, read_timeout_seconds=1.0)
    headers, body = ce_request(ev.RUN_REQUESTED, {"why": "x" * 2000})
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    try:
        conn.putrequest("POST", "/", skip_accept_encoding=True)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(key, value)
        conn.endheaders()
        for i in range(0, len(body), 700):  # a slow sender: pieces 0.6 s apart, each within the timeout
            time.sleep(0.6)
            conn.send(body[i:i + 700])
        resp = conn.getresponse()
        assert resp.status == 202, resp.read()
        resp.read()
        kept = conn.sock
        time.sleep(1.5)  # idle on the kept-alive connection for longer than the read timeout
        conn.request("GET", "/healthz")
        assert conn.sock is kept, "the kept-alive connection was closed: http.client opened another"
        again = conn.getresponse()
        assert again.status == 200 and again.getheader("Connection", "").lower() != "close"
        again.read()
    finally:
        conn.close()
    assert len(received) == 1


def test_the_cpu_quota_is_the_cgroups(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert container_cpus(str(tmp_path)) == 0.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert container_cpus(str(tmp_path)) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert container_cpus(str(v1)) == 2.0
    assert container_cpus(str(tmp_path / "none")) is None

"""The kube client's own reads (GET, LIST pages) end by the client's request timeout, however the
server sends its answer: one deadline for the connect, the header lines and the body.

Before, the request timeout was a socket timeout, so it bounded each ``recv``, not the answer: an API
server or a proxy in front of it that trickled a byte every few seconds held a read (and the run,
the settle or the cache's LIST behind it) for as long as it trickled; writes are bounded the same
way (a ledger PUT, a Lease renewal, an Event; an eviction by its deadline). A watch is unchanged:
it is long-lived by design, and its silence is bounded by ``timeoutSeconds`` plus a slack.

Covers: a trickled body, trickled header lines and a trickled LIST page each fail as a timeout
(``Unavailable``) by the deadline; a kept-alive connection is reused after a bounded read (the
socket's timeout is put back for the next request); a watch whose events come further apart than
the request timeout still reads them; a normal read is not slowed; a write whose answer trickles
ends by the request timeout, sent once, and an eviction by its deadline.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Unavailable
from kdesched.kube.resources import resource_for
from kdesched.kube.transport import NO_READ_RETRY

TIMEOUT = 1.0  # the client's request timeout in these tests
TRICKLE = 0.3  # seconds between two bytes: well under the timeout, so each recv gets its byte in time
POD = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default",
                                                                   "uid": "u1"}}).encode()

Answer = Callable[[socket.socket, bytes], None]


class Server:
    """A loopback HTTP/1.1 server: each request (keep-alive: several per connection) is read up to
    its blank line and answered by ``answer(conn, request)``; it counts connections and requests."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.stop = threading.Event()
        self.connections = 0
        self.requests: list[bytes] = []
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.srv.settimeout(0.1)
        self.threads = [threading.Thread(target=self._loop, daemon=True)]
        self.threads[0].start()
        self.url = f"http://127.0.0.1:{self.srv.getsockname()[1]}"

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.2)
            buffer = b""
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                buffer += data
                while b"\r\n\r\n" in buffer:
                    request, buffer = buffer.split(b"\r\n\r\n", 1)
                    self.requests.append(request)
                    try:
                        self.answer(conn, request)
                    except OSError:
                        return

    def trickle(self, conn: socket.socket, data: bytes) -> None:
        """Send ``data`` a byte every :data:`TRICKLE` seconds until it is sent or the test ends."""
        for i in range(len(data)):
            if self.stop.wait(TRICKLE):
                return
            conn.sendall(data[i:i + 1])

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(2)
        self.srv.close()


def ok(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n\r\n" + body)


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Server]]:
    made: list[Server] = []

    def make(answer: Answer) -> Server:
        made.append(Server(answer))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.fixture
def client_for() -> Iterator[Callable[[Server], KubeClient]]:
    made: list[KubeClient] = []

    def make(server: Server) -> KubeClient:
        made.append(KubeClient.for_host(server.url, request_timeout=TIMEOUT, read_retry=NO_READ_RETRY))
        return made[-1]

    yield make
    for c in made:
        c.close()


def timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_a_trickled_body_ends_by_the_request_timeout(serve: Callable[[Answer], Server],
                                                     client_for: Callable[[Server], KubeClient]) -> None:
    """The headers come at once, the body a byte every 0.3 s: 60 bytes would take 18 s."""
    def answer(conn: socket.socket, request: bytes) -> None:
        body = POD.ljust(60)
        conn.sendall(ok(body)[:-len(body)])
        server.trickle(conn, body)

    server = serve(answer)
    client = client_for(server)
    took, exc = timed(lambda: client.get_raw("Pod", "p", "default"))
    assert isinstance(exc, Unavailable), exc
    assert "timed out" in str(exc)
    assert took < TIMEOUT + 0.5, took


def test_trickled_header_lines_end_by_the_request_timeout(serve: Callable[[Answer], Server],
                                                          client_for: Callable[[Server], KubeClient]) -> None:
    """The status line at once, then header lines a byte at a time (http.client reads up to 100 of them)."""
    def answer(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        server.trickle(conn, b"X-Slow: " + b"a" * 200 + b"\r\n")

    server = serve(answer)
    client = client_for(server)
    took, exc = timed(lambda: client.get_raw("Pod", "p", "default"))
    assert isinstance(exc, Unavailable), exc
    # urllib3 re-sends a read once after a timeout (kdesched.kube.config.TRANSPORT_RETRIES), with
    # the timeout anew, as before: two attempts, each ended by the timeout (before: 60 s each)
    assert len(server.requests) == 2
    assert took < 2 * TIMEOUT + 0.5, took


def test_a_trickled_list_page_ends_by_the_request_timeout(serve: Callable[[Answer], Server],
                                                          client_for: Callable[[Server], KubeClient]) -> None:
    def answer(conn: socket.socket, request: bytes) -> None:
        body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"},
                           "items": [json.loads(POD)] * 3}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        server.trickle(conn, f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")

    server = serve(answer)
    client = client_for(server)
    took, exc = timed(lambda: client.list_all(resource_for("Pod"), namespace="default"))
    assert isinstance(exc, Unavailable), exc
    assert took < TIMEOUT + 0.5, took


def test_a_kept_alive_connection_is_reused_after_a_bounded_read(serve: Callable[[Answer], Server],
                                                                client_for: Callable[[Server], KubeClient]) -> None:
    """Reads that answer at once: each is read whole, over one connection; a read coming after the
    first one's deadline would have passed is not cut off by the socket timeout it left behind."""
    server = serve(lambda conn, request: conn.sendall(ok(POD)))
    client = client_for(server)
    first = client.get_raw("Pod", "p", "default")
    time.sleep(TIMEOUT + 0.2)  # past the first read's deadline
    second = client.get_raw("Pod", "p", "default")
    assert first is not None and second is not None and second["metadata"]["uid"] == "u1"
    assert server.connections == 1 and len(server.requests) == 2


def test_a_slow_but_whole_answer_within_the_timeout_is_read(serve: Callable[[Answer], Server],
                                                            client_for: Callable[[Server], KubeClient]) -> None:
    def answer(conn: socket.socket, request: bytes) -> None:
        body = POD
        conn.sendall(ok(body)[:-len(body)])
        time.sleep(TIMEOUT / 2)
        conn.sendall(body)

    server = serve(answer)
    obj = client_for(server).get_raw("Pod", "p", "default")
    assert obj is not None and obj["metadata"]["name"] == "p"


def test_a_watch_is_not_bounded_by_the_request_timeout(serve: Callable[[Answer], Server],
                                                       client_for: Callable[[Server], KubeClient]) -> None:
    """Events further apart than the request timeout (a quiet kind): the stream is read on."""
    def answer(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(2):
            if server.stop.wait(TIMEOUT + 0.3):
                return
            line = json.dumps({"type": "ADDED", "object": {**json.loads(POD), "metadata": {
                "name": f"p{i}", "namespace": "default", "resourceVersion": str(6 + i)}}}).encode() + b"\n"
            conn.sendall(f"{len(line):x}\r\n".encode() + line + b"\r\n")
        conn.sendall(b"0\r\n\r\n")

    server = serve(answer)
    client = client_for(server)
    events = list(client.watch(resource_for("Pod"), resource_version="5", timeout_seconds=10))
    assert [obj["metadata"]["name"] for _, obj in events] == ["p0", "p1"]


LEASE = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": "l", "namespace": "default", "resourceVersion": "5"}, "spec": {}}

WRITES: dict[str, Callable[[KubeClient], object]] = {
    "PUT a Lease": lambda c: c.replace_raw("Lease", LEASE),
    "POST an object": lambda c: c.create_raw("Lease", LEASE),
    "PATCH an object": lambda c: c.merge_patch("Lease", "l", "default", {"metadata": {"labels": {"a": "b"}}}),
    "POST an Event": lambda c: c.post_event(namespace="default", name="p", uid="u1", reason="Test", note="n"),
}


@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
def test_a_write_whose_answer_trickles_ends_by_the_request_timeout(
        serve: Callable[[Answer], Server], client_for: Callable[[Server], KubeClient],
        write: Callable[[KubeClient], object]) -> None:
    """A ledger PUT, a Lease renewal, an Event: the headers at once, the body a byte every 0.3 s.
    Before, only reads were bounded whole, and a trickling proxy held a write (and the run behind
    it) for as long as it trickled: 60 bytes, 18 s. The answer is lost (Unavailable), as a cut
    connection's is: the callers read back what a lost write did."""
    def answer(conn: socket.socket, request: bytes) -> None:
        body = json.dumps(LEASE).encode().ljust(60 * 3)
        conn.sendall(ok(body)[:-len(body)])
        server.trickle(conn, body)

    server = serve(answer)
    client = client_for(server)
    took, exc = timed(lambda: write(client))
    assert isinstance(exc, Unavailable), exc
    assert took < TIMEOUT + 0.5, took
    assert len(server.requests) == 1  # sent once: a write whose answer is lost is not sent again here


def test_an_eviction_with_a_deadline_ends_by_it_however_its_answer_trickles(
        serve: Callable[[Answer], Server], client_for: Callable[[Server], KubeClient]) -> None:
    """An admission's eviction (a deadline: the API server's ?timeout= and this client's wait are
    what is left of it): its answer trickling past the deadline is cut at the deadline's wait."""
    from kdesched.kube.deadline import Deadline

    def answer(conn: socket.socket, request: bytes) -> None:
        body = b'{"kind": "Status", "apiVersion": "v1", "status": "Success"}'.ljust(60 * 3)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n")
        server.trickle(conn, body)

    server = serve(answer)
    client = client_for(server)
    deadline = Deadline(time.monotonic() + 2.5)
    took, exc = timed(lambda: client.evict_pod("default", "p", uid="u1", grace_period_seconds=None,
                                               annotations={}, deadline=deadline))
    assert isinstance(exc, Unavailable), exc
    assert took < 2.5 + 1.0, took

"""The alert brake's read turns every failure into ``AlertsReading.error``, never an exception
(docs/safety.md "Fail closed"): the brake then holds (or, with ``failClosed: false``, says so). Before,
something on the port that does not speak HTTP (BadStatusLine) or an answer cut off mid-chunk
(IncompleteRead), neither an OSError, escaped: serve dropped the event and ``kdesched run`` crashed.
And the timeout is one deadline for the whole request: before, a server that trickled its header lines
held the read for as long as it trickled."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kdesched.admission.alerts import AlertReason, judge, parse_alert_brake
from kdesched.kube.prometheus import query_instant, read_alerts


def _serve(answer: Callable[[socket.socket], None], *, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def loop() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            try:
                with conn:
                    conn.settimeout(5)
                    with tls.wrap_socket(conn, server_side=True) if tls is not None else conn as c:
                        c.recv(65536)
                        answer(c)
            except OSError:
                pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield f"{'https' if tls else 'http'}://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join(2)
    srv.close()


@pytest.fixture
def garbage() -> Iterator[str]:
    """Something on the port that does not speak HTTP (a wrong port, a TLS/gRPC listener, a broken proxy)."""
    yield from _serve(lambda c: c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n"))


@pytest.fixture
def cut_chunked() -> Iterator[str]:
    """A chunked answer whose connection drops mid-chunk (a proxy or Prometheus restarting)."""
    def answer(c: socket.socket) -> None:
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"400\r\n{\"status\":\"success\",\"data\":{\"alerts\":[")
    yield from _serve(answer)


ON = {"enabled": True, "alertFilterRegexp": "^EtcdMembersDown$"}


def test_a_non_http_answer_is_a_held_reading_not_an_exception(garbage: str) -> None:
    reading = read_alerts(garbage, timeout=2.0)  # raises http.client.BadStatusLine today
    assert reading.error
    assert judge(reading, parse_alert_brake({**ON, "url": garbage})).reason is AlertReason.UNREADABLE


def test_a_cut_chunked_answer_is_a_held_reading_not_an_exception(cut_chunked: str) -> None:
    reading = read_alerts(cut_chunked, timeout=2.0)  # raises http.client.IncompleteRead today
    assert reading.error
    assert judge(reading, parse_alert_brake({**ON, "url": cut_chunked})).reason is AlertReason.UNREADABLE


def _trickle(head: bytes, pieces: list[bytes], every: float) -> Callable[[socket.socket], None]:
    """Send ``head``, then one piece every ``every`` seconds (each well within the socket timeout),
    until the client hangs up."""
    def answer(c: socket.socket) -> None:
        c.sendall(head)
        for piece in pieces:
            time.sleep(every)
            c.sendall(piece)  # raises once the client is gone: the server thread ends with it
    return answer


# 10 s of an answer that never stops arriving: twenty header lines, one every 0.5 s; or the status
# line itself, a byte every 0.5 s
HEADER_LINES = _trickle(b"HTTP/1.1 200 OK\r\n", [b"X-Slow-%d: 1\r\n" % i for i in range(20)], 0.5)
STATUS_BYTES = _trickle(b"", [bytes([b]) for b in b"HTTP/1.1 200 OK\r\n"] * 2, 0.5)


@pytest.fixture(params=[HEADER_LINES, STATUS_BYTES], ids=["header-lines", "status-line-bytes"])
def trickling_head(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(request.param)


@pytest.mark.parametrize("read, setting", [
    (lambda url: read_alerts(url, timeout=1.0).error, "kdesched.alertBrake.timeoutSeconds"),
    (lambda url: query_instant(url, "up", timeout=1.0).error, "kdesched.usage.prometheusTimeoutSeconds"),
], ids=["alerts", "usage-query"])
def test_timeout_bounds_a_trickled_head_too(trickling_head: str, read: Callable[[str], str], setting: str) -> None:
    """timeoutSeconds bounds the whole request: before, each header line reset the socket timeout
    and the read lasted as long as the server trickled (10 s here, or hours)."""
    started = time.monotonic()
    error = read(trickling_head)
    took = time.monotonic() - started
    assert error == f"Prometheus at {trickling_head} did not answer within 1s ({setting})", error
    assert took < 3.0, f"the read took {took:.1f}s with a 1 s timeout"



@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, str]:
    """A server context and the CA file (a self-signed certificate for 127.0.0.1)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


def test_https_answers_and_trickled_heads_over_tls(tls: tuple[ssl.SSLContext, str]) -> None:
    """The deadline's connection classes serve https too (the handshake, then the bounded reads)."""
    context, ca = tls
    body = b'{"status":"success","data":{"alerts":[{"labels":{"alertname":"X"},"state":"firing"}]}}'
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server = _serve(lambda c: c.sendall(ok), tls=context)
    url = next(server)
    try:
        reading = read_alerts(url, ca_file=ca, timeout=2.0)
        assert (reading.error, [a.name for a in reading.alerts]) == ("", ["X"])
    finally:
        next(server, None)
    server = _serve(HEADER_LINES, tls=context)
    url = next(server)
    try:
        started = time.monotonic()
        reading = read_alerts(url, ca_file=ca, timeout=1.0)
        assert reading.error == f"Prometheus at {url} did not answer within 1s (kdesched.alertBrake.timeoutSeconds)"
        assert time.monotonic() - started < 3.0
    finally:
        next(server, None)

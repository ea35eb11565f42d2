"""The alert brake's read turns every failure into ``AlertsReading.error``, never an exception
(docs/safety.md "Fail closed"): the brake then holds (or, with ``failClosed: false``, says so). Before,
something on the port that does not speak HTTP (BadStatusLine) or an answer cut off mid-chunk
(IncompleteRead), neither an OSError, escaped: serve dropped the event and ``kdesched run`` crashed."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from kdesched.admission.alerts import AlertReason, judge, parse_alert_brake
from kdesched.kube.prometheus import read_alerts


def _serve(answer: Callable[[socket.socket], None]) -> Iterator[str]:
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
            with conn:
                try:
                    conn.recv(65536)
                    answer(conn)
                except OSError:
                    pass

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
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

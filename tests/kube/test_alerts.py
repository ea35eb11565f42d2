"""``read_alerts`` (kdesched.kube.prometheus) against a loopback stub: every fault is an
``AlertsReading.error`` naming the URL, never an exception (the brake then fails closed)."""

from __future__ import annotations

import base64
import socket
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from kdesched.admission.alerts import AlertReason, judge, parse_alert_brake
from kdesched.kube.client import KubeClient
from kdesched.kube.prometheus import read_alerts, settle_query
from kdesched.kube.usage import read_brake_alerts
from kdesched.model.alerts import Alert

from tests.fakeapi import FakeApiServer
from tests.promstub import pause, reply

ALERTS = {"status": "success", "data": {"alerts": [
    {"labels": {"alertname": "EtcdMembersDown", "job": "etcd", "severity": "critical"},
     "annotations": {"summary": "etcd cluster members are down"}, "state": "firing",
     "activeAt": "2026-11-28T02:00:00.000000001Z", "value": "1e+00"},
    {"labels": {"alertname": "CephHealthWarning"}, "annotations": {}, "state": "pending",
     "activeAt": "2026-11-28T02:01:00Z", "value": "1e+00"}]}}
RECENT = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"alertname": "CephHealthError", "alertstate": "firing"}, "value": [1764295200.0, "12.5"]}]}}


def routes(alerts: Any = ALERTS, recent: Any = RECENT) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/api/v1/alerts"):
            reply(200, alerts)(h)
        elif h.path.startswith("/api/v1/query?"):
            reply(200, recent)(h)
        else:
            reply(404, b"404 page not found", "text/plain")(h)
    return answer


def test_reads_the_alerts_with_the_token(stub: Any) -> None:
    server = stub(routes())
    r = read_alerts(server.url + "/", token="s3cret")
    assert r.error == "" and r.source == server.url and r.recent == {}
    assert r.alerts == (
        Alert("EtcdMembersDown", "firing", {"alertname": "EtcdMembersDown", "job": "etcd", "severity": "critical"},
              "2026-11-28T02:00:00.000000001Z", "etcd cluster members are down"),
        Alert("CephHealthWarning", "pending", {"alertname": "CephHealthWarning"}, "2026-11-28T02:01:00Z", ""))
    assert [p for p, _ in server.requests] == ["/api/v1/alerts"]  # no settle time: one request
    assert server.requests[0][1]["Authorization"] == "Bearer s3cret"


def test_path_prefix_and_token_file(stub: Any, tmp_path: Path) -> None:
    def answer(h: BaseHTTPRequestHandler) -> None:  # Prometheus behind a path prefix (--web.route-prefix)
        if not h.path.startswith("/prom/"):
            return reply(404, b"404 page not found", "text/plain")(h)
        h.path = h.path.removeprefix("/prom")
        return routes()(h)
    server = stub(answer)
    token = tmp_path / "token"
    token.write_text("rotated-1\n")
    r = read_alerts(server.url + "/prom", token_file=str(token))
    assert r.error == "" and len(r.alerts) == 2
    token.write_text("rotated-2\n")  # read again on every call
    read_alerts(server.url + "/prom", token_file=str(token))
    assert [h["Authorization"] for _, h in server.requests] == ["Bearer rotated-1", "Bearer rotated-2"]
    missing = read_alerts(server.url, token_file=str(tmp_path / "absent"))
    assert missing.error.startswith(f"cannot read the token file {str(tmp_path / 'absent')!r} "
                                    f"(kdesched.alertBrake.tokenFile) for Prometheus at {server.url}: ")


def test_settle_time_asks_prometheus_when_alerts_were_last_active(stub: Any) -> None:
    server = stub(routes())
    r = read_alerts(server.url, settle_seconds=60)
    assert r.error == "" and r.recent == {("CephHealthError", "firing"): 12.5}
    path = server.requests[1][0]
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["query"] == [settle_query(60)]
    assert settle_query(60) == "time() - max by (alertname, alertstate) (max_over_time(timestamp(ALERTS)[60s:1s]))"
    assert settle_query(3600).endswith("[3600s:30s]))")
    s = parse_alert_brake({"enabled": True, "url": server.url, "alertFilterRegexp": "^Ceph", "settleSeconds": 60})
    v = judge(r, s)
    assert v.holds and v.reason is AlertReason.SETTLING and v.retry_after == 47.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_prometheus_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = read_alerts(url, timeout=2)
    assert r.error.startswith(f"cannot reach Prometheus at {url}: ") and "refused" in r.error.lower()
    assert r.alerts == () and r.source == url


def test_prometheus_slow(stub: Any) -> None:
    def slow(h: BaseHTTPRequestHandler) -> None:
        pause(h, 1.5)
        routes()(h)
    server = stub(slow)
    started = time.monotonic()
    r = read_alerts(server.url, timeout=0.3)
    assert time.monotonic() - started < 1.4
    assert r.error == f"Prometheus at {server.url} did not answer within 0.3s (kdesched.alertBrake.timeoutSeconds)"


def test_a_trickling_answer_has_the_deadline_too(stub: Any) -> None:
    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        try:
            for _ in range(40):  # one byte every 0.1 s: each read is quick, the answer is not
                h.wfile.write(b" ")
                h.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass
    server = stub(trickle)
    started = time.monotonic()
    r = read_alerts(server.url, timeout=0.5)
    assert time.monotonic() - started < 1.5
    assert r.error == f"Prometheus at {server.url} did not answer within 0.5s (kdesched.alertBrake.timeoutSeconds)"


def test_huge_body_is_bounded(stub: Any) -> None:
    def huge(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        try:
            for _ in range(64):
                h.wfile.write(b" " * 65536)
        except OSError:
            pass  # the client stopped reading: what is asserted
    server = stub(huge)
    r = read_alerts(server.url, max_bytes=1 << 20)
    assert r.error == f"Prometheus at {server.url} answered more than 1 MiB to GET /api/v1/alerts"


@pytest.mark.parametrize("code, body, message", [
    (503, b"Service Unavailable", "answered HTTP 503 to GET /api/v1/alerts: Service Unavailable"),
    (500, {"status": "error", "errorType": "internal", "error": "boom"},
     "answered HTTP 500 to GET /api/v1/alerts: internal: boom"),
    (404, b"404 page not found", "answered HTTP 404 to GET /api/v1/alerts: 404 page not found"),
    (200, b"<html>proxy login</html>", "answered HTTP 200 with something that is not JSON: '<html>proxy login</html>'"),
    (200, [1, 2], "answered a JSON list, not an object"),
    (200, {"status": "error", "error": "nope"}, "GET /api/v1/alerts: status: the request did not succeed"),
    (200, {"status": "success", "data": {"alerts": {}}}, "GET /api/v1/alerts: data.alerts: must be a list"),
], ids=["503", "500-json", "404", "not-json", "json-list", "status-error", "alerts-not-list"])
def test_bad_answers_are_errors_and_the_brake_holds(stub: Any, code: int, body: Any, message: str) -> None:
    server = stub(reply(code, body))
    r = read_alerts(server.url)
    assert message in r.error and server.url in r.error, r.error
    assert r.alerts == ()
    s = parse_alert_brake({"enabled": True, "url": server.url, "alertFilterRegexp": "^X$"})
    assert judge(r, s).reason is AlertReason.UNREADABLE


@pytest.mark.parametrize("entry, why", [
    ({"labels": {}, "state": "firing"}, "data.alerts[1].labels.alertname: is missing"),
    ({"labels": {"alertname": "X"}, "state": "inactive"}, "data.alerts[1].state: must be firing or pending, got 'inactive'"),
    ({"labels": {"alertname": 1}, "state": "firing"}, "data.alerts[1].labels: must be a map of strings"),
    ({"labels": "EtcdMembersDown", "state": "firing"}, "data.alerts[1].labels: must be a map of strings"),
], ids=["no-name", "bad-state", "bad-labels", "labels-not-object"])
def test_an_entry_that_cannot_be_read_is_skipped_and_named(stub: Any, entry: Any, why: str) -> None:
    """One malformed entry no longer hides the rest of the answer: EtcdMembersDown, firing and
    readable, holds evictions even with failClosed: false (before, the whole answer was an error and
    the brake opened)."""
    firing = ALERTS["data"]["alerts"][0]
    server = stub(reply(200, {"status": "success", "data": {"alerts": [firing, entry]}}))
    r = read_alerts(server.url)
    assert r.error == "" and [a.name for a in r.alerts] == ["EtcdMembersDown"]
    assert r.skipped == (f"GET /api/v1/alerts: {why}",)
    for fail_closed in (True, False):
        s = parse_alert_brake({"enabled": True, "url": server.url, "alertFilterRegexp": "^EtcdMembersDown$",
                               "failClosed": fail_closed})
        v = judge(r, s)
        assert v.holds and v.reason is AlertReason.FIRING and v.alerts == ("EtcdMembersDown",)
        assert f"1 of 2 alert entries answered by Prometheus at {server.url} cannot be read" in v.message
    # the same entry beside no readable match: unreadable, the brake holds (fail closed)
    alone = read_alerts(stub(reply(200, {"status": "success", "data": {"alerts": [entry]}})).url)
    s = parse_alert_brake({"enabled": True, "url": server.url, "alertFilterRegexp": "^EtcdMembersDown$"})
    assert alone.alerts == () and judge(alone, s).reason is AlertReason.UNREADABLE


def test_skipped_entries_do_not_stop_the_settle_query(stub: Any) -> None:
    bad = {"status": "success", "data": {"alerts": [{"labels": {"alertname": "X"}, "state": 2}]}}
    r = read_alerts(stub(routes(alerts=bad)).url, settle_seconds=30)
    assert r.error == "" and len(r.skipped) == 1 and r.recent == {("CephHealthError", "firing"): 12.5}


def test_a_failed_settle_query_is_an_error_too(stub: Any) -> None:
    bad = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "x"]}]}}
    r = read_alerts(stub(routes(recent=bad)).url, settle_seconds=30)
    assert "the settle query: data.result[0]: must name an alertname and alertstate" in r.error
    assert len(r.alerts) == 2  # what was read is kept: a firing match still says "firing"
    server = stub(routes(recent={"status": "error", "errorType": "bad_data", "error": "parse error"}))
    assert "status: the request did not succeed (status 'error': parse error)" in read_alerts(
        server.url, settle_seconds=30).error


def test_https_with_a_missing_ca_file_names_the_setting(tmp_path: Path) -> None:
    r = read_alerts("https://127.0.0.1:1", ca_file=str(tmp_path / "nope.pem"))
    assert r.error.startswith(f"cannot load the CA for Prometheus at https://127.0.0.1:1 (kdesched.alertBrake.caFile "
                              f"{str(tmp_path / 'nope.pem')!r}): ")



def test_token_from_the_secret_as_metrics_providers(fake_api: FakeApiServer, kube: KubeClient, stub: Any,
                                                    tmp_path: Path) -> None:
    server = stub(routes())
    fake_api.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok", "namespace": "mon"},
                  "data": {"prometheusAuthToken": base64.b64encode(b"abc\n").decode()}})
    r = read_brake_alerts(kube, server.url, secret_namespace="mon", secret_name="tok", settle_seconds=30)
    assert r.error == "" and len(r.alerts) == 2 and r.recent
    assert [h["Authorization"] for _, h in server.requests] == ["Bearer abc", "Bearer abc"]
    token = tmp_path / "token"
    token.write_text("from-file")
    assert read_brake_alerts(kube, server.url, token_file=str(token)).error == ""
    assert server.requests[-1][1]["Authorization"] == "Bearer from-file"
    missing = read_brake_alerts(kube, server.url + "/", secret_namespace="mon", secret_name="nope")
    assert missing.error == "the Prometheus token Secret mon/nope does not exist (kdesched.alertBrake.authToken)"
    assert missing.source == server.url and len(server.requests) == 3  # Prometheus not asked

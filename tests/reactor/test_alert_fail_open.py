"""docs/safety.md, "Fail closed": "An operator who prefers that a Prometheus outage not pause
descheduling sets `failClosed: false`; each run then still reports that it could not read the
alerts." Before, judge() built that sentence and nothing carried it: evictions ran during a
monitoring outage with no trace in the report or the log."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kdesched.kube.client import KubeClient

from tests.fakeapi import FakeApiServer
from tests.promstub import Stub, reply
from tests.reactor.test_controls import THU_10, Clock, evicted, pool, reactor, results, taint_event


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fail_open_run_reports_that_it_could_not_read_the_alerts(fake_api: FakeApiServer, kube: KubeClient,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    pool(fake_api, 3)
    url = f"http://127.0.0.1:{_closed_port()}"
    r = reactor(kube, Clock(THU_10), alertBrake={"enabled": True, "url": url, "alertFilterRegexp": "^EtcdMembersDown$",
                                                 "failClosed": False, "timeoutSeconds": 1})
    with caplog.at_level(logging.DEBUG):
        out = taint_event(r, "p0")
    assert evicted(fake_api) == ["web-7d9f8-0"]  # failClosed: false lets it go, as documented
    assert any("cannot read the alerts" in n and url in n for n in out["notes"]), out["notes"]
    assert any("cannot read the alerts" in rec.getMessage() and rec.levelno == logging.WARNING
               for rec in caplog.records)


FIRING = {"labels": {"alertname": "EtcdMembersDown"}, "state": "firing"}
MALFORMED = {"labels": "EtcdMembersDown", "state": "firing"}  # labels not an object


@pytest.fixture
def prometheus() -> Iterator[Callable[[list[Any]], str]]:
    made: list[Stub] = []

    def serve(alerts: list[Any]) -> str:
        made.append(Stub(reply(200, {"status": "success", "data": {"alerts": alerts}})))
        return made[-1].url

    yield serve
    for s in made:
        s.stop()


def test_fail_open_still_holds_on_a_readable_firing_alert_beside_a_malformed_one(
        fake_api: FakeApiServer, kube: KubeClient, prometheus: Callable[[list[Any]], str]) -> None:
    """Before, the malformed entry made the whole answer unreadable and failClosed: false evicted
    while EtcdMembersDown, readable and matching, was firing in the same answer."""
    pool(fake_api, 3)
    url = prometheus([MALFORMED, FIRING])
    r = reactor(kube, Clock(THU_10), alertBrake={"enabled": True, "url": url, "alertFilterRegexp": "^EtcdMembersDown$",
                                                 "failClosed": False, "timeoutSeconds": 2})
    out = taint_event(r, "p0")
    assert results(out) == [("web-7d9f8-0", "deferred")] and evicted(fake_api) == []
    message = out["evictions"][0]["message"]
    assert "EtcdMembersDown" in message and "1 of 2 alert entries" in message, message


def test_fail_open_with_only_malformed_entries_goes_on_and_says_what_was_skipped(
        fake_api: FakeApiServer, kube: KubeClient, prometheus: Callable[[list[Any]], str],
        caplog: pytest.LogCaptureFixture) -> None:
    pool(fake_api, 3)
    url = prometheus([MALFORMED, {"labels": {"alertname": "Watchdog"}, "state": "firing"}])
    r = reactor(kube, Clock(THU_10), alertBrake={"enabled": True, "url": url, "alertFilterRegexp": "^EtcdMembersDown$",
                                                 "failClosed": False, "timeoutSeconds": 2})
    with caplog.at_level(logging.WARNING):
        out = taint_event(r, "p0")
    assert evicted(fake_api) == ["web-7d9f8-0"]
    want = "1 of 2 alert entries answered by Prometheus at"
    why = "data.alerts[0].labels: must be a map of strings"
    assert any(want in n and why in n for n in out["notes"]), out["notes"]
    assert any(want in rec.getMessage() and why in rec.getMessage() for rec in caplog.records)

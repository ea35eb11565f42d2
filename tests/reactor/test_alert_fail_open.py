"""docs/safety.md, "Fail closed": "An operator who prefers that a Prometheus outage not pause
descheduling sets `failClosed: false`; each run then still reports that it could not read the
alerts." Before, judge() built that sentence and nothing carried it: evictions ran during a
monitoring outage with no trace in the report or the log."""

from __future__ import annotations

import logging
import socket

import pytest
from kdesched.kube.client import KubeClient

from tests.fakeapi import FakeApiServer
from tests.reactor.test_controls import THU_10, Clock, evicted, pool, reactor, taint_event


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

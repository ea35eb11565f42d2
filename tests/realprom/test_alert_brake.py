"""The alert brake against a REAL Prometheus (2.42): alerting rules evaluated every second, read by
kdesched's own client (:func:`kdesched.kube.prometheus.read_alerts`) over ``GET /api/v1/alerts``,
judged by :func:`kdesched.admission.alerts.judge`.

* an alert that fires (``vector(1) > 0``, ``for: 0s``) holds evictions when the filter names it,
  and does not when the filter names something else (or ignores it, kured's default mode);
* an alert that stays pending (``for: 1h``) does not hold unless ``alertFiringOnly: false``;
* an alert that resolves holds for ``settleSeconds`` after, measured by Prometheus' own clock
  (the settle query over ``ALERTS``), then lets evictions go;
* Prometheus stopped: the brake holds (fail closed), naming the URL.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.admission.alerts import AlertReason, AlertsReading, judge, parse_alert_brake
from kdesched.kube.prometheus import read_alerts

from tests.realprom.prometheus import Prometheus, PromKit, check_rules

RESOLVES_AFTER = 4.0  # seconds after the server starts that KdeschedTestResolves stops firing


def rules(tmp_path: Path, resolve_at: float) -> Path:
    path = tmp_path / "alert-brake-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "kdesched-alert-brake", "rules": [
        {"alert": "KdeschedTestFiring", "expr": "vector(1) > 0", "for": "0s",
         "labels": {"severity": "critical"}, "annotations": {"summary": "always firing"}},
        {"alert": "KdeschedTestPending", "expr": "vector(1) > 0", "for": "1h"},
        {"alert": "KdeschedTestResolves", "expr": f"vector(time()) < {resolve_at:.3f}", "for": "0s"},
    ]}]}, sort_keys=False))
    return path


@pytest.fixture
def alerting(prom_kit: PromKit, tmp_path: Path) -> Iterator[Prometheus]:
    path = rules(tmp_path, time.time() + RESOLVES_AFTER)
    done = check_rules(prom_kit, path)
    assert done.returncode == 0, done.stdout + done.stderr
    with Prometheus(prom_kit, rule_files=[path]) as prom:
        yield prom


def settings(url: str, **raw: Any) -> Any:
    return parse_alert_brake({"enabled": True, "url": url, **raw})


def wait_reading(url: str, ok: Any, timeout: float = 30.0, **kwargs: Any) -> AlertsReading:
    deadline = time.monotonic() + timeout
    while True:
        r = read_alerts(url, timeout=5, **kwargs)
        if ok(r):
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"not satisfied within {timeout:.0f}s: {r}")
        time.sleep(0.25)


def states(r: AlertsReading) -> dict[str, str]:
    return {a.name: a.state for a in r.alerts}


def test_firing_holds_pending_does_not_filter_decides(alerting: Prometheus) -> None:
    url = alerting.url
    r = wait_reading(url, lambda r: states(r).get("KdeschedTestFiring") == "firing"
                     and states(r).get("KdeschedTestPending") == "pending")
    assert r.error == "" and r.source == url
    firing = next(a for a in r.alerts if a.name == "KdeschedTestFiring")
    assert firing.labels["severity"] == "critical" and firing.summary == "always firing" and firing.active_at

    held = judge(r, settings(url, alertFilterRegexp="^KdeschedTestFiring$"))
    assert held.holds and held.reason is AlertReason.FIRING and held.alerts == ("KdeschedTestFiring",)
    assert f"in Prometheus at {url} matching" in held.message
    assert judge(r, settings(url, alertFilterRegexp="TestFiring")).alerts == ("KdeschedTestFiring",)  # searched

    assert not judge(r, settings(url, alertFilterRegexp="^NoSuchAlert$")).holds
    assert not judge(r, settings(url, alertFilterRegexp="^KdeschedTestPending$")).holds  # pending: firing-only
    pending = judge(r, settings(url, alertFilterRegexp="^KdeschedTestPending$", alertFiringOnly=False))
    assert pending.holds and pending.alerts == ("KdeschedTestPending",)
    # kured's default mode: the filter names the alerts to ignore
    assert not judge(r, settings(url, alertFilterRegexp="^KdeschedTest", alertFilterMatchOnly=False)).holds
    assert judge(r, settings(url, alertFilterRegexp="^KdeschedTestPending$", alertFilterMatchOnly=False)).holds


def test_resolved_alert_settles_by_prometheus_clock(alerting: Prometheus) -> None:
    url = alerting.url
    s = settings(url, alertFilterRegexp="^KdeschedTestResolves$", settleSeconds=60)
    wait_reading(url, lambda r: states(r).get("KdeschedTestResolves") == "firing")
    assert judge(read_alerts(url, settle_seconds=60), s).reason is AlertReason.FIRING
    r = wait_reading(url, lambda r: "KdeschedTestResolves" not in states(r), settle_seconds=60)
    assert r.error == ""
    ago = r.recent[("KdeschedTestResolves", "firing")]
    assert 0 <= ago < 15, r.recent
    v = judge(r, s)
    assert v.holds and v.reason is AlertReason.SETTLING and v.alerts == ("KdeschedTestResolves",)
    assert v.retry_after is not None and 45 < v.retry_after <= 60
    # the always-firing alert is in ``recent`` too, but the filter does not name it; a short
    # settle time has passed a few seconds later and evictions go on
    short = settings(url, alertFilterRegexp="^KdeschedTestResolves$", settleSeconds=1)
    later = wait_reading(url, lambda r: r.recent.get(("KdeschedTestResolves", "firing"), 0) > 2, settle_seconds=30)
    assert not judge(later, short).holds


def test_prometheus_stopped_holds_every_eviction(alerting: Prometheus) -> None:
    url = alerting.url
    s = settings(url, alertFilterRegexp="^NoSuchAlert$")
    r = wait_reading(url, lambda r: bool(r.alerts))
    assert not judge(r, s).holds
    alerting.stop()
    down = read_alerts(url, timeout=2)
    assert down.error.startswith(f"cannot reach Prometheus at {url}: ")
    v = judge(down, s)
    assert v.holds and v.reason is AlertReason.UNREADABLE and v.retry_after == 30.0
    assert f"no eviction is admitted until Prometheus at {url} answers (alertBrake.failClosed)" in v.message
    assert not judge(down, settings(url, alertFilterRegexp="^NoSuchAlert$", failClosed=False)).holds


def test_a_taint_run_is_deferred_while_the_named_alert_fires(alerting: Prometheus) -> None:
    """The brake as the pipeline asks it (kdesched.admission.pipeline, control 2): a Reactor with
    ``kdesched.alertBrake`` on, a taint event, the real Prometheus: every eviction is deferred with
    the alert's name while it fires, and goes once the filter names an alert that does not fire."""
    from kdesched.kube.client import KubeClient
    from kdesched.reactor.events import routing as ev
    from kdesched.reactor.events.requests import Trigger, parse_node_event
    from kdesched.reactor.run.runner import Reactor
    from kdesched.reactor.run.settings import parse_settings

    from tests.builders import node_obj, pod_obj
    from tests.fakeapi import FakeApiServer
    from tests.reactor.policies import default_like_policy

    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    wait_reading(alerting.url, lambda r: "KdeschedTestFiring" in states(r))
    with FakeApiServer() as fake, KubeClient.for_host(fake.url) as client:
        fake.add(node_obj("gpu-1", taints=[taint]), node_obj("n2"), node_obj("n3"),
                 pod_obj("web-0", "gpu-1", owner_name="web-7d9f8"))

        def taint_run(name: str, filt: str) -> dict[str, Any]:
            block = {"settleSeconds": 0.05, "alertBrake": {"enabled": True, "url": alerting.url,
                                                           "alertFilterRegexp": filt}}
            policy = default_like_policy(kdesched=block)
            r = Reactor(policy, parse_settings(block, policy=policy, env={}), client, identity=name)
            try:
                return r.node_event(Trigger(ev.TAINTS_CHANGED, name), parse_node_event({"node": "gpu-1"}))
            finally:
                r.stop.set()
                r.continuations.cancel_all()

        held = taint_run("held", "^KdeschedTestFiring$")
        assert [e["result"] for e in held["evictions"]] == ["deferred"]
        assert "KdeschedTestFiring" in held["evictions"][0]["message"]
        assert not [r for r in fake.requests("POST") if r.path.endswith("/eviction")]
        free = taint_run("free", "^NoSuchAlert$")
        assert [e["result"] for e in free["evictions"]] == ["evicted"]

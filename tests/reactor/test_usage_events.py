"""The event path on measured usage (issue 23): a ``node.added`` event runs LowNodeUtilization with
``metricsUtilization.source: KubernetesMetrics``; the reactor reads ``metrics.k8s.io`` from the fake
API server for the run, and applies the young-node rule (``kdesched.usage.youngNodeSeconds``): a
node created moments ago whose reading says "empty" while the scheduler already filled it with pods
counts at its requests, so it is not taken for a destination."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.kube.test_usage import node_metric, pod_metric
from tests.reactor.policies import make_policy
from tests.reactor.reactors import STARTED


def reactor(kube: KubeClient, young: float | None = None) -> Reactor:
    block: dict[str, Any] = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.1, "safety": {"enabled": False}}
    if young is not None:
        block["usage"] = {"youngNodeSeconds": young}
    policy = make_policy({"LowNodeUtilization": {
        "thresholds": {"cpu": 30}, "targetThresholds": {"cpu": 50},
        "metricsUtilization": {"source": "KubernetesMetrics"}}}, kdesched=block)
    r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="test-instance")
    STARTED.append(r)
    return r


def cluster(fake: FakeApiServer) -> None:
    """n1 measured 80 % busy (over); n2 at 40 % (neither); n3 joined a minute ago, measured empty,
    but the scheduler has already bound 6 pods of 400m to it (60 % requested)."""
    fresh = node_obj("n3")
    fresh["metadata"]["creationTimestamp"] = (datetime.now(UTC) - timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake.add(node_obj("n1"), node_obj("n2"), fresh,
             *(pod_obj(f"p{i}", "n1", cpu="400m", owner_name=f"rs-{i}") for i in range(1, 9)),
             *(pod_obj(f"q{i}", "n3", cpu="400m", owner_name=f"new-{i}") for i in range(1, 7)),
             node_metric("n1", "3200m"), node_metric("n2", "1600m"), node_metric("n3", "0"),
             *(pod_metric(f"p{i}", "399m") for i in range(1, 9)),
             *(pod_metric(f"q{i}", "0") for i in range(1, 7)))


def evicted(fake: FakeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in fake.requests("POST") if r.path.endswith("/eviction")]


def test_young_node_counts_at_its_requests(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    out = reactor(kube).node_event(Trigger(ev.NODE_ADDED, "a1"), parse_node_event({"node": "n3"}))
    assert out["evictions"] == [] and evicted(fake_api) == []
    assert any(r.path == "/apis/metrics.k8s.io/v1beta1/nodes" for r in fake_api.requests("GET"))


def test_without_the_rule_the_single_reading_makes_it_a_destination(fake_api: FakeApiServer,
                                                                    kube: KubeClient) -> None:
    cluster(fake_api)
    out = reactor(kube, young=0).node_event(Trigger(ev.NODE_ADDED, "a1"), parse_node_event({"node": "n3"}))
    assert out["evictions"] and evicted(fake_api)
    assert "on measured usage, KubernetesMetrics" in out["evictions"][0]["reason"]


def test_metrics_server_down_on_an_event_evicts_nothing_and_says_why(fake_api: FakeApiServer,
                                                                      kube: KubeClient) -> None:
    cluster(fake_api)
    fake_api.metrics_served = False
    out = reactor(kube, young=0).node_event(Trigger(ev.NODE_ADDED, "a1"), parse_node_event({"node": "n3"}))
    assert out["evictions"] == [] and evicted(fake_api) == []
    assert any("metrics.k8s.io is not served" in e for e in out["errors"]), out


def test_serve_keeps_a_moving_average_when_the_policy_balances_on_kubernetes_metrics(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """ReactorServer starts the collector while it leads (upstream's collector: every 5 s)."""
    from kdesched.reactor.serve.server import ReactorServer
    from kdesched_functions.manual import create_serve_app

    from tests.reactor.test_serve import wait_for

    cluster(fake_api)
    r = reactor(kube)
    srv = ReactorServer(r.policy, r.settings, kube, host="127.0.0.1", port=0, app_factory=create_serve_app,
                        sweep_interval_seconds=0, identity="usage-test", watch_timeout_seconds=2)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(srv.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: srv.reactor.readings.metrics_collector is not None and srv.reactor.readings.metrics_collector.collections)
        assert srv.reactor.readings.metrics_collector.smoothed()["n1"]["cpu"] == 3200  # type: ignore[union-attr]
    finally:
        srv.shutdown()
        thread.join(timeout=20)
    assert result == [0]

"""Live usage reads (issue 23): ``metrics.k8s.io`` from the in-repo fake API server (the real v1.24
API server cannot serve that group without an aggregated metrics-server), and the Prometheus
client's faults against a stub HTTP server on loopback: down, slow, 5xx, a failed query, not JSON,
an empty result. Every fault comes back as an error naming the URL and what failed, never as an
exception; ``kdesched run`` then reports the strategy error and evicts nothing on usage."""

from __future__ import annotations

import base64
import json
import socket
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main
from kdesched.kube.client import KubeClient
from kdesched.kube.prometheus import query_instant
from kdesched.kube.usage import NODE_METRICS_PATH, POD_METRICS_PATH, read_metrics, read_usage
from kdesched.policy.load import policy_from_mapping
from kdesched.policy.usage import UsageSettings

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.promstub import pause, reply
from tests.test_cli_run import kubeconfig

QUERY = "instance:node_cpu:rate:sum"


def node_metric(name: str, cpu: str, memory: str = "1Gi") -> dict[str, Any]:
    return {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "NodeMetrics", "metadata": {"name": name},
            "timestamp": "2026-11-01T12:00:00Z", "window": "20.049s", "usage": {"cpu": cpu, "memory": memory}}


def pod_metric(name: str, cpu: str, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics",
            "metadata": {"name": name, "namespace": namespace}, "timestamp": "2026-11-01T12:00:00Z", "window": "20s",
            "containers": [{"name": "a", "usage": {"cpu": cpu, "memory": "5Mi"}},
                           {"name": "b", "usage": {"cpu": "1m", "memory": "1Mi"}}]}


def policy(source: str, **top: Any) -> Any:
    if source == "Prometheus":
        args = {"thresholds": {"MetricResource": 30}, "targetThresholds": {"MetricResource": 50},
                "metricsUtilization": {"source": "Prometheus", "prometheus": {"query": QUERY}}}
    elif source == "KubernetesMetrics":
        args = {"thresholds": {"cpu": 30}, "targetThresholds": {"cpu": 50},
                "metricsUtilization": {"source": "KubernetesMetrics"}}
    else:
        args = {"thresholds": {"cpu": 30}, "targetThresholds": {"cpu": 50}}
    return policy_from_mapping({
        "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", **top,
        "profiles": [{"name": "p", "pluginConfig": [{"name": "LowNodeUtilization", "args": args}],
                      "plugins": {"balance": {"enabled": ["LowNodeUtilization"]}}}]}, "test.yaml")


KM = {"metricsProviders": [{"source": "KubernetesMetrics"}]}


# --------------------------------------------------------------------------- metrics.k8s.io


def test_read_metrics_lists_nodes_and_pods(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_metric("n1", "2500m", "2Gi"), node_metric("n2", "100m"), pod_metric("p1", "300m"))
    readings = read_metrics(kube)
    assert readings.error == ""
    assert {n: r.usage for n, r in readings.nodes.items()} == {
        "n1": {"cpu": 2500, "memory": 2 << 30}, "n2": {"cpu": 100, "memory": 1 << 30}}
    assert readings.nodes["n1"].window_seconds == pytest.approx(20.049)
    assert readings.pods == {("default", "p1"): {"cpu": 301, "memory": 6 << 20}}  # containers summed
    assert readings.pods_read
    assert [r.path for r in fake_api.requests("GET")] == [NODE_METRICS_PATH, POD_METRICS_PATH]


def test_metrics_not_served_is_an_error_not_an_exception(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.metrics_served = False
    readings = read_metrics(kube)
    assert readings.error == (f"metrics.k8s.io is not served by the API server at {kube.host} "
                              "(404: is metrics-server installed?)")


def test_metrics_unavailable_503_is_retried_briefly_then_an_error(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.script("GET", NODE_METRICS_PATH, [503, 503, 503])
    readings = read_metrics(kube)
    assert readings.error.startswith(f"reading metrics.k8s.io from {kube.host} failed (HTTP 503)")
    assert len(fake_api.requests("GET", NODE_METRICS_PATH)) == 3


def test_usage_is_read_only_when_the_policy_asks(fake_api: FakeApiServer, kube: KubeClient) -> None:
    assert read_usage(kube, policy("requests"), UsageSettings(), event_path=False) is None
    assert fake_api.requests("GET") == []
    usage = read_usage(kube, policy("KubernetesMetrics", **KM), UsageSettings(), event_path=True)
    assert usage is not None and usage.metrics is not None and usage.young_node_seconds == 300
    assert read_usage(kube, policy("KubernetesMetrics", **KM), UsageSettings(), event_path=False).young_node_seconds is None  # type: ignore[union-attr]


def cluster(fake: FakeApiServer) -> None:
    """n1: 8 pods of 400m (80 % requested); n2, n3 empty."""
    fake.add(node_obj("n1"), node_obj("n2"), node_obj("n3"),
             *(pod_obj(f"p{i}", "n1", cpu="400m", owner_name="rs-a") for i in range(1, 9)))


def run_cli(fake: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
            policy_text: str) -> tuple[int, dict[str, Any], str]:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text)
    code = main(["run", "--dry-run", "--policy", str(path), "--kubeconfig", kubeconfig(tmp_path / "kc", fake.url),
                 "-o", "json"])
    cap = capsys.readouterr()
    return code, json.loads(cap.out), cap.err


KM_POLICY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
metricsProviders: [{source: KubernetesMetrics}]
profiles:
- name: p
  pluginConfig:
  - name: LowNodeUtilization
    args: {thresholds: {cpu: 30}, targetThresholds: {cpu: 50}, metricsUtilization: {source: KubernetesMetrics}}
  plugins: {balance: {enabled: [LowNodeUtilization]}}
"""


def test_run_decides_on_live_metrics(fake_api: FakeApiServer, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """n1 measures 3000m, each pod 500m+1m: cap 2000m -> 3000, 2499, 1998: two evictions (on
    requests it would be three)."""
    cluster(fake_api)
    fake_api.add(node_metric("n1", "3"), node_metric("n2", "200m"), node_metric("n3", "100m"),
                 *(pod_metric(f"p{i}", "500m") for i in range(1, 9)))
    code, report, err = run_cli(fake_api, tmp_path, capsys, KM_POLICY)
    assert code == 0, err
    assert [e["pod"] for e in report["evictions"]] == ["p1", "p2"]


def test_run_without_metrics_server_reports_and_evicts_nothing(fake_api: FakeApiServer, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    cluster(fake_api)
    fake_api.metrics_served = False
    code, report, err = run_cli(fake_api, tmp_path, capsys, KM_POLICY)
    assert code == 1
    assert report["evictions"] == []
    assert "metrics.k8s.io is not served by the API server" in err and "Traceback" not in err


def test_run_with_a_node_missing_from_metrics_decides_nothing(fake_api: FakeApiServer, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    cluster(fake_api)
    fake_api.add(node_metric("n1", "3"), node_metric("n2", "200m"), *(pod_metric(f"p{i}", "500m") for i in range(1, 9)))
    code, report, err = run_cli(fake_api, tmp_path, capsys, KM_POLICY)
    assert code == 1 and report["evictions"] == []
    assert "no NodeMetrics for node(s) n3" in err


# --------------------------------------------------------------------------- Prometheus faults (stub server)


VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"instance": "n1"}, "value": [1762000000.5, "0.9"]},
    {"metric": {"instance": "n2"}, "value": [1762000000.5, "0.1"]}]}}


def test_query_sends_the_query_and_token(stub: Any) -> None:
    server = stub(reply(200, VECTOR))
    r = query_instant(server.url + "/", QUERY, token="s3cret")
    assert r.error == "" and r.values == {"n1": 0.9, "n2": 0.1} and r.query == QUERY and r.source == server.url
    path, headers = server.requests[0]
    assert path == "/api/v1/query?query=instance%3Anode_cpu%3Arate%3Asum"
    assert headers["Authorization"] == "Bearer s3cret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_prometheus_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = query_instant(url, QUERY, timeout=2)
    assert r.error.startswith(f"cannot reach Prometheus at {url}: ") and "refused" in r.error.lower()


def test_prometheus_slow(stub: Any) -> None:
    def slow(h: BaseHTTPRequestHandler) -> None:
        pause(h, 1.5)
        reply(200, VECTOR)(h)
    server = stub(slow)
    r = query_instant(server.url, QUERY, timeout=0.3)
    assert r.error == f"Prometheus at {server.url} did not answer within 0.3s (kdesched.usage.prometheusTimeoutSeconds)"


@pytest.mark.parametrize("code, body, message", [
    (503, b"Service Unavailable", "answered HTTP 503 to the query: Service Unavailable"),
    (500, {"status": "error", "errorType": "internal", "error": "boom"}, "answered HTTP 500 to the query: internal: boom"),
    (400, {"status": "error", "errorType": "bad_data", "error": "invalid parameter \"query\": parse error"},
     "answered HTTP 400 to the query: bad_data: invalid parameter \"query\": parse error"),
    (200, b"<html>proxy login</html>", "answered HTTP 200 with something that is not JSON: '<html>proxy login</html>'"),
    (200, {"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}},
     "answer: data.resultType: must be \"vector\""),
], ids=["503", "500-json", "400-bad-query", "not-json", "scalar"])
def test_prometheus_bad_answers(stub: Any, code: int, body: Any, message: str) -> None:
    server = stub(reply(code, body))
    r = query_instant(server.url, QUERY)
    assert message in r.error, r.error
    assert r.values == {}


def test_token_from_the_secret(fake_api: FakeApiServer, kube: KubeClient, stub: Any) -> None:
    server = stub(reply(200, VECTOR))
    fake_api.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok", "namespace": "mon"},
                  "data": {"prometheusAuthToken": base64.b64encode(b"abc\n").decode()}})
    p = policy("Prometheus", metricsProviders=[{"source": "Prometheus", "prometheus": {
        "url": server.url, "authToken": {"secretReference": {"namespace": "mon", "name": "tok"}}}}])
    usage = read_usage(kube, p, UsageSettings(), event_path=False)
    assert usage is not None and usage.for_query(QUERY).values == {"n1": 0.9, "n2": 0.1}  # type: ignore[union-attr]
    assert server.requests[0][1]["Authorization"] == "Bearer abc"


def test_missing_secret_is_an_error_for_the_query(fake_api: FakeApiServer, kube: KubeClient, stub: Any) -> None:
    server = stub(reply(200, VECTOR))
    p = policy("Prometheus", metricsProviders=[{"source": "Prometheus", "prometheus": {
        "url": server.url, "authToken": {"secretReference": {"namespace": "mon", "name": "tok"}}}}])
    usage = read_usage(kube, p, UsageSettings(), event_path=False)
    assert usage is not None
    assert usage.for_query(QUERY).error == "the Prometheus token Secret mon/tok does not exist"  # type: ignore[union-attr]
    assert server.requests == []


def test_run_with_prometheus_down_reports_the_url(fake_api: FakeApiServer, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cluster(fake_api)
    url = f"http://127.0.0.1:{free_port()}"
    text = f"""\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
metricsProviders: [{{source: Prometheus, prometheus: {{url: "{url}"}}}}]
kdesched: {{usage: {{prometheusTimeoutSeconds: 2}}}}
profiles:
- name: p
  pluginConfig:
  - name: LowNodeUtilization
    args:
      thresholds: {{MetricResource: 30}}
      targetThresholds: {{MetricResource: 50}}
      metricsUtilization: {{source: Prometheus, prometheus: {{query: "{QUERY}"}}}}
  plugins: {{balance: {{enabled: [LowNodeUtilization]}}}}
"""
    code, report, err = run_cli(fake_api, tmp_path, capsys, text)
    assert code == 1 and report["evictions"] == []
    assert f"cannot reach Prometheus at {url}" in err and "Traceback" not in err


def test_metrics_forbidden_names_the_status(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The shipped RBAC grants no metrics.k8s.io (docs/deploying.md): the report says 403."""
    fake_api.script("GET", NODE_METRICS_PATH, [403])
    readings = read_metrics(kube)
    assert readings.error.startswith(f"reading metrics.k8s.io from {kube.host} failed (HTTP 403)")
    assert len(fake_api.requests("GET", NODE_METRICS_PATH)) == 1  # not retried: RBAC does not heal


# --------------------------------------------------------------------------- serve's moving average


def test_ewma_is_upstreams() -> None:
    """metricscollector.go: floor(0.9 * prev + 0.1 * value), in milli-units."""
    from kdesched.model.usage import ewma, smoothed_usage

    assert ewma(1000, 2000) == 1100
    assert ewma(1100, 2000) == 1190
    assert ewma(999, 0) == 899  # floor(899.1)
    assert smoothed_usage({"cpu": 1190, "memory": 1_000_500}) == {"cpu": 1190, "memory": 1001}  # bytes, rounded up


def test_collector_averages_node_readings(fake_api: FakeApiServer, kube: KubeClient) -> None:
    from kdesched.kube.usage import MetricsCollector

    collector = MetricsCollector(kube)
    assert collector.smoothed() == {}
    fake_api.add(node_metric("n1", "1000m", "1000"), node_metric("n2", "500m", "1000"))
    assert collector.collect()
    assert collector.smoothed() == {"n1": {"cpu": 1000, "memory": 1000}, "n2": {"cpu": 500, "memory": 1000}}
    fake_api.update(node_metric("n1", "2000m", "2000"))
    fake_api.delete("NodeMetrics", "n2")  # missing from one reading: keeps its value (upstream)
    assert collector.collect()
    assert collector.smoothed() == {"n1": {"cpu": 1100, "memory": 1100}, "n2": {"cpu": 500, "memory": 1000}}
    fake_api.metrics_served = False
    assert not collector.collect() and "404" in collector.last_error
    assert collector.smoothed()["n1"] == {"cpu": 1100, "memory": 1100}


def test_read_usage_decides_on_the_average(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A fresh reading of 3200m after three of 1000m: serve's runs see the average, 1220m."""
    from kdesched.kube.usage import MetricsCollector

    collector = MetricsCollector(kube)
    fake_api.add(node_metric("n1", "1000m"), pod_metric("p1", "100m"))
    for _ in range(3):
        collector.collect()
    fake_api.update(node_metric("n1", "3200m"))
    collector.collect()
    usage = read_usage(kube, policy("KubernetesMetrics", **KM), UsageSettings(), event_path=True, collector=collector)
    assert usage is not None and usage.metrics is not None
    assert usage.metrics.nodes["n1"].usage["cpu"] == 1220
    assert "moving average, 4 collection(s)" in usage.metrics.source
    fresh = read_usage(kube, policy("KubernetesMetrics", **KM), UsageSettings(), event_path=True)
    assert fresh.metrics.nodes["n1"].usage["cpu"] == 3200  # type: ignore[union-attr]

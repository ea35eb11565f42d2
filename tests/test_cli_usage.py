"""``kdesched simulate --usage FILE``: measured usage from files, so every metrics decision can be
seen offline (issue 23). Each accepted format (NodeMetricsList, PodMetricsList, a Prometheus
instant-query answer) and the refusals of a broken file (exit 2, one line naming the file and the
item/field, no traceback). Everything runs through ``main()`` with real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main

from tests.builders import node_obj, pod_obj, ts

QUERY = "instance:node_cpu:rate:sum"

KM_POLICY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
metricsProviders:
- source: KubernetesMetrics
profiles:
- name: usage
  pluginConfig:
  - name: LowNodeUtilization
    args:
      thresholds: {cpu: 30}
      targetThresholds: {cpu: 50}
      metricsUtilization: {source: KubernetesMetrics}
  plugins: {balance: {enabled: [LowNodeUtilization]}}
"""

PROM_POLICY = f"""\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
metricsProviders:
- source: Prometheus
  prometheus: {{url: "https://prometheus.example:9090"}}
profiles:
- name: usage
  pluginConfig:
  - name: LowNodeUtilization
    args:
      thresholds: {{MetricResource: 30}}
      targetThresholds: {{MetricResource: 50}}
      metricsUtilization: {{source: Prometheus, prometheus: {{query: "{QUERY}"}}}}
  plugins: {{balance: {{enabled: [LowNodeUtilization]}}}}
"""


def cluster() -> dict[str, Any]:
    """n1 with 8 pods of 400m (80 % requested), n2 and n3 empty: on requests, n1 is over."""
    items = [node_obj("n1"), node_obj("n2"), node_obj("n3")]
    items += [pod_obj(f"p{i}", "n1", cpu="400m", owner_name="rs-a") for i in range(1, 9)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def node_metrics(**cpu: str) -> dict[str, Any]:
    return {"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": [
        {"metadata": {"name": n}, "timestamp": ts(), "window": "20.05s", "usage": {"cpu": c, "memory": "1Gi"}}
        for n, c in cpu.items()]}


def pod_metrics(cpu: str) -> dict[str, Any]:
    return {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": [
        {"metadata": {"name": f"p{i}", "namespace": "default"}, "timestamp": ts(), "window": "20s",
         "containers": [{"name": "c", "usage": {"cpu": cpu, "memory": "10Mi"}}]} for i in range(1, 9)]}


def prom_answer(**values: float) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": n}, "value": [1762000000.0, str(v)]} for n, v in values.items()]}}


def write(tmp_path: Path, name: str, content: Any) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, *usage: Any,
             names: tuple[str, ...] = ()) -> tuple[int, dict[str, Any] | None, str]:
    argv = ["simulate", write(tmp_path, "cluster.json", cluster()), "--policy", write(tmp_path, "p.yaml", policy),
            "-o", "json"]
    for i, doc in enumerate(usage):
        argv += ["--usage", write(tmp_path, names[i] if i < len(names) else f"usage{i}.json", doc)]
    code = main(argv)
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if cap.out.strip() else None), cap.err


def evicted(report: dict[str, Any] | None) -> list[str]:
    assert report is not None
    return [e["pod"] for e in report["evictions"]]


def test_kubernetes_metrics_from_node_and_pod_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Measured: n1 uses 3000m (75 %) and each pod 300m. Cap 2000m: 3000 -> 2700 -> 2400 -> 2100 ->
    1800: 4 pods (on requests, 3200m -> 2000m, it would be 3)."""
    code, report, err = simulate(tmp_path, capsys, KM_POLICY, node_metrics(n1="3", n2="100m", n3="50m"),
                                 pod_metrics("300m"))
    assert code == 0, err
    assert evicted(report) == ["p1", "p2", "p3", "p4"]
    assert "on measured usage, KubernetesMetrics" in report["evictions"][0]["reason"]  # type: ignore[index]
    notes = report["summary"]["notes"]  # type: ignore[index]
    assert any(n.startswith("measured usage (KubernetesMetrics): 3 node(s), 8 pod(s) from ") for n in notes), notes


def test_measured_usage_below_target_evicts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, err = simulate(tmp_path, capsys, KM_POLICY, node_metrics(n1="1", n2="100m", n3="50m"),
                                 pod_metrics("100m"))
    assert code == 0, err
    assert evicted(report) == []


def test_prometheus_answer_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """n1 at 0.9 -> 90 % > 50; n2, n3 under 30: no per-pod value, so one eviction from n1."""
    code, report, err = simulate(tmp_path, capsys, PROM_POLICY, prom_answer(n1=0.9, n2=0.1, n3=0.2))
    assert code == 0, err
    assert evicted(report) == ["p1"]
    assert f"on Prometheus query '{QUERY}'" in report["evictions"][0]["reason"]  # type: ignore[index]


def test_node_missing_from_the_answer_is_an_error_and_no_decision(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, err = simulate(tmp_path, capsys, PROM_POLICY, prom_answer(n1=0.9, n2=0.1), names=("q.json",))
    assert code == 1
    assert evicted(report) == []
    assert "has no sample for node(s) n3" in err and "q.json" in err
    assert "Traceback" not in err


def test_no_usage_given_is_a_strategy_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, err = simulate(tmp_path, capsys, KM_POLICY)
    assert code == 1 and evicted(report) == []
    assert "no metrics.k8s.io readings were given (simulate: --usage" in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "u.json: is not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ([1, 2], "u.json: must be a JSON object: a NodeMetricsList, a PodMetricsList or a Prometheus query answer"),
    ({"kind": "PodList", "items": [{"kind": "Pod"}]}, "u.json: kind: expected NodeMetricsList or PodMetricsList"),
    ({"kind": "NodeMetricsList", "items": [{"metadata": {"name": "n1"}, "usage": {"cpu": "lots"}}]},
     "u.json: items[0].usage.cpu: 'lots' is not a quantity"),
    ({"kind": "NodeMetricsList", "items": [{"metadata": {}, "usage": {}}]},
     "u.json: items[0].metadata.name: must be a non-empty string"),
    ({"kind": "PodMetricsList", "items": [{"metadata": {"name": "p"}, "containers": []}]},
     "u.json: items[0].metadata.namespace: must be a non-empty string"),
    ({"status": "error", "errorType": "bad_data", "error": "parse error"},
     "u.json: status: the query did not succeed (status 'error': parse error)"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}},
     "u.json: data.resultType: must be \"vector\""),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"node": "n1"}, "value": [1, "0.5"]}]}},
     "u.json: data.result[0].metric.instance: is missing"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"instance": "n1"}, "value": [1, "x"]}]}},
     "u.json: data.result[0].value[1]: must be a number as a string, got 'x'"),
], ids=["not-json", "not-object", "other-kind", "bad-quantity", "no-name", "pod-no-namespace", "query-error",
        "matrix", "no-instance", "bad-value"])
def test_bad_usage_file_exits_2_naming_file_and_field(content: Any, message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, report, err = simulate(tmp_path, capsys, KM_POLICY, content, names=("u.json",))
    assert code == 2 and report is None
    assert message in err, err
    assert "Traceback" not in err


def test_missing_usage_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", write(tmp_path, "cluster.json", cluster()), "--policy", write(tmp_path, "p.yaml", KM_POLICY),
            "--usage", str(tmp_path / "nope.json")]
    assert main(argv) == 2
    assert "nope.json: no such file" in capsys.readouterr().err


def test_help_documents_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "--usage FILE" in out and "repeatable" in out and "NodeMetricsList" in out


def test_kdesched_usage_block_is_validated_naming_each_field(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = KM_POLICY + "kdesched:\n  usage: {prometheusTimeoutSeconds: 0, youngNodeSeconds: -1, prometheusCAFile: 3, ca: x}\n"
    code = main(["policy", "validate", write(tmp_path, "p.yaml", bad)])
    err = capsys.readouterr().err
    assert code == 2
    for message in ("kdesched.usage.prometheusTimeoutSeconds: must be a number > 0, got 0",
                    "kdesched.usage.youngNodeSeconds: must be a number >= 0, got -1",
                    "kdesched.usage.prometheusCAFile: must be a file path, got 3",
                    ("kdesched.usage.ca: unknown field (known: prometheusCAFile, prometheusTimeoutSeconds, "
                    "youngNodeSeconds)")):
        assert message in err, err


def test_policy_without_the_provider_of_its_source_is_refused(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    no_provider = PROM_POLICY.replace('metricsProviders:\n- source: Prometheus\n  prometheus: {url: "https://prometheus.example:9090"}\n', "")
    code = main(["policy", "validate", write(tmp_path, "p.yaml", no_provider)])
    err = capsys.readouterr().err
    assert code == 2
    assert ('profile "usage" / plugin LowNodeUtilization: metricsUtilization.source: Prometheus needs a '
            "metricsProviders entry with source: Prometheus") in err


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "low-node-utilization"


@pytest.mark.parametrize("policy, usage, expected", [
    ("policy-kubernetes-metrics.yaml", ("nodes.json", "pods.json"),
     ["report-29012345-8kx2p", "report-29012345-9mz4q", "web-5d8f7c9b6-x2kq9"]),
    ("policy-prometheus.yaml", ("prometheus.json",), ["report-29012345-8kx2p"]),
], ids=["kubernetes-metrics", "prometheus"])
def test_bundled_metrics_examples(policy: str, usage: tuple[str, ...], expected: list[str],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """examples/low-node-utilization/metrics: what their comments promise (4 pods leave on requests)."""
    argv = ["simulate", str(EXAMPLE / "cluster.yaml"), "--policy", str(EXAMPLE / "metrics" / policy), "-o", "json"]
    for name in usage:
        argv += ["--usage", str(EXAMPLE / "metrics" / name)]
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["summary"]["errors"] == []
    assert evicted(report) == expected


def test_simulate_event_applies_the_young_node_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """n3 joined 60 s before the clock and measures 0m, but 6 pods of 400m are already bound to it
    (60 % requested); n2 is at 40 %. Parity path: n3 looks empty and takes pods. Event path
    (node.added on n3): it counts at its requests, nothing is underutilized, nothing moves."""
    doc = cluster()
    young = doc["items"][2]
    young["metadata"]["creationTimestamp"] = "2026-11-01T11:59:00Z"
    doc["items"] += [pod_obj(f"q{i}", "n3", cpu="400m", owner_name="rs-new") for i in range(1, 7)]
    base = ["simulate", write(tmp_path, "cluster.json", doc), "--policy", write(tmp_path, "p.yaml", KM_POLICY),
            "--usage", write(tmp_path, "n.json", node_metrics(n1="3", n2="1600m", n3="0")),
            "--usage", write(tmp_path, "p.json", pod_metrics("300m")), "--now", "2026-11-01T12:00:00Z", "-o", "json"]
    assert main(base) == 0
    parity = json.loads(capsys.readouterr().out)["evictions"]
    assert parity and {e["strategy"] for e in parity} == {"LowNodeUtilization"}
    assert main([*base, "--event", "dev.kdesched.node.added:n3"]) == 0
    report = json.loads(capsys.readouterr().out)
    # the event also runs RemoveDuplicates (the event map); LowNodeUtilization moves nothing
    assert [e for e in report["evictions"] if e["strategy"] == "LowNodeUtilization"] == []
    assert report["summary"]["errors"] == []

"""LowNodeUtilization with ``metricsUtilization.source: Prometheus`` against a REAL Prometheus (issue
23): known per-node series scraped from a small exporter this test serves, kdesched's own client
(:mod:`kdesched.kube.prometheus`) querying the server's HTTP API, and ``kdesched run`` deciding
against the in-repo fake API server. Decisions equal the hand-computed expectation; a node missing
from the result, and a query the server refuses, are errors naming the URL, with nothing evicted.

The exporter labels each series with ``node``; scraping sets ``instance`` to the exporter's address,
so the query does what a cluster's query does to name nodes in ``instance`` (upstream reads that
label): ``label_replace(..., "instance", "$1", "node", "(.*)")``.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main
from kdesched.kube.prometheus import query_instant

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.realprom.prometheus import Prometheus
from tests.test_cli_run import kubeconfig

QUERY = 'label_replace(max by (node) (kdesched_test_node_busy), "instance", "$1", "node", "(.*)")'


class Exporter:
    """``/metrics`` with one gauge per node; ``values`` may be changed while it runs."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = dict(values)
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                lines = ["# TYPE kdesched_test_node_busy gauge"]
                lines += [f'kdesched_test_node_busy{{node="{n}"}} {v}' for n, v in sorted(exporter.values.items())]
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scraped(prometheus: Prometheus) -> Iterator[Any]:
    """``scraped(values)``: the server scrapes an exporter of those per-node values, once they answer."""
    exporters: list[Exporter] = []

    def make(values: dict[str, float]) -> Prometheus:
        exporter = Exporter(values)
        exporters.append(exporter)
        prometheus.scrape(exporter.address)
        prometheus.wait_for(QUERY, check=lambda result: len(result) == len(values))
        return prometheus

    yield make
    for exporter in exporters:
        exporter.stop()


def test_kdesched_client_reads_the_per_node_values(scraped: Any) -> None:
    prom = scraped({"n1": 0.9, "n2": 0.15, "n3": 0.2})
    readings = query_instant(prom.url, QUERY)
    assert readings.error == ""
    assert readings.values == {"n1": 0.9, "n2": 0.15, "n3": 0.2}


def policy(url: str, limit: int | None = None) -> str:
    limits = f"\n      evictionLimits: {{node: {limit}}}" if limit is not None else ""
    return f"""\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
metricsProviders: [{{source: Prometheus, prometheus: {{url: "{url}"}}}}]
profiles:
- name: usage
  pluginConfig:
  - name: LowNodeUtilization
    args:
      thresholds: {{MetricResource: 30}}
      targetThresholds: {{MetricResource: 50}}
      metricsUtilization: {{source: Prometheus, prometheus: {{query: {json.dumps(QUERY)}}}}}{limits}
  plugins: {{balance: {{enabled: [LowNodeUtilization]}}}}
"""


def run(fake: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        text: str) -> tuple[int, dict[str, Any], str]:
    """``kdesched run --dry-run`` on n1 (8 pods of 400m: 80 % requested), n2 and n3 (empty)."""
    fake.add(node_obj("n1"), node_obj("n2"), node_obj("n3"),
             *(pod_obj(f"p{i}", "n1", cpu="400m", owner_name="rs-a") for i in range(1, 9)))
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    code = main(["run", "--dry-run", "--policy", str(path), "--kubeconfig", kubeconfig(tmp_path / "kc", fake.url),
                 "-o", "json"])
    cap = capsys.readouterr()
    return code, json.loads(cap.out), cap.err


@pytest.mark.parametrize("limit, expected", [
    (None, ["p1"]),  # n1 90 % > 50, n2 15 % and n3 20 % <= 30: no per-pod value -> one eviction from n1
    (3, ["p1", "p2", "p3"]),  # evictionLimits.node 3: up to 3 from n1 (upstream, "with more evictions")
], ids=["one-per-node", "node-limit-3"])
def test_run_decides_on_the_real_prometheus(scraped: Any, fake_api: FakeApiServer, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str], limit: int | None,
                                            expected: list[str]) -> None:
    prom = scraped({"n1": 0.9, "n2": 0.15, "n3": 0.2})
    code, report, err = run(fake_api, tmp_path, capsys, policy(prom.url, limit))
    assert code == 0, err
    assert [e["pod"] for e in report["evictions"]] == expected
    assert "on Prometheus query" in report["evictions"][0]["reason"]


def test_measured_low_usage_evicts_nothing_although_requests_are_high(
        scraped: Any, fake_api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On requests n1 is 80 % busy; Prometheus says 40 %: not over the 50 % target, nothing moves."""
    prom = scraped({"n1": 0.4, "n2": 0.15, "n3": 0.2})
    code, report, err = run(fake_api, tmp_path, capsys, policy(prom.url))
    assert code == 0, err
    assert report["evictions"] == []


def test_node_missing_from_the_result_decides_nothing(scraped: Any, fake_api: FakeApiServer, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Never half the data: n3 has no series -> the strategy fails naming the server, evicts nothing."""
    prom = scraped({"n1": 0.9, "n2": 0.15})
    code, report, err = run(fake_api, tmp_path, capsys, policy(prom.url))
    assert code == 1
    assert report["evictions"] == []
    assert f"{prom.url} has no sample for node(s) n3 (label instance)" in err
    assert "Traceback" not in err


def test_a_query_the_server_refuses_is_an_error(prometheus: Prometheus) -> None:
    readings = query_instant(prometheus.url, "max by (node (kdesched_test_node_busy)")
    assert readings.error.startswith(f"Prometheus at {prometheus.url} answered HTTP 400 to the query: bad_data: ")
    assert "parse error" in readings.error


def test_every_openshift_preset_query_parses(prometheus: Prometheus) -> None:
    """The devActualUtilizationProfile queries kdesched writes into LowNodeUtilization are PromQL a
    real server accepts (empty results: this server holds none of those series)."""
    from kdesched.policy.presets import ACTUAL_UTILIZATION_QUERIES

    for name, query in ACTUAL_UTILIZATION_QUERIES.items():
        readings = query_instant(prometheus.url, query)
        assert readings.error == "", (name, readings.error)
        assert readings.values == {}

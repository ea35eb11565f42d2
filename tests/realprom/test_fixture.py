"""The real Prometheus fixture does what the tier's tests rely on: backfilled series answer instant
queries at their timestamps, and a loopback target added after start is scraped.

Why: tests/realprom/prometheus.py is shared (the dashboard test scrapes ``serve``; metrics-based
utilization reads backfilled per-node series); a fixture that silently served nothing would turn
every such test into a check of an empty result.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.realprom.prometheus import PromError, Prometheus


def test_backfilled_series_answer_at_their_timestamps(prometheus_backfilled: Callable[[str], Prometheus]) -> None:
    t0 = int(time.time()) - 600
    lines = ["# TYPE node_usage gauge"]
    for step in range(5):
        lines += [f'node_usage{{node="a"}} {0.25 * step} {t0 + 60 * step}',
                  f'node_usage{{node="b"}} {1 - 0.25 * step} {t0 + 60 * step}']
    prom = prometheus_backfilled("\n".join(lines) + "\n")
    assert prom.value('node_usage{node="a"}', at=t0 + 240) == 1.0
    assert prom.value('node_usage{node="b"}', at=t0 + 240) == 0.0
    by_node = {r["metric"]["node"]: float(r["value"][1]) for r in prom.query("node_usage", at=t0 + 125)}
    assert by_node == {"a": 0.5, "b": 0.5}  # the last sample at or before the evaluation time
    with pytest.raises(PromError, match="parse error"):
        prom.query("node_usage{")


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"# TYPE fixture_probe gauge\nfixture_probe 42\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_target_added_after_start_is_scraped(prometheus: Prometheus, exporter: str) -> None:
    assert prometheus.query("fixture_probe") == []
    prometheus.scrape(exporter, role="probe")
    (sample,) = prometheus.wait_for("fixture_probe")
    assert sample["metric"]["instance"] == exporter and sample["metric"]["role"] == "probe"
    assert float(sample["value"][1]) == 42.0

"""Fixtures of the real Prometheus tier: a ``prometheus`` server per test on a free loopback port
(empty and scraping the targets a test adds, or serving series backfilled from OpenMetrics text), and
the kit (``prometheus`` + ``promtool``) for ``promtool check rules``.

Why: dashboards, alert rules and metrics-based utilization are only as right as the PromQL a real
server accepts and answers (tests/realprom/prometheus.py). Without the binaries the tier is skipped
with one line at the end of the run, unless KDESCHED_REQUIRE_PROMETHEUS=1 (.ci/run sets it after
installing the package) makes that a failure. Tests that also need the real control plane take its
fixtures from tests/realk8s/fixtures.py and carry the ``realk8s`` marker too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.realprom.prometheus import REQUIRE_ENV, SKIP_REASON, Prometheus, PromKit, find_prometheus

HERE = Path(__file__).resolve().parent


def _locate() -> tuple[PromKit | None, str | None]:
    try:
        return find_prometheus(), None
    except RuntimeError as exc:  # KDESCHED_PROMETHEUS names nothing usable
        return None, f"real Prometheus tier: {exc}"


KIT, KIT_ERROR = _locate()
REQUIRED = os.environ.get(REQUIRE_ENV) == "1"
KEEP_LOGS = os.environ.get("KDESCHED_PROM_KEEP_LOGS") == "1"

# Absent binaries (and not required): collect nothing here and say so in ONE line at the end.
SKIPPED = KIT is None and KIT_ERROR is None and not REQUIRED
collect_ignore_glob = ["test_*.py"] if SKIPPED else []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SKIPPED:
        terminalreporter.write_line(SKIP_REASON, yellow=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every test of this folder carries the marker: `-m realprom` runs the tier alone
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realprom)


@pytest.fixture(scope="session")
def prom_kit() -> PromKit:
    """The ``prometheus`` and ``promtool`` binaries (a failure, not a skip, once collected)."""
    if KIT_ERROR:
        pytest.fail(KIT_ERROR)
    if KIT is None:
        pytest.fail(f"{REQUIRE_ENV}=1 but no prometheus: {SKIP_REASON.split(': ', 1)[1]}")
    return KIT


@pytest.fixture
def prometheus(prom_kit: PromKit) -> Iterator[Prometheus]:
    """An empty server scraping nothing yet (``prometheus.scrape("127.0.0.1:PORT")`` adds a target)."""
    with Prometheus(prom_kit, keep_logs=KEEP_LOGS) as prom:
        yield prom


@pytest.fixture
def prometheus_backfilled(prom_kit: PromKit) -> Iterator[Callable[[str], Prometheus]]:
    """A factory: ``prometheus_backfilled(openmetrics_text)`` starts a server whose storage holds
    those samples (timestamps in seconds, within the last 15 days); each is stopped after the test."""
    started: list[Prometheus] = []

    def make(openmetrics_text: str) -> Prometheus:
        prom = Prometheus.backfilled(prom_kit, openmetrics_text, keep_logs=KEEP_LOGS)
        started.append(prom)
        return prom.start()

    try:
        yield make
    finally:
        for prom in started:
            prom.stop()

"""Every query of the shipped dashboard and every alert expression, evaluated on a real Prometheus
that scraped ``kdesched serve`` while it handled a real story on the real control plane.

The story (a taint, as seed story 3, with more to show): node ``gpu-1`` runs ``shop`` (3 replicas)
and ``db`` (2 replicas, a PDB with minAvailable 2); it is tainted ``dedicated=gpu:NoSchedule``.
kdesched evicts ``shop`` one pod at a time (the others paced until each replacement is Ready on
``node-1``) and never tries ``db`` (its PDB allows no disruption: refused by kdesched itself). A
fault proxy (tests/faultproxy.py) answers the first evictions 429 without a PDB cause, as a busy API
server does, until one ends ``throttled``; then the API server answers. Prometheus scrapes serve's
``/metrics`` every second throughout, and loads the shipped rules.

Then, on what Prometheus stored:
- every dashboard query (``$job`` = the scrape job, Grafana's intervals substituted) returns data;
- every metric a query or an alert names is one kdesched's ``/metrics`` served (the exposition
  text, not a list kept by hand), and every label it matches or groups by is on those series;
- every alert rule evaluated without error (``/api/v1/rules``: health ok).
A made-up metric name, a misspelt label, or a panel on a metric serve never exports fails here.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.faultproxy import FaultProxy
from tests.monitoring import (
    Query,
    alert_queries,
    alert_rules,
    dashboard_queries,
    label_names,
    metric_names,
    rule_file_text,
)
from tests.realk8s import fixtures as k8s
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import SKIP_REASON as K8S_SKIP_REASON
from tests.realk8s.controlplane import ControlPlane, Proc
from tests.realk8s.serve_stories import (
    NS,
    Serve,
    leader,
    placement,
    policy_text,
    set_taints,
    set_unschedulable,
    wait_placement,
)
from tests.realprom.prometheus import Prometheus, PromKit

# the real control plane as well: without its kit (and not required), skip in one line
if k8s.BIN_DIR is None and k8s.KIT_ERROR is None and not k8s.REQUIRED:
    pytest.skip(K8S_SKIP_REASON, allow_module_level=True)

pytestmark = pytest.mark.realk8s

# the real control plane's fixtures (one per session, shared with tests/realk8s); the story is set up
# once for the module and the cluster reset after it (not per test: serve keeps running meanwhile)
control_plane, scheduler, controller_manager = k8s.control_plane, k8s.scheduler, k8s.controller_manager

JOB = "kdesched"  # the job name of tests/realprom/prometheus.py's scrape config


def exposition_names(text: str) -> set[str]:
    """The metric names of the samples in a /metrics text."""
    return {m.group(1) for m in re.finditer(r"^([A-Za-z_:][\w:]*)(?:\{| )", text, re.MULTILINE)}


@pytest.fixture(scope="module")
def scraped(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, prom_kit: PromKit,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, str]]:
    """The story run once for the module; yields Prometheus (still scraping serve) and serve's last
    /metrics text."""
    tmp = tmp_path_factory.mktemp("dashboard")
    control_plane.start_kubelet()
    serve: Serve | None = None
    proxy: FaultProxy | None = None
    rules = tmp / "kdesched-rules.yml"
    rules.write_text(rule_file_text())
    prom = Prometheus(prom_kit, rule_files=[rules])
    try:
        c = Cluster(control_plane)
        c.namespace(NS)
        c.node("node-1", unschedulable=True)
        c.node("gpu-1")
        c.deployment("shop", 3, cpu="100m")
        # db opts out of surge-first moves: its PDB (minAvailable 2 of 2) must refuse, for the
        # disruption-budget series the dashboard and the alerts are checked on
        c.deployment("db", 2, cpu="100m", annotations={"kdesched.dev/surge": "false"})
        c.pdb("db", {"app": "db"}, min_available=2)
        wait_placement(control_plane, c, "shop", lambda p: p == {"gpu-1": 3})
        wait_placement(control_plane, c, "db", lambda p: p == {"gpu-1": 2})
        c.wait_pdb_observed("default", "db")
        set_unschedulable(c, "node-1", False)

        policy = tmp / "policy.yaml"
        policy.write_text(policy_text())
        # every eviction answered 429 (no PDB cause: throttled) until the story has shown one
        proxy = FaultProxy(control_plane.url, control_plane.token, control_plane.ca_file, share=1.0, faults=["429"],
                           match=lambda method, path: method == "POST" and path.endswith("/eviction")).start()
        serve = Serve(proxy.kubeconfig(tmp / "kubeconfig"), policy, "dash-a", workdir=tmp).start()
        prom.start()
        prom.scrape(f"127.0.0.1:{serve.port}")
        control_plane.wait_for(lambda: leader(c) == "dash-a" and serve is not None and serve.readyz()[0] == 200,
                               60, what="serve to lead")
        prom.wait_for(f'kdesched_serve_leader{{job="{JOB}"}} == 1', timeout=30)

        set_taints(c, "gpu-1", [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        prom.wait_for('kdesched_pods_evicted_total{result="throttled"}', timeout=60)
        proxy.set_share(0.0)  # the API server answers from now on: the held move goes on
        wait_placement(control_plane, c, "shop", lambda p: p == {"node-1": 3}, timeout=120,
                       what="shop moved off the tainted node")
        # what the story must have shown before the queries mean anything
        prom.wait_for('kdesched_pods_evicted_total{result="success"}', timeout=30)
        prom.wait_for('kdesched_evictions_refused_total{reason="disruption-budget"}', timeout=30)
        prom.wait_for("kdesched_evictions_paced_total", timeout=30)
        prom.wait_for('kdesched_api_requests_total{code="429"}', timeout=30)
        prom.wait_for("kdesched_run_duration_seconds_count > 0", timeout=30)
        # a move is checked by the next run that finds the workload back at its Ready count (a sweep
        # in production, every 900 s): here a run requested over HTTP, as a person or CI would
        request = urllib.request.Request(f"http://127.0.0.1:{serve.port}/", data=b"{}", method="POST", headers={
            "ce-specversion": "1.0", "ce-type": "dev.kdesched.run.requested", "ce-source": "/tests/realprom",
            "ce-id": "dashboard-check-moves", "content-type": "application/json"})
        control_plane.wait_for(lambda: placement(c, "shop") == {"node-1": 3}, 60, what="shop's replacements Ready")
        with urllib.request.urlopen(request, timeout=120) as resp:
            answer = resp.read().decode()
            assert resp.status == 200, answer
        try:
            prom.wait_for('kdesched_moves_total{outcome="achieved"}', timeout=60)
        except AssertionError:
            with urllib.request.urlopen(f"http://127.0.0.1:{serve.port}/metrics", timeout=10) as resp:
                moves = [line for line in resp.read().decode().splitlines() if "moves" in line]
            raise AssertionError(f"no checked move: /metrics {moves}; the run: {answer}") from None
        prom.wait_for("kdesched_move_time_to_ready_seconds_count > 0", timeout=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{serve.port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        yield prom, text
    except BaseException:
        if serve is not None:
            print(serve.log()[-4000:])
        print(prom.tail(40))
        raise
    finally:
        if serve is not None:
            serve.stop()
        if proxy is not None:
            proxy.stop()
        prom.stop()
        control_plane.stop_kubelet()
        control_plane.check_alive()
        control_plane.reset()


@pytest.fixture(scope="module")
def served_names(scraped: tuple[Prometheus, str]) -> set[str]:
    names = exposition_names(scraped[1])
    assert "kdesched_pods_evicted_total" in names  # the text is really serve's /metrics
    return names


DASHBOARD = dashboard_queries({"$job": JOB})
ALERTS = alert_queries()


@pytest.mark.parametrize("query", DASHBOARD, ids=lambda q: q.where)
def test_every_dashboard_query_returns_data(scraped: tuple[Prometheus, str], query: Query) -> None:
    prom, _ = scraped
    result = prom.query(query.expr)
    assert result, f"{query.where}: no data for {query.expr!r}"


@pytest.mark.parametrize("query", DASHBOARD + ALERTS, ids=lambda q: q.where)
def test_every_query_names_only_metrics_serve_exports(scraped: tuple[Prometheus, str], served_names: set[str],
                                                      query: Query) -> None:
    prom, _ = scraped
    names = metric_names(query.expr)
    assert names, f"{query.where}: no metric in {query.expr!r}"
    unknown = names - served_names
    assert not unknown, f"{query.where}: {sorted(unknown)} are not on kdesched serve's /metrics"
    # the labels it matches or groups by are on those series (or are Prometheus' target labels)
    present = {"job", "instance"}
    for name in names:
        series = prom.series(name)
        assert series, f"{query.where}: Prometheus stored no series of {name}"
        present |= {label for s in series for label in s}
    missing = label_names(query.expr) - present
    assert not missing, f"{query.where}: labels {sorted(missing)} are on no series of {sorted(names)}"


def test_every_alert_rule_evaluates(scraped: tuple[Prometheus, str]) -> None:
    prom, _ = scraped
    want = {rule["alert"] for rule in alert_rules()}
    # rules are evaluated every second: wait for a round after the story (each rule evaluated once)
    result = prom.wait_for("count(kdesched_build_info)", timeout=5)
    assert result
    deadline = time.monotonic() + 30
    rules = prom.rules()
    while time.monotonic() < deadline and not all(r.get("lastEvaluation", "").startswith("2") for r in rules):
        time.sleep(0.5)
        rules = prom.rules()
    by_name = {str(r["name"]): r for r in rules}
    assert want <= set(by_name), f"Prometheus loaded {sorted(by_name)}, the file has {sorted(want)}"
    for name in sorted(want):
        rule = by_name[name]
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
    # nothing is wrong in this story: a leader, runs for the events, no failure, no timeout
    firing = {str(r["name"]) for r in rules if r.get("state") == "firing"}
    assert not firing, f"alerts firing in a healthy story: {sorted(firing)}"


def test_the_checks_can_fail(scraped: tuple[Prometheus, str], served_names: set[str]) -> None:
    """The checks above on a made-up metric, a misspelt label and a query with no data."""
    prom, _ = scraped
    assert metric_names("sum(rate(kdesched_pods_evicted_made_up_total[1m]))") - served_names
    assert prom.query(f'sum(rate(kdesched_pods_evicted_made_up_total{{job="{JOB}"}}[1m]))') == []
    present = {label for s in prom.series("kdesched_pods_evicted_total") for label in s}
    assert "strategy" in present and "stratgy" not in present
    assert prom.query('kdesched_pods_evicted_total{result="no-such-result"}') == []

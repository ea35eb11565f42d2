"""The dashboard and alert rules shipped in knative/monitoring/ name only metrics kdesched exports,
every alert says what to do, and docs/reactor.md lists exactly the metrics kdesched registers.

Why: a dashboard panel on a metric that does not exist shows "No data" forever, and an alert on one
never fires; both look fine until the day they are needed. This fast tier checks the names against
the registry; tests/realprom/test_dashboard.py evaluates every query on a real Prometheus.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.deploy import REPO, load_kustomization
from tests.monitoring import (
    ALERTS,
    DASHBOARD,
    MONITORING,
    Query,
    alert_queries,
    alert_rules,
    dashboard,
    dashboard_queries,
    exported_families,
    exported_names,
    label_names,
    metric_names,
    rule_file_text,
)

QUERIES = dashboard_queries({"$job": ".+"}) + alert_queries()

# The issue's list (23, item 3), as the alert names that answer it.
REQUIRED_ALERTS = {
    "KdeschedEvictionsFailing",  # evictions failing
    "KdeschedWorkloadBelowReadyTooLong",  # a workload held below Ready longer than its replacement timeout
    "KdeschedNoLeader",  # no leader
    "KdeschedReactorNotRunning",  # the reactor not running while events arrive
    "KdeschedCacheNearCeiling",  # cache near its ceiling
    "KdeschedSurgeMoveHeld",  # a surge-first move kept at +1 for over an hour past its timeout
}
# ... and the panels that answer its dashboard list, by a word of their title.
REQUIRED_PANELS = ["Evictions by strategy and result", "Paced", "Blocked", "below Ready", "Run duration",
                   "events by type", "leadership", "Cache objects", "API requests", "throttling"]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.where)
def test_every_query_names_only_metrics_kdesched_exports(query: Query) -> None:
    names = metric_names(query.expr)
    assert names, f"{query.where}: no metric found in {query.expr!r}"
    unknown = names - set(exported_names())
    assert not unknown, f"{query.where}: {sorted(unknown)} are not metrics kdesched exports ({query.expr!r})"


@pytest.mark.parametrize(("expr", "names", "labels"), [
    ('sum by (strategy, result) (increase(kdesched_pods_evicted_total{job=~".+"}[1m]))',
     {"kdesched_pods_evicted_total"}, {"strategy", "result", "job"}),
    ("histogram_quantile(0.9, sum by (le) (rate(kdesched_run_duration_seconds_bucket[5m])))",
     {"kdesched_run_duration_seconds_bucket"}, {"le"}),
    ("sum without (kind) (a_b) / on (job) group_left c > 0.85 unless d offset 5m",
     {"a_b", "c", "d"}, {"kind", "job"}),
    ('max(up{reason="on (x)"}) or vector(1e3)', {"up"}, {"reason"}),
])
def test_the_promql_reader(expr: str, names: set[str], labels: set[str]) -> None:
    assert metric_names(expr) == names
    assert label_names(expr) == labels


def test_a_made_up_metric_is_caught() -> None:
    assert metric_names("sum(rate(kdesched_evictions_made_up_total[5m]))") - set(exported_names()) == {
        "kdesched_evictions_made_up_total"}


def test_every_alert_has_for_severity_and_what_to_do() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), f"duplicate alert names: {names}"
    assert REQUIRED_ALERTS <= set(names), f"missing: {sorted(REQUIRED_ALERTS - set(names))}"
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), f"{rule['alert']}: `for:` missing or not a duration"
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        for key in ("summary", "description", "runbook"):
            assert str(rule["annotations"].get(key, "")).strip(), f"{rule['alert']}: annotation {key} is empty"


def test_the_rule_file_is_the_prometheus_rule_spec() -> None:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert doc["metadata"]["namespace"] == "kdesched"
    assert set(doc["spec"]) == {"groups"}
    assert yaml.safe_load(rule_file_text()) == doc["spec"]


def test_the_dashboard_is_importable_and_covers_the_issue() -> None:
    dash = dashboard()
    assert dash["uid"] == "kdesched" and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    titles = [p["title"] for p in dash["panels"] if p["type"] != "row"]
    for word in REQUIRED_PANELS:
        assert any(word.lower() in t.lower() for t in titles), f"no panel about {word!r}: {titles}"
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel.get("description"), f"{panel['title']}: say what the panel shows"
        for target in panel["targets"]:
            assert '{job=~"$job"' in target["expr"], f"{panel['title']}: not filtered by $job: {target['expr']}"


def test_the_monitoring_kustomization_ships_both() -> None:
    kustomization = load_kustomization(MONITORING)
    assert kustomization["resources"] == ["alerts.yaml"]
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [DASHBOARD.name]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}


def test_docs_list_every_metric_kdesched_registers() -> None:
    text = (REPO / "docs" / "reactor.md").read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(kdesched_\w+)` \|", section, re.MULTILINE))
    served = set(exported_families())
    assert documented == served, (f"docs/reactor.md, Metrics: missing {sorted(served - documented)}, "
                                  f"not exported {sorted(documented - served)}")


def test_docs_explain_every_alert() -> None:
    text = (REPO / "docs" / "deploying.md").read_text(encoding="utf-8")
    for rule in alert_rules():
        assert f"`{rule['alert']}`" in text, f"docs/deploying.md does not explain {rule['alert']}"

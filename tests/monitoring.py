"""The shipped dashboard and alert rules (knative/monitoring/) as data, and a small PromQL reader
that names the metrics and labels an expression uses.

Why: two tiers check the same files. tests/deploy/test_monitoring.py (fast) checks every metric
they name against what kdesched registers; tests/realprom/test_dashboard.py evaluates every query on
a real Prometheus that scraped ``kdesched serve``. promtool has no command that prints the names in
an expression, so :func:`metric_names` reads them the way PromQL's grammar places them: an
identifier that is not a function call, keyword or aggregation, outside label matchers, strings,
range brackets and grouping clauses.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
MONITORING = REPO / "knative" / "monitoring"
DASHBOARD = MONITORING / "kdesched-dashboard.json"
ALERTS = MONITORING / "alerts.yaml"

# Grafana's built-in interval variables, as a real Grafana would substitute them for a short range.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}

_KEYWORDS = frozenset({
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "inf", "nan", "atan2",
})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?")
_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")


def _without_strings(expr: str) -> str:
    return _STRING.sub('""', expr)


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (``foo`` of ``rate(foo{a="b"}[5m])``)."""
    s = _without_strings(expr)
    s = _MATCHERS.sub("{}", s)
    s = _RANGE.sub("[]", s)
    s = _GROUPING.sub(r"\1", s)
    names = set()
    for m in _IDENT.finditer(s):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def label_names(expr: str) -> set[str]:
    """The label names an expression matches on or groups by (``le`` and ``job`` included)."""
    s = _without_strings(expr)
    labels: set[str] = set()
    for body in _MATCHERS.findall(s):
        labels.update(_MATCHER_LABEL.findall(body))
    for _, body in _GROUPING.findall(s):
        labels.update(part.strip() for part in body.split(",") if part.strip())
    return labels


@dataclass(frozen=True)
class Query:
    """One PromQL expression of the shipped files, and where it is (for messages)."""

    where: str
    expr: str


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's variables replaced, longest name first (``$__rate_interval`` before ``$__range``)."""
    for name in sorted({**GRAFANA_VARIABLES, **variables}, key=len, reverse=True):
        value = {**GRAFANA_VARIABLES, **variables}[name]
        expr = expr.replace("${" + name.lstrip("$") + "}", value).replace(name, value)
    return expr


def dashboard_queries(variables: dict[str, str] | None = None) -> list[Query]:
    """Every panel target's expr and every query variable's query, variables substituted
    (``{"$job": "kdesched"}``; Grafana's interval variables always)."""
    variables = variables or {}
    out: list[Query] = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append(Query(f"panel {panel['title']!r} {target['refId']}", substitute(target["expr"], variables)))
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            # label_values(METRIC, LABEL): the metric selector is the query to check
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
            out.append(Query(f"variable {var['name']!r}", m.group(1) if m else query))
    return out


def alert_rules() -> list[dict[str, Any]]:
    """The rules of the PrometheusRule's groups, in order."""
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["spec"]["groups"] for rule in group["rules"]]


def rule_file_text() -> str:
    """The PrometheusRule's ``spec``: a plain Prometheus rule file (what docs/deploying.md says to extract)."""
    return yaml.safe_dump(yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["spec"], sort_keys=False)


def alert_queries() -> list[Query]:
    return [Query(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()]


def _registry() -> Any:
    """kdesched's registry with every family registered: the modules that register one are imported
    (as ``serve`` and the functions import them)."""
    import kdesched.reactor.io.whynot
    import kdesched.reactor.metrics
    import kdesched.reactor.run.controls  # the kdesched_health_brake gauge
    import kdesched.reactor.serve.server  # the kdesched_cache_* collector
    from kdesched.evictor.metrics import REGISTRY

    del kdesched  # imported for what registering them does
    return REGISTRY


def exported_families() -> dict[str, str]:
    """Each metric family kdesched registers, by the name its samples carry (``_total`` for a
    counter, ``_info`` for an info; a histogram by its family name), mapped to its type."""
    REGISTRY = _registry()

    suffix = {"counter": "_total", "info": "_info"}
    return {family.name + suffix.get(family.type, ""): family.type for family in REGISTRY.collect()}


def exported_names() -> dict[str, str]:
    """Every metric name kdesched's registry serves, as Prometheus sees it (``_total``, ``_bucket``,
    ``_info`` ... included), mapped to its family name: the families of every module that registers
    one (imported here, as ``serve`` and the functions import them)."""
    REGISTRY = _registry()

    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created"), "info": ("_info",), "gauge": ("",)}
    out: dict[str, str] = {}
    for family in REGISTRY.collect():
        for suffix in suffixes.get(family.type, ("",)):
            out[family.name + suffix] = family.name
    return out

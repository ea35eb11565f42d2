"""The shipped alert rules pass ``promtool check rules``, and each fires when (and only when) its
condition holds, by ``promtool test rules`` on hand-written series.

Why: ``check rules`` proves the file parses (expressions, durations, annotation templates); it
cannot say that ``KdeschedNoLeader`` fires with every instance a standby and stays quiet with one
leader, or that ``KdeschedReactorNotRunning`` ignores a node that is merely not usable yet. The unit
tests below run the expressions on series written for each case, minute by minute, through the
rules' ``for:``. Annotations are left out of the tested copy: their text is checked by
``check rules`` (templates) and tests/deploy/test_monitoring.py (present), not by exact wording.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring import alert_rules, rule_file_text
from tests.realprom.prometheus import PromKit, check_rules

T = 'job="kdesched", instance="10.0.0.1:8080"'
TARGET = {"job": "kdesched", "instance": "10.0.0.1:8080"}
TAINTS = "dev.kdesched.node.taints.changed"


def case(name: str, series: dict[str, str], eval_time: str, alert: str,
         fired: list[dict[str, str]]) -> Any:
    """One promtool unit test: ``series`` (selector -> values), and the alerts expected at ``eval_time``."""
    return pytest.param({"interval": "1m",
                         "input_series": [{"series": s, "values": v} for s, v in series.items()],
                         "alert_rule_test": [{"eval_time": eval_time, "alertname": alert,
                                              "exp_alerts": [{"exp_labels": labels} for labels in fired]}]},
                        id=name)


CASES = [
    case("failing evictions fire per namespace",
         {f'kdesched_pods_evicted_total{{result="failed", namespace="shop", strategy="S", profile="p", node="n", {T}}}':
          "0+1x40"}, "25m", "KdeschedEvictionsFailing", [{"severity": "warning", "namespace": "shop"}]),
    case("failing evictions wait for their for:",
         {f'kdesched_pods_evicted_total{{result="failed", namespace="shop", {T}}}': "0+1x40"}, "5m",
         "KdeschedEvictionsFailing", []),
    case("PDB refusals are not failures",
         {f'kdesched_pods_evicted_total{{result="blocked", namespace="shop", {T}}}': "0+1x40"}, "25m",
         "KdeschedEvictionsFailing", []),
    case("a replacement timeout fires",
         {f"kdesched_replacement_timeouts_total{{{T}}}": "0x5 1x20"}, "8m", "KdeschedWorkloadBelowReadyTooLong",
         [{"severity": "warning"}]),
    case("no replacement timeout, no alert",
         {f"kdesched_replacement_timeouts_total{{{T}}}": "0x30"}, "20m", "KdeschedWorkloadBelowReadyTooLong", []),
    case("two standbys and no leader fire",
         {f'kdesched_serve_leader{{identity="a", {T}}}': "0x20", 'kdesched_serve_leader{identity="b", job="kdesched", '
          'instance="10.0.0.2:8080"}': "0x20"}, "10m", "KdeschedNoLeader", [{"severity": "critical"}]),
    case("one leader and a standby are fine",
         {f'kdesched_serve_leader{{identity="a", {T}}}': "1x20", 'kdesched_serve_leader{identity="b", job="kdesched", '
          'instance="10.0.0.2:8080"}': "0x20"}, "10m", "KdeschedNoLeader", []),
    case("a leader lost for less than 5 minutes is fine",
         {f'kdesched_serve_leader{{identity="a", {T}}}': "1x5 0x3 1x10"}, "9m", "KdeschedNoLeader", []),
    case("taint changes and no run fire",
         {f'kdesched_reactor_emitted_total{{type="{TAINTS}", {T}}}': "0+1x30"}, "10m", "KdeschedReactorNotRunning",
         [{"severity": "critical"}]),
    case("taint changes with runs are fine",
         {f'kdesched_reactor_emitted_total{{type="{TAINTS}", {T}}}': "0+1x30",
          f'kdesched_reactor_runs_total{{kind="taints", {T}}}': "0+1x30"}, "10m", "KdeschedReactorNotRunning", []),
    case("nodes not usable yet run nothing, rightly",
         {f'kdesched_reactor_emitted_total{{type="dev.kdesched.node.added", {T}}}': "0+1x30"}, "10m",
         "KdeschedReactorNotRunning", []),
    case("a cache over 85% of its ceiling fires",
         {f'kdesched_cache_objects{{kind="Pod", {T}}}': "900x30", f'kdesched_cache_objects{{kind="Node", {T}}}': "10x30",
          f"kdesched_cache_max_objects{{{T}}}": "1000x30"}, "20m", "KdeschedCacheNearCeiling",
         [{"severity": "warning", **TARGET}]),
    case("a cache at half its ceiling is fine",
         {f'kdesched_cache_objects{{kind="Pod", {T}}}': "500x30", f"kdesched_cache_max_objects{{{T}}}": "1000x30"},
         "20m", "KdeschedCacheNearCeiling", []),
    case("a surge-first move held over an hour past its timeout fires",
         {f"kdesched_surge_held_past_timeout_seconds{{{T}}}": "3300+60x30"}, "15m", "KdeschedSurgeMoveHeld",
         [{"severity": "warning"}]),
    case("a surge-first move held less than an hour past its timeout is fine",
         {f"kdesched_surge_held_past_timeout_seconds{{{T}}}": "0+60x30"}, "30m", "KdeschedSurgeMoveHeld", []),
    case("a held move that ended stops the alert",
         {f"kdesched_surge_held_past_timeout_seconds{{{T}}}": "3700x15 0x15"}, "25m", "KdeschedSurgeMoveHeld", []),
    case("one process of several saw the held move: it fires once",
         {f"kdesched_surge_held_past_timeout_seconds{{{T}}}": "4000x20",
          'kdesched_surge_held_past_timeout_seconds{job="kdesched", instance="10.0.0.2:8080"}': "0x20"}, "10m",
         "KdeschedSurgeMoveHeld", [{"severity": "warning"}]),
    case("a disabled cache fires",
         {f"kdesched_cache_disabled{{{T}}}": "0 1x10"}, "7m", "KdeschedCacheDisabled", [{"severity": "warning", **TARGET}]),
]


def test_promtool_check_rules_passes(prom_kit: PromKit, tmp_path: Path) -> None:
    rules = tmp_path / "kdesched-rules.yml"
    rules.write_text(rule_file_text())
    done = check_rules(prom_kit, rules)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def test_promtool_check_rules_can_fail(prom_kit: PromKit, tmp_path: Path) -> None:
    spec = yaml.safe_load(rule_file_text())
    spec["groups"][0]["rules"][0]["expr"] = "sum by (namespace (kdesched_pods_evicted_total)"
    spec["groups"][0]["rules"][1]["annotations"]["summary"] = "{{ $value | nosuchfunction }}"
    rules = tmp_path / "broken.yml"
    rules.write_text(yaml.safe_dump(spec))
    done = check_rules(prom_kit, rules)
    assert done.returncode != 0
    assert "parse error" in done.stdout + done.stderr


def test_every_alert_has_a_case_that_fires() -> None:
    fired = {p.values[0]["alert_rule_test"][0]["alertname"] for p in CASES
             if p.values[0]["alert_rule_test"][0]["exp_alerts"]}
    assert fired == {rule["alert"] for rule in alert_rules()}


@pytest.mark.parametrize("test", CASES)
def test_alert_behaviour(prom_kit: PromKit, tmp_path: Path, test: dict[str, Any]) -> None:
    spec = yaml.safe_load(rule_file_text())
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(spec))
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                       "tests": [test]}))
    done = subprocess.run([str(prom_kit.promtool), "test", "rules", "test.yml"], cwd=tmp_path, check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr

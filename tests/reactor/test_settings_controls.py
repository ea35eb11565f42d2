"""The controls' keys of the ``kdesched:`` block (reactor/run/settings.py): healthBrake,
disruptionWindows and disruptionBudgets parse into typed settings, and every mistake is reported
at load, all at once, naming the field."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

import pytest
from kdesched.policy.errors import PolicyError
from kdesched.reactor.run.settings import parse_settings


def errors(block: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyError) as exc:
        parse_settings(block, env={})
    return list(exc.value.errors)


def test_defaults_and_a_full_block() -> None:
    s = parse_settings({}, env={})
    assert s.health_brake.enabled and s.health_brake.max_unhealthy_share == 0.2 and s.health_brake.zones
    assert s.health_brake.settle_seconds == 60 and s.windows == () and s.budgets == ()
    s = parse_settings({
        "healthBrake": {"enabled": False, "maxUnhealthyShare": 0.3, "zones": False, "settleSeconds": 5},
        "disruptionWindows": [{"name": "freeze", "schedule": "0 9 * * MON-FRI", "duration": "8h",
                               "timeZone": "Europe/Berlin", "strategies": ["RemoveDuplicates"],
                               "triggers": ["rebalance", "sweep"]},
                              {"schedule": "@daily", "duration": "2h", "action": "allow"}],
        "disruptionBudgets": [{"maxUnavailable": "10%"}, {"name": "web", "maxUnavailable": 2,
                                                          "namespaceSelector": {"matchLabels": {"tier": "web"}}},
                              {"maxUnavailable": "50%", "strategies": ["LowNodeUtilization"]}],
    }, env={})
    assert not s.health_brake.enabled and s.health_brake.max_unhealthy_share == 0.3 and s.health_brake.settle_seconds == 5
    freeze, daily = s.windows
    assert freeze.action == "forbid" and freeze.duration_seconds == 8 * 3600 and freeze.zone == ZoneInfo("Europe/Berlin")
    assert freeze.strategies == {"RemoveDuplicates"} and freeze.triggers == {"rebalance", "sweep"}
    assert daily.action == "allow" and daily.zone_name == "UTC" and daily.strategies is None
    cluster, web, strategy = s.budgets
    assert (cluster.kind, cluster.percent) == ("cluster", 10.0)
    assert (web.kind, web.count, web.name) == ("namespace", 2, "web")
    assert (strategy.kind, strategy.percent) == ("strategy", 50.0)


def test_every_mistake_is_named() -> None:
    got = errors({
        "healthBrake": {"maxUnhealthyShare": 1.5, "settleSeconds": -1, "zones": "yes", "typo": 1},
        "disruptionWindows": [
            {"schedule": "0 25 * * *", "duration": "2d", "action": "maybe", "timeZone": "Mars/Olympus",
             "strategies": ["NoSuchStrategy"], "triggers": ["cron"], "extra": True},
            {"name": "no-schedule"},
            "not a mapping",
        ],
        "disruptionBudgets": [
            {"maxUnavailable": "120%"},
            {"maxUnavailable": -1},
            {"maxUnavailable": 1, "namespaceSelector": {"matchLabels": {}}, "strategies": ["RemoveDuplicates"]},
            {"maxUnavailable": 1, "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Nope"}]}},
        ],
    })
    expected = [
        "kdesched.healthBrake.typo: unknown field",
        "kdesched.healthBrake.maxUnhealthyShare: must be a number >= 0 and < 1",
        "kdesched.healthBrake.zones: must be true or false",
        "kdesched.healthBrake.settleSeconds: must be a number >= 0",
        "kdesched.disruptionWindows[0].extra: unknown field",
        "kdesched.disruptionWindows[0].schedule: hour: 25 is outside 0-23",
        "kdesched.disruptionWindows[0].duration: must be a duration",
        "kdesched.disruptionWindows[0].timeZone: unknown time zone 'Mars/Olympus'",
        'kdesched.disruptionWindows[0].action: must be allow or forbid, got "maybe"',
        'kdesched.disruptionWindows[0].strategies: unknown name "NoSuchStrategy"',
        'kdesched.disruptionWindows[0].triggers: unknown name "cron"',
        "kdesched.disruptionWindows[1].schedule: required",
        "kdesched.disruptionWindows[1].duration: required",
        "kdesched.disruptionWindows[2]: must be a mapping",
        'kdesched.disruptionBudgets[0].maxUnavailable: must be an integer >= 0 or a percentage such as "20%", got "120%"',
        "kdesched.disruptionBudgets[1].maxUnavailable: must be an integer >= 0",
        "kdesched.disruptionBudgets[2]: set namespaceSelector (a budget per namespace) or strategies",
        "kdesched.disruptionBudgets[3].namespaceSelector",
    ]
    for want in expected:
        assert any(e.startswith(want) for e in got), f"{want!r} not in:\n" + "\n".join(got)
    assert len(got) == len(expected), "\n".join(got)


@pytest.mark.parametrize("raw", ["x", {"a": 1}, 5])
def test_the_lists_must_be_lists(raw: Any) -> None:
    got = errors({"disruptionWindows": raw, "disruptionBudgets": raw})
    assert [e.split(":")[0] for e in got] == ["kdesched.disruptionWindows", "kdesched.disruptionBudgets"]
    assert all("must be a list" in e for e in got)

"""The operator's controls, pure parts: the health brake's verdict (admission/health.py), the cron
matcher and disruption windows (admission/windows.py), the budgets (admission/budgets.py) and the
ledger's "last unhealthy" field. Fixed clocks only."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from kdesched.admission.budgets import Budget, BudgetCheck
from kdesched.admission.health import HealthBrakeSettings, judge, node_unhealthy, settling
from kdesched.admission.windows import Cron, CronError, Window, Windows, parse_duration, parse_zone
from kdesched.evictor.ledger import LEDGER_VERSION, Admission, Ledger
from kdesched.model.records import Node, Pod
from kdesched.model.selectors import LabelSelector

from tests.builders import node_obj, pod_obj

ZONE = "topology.kubernetes.io/zone"


def nodes(ready: int, not_ready: int, zone_of: dict[str, str] | None = None) -> list[Node]:
    out = [node_obj(f"r{i}") for i in range(ready)] + [node_obj(f"n{i}", ready=False) for i in range(not_ready)]
    for o in out:
        z = (zone_of or {}).get(o["metadata"]["name"])
        if z:
            o["metadata"]["labels"][ZONE] = z
    return [Node.from_api(o) for o in out]


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc]


# -- health brake -------------------------------------------------------------------------------------
def test_the_brake_holds_above_the_share_not_at_it() -> None:
    s = HealthBrakeSettings()
    assert not judge(nodes(8, 2), s).unhealthy  # 20% is not MORE than 20%
    v = judge(nodes(7, 3), s)
    assert v.unhealthy and v.reason == "share" and v.unhealthy_nodes == ("n0", "n1", "n2")
    assert "3 of 10 nodes (30%)" in v.message and "maxUnhealthyShare 0.2" in v.message


def test_unknown_ready_and_the_unreachable_taint_count_as_unhealthy() -> None:
    unknown = node_obj("u")
    unknown["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    tainted = node_obj("t", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    plain = node_obj("p", taints=[{"key": "maintenance", "effect": "NoSchedule"}])
    assert node_unhealthy(Node.from_api(unknown)) == "NotReady"
    assert node_unhealthy(Node.from_api(tainted)) == "unreachable"
    assert node_unhealthy(Node.from_api(plain)) == ""


def test_a_whole_zone_down_brakes_even_below_the_share() -> None:
    zones = {f"r{i}": "a" if i < 8 else "b" for i in range(10)} | {"n0": "c"}
    v = judge(nodes(10, 1, zones), HealthBrakeSettings())
    assert v.unhealthy and v.reason == "zone" and v.zones_down == ("c",)
    assert not judge(nodes(10, 1, zones), HealthBrakeSettings(zones=False)).unhealthy
    assert not judge(nodes(0, 10), HealthBrakeSettings(enabled=False)).unhealthy


def test_settling_lasts_settle_seconds_after_the_last_unhealthy_sighting() -> None:
    s = HealthBrakeSettings(settle_seconds=60)
    assert settling(None, 1000.0, s) is None
    assert settling(990.0, 1000.0, s) == 1050.0
    assert settling(940.0, 1000.0, s) is None


def test_the_ledger_keeps_last_unhealthy_and_reads_records_without_it() -> None:
    led = Ledger().with_unhealthy(100.5)
    assert led.with_unhealthy(50.0).unhealthy_at == 100.5  # never moves back
    back, problem = Ledger.from_annotation(led.to_annotation())
    assert problem == "" and back.unhealthy_at == 100.5 and back
    old = f'{{"v":{LEDGER_VERSION},"m":{{}},"o":{{"Deployment/a/b":5.0}},"n":{{}}}}'  # written before the field
    parsed, problem = Ledger.from_annotation(old)
    assert problem == "" and parsed.unhealthy_at is None and parsed.workloads == {"Deployment/a/b": 5.0}
    bad, problem = Ledger.from_annotation(f'{{"v":{LEDGER_VERSION},"u":"x"}}')
    assert "malformed" in problem and bad.unhealthy_at is None
    # admitting, taking back and pruning keep the field
    pod = Pod.from_api(pod_obj("p", "n1"))
    led2 = led.admit([Admission(pod, "S", False, "node:n1:S")], 200.0)
    assert led2.unhealthy_at == 100.5
    assert led2.record_outcomes([pod], 200.0, led).unhealthy_at == 100.5
    assert led2.prune(10_000.0, 10.0, 10).unhealthy_at == 100.5


# -- cron -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "after", "expected"), [
    ("0 9 * * 1-5", datetime(2026, 11, 28, 10, 0), datetime(2026, 11, 30, 9, 0)),  # Sat -> Mon
    ("*/15 * * * *", datetime(2026, 1, 1, 0, 1), datetime(2026, 1, 1, 0, 15)),
    ("5/20 3 * * *", datetime(2026, 1, 1, 3, 26), datetime(2026, 1, 1, 3, 45)),
    ("0 0 1,15 * *", datetime(2026, 1, 2), datetime(2026, 1, 15)),
    ("30 2 * JAN-MAR sun", datetime(2026, 3, 30), datetime(2027, 1, 3, 2, 30)),
    ("0 12 13 * 5", datetime(2026, 2, 1), datetime(2026, 2, 6, 12, 0)),  # dom OR dow when both restricted
    ("0 0 * * 7", datetime(2026, 11, 26), datetime(2026, 11, 29)),  # 7 is Sunday
    ("@daily", datetime(2026, 1, 1, 0, 0, 30), datetime(2026, 1, 2)),
    ("0 0 29 2 *", datetime(2026, 3, 1), datetime(2028, 2, 29)),
])
def test_cron_next_match(text: str, after: datetime, expected: datetime) -> None:
    assert Cron.parse(text).next_match(after) == expected


def test_cron_prev_match_and_exact_minute() -> None:
    c = Cron.parse("0 9 * * 1-5")
    assert c.prev_match(datetime(2026, 11, 29, 12, 0)) == datetime(2026, 11, 27, 9, 0)
    assert c.next_match(datetime(2026, 11, 30, 9, 0)) == datetime(2026, 11, 30, 9, 0)
    assert c.prev_match(datetime(2026, 11, 30, 9, 0, 59)) == datetime(2026, 11, 30, 9, 0)


@pytest.mark.parametrize(("text", "message"), [
    ("* * *", "must have 5 fields"), ("60 * * * *", "minute: 60 is outside 0-59"),
    ("* 24 * * *", "hour: 24 is outside 0-23"), ("* * 0 * *", "day of month: 0 is outside 1-31"),
    ("* * * 13 *", "month: 13 is outside 1-12"), ("* * * * 8", "day of week: 8 is outside 0-7"),
    ("5-1 * * * *", "goes backwards"), ("*/0 * * * *", "step must be a positive integer"),
    ("1,,2 * * * *", "empty list item"), ("x * * * *", "'x' is not a number"),
    ("0 0 30 2 *", "never matches"), ("", "must be a cron schedule"),
])
def test_cron_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        Cron.parse(text)


def test_durations_and_zones() -> None:
    assert parse_duration("2h") == 7200 and parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400
    for bad in ("", "2", "0m", "2d", "h", 5):
        with pytest.raises(CronError):
            parse_duration(bad)
    assert parse_zone(None) is UTC and parse_zone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    with pytest.raises(CronError, match="unknown time zone"):
        parse_zone("Mars/Olympus")


# -- windows ----------------------------------------------------------------------------------------------
def window(schedule: str, duration: str, action: str = "forbid", zone: str = "UTC", **kw: object) -> Window:
    return Window(str(kw.pop("name", "w")), Cron.parse(schedule), parse_duration(duration), action, parse_zone(zone),
                  zone, **kw)  # type: ignore[arg-type]


def test_a_forbid_window_closes_for_its_duration_and_says_when_it_opens() -> None:
    ws = Windows([window("0 9 * * 1-5", "8h", name="business-hours")])
    thu_10 = ts(2026, 11, 26, 10, 0)
    st = ws.state("RemovePodsViolatingNodeTaints", "taints", thu_10)
    assert not st.open and st.opens_at == ts(2026, 11, 26, 17, 0)
    assert '"business-hours"' in st.reason and "until 2026-11-26 17:00 UTC" in st.reason
    assert ws.state("X", "taints", ts(2026, 11, 26, 17, 0)).open  # the end is exclusive
    assert ws.state("X", "taints", ts(2026, 11, 28, 10, 0)).open  # Saturday


def test_an_allow_window_closes_everything_outside_it_in_its_time_zone() -> None:
    ws = Windows([window("0 22 * * *", "2h", "allow", "Europe/Berlin", name="night")])
    st = ws.state("X", "sweep", ts(2026, 11, 26, 10, 0))
    assert not st.open and st.opens_at == ts(2026, 11, 26, 21, 0)  # 22:00 CET
    assert ws.state("X", "sweep", ts(2026, 11, 26, 22, 30)).open
    assert not ws.state("X", "sweep", ts(2026, 11, 26, 23, 0)).open


def test_filters_by_strategy_and_trigger() -> None:
    ws = Windows([window("* * * * *", "1h", strategies=frozenset({"RemoveDuplicates"}),
                         triggers=frozenset({"rebalance"}))])
    now = ts(2026, 11, 26, 10, 0)
    assert not ws.state("RemoveDuplicates", "rebalance", now).open
    assert ws.state("RemoveDuplicates", "taints", now).open
    assert ws.state("LowNodeUtilization", "rebalance", now).open


def test_forbid_inside_allow_opens_when_both_agree() -> None:
    allow = window("0 8 * * *", "10h", "allow", name="day")
    freeze = window("0 8 * * *", "2h", "forbid", name="morning-freeze")
    st = Windows([allow, freeze]).state("X", "taints", ts(2026, 11, 26, 9, 0))
    assert not st.open and st.opens_at == ts(2026, 11, 26, 10, 0) and "morning-freeze" in st.reason
    st = Windows([allow, freeze]).state("X", "taints", ts(2026, 11, 26, 19, 0))
    assert not st.open and st.opens_at == ts(2026, 11, 27, 10, 0)  # the allow opens at 8, the freeze ends at 10


def test_overlapping_occurrences_chain_and_an_always_closed_window_gives_no_opening() -> None:
    st = Windows([window("*/30 * * * *", "45m")]).state("X", "taints", ts(2026, 11, 26, 10, 0))
    assert not st.open and st.opens_at is None  # every occurrence starts before the last ends
    st = Windows([window("0 * * * *", "30m")]).state("X", "taints", ts(2026, 11, 26, 10, 10))
    assert st.opens_at == ts(2026, 11, 26, 10, 30)


# -- budgets ------------------------------------------------------------------------------------------------
def pods(ns: str, n: int) -> list[Pod]:
    return [Pod.from_api(pod_obj(f"{ns}-{i}", f"n{i % 3}", namespace=ns)) for i in range(n)]


def test_a_namespace_percentage_counts_in_flight_pods_and_this_runs_admissions() -> None:
    web = pods("web", 10)
    led = Ledger().admit([Admission(web[0], "RemovePodsViolatingNodeTaints", False, "node:n0:x")], 1.0)
    b = Budget("web", percent=20, namespace_selector=LabelSelector(match_labels=(("team", "web"),)))
    check = BudgetCheck([b], led, [*web, *pods("other", 5)], {"web": {"team": "web"}, "other": {}}.get)
    assert check.admit(web[1], "S") is None  # 1 in flight + 1 = 2 = ceil(20% of 10)
    why = check.admit(web[2], "S")
    assert why is not None and 'disruption budget "web" (maxUnavailable 20%, namespace web) allows 2 of 10' in why
    assert check.admit(pods("other", 5)[0], "S") is None  # not selected


def test_cluster_and_strategy_budgets_and_rounding() -> None:
    all_pods = pods("a", 7)
    check = BudgetCheck([Budget("", count=1, strategies=frozenset({"RemoveDuplicates"})),
                         Budget("", percent=10)], Ledger(), all_pods, lambda _ns: {})
    assert check.admit(all_pods[0], "RemoveDuplicates") is None
    assert "strategy RemoveDuplicates" in (check.admit(all_pods[1], "RemoveDuplicates") or "")
    assert "cluster-wide" in (check.admit(all_pods[2], "PodLifeTime") or "")  # ceil(0.7) = 1, one in flight
    assert Budget("", percent=20).limit(3) == 1 and Budget("", percent=0).limit(50) == 0


def test_an_unreadable_namespace_is_treated_as_selected() -> None:
    p = pods("x", 1)
    check = BudgetCheck([Budget("", count=0, namespace_selector=LabelSelector(match_labels=(("a", "b"),)))],
                        Ledger(), p, lambda _ns: None)
    assert check.admit(p[0], "S") is not None


def test_daylight_saving_days_in_the_windows_time_zone() -> None:
    ws = Windows([window("30 2 * * *", "1h", zone="Europe/Berlin", name="night")])
    # the clock goes back on 2026-10-25 (03:00 CEST -> 02:00 CET): 02:30 comes twice; the forbid
    # window starts at the first (00:30 UTC) and holds until the second's end (03:30 CET, 02:30 UTC),
    # and its opening is never reported in the past
    st = ws.state("X", "taints", ts(2026, 10, 25, 1, 15))  # 02:15 CET, the second time round
    assert not st.open and st.opens_at == ts(2026, 10, 25, 2, 30)
    assert not ws.state("X", "taints", ts(2026, 10, 25, 1, 35)).open  # 02:35 CET: the second 02:30's hour
    assert ws.state("X", "taints", ts(2026, 10, 25, 2, 35)).open
    nxt = ws.windows[0].next_start(ts(2026, 10, 25, 1, 35))
    assert nxt == ts(2026, 10, 26, 1, 30)  # 02:30 CET the next day
    # the clock jumps on 2026-03-29 (02:00 CET -> 03:00 CEST): 02:30 does not exist and is read
    # with the offset before the jump (01:30 UTC)
    assert ws.windows[0].next_start(ts(2026, 3, 29, 0, 0)) == ts(2026, 3, 29, 1, 30)
    assert not ws.state("X", "taints", ts(2026, 3, 29, 1, 45)).open

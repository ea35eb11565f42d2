"""Disruption windows' cron schedules read as robfig/cron reads them (docs/safety.md, "Disruption
windows"): a stepped day of week ends at Saturday. Before, ``1/2`` reached 7 (Sunday again), so an
allow window meant for Mon, Wed and Fri also opened on Sunday."""

from __future__ import annotations

from datetime import UTC, datetime

from kdesched.admission.windows import Cron, Window, Windows, parse_zone

NY = parse_zone("America/New_York")
THU_10 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC).timestamp()


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# --- the cron: a stepped day of week -------------------------------------------------------------------

def test_a_stepped_day_of_week_does_not_wrap_onto_sunday() -> None:
    # "1/2" = from Monday every 2 days: Mon, Wed, Fri (robfig/cron, which docs/safety.md names: dow is 0-6).
    # The day-of-week field's upper bound is 7 ("7 is Sunday"), so "1/2" also yields 7 -> Sunday.
    assert sorted(Cron.parse("0 1 * * 1/2").weekdays) == [1, 3, 5]
    assert sorted(Cron.parse("0 1 * * MON/2").weekdays) == [1, 3, 5]
    assert sorted(Cron.parse("0 1 * * 5/1").weekdays) == [5, 6]


def test_an_allow_window_on_mon_wed_fri_does_not_open_on_sunday() -> None:
    w = Window("mwf-nights", Cron.parse("0 1 * * 1/2"), 2 * 3600, "allow")
    sunday_0130 = _utc("2026-11-29T01:30:00")  # a Sunday
    assert datetime.fromtimestamp(sunday_0130, UTC).strftime("%A") == "Sunday"
    assert not Windows([w]).state("RemoveDuplicates", "sweep", sunday_0130).open


# --- the pipeline's order: the bucket counts evictions a later control defers ----------------------------


# --- daylight saving: a forbid window whose start time comes twice ------------------------------------

def test_chained_hourly_forbid_occurrences_leave_no_hole_on_the_night_the_clock_goes_back() -> None:
    """"Nothing 00:00-04:00" written as chained hourly occurrences. On 2026-11-01 New York's clock goes
    back at 02:00 EDT to 01:00 EST: 01:00 comes twice. Before, the 01:00 occurrence opened once (at the
    first) and ran out at 01:00 EST, so evictions went ahead for the repeated hour, 06:00-07:00 UTC."""
    ws = Windows([Window("night", Cron.parse("0 0-3 * * *"), 3600, "forbid", NY, "America/New_York")])
    for at in ("2026-11-01T04:30", "2026-11-01T05:30", "2026-11-01T06:00", "2026-11-01T06:30",
               "2026-11-01T07:30", "2026-11-01T08:59"):
        st = ws.state("X", "taints", _utc(at))
        assert not st.open, at
        assert st.opens_at == _utc("2026-11-01T09:00")  # 04:00 EST, once the whole night has passed


def test_a_forbid_window_starting_in_the_repeated_hour_holds_through_both() -> None:
    ws = Windows([Window("w", Cron.parse("30 1 * * *"), 1800, "forbid", NY, "America/New_York")])
    assert not ws.state("X", "taints", _utc("2026-11-01T05:45")).open  # 01:45 EDT, the first time
    assert not ws.state("X", "taints", _utc("2026-11-01T06:45")).open  # 01:45 EST, the second time
    assert ws.state("X", "taints", _utc("2026-11-01T07:05")).open  # 02:05 EST
    assert ws.state("X", "taints", _utc("2026-11-02T07:05")).open  # an ordinary day: 02:05 EST


def test_an_allow_window_starting_in_the_repeated_hour_still_opens_once() -> None:
    """Widening an allow window lets more evictions through: it keeps the first occurrence only."""
    ws = Windows([Window("w", Cron.parse("30 1 * * *"), 1800, "allow", NY, "America/New_York")])
    assert ws.state("X", "taints", _utc("2026-11-01T05:45")).open
    assert not ws.state("X", "taints", _utc("2026-11-01T06:45")).open

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

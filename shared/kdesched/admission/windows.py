"""Disruption windows: evict only (``allow``), or never (``forbid``), during stated times.

Why: clusters change most during maintenance and incidents, and operators know when they do not
want surprise evictions (business hours, a release freeze, the nightly batch). Upstream declined
time windows (kubernetes-sigs/descheduler#423: "run it as a CronJob"), which an event-driven
descheduler cannot do. Karpenter's disruption budgets take a cron ``schedule`` plus a ``duration``;
so do these, with the window's time zone explicit (default UTC).

A window is *active* from each time its schedule matches, for ``duration``. For one eviction (its
strategy and the run's trigger) the windows that apply are those whose ``strategies`` /
``triggers`` filters match (no filter: all). Evicting is *closed* when an applying ``forbid``
window is active, or when ``allow`` windows apply and none of them is active. A closed run still
plans, reports what it would evict as ``deferred`` and re-decides when the window opens
(:meth:`Windows.next_open`).

The cron matcher is small and strict (no dependency has one): five fields (minute, hour, day of
month, month, day of week) with ``*``, lists, ranges, steps and month / weekday names, plus the
``@hourly``-style shorthands; day of month and day of week are ORed when both are restricted, as
in Vixie cron and Go's robfig/cron that Karpenter uses. Schedules are evaluated on the window's
wall clock at minute resolution. Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod

MONTHS = {n: i + 1 for i, n in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                           "nov", "dec"))}
WEEKDAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
SHORTHANDS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
              "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, MONTHS),
          ("day of week", 0, 7, WEEKDAYS))
HORIZON_DAYS = 366 * 5  # a schedule that matches no time within this (Feb 30) is refused
LOOKAHEAD_SECONDS = 8 * 86400.0  # an opening further away than this is not scheduled (the sweep re-decides)
TRIGGERS = ("taints", "affinity", "rebalance", "sweep", "manual", "continuation")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class CronError(ValueError):
    """A schedule or duration that cannot be used; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed five-field schedule."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 is folded into 0)
    days_any: bool  # day of month was ``*`` (then only the weekday restricts)
    weekdays_any: bool

    @classmethod
    def parse(cls, text: str) -> Cron:
        if not isinstance(text, str) or not text.strip():
            raise CronError("must be a cron schedule of 5 fields (minute hour day-of-month month day-of-week)")
        expanded = SHORTHANDS.get(text.strip().lower(), text)
        parts = expanded.split()
        if len(parts) != 5:
            raise CronError(f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(parts)} in "
                            f"{text!r}")
        sets = [_field(part, *spec) for part, spec in zip(parts, FIELDS, strict=True)]
        weekdays = frozenset(0 if d == 7 else d for d in sets[4])
        cron = cls(text, sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] in ("*", "?"), parts[4] in ("*", "?"))
        if cron.next_match(datetime(2000, 1, 1)) is None:
            raise CronError(f"{text!r} never matches (no such day)")
        return cron

    def _day_matches(self, d: datetime) -> bool:
        if d.month not in self.months:
            return False
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.days_any or self.weekdays_any:
            return dom and dow  # the unrestricted one matches every day
        return dom or dow  # both restricted: either (Vixie cron, robfig/cron)

    def matches(self, t: datetime) -> bool:
        """Does the (wall-clock) minute of ``t`` match?"""
        return t.minute in self.minutes and t.hour in self.hours and self._day_matches(t)

    def next_match(self, after: datetime) -> datetime | None:
        """The first matching minute at or after ``after`` (naive wall-clock time), within the horizon."""
        start = after.replace(second=0, microsecond=0)
        if start < after:
            start += timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        hours, minutes = sorted(self.hours), sorted(self.minutes)
        for i in range(HORIZON_DAYS):
            if self._day_matches(day):
                for h in hours:
                    if i == 0 and h < start.hour:
                        continue
                    for mi in minutes:
                        if i == 0 and h == start.hour and mi < start.minute:
                            continue
                        return day.replace(hour=h, minute=mi)
            day += timedelta(days=1)
        return None

    def prev_match(self, before: datetime) -> datetime | None:
        """The last matching minute at or before ``before`` (naive wall-clock time), within the horizon."""
        end = before.replace(second=0, microsecond=0)
        day = end.replace(hour=0, minute=0)
        hours, minutes = sorted(self.hours, reverse=True), sorted(self.minutes, reverse=True)
        for i in range(HORIZON_DAYS):
            if self._day_matches(day):
                for h in hours:
                    if i == 0 and h > end.hour:
                        continue
                    for mi in minutes:
                        if i == 0 and h == end.hour and mi > end.minute:
                            continue
                        return day.replace(hour=h, minute=mi)
            day -= timedelta(days=1)
        return None


def _field(part: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for item in part.split(","):
        if not item:
            raise CronError(f"{name}: empty list item in {part!r}")
        rng, _, step_text = item.partition("/")
        step = 1
        if _:
            if not (step_text.isascii() and step_text.isdigit()) or int(step_text) < 1:
                raise CronError(f"{name}: step must be a positive integer, got {step_text!r}")
            step = int(step_text)
        if rng in ("*", "?"):
            a, b = low, high if name != "day of week" else 6
        elif "-" in rng:
            x, _, y = rng.partition("-")
            a, b = _value(x, name, low, high, names), _value(y, name, low, high, names)
            if a > b:
                raise CronError(f"{name}: range {rng!r} goes backwards")
        else:
            a = _value(rng, name, low, high, names)
            # "5/15" = from 5 to the end, every 15; a day of week ends at Saturday (robfig/cron), or
            # "1/2" would reach 7, Sunday again: Sun, Mon, Wed, Fri where Mon, Wed, Fri was written
            b = (6 if name == "day of week" and a <= 6 else high) if _ else a
        out.update(range(a, b + 1, step))
    return frozenset(out)


def _value(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    key = text.lower()
    if key in names:
        return names[key]
    if not (text.isascii() and text.isdigit()):
        raise CronError(f"{name}: {text!r} is not a number" + (f" or a name ({', '.join(names)})" if names else ""))
    v = int(text)
    if not low <= v <= high:
        raise CronError(f"{name}: {v} is outside {low}-{high}")
    return v


def parse_duration(text: object) -> float:
    """``"2h"``, ``"30m"``, ``"1h30m"``, ``"90s"`` -> seconds (> 0)."""
    if not isinstance(text, str) or not text:
        raise CronError(f"must be a duration such as \"2h\", \"30m\" or \"1h30m\", got {text!r}")
    match = _DURATION.match(text)
    if match is None or not any(match.groups()):
        raise CronError(f"must be a duration such as \"2h\", \"30m\" or \"1h30m\", got {text!r}")
    h, mi, s = (int(g) if g else 0 for g in match.groups())
    seconds = h * 3600 + mi * 60 + s
    if seconds <= 0:
        raise CronError(f"must be longer than 0, got {text!r}")
    return float(seconds)


def parse_zone(name: object) -> tzinfo:
    if name is None or name == "UTC":
        return UTC
    if not isinstance(name, str) or not name:
        raise CronError(f"must be an IANA time zone name such as \"Europe/Berlin\", got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(f"unknown time zone {name!r} ({type(exc).__name__})") from None


@dataclass(frozen=True, slots=True)
class Window:
    """One ``kdesched.disruptionWindows`` entry."""

    name: str
    cron: Cron
    duration_seconds: float
    action: str  # "allow" | "forbid"
    zone: tzinfo = UTC
    zone_name: str = "UTC"
    strategies: frozenset[str] | None = None
    triggers: frozenset[str] | None = None

    def applies(self, strategy: str, trigger: str, origin: str = "") -> bool:
        """Whether this window covers ``strategy`` in a run labelled ``trigger``; a continuation
        (``trigger`` = ``continuation``) is also covered by its ``origin``, the run it repeats."""
        return (self.strategies is None or strategy in self.strategies) and (
            self.triggers is None or trigger in self.triggers or bool(origin) and origin in self.triggers)

    def _wall(self, now: float) -> datetime:
        return datetime.fromtimestamp(now, self.zone).replace(tzinfo=None, fold=0)  # a repeated hour: the first

    def _epoch(self, wall: datetime) -> float:
        return wall.replace(tzinfo=self.zone).timestamp()

    def _latest_start(self, at: float) -> float | None:
        """The latest occurrence start at or before ``at`` (epoch seconds). Wall-clock times are
        ambiguous when the clock goes back (DST): 02:15 comes twice, the second time after 02:30,
        so the search also starts an hour later and keeps only starts that are really past."""
        best: float | None = None
        for shift in (0.0, 3600.0):
            wall = self.cron.prev_match(self._wall(at + shift))
            for _ in range(120):
                if wall is None or self._epoch(wall) <= at:
                    break
                wall = self.cron.prev_match(wall - timedelta(minutes=1))
            if wall is not None and self._epoch(wall) <= at and (best is None or self._epoch(wall) > best):
                best = self._epoch(wall)
        return best

    def _end(self, start: float) -> float:
        """When the occurrence starting at ``start`` (epoch seconds, the first time its wall-clock
        time came) ends. A forbid window whose start time comes twice (the clock went back) holds
        until the second time's end: evicting in a repeated hour the operator forbade is the worse
        mistake, and chained occurrences (``0 0-3 * * *`` for 1h) would otherwise leave that hour
        open. An allow window keeps the first only (widening it would let more evictions through)."""
        if self.action != "forbid":
            return start + self.duration_seconds
        wall = self._wall(start)
        again = wall.replace(tzinfo=self.zone, fold=1).timestamp()  # the same as start unless repeated
        return max(start, again) + self.duration_seconds

    def active_until(self, now: float) -> float | None:
        """When the active occurrence ends (epoch seconds; occurrences that overlap or touch chain
        into one), or None when the window is not active at ``now``."""
        start = self._latest_start(now)
        if start is None or self._end(start) <= now:
            return None
        end = self._end(start)
        horizon = now + LOOKAHEAD_SECONDS
        while end < horizon:  # a later occurrence that starts before this one ends extends it
            later = self._latest_start(end)
            if later is None or self._end(later) <= end:
                return end
            end = self._end(later)
        return end

    def next_start(self, now: float) -> float | None:
        """The next occurrence's start after ``now`` (epoch seconds)."""
        wall = self.cron.next_match(self._wall(now) + timedelta(microseconds=1))
        for _ in range(120):  # a wall-clock time that comes again after the clock went back
            if wall is None or self._epoch(wall) > now:
                break
            wall = self.cron.next_match(wall + timedelta(minutes=1))
        return None if wall is None else self._epoch(wall)

    def describe(self) -> str:
        label = f'"{self.name}"' if self.name else f"({self.cron.text})"
        return (f"disruption window {label} ({self.action} {self.cron.text} for {_human(self.duration_seconds)}, "
                f"{self.zone_name})")


@dataclass(frozen=True, slots=True)
class WindowState:
    """Whether one (strategy, trigger) may evict at a time, and if not, which window stops it and
    when evicting opens again (None: not within the horizon)."""

    open: bool
    reason: str = ""
    opens_at: float | None = None


class Windows:
    """Every window of the policy."""

    def __init__(self, windows: Sequence[Window]) -> None:
        self.windows = tuple(windows)

    def __bool__(self) -> bool:
        return bool(self.windows)

    def _closed_by(self, strategy: str, trigger: str, now: float, origin: str = "") -> tuple[str, float | None]:
        """("", None) when open; else (why, the earliest time it could open)."""
        applying = [w for w in self.windows if w.applies(strategy, trigger, origin)]
        forbids = [(w, w.active_until(now)) for w in applying if w.action == "forbid"]
        active = [(w, end) for w, end in forbids if end is not None]
        if active:
            w, end = max(active, key=lambda we: we[1] or 0.0)
            until = datetime.fromtimestamp(end or now, w.zone).strftime("%Y-%m-%d %H:%M %Z")
            return f"{w.describe()} forbids evictions until {until}", end
        allows = [w for w in applying if w.action == "allow"]
        if not allows or any(w.active_until(now) is not None for w in allows):
            return "", None
        starts = [s for s in (w.next_start(now) for w in allows) if s is not None]
        nxt = min(starts) if starts else None
        names = "; ".join(w.describe() for w in allows)
        when = ("" if nxt is None else
                f"; the next opens {datetime.fromtimestamp(nxt, UTC).strftime('%Y-%m-%d %H:%M UTC')}")
        return f"outside every allowing {names}{when}", nxt

    def state(self, strategy: str, trigger: str, now: float, origin: str = "") -> WindowState:
        why, candidate = self._closed_by(strategy, trigger, now, origin)
        if not why:
            return WindowState(True)
        t = candidate
        for _ in range(100):  # each step moves past the window that closed it
            if t is None or t > now + LOOKAHEAD_SECONDS:
                return WindowState(False, why, None)
            more, nxt = self._closed_by(strategy, trigger, t, origin)
            if not more:
                return WindowState(False, why, t)
            t = nxt if nxt is not None and nxt > t else None
        return WindowState(False, why, None)


def _human(seconds: float) -> str:
    h, rest = divmod(int(seconds), 3600)
    mi, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (mi, "m"), (s, "s")) if v) or "0s"


class WindowControl:
    """The pipeline's control: an eviction whose strategy and trigger a closed window covers is
    deferred (reported ``deferred``, nothing written for it) until the window opens."""

    name = "window"

    def __init__(self, windows: Sequence[Window]) -> None:
        self.windows = Windows(windows)

    def start(self, ctx: RunContext) -> Check:
        return _WindowCheck(self.windows, ctx)


class _WindowCheck(Check):
    def __init__(self, windows: Windows, ctx: RunContext) -> None:
        self.windows, self.ctx = windows, ctx
        self.states: dict[str, WindowState] = {}

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        # known before the plan (it depends on the strategy alone): a deferral, so the bucket after
        # it neither refuses nor counts the pod (kdesched.admission.pipeline)
        return self._verdict(strategy)

    def planned(self, eviction: PlannedEviction, held: bool) -> Verdict | None:
        return self._verdict(eviction.strategy)

    def _verdict(self, strategy: str) -> Verdict | None:
        if not self.windows:
            return None
        st = self.states.get(strategy)
        if st is None:
            st = self.states[strategy] = self.windows.state(strategy, self.ctx.trigger, self.ctx.now, self.ctx.origin)
        if st.open:
            return None
        when = ("it re-decides then" if st.opens_at is not None else
                "no opening within 8 days: the next event or sweep re-decides")
        return Verdict(Reason.WINDOW, f"{st.reason}; {when}", st.opens_at)

"""ServerClock: the API server's clock, estimated from the ``Date`` header of its answers.

Why: the disruption ledger is shared by every kdesched process (the functions' pods, ``serve``
replicas, ``run``), and the times in it (admissions, cool-downs, the health brake's "last
unhealthy", held pods' ``since``) are written by one process and compared by another. Each
process's own wall clock may be minutes off the others' (no NTP in a container, a paused VM, a
node whose clock drifted): with one clock 3 minutes ahead, two ``taints`` functions serving a
6-node maintenance made 1 eviction in 120 s instead of 6 in 25 s, a clock 60 s ahead made fresh
admissions look abandoned, and one an hour ahead kept the health brake "settling" for an hour.
The API server is the one clock every process already talks to, and its own timestamps
(``creationTimestamp``, conditions) are what the ledger's times are compared with. So every time
that is written to the cluster or compared with one from it is the API server's time, as this
module estimates it (docs/reactor.md, "One clock").

How: every answer of the API server (a success or an error) carries ``Date`` (RFC 7231, whole
seconds), the server's clock when it answered. The answer was made after the request was sent
and before it was received, so, with ``mono`` the local ``time.monotonic()``, the offset
``server epoch seconds - mono`` lies within

    lower = date - mono_received        upper = date + 1 - mono_sent

Each sample's bounds are intersected with those kept so far; the 1 s resolution of ``Date``
shrinks as samples fall at different fractions of a second, to about the round trip (a few ms on
a cluster network). The estimate is kept against the monotonic clock, so a jump of the local wall
clock (an NTP step, someone's ``date -s``) changes nothing; the kept bounds widen by
:data:`DRIFT` (100 ppm) per second of age, so a local oscillator that runs slightly fast or slow
is followed. When a sample no longer fits the kept bounds (the server's clock was stepped, or a
request went to another API server whose clock differs), the estimate restarts from that newest
sample. :meth:`ServerClock.now` is the middle of the bounds, never earlier than a time it
returned before in the same run of samples (times written in a row do not go backwards).

Whose answers: only those kube-apiserver makes itself (:func:`answered_by_api_server`). Its
aggregator passes an aggregated API's answer through with the backend's ``Date``: for
``metrics.k8s.io`` that is metrics-server, a pod on some node, with that node's clock. Taken as a
sample, one metrics read on a node 3 minutes ahead restarted the estimate 3 minutes ahead (serve's
collector reads it every 5 s, a run right before its ``now``). So the samples come from the core
group (``/api``) and the built-in groups kdesched uses (:data:`CLOCK_GROUPS`), never from any other
group: a group kdesched does not know may be an aggregated one.

Before the first answer there is nothing to estimate from: :meth:`ServerClock.now` is the local
wall clock then (said once in the log, at debug level). Every process reads the cluster before it
decides anything, so no decision is made on it in practice.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

log = logging.getLogger("kdesched.kube.clock")

DRIFT = 100e-6  # how fast the kept bounds widen (s/s): quartz oscillators are within ~50 ppm
WARN_OFFSET_SECONDS = 5.0  # a local clock this far off the API server's is logged (once) as a warning
DATE_RESOLUTION = 1.0  # RFC 7231 dates are whole seconds
#: the API groups whose answers kube-apiserver makes itself, of those kdesched uses ("": the core
#: group, ``/api``); every kind of kdesched.kube.resources is in one (a test holds it so)
CLOCK_GROUPS = frozenset({"", "apps", "coordination.k8s.io", "events.k8s.io", "policy", "scheduling.k8s.io"})


def answered_by_api_server(path: str) -> bool:
    """Whether an answer to ``path`` (an API path, no query) is kube-apiserver's own, its ``Date``
    a sample of its clock: the core group's or a group of :data:`CLOCK_GROUPS`. Any other group may
    be an aggregated API answered by a backend with its own clock (module docstring)."""
    parts = path.split("?", 1)[0].split("/")
    if len(parts) < 2 or parts[0] != "":
        return False
    if parts[1] == "api":
        return True
    return parts[1] == "apis" and len(parts) > 2 and parts[2] != "" and parts[2] in CLOCK_GROUPS


@functools.lru_cache(maxsize=8)  # the answers of one second share their Date: parsed once
def parse_http_date(value: str | None) -> float | None:
    """An HTTP ``Date`` (RFC 7231 IMF-fixdate, or the obsolete RFC 850 form) as epoch seconds, or
    None when it is missing or not a date (asctime's form carries no zone: not taken)."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None or parsed.tzinfo is None:  # a date with no zone: not an HTTP date
        return None
    return parsed.timestamp()


def date_header(headers: Mapping[str, Any] | None) -> str | None:
    """The ``Date`` of a response's headers (urllib3's HTTPHeaderDict, or a plain dict of any case)."""
    if not headers:
        return None
    value = headers.get("Date")
    if value is None:
        value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == "date"), None)
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Sample:
    """One answer: the server's ``Date`` (epoch seconds, whole) and the local monotonic times the
    request was sent and its answer received."""

    date: float
    sent: float
    received: float

    @property
    def lower(self) -> float:
        """The least the offset (server epoch seconds - local monotonic) can be."""
        return self.date - self.received

    @property
    def upper(self) -> float:
        """The most the offset can be (``Date`` is truncated to the second)."""
        return self.date + DATE_RESOLUTION - self.sent


@dataclass(frozen=True, slots=True)
class Bounds:
    """The offset's bounds, each as of the monotonic time of the sample that set it (it widens by
    :data:`DRIFT` per second after that), and how many samples they hold since the last restart."""

    lower: float
    lower_at: float
    upper: float
    upper_at: float
    samples: int = 1

    @classmethod
    def of(cls, s: Sample) -> Bounds:
        return cls(s.lower, s.received, s.upper, s.received)

    def at(self, mono: float) -> tuple[float, float]:
        """The bounds at monotonic time ``mono``, widened for their age."""
        return (self.lower - DRIFT * max(0.0, mono - self.lower_at),
                self.upper + DRIFT * max(0.0, mono - self.upper_at))

    def width(self, mono: float) -> float:
        lo, hi = self.at(mono)
        return hi - lo

    def add(self, s: Sample) -> Bounds | None:
        """The bounds narrowed by ``s``, or None when ``s`` does not fit them (the server's clock stepped)."""
        lo, hi = self.at(s.received)
        new = self
        if s.lower >= lo:
            new = replace(new, lower=s.lower, lower_at=s.received)
        if s.upper <= hi:
            new = replace(new, upper=s.upper, upper_at=s.received)
        nlo, nhi = new.at(s.received)
        if nlo > nhi:
            return None
        return replace(new, samples=self.samples + 1)


@dataclass(frozen=True, slots=True)
class ClockState:
    """What a :class:`ServerClock` knows, for logs, metrics and tests."""

    synced: bool
    offset_seconds: float  # local wall clock minus the server's estimated clock (0 before any sample)
    uncertainty_seconds: float  # the width of the bounds (inf before any sample)
    samples: int  # samples in the current estimate
    restarts: int  # how many times the estimate restarted (the server's clock stepped)


class ServerClock:
    """The API server's clock, estimated from the answers it gave (module docstring). Thread-safe:
    one instance is shared by a :class:`~kdesched.kube.client.KubeClient` and its siblings."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, warn_offset_seconds: float = WARN_OFFSET_SECONDS) -> None:
        self._monotonic = monotonic
        self._wall = wall  # the local wall clock: the fallback before any sample, and offset_seconds
        self.warn_offset_seconds = warn_offset_seconds
        self._lock = threading.Lock()
        self._bounds: Bounds | None = None
        self._floor = float("-inf")  # the latest time now() returned since the last restart
        self._restarts = 0
        self._said_unsynced = False
        self._warned = False

    # -- samples ---------------------------------------------------------------------------------
    def observe(self, headers: Mapping[str, Any] | None, sent: float, received: float) -> bool:
        """Take the ``Date`` of one answer's ``headers``, for a request sent at monotonic ``sent``
        and answered at ``received``. False when it has no usable ``Date`` (ignored)."""
        date = parse_http_date(date_header(headers))
        if date is None:
            return False
        self.add(Sample(date, sent, max(sent, received)))
        return True

    def add(self, sample: Sample) -> None:
        with self._lock:
            bounds = self._bounds.add(sample) if self._bounds is not None else None
            if bounds is None:
                if self._bounds is not None:
                    self._restarts += 1
                    old = self._offset_mid(self._bounds, sample.received)
                    log.info("the API server's clock moved by %+.1fs (or this answer came from another API "
                             "server): estimating it again from this answer", (sample.lower + sample.upper) / 2 - old)
                bounds = Bounds.of(sample)
                self._floor = float("-inf")
            self._bounds = bounds
            warn = not self._warned and self.warn_offset_seconds > 0
            offset = self._wall() - (self._monotonic() + self._offset_mid(bounds, self._monotonic())) if warn else 0.0
            if warn and abs(offset) > self.warn_offset_seconds:
                self._warned = True
            else:
                warn = False
        if warn:
            log.warning("this process's clock is %.1fs %s the API server's (from the Date of its answers); kdesched "
                        "uses the API server's time for every time it writes to the cluster or compares with one "
                        "from it, so this changes no decision, but check the node's time synchronisation",
                        abs(offset), "ahead of" if offset > 0 else "behind")

    @staticmethod
    def _offset_mid(bounds: Bounds, mono: float) -> float:
        lo, hi = bounds.at(mono)
        return (lo + hi) / 2

    # -- reading ---------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        """Has at least one answer of the API server been seen?"""
        with self._lock:
            return self._bounds is not None

    def now(self) -> float:
        """The API server's time now, epoch seconds (the local wall clock before any answer)."""
        with self._lock:
            bounds = self._bounds
            if bounds is None:
                if not self._said_unsynced:
                    self._said_unsynced = True
                    log.debug("no answer from the API server yet: using this process's own clock until one comes")
                return self._wall()
            mono = self._monotonic()
            lo, hi = bounds.at(mono)
            value = min(max(mono + (lo + hi) / 2, self._floor), mono + hi)
            self._floor = value
            return value

    def offset_seconds(self) -> float:
        """The local wall clock minus the API server's estimated clock (positive: this process's
        clock is ahead); 0 before any answer."""
        with self._lock:
            if self._bounds is None:
                return 0.0
            mono = self._monotonic()
            return self._wall() - (mono + self._offset_mid(self._bounds, mono))

    def state(self) -> ClockState:
        with self._lock:
            bounds, restarts = self._bounds, self._restarts
        if bounds is None:
            return ClockState(False, 0.0, float("inf"), 0, restarts)
        return ClockState(True, self.offset_seconds(), bounds.width(self._monotonic()), bounds.samples, restarts)


__all__ = [
    "CLOCK_GROUPS",
    "DRIFT",
    "WARN_OFFSET_SECONDS",
    "Bounds",
    "ClockState",
    "Sample",
    "ServerClock",
    "answered_by_api_server",
    "date_header",
    "parse_http_date",
]

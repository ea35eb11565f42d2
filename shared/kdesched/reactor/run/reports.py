"""The reply of every run: the run report, shaped once for the functions and ``kdesched serve``.

Why: a run serves one or many events (a coalesced burst), and each delivery gets the same report
marked with its own trigger and how many events the run served. The shape is a contract (the
``dev.kdesched.run.completed`` event, docs/cli.md's JSON report): it is built here and nowhere else.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdesched.engine import RunReport
from kdesched.reactor.events.requests import RequestError, RunRequest, Trigger
from kdesched.reactor.run.settings import ReactorSettings

MAX_TRIGGERS_LISTED = 20


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run produced: its report body (JSON-ready) and the events it served."""

    body: Mapping[str, Any]
    triggers: tuple[Trigger, ...]
    strategies: tuple[str, ...] = ()
    extra_notes: tuple[str, ...] = field(default_factory=tuple)

    def with_notes(self, before: Sequence[str] = (), after: Sequence[str] = ()) -> RunResult:
        body = dict(self.body)
        body["notes"] = [*before, *body.get("notes", []), *after]
        return RunResult(body, self.triggers, self.strategies)

    @property
    def evictions(self) -> list[dict[str, Any]]:
        return list(self.body.get("evictions", []))


def empty_result(dry_run: bool, note: str, triggers: Sequence[Trigger] = ()) -> RunResult:
    """A run that ran nothing, and why."""
    return RunResult({"dryRun": dry_run, "evictions": [], "blocked": [], "durationSeconds": 0.0, "notes": [note],
                      "errors": [], "summary": {}}, tuple(triggers))


def result_of(report: RunReport, strategies: Sequence[str], triggers: Sequence[Trigger]) -> RunResult:
    j = report.to_json()
    summary = j.get("summary", {})
    names = list(strategies) or [s["strategy"] for s in summary.get("strategies", [])]
    body = {"dryRun": j["dryRun"], "evictions": j["evictions"], "blocked": j["blocked"], "strategies": names,
            "durationSeconds": summary.get("durationSeconds", round(report.duration_seconds, 6)),
            "notes": list(summary.get("notes", [])), "errors": list(summary.get("errors", [])), "summary": summary}
    return RunResult(body, tuple(triggers), tuple(names))


def reply(trigger: Trigger, result: RunResult, coalesced: int, dry_run_why: str) -> dict[str, Any]:
    """The report one delivery gets: its own trigger, the run's body, how many events the run served."""
    body = dict(result.body)
    out = {"trigger": trigger.to_json(), "strategies": list(body.get("strategies", result.strategies)), **body,
           "coalesced": coalesced}
    if "dryRun" in body:
        out["dryRunWhy"] = dry_run_why
    if coalesced > 1:
        out["coalescedTriggers"] = [t.to_json() for t in list(result.triggers)[:MAX_TRIGGERS_LISTED]]
    return out


def dry_run_why(dry_run: bool, settings: ReactorSettings) -> str:
    """The report's ``dryRunWhy``, as ``kdesched run`` gives it: what made this run a dry run."""
    if not dry_run:
        return ("live: not a dry-run deployment (no --dry-run, kdesched.dryRun or $KDESCHED_DRY_RUN) "
                "and the event did not ask for one")
    if settings.dry_run:
        return settings.dry_run_why or "a dry-run deployment"
    return "the event asked for one (data.dryRun: true)"


class AnsweredRuns:
    """The runs this process made for ``run.requested`` events, by the event's (source, id).

    Why: CloudEvents make source + id unique, so a second delivery of one is a redelivery (a reply
    lost on the way back, a broker's retry after a timeout), not a second request. Running it again
    re-decided the cluster and answered a different report under the same reply id. A redelivery
    this process ran gets the first run's report, marked ``redelivered``; the same source + id with
    other data (another request that reused an id) is refused with a 400 naming ``id``, not
    answered with someone else's report. Bounded: runs younger than ``seconds`` (the Trigger's
    retries last seconds), at most ``limit`` of them and ``max_bytes`` of reports (a report over a
    quarter of that is not kept: its redelivery runs again). Another process (a second function
    instance) does not know them: its run re-decides, against the same disruption ledger, so
    nothing is evicted twice and pacing holds."""

    def __init__(self, limit: int = 256, seconds: float = 3600.0, max_bytes: int = 4 << 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.seconds, self.max_bytes, self.clock = limit, seconds, max_bytes, clock
        self._runs: OrderedDict[bytes, tuple[float, RunRequest, RunResult, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def _key(trigger: Trigger) -> bytes:
        return hashlib.sha256(f"{trigger.source}\0{trigger.id}".encode(errors="surrogatepass")).digest()

    def get(self, trigger: Trigger, request: RunRequest) -> RunResult | None:
        """The run ``trigger`` already had, or None; RequestError when its id was used for other data."""
        with self._lock:
            self._expire()
            found = self._runs.get(self._key(trigger))
        if found is None:
            return None
        if found[1] != request:
            raise RequestError(f"id: {trigger.id[:80]!r} from source {trigger.source[:80]!r} was used within the "
                               f"hour by a run.requested with other data; a redelivery carries the same data: give "
                               "every request its own id", "id")
        return found[2]

    def put(self, trigger: Trigger, request: RunRequest, result: RunResult) -> None:
        # the report, and the events it answered (an id or source may be megabytes: the body limit's)
        size = len(json.dumps(result.body, default=str)) + sum(len(t.id) + len(t.source) for t in result.triggers)
        if size > self.max_bytes // 4:
            return
        key = self._key(trigger)
        with self._lock:
            old = self._runs.pop(key, None)
            self._bytes += size - (old[3] if old is not None else 0)
            self._runs[key] = (self.clock(), request, result, size)
            self._expire()
            while self._runs and (len(self._runs) > self.limit or self._bytes > self.max_bytes):
                self._bytes -= self._runs.popitem(last=False)[1][3]

    def _expire(self) -> None:
        now = self.clock()
        while self._runs:
            at, _, _, size = next(iter(self._runs.values()))
            if now - at < self.seconds:
                break
            self._runs.popitem(last=False)
            self._bytes -= size

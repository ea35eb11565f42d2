"""AnsweredRuns (kdesched.reactor.run.reports): the run.requested runs a process remembers for their
redeliveries, and its bounds: an hour, a count, bytes of reports, and a key of fixed size."""

from __future__ import annotations

import pytest
from kdesched.reactor.events.requests import RequestError, RunRequest, Trigger
from kdesched.reactor.events.types import RUN_REQUESTED
from kdesched.reactor.run.reports import AnsweredRuns, RunResult

REQ = RunRequest(strategies=("RemovePodsViolatingNodeTaints",))
ROW = {"namespace": "default", "pod": "web-7d9f8c6b5-x2x4z", "node": "pool-a-node-0001", "result": "evicted"}


def trig(i: object, source: str = "/ci") -> Trigger:
    return Trigger(RUN_REQUESTED, f"id-{i}", source)


def result(evictions: int = 1) -> RunResult:
    return RunResult({"evictions": [dict(ROW, pod=f"web-{i}") for i in range(evictions)]}, ())


def test_a_run_is_found_by_source_and_id_with_the_same_request_only() -> None:
    runs = AnsweredRuns()
    runs.put(trig(1), REQ, result())
    assert runs.get(trig(1), REQ) is not None
    assert runs.get(trig(1, "/other"), REQ) is None and runs.get(trig(2), REQ) is None
    with pytest.raises(RequestError) as err:
        runs.get(trig(1), RunRequest(strategies=("RemovePodsViolatingNodeTaints",), dry_run=True))
    assert err.value.field == "id" and "with other data" in str(err.value)


def test_expired_runs_are_released_not_only_ignored() -> None:
    now = [0.0]
    runs = AnsweredRuns(seconds=3600, clock=lambda: now[0])
    for i in range(10):
        runs.put(trig(i), REQ, result())
    now[0] = 3600.0
    assert runs.get(trig(0), REQ) is None
    runs.put(trig("new"), REQ, result())
    assert len(runs._runs) == 1  # the ten expired ones are gone


def test_the_reports_kept_are_bounded_in_bytes_and_a_huge_one_is_not_kept() -> None:
    runs = AnsweredRuns(limit=1000, max_bytes=64_000)
    for i in range(100):
        runs.put(trig(i), REQ, result(20))  # ~2 kB each
    assert runs._bytes <= 64_000 and 20 <= len(runs._runs) < 100
    assert runs.get(trig(99), REQ) is not None and runs.get(trig(0), REQ) is None  # the oldest went first
    runs.put(trig("huge"), REQ, result(2000))  # over a quarter of the bound: its redelivery runs again
    assert runs.get(trig("huge"), REQ) is None and runs._bytes <= 64_000


def test_the_key_does_not_grow_with_the_id_and_the_events_kept_count_in_the_bound() -> None:
    runs = AnsweredRuns(max_bytes=4 << 20)
    long = Trigger(RUN_REQUESTED, "x" * (512 << 10), "/ci")
    runs.put(long, REQ, RunResult(result().body, (long,)))
    assert all(len(k) == 32 for k in runs._runs) and runs.get(long, REQ) is not None
    assert runs._bytes > 512 << 10  # the run keeps its trigger (the reply echoes it): counted
    huge = Trigger(RUN_REQUESTED, "y" * (2 << 20), "/ci")
    runs.put(huge, REQ, RunResult(result().body, (huge,)))  # over a quarter of the bound: not kept
    assert runs.get(huge, REQ) is None and runs._bytes < 1 << 20

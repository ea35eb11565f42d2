"""The live executor with several evictions in flight, over real HTTP against the fake API server.

Covers: evictions really overlap and never more than the bound (the fake counts the eviction
requests it is handling at once and can hold them until a number have arrived: no timing
assertions); outcomes in plan order whatever order they finished in; every answer (404, uid 409,
429 with Retry-After, 5xx then success, 403, PDB 429 to the end) handled as in a sequential run;
several pods under one PDB in flight at once (exactly the budget evicted, the rest blocked);
Events all posted (or failed and logged) before ``execute`` returns, an Event failure never
failing an eviction; one eviction's unexpected error leaving the others alone.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from kdesched.evictor.execute import LiveExecutor, RetrySettings
from kdesched.kube.client import ClientLimits, KubeClient
from kdesched.model.records import Pod
from kdesched.strategies.framework import PlannedEviction

from tests.builders import pdb_obj, pod_obj
from tests.fakeapi import FakeApiServer

RETRY = RetrySettings(max_attempts=3, initial_backoff_seconds=0.5, max_backoff_seconds=4.0, max_total_seconds=60.0)


class Sleeps:
    """An injected sleep that records the waits (from any thread) instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self.lock:
            self.waits.append(seconds)


def planned(fake: FakeApiServer, name: str, **kwargs: Any) -> PlannedEviction:
    raw = pod_obj(name, node="n1", **kwargs)
    fake.add(raw)
    return PlannedEviction(Pod.from_api(raw), "n1", "RemoveDuplicates", "default", "duplicate")


def path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}/eviction"


def test_evictions_overlap_up_to_the_bound_and_come_back_in_plan_order(fake_api: FakeApiServer,
                                                                        wide: KubeClient) -> None:
    plan = [planned(fake_api, f"p{i:02d}") for i in range(12)]
    fake_api.gather_evictions(4)
    live = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=4)
    outcomes = live.execute(plan)
    assert fake_api.max_evictions_in_flight == 4  # overlapped (> 1) and never above the bound (<= 4)
    assert [o.eviction.pod.name for o in outcomes] == [f"p{i:02d}" for i in range(12)]
    assert {o.result for o in outcomes} == {"evicted"}
    # every Event was posted before execute returned
    assert sorted(e["regarding"]["name"] for e in fake_api.list("Event")) == [f"p{i:02d}" for i in range(12)]


def test_the_bound_holds_when_the_server_would_take_more(fake_api: FakeApiServer, wide: KubeClient) -> None:
    plan = [planned(fake_api, f"p{i}") for i in range(9)]
    fake_api.gather_evictions(6, timeout=0.5)  # waits for 6 that never come: the executor sends at most 3
    outcomes = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=3).execute(plan)
    assert fake_api.max_evictions_in_flight == 3
    assert [o.result for o in outcomes] == ["evicted"] * 9


def test_one_at_a_time_when_the_bound_is_1(fake_api: FakeApiServer, wide: KubeClient) -> None:
    plan = [planned(fake_api, f"p{i}") for i in range(4)]
    fake_api.gather_evictions(2, timeout=0.2)
    outcomes = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=1).execute(plan)
    assert fake_api.max_evictions_in_flight == 1
    assert [o.result for o in outcomes] == ["evicted"] * 4


def test_every_answer_is_handled_as_in_a_sequential_run_and_reported_in_plan_order(
        fake_api: FakeApiServer, wide: KubeClient, caplog: pytest.LogCaptureFixture) -> None:
    slow = planned(fake_api, "slow")           # 503, 502, then evicted: finishes after the others
    gone = planned(fake_api, "gone")
    replaced = planned(fake_api, "replaced")
    throttled = planned(fake_api, "throttled")  # 429 with Retry-After 7, then evicted
    forbidden = planned(fake_api, "forbidden")
    guarded = planned(fake_api, "guarded", labels={"app": "db"})
    fake_api.add(pdb_obj("db", {"app": "db"}, disruptions_allowed=0))
    fake_api.delete("Pod", "gone", "default")
    fake_api.update({**pod_obj("replaced", node="n1"), "metadata": {"name": "replaced", "namespace": "default",
                                                                       "uid": "another-uid"}})
    fake_api.script("POST", path("slow"), [503, 502])  # transient (a plain 500 is not: test_execute)
    fake_api.script("POST", path("throttled"), [(429, 7)])
    fake_api.script("POST", path("forbidden"), [403])
    sleeps = Sleeps()
    plan = [slow, gone, replaced, throttled, forbidden, guarded]
    with caplog.at_level(logging.INFO, logger="kdesched.evictor"):
        outcomes = LiveExecutor(wide, RETRY, sleep=sleeps, max_concurrent=6).execute(plan, failure_events=True)
    assert [(o.eviction.pod.name, o.result, o.attempts) for o in outcomes] == [
        ("slow", "evicted", 3), ("gone", "already-gone", 1), ("replaced", "already-gone", 1),
        ("throttled", "evicted", 2), ("forbidden", "failed", 1), ("guarded", "blocked", 3)]
    assert "disruption budget" in outcomes[5].message
    assert 7.0 in sleeps.waits  # Retry-After honoured in its own worker
    assert len(sleeps.waits) == 2 + 1 + 2  # slow's two backoffs, throttled's one, guarded's two
    # one log line per eviction, whatever the order
    evicted_lines = sorted(r.getMessage().split(":")[0] for r in caplog.records if r.getMessage().startswith("evicted "))
    assert evicted_lines == ["evicted default/slow from n1", "evicted default/throttled from n1"]
    # Normal events for the evicted, Warning events for the failures (failure_events), none for already-gone
    events = {(e["regarding"]["name"], e["type"]) for e in fake_api.list("Event")}
    assert events == {("slow", "Normal"), ("throttled", "Normal"), ("forbidden", "Warning"), ("guarded", "Warning")}


def test_pods_under_one_pdb_in_flight_at_once_evict_exactly_the_budget(fake_api: FakeApiServer,
                                                                       wide: KubeClient) -> None:
    plan = [planned(fake_api, f"db-{i}", labels={"app": "db"}) for i in range(6)]
    fake_api.add(pdb_obj("db", {"app": "db"}, disruptions_allowed=2))
    fake_api.gather_evictions(6)
    outcomes = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=6).execute(plan)
    assert fake_api.max_evictions_in_flight == 6
    results = [o.result for o in outcomes]
    assert results.count("evicted") == 2 and results.count("blocked") == 4
    assert fake_api.get("PodDisruptionBudget", "db", "default")["status"]["disruptionsAllowed"] == 0
    assert len(fake_api.list("Pod")) == 4
    # every blocked one was retried within its budget before giving up
    assert all(o.attempts == RETRY.max_attempts for o in outcomes if o.result == "blocked")


def test_a_failing_event_is_logged_and_never_fails_the_eviction(fake_api: FakeApiServer, wide: KubeClient,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    plan = [planned(fake_api, f"p{i}") for i in range(3)]
    # 403 is final (a plain 500 is retried now: an Event is posted under one name, a repeat is harmless)
    fake_api.script("POST", "/apis/events.k8s.io/v1/namespaces/default/events", [403, 403, 403])
    with caplog.at_level(logging.WARNING, logger="kdesched.evictor"):
        live = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=3)
        outcomes = live.execute(plan)
    assert [o.result for o in outcomes] == ["evicted"] * 3
    assert sum("could not post event" in r.getMessage() for r in caplog.records) == 3
    assert live.events_lost == 3


def test_an_unexpected_error_fails_only_its_own_eviction(fake_api: FakeApiServer, wide: KubeClient,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    plan = [planned(fake_api, f"p{i}") for i in range(5)]
    real = wide.evict_pod

    def evict(namespace: str, name: str, **kwargs: Any) -> None:
        if name == "p2":
            raise RuntimeError("surprise")
        real(namespace, name, **kwargs)

    monkeypatch.setattr(wide, "evict_pod", evict)
    outcomes = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=5).execute(plan)
    assert [o.result for o in outcomes] == ["evicted", "evicted", "failed", "evicted", "evicted"]
    assert "RuntimeError: surprise" in outcomes[2].message


def test_the_default_bound_is_the_clients(fake_api: FakeApiServer, wide: KubeClient, kube: KubeClient) -> None:
    assert LiveExecutor(wide).max_concurrent == 8
    assert LiveExecutor(kube).max_concurrent == 1  # a client without limits: one at a time
    with pytest.raises(ValueError, match="max_concurrent"):
        LiveExecutor(kube, max_concurrent=0)


def test_paced_events_are_all_posted(fake_api: FakeApiServer, wide: KubeClient) -> None:
    plan = [planned(fake_api, f"p{i}") for i in range(5)]
    out = LiveExecutor(wide, RETRY, sleep=Sleeps(), max_concurrent=4).pace([(e, "held") for e in plan])
    assert [o.result for o in out] == ["paced"] * 5
    assert sorted(e["regarding"]["name"] for e in fake_api.list("Event")) == [f"p{i}" for i in range(5)]
    assert fake_api.requests("POST", path("p0")) == []


def test_ctrl_c_sends_no_eviction_not_started_yet(fake_api: FakeApiServer) -> None:
    """A KeyboardInterrupt in the main thread, waiting for a concurrent batch: the evictions in
    flight finish, none queued behind them is sent, and the interrupt goes on up. Before, leaving
    the pool waited for every queued eviction to run to the end (review J, finding 4): all 12 sent."""
    import os
    import signal
    import time

    from tests.fakeapi import Fault

    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=10_000, burst=10_000,
                                                                    max_concurrent_evictions=2))
    plan = [planned(fake_api, f"p{i:02d}") for i in range(12)]
    for i in range(12):
        fake_api.script_eviction(f"default/p{i:02d}", [Fault(delay=0.3)])  # each eviction takes 0.3 s
    live = LiveExecutor(client, RetrySettings(max_attempts=1), events=False, max_concurrent=2)

    def ctrl_c() -> None:  # the operator presses Ctrl-C while the first two are in flight
        limit = time.monotonic() + 10
        while fake_api.evictions_in_flight < 2 and time.monotonic() < limit:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    presser = threading.Thread(target=ctrl_c)
    try:
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            live.execute(plan)
        presser.join()
    finally:
        signal.signal(signal.SIGINT, previous)
        client.close()
    time.sleep(0.5)  # a queued eviction still being sent would show up by now
    sent = [r.path for r in fake_api.requests("POST") if r.path.endswith("/eviction")]
    assert 2 <= len(sent) <= 4, f"{len(sent)} of 12 evictions were sent after Ctrl-C came with 2 in flight"
    # the ones in flight were not cut off: each was carried out
    assert [p for p in (f"p{i:02d}" for i in range(12)) if fake_api.get("Pod", p, "default") is None] == sorted(
        s.split("/")[-2] for s in sent)

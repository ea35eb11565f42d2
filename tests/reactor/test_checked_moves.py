"""Checked moves in the reactor, against the fake API server: a replacement that lands back on the
node it left is reported wasted (``summary.moves``, the metric, a ``WastedMove`` Event on the
Deployment), the workload is backed off for the strategy (a ``WastedMoveBackoff`` "why not"), and
the back-off doubles, so a scheduler that keeps putting the pod back makes no eviction loop. And
the "why not" Events' names make their one-per-minute limit hold across processes.

On the real control plane: tests/realk8s/test_wasted_moves.py."""

from __future__ import annotations

from typing import Any

from kdesched.engine import RunPlan, RunReport
from kdesched.evictor.ledger import backoff_key
from kdesched.evictor.planner import Refusal
from kdesched.evictor.reasons import Reason
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Conflict
from kdesched.model.records import Pod
from kdesched.reactor import metrics as m
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import RunRequest, Trigger
from kdesched.reactor.io.whynot import WHY_NOT, WhyNotEvents, event_name

from tests.builders import NOW
from tests.fakeapi import FakeApiServer
from tests.reactor.test_controls import (
    TAINTS,
    THU_10,
    Clock,
    evicted,
    ledger_of,
    pool,
    reactor,
    taint_event,
    web,
    why_not,
)

KEY = "Deployment/default/web"
FAST = {"cooldown": {"workloadSeconds": 0, "nodeSeconds": 0, "wastedMoveBaseSeconds": 60,
                     "wastedMoveMaxSeconds": 600}}


def replacement(name: str, node: str, at: float) -> dict[str, Any]:
    """The ReplicaSet's new pod, created (and Ready) at wall time ``at``, on ``node``."""
    raw = web(name, node)
    raw["metadata"]["creationTimestamp"] = _ts(at)
    return raw


def _ts(at: float) -> str:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def moves_total(outcome: str) -> float:
    return m.MOVES.labels(TAINTS, outcome)._value.get()  # type: ignore[attr-defined,no-any-return]


def test_a_replacement_back_on_its_node_is_wasted_backed_off_and_no_loop(fake_api: FakeApiServer,
                                                                         kube: KubeClient) -> None:
    pool(fake_api, 1, spares=2)  # p0 tainted with web-7d9f8-0 on it; s0, s1 free
    clock = Clock(THU_10)
    r = reactor(kube, clock, **FAST)
    wasted_before = moves_total("wasted")
    out = taint_event(r, "p0")
    assert evicted(fake_api) == ["web-7d9f8-0"]
    row = out["evictions"][0]
    assert row["destination"] in ("s0", "s1")  # the node the planner reserved
    assert out["summary"]["moves"]["made"] == 1 and out["summary"]["moves"]["checked"] == 0
    # a scheduler that ignores the taint puts the replacement back on p0
    evictions = 1
    for round_ in range(1, 4):
        fake_api.add(replacement(f"web-7d9f8-r{round_}", "p0", clock.t + 2))
        clock.t += 5
        out = taint_event(r, "p0", round_ * 10)
        moves = out["summary"]["moves"]
        assert moves["wasted"] == 1 and moves["outcomes"][0]["why"] == "landed back on node p0", moves
        assert moves["outcomes"][0]["landed"] == "p0" and moves["outcomes"][0]["source"] == "p0"
        backoff = ledger_of(fake_api).backoffs[backoff_key(KEY, TAINTS)]
        assert backoff.wasted == round_
        assert len(evicted(fake_api)) == evictions
        (refusal,) = out["blocked"]
        assert refusal["reason"].startswith(f"backed off after {round_} wasted move(s) (last: landed back on node p0)")
        # within the back-off (60 s, then 120, 240) nothing moves, whatever the events
        clock.t += 60 * 2 ** (round_ - 1) - 1
        assert taint_event(r, "p0", round_ * 10 + 1)["blocked"][0]["reason"].startswith("backed off")
        assert len(evicted(fake_api)) == evictions
        clock.t += 2  # the back-off is over: one more try
        taint_event(r, "p0", round_ * 10 + 2)
        evictions += 1
        assert len(evicted(fake_api)) == evictions
    assert moves_total("wasted") - wasted_before == 3
    (wasted_event,) = why_not(fake_api, "WastedMove")[:1]
    assert wasted_event["regarding"]["kind"] == "Deployment" and wasted_event["regarding"]["name"] == "web"
    assert "moved default/web-7d9f8-0 off node p0 for nothing: landed back on node p0" in wasted_event["note"]
    assert "is backed off for RemovePodsViolatingNodeTaints after 1 wasted move(s) until" in wasted_event["note"]
    assert why_not(fake_api, "WastedMoveBackoff")[0]["regarding"]["name"] == "p0"  # the node event's object
    # the exponential back-off: 4 evictions over 60 + 120 + 240 s, not one per event
    assert clock.t - THU_10 < 60 + 120 + 240 + 30


def test_a_replacement_ready_elsewhere_is_achieved(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 1, spares=2)
    clock = Clock(THU_10)
    r = reactor(kube, clock, **FAST)
    taint_event(r, "p0")
    fake_api.add(replacement("web-7d9f8-r", "s1", clock.t + 3))
    clock.t += 8
    # a taint event on p0 reads only p0's pods now (none left): the move is settled and checked by
    # the next run that reads every pod, here the sweep
    assert taint_event(r, "p0", 1)["summary"]["moves"]["checked"] == 0
    moves = r.run_requested(Trigger(ev.PING, "sweep-1"), RunRequest())["summary"]["moves"]
    (checked,) = moves["outcomes"]
    assert moves["achieved"] == 1 and checked["outcome"] == "achieved" and checked["landed"] == "s1"
    assert checked["secondsToReady"] == 8.0  # no Ready time on the pod: until the run saw it
    assert ledger_of(fake_api).backoffs == {} and why_not(fake_api, "WastedMove") == []


# -- "why not" across processes -------------------------------------------------------------------

def test_why_not_event_names_are_shared_by_every_process_within_a_minute() -> None:
    a = event_name("Node", "", "p0", "Paced", 120.0)
    assert a == event_name("Node", "", "p0", "Paced", 179.9)  # the same minute
    assert a != event_name("Node", "", "p0", "Paced", 180.0) and a != event_name("Node", "", "p0", "CoolDown", 120.0)
    assert a.startswith("p0.") and len(event_name("Node", "", "x" * 253, "Paced", 1.0)) <= 253


def test_a_second_process_posting_the_same_event_in_the_minute_is_suppressed() -> None:
    names: set[str] = set()

    def post(**kw: Any) -> None:  # the API server: a second create of the same name is 409
        if kw["event_name"] in names:
            raise Conflict(409, "AlreadyExists", "events exists", status_reason="AlreadyExists")
        names.add(kw["event_name"])

    pod = Pod.from_api(web("web-7d9f8-0", "p0"))
    plan = RunPlan((), (Refusal(pod, TAINTS, "default", "nowhere to go: no other Ready node", Reason.NOWHERE_TO_GO),), (), (), (), (), {},
                   NOW)
    report = RunReport(plan, (), False)
    processes = [WhyNotEvents(post, clock=Clock(0.0), wall=Clock(THU_10 + 5)) for _ in range(3)]
    suppressed = WHY_NOT.labels("NowhereToGo", "suppressed")._value.get()  # type: ignore[attr-defined]
    assert [p.run_done(report, "p0") for p in processes] == [1, 0, 0]
    assert WHY_NOT.labels("NowhereToGo", "suppressed")._value.get() - suppressed == 2  # type: ignore[attr-defined]
    later = WhyNotEvents(post, clock=Clock(0.0), wall=Clock(THU_10 + 65))
    assert later.run_done(report, "p0") == 1 and len(names) == 2


def test_a_throttled_eviction_is_not_reported_as_held_back_by_a_pdb() -> None:
    from kdesched.evictor.execute import EvictionOutcome
    from kdesched.reactor.io.whynot import PDB, held_back
    from kdesched.strategies.framework import PlannedEviction

    pod = Pod.from_api(web("web-7d9f8-0", "p0"))
    e = PlannedEviction(pod, "p0", TAINTS, "default", "tainted")
    throttled = EvictionOutcome(e, "throttled", "still 429 (API Priority and Fairness, not a PodDisruptionBudget) "
                                "after 5 attempt(s)", 5, "throttled")
    blocked = EvictionOutcome(e, "blocked", "blocked by a PodDisruptionBudget after 5 attempt(s): ...", 5,
                              "disruption-budget")
    plan = RunPlan((), (), (), (), (), (), {}, NOW)
    assert held_back(RunReport(plan, (throttled,), False)) == []
    assert [h.kind for h in held_back(RunReport(plan, (blocked,), False))] == [PDB]

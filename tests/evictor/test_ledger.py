"""The disruption ledger (pure): moves, settling, timeouts, cool-downs with continuation, the
record's round trip, and what the pacer makes of it (in-flight pods down, destinations taken)."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.engine import plan_run
from kdesched.evictor.ledger import Admission, Held, InFlight, Ledger, Move, workload_key
from kdesched.model.records import Pod

from tests.builders import NOW, node_obj, pod, pod_obj, snapshot
from tests.evictor.test_pacing import TAINT, safety, taints_policy, web

T0 = NOW.timestamp()  # the move begins at NOW; the builders' pods were created an hour before
TAINTS = "RemovePodsViolatingNodeTaints"
KEY = "Deployment/default/web"


def wpod(name: str, node: str, *, ready: bool = True, created: float = -3600, **kw: Any) -> Pod:
    """A pod of Deployment web; ``created`` seconds relative to NOW (when the test moves begin)."""
    return Pod.from_api(web(name, node, ready=ready, created=created, **kw))


def admitted(ledger: Ledger, p: Pod, *, at: float = T0, held: bool = False, expected: int = 2, ready: int = 2,
             strategy: str = TAINTS, destination: str = "") -> Ledger:
    return ledger.admit([Admission(p, strategy, held, "node:n1:" + strategy, destination, expected, ready)], at)


# -- moves -----------------------------------------------------------------------------------------

def test_an_admission_starts_a_move_with_the_count_to_get_back_to() -> None:
    a = wpod("web-a", "n1")
    ledger = admitted(Ledger(), a, expected=3, ready=3)
    mv = ledger.move(KEY)
    assert mv is not None and mv.active and (mv.strategy, mv.expected, mv.ready) == (TAINTS, 3, 3)
    assert admitted(ledger, wpod("web-b", "n2"), expected=1, ready=1).move(KEY).expected == 3  # type: ignore[union-attr]
    assert [f.uid for f in mv.inflight] == [a.uid] and ledger.workloads[KEY] == T0 and ledger.nodes["n1"] == T0


def test_a_move_settles_only_when_the_replacement_is_ready_without_counting_the_pod_in_flight() -> None:
    a, b, c = wpod("web-a", "n1"), wpod("web-b", "n2"), wpod("web-c", "n2")
    ledger = admitted(Ledger(), a, expected=3, ready=3)
    # a stale snapshot still shows the evicted pod Ready: not settled (it does not count)
    stale = ledger.settle({KEY: [a, b, c]}, T0 + 1, 120)
    assert not stale.done and stale.ledger.move(KEY) is not None
    # the replacement exists but is not Ready yet
    pending = ledger.settle({KEY: [b, c, wpod("web-d", "n3", ready=False, created=1)]}, T0 + 2, 120)
    assert not pending.done
    done = ledger.settle({KEY: [b, c, wpod("web-d", "n3", created=1)]}, T0 + 3, 120)
    assert done.done == (KEY,) and done.ledger.move(KEY) is None
    # the cool-down outlives the move
    assert done.ledger.workloads[KEY] == T0


def test_without_every_pod_only_the_timeouts_apply() -> None:
    ledger = admitted(Ledger(), wpod("web-a", "n1"))
    assert ledger.settle(None, T0 + 119, 120).ledger.move(KEY) is not None
    expired = ledger.settle(None, T0 + 121, 120)
    move = expired.ledger.move(KEY)
    assert [f.pod for _, f in expired.expired] == ["default/web-a"]
    # no longer holding the allowance, but budgets count it until the workload is whole again
    assert move is not None and not move.active and [f.pod for f in move.lingering] == ["default/web-a"]
    whole = expired.ledger.settle({KEY: [wpod("web-b", "n2"), wpod("web-c", "n3", created=5)]}, T0 + 130, 120)
    assert whole.ledger.move(KEY) is None


def test_held_pods_are_given_up_at_the_timeout_and_dropped_when_gone() -> None:
    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    ledger = admitted(admitted(Ledger(), a), b, held=True)
    mv = ledger.move(KEY)
    assert mv is not None and [h.uid for h in mv.held] == [b.uid]
    # the in-flight pod settles at T0 + 10 (progress): the held one waits until T0 + 10 + timeout
    settled = ledger.settle({KEY: [b, wpod("web-c", "n3", created=5)]}, T0 + 10, 120).ledger
    assert settled.move(KEY) is not None and settled.move(KEY).held  # type: ignore[union-attr]
    assert not settled.settle({KEY: [b]}, T0 + 129, 120).timed_out
    late = settled.settle({KEY: [b]}, T0 + 131, 120)
    assert [h.uid for _, h in late.timed_out] == [b.uid] and late.ledger.move(KEY) is None
    # a held pod that is gone needs no move
    gone = settled.settle({KEY: []}, T0 + 11, 120)
    assert gone.ledger.move(KEY) is None and not gone.timed_out


def test_a_pod_held_again_by_the_same_scope_leaves_its_record_as_it_was() -> None:
    """Every repeat of a move holds its waiting pods again. Rewriting each held entry (a new time
    and run) changed every held workload's record on every run: 50 record writes a run in a pool
    maintenance, most of the client's request budget. Held again by the same scope on the same
    node, the entry stays, with its first time and run."""
    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    first = admitted(Ledger(), a).admit([Admission(b, TAINTS, True, "node:n1:" + TAINTS, "", 2, 2)], T0, "run-1")
    again = first.admit([Admission(b, TAINTS, True, "node:n1:" + TAINTS, "", 2, 2)], T0 + 5, "run-2")
    assert again.move(KEY) == first.move(KEY)
    held = again.move(KEY).held  # type: ignore[union-attr]
    assert [(h.uid, h.since, h.run) for h in held] == [(b.uid, T0, "run-1")]
    assert again.without_run("run-2").move(KEY) == first.move(KEY)  # a lost run-2 commit keeps it held
    # held by another scope now: the entry follows it (the move goes on from there)
    moved = first.admit([Admission(b, TAINTS, True, "node:n9:" + TAINTS, "", 2, 2)], T0 + 5, "run-2")
    assert [(h.scope, h.since, h.run) for h in moved.move(KEY).held] == [  # type: ignore[union-attr]
        ("node:n9:" + TAINTS, T0 + 5, "run-2")]


def test_evicting_a_held_pod_moves_it_to_in_flight() -> None:
    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    ledger = admitted(admitted(Ledger(), a), b, held=True)
    ledger = ledger.settle({KEY: [b, wpod("web-c", "n3", created=5)]}, T0 + 5, 120).ledger
    ledger = admitted(ledger, b, at=T0 + 6)
    mv = ledger.move(KEY)
    assert mv is not None and not mv.held and [f.uid for f in mv.inflight] == [b.uid]
    assert mv.started == T0  # the same move goes on


# -- cool-downs and continuation -------------------------------------------------------------------

def test_a_move_in_progress_is_not_held_back_by_its_own_cool_down() -> None:
    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    ledger = admitted(Ledger(), a)
    assert ledger.cooldown_refusal(b, TAINTS, T0 + 5, 300, 300) is None  # existed when the move began
    # a replacement the move created (flapping) and another strategy are held
    replacement = wpod("web-r", "n2", created=30)
    assert "cool-down: workload" in (ledger.cooldown_refusal(replacement, TAINTS, T0 + 40, 300, 0) or "")
    assert "being moved by RemovePodsViolatingNodeTaints" in (
        ledger.cooldown_refusal(b, "RemoveDuplicates", T0 + 5, 300, 0) or "")


def test_after_the_move_a_new_trigger_is_held_until_the_cool_down_ends() -> None:
    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    ledger = admitted(Ledger(), a).settle({KEY: [b, wpod("web-c", "n3", created=5), wpod("web-d", "n3")]},
                                          T0 + 5, 120).ledger
    assert ledger.move(KEY) is None
    # a balance strategy, or a replacement (created after the eviction), is held by the workload's cool-down
    assert "cool-down: workload" in (ledger.cooldown_refusal(b, "RemoveDuplicates", T0 + 60, 300, 0) or "")
    replacement = wpod("web-c", "n3", created=5)
    assert "cool-down: workload" in (ledger.cooldown_refusal(replacement, TAINTS, T0 + 60, 300, 0) or "")
    assert ledger.cooldown_ends(b, T0 + 60, 300, 0) == T0 + 300
    assert ledger.cooldown_refusal(b, "RemoveDuplicates", T0 + 301, 300, 0) is None
    # a drain (taints, lost labels) reaching the workload's other original pods is paced, not held
    assert ledger.cooldown_refusal(b, TAINTS, T0 + 60, 300, 0) is None
    # the node cool-down holds a pod that came to the node after kdesched evicted from it (a
    # replacement placed back: flapping), and another strategy taking its turn on the node ...
    newcomer = pod("db-1", "n1", owner_name="db", created=10)  # 10 s after the eviction (T0 = NOW)
    assert "cool-down: node n1" in (ledger.cooldown_refusal(newcomer, TAINTS, T0 + 60, 0, 300) or "")
    other = pod("db-0", "n1", owner_name="db")
    assert "cool-down: node n1" in (ledger.cooldown_refusal(other, "RemoveDuplicates", T0 + 60, 0, 300) or "")
    # ... but not the same strategy draining the pods that were there already (a maintenance)
    assert ledger.cooldown_refusal(other, TAINTS, T0 + 60, 0, 300) is None


def test_outcomes_that_did_not_happen_are_taken_back() -> None:
    before = Ledger({}, {KEY: T0 - 1000}, {})
    a = wpod("web-a", "n1")
    ledger = admitted(before, a)
    back = ledger.record_outcomes([a], T0, before)
    assert back.move(KEY) is None and back.workloads == {KEY: T0 - 1000} and "n1" not in back.nodes


# -- the record --------------------------------------------------------------------------------------

def test_the_record_round_trips() -> None:
    a, b = wpod("web-a", "n1", cpu="250m"), wpod("web-b", "n2")
    ledger = admitted(admitted(Ledger(), a, destination="n3"), b, held=True)
    again, problem = Ledger.from_annotation(ledger.to_annotation())
    assert problem == "" and again == ledger


@pytest.mark.parametrize("text,empty", [(None, True), ("", True)])
def test_no_record_is_an_empty_ledger(text: str | None, empty: bool) -> None:
    assert Ledger.from_annotation(text) == (Ledger(), "")


@pytest.mark.parametrize("text", ["not json", '{"v": 1}', "[1]", '{"v":2,"m":{"x":{"s":"S"}}}',
                                  '{"v":2,"m":{"x":{"s":"S","t0":1,"p":1,"e":1,"r":1,"f":[["u"]]}}}'])
def test_an_unreadable_record_is_empty_and_says_why(text: str) -> None:
    ledger, problem = Ledger.from_annotation(text)
    assert ledger == Ledger() and "disruption ledger" in problem


def test_prune_keeps_moves_and_bounds_cool_downs() -> None:
    ledger = Ledger({KEY: Move(TAINTS, 0, 0, 1, 1, (InFlight("u", "d/p", "n1", 0),))},
                    {f"w{i}": float(i) for i in range(50)}, {"old": -1000.0})
    pruned = ledger.prune(60, 1000, 10)
    assert pruned.move(KEY) is not None and sorted(pruned.workloads) == sorted(f"w{i}" for i in range(40, 50))
    assert ledger.prune(2000, 1000, 10).workloads == {}


def test_held_scopes_say_what_to_continue() -> None:
    ledger = Ledger({KEY: Move(TAINTS, 0, 0, 3, 3, (), (Held("u1", "default/web-b", "n2", "node:n2:X", 0),
                                                        Held("u2", "default/web-c", "n3", "node:n3:X", 0)))})
    assert ledger.held_scopes() == {"node:n2:X": ["default/web-b"], "node:n3:X": ["default/web-c"]}


# -- the pacer with the ledger ---------------------------------------------------------------------

def maintenance(ready_b: bool = True) -> list[dict[str, Any]]:
    """web on n1 and n2 (both tainted), two spare nodes."""
    return [node_obj("n1", taints=[TAINT]), node_obj("n2", taints=[TAINT]), node_obj("n3"), node_obj("n4"),
            web("web-7d9f8-a", "n1"), web("web-7d9f8-b", "n2", ready=ready_b)]


def test_a_pod_in_flight_counts_as_down_even_in_a_stale_snapshot() -> None:
    objs = maintenance()
    snap = snapshot(objs)
    a = next(p for p in snap.pods if p.name == "web-7d9f8-a")
    ledger = admitted(Ledger(), a, expected=2, ready=2)
    plan = plan_run(taints_policy(), snap, now=NOW, safety=safety(), nodes=["n2"], ledger=ledger)
    assert [(e.pod.name, s.wave) for e, s in zip(plan.evictions, plan.pacing.steps, strict=True)] \
        == [("web-7d9f8-b", 1)]  # type: ignore[union-attr]
    # without the ledger the same snapshot evicts it at once: what two concurrent runs did
    plan = plan_run(taints_policy(), snap, now=NOW, safety=safety(), nodes=["n2"])
    assert [s.wave for s in plan.pacing.steps] == [0]  # type: ignore[union-attr]


def test_a_replacement_not_created_yet_still_counts_as_missing() -> None:
    objs = [o for o in maintenance() if o["metadata"]["name"] != "web-7d9f8-a"]  # evicted, no replacement yet
    snap = snapshot(objs)
    a = wpod("web-7d9f8-a", "n1")
    ledger = admitted(Ledger(), a, expected=2, ready=2)
    plan = plan_run(taints_policy(), snap, now=NOW, safety=safety(), nodes=["n2"], ledger=ledger)
    assert [s.wave for s in plan.pacing.steps] == [1]  # type: ignore[union-attr]
    status = plan.pacing.workloads[plan.pacing.steps[0].workload].status  # type: ignore[union-attr,index]
    assert (status.expected, status.ready) == (2, 1)


def test_capacity_reserved_by_another_run_is_not_given_twice() -> None:
    # one spare node with room for exactly one more pod: a pod in flight from another run has it
    objs = [node_obj("n1", taints=[TAINT], cpu="2"), node_obj("n2", cpu="1"), node_obj("n3", cpu="1"),
            pod_obj("x", "n1", cpu="600m", owner_name="x"), pod_obj("fill", "n3", cpu="900m", owner_name="f")]
    other = pod("y", "n9", cpu="600m", owner_name="y")
    ledger = admitted(Ledger(), other, destination="n2", expected=1, ready=1, strategy="RemoveDuplicates")
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety(), ledger=ledger)
    assert plan.evictions == () and "nowhere to go" in plan.refusals[0].reason
    assert [e.pod.name for e in plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety()).evictions] == ["x"]


def test_workload_key_of_bare_and_owned_pods() -> None:
    assert workload_key(wpod("web-a", "n1")) == KEY
    assert workload_key(pod("lonely", "n1", owner_kind=None)) == "Pod/default/lonely"


def test_an_admission_never_carried_out_goes_back_to_held_after_the_eviction_budget() -> None:
    """Its run died between admitting and evicting (a leader killed mid-run): while it is recent the
    pod counts as that run's eviction; once older than any eviction's retries with the pod still
    there, the move takes it back as held (and goes on with it, cool-down or not)."""
    from kdesched.evictor.ledger import CLOCK_MARGIN_SECONDS, STALE_ADMISSION_SECONDS

    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    ledger = admitted(Ledger(), a)
    assert ledger.in_flight(a.uid, T0 + 10)
    assert not ledger.in_flight(a.uid, T0 + STALE_ADMISSION_SECONDS + CLOCK_MARGIN_SECONDS)
    fresh = ledger.settle({KEY: [a, b]}, T0 + 10, 120)
    assert not fresh.abandoned and fresh.ledger.move(KEY).inflight  # type: ignore[union-attr]
    late = ledger.settle({KEY: [a, b]}, T0 + STALE_ADMISSION_SECONDS + CLOCK_MARGIN_SECONDS + 1, 120)
    move = late.ledger.move(KEY)
    assert [f.pod for _, f in late.abandoned] == ["default/web-a"]
    assert move is not None and move.inflight == () and [h.uid for h in move.held] == [a.uid]
    assert late.ledger.cooldown_refusal(a, TAINTS, T0 + 80, 300, 300) is None  # continuing its move
    # an evicted pod (terminating) is not abandoned
    gone = ledger.settle({KEY: [wpod("web-a", "n1", deleting=True), b]}, T0 + STALE_ADMISSION_SECONDS + 1, 120)
    assert not gone.abandoned

"""The SurgeMoveHeld and NoSurge Events are de-duplicated per object and reason: a move held for a new
reason (first a rollout, then the cap of extra evictions; a closed window, then a spent budget) says
so at once, while the same reason repeated is still suppressed (one a minute)."""

from __future__ import annotations

from dataclasses import replace

from kdesched.evictor.ledger import Ledger, Settled
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import MAX_EXTRA_EVICTIONS, Fallback, NoSurge
from kdesched.evictor.surge_moves import Ended
from kdesched.model.records import Pod
from kdesched.reactor.run.surge import Candidate, Chosen, SurgeEvents, Surges

from tests.reactor.surge_api import KEY, STRATEGY, T0, Api, three_on_node_a_evicted, web
from tests.reactor.test_surge_extra import FastApi


def held(api: Api) -> list[str]:
    return [e["note"] for e in api.events if e.get("reason") == "SurgeMoveHeld"]


def going_with_an_extra_pod() -> tuple[FastApi, Surges, Ledger, list[Ended], dict[str, list[Pod]]]:
    """The move's pod going (web-1) and one pod made during the move (web-10): what the settle reads
    when the extra eviction is next (the api, the move's driver, its ledger, the ended list, the pods)."""
    api = FastApi(replicas=3)
    old, driver, ledger, ended = three_on_node_a_evicted(api, first_created=-100)
    api.pods["web-1"] = replace(old, deletion_time=old.creation_time)
    web(api, "web-10", "spare-2", created=7)
    return api, driver, ledger, ended, {KEY: list(api.pods.values())}


def test_a_move_held_for_a_new_reason_says_so_and_a_repeat_does_not() -> None:
    api, driver, ledger, ended, pods = going_with_an_extra_pod()
    api.updated = 2  # a rollout: the Deployment counts pods it has not updated
    ledger = driver.advance(Settled(ledger), pods, T0 + 30, ended).ledger
    assert len(held(api)) == 1 and "rolling out" in held(api)[0]
    api.updated = None  # the rollout is over; the move has evicted as many extra pods as it may
    spent = replace(ledger, surges={KEY: replace(ledger.surges[KEY], extra=MAX_EXTRA_EVICTIONS, extra_at=T0 + 1)})
    ledger = driver.advance(Settled(spent), pods, T0 + 35, ended).ledger
    assert len(held(api)) == 2 and f"at most {MAX_EXTRA_EVICTIONS} per move" in held(api)[1], held(api)
    driver.advance(Settled(ledger), pods, T0 + 40, ended)  # the same reason again: not repeated
    driver.advance(Settled(ledger), pods, T0 + 70, ended)  # (nor after the log's 30 s: one Event a minute)
    assert len(held(api)) == 2, held(api)


def test_a_move_whose_extra_eviction_is_held_by_another_control_says_so() -> None:
    """Held by a closed window, then (the window open) by a spent budget: two Events."""
    api, driver, ledger, ended, pods = going_with_an_extra_pod()

    def window(_e: PlannedEviction) -> Verdict:
        return Verdict(Reason.WINDOW, "disruption window nights is closed")

    def budget(_e: PlannedEviction) -> Verdict:
        return Verdict(Reason.BUDGET, "budget: disruption budget \"one\" allows 1 and 1 are in flight")

    driver.advance(Settled(ledger), pods, T0 + 30, ended, hold=window)
    driver.advance(Settled(ledger), pods, T0 + 33, ended, hold=window)
    driver.advance(Settled(ledger), pods, T0 + 36, ended, extra=budget)
    notes = held(api)
    assert len(notes) == 2 and "window" in notes[0] and "budget" in notes[1], notes


def test_no_surge_is_posted_again_for_another_control() -> None:
    api = Api()
    events = SurgeEvents(api)  # type: ignore[arg-type]
    p = web(api, "web-1", "node-a")
    c = Candidate(p, STRATEGY, "", "tainted", "its PodDisruptionBudget allows no disruption")

    def tell(control: Reason) -> None:
        why = NoSurge(Fallback.CONTROLS, f"held by {control.value}", control)
        events.fallbacks(Chosen(None, fallbacks=((c, why),)))  # type: ignore[arg-type]

    tell(Reason.WINDOW)
    tell(Reason.WINDOW)
    tell(Reason.BUDGET)
    tell(Reason.BUDGET)
    notes = [e["note"] for e in api.events if e.get("reason") == "NoSurge"]
    assert len(notes) == 2 and "window" in notes[0] and "budget" in notes[1], notes

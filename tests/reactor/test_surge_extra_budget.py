"""kdesched's own disruption budgets and the eviction of a pod made during a surge-first move
(evictor.surge._kept, EVICT_EXTRA). The move's pod is in flight in the ledger for the whole move, so
every budget counts the move as one pod down until it ends; the extra eviction is that same pod's
replacement going (the workload never drops below its original Ready count), so it takes that unit,
not a second one. But like any eviction it waits while the budgets are spent without it (other pods
in flight took the room, a budget lowered since the move began), as decide() wires it
(admit.extra_admission)."""

from __future__ import annotations

from dataclasses import replace

from kdesched.admission.budgets import Budget, BudgetControl
from kdesched.admission.control import RunContext
from kdesched.admission.pipeline import Pipeline
from kdesched.evictor.ledger import InFlight, Ledger, Move, Settled
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason
from kdesched.model.snapshot import Snapshot
from kdesched.reactor.run.admit import deferral, extra_admission
from kdesched.reactor.run.surge import Ended, Surges

from tests.reactor.surge_api import KEY, STRATEGY, T0, three_on_node_a_evicted, web
from tests.reactor.surge_api import evictions_of as evicted
from tests.reactor.test_surge_extra import FastApi

OTHER = "Deployment/default/other"
ONE = Pipeline([BudgetControl([Budget("one at a time", count=1)])])


def settle(driver: Surges, ledger: Ledger, api: FastApi, now: float, ended: list[Ended]) -> Ledger:
    """One settle as decide() runs it: the brakes and windows hold the moves' evictions, and the
    eviction of a pod made during a move is asked as one more eviction (the budgets too)."""
    ctx = RunContext(ledger, Snapshot.from_objects([]), now)
    new = driver.advance(Settled(ledger), {KEY: list(api.pods.values())}, now, ended,
                         hold=deferral(ONE.begin(ctx)), extra=extra_admission(ONE, ctx)).ledger
    driver.evict_claimed(new)
    return new


def late(api: FastApi) -> tuple[Surges, Ledger, list[Ended]]:
    old, driver, ledger, ended = three_on_node_a_evicted(api, first_created=-100)
    api.pods["web-1"] = replace(old, deletion_time=old.creation_time)
    web(api, "web-10", "spare-2", created=7)
    return driver, ledger, ended


def test_the_extra_eviction_waits_while_a_budget_is_spent_by_other_pods_in_flight() -> None:
    """A budget of one pod at a time, and another workload's pod in flight: the extra eviction would be
    a second pod down through kdesched. It is not claimed nor sent, and the move says why; once that
    pod is replaced, it goes (the move's own unit: no deadlock at a budget of one)."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late(api)
    other = Move(STRATEGY, T0, T0, 2, 2, (InFlight("u-other", "default/other-1", "node-b", T0 + 20),))
    busy = replace(ledger, moves={**ledger.moves, OTHER: other})
    api.now = T0 + 30
    held = settle(driver, busy, api, T0 + 30, ended)
    assert evicted(api) == ["web-1"] and held.surges[KEY].extra == 0
    notes = [e["note"] for e in api.events if e.get("reason") == "SurgeMoveHeld"]
    assert notes and "budget" in notes[-1] and "one at a time" in notes[-1], notes
    freed = replace(held, moves={k: mv for k, mv in held.moves.items() if k != OTHER})
    api.now = T0 + 31
    after = settle(driver, freed, api, T0 + 31, ended)
    assert evicted(api) == ["web-1", "web-10"] and after.surges[KEY].extra == 1


def test_the_extra_eviction_is_asked_as_one_eviction_sent_now() -> None:
    """Asked alone, with only the move in flight, a budget of one lets it through (the move's unit);
    with one more pod in flight it refuses it, a budget refusal (not a deferral)."""
    api = FastApi(replicas=3)
    _, ledger, _ = late(api)
    extra = PlannedEviction(api.pods["web-10"], "spare-2", STRATEGY, "", "surge-first")
    assert extra_admission(ONE, RunContext(ledger, Snapshot.from_objects([]), T0 + 30))(extra) is None
    other = Move(STRATEGY, T0, T0, 2, 2, (InFlight("u-other", "default/other-1", "node-b", T0 + 20),))
    busy = replace(ledger, moves={**ledger.moves, OTHER: other})
    verdict = extra_admission(ONE, RunContext(busy, Snapshot.from_objects([]), T0 + 30))(extra)
    assert verdict is not None and verdict.reason is Reason.BUDGET

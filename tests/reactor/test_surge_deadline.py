"""Surge-first moves whose eviction does not happen in time: refused on every attempt (a
PodDisruptionBudget that allows nothing any more, a webhook) or held (a brake, a closed window), or
accepted but the pod not seen going. The move is given up at its deadline (replacementTimeoutSeconds),
or scaled back 30 s after an accepted eviction, but only by a scale-back that removes the extra pod
(or the evicted one): the ReplicaSet deletes the pod it ranks first, directly, past every PDB and
brake (kdesched.evictor.scale_down). Where that would be an original pod, the +1 is kept (capacity,
not availability) until the eviction is allowed or the pod seen going. Driven run after run against
tests/reactor/surge_api.py."""

from __future__ import annotations

from dataclasses import replace

from kdesched.evictor.ledger import Ledger, Settled
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.reactor.run.surge import LATE_EVICT_SECONDS, Ended, Surges

from tests.builders import NOW
from tests.reactor.surge_api import KEY, PDB_429, T0, Api, begun, doubled_up_and_refused, drive, run, web

BRAKE = Verdict(Reason.HEALTH_BRAKE, "health brake: 1 of 3 nodes (33%) are NotReady")


def evictions(api: Api) -> int:
    return sum(1 for c in api.calls if c[0] == "evict")


def test_a_move_whose_eviction_is_always_refused_is_given_up_at_its_deadline() -> None:
    """One pod per node: past the deadline (T0 + 120) the move is given up and the replicas go back
    (the extra pod, Ready for the shortest time, is the one the ReplicaSet removes); the workload is
    blocked from another surge a while, so the refusal does not make it churn."""
    api = Api(replicas=2)
    api.refuse = PDB_429
    old = web(api, "web-1", "node-a")
    web(api, "web-0", "node-c")
    driver, ledger, _ = begun(api, old)
    web(api, "web-2", "node-b", created=2)  # the surge pod Ready elsewhere
    ended: list[Ended] = []
    ledger = drive(driver, ledger, api, T0 + 5, ended)
    assert KEY not in ledger.surges and api.replicas == 2, f"still surged: {evictions(api)} eviction attempts"
    assert [o for o, _ in [(e.outcome, e.why) for e in ended]] == ["gave-up"] and KEY in ledger.surge_blocks
    assert ended[0].surge.deadline <= T0 + 121 and "could not be evicted" in ended[0].why


def test_a_refused_move_keeps_the_extra_replica_while_a_scale_back_would_delete_an_original_pod() -> None:
    """Two pods on the node being left: the ReplicaSet ranks those doubled-up pods before the extra one,
    so a scale-back would delete an original Ready pod behind the Eviction API. Past the deadline the
    +1 stays and the eviction is tried on, every LATE_EVICT_SECONDS past the deadline (not at every
    run: a PDB refusing for hours must not cost a request a second); once it is allowed, the move
    finishes as usual."""
    api = Api(replicas=2)
    driver, ledger, old = doubled_up_and_refused(api)
    ended: list[Ended] = []
    ledger = drive(driver, ledger, api, T0 + 5, ended, until=T0 + 120)  # a run every second: tried at each
    before_deadline = evictions(api)
    assert before_deadline == 115
    ledger = drive(driver, ledger, api, T0 + 120, ended, until=T0 + 200)
    assert evictions(api) - before_deadline == 3  # at T0 + 120, 150 and 180 (LATE_EVICT_SECONDS)
    assert KEY in ledger.surges and api.replicas == 3 and not ended
    assert [c for c in api.calls if c[0] == "scale"] == [("scale", 3)]  # never scaled back
    api.refuse = None  # the PDB allows it again
    ledger = run(driver, ledger, api, T0 + 200, ended)
    assert not ledger.surges[KEY].evicted  # 20 s after the last try: not yet
    ledger = run(driver, ledger, api, T0 + 180 + LATE_EVICT_SECONDS, ended)
    assert ledger.surges[KEY].evicted and ("evict", "web-1") == api.calls[-1]
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    drive(driver, ledger, api, T0 + 211, ended)
    assert api.replicas == 2 and [e.outcome for e in ended] == ["done"]


def braked_move(sibling_node: str) -> tuple[Api, Surges, Ledger]:
    """web-1 moving off node-a, its sibling web-0 on ``sibling_node``, the extra pod web-2 Ready on node-b."""
    api = Api(replicas=2)
    old = web(api, "web-1", "node-a")
    web(api, "web-0", sibling_node)
    driver, ledger, _ = begun(api, old)
    web(api, "web-2", "node-b", created=2)
    return api, driver, ledger


def test_a_brake_past_the_deadline_keeps_the_extra_replica_while_a_scale_back_would_delete_an_original() -> None:
    """The health brake holds the eviction past the deadline, two original pods on the node being left:
    no pod may leave while the brake holds, and a scale-back would delete one of them. The +1 stays."""
    api, driver, ledger = braked_move(sibling_node="node-a")
    ended: list[Ended] = []
    for now in (T0 + 5, T0 + 121, T0 + 300):
        ledger = driver.advance(Settled(ledger), {KEY: list(api.pods.values())}, now, ended,
                                hold=lambda e: BRAKE).ledger
    assert KEY in ledger.surges and api.replicas == 3 and not ended and not evictions(api)


def test_a_brake_past_the_deadline_gives_up_when_the_scale_back_removes_the_extra_pod() -> None:
    """The same with one pod per node: the scale-back removes the extra pod, so the move is given up."""
    api, driver, ledger = braked_move(sibling_node="node-c")
    ended: list[Ended] = []
    ledger = driver.advance(Settled(ledger), {KEY: list(api.pods.values())}, T0 + 121, ended,
                            hold=lambda e: BRAKE).ledger
    assert KEY not in ledger.surges and api.replicas == 2 and not evictions(api)
    assert [e.outcome for e in ended] == ["overridden"] and "health brake" in ended[0].why


def evicted_doubled_up() -> tuple[Api, Surges, Ledger, list[Ended]]:
    """web-1 and its sibling web-0 on node-a, the extra pod web-2 Ready on node-b, web-1's eviction
    accepted at T0 + 5; the pods the runs see still show web-1 alive (a lagging watch cache, or an
    eviction that did not take)."""
    api = Api(replicas=2)
    old = web(api, "web-1", "node-a")
    web(api, "web-0", "node-a")
    driver, ledger, _ = begun(api, old)
    web(api, "web-2", "node-b", created=2)
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 5, ended)
    assert ledger.surges[KEY].evicted == T0 + 5 and evictions(api) == 1
    return api, driver, ledger, ended


def test_a_pod_not_seen_going_after_its_eviction_keeps_the_extra_replica_over_doubled_up_originals() -> None:
    """30 s after the eviction web-1 still looks alive. A scale-back could make the ReplicaSet delete
    web-0 (doubled up on node-a, it ranks before the extra pod): the +1 stays and the eviction is tried
    again every LATE_EVICT_SECONDS (it reads the pod first, so a pod already going is not evicted
    twice). Once web-1 is seen terminating, the replicas go back and the move is done."""
    api, driver, ledger, ended = evicted_doubled_up()
    ledger = drive(driver, ledger, api, T0 + 6, ended, until=T0 + 100)
    assert KEY in ledger.surges and api.replicas == 3 and not ended, [(e.outcome, e.why) for e in ended]
    assert [c for c in api.calls if c[0] == "scale"] == [("scale", 3)]  # never scaled back
    assert evictions(api) == 1 + 3  # tried again at T0 + 35, 65 and 95
    api.pods["web-1"] = replace(api.pods["web-1"], deletion_time=NOW)
    drive(driver, ledger, api, T0 + 100, ended)
    assert api.replicas == 2 and [e.outcome for e in ended] == ["done"]


def test_the_eviction_tried_again_after_it_was_not_seen_going_is_spaced_when_refused() -> None:
    """The eviction tried again is refused (the PDB allows nothing any more): one request every
    LATE_EVICT_SECONDS, not one a run, and still no scale-back."""
    api, driver, ledger, ended = evicted_doubled_up()
    api.refuse = PDB_429
    ledger = drive(driver, ledger, api, T0 + 6, ended, until=T0 + 100)
    assert KEY in ledger.surges and api.replicas == 3 and not ended
    assert evictions(api) == 1 + 3  # at T0 + 35, 65 and 95


def test_the_eviction_tried_again_says_so_in_its_event() -> None:
    """The Descheduled Event of the eviction tried again (the pod not seen going 30 s after the first
    was accepted) says it is a second eviction and why, not "evicted once <the long reason>"."""
    api, driver, ledger, ended = evicted_doubled_up()
    drive(driver, ledger, api, T0 + 6, ended, until=T0 + 36)
    assert evictions(api) == 2
    first, again = [e["note"] for e in api.events if e.get("reason") == "Descheduled"]
    assert "evicted once replacement default/web-2 is Ready on node node-b" in first
    assert "evicted again" in again and "still not seen going 30s after its first eviction" in again, again
    assert "evicted once" not in again and "kept at" not in again

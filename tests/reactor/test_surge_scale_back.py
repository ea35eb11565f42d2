"""Surge-first moves whose scale-back would delete a pod from before the move: the ReplicaSet deletes
the pod it ranks first (kdesched.evictor.scale_down), directly, past every PDB and brake. Once the
evicted pod is terminating the ReplicaSet no longer counts it and makes one for it; scaled back while
that pod is not Ready, the ReplicaSet removes it, but scaled back once it is Ready (a late settle: a
crash and a Lease takeover, a paused process) it chooses among Ready pods, and doubled-up originals
rank first. The +1 is kept and a pod made during the move evicted instead (through the Eviction API);
the ReplicaSet's pod for it, not Ready yet, is the one the scale-back then removes. Driven run after
run against tests/reactor/surge_api.py."""

from __future__ import annotations

from dataclasses import replace

from kdesched.evictor.ledger import Ledger, Settled
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.reactor.run.surge import LATE_EVICT_SECONDS, Ended, Surges

from tests.builders import NOW
from tests.reactor.surge_api import KEY, T0, Api, begun, drive, three_on_node_a_evicted, web
from tests.reactor.surge_api import evictions_of as evicted

BRAKE = Verdict(Reason.HEALTH_BRAKE, "health brake: 1 of 3 nodes (33%) are NotReady")


def evicted_then_late() -> tuple[Api, Surges, Ledger, list[Ended]]:
    """3 replicas on node-a; web-1 evicted at T0 + 6 (the extra pod web-9 Ready on spare-1). The next
    settle comes late: web-1 is terminating and the ReplicaSet's pod for it, web-10, Ready on spare-2."""
    api = Api(replicas=3)
    old, driver, ledger, ended = three_on_node_a_evicted(api)
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    web(api, "web-10", "spare-2", created=6)
    return api, driver, ledger, ended


def test_a_late_scale_back_evicts_a_pod_made_during_the_move_instead_of_deleting_an_original() -> None:
    """At T0 + 30 a scale-back would make the ReplicaSet delete web-2 or web-3 (doubled up on node-a):
    the replicas stay at 4 and web-10 is evicted. While web-10 still shows alive, no second eviction
    before LATE_EVICT_SECONDS; once it is going and the ReplicaSet's pod for it (web-11) is not Ready,
    the replicas go back and the move is done."""
    api, driver, ledger, ended = evicted_then_late()
    ledger = drive(driver, ledger, api, T0 + 30, ended, until=T0 + 30 + LATE_EVICT_SECONDS)
    assert api.replicas == 4 and not ended, [(e.outcome, e.why) for e in ended]
    assert [c for c in api.calls if c[0] == "scale"] == [("scale", 4)]  # never scaled back
    assert evicted(api) == ["web-1", "web-10"]  # once, not at every run
    note = next(e["note"] for e in api.events if e.get("name") == "web-10")
    assert "made during the move" in note and "3 replicas" in note
    api.pods["web-10"] = replace(api.pods["web-10"], deletion_time=NOW)
    web(api, "web-11", "spare-2", created=31, ready=False)
    drive(driver, ledger, api, T0 + 31 + LATE_EVICT_SECONDS, ended)
    assert api.replicas == 3 and [e.outcome for e in ended] == ["done"]


def test_the_eviction_of_the_extra_pod_waits_for_the_brake() -> None:
    """The health brake holds evictions: the extra pod's too. The +1 stays, and the Deployment's
    SurgeMoveHeld Event says why."""
    api, driver, ledger, ended = evicted_then_late()
    for now in (T0 + 30, T0 + 31, T0 + 90):
        ledger = driver.advance(Settled(ledger), {KEY: list(api.pods.values())}, now, ended,
                                hold=lambda e: BRAKE).ledger
    assert api.replicas == 4 and not ended and evicted(api) == ["web-1"]
    held = [e["note"] for e in api.events if e.get("reason") == "SurgeMoveHeld"]
    assert held and "health brake" in held[0] and "web-10" in held[0]


def test_an_extra_pod_ready_on_the_node_being_left_is_evicted_rather_than_scaled_back_over_originals() -> None:
    """web-1 moving off node-a; web-2, web-3 and web-4 share node-b; the extra pod web-9 lands on
    node-a and is Ready. Giving up by a scale-back would make the ReplicaSet delete a Ready pod of
    node-b (three doubled up rank before web-9, two on its node): web-9 is evicted instead, once. Its
    successor web-10 is Ready on spare-1: the move goes on and ends as planned, and no original pod
    but web-1 (evicted) leaves."""
    api = Api(replicas=4)
    old = web(api, "web-1", "node-a")
    for i in (2, 3, 4):
        web(api, f"web-{i}", "node-b")
    driver, ledger, _ = begun(api, old)
    web(api, "web-9", "node-a", created=2)  # Ready at T0 + 5, on the node being left
    ended: list[Ended] = []
    ledger = drive(driver, ledger, api, T0 + 6, ended, until=T0 + 10)
    assert evicted(api) == ["web-9"] and api.replicas == 5 and not ended, [(e.outcome, e.why) for e in ended]
    api.pods["web-9"] = replace(api.pods["web-9"], deletion_time=NOW)
    web(api, "web-10", "spare-1", created=10)  # the ReplicaSet's pod for it, Ready at T0 + 13
    ledger = drive(driver, ledger, api, T0 + 10, ended, until=T0 + 14)
    assert evicted(api) == ["web-9", "web-1"]
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    drive(driver, ledger, api, T0 + 14, ended)
    assert api.replicas == 4 and [e.outcome for e in ended] == ["done"]

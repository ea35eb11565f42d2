"""The eviction of pods made during a surge-first move (evictor.surge._kept, EVICT_EXTRA): bounded per
move and shared by every process, on the move's ledger record. Adapted from the review of
af8a868..a50aa1c (/tmp/review11.md, findings 2 and 3)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kdesched.evictor.ledger import Ledger, Settled
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import MAX_EXTRA_EVICTIONS, Surge
from kdesched.kube.errors import Unavailable
from kdesched.reactor.run.surge import Ended, Surges

from tests.builders import NOW
from tests.reactor.surge_api import KEY, PDB_429, T0, Api, run, three_on_node_a_evicted, web
from tests.reactor.surge_api import evictions_of as evicted


class FastApi(Api):
    """The ReplicaSet replaces every evicted pod at once, and the replacement is Ready before the next
    run's view (pods Ready in a few seconds, runs slower than that)."""

    now = T0
    fast = False

    def evict_pod(self, namespace: str, name: str, **kw: Any) -> None:
        super().evict_pod(namespace, name, **kw)
        if not self.fast:
            return
        self.pods[name] = replace(self.pods[name], deletion_time=NOW)
        n = len(self.pods) + 1
        web(self, f"web-{n + 10}", f"spare-{n}", created=self.now - T0 - 4)


def late_settle(api: Api) -> tuple[Surges, Ledger, list[Ended]]:
    """3 replicas on node-a (web-1 Ready for the shortest time), the extra pod web-9 Ready on spare-1,
    web-1 evicted at T0 + 6; then the move's settles come late: web-1 terminating and the ReplicaSet's
    pod for it, web-10, Ready on spare-2."""
    old, driver, ledger, ended = three_on_node_a_evicted(api, first_created=-100)
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    web(api, "web-10", "spare-2", created=7)
    return driver, ledger, ended


def test_the_extra_pod_eviction_stops_at_the_cap_and_the_move_is_held_saying_why() -> None:
    """Every view shows the ReplicaSet's new pod Ready already: each settle would evict another pod
    made during the move. At most MAX_EXTRA_EVICTIONS are, then the move keeps its +1 (no original
    pod deleted) and its SurgeMoveHeld Event says why."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late_settle(api)
    api.fast = True
    now = T0 + 30
    while KEY in ledger.surges and now < T0 + 3600:
        api.now = now
        ledger = run(driver, ledger, api, now, ended)
        now += 5.0
    assert len(evicted(api)) - 1 == MAX_EXTRA_EVICTIONS, evicted(api)
    assert api.replicas == 4 and KEY in ledger.surges and ledger.surges[KEY].extra == MAX_EXTRA_EVICTIONS
    held = [e["note"] for e in api.events if e.get("reason") == "SurgeMoveHeld"]
    assert held and f"at most {MAX_EXTRA_EVICTIONS} per move" in held[-1]


def test_two_processes_evict_at_most_one_pod_made_during_the_move_per_spacing() -> None:
    """The spacing is the move's ledger record, not a process's memory: a second process settling the
    same ledger 3 s later evicts nothing."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late_settle(api)
    api.fast = True
    other = Surges(api, enabled=True, timeout_seconds=120)  # type: ignore[arg-type]
    for now, proc in ((T0 + 30, driver), (T0 + 33, other), (T0 + 36, driver), (T0 + 39, other)):
        api.now = now
        ledger = run(proc, ledger, api, now, ended)
    assert len(evicted(api)) - 1 == 1, evicted(api)[1:]


def test_a_claim_whose_ledger_write_lost_sends_no_eviction() -> None:
    """Two processes settle the same ledger: both decide to evict a pod made during the move, but the
    eviction is sent only by the one whose conditional ledger write (carrying the claim) went through;
    the loser's write conflicts, it decides again on the winner's ledger, and evicts nothing."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late_settle(api)
    other = Surges(api, enabled=True, timeout_seconds=120)  # type: ignore[arg-type]
    pods = {KEY: list(api.pods.values())}
    won = driver.advance(Settled(ledger), pods, T0 + 30, ended).ledger
    lost = other.advance(Settled(ledger), pods, T0 + 30.5, ended).ledger  # its write conflicts with won's
    assert won.surges[KEY].extra == 1 and lost.surges[KEY].extra == 1
    driver.evict_claimed(won)  # the write that went through
    again = other.advance(Settled(won), {KEY: list(api.pods.values())}, T0 + 31, ended).ledger
    other.evict_claimed(again)
    assert evicted(api) == ["web-1", "web-10"]


def test_a_record_written_before_the_count_reads_back_with_none() -> None:
    s = Surge("u", "default/web-1", "node-a", "web", "web-abc", 3, 4, T0, T0 + 120, "S", 6, T0 + 6)
    old = s.to_json()[:12]
    assert Surge.from_json(old) == s and s.extra == 0
    counted = replace(s, extra=2, extra_at=T0 + 40.5)
    assert Surge.from_json(counted.to_json()) == counted


def test_a_refused_extra_eviction_does_not_use_up_the_cap_and_is_tried_again_after_the_spacing() -> None:
    """The PDB refuses the eviction of the pod made during the move (429) for longer than the cap's
    worth of tries: nothing was evicted, so nothing counts towards MAX_EXTRA_EVICTIONS. Each refusal
    is tried again after the spacing, and once the PDB allows it the pod is evicted (not held at the
    cap for evictions that never happened)."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late_settle(api)
    api.refuse = PDB_429
    tries = MAX_EXTRA_EVICTIONS + 2
    for i in range(tries):
        api.now = T0 + 30 + 31 * i
        ledger = run(driver, ledger, api, api.now, ended)
    assert evicted(api)[1:] == ["web-10"] * tries  # one try per spacing
    assert ledger.surges[KEY].extra <= 1  # (the last claim, taken back at the next settle)
    held = [e["note"] for e in api.events if e.get("reason") == "SurgeMoveHeld"]
    assert not any("per move" in n for n in held), held
    api.refuse = None
    api.now = T0 + 30 + 31 * tries
    ledger = run(driver, ledger, api, api.now, ended)
    assert evicted(api)[1:] == ["web-10"] * (tries + 1)
    assert ledger.surges[KEY].extra == 1  # the one carried out


def test_an_extra_eviction_whose_answer_was_lost_still_counts() -> None:
    """An eviction that may have landed (the connection dropped after it was sent) counts towards the
    cap like one carried out: the ReplicaSet may be making a pod for it already."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late_settle(api)
    api.refuse = Unavailable("reset by peer", maybe_sent=True)
    for i in range(2):
        api.now = T0 + 30 + 31 * i
        ledger = run(driver, ledger, api, api.now, ended)
    assert ledger.surges[KEY].extra == 2


def test_an_extra_eviction_held_by_a_brake_is_neither_sent_nor_counted() -> None:
    """A brake or a closed window holds the eviction of a pod made during the move: it is not claimed,
    so the cap is untouched, and the move says why it waits."""
    api = FastApi(replicas=3)
    driver, ledger, ended = late_settle(api)

    def brake(_e: PlannedEviction) -> Verdict:
        return Verdict(Reason.HEALTH_BRAKE, "the health brake holds")

    for i in range(MAX_EXTRA_EVICTIONS + 1):
        ledger = driver.advance(Settled(ledger), {KEY: list(api.pods.values())}, T0 + 30 + 31 * i, ended,
                                hold=brake).ledger
        driver.evict_claimed(ledger)
    assert evicted(api) == ["web-1"] and ledger.surges[KEY].extra == 0

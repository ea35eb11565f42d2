"""The eviction of pods made during a surge-first move (evictor.surge._kept, EVICT_EXTRA): bounded per
move and shared by every process, on the move's ledger record. Adapted from the review of
af8a868..a50aa1c (/tmp/review11.md, findings 2 and 3)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kdesched.evictor.ledger import Ledger, Settled
from kdesched.evictor.surge import MAX_EXTRA_EVICTIONS, Surge
from kdesched.reactor.run.surge import Ended, Surges

from tests.builders import NOW
from tests.reactor.surge_api import KEY, T0, Api, run, three_on_node_a_evicted, web
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

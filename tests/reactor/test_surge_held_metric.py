"""A surge-first move kept at +1 with no time limit is a metric, not only a log line: the gauges
``kdesched_surge_moves_held{reason}`` and ``kdesched_surge_held_past_timeout_seconds``, set at each
settle from the moves the ledger holds (every process settles the same ledger, so they agree), and
back to 0 once the move ends, here or in another process. Driven against tests/reactor/surge_api.py;
the alert on them is tests/deploy/test_monitoring.py's and tests/realprom/test_rules.py's."""

from __future__ import annotations

import time
from dataclasses import replace

from kdesched.evictor.ledger import InFlight, Ledger, Move, Settled
from kdesched.evictor.metrics import REGISTRY
from kdesched.evictor.surge import Held, Surge
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ServerError
from kdesched.model.records import Pod
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.surge import Ended, Surges

from tests.builders import NOW, node_obj, pod, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.surge_api import KEY, T0, Api, begun, doubled_up_and_refused, drive, run, web
from tests.reactor.test_surge import READY, StubClient, quick_reactor, surges


def held() -> dict[str, float]:
    """``kdesched_surge_moves_held`` by reason, as /metrics serves it now."""
    return {r.value: REGISTRY.get_sample_value("kdesched_surge_moves_held", {"reason": r.value}) or 0.0 for r in Held}


def past_timeout() -> float | None:
    return REGISTRY.get_sample_value("kdesched_surge_held_past_timeout_seconds")


def only(reason: str) -> dict[str, float]:
    return {r.value: 1.0 if r.value == reason else 0.0 for r in Held}


NONE_HELD = {r.value: 0.0 for r in Held}


def rolling_out() -> tuple[Api, Surges, Ledger, Pod]:
    """web-1 moving off node-a (web-0 there too), then a rollout: web-3 and web-4 of a new template."""
    api = Api(replicas=2)
    old = web(api, "web-1", "node-a")
    web(api, "web-0", "node-a")
    driver, ledger, _ = begun(api, old)
    api.spec_write()
    api.controller_observes()
    api.updated = 2
    for i in (3, 4):
        web(api, f"web-{i}", f"node-{i}", created=2, ready=False, template="def")
    return api, driver, ledger, old


def test_a_move_held_by_a_rollout_is_counted_and_its_time_past_the_timeout_grows() -> None:
    api, driver, ledger, _ = rolling_out()
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 2, ended)
    assert held() == only("rollout")
    assert past_timeout() == 0.0  # held, not past its timeout (T0 + 120) yet
    ledger = run(driver, ledger, api, T0 + 120 + 3700, ended)
    assert held() == only("rollout") and past_timeout() == 3700.0
    # the owner takes the replicas over: the move ends, and nothing is held any more
    api.scale_by("kube-controller-manager", 5)
    run(driver, ledger, api, T0 + 120 + 3701, ended)
    assert [e.outcome for e in ended] == ["overridden"]
    assert held() == NONE_HELD and past_timeout() == 0.0


def test_a_refused_eviction_past_the_timeout_is_counted_between_its_spaced_tries() -> None:
    """Two originals on node-a: past its timeout the move keeps the +1 and tries the eviction every
    30 s; the settles between two tries (which do nothing) still count it held."""
    api = Api(replicas=2)
    driver, ledger, old = doubled_up_and_refused(api)
    ended: list[Ended] = []
    ledger = drive(driver, ledger, api, T0 + 5, ended, until=T0 + 119)
    assert held() == NONE_HELD  # before its timeout a refused eviction is the ordinary wait
    ledger = run(driver, ledger, api, T0 + 120, ended)  # tried
    assert held() == only("eviction-refused")
    tries = sum(1 for c in api.calls if c[0] == "evict")
    ledger = run(driver, ledger, api, T0 + 125, ended)  # spaced: not tried
    assert sum(1 for c in api.calls if c[0] == "evict") == tries
    assert held() == only("eviction-refused") and past_timeout() == 5.0
    # allowed at last, and the pod seen going: done, nothing held
    api.refuse = None
    ledger = run(driver, ledger, api, T0 + 150, ended)
    assert ledger.surges[KEY].evicted
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    drive(driver, ledger, api, T0 + 151, ended)
    assert [e.outcome for e in ended] == ["done"]
    assert held() == NONE_HELD and past_timeout() == 0.0


class Unreadable(Api):
    """The Deployment cannot be read (a 5xx, a timeout) while ``down`` is set."""

    down = False

    def get_raw(self, kind: str, name: str, namespace: str | None = None, **kw: object) -> dict[str, object] | None:
        if self.down:
            raise ServerError(503, "ServiceUnavailable", "etcd is slow")
        return super().get_raw(kind, name, namespace, **kw)  # type: ignore[return-value]


def test_a_held_move_whose_owner_cannot_be_read_stays_counted_and_one_ended_elsewhere_does_not() -> None:
    api, driver, ledger, _ = rolling_out()
    reading = Unreadable(replicas=api.replicas, generation=api.generation)
    reading.__dict__.update(api.__dict__)
    driver.client = reading  # type: ignore[assignment]
    ended: list[Ended] = []
    ledger = run(driver, ledger, reading, T0 + 200, ended)
    assert held() == only("rollout") and past_timeout() == 80.0
    reading.down = True  # this settle cannot judge the move: it keeps what the last one saw
    ledger = run(driver, ledger, reading, T0 + 201, ended)
    assert held() == only("rollout") and KEY in ledger.surges
    # another process ended the move: it left the ledger, and this process's next settle sees no move
    driver.advance(Settled(replace(ledger, surges={})), {}, T0 + 202, ended)
    assert held() == NONE_HELD and past_timeout() == 0.0


def test_a_run_whose_ledger_has_no_move_left_clears_the_gauges(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The event path settles without asking the moves anything when the ledger holds none; the
    gauges a held move left must still go back to 0 then (the move ended in another process)."""
    api, driver, ledger, _ = rolling_out()
    run(driver, ledger, api, T0 + 200, [])
    assert held() == only("rollout")
    fake_api.add(node_obj("node-a"), node_obj("spare-1"),
                 pod_obj("web-1", "node-a", owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
                         conditions=READY))
    reactor = quick_reactor(kube)
    try:
        driver.client = StubClient(2)  # type: ignore[assignment]
        reactor.execution.surges = driver
        reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-1"), parse_node_event({"node": "node-a"}))
        assert not reactor.execution.store.read().ledger.surges
        assert held() == NONE_HELD and past_timeout() == 0.0
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()


def test_two_moves_count_once_each_and_the_longest_past_its_timeout_is_served(fake_api: FakeApiServer,
                                                                               kube: KubeClient) -> None:
    """Through a run (the settle of the event path): two workloads, each kept at +1 by a rollout, one
    an hour past its timeout; a node run of the moves' node settles them."""
    fake_api.add(node_obj("node-a"), node_obj("spare-1"))
    reactor = quick_reactor(kube)
    try:
        def made(ns: str) -> list[Pod]:
            return [pod("web-1", "node-a", namespace=ns, owner_name="web-abc",
                        labels={"app": "web", "pod-template-hash": "abc"}, conditions=READY),
                    pod("web-3", "spare-1", namespace=ns, owner_name="web-def",
                        labels={"app": "web", "pod-template-hash": "def"}, conditions=READY)]  # a rollout

        listed = {ns: made(ns) for ns in ("default", "shop")}  # (each pod made once: its uid)

        class Rolling(StubClient):
            def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
                return listed[namespace]

        reactor.execution.surges = surges(Rolling(2, generation=6))
        now = time.time()
        store = reactor.execution.store
        moves, records = {}, {}
        for ns, began in (("default", now - 3900), ("shop", now - 200)):
            key, old = f"Deployment/{ns}/web", listed[ns][0]
            f = InFlight(old.uid, old.key, "node-a", began, scope="node:node-a:RemovePodsViolatingNodeTaints")
            moves[key] = Move("RemovePodsViolatingNodeTaints", began, began, 1, 1, (f,))
            records[key] = Surge(old.uid, old.key, "node-a", "web", "web-abc", 1, 2, began, began + 120,
                                 "RemovePodsViolatingNodeTaints", 6)
        assert store.write(store.read(), Ledger(moves=moves, surges=records))
        reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-1"), parse_node_event({"node": "node-a"}))
        assert len(store.read().ledger.surges) == 2
        assert held() == {**NONE_HELD, "rollout": 2.0}
        assert 3900 - 120 - 5 < (past_timeout() or 0.0) < 3900 - 120 + 5
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()


def test_a_process_that_has_not_settled_for_a_long_time_stops_reporting_what_it_saw() -> None:
    """The alert takes the max over processes. A process whose last settle saw a held move and that
    settles no more (a function pod kept warm with no event for it, while another process ended the
    move) would keep the alert firing: what it saw is reported for ``HELD_FRESH_SECONDS`` only (more
    than the 900 s sweep, which settles), then 0 until it settles again."""
    from kdesched.reactor.run.surge_held import HELD_FRESH_SECONDS

    api, driver, ledger, _ = rolling_out()
    clock = [5000.0]
    driver.held.clock = lambda: clock[0]
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 120 + 3700, ended)
    assert held() == only("rollout") and past_timeout() == 3700.0
    assert HELD_FRESH_SECONDS > 900
    clock[0] += HELD_FRESH_SECONDS - 1
    assert held() == only("rollout")
    clock[0] += 2
    assert held() == NONE_HELD and past_timeout() == 0.0
    run(driver, ledger, api, T0 + 120 + 3800, ended)  # it settles again: reported again
    assert held() == only("rollout") and past_timeout() == 3800.0

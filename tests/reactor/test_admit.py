"""Admission through the disruption ledger, against the fake API server: runs of several processes
deciding at once, lost conditional writes, evictions that did not happen, and the paced repeats
(reactor/run/admit.py, reactor/io/ledger_store.py, reactor/run/continuation.py).

The same properties are shown on the real control plane in tests/realk8s/test_concurrent_moves.py
and, randomised, in tests/realk8s/test_storm.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from kdesched.evictor.execute import EvictionOutcome, RecordingExecutor
from kdesched.evictor.ledger import Ledger
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.io.ledger_store import LedgerRead, LedgerStore
from kdesched.reactor.run.continuation import (
    SCOPE_KEY_MAX,
    Continuations,
    LongScopes,
    balance_scope,
    node_scope,
    parse_scope,
)
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings
from kdesched.strategies.framework import PlannedEviction

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.reactors import STARTED

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
READY = [{"type": "Ready", "status": "True"}]
KEY = "Deployment/default/web"


def reactor(kube: KubeClient, identity: str = "test", **kw: Any) -> Reactor:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2}
    policy = default_like_policy(kdesched=block)
    r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity=identity, **kw)
    STARTED.append(r)
    return r


def web(name: str, node: str) -> dict[str, Any]:
    return pod_obj(name, node, owner_name="web-7d9f8", labels={"app": "web", "pod-template-hash": "7d9f8"},
                   conditions=READY)


def pool(fake: FakeApiServer, nodes: int, spares: int = 2) -> None:
    fake.add(*[node_obj(f"p{i}", taints=[TAINT]) for i in range(nodes)], *[node_obj(f"s{i}") for i in range(spares)])
    fake.add(*[web(f"web-7d9f8-{i}", f"p{i}") for i in range(nodes)])


def evicted(fake: FakeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in fake.requests("POST") if r.path.endswith("/eviction")]


def ledger_of(fake: FakeApiServer) -> Ledger:
    with KubeClient.for_host(fake.url) as client:
        read = LedgerStore(client, "kdesched", "kdesched").read()
    assert read.problem == ""
    return read.ledger


def taint_event(r: Reactor, node: str, i: int = 0) -> dict[str, Any]:
    return r.node_event(Trigger(ev.TAINTS_CHANGED, f"e-{node}-{i}"), parse_node_event({"node": node}))


@pytest.mark.parametrize("round_", range(3))
def test_six_processes_deciding_at_once_admit_one_eviction(round_: int) -> None:
    """Six reactors (six processes: pods of the taints function) each get one node's taint event at
    the same moment; the workload's allowance is 1, so exactly one pod goes, the others are paced."""
    with FakeApiServer() as fake:
        fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
        pool(fake, 6)
        clients = [KubeClient.for_host(fake.url) for _ in range(6)]
        reactors = [reactor(c, f"proc-{i}") for i, c in enumerate(clients)]
        barrier = threading.Barrier(6)
        outs: list[dict[str, Any]] = [{} for _ in range(6)]

        def run(i: int) -> None:
            barrier.wait()
            outs[i] = taint_event(reactors[i], f"p{i}", round_)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        results = sorted(e["result"] for o in outs for e in o["evictions"])
        assert len(evicted(fake)) == 1 and results == ["evicted"] + ["paced"] * 5
        move = ledger_of(fake).move(KEY)
        assert move is not None and len(move.inflight) == 1 and len(move.held) == 5
        for c in clients:
            c.close()


class RacingStore(LedgerStore):
    """A store whose first write loses to a competing run that admitted ``rival`` meanwhile."""

    def __init__(self, inner: LedgerStore, rival: Any) -> None:
        super().__init__(inner.client, inner.namespace, inner.name)
        self.rival = rival
        self.lost = 0

    def write(self, read: LedgerRead, ledger: Ledger, run: str = "") -> bool:
        if not self.lost:
            self.lost += 1
            from kdesched.evictor.ledger import Admission

            fresh = self.read()
            other = fresh.ledger.admit([Admission(self.rival, "RemovePodsViolatingNodeTaints", False, "node:p1:x",
                                                  "", 2, 2)], time.time())
            assert super().write(fresh, other)
        return super().write(read, ledger, run)


def test_a_lost_write_plans_again_against_the_winner(fake_api: FakeApiServer, kube: KubeClient) -> None:
    from kdesched.model.records import Pod

    pool(fake_api, 2)
    r = reactor(kube)
    rival = Pod.from_api(fake_api.get("Pod", "web-7d9f8-1", "default"))  # type: ignore[arg-type]
    r.execution.store = RacingStore(r.execution.store, rival)
    out = taint_event(r, "p0")
    # the rival's admission (web-7d9f8-1 in flight) took the allowance: this run re-planned and held
    assert [(e["pod"], e["result"]) for e in out["evictions"]] == [("web-7d9f8-0", "paced")]
    assert any("admitted on attempt 2" in n for n in out["notes"]) and evicted(fake_api) == []


class FailingExecutor(RecordingExecutor):
    def execute(self, evictions: Sequence[PlannedEviction], *, grace_period_seconds: int | None = None,
                failure_events: bool = False, keep_going: Any = None, deadline: float | None = None) -> list[EvictionOutcome]:
        return [EvictionOutcome(e, "failed", "the API server said no", 1) for e in evictions]


def test_an_eviction_that_did_not_happen_is_taken_back(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 2)
    r = reactor(kube, executor_factory=lambda _dry: FailingExecutor())
    out = taint_event(r, "p0")
    assert [e["result"] for e in out["evictions"]] == ["failed"]
    ledger = ledger_of(fake_api)
    move = ledger.move(KEY)
    # not in flight any more, its cool-downs taken back, and held: the move goes on with it
    assert move is not None and move.inflight == () and [h.pod for h in move.held] == ["default/web-7d9f8-0"]
    assert KEY not in ledger.workloads and "p0" not in ledger.nodes
    assert any("repeated" in n for n in out["notes"])


def test_the_admission_is_written_before_the_eviction(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """So a process that dies right after evicting (or a write that fails then) loses nothing."""
    pool(fake_api, 1)
    seen: list[Ledger] = []

    class Watching(RecordingExecutor):
        def execute(self, evictions: Sequence[PlannedEviction], **kw: Any) -> list[EvictionOutcome]:
            seen.append(ledger_of(fake_api))
            return [EvictionOutcome(e, "evicted", "", 1) for e in evictions]

    r = reactor(kube, executor_factory=lambda _dry: Watching())
    taint_event(r, "p0")
    assert seen and seen[0].move(KEY) is not None and seen[0].workloads.get(KEY) is not None


def test_a_dry_run_writes_no_ledger(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 1)
    block = {"settleSeconds": 0.05, "dryRun": True}
    policy = default_like_policy(kdesched=block)
    r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="dry")
    STARTED.append(r)
    out = taint_event(r, "p0")
    assert [e["result"] for e in out["evictions"]] == ["dry-run"] and not ledger_of(fake_api)


def test_a_restarted_process_resumes_the_held_scopes(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 1)
    fake_api.add(web("web-7d9f8-9", "p0"))  # two replicas on p0: one evicted, one held
    first = reactor(kube, "first")
    out = taint_event(first, "p0")
    assert sorted(e["result"] for e in out["evictions"]) == ["evicted", "paced"]
    first.stop.set()
    first.continuations.cancel_all()
    second = reactor(kube, "second")
    ran: list[str] = []
    second.continuations.run = ran.append  # record instead of running
    second.continuations.first = 0.01
    assert second.resume() == 1
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == [node_scope("p0", ["RemovePodsViolatingNodeTaints"])]


# -- continuation timers (pure) ------------------------------------------------------------------------

def test_scopes_round_trip() -> None:
    assert parse_scope(node_scope("n1", ["A", "B"])).strategies == ("A", "B")
    s = parse_scope(balance_scope(["LowNodeUtilization"], ["n1", "n2"]))
    assert (s.kind, s.strategies, s.nodes) == ("balance", ("LowNodeUtilization",), ("n1", "n2"))
    assert parse_scope(balance_scope(None)).strategies is None
    for bad in ("", "node:", "node:n1", "balance:", "other:x", "balance:*#nightly", "balance:~#sweep", "balance:#sweep"):
        with pytest.raises(ValueError):
            parse_scope(bad)


def test_a_balance_scope_keeps_the_run_it_came_from_and_a_long_one_is_a_bounded_digest() -> None:
    s = parse_scope(balance_scope(None, None, "sweep"))
    assert (s.strategies, s.nodes, s.origin) == (None, None, "sweep")
    assert parse_scope("balance:*").origin == ""  # a key written before origins were kept
    nodes = [f"node-{i:05d}.pool-a.example.internal" for i in range(8000)]
    key = balance_scope(["RemovePodsViolatingNodeTaints"], nodes, "manual")
    # bounded whatever the request: every ledger entry of the run stores it (entry_bytes' scope_hint)
    assert len(key) <= SCOPE_KEY_MAX + len("#manual")
    assert key == balance_scope(["RemovePodsViolatingNodeTaints"], nodes, "manual")  # stable: one chain
    assert key != balance_scope(["RemovePodsViolatingNodeTaints"], nodes[:-1], "manual")
    parsed = parse_scope(key)
    assert parsed.digest and parsed.nodes is None and parsed.origin == "manual"
    scopes = LongScopes(limit=2)
    assert scopes.resolve(key) is None  # another process's (or a restarted one's) long scope
    scopes.remember(key, ["RemovePodsViolatingNodeTaints"], nodes)
    full = scopes.resolve(key)
    assert full is not None and full.nodes == tuple(nodes) and full.strategies == ("RemovePodsViolatingNodeTaints",)
    assert full.origin == "manual"
    short = balance_scope(["A"], ["n1"], "manual")
    scopes.remember(short, ["A"], ["n1"])  # a short key needs no memory
    assert scopes.resolve(short) == parse_scope(short)
    for i in range(2):
        scopes.remember(balance_scope(["A"], nodes[i:], "manual"), ["A"], nodes[i:])
    assert scopes.resolve(key) is None  # bounded: the oldest is forgotten


def test_a_held_run_is_repeated_backing_off_and_a_wake_brings_it_forward() -> None:
    stop = threading.Event()
    ran: list[str] = []
    c = Continuations(ran.append, stop=stop, timeout_seconds=60, first=0.05, longest=5)
    note = c.after_run("s1", held={KEY}, evicted=set())
    assert "repeated in 0.05s" in note
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == ["s1"]
    c.after_run("s1", held={KEY}, evicted=set())  # nothing moved, but the wave's replacements are
    assert c.delay("s1") == 0.05                  # starting: patient for 4 first intervals
    while ran == ["s1"]:
        time.sleep(0.01)
    time.sleep(0.2)
    c.after_run("s1", held={KEY}, evicted=set())  # nothing moved for longer: back off 1.5x
    assert c.delay("s1") == pytest.approx(0.075)
    for _ in range(10):
        c.after_run("s1", held={KEY}, evicted=set())
    # another scope evicted a pod of the same workload: s1 looks again soon
    c2: list[str] = []
    c.run = c2.append
    c.after_run("s2", held=set(), evicted={KEY})
    assert c.delay("s1") == 0.05
    c.after_run("s1", held=set(), evicted=set())  # nothing held any more: the chain ends
    assert c.delay("s1") is None
    stop.set()
    c.cancel_all()


def test_a_ready_wake_during_the_scopes_own_run_is_not_lost() -> None:
    """A replacement that turns Ready while the scope's run is in flight (the run may have read the
    pods before it): the repeat that follows the run comes within the wake's 0.2 s, not at the
    run's interval. Without this, a maintenance's next wave waited a second or more whenever its
    Ready landed during a batched run (bench_pool_maintenance: ready_to_next_eviction)."""
    now = [0.0]
    c = Continuations(lambda s: None, stop=threading.Event(), timeout_seconds=60, first=1, longest=10,
                      clock=lambda: now[0])
    c.after_run("s", held={KEY}, evicted={KEY})
    assert c.scheduled()["s"] == pytest.approx(1.0)
    with c._lock:  # the timer fired: the run is in flight
        chain = c._chains["s"]
        assert chain.timer is not None
        chain.timer.cancel()
        chain.timer = None
    now[0] = 1.0
    assert c.wake({KEY}, within=0.2) == 1
    now[0] = 1.5  # the run ends 0.5 s later, having evicted nothing (it read before the Ready)
    c.after_run("s", held={KEY}, evicted=set())
    assert c.scheduled()["s"] == pytest.approx(0.2)  # the wake's 0.2 s, from the run's end
    with c._lock:
        c._chains["s"].timer.cancel()  # type: ignore[union-attr]
        c._chains["s"].timer = None
    now[0] = 1.6  # the next run, with nothing woken meanwhile, waits its interval again
    c.after_run("s", held={KEY}, evicted=set())
    assert c.scheduled()["s"] == pytest.approx(1.0)
    c.cancel_all()


def test_a_chain_without_progress_ends_at_the_timeout() -> None:
    now = [0.0]
    c = Continuations(lambda s: None, stop=threading.Event(), timeout_seconds=30, first=1, longest=10,
                      clock=lambda: now[0])
    c.after_run("s", held={KEY}, evicted={KEY})
    now[0] = 29
    assert "repeated" in c.after_run("s", held={KEY}, evicted=set())
    now[0] = 31
    assert "no progress for 30s" in c.after_run("s", held={KEY}, evicted=set())
    assert c.delay("s") is None
    c.cancel_all()


def test_a_cool_down_schedules_one_repeat_when_it_ends() -> None:
    c = Continuations(lambda s: None, stop=threading.Event(), timeout_seconds=30, first=1, longest=10)
    assert "repeated in 43s" in c.after_run("s", held=set(), evicted=set(), cooldown_in=42.4)
    assert c.after_run("t", held=set(), evicted=set()) == ""
    c.cancel_all()


class LostAnswerStore(LedgerStore):
    """The first write is carried out but its answer is lost (the connection dropped after it)."""

    def __init__(self, inner: LedgerStore, *, carried_out: bool) -> None:
        super().__init__(inner.client, inner.namespace, inner.name)
        self.carried_out = carried_out
        self.dropped = 0

    def write(self, read: LedgerRead, ledger: Ledger, run: str = "") -> bool:
        from kdesched.kube.errors import Unavailable

        if not self.dropped:
            self.dropped += 1
            if self.carried_out:
                assert super().write(read, ledger, run)
            raise Unavailable("connection reset after the request was sent", maybe_sent=True)
        return super().write(read, ledger, run)


@pytest.mark.parametrize("carried_out", [True, False])
def test_a_ledger_write_whose_answer_was_lost_is_read_back(fake_api: FakeApiServer, kube: KubeClient,
                                                         carried_out: bool) -> None:
    """Carried out: the run recognises its own admission and evicts (it must not hold its own pod
    as another run's). Not carried out: it plans again and writes."""
    pool(fake_api, 1)
    r = reactor(kube)
    r.execution.store = LostAnswerStore(r.execution.store, carried_out=carried_out)
    out = taint_event(r, "p0")
    assert [e["result"] for e in out["evictions"]] == ["evicted"] and evicted(fake_api) == ["web-7d9f8-0"]
    move = ledger_of(fake_api).move(KEY)
    assert move is not None and [f.pod for f in move.inflight] == ["default/web-7d9f8-0"]


def test_a_pod_another_run_admitted_is_not_evicted_again(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Two deliveries of one event in two processes: the second plans from a snapshot where the pod
    is not terminating yet, but the ledger has it in flight: it is the first run's eviction (found
    by the storm test: the second run re-admitted it and the Eviction API answered 200 again)."""
    from kdesched.evictor.ledger import Admission
    from kdesched.model.records import Pod

    pool(fake_api, 1, spares=2)
    store = reactor(kube, "first").execution.store
    first = Pod.from_api(fake_api.get("Pod", "web-7d9f8-0", "default"))  # type: ignore[arg-type]
    read = store.read()
    assert store.write(read, read.ledger.admit([Admission(first, "RemovePodsViolatingNodeTaints", False,
                                                          "node:p0:x", "s0", 1, 1)], time.time(), "first-run"))
    out = taint_event(reactor(kube, "second"), "p0")
    assert out["evictions"] == [] and evicted(fake_api) == []
    assert [b["reason"] for b in out["blocked"]] == [
        "already admitted for eviction by another run (in flight in the disruption ledger)"]
    assert any("repeated" in n for n in out["notes"])  # it looks again: the first run may fail


def test_a_pod_its_pdb_holds_for_now_is_looked_at_again(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A PDB that allows no disruption while another pod is replaced is a passing reason: the run is
    repeated (found by the storm test: the pod stayed on its tainted node until the sweep)."""
    from tests.builders import pdb_obj

    pool(fake_api, 1, spares=2)
    fake_api.add(pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    r = reactor(kube)
    out = taint_event(r, "p0")
    assert out["evictions"] == [] and "PodDisruptionBudget default/web" in out["blocked"][0]["reason"]
    assert any("repeated" in n for n in out["notes"])
    assert r.continuations.delay("node:p0:RemovePodsViolatingNodeTaints") is not None

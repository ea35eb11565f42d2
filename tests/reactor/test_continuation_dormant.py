"""A paced move whose repeats timed out is woken again by progress on a workload it held.

Why: a replacement slower than ``replacementTimeoutSeconds`` ends a move's repeats; with the sweep
off or far away, the rest of a tainted node's pods stayed where they were until another event for
that node. These pin the dormant moves of :mod:`kdesched.reactor.run.continuation` on a fake clock
(the timers are cancelled before they fire); tests/realk8s/test_concurrent_moves.py shows the whole
story on a real control plane.
"""

from __future__ import annotations

import threading

import pytest
from kdesched.reactor import metrics as m
from kdesched.reactor.run import continuation as cont
from kdesched.reactor.run.continuation import Continuations

KEY = "Deployment/default/web"
OTHER = "Deployment/default/api"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed_out(clock: Clock, *, scope: str = "node:n1:T", workloads: set[str] | None = None,
              stop: threading.Event | None = None) -> Continuations:
    """A Continuations whose ``scope`` evicted at t=0, then held ``workloads`` with no progress
    until its repeats timed out (at t=31, bound 30 s)."""
    c = Continuations(lambda s: None, stop=stop or threading.Event(), timeout_seconds=30, first=1, longest=10,
                      clock=clock)
    held = workloads if workloads is not None else {KEY}
    c.after_run(scope, held=held, evicted=held)
    clock.now = 31
    assert "no progress for 30s" in c.after_run(scope, held=held, evicted=set())
    assert c.delay(scope) is None and c.scheduled() == {}
    return c


def index_consistent(c: Continuations) -> bool:
    """The workload index mirrors the dormant moves exactly (nothing leaked by a revive, a run of the
    scope, an expiry or the count bound)."""
    want: dict[str, set[str]] = {}
    for scope, (workloads, _) in c._dormant._moves.items():
        for w in workloads:
            want.setdefault(w, set()).add(scope)
    return c._dormant._by_workload == want


def revived() -> float:
    return m.CONTINUATIONS.labels("revived")._value.get()


def test_a_timed_out_move_is_dormant_and_progress_on_its_workload_starts_it_again() -> None:
    clock = Clock()
    c = timed_out(clock, workloads={KEY, OTHER})
    assert c.dormant() == {"node:n1:T": frozenset({KEY, OTHER})}
    before = revived()
    clock.now = 200  # the slow replacement turns Ready, minutes later
    assert c.wake({"Deployment/default/unrelated"}, within=0.2) == 0  # not a workload it held
    assert c.dormant()
    assert c.wake({KEY}, within=0.2) == 1
    assert c.scheduled() == {"node:n1:T": pytest.approx(0.2)}
    assert c.dormant() == {} and revived() == before + 1 and index_consistent(c)
    # the revived chain counts its progress from the wake: its repeats run for another timeout
    clock.now = 229
    assert "repeated" in c.after_run("node:n1:T", held={KEY}, evicted=set())
    c.cancel_all()


def test_a_wake_from_the_scopes_own_run_does_not_revive_it_and_an_eviction_elsewhere_does() -> None:
    clock = Clock()
    c = timed_out(clock)
    assert c.wake({KEY}, but="node:n1:T") == 0
    assert c.dormant()
    # another node's run evicted a pod of the workload: the dormant move looks again within first
    c.after_run("node:n2:T", held=set(), evicted={KEY})
    assert c.scheduled() == {"node:n1:T": pytest.approx(1.0)}
    c.cancel_all()


def test_a_run_of_the_scope_forgets_its_dormant_move() -> None:
    """The next event for the node decided afresh: held nothing (done), so nothing is woken later."""
    clock = Clock()
    c = timed_out(clock)
    assert c.after_run("node:n1:T", held=set(), evicted=set()) == ""
    assert c.dormant() == {} and index_consistent(c)
    assert c.wake({KEY}) == 0 and c.scheduled() == {}


def test_dormant_moves_expire_and_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    c = timed_out(clock)
    clock.now = 31 + cont.DORMANT_SECONDS
    assert c.dormant() == {}
    assert c.wake({KEY}) == 0
    monkeypatch.setattr(cont, "MAX_DORMANT", 3)
    for i in range(5):  # a workload each (an eviction of one would wake the others' dormant moves)
        clock.now = 0.0
        c.after_run(f"node:n{i}:T", held={f"Deployment/default/w{i}"}, evicted={f"Deployment/default/w{i}"})
        clock.now = 31
        c.after_run(f"node:n{i}:T", held={f"Deployment/default/w{i}"}, evicted=set())
    assert sorted(c.dormant()) == ["node:n2:T", "node:n3:T", "node:n4:T"]  # the oldest forgotten first
    assert index_consistent(c) and len(c._dormant._by_workload) == 3
    c.cancel_all()
    assert c.dormant() == {}


def test_a_stopping_process_revives_nothing() -> None:
    clock = Clock()
    stop = threading.Event()
    c = timed_out(clock, stop=stop)
    stop.set()
    assert c.wake({KEY}) == 0 and c.scheduled() == {}


def test_a_repeat_that_keeps_failing_times_out_into_a_dormant_move() -> None:
    """The run itself raised each time (a busy Lease, an API error) until the bound: the same."""
    clock = Clock()
    c = Continuations(lambda s: None, stop=threading.Event(), timeout_seconds=30, first=1, longest=10, clock=clock)
    c.after_run("node:n1:T", held={KEY}, evicted={KEY})
    with c._lock:
        chain = c._chains["node:n1:T"]
        assert chain.timer is not None
        chain.timer.cancel()
        chain.timer = None  # the timer fired; its run raised
    clock.now = 40
    c._again("node:n1:T", chain, backoff=True)
    assert c.scheduled() == {} and c.dormant() == {"node:n1:T": frozenset({KEY})}


def test_a_move_that_held_nothing_named_is_not_kept() -> None:
    clock = Clock()
    c = Continuations(lambda s: None, stop=threading.Event(), timeout_seconds=30, first=1, longest=10, clock=clock)
    c.resume(["node:n1:T"])  # resumed from the ledger: no workloads known until its first run
    with c._lock:
        chain = c._chains["node:n1:T"]
        assert chain.timer is not None
        chain.timer.cancel()
        chain.timer = None
    clock.now = 40
    c._again("node:n1:T", chain, backoff=False)
    assert c.dormant() == {}


def test_a_wake_revives_only_the_moves_of_its_workloads_among_many() -> None:
    """Many dormant moves (a pool maintenance whose replacements were all slow): a Ready pod of one
    workload starts exactly the moves that held it, and the index stays exact."""
    clock = Clock()
    c = Continuations(lambda s: None, stop=threading.Event(), timeout_seconds=30, first=1, longest=10, clock=clock)
    for i in range(200):
        held = {f"Deployment/default/w{i % 50}", f"Deployment/default/w{(i + 1) % 50}"}
        clock.now = 0.0
        c.after_run(f"node:n{i}:T", held=held, evicted=set())
        clock.now = 31
        c.after_run(f"node:n{i}:T", held=held, evicted=set())
    assert len(c.dormant()) == 200 and index_consistent(c)
    assert c.wake({"Deployment/default/w7"}, within=0.2) == 8  # i % 50 in (6, 7): 4 + 4 scopes
    assert sorted(c.scheduled()) == sorted(f"node:n{i}:T" for i in range(200) if i % 50 in (6, 7))
    assert len(c.dormant()) == 192 and index_consistent(c)
    c.cancel_all()
    assert c._dormant._by_workload == {}

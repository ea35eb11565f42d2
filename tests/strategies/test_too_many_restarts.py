"""RemovePodsHavingTooManyRestarts: every argument and algorithm step of upstream v0.36."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import DefaultEvictorArgs, Namespaces, RemovePodsHavingTooManyRestartsArgs
from kdesched.strategies.framework import Handle
from kdesched.strategies.too_many_restarts import SPEC

from tests.builders import node_obj, pdb_obj, pod_obj
from tests.harness import run_strategy


def cs(restarts: int, waiting: str = "", terminated: str = "", name: str = "c") -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting:
        state["waiting"] = {"reason": waiting}
    if terminated:
        state["terminated"] = {"reason": terminated, "exitCode": 1}
    if not state:
        state["running"] = {"startedAt": "2026-11-01T00:00:00Z"}
    return {"name": name, "restartCount": restarts, "state": state}


def restarting(name: str, node: str, restarts: int, **kw: Any) -> dict[str, Any]:
    kw.setdefault("container_statuses", [cs(restarts)])
    return pod_obj(name, node, **kw)


NODES = [node_obj("a"), node_obj("b")]


def args(threshold: int = 3, **kw: Any) -> RemovePodsHavingTooManyRestartsArgs:
    return RemovePodsHavingTooManyRestartsArgs(pod_restart_threshold=threshold, **kw)


CASES = [
    ("no pods", args(), [], []),
    ("below threshold kept, at threshold evicted",
     args(3), [restarting("p2", "a", 2), restarting("p3", "a", 3), restarting("p9", "b", 9)], ["p3", "p9"]),
    ("restarts summed over containers",
     args(5), [restarting("sum", "a", 0, container_statuses=[cs(2, name="x"), cs(3, name="y")]),
               restarting("few", "a", 0, container_statuses=[cs(2, name="x"), cs(2, name="y")])], ["sum"]),
    ("init container restarts ignored without the flag",
     args(3), [restarting("init", "a", 1, init_container_statuses=[cs(5, name="i")])], []),
    ("init container restarts counted with the flag",
     args(3, including_init_containers=True),
     [restarting("init", "a", 1, init_container_statuses=[cs(5, name="i")])], ["init"]),
    ("per node: highest restarts first",
     args(1), [restarting("low", "a", 2), restarting("high", "a", 10), restarting("mid", "a", 5),
               restarting("b1", "b", 4)], ["high", "mid", "low", "b1"]),
    ("pods of any phase are considered",
     args(1), [restarting("failed", "a", 4, phase="Failed"), restarting("ok", "a", 4, phase="Succeeded"),
               restarting("pending", "b", 4, phase="Pending")], ["failed", "ok", "pending"]),
    ("states: phase matches",
     args(1, states=("Running",)), [restarting("run", "a", 4), restarting("pend", "a", 4, phase="Pending")], ["run"]),
    ("states: container waiting reason matches",
     args(1, states=("CrashLoopBackOff",)),
     [restarting("crash", "a", 4, phase="Running", container_statuses=[cs(4, waiting="CrashLoopBackOff")]),
      restarting("run", "a", 4)], ["crash"]),
    ("states: terminated reason does not count",
     args(1, states=("CrashLoopBackOff",)),
     [restarting("term", "a", 4, container_statuses=[cs(4, terminated="CrashLoopBackOff")])], []),
    ("states: init waiting reason needs the flag",
     args(1, states=("CrashLoopBackOff",)),
     [restarting("init", "a", 4, phase="Pending", init_container_statuses=[cs(0, waiting="CrashLoopBackOff", name="i")])],
     []),
    ("states: init waiting reason with the flag",
     args(1, states=("CrashLoopBackOff",), including_init_containers=True),
     [restarting("init", "a", 4, phase="Pending", init_container_statuses=[cs(0, waiting="CrashLoopBackOff", name="i")])],
     ["init"]),
    ("namespaces include",
     args(1, namespaces=Namespaces(include=("prod",))),
     [restarting("in", "a", 4, namespace="prod"), restarting("out", "a", 4, namespace="dev")], ["in"]),
    ("namespaces exclude",
     args(1, namespaces=Namespaces(exclude=("prod",))),
     [restarting("in", "a", 4, namespace="prod"), restarting("out", "a", 4, namespace="dev")], ["out"]),
    ("labelSelector",
     args(1, label_selector=LabelSelector(match_labels=(("tier", "web"),))),
     [restarting("web", "a", 4, labels={"tier": "web"}), restarting("db", "a", 4, labels={"tier": "db"})], ["web"]),
    ("Filter: DaemonSet and bare pods are protected",
     args(1), [restarting("ds", "a", 4, owner_kind="DaemonSet"), restarting("bare", "a", 4, owner_kind=None),
               restarting("rs", "a", 4)], ["rs"]),
    ("pods on other nodes are not touched when run for one node", args(1),
     [restarting("on-a", "a", 4), restarting("on-b", "b", 4)], ["on-a"]),
]


@pytest.mark.parametrize("name,strategy_args,pods,expected", CASES, ids=[c[0] for c in CASES])
def test_too_many_restarts(name: str, strategy_args: RemovePodsHavingTooManyRestartsArgs,
                           pods: list[dict[str, Any]], expected: list[str]) -> None:
    nodes = ["a"] if name.startswith("pods on other nodes") else None
    result = run_strategy(SPEC, strategy_args, NODES + pods, nodes=nodes)
    assert result.names == expected


def test_pre_eviction_filter_applies_node_fit() -> None:
    # nodeFit: the only other node is unschedulable, so the pod has nowhere to go
    objects = [node_obj("a"), node_obj("b", unschedulable=True), restarting("p", "a", 9)]
    assert run_strategy(SPEC, args(1), objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == []
    objects = [node_obj("a"), node_obj("b"), restarting("p", "a", 9)]
    assert run_strategy(SPEC, args(1), objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == ["p"]


@pytest.mark.parametrize("limits,expected", [
    (Limits(per_node=1), ["a-high", "b-high"]),          # node limit -> next node
    (Limits(total=3), ["a-high", "a-low", "b-high"]),     # total limit -> stop
    (Limits(per_namespace=1), ["a-high", "b-other"]),     # namespace limit -> next pod
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = NODES + [restarting("a-low", "a", 3), restarting("a-high", "a", 8),
                       restarting("b-high", "b", 9), restarting("b-other", "b", 2, namespace="other")]
    assert run_strategy(SPEC, args(1), objects, limits=limits).names == expected


def test_pdb_budget_refusal_moves_on() -> None:
    objects = NODES + [restarting("x", "a", 9, labels={"app": "x"}), restarting("y", "a", 8, labels={"app": "x"}),
                       restarting("z", "a", 1, labels={"app": "z"}), pdb_obj("pdb-x", {"app": "x"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, args(1), objects)
    assert result.names == ["x", "z"]
    assert [r.pod.name for r in result.refusals] == ["y"]


def test_reason_names_restarts_and_threshold() -> None:
    result = run_strategy(SPEC, args(3), NODES + [restarting("p", "a", 7)])
    assert result.evictions[0].reason == "7 container restarts on node a, threshold podRestartThreshold=3"


def test_plan_aware_planned_pod_not_seen() -> None:
    objects = NODES + [restarting("p", "a", 9), restarting("q", "a", 9)]
    first = run_strategy(SPEC, args(1), objects, limits=Limits(total=1))
    assert first.names == ["p"]
    # a later strategy in the same run (fresh limits) must not see p again
    state = first.state
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    SPEC.run(args(1), Handle(state, evictor, "second", SPEC.name), state.nodes)
    assert [e.pod.name for e in state.planned] == ["p", "q"]

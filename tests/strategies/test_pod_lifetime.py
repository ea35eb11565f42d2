"""PodLifeTime (v0.36 arguments): every criterion, their AND, ordering, limits, plan-awareness."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import (
    DefaultEvictorArgs,
    Namespaces,
    OwnerKinds,
    PodConditionFilter,
    PodLifeTimeArgs,
)
from kdesched.strategies.framework import Handle
from kdesched.strategies.pod_lifetime import SPEC, human_duration

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, ts
from tests.harness import run_strategy

NODES = [node_obj("a"), node_obj("b")]
HOUR = 3600


def aged(name: str, node: str = "a", age: float = 2 * HOUR, **kw: Any) -> dict[str, Any]:
    return pod_obj(name, node, created=-age, **kw)


def status(waiting: str = "", terminated: str = "", exit_code: int | None = None, name: str = "c") -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting:
        state["waiting"] = {"reason": waiting}
    if terminated or exit_code is not None:
        state["terminated"] = {"reason": terminated, "exitCode": 0 if exit_code is None else exit_code}
    return {"name": name, "restartCount": 0, "state": state}


def cond(type_: str, status_: str, reason: str = "", since: float | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": type_, "status": status_}
    if reason:
        c["reason"] = reason
    if since is not None:
        c["lastTransitionTime"] = ts(-since)
    return c


def with_ephemeral(obj: dict[str, Any], waiting: str) -> dict[str, Any]:
    obj["status"]["ephemeralContainerStatuses"] = [status(waiting=waiting, name="debug")]
    return obj


MAX1H = PodLifeTimeArgs(max_pod_life_time_seconds=HOUR)

CASES = [
    ("no pods", MAX1H, [], []),
    # maxPodLifeTimeSeconds: whole seconds, strictly greater
    ("age > max evicted, age == max kept, younger kept", MAX1H,
     [aged("old", age=HOUR + 1), aged("exact", age=HOUR), aged("young", age=60)], ["old"]),
    ("creation in the future never matches", PodLifeTimeArgs(max_pod_life_time_seconds=0),
     [aged("future", age=-600), aged("now-ish", age=1)], ["now-ish"]),
    ("max 0 keeps a pod created this second", PodLifeTimeArgs(max_pod_life_time_seconds=0),
     [aged("zero", age=0)], []),
    ("age from creationTimestamp, not startTime", MAX1H,
     [pod_obj("started-late", "a", created=-2 * HOUR, started=-60),
      pod_obj("created-late", "a", created=-60, started=-2 * HOUR)], ["started-late"]),
    ("oldest first across nodes", MAX1H,
     [aged("a-2h", "a", 2 * HOUR), aged("b-5h", "b", 5 * HOUR), aged("a-3h", "a", 3 * HOUR)],
     ["b-5h", "a-3h", "a-2h"]),
    ("any phase is considered", MAX1H,
     [aged("failed", phase="Failed"), aged("succeeded", phase="Succeeded"), aged("pending", phase="Pending")],
     ["failed", "succeeded", "pending"]),
    # states
    ("states: phase", PodLifeTimeArgs(states=("Pending",)),
     [aged("pending", phase="Pending"), aged("running")], ["pending"]),
    ("states: status.reason", PodLifeTimeArgs(states=("Evicted",)),
     [aged("evicted", phase="Failed", status_reason="Evicted"), aged("failed", phase="Failed")], ["evicted"]),
    ("states: container waiting reason", PodLifeTimeArgs(states=("CrashLoopBackOff",)),
     [aged("crash", container_statuses=[status(waiting="CrashLoopBackOff")]), aged("fine")], ["crash"]),
    ("states: container terminated reason", PodLifeTimeArgs(states=("OOMKilled",)),
     [aged("oom", container_statuses=[status(terminated="OOMKilled", exit_code=137)]), aged("fine")], ["oom"]),
    ("states: init reason ignored without the flag", PodLifeTimeArgs(states=("ImagePullBackOff",)),
     [aged("init", phase="Pending", init_container_statuses=[status(waiting="ImagePullBackOff", name="i")])], []),
    ("states: init reason with the flag",
     PodLifeTimeArgs(states=("ImagePullBackOff",), including_init_containers=True),
     [aged("init", phase="Pending", init_container_statuses=[status(waiting="ImagePullBackOff", name="i")])], ["init"]),
    ("states: ephemeral reason ignored without the flag", PodLifeTimeArgs(states=("ErrImagePull",)),
     [with_ephemeral(aged("eph"), "ErrImagePull")], []),
    ("states: ephemeral reason with the flag",
     PodLifeTimeArgs(states=("ErrImagePull",), including_ephemeral_containers=True),
     [with_ephemeral(aged("eph"), "ErrImagePull")], ["eph"]),
    # conditions
    ("conditions: type+status", PodLifeTimeArgs(conditions=(PodConditionFilter(type="Ready", status="False"),)),
     [aged("unready", conditions=[cond("Ready", "False")]), aged("ready", conditions=[cond("Ready", "True")])],
     ["unready"]),
    ("conditions: reason", PodLifeTimeArgs(conditions=(PodConditionFilter(reason="Unschedulable"),)),
     [aged("unsched", phase="Pending", conditions=[cond("PodScheduled", "False", "Unschedulable")]),
      aged("other", conditions=[cond("PodScheduled", "False", "SchedulerError")])], ["unsched"]),
    ("conditions: any filter matches (OR)",
     PodLifeTimeArgs(conditions=(PodConditionFilter(type="Ready", status="False"),
                                 PodConditionFilter(type="ContainersReady", status="False"))),
     [aged("r", conditions=[cond("Ready", "False")]), aged("cr", conditions=[cond("ContainersReady", "False")]),
      aged("ok", conditions=[cond("Ready", "True")])], ["r", "cr"]),
    ("conditions: minTimeSinceLastTransition old enough / too recent / missing time",
     PodLifeTimeArgs(conditions=(PodConditionFilter(type="Ready", status="False",
                                                    min_time_since_last_transition_seconds=600),)),
     [aged("long", age=3 * HOUR, conditions=[cond("Ready", "False", since=601)]),
      aged("exact", age=2 * HOUR, conditions=[cond("Ready", "False", since=600)]),
      aged("recent", conditions=[cond("Ready", "False", since=599)]),
      aged("no-time", conditions=[cond("Ready", "False")])], ["long", "exact"]),
    # exit codes
    ("exitCodes: container terminated exit code", PodLifeTimeArgs(exit_codes=(137,)),
     [aged("killed", phase="Failed", container_statuses=[status(exit_code=137)]),
      aged("other", phase="Failed", container_statuses=[status(exit_code=1)])], ["killed"]),
    ("exitCodes: init exit code needs the flag", PodLifeTimeArgs(exit_codes=(2,)),
     [aged("init", phase="Failed", init_container_statuses=[status(exit_code=2, name="i")])], []),
    ("exitCodes: init exit code with the flag", PodLifeTimeArgs(exit_codes=(2,), including_init_containers=True),
     [aged("init", phase="Failed", init_container_statuses=[status(exit_code=2, name="i")])], ["init"]),
    # owner kinds
    ("ownerKinds include", PodLifeTimeArgs(max_pod_life_time_seconds=HOUR, owner_kinds=OwnerKinds(include=("Job",))),
     [aged("job", owner_kind="Job"), aged("rs")], ["job"]),
    ("ownerKinds exclude", PodLifeTimeArgs(max_pod_life_time_seconds=HOUR, owner_kinds=OwnerKinds(exclude=("Job",))),
     [aged("job", owner_kind="Job"), aged("rs")], ["rs"]),
    # namespaces / labels
    ("namespaces include", PodLifeTimeArgs(max_pod_life_time_seconds=HOUR, namespaces=Namespaces(include=("x",))),
     [aged("in", namespace="x"), aged("out", namespace="y")], ["in"]),
    ("namespaces exclude", PodLifeTimeArgs(max_pod_life_time_seconds=HOUR, namespaces=Namespaces(exclude=("x",))),
     [aged("in", namespace="x"), aged("out", namespace="y")], ["out"]),
    ("labelSelector",
     PodLifeTimeArgs(max_pod_life_time_seconds=HOUR, label_selector=LabelSelector(match_labels=(("app", "web"),))),
     [aged("web", labels={"app": "web"}), aged("db", labels={"app": "db"})], ["web"]),
    # AND of criteria
    ("criteria are ANDed: old AND crashing",
     PodLifeTimeArgs(max_pod_life_time_seconds=HOUR, states=("CrashLoopBackOff",)),
     [aged("old-crash", container_statuses=[status(waiting="CrashLoopBackOff")]),
      aged("young-crash", age=60, container_statuses=[status(waiting="CrashLoopBackOff")]),
      aged("old-fine")], ["old-crash"]),
    ("criteria are ANDed: exit code AND condition",
     PodLifeTimeArgs(exit_codes=(1,), conditions=(PodConditionFilter(type="Ready", status="False"),)),
     [aged("both", container_statuses=[status(exit_code=1)], conditions=[cond("Ready", "False")]),
      aged("code-only", container_statuses=[status(exit_code=1)], conditions=[cond("Ready", "True")])], ["both"]),
    # evictor Filter
    ("Filter protects DaemonSet, bare, critical and mirror pods", MAX1H,
     [aged("ds", owner_kind="DaemonSet"), aged("bare", owner_kind=None), aged("crit", priority=2_000_000_000),
      aged("mirror", annotations={"kubernetes.io/config.mirror": "x"}), aged("ok")], ["ok"]),
]


@pytest.mark.parametrize("name,args,pods,expected", CASES, ids=[c[0] for c in CASES])
def test_pod_lifetime(name: str, args: PodLifeTimeArgs, pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, NODES + pods).names == expected


def test_only_the_given_nodes() -> None:
    objects = NODES + [aged("on-a", "a"), aged("on-b", "b")]
    assert run_strategy(SPEC, MAX1H, objects, nodes=["b"]).names == ["on-b"]


def test_clock_is_handle_now() -> None:
    objects = NODES + [aged("p", age=30 * 60)]  # 30 min old at NOW
    assert run_strategy(SPEC, MAX1H, objects).names == []
    assert run_strategy(SPEC, MAX1H, objects, now=NOW + timedelta(hours=1)).names == ["p"]


def test_pre_eviction_filter_namespace_label_selector() -> None:
    ns = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": {"team": "a"}}},
          {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "y", "labels": {"team": "b"}}}]
    ev = DefaultEvictorArgs(namespace_label_selector=LabelSelector(match_labels=(("team", "a"),)))
    objects = NODES + ns + [aged("in-x", namespace="x"), aged("in-y", namespace="y")]
    assert run_strategy(SPEC, MAX1H, objects, evictor_args=ev).names == ["in-x"]


@pytest.mark.parametrize("limits,expected", [
    # node limit -> that pod is skipped, older-first continues with the other node
    (Limits(per_node=1), ["a-5h", "b-4h"]),
    (Limits(total=2), ["a-5h", "b-4h"]),
    (Limits(per_namespace=1), ["a-5h", "other-1h30"]),
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = NODES + [aged("a-5h", "a", 5 * HOUR), aged("b-4h", "b", 4 * HOUR), aged("a-3h", "a", 3 * HOUR),
                       aged("b-2h", "b", 2 * HOUR), aged("other-1h30", "b", 1.5 * HOUR, namespace="other")]
    assert run_strategy(SPEC, MAX1H, objects, limits=limits).names == expected


def test_pdb_budget_refusal_then_next_pod() -> None:
    objects = NODES + [aged("x1", age=5 * HOUR, labels={"app": "x"}), aged("x2", age=4 * HOUR, labels={"app": "x"}),
                       aged("y", age=3 * HOUR, labels={"app": "y"}), pdb_obj("x", {"app": "x"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, MAX1H, objects)
    assert result.names == ["x1", "y"]
    assert [r.pod.name for r in result.refusals] == ["x2"]
    assert "PodDisruptionBudget default/x" in result.refusals[0].reason


def test_reason_text() -> None:
    result = run_strategy(SPEC, MAX1H, NODES + [aged("p", age=7200)])
    assert result.evictions[0].reason == "pod is 2h old, more than maxPodLifeTimeSeconds=3600"


@pytest.mark.parametrize("seconds,text", [(0, "0s"), (59, "59s"), (60, "1m"), (3600, "1h"), (93784, "1d2h3m"),
                                          (21 * 86400, "21d")])
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_plan_aware_planned_pod_not_seen() -> None:
    first = run_strategy(SPEC, MAX1H, NODES + [aged("p", age=5 * HOUR), aged("q", age=4 * HOUR)],
                         limits=Limits(total=1))
    assert first.names == ["p"]
    state = first.state
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    SPEC.run(MAX1H, Handle(state, evictor, "second", SPEC.name), state.nodes)
    assert [e.pod.name for e in state.planned] == ["p", "q"]

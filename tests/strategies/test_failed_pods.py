"""RemoveFailedPods: phase, minPodLifetimeSeconds, excludeOwnerKinds, reasons, exitCodes, bare pods."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import DEFAULT_PROTECTIONS, DefaultEvictorArgs, Namespaces, RemoveFailedPodsArgs
from kdesched.strategies.failed_pods import SPEC
from kdesched.strategies.framework import Handle

from tests.builders import node_obj, pdb_obj, pod_obj
from tests.harness import run_strategy

NODES = [node_obj("a"), node_obj("b")]
HOUR = 3600
DEFAULT = RemoveFailedPodsArgs()
NO_AGE = RemoveFailedPodsArgs(min_pod_lifetime_seconds=None)


def failed(name: str, node: str = "a", age: float = 2 * HOUR, **kw: Any) -> dict[str, Any]:
    kw.setdefault("phase", "Failed")
    return pod_obj(name, node, created=-age, **kw)


def cs(waiting: str = "", terminated: str = "", exit_code: int | None = None, name: str = "c") -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting:
        state["waiting"] = {"reason": waiting}
    if terminated or exit_code is not None:
        state["terminated"] = {"reason": terminated, "exitCode": 0 if exit_code is None else exit_code}
    return {"name": name, "restartCount": 0, "state": state}


CASES = [
    ("no pods", DEFAULT, [], []),
    ("only phase Failed", DEFAULT,
     [failed("f"), failed("running", phase="Running"), failed("done", phase="Succeeded"),
      failed("pending", phase="Pending")], ["f"]),
    ("default minPodLifetimeSeconds is 3600, age >= min", DEFAULT,
     [failed("old", age=HOUR + 1), failed("exact", age=HOUR), failed("young", age=HOUR - 1)], ["old", "exact"]),
    ("age from creationTimestamp, not startTime", DEFAULT,
     [failed("created-long-ago", age=2 * HOUR, started=-60),
      pod_obj("created-recently", "a", phase="Failed", created=-60, started=-2 * HOUR)], ["created-long-ago"]),
    ("minPodLifetimeSeconds unset: any age", NO_AGE, [failed("young", age=5)], ["young"]),
    ("custom minPodLifetimeSeconds", RemoveFailedPodsArgs(min_pod_lifetime_seconds=60),
     [failed("a", age=61), failed("b", age=59)], ["a"]),
    ("excludeOwnerKinds", RemoveFailedPodsArgs(exclude_owner_kinds=("Job",)),
     [failed("job", owner_kind="Job"), failed("rs")], ["rs"]),
    ("reasons: container waiting reason", RemoveFailedPodsArgs(reasons=("CreateContainerConfigError",)),
     [failed("w", container_statuses=[cs(waiting="CreateContainerConfigError")]), failed("none")], ["w"]),
    ("reasons: container terminated reason", RemoveFailedPodsArgs(reasons=("OOMKilled",)),
     [failed("oom", container_statuses=[cs(terminated="OOMKilled", exit_code=137)]),
      failed("err", container_statuses=[cs(terminated="Error", exit_code=1)])], ["oom"]),
    ("reasons: pod status.reason", RemoveFailedPodsArgs(reasons=("NodeAffinity",)),
     [failed("aff", status_reason="NodeAffinity"), failed("evicted", status_reason="Evicted")], ["aff"]),
    ("reasons: init container reason ignored without the flag", RemoveFailedPodsArgs(reasons=("Error",)),
     [failed("init", init_container_statuses=[cs(terminated="Error", exit_code=1, name="i")])], []),
    ("reasons: init container reason with the flag",
     RemoveFailedPodsArgs(reasons=("Error",), including_init_containers=True),
     [failed("init", init_container_statuses=[cs(terminated="Error", exit_code=1, name="i")])], ["init"]),
    ("exitCodes: terminated exit code", RemoveFailedPodsArgs(exit_codes=(137,)),
     [failed("k", container_statuses=[cs(exit_code=137)]), failed("e", container_statuses=[cs(exit_code=1)])], ["k"]),
    ("exitCodes: init exit code needs the flag", RemoveFailedPodsArgs(exit_codes=(3,)),
     [failed("i", init_container_statuses=[cs(exit_code=3, name="i")])], []),
    ("exitCodes: init exit code with the flag", RemoveFailedPodsArgs(exit_codes=(3,), including_init_containers=True),
     [failed("i", init_container_statuses=[cs(exit_code=3, name="i")])], ["i"]),
    ("reasons AND exitCodes", RemoveFailedPodsArgs(reasons=("Error",), exit_codes=(2,)),
     [failed("both", container_statuses=[cs(terminated="Error", exit_code=2)]),
      failed("reason-only", container_statuses=[cs(terminated="Error", exit_code=1)])], ["both"]),
    ("namespaces include", RemoveFailedPodsArgs(namespaces=Namespaces(include=("x",))),
     [failed("in", namespace="x"), failed("out", namespace="y")], ["in"]),
    ("namespaces exclude", RemoveFailedPodsArgs(namespaces=Namespaces(exclude=("x",))),
     [failed("in", namespace="x"), failed("out", namespace="y")], ["out"]),
    ("labelSelector", RemoveFailedPodsArgs(label_selector=LabelSelector(match_labels=(("app", "web"),))),
     [failed("web", labels={"app": "web"}), failed("db", labels={"app": "db"})], ["web"]),
    ("per node in listing order, nodes in order", DEFAULT,
     [failed("b1", "b"), failed("a1", "a"), failed("a2", "a")], ["a1", "a2", "b1"]),
]


@pytest.mark.parametrize("name,args,pods,expected", CASES, ids=[c[0] for c in CASES])
def test_failed_pods(name: str, args: RemoveFailedPodsArgs, pods: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, NODES + pods).names == expected


@pytest.mark.parametrize("protections,expected", [
    (DEFAULT_PROTECTIONS, ["owned"]),                                  # FailedBarePods on: bare pod protected
    (DEFAULT_PROTECTIONS - {"FailedBarePods"}, ["bare", "owned"]),     # off: bare Failed pods are evictable
], ids=["FailedBarePods-on", "FailedBarePods-off"])
def test_bare_failed_pods_follow_the_evictor(protections: frozenset[str], expected: list[str]) -> None:
    objects = NODES + [failed("bare", owner_kind=None), failed("owned")]
    ev = DefaultEvictorArgs(protections=frozenset(protections))
    assert run_strategy(SPEC, DEFAULT, objects, evictor_args=ev).names == expected


def test_pre_eviction_filter_applies() -> None:
    objects = [node_obj("a"), node_obj("b", unschedulable=True), failed("f")]
    assert run_strategy(SPEC, DEFAULT, objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == []


@pytest.mark.parametrize("limits,expected", [
    (Limits(per_node=1), ["a1", "b1"]),
    (Limits(total=2), ["a1", "a2"]),
    (Limits(per_namespace=1), ["a1", "b-other"]),
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = NODES + [failed("a1", "a"), failed("a2", "a"), failed("b1", "b"), failed("b-other", "b", namespace="o")]
    assert run_strategy(SPEC, DEFAULT, objects, limits=limits).names == expected


def test_failed_pods_spend_no_pdb_budget() -> None:
    # the Eviction API deletes a Failed pod without consulting its PDB (a real v1.24 API server
    # does, tests/realk8s/test_pdb_verdicts.py), so the planner neither refuses nor charges them
    objects = NODES + [failed("x1", labels={"app": "x"}), failed("x2", labels={"app": "x"}),
                       pdb_obj("x", {"app": "x"}, disruptions_allowed=0)]
    result = run_strategy(SPEC, DEFAULT, objects)
    assert result.names == ["x1", "x2"] and result.refusals == []


def test_reason_text() -> None:
    objects = NODES + [failed("p", age=7200, container_statuses=[cs(terminated="OOMKilled", exit_code=137)])]
    result = run_strategy(SPEC, RemoveFailedPodsArgs(reasons=("OOMKilled",)), objects)
    assert result.evictions[0].reason == "Failed pod, 2h old (minPodLifetimeSeconds=3600); reason OOMKilled"


def test_reason_names_status_reason() -> None:
    result = run_strategy(SPEC, DEFAULT, NODES + [failed("p", age=5 * HOUR + 120, status_reason="Evicted")])
    assert result.evictions[0].reason == "Failed pod (Evicted), 5h2m old (minPodLifetimeSeconds=3600)"


def test_plan_aware_planned_pod_not_seen() -> None:
    first = run_strategy(SPEC, DEFAULT, NODES + [failed("p"), failed("q")], limits=Limits(total=1))
    state = first.state
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    SPEC.run(DEFAULT, Handle(state, evictor, "second", SPEC.name), state.nodes)
    assert [e.pod.name for e in state.planned] == ["p", "q"]

"""Planner: per-run limits in upstream order, shared counters, PDB budgets, refusals."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod
from kdesched.policy.types import DefaultEvictorArgs
from kdesched.strategies.framework import (
    ClusterState,
    LimitReached,
    NamespaceLimitReached,
    NodeLimitReached,
    TotalLimitReached,
)

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot

UNLIMITED = Limits()


def setup(objects: list[dict[str, Any]], limits: Limits = UNLIMITED, profiles: int = 1,
          gate: Any = None) -> tuple[ClusterState, LimitCounter, list[PlanningEvictor]]:
    state = ClusterState(snapshot([node_obj("a"), node_obj("b"), *objects]), NOW)
    counter = LimitCounter(limits)
    evictors = [PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), counter, gate)
                for _ in range(profiles)]
    return state, counter, evictors


def pods_by_name(state: ClusterState) -> dict[str, Pod]:
    return {p.name: p for p in state.snapshot.pods}


def evict(ev: PlanningEvictor, pod: Pod, profile: str = "p1") -> bool:
    return ev.evict(pod, strategy="S", profile=profile, reason="test")


# pods: a1, a2 on node a (ns x); b1 on node b (ns x); b2 on node b (ns y)
PODS = [pod_obj("a1", "a", namespace="x"), pod_obj("a2", "a", namespace="x"),
        pod_obj("b1", "b", namespace="x"), pod_obj("b2", "b", namespace="y")]

# (id, limits, eviction order, expected outcome per pod: True/False or the error type)
LIMIT_CASES: list[tuple[str, Limits, list[str], list[Any]]] = [
    ("unlimited", Limits(), ["a1", "a2", "b1", "b2"], [True, True, True, True]),
    ("total 0 = no evictions", Limits(total=0), ["a1"], [TotalLimitReached]),
    ("total 2", Limits(total=2), ["a1", "b1", "b2"], [True, True, TotalLimitReached]),
    ("per node 1", Limits(per_node=1), ["a1", "a2", "b1"], [True, NodeLimitReached, True]),
    ("per node 0", Limits(per_node=0), ["a1", "b1"], [NodeLimitReached, NodeLimitReached]),
    ("per namespace 1", Limits(per_namespace=1), ["a1", "b1", "b2"], [True, NamespaceLimitReached, True]),
    ("total checked before node", Limits(total=1, per_node=1), ["a1", "a2"], [True, TotalLimitReached]),
    ("node checked before namespace", Limits(per_node=1, per_namespace=1), ["a1", "a2"], [True, NodeLimitReached]),
    ("namespace after node passes", Limits(per_node=2, per_namespace=1), ["a1", "a2"], [True, NamespaceLimitReached]),
]


@pytest.mark.parametrize("name,limits,order,expected", LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_limits(name: str, limits: Limits, order: list[str], expected: list[Any]) -> None:
    state, counter, (ev,) = setup(PODS, limits)
    pods = pods_by_name(state)
    for pod_name, want in zip(order, expected, strict=True):
        if isinstance(want, bool):
            assert evict(ev, pods[pod_name]) is want, pod_name
        else:
            with pytest.raises(want) as err:
                evict(ev, pods[pod_name])
            assert isinstance(err.value, LimitReached)
            assert not state.is_planned(pods[pod_name])
    assert counter.total == sum(1 for w in expected if w is True)


def test_limit_messages_name_the_limit() -> None:
    state, _, (ev,) = setup(PODS, Limits(per_node=1))
    pods = pods_by_name(state)
    evict(ev, pods["a1"])
    with pytest.raises(NodeLimitReached, match=r"per node \(1\) reached on a"):
        evict(ev, pods["a2"])


def test_node_limit_skipped_for_pod_without_node() -> None:
    state, _, (ev,) = setup([pod_obj("u1", ""), pod_obj("u2", "")], Limits(per_node=1))
    pods = pods_by_name(state)
    assert evict(ev, pods["u1"]) and evict(ev, pods["u2"])


def test_counters_are_shared_across_profiles() -> None:
    state, counter, (one, two) = setup(PODS, Limits(total=2, per_node=1), profiles=2)
    pods = pods_by_name(state)
    assert evict(one, pods["a1"], "one")
    with pytest.raises(NodeLimitReached):
        evict(two, pods["a2"], "two")
    assert evict(two, pods["b1"], "two")
    with pytest.raises(TotalLimitReached):
        evict(one, pods["b2"], "one")
    assert [(e.pod.name, e.profile) for e in state.planned] == [("a1", "one"), ("b1", "two")]
    assert counter.per_node == {"a": 1, "b": 1} and counter.per_namespace == {"x": 2}


def test_already_planned_pod_is_refused_and_not_counted_again() -> None:
    state, counter, (one, two) = setup(PODS, profiles=2)
    pods = pods_by_name(state)
    assert evict(one, pods["a1"])
    assert evict(one, pods["a1"]) is False
    assert evict(two, pods["a1"], "two") is False
    assert counter.total == 1 and len(state.planned) == 1
    assert not one.filter(pods["a1"]) and one.filter(pods["a2"])


# PDB budgets: x1, x2, x3 selected by PDB "x"
PDB_PODS = [pod_obj(f"x{i}", "a", labels={"app": "x"}) for i in (1, 2, 3)] + [pod_obj("y", "b", labels={"app": "y"})]


@pytest.mark.parametrize("allowed,expected", [
    (1, [True, False, False]),
    (2, [True, True, False]),
    (0, [False, False, False]),
    (None, [True, True, True]),  # status unknown: no budget check (the API server will decide)
], ids=["allowed-1", "allowed-2", "allowed-0", "no-status"])
def test_pdb_budget(allowed: int | None, expected: list[bool]) -> None:
    state, counter, (ev,) = setup(PDB_PODS + [pdb_obj("x", {"app": "x"}, disruptions_allowed=allowed)])
    pods = pods_by_name(state)
    assert [evict(ev, pods[n]) for n in ("x1", "x2", "x3")] == expected
    assert evict(ev, pods["y"])  # not covered by the PDB
    refused = [r.pod.name for r in counter.refusals]
    assert refused == [n for n, ok in zip(("x1", "x2", "x3"), expected) if not ok]
    assert counter.total == expected.count(True) + 1


def test_pdb_refusal_reason_and_no_limit_consumed() -> None:
    state, counter, (ev,) = setup(PDB_PODS + [pdb_obj("x", {"app": "x"}, disruptions_allowed=1)], Limits(total=2))
    pods = pods_by_name(state)
    assert evict(ev, pods["x1"])
    assert evict(ev, pods["x2"]) is False
    (refusal,) = counter.refusals
    assert refusal.pod is pods["x2"] and refusal.strategy == "S" and refusal.profile == "p1"
    assert refusal.reason == "PodDisruptionBudget default/x allows 1 disruption(s) and 1 are already planned"
    assert evict(ev, pods["y"])  # the refusal did not use the total limit
    assert refusal.to_json()["node"] == "a"


def test_pdb_budget_shared_across_profiles() -> None:
    state, counter, (one, two) = setup(PDB_PODS + [pdb_obj("x", {"app": "x"}, disruptions_allowed=1)], profiles=2)
    pods = pods_by_name(state)
    assert evict(one, pods["x1"], "one")
    assert evict(two, pods["x2"], "two") is False
    assert counter.refusals[0].profile == "two"


def test_pod_under_two_pdbs_is_refused() -> None:
    objects = PDB_PODS + [pdb_obj("x", {"app": "x"}, disruptions_allowed=5),
                          pdb_obj("also-x", {"app": "x"}, disruptions_allowed=1)]
    state, counter, (ev,) = setup(objects)
    pods = pods_by_name(state)
    # x1 is selected by both PDBs: the API server would refuse it (500), so the planner does
    assert evict(ev, pods["x1"]) is False
    assert "covered by 2 PodDisruptionBudgets" in counter.refusals[0].reason
    assert "default/also-x" in counter.refusals[0].reason and "default/x" in counter.refusals[0].reason


def test_a_pdb_with_an_empty_selector_is_ignored_as_the_eviction_api_ignores_it() -> None:
    """kubernetes' eviction.go, getPodDisruptionBudgets: "If a PDB with a nil or empty selector
    creeps in, it should match nothing, not everything". Neither its budget nor "two PDBs" applies
    (tests/realk8s/test_differential_edges.py decides it against the upstream binary too)."""
    objects = PDB_PODS + [pdb_obj("x", {"app": "x"}, disruptions_allowed=5), pdb_obj("all", {}, disruptions_allowed=0)]
    state, counter, (ev,) = setup(objects)
    pods = pods_by_name(state)
    assert [evict(ev, pods[n]) for n in ("x1", "x2", "y")] == [True, True, True]
    assert counter.refusals == []
    assert [b.name for b in state.snapshot.pdbs_for(pods["y"])] == ["all"]  # PodsWithoutPDB still counts it


def test_a_pdb_whose_status_lags_its_spec_refuses_as_the_eviction_api_does() -> None:
    """After a PDB's spec changes and before the disruption controller catches up
    (status.observedGeneration < metadata.generation), the Eviction API answers 429 "still being
    processed" whatever disruptionsAllowed says (eviction.go, checkAndDecrement). A not-Ready pod
    the API lets go without spending the budget is not refused."""
    stale = pdb_obj("x", {"app": "x"}, disruptions_allowed=2)
    stale["metadata"]["generation"] = 2
    stale["status"].update({"observedGeneration": 1, "currentHealthy": 3, "desiredHealthy": 1})
    ready = [pod_obj(f"x{i}", "a", labels={"app": "x"}, conditions=[{"type": "Ready", "status": "True"}])
             for i in (1, 2, 3)]
    unready = pod_obj("x4", "a", labels={"app": "x"}, conditions=[{"type": "Ready", "status": "False"}])
    state, counter, (ev,) = setup([*ready, unready, stale])
    pods = pods_by_name(state)
    assert evict(ev, pods["x1"]) is False
    assert counter.refusals[0].kind == Reason.PDB and "still being processed" in counter.refusals[0].reason
    assert evict(ev, pods["x4"]) is True
    caught_up = pdb_obj("x", {"app": "x"}, disruptions_allowed=2)
    caught_up["metadata"]["generation"] = 2
    caught_up["status"]["observedGeneration"] = 2
    state, counter, (ev,) = setup([*ready, caught_up])
    assert evict(ev, pods_by_name(state)["x1"]) is True


def test_pod_without_uid_is_refused_before_limits() -> None:
    no_uid = pod_obj("nouid", "a")
    del no_uid["metadata"]["uid"]
    state, counter, (ev,) = setup([no_uid], Limits(total=0))
    pod = pods_by_name(state)["nouid"]
    assert evict(ev, pod) is False  # refused, not TotalLimitReached
    assert "metadata.uid" in counter.refusals[0].reason and counter.total == 0


def test_gate_refusal_is_recorded_after_limits() -> None:
    calls: list[str] = []
    counted: list[str] = []

    class Cooling:
        def check(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
            calls.append(pod.name)
            return Verdict(Reason.COOLDOWN_NODE, "node a is cooling down") if pod.node_name == "a" else None

        def passed(self, pod: Pod, strategy: str, held: bool) -> None:
            counted.append(pod.name)

    gate = Cooling()
    state, counter, (ev,) = setup(PODS, Limits(per_namespace=2), gate=gate)
    pods = pods_by_name(state)
    assert evict(ev, pods["a1"]) is False
    assert evict(ev, pods["b1"]) is True
    assert [(r.pod.name, r.reason, r.kind) for r in counter.refusals] == [
        ("a1", "node a is cooling down", Reason.COOLDOWN_NODE)]
    assert counter.total == 1 and counted == ["b1"]  # only the planned pod is counted by the gate
    # a limit error wins before the gate is asked
    assert evict(ev, pods["b2"])
    state2, _, (ev2,) = setup(PODS, Limits(total=0), gate=gate)
    calls.clear()
    with pytest.raises(TotalLimitReached):
        evict(ev2, pods_by_name(state2)["b1"])
    assert calls == []


def test_planned_eviction_frees_usage() -> None:
    state, _, (ev,) = setup([pod_obj("a1", "a", cpu="500m"), pod_obj("a2", "a", cpu="250m")])
    assert state.usage("a")["cpu"] == 750 and state.usage("a")["pods"] == 2
    evict(ev, pods_by_name(state)["a1"])
    assert state.usage("a")["cpu"] == 250 and state.usage("a")["pods"] == 1
    assert [p.name for p in state.pods_on_node("a")] == ["a2"]


def test_pod_covered_by_two_pdbs_is_refused_like_the_api_server_would() -> None:
    from kdesched.evictor.defaultevictor import DefaultEvictor
    from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
    from kdesched.policy.types import DefaultEvictorArgs

    from tests.builders import node_obj, pdb_obj, pod_obj, state

    st = state([node_obj("a"), node_obj("b"), pod_obj("p", "a", labels={"app": "x", "tier": "web"}),
                pdb_obj("one", {"app": "x"}, disruptions_allowed=5), pdb_obj("two", {"tier": "web"}, disruptions_allowed=5)])
    counter = LimitCounter(Limits())
    ev = PlanningEvictor(st, DefaultEvictor(DefaultEvictorArgs(), st), counter)
    pod = st.pods_on_node("a")[0]
    assert ev.evict(pod, strategy="S", profile="P", reason="r") is False
    assert "covered by 2 PodDisruptionBudgets" in counter.refusals[0].reason
    assert st.planned == []


def test_min_replicas_counts_a_pod_toward_each_of_its_owners() -> None:
    from kdesched.evictor.defaultevictor import DefaultEvictor
    from kdesched.policy.types import DefaultEvictorArgs

    from tests.builders import node_obj, owner, pod_obj, state

    two_owners = pod_obj("multi", "b")
    two_owners["metadata"]["ownerReferences"].append(owner("Thing", "t"))
    st = state([node_obj("a"), node_obj("b"), pod_obj("p1", "a"), pod_obj("p2", "a"), two_owners])
    ev = DefaultEvictor(DefaultEvictorArgs(min_replicas=3), st)
    assert st.owner_pod_count("ReplicaSet-rs") == 3
    assert ev.why_not(st.pods_on_node("a")[0]) is None


# The Eviction API's own PDB rules (v1.24; the same cases run against a real API server in
# tests/realk8s/test_pdb_verdicts.py): which pods it lets go without, or despite, a PDB.
READY = [{"type": "Ready", "status": "True"}]
NOT_READY = [{"type": "Ready", "status": "False"}]


def health_pdb(name: str, allowed: int, current: int | None, desired: int | None,
               labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj = pdb_obj(name, labels or {"app": "x"}, disruptions_allowed=allowed)
    if current is not None:
        obj["status"]["currentHealthy"] = current
    if desired is not None:
        obj["status"]["desiredHealthy"] = desired
    return obj


def x_pod(name: str, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("conditions", READY)
    return pod_obj(name, "a", labels={"app": "x"}, **kwargs)


@pytest.mark.parametrize("kwargs", [
    {"phase": "Pending", "conditions": None}, {"phase": "Failed"}, {"phase": "Succeeded"}, {"deleting": True},
], ids=["pending", "failed", "succeeded", "terminating"])
def test_pods_the_api_evicts_without_consulting_a_pdb(kwargs: dict[str, Any]) -> None:
    state, counter, (ev,) = setup([x_pod("r1"), x_pod("odd", **kwargs), health_pdb("x", 0, 1, 1)])
    pods = pods_by_name(state)
    assert evict(ev, pods["odd"])  # planned under a 0-budget PDB: the API server deletes it
    assert counter.pdb_used == {}  # and no budget is spent on it
    assert evict(ev, pods["r1"]) is False


def test_pending_pod_under_two_pdbs_is_planned() -> None:
    state, counter, (ev,) = setup([x_pod("p", phase="Pending", conditions=None), health_pdb("x", 0, 0, 1),
                                   health_pdb("all", 0, 0, 1, labels={})])
    assert evict(ev, pods_by_name(state)["p"])
    assert counter.refusals == []


@pytest.mark.parametrize("current,desired,allowed,expected", [
    (2, 2, 0, [True, False]),      # healthy budget: the not-Ready pod goes free, the Ready one is refused
    (3, 2, 1, [True, True]),       # ...and the not-Ready pod does not use the one disruption allowed
    (1, 2, 0, [False, False]),     # unhealthy budget: the not-Ready pod needs the budget too
    (2, 0, 0, [False, False]),     # desiredHealthy 0: the API spends the budget
    (None, None, 0, [False, False]),  # health unknown: spend the budget (the cautious answer)
], ids=["healthy", "healthy-with-one-allowed", "unhealthy", "desired-0", "unknown-health"])
def test_not_ready_pod_goes_free_only_while_the_budget_is_healthy(
        current: int | None, desired: int | None, allowed: int, expected: list[bool]) -> None:
    state, _counter, (ev,) = setup([x_pod("n", conditions=NOT_READY), x_pod("r"),
                                   health_pdb("x", allowed, current, desired)])
    pods = pods_by_name(state)
    assert [evict(ev, pods["n"]), evict(ev, pods["r"])] == expected


def test_running_pod_without_a_ready_condition_is_not_ready() -> None:
    # IsPodReady needs a Ready=True condition; a pod that reports none is not Ready
    state, _counter, (ev,) = setup([x_pod("n", conditions=None), health_pdb("x", 0, 2, 2)])
    assert evict(ev, pods_by_name(state)["n"])


@pytest.mark.parametrize("kind", list(Reason))
def test_refusals_are_counted_by_their_reason_never_their_text(kind: Reason) -> None:
    """kdesched_evictions_refused_total{reason}: the label is the refusal's Reason (a handful of
    values), whatever its message says (0.1 matched message prefixes: a reworded message changed
    the label)."""
    from kdesched.evictor.metrics import REGISTRY, record_refused

    labels = {"reason": kind.value, "strategy": "S", "namespace": "ns-refused"}
    before = REGISTRY.get_sample_value("kdesched_evictions_refused_total", labels) or 0.0
    record_refused(kind, strategy="S", namespace="ns-refused")
    assert REGISTRY.get_sample_value("kdesched_evictions_refused_total", labels) == before + 1

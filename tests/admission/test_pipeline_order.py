"""The admission pipeline's order (kdesched.admission.pipeline): a pod a deferring control (a closed
disruption window, a fresh node change) holds is never counted by the cluster-wide bucket or the
ledger capacity, so it spends no token and no pod is reported ``rate-limit`` for what a window
holds. Run on built objects through the real planner (engine.plan_run with the pipeline's gate,
then its plan checks), as the reactor's admission does (kdesched.reactor.run.admit.decide)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from kdesched.admission.bucket import ClusterBucket
from kdesched.admission.control import RunContext
from kdesched.admission.pipeline import AdmissionSettings, Pipeline
from kdesched.admission.windows import Cron, Window
from kdesched.engine import plan_run
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.reasons import Reason
from kdesched.model.records import Node, Pod, PodDisruptionBudget
from kdesched.model.snapshot import Snapshot
from kdesched.reactor.run.controls import Controlled, apply_verdicts, held_flags

from tests.builders import node_obj, pdb_obj, pod_obj
from tests.reactor.policies import LNU, make_policy

T = datetime(2026, 11, 26, 10, 0, 0, tzinfo=UTC).timestamp()
TAINTS, AFFINITY = "RemovePodsViolatingNodeTaints", "RemovePodsViolatingNodeAffinity"
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
FORBID_TAINTS = Window("freeze", Cron.parse("* * * * *"), 3600.0, "forbid", strategies=frozenset({TAINTS}))
FORBID_ALL = Window("freeze", Cron.parse("* * * * *"), 3600.0, "forbid")


def cluster() -> Snapshot:
    """Node t is tainted (3 pods violate it), node a lost the label its 2 pods require; n is fine."""
    required = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}
    nodes = [node_obj("t", taints=[TAINT]), node_obj("a"), node_obj("n", labels={"disk": "ssd"})]
    pods = [*(pod_obj(f"t{i}", "t", owner_name=f"t{i}") for i in range(3)),
            *(pod_obj(f"a{i}", "a", owner_name=f"a{i}", affinity=required) for i in range(2))]
    return Snapshot.build([Node.from_api(n) for n in nodes], [Pod.from_api(p) for p in pods])


def decide(windows: Sequence[Window], burst: int, *, stop_when_spent: bool = False,
           plugins: dict[str, Any] | None = None, snapshot: Snapshot | None = None) -> tuple[Controlled, Any]:
    policy = make_policy(plugins or {TAINTS: None, AFFINITY: {
        "nodeAffinityType": ["requiredDuringSchedulingIgnoredDuringExecution"]}})
    pipeline = Pipeline.build(AdmissionSettings(bucket=ClusterBucket(60, burst), windows=tuple(windows)))
    snap = snapshot or cluster()
    admission = pipeline.begin(RunContext(Ledger(), snap, T, trigger="taints", stop_when_spent=stop_when_spent))
    plan = plan_run(policy, snap, now=datetime.fromtimestamp(T, UTC), gate=admission)
    return apply_verdicts(plan, admission.finish(plan.evictions, held_flags(plan))), admission


def refused(c: Controlled) -> dict[str, Reason]:
    return {r.pod.name: r.kind for r in c.plan.refusals}


def test_a_pod_a_closed_window_defers_is_deferred_not_refused_rate_limit() -> None:
    c, admission = decide([FORBID_ALL], burst=2)
    assert sorted(o.eviction.pod.name for o in c.deferred) == ["a0", "a1", "t0", "t1", "t2"]
    assert {o.cause for o in c.deferred} == {"window"}
    assert refused(c) == {}  # before: three of the five "rate-limit" (the bucket ran dry on deferred pods)
    assert Reason.RATE_LIMIT not in {v.reason for v in admission.refused}
    assert admission.until is None  # no repeat at the next token: the window's opening repeats the run
    assert c.plan.evictions == ()


def test_pods_a_window_defers_spend_no_token_for_the_pods_that_may_go() -> None:
    c, admission = decide([FORBID_TAINTS], burst=2)  # the window holds the taints, not the labels
    assert sorted(o.eviction.pod.name for o in c.deferred) == ["t0", "t1", "t2"]
    # the bucket's two tokens go to the two pods that may go now (before: spent on t0, t1)
    assert sorted(e.pod.name for e in c.plan.evictions) == ["a0", "a1"]
    assert refused(c) == {} and admission.refused == []


def test_pods_a_fresh_node_change_defers_spend_no_token_either() -> None:
    """The node's taint was written this second (managedFields): its three pods wait for the scheduler."""
    raw = node_obj("t", taints=[TAINT])
    raw["metadata"]["managedFields"] = [{"manager": "kubectl-taint", "operation": "Update", "apiVersion": "v1",
                                         "time": datetime.fromtimestamp(T, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:taints": {}}}}]
    base = cluster()
    snap = Snapshot.build([Node.from_api(raw), *(n for n in base.nodes.values() if n.name != "t")], list(base.pods))
    c, _ = decide([], burst=2, snapshot=snap)
    assert sorted(o.eviction.pod.name for o in c.deferred) == ["t0", "t1", "t2"]
    assert {o.cause for o in c.deferred} == {"fresh-node-change"}
    assert sorted(e.pod.name for e in c.plan.evictions) == ["a0", "a1"] and refused(c) == {}


def test_the_bucket_still_refuses_what_it_should() -> None:
    c, _ = decide([FORBID_TAINTS], burst=1)
    assert [e.pod.name for e in c.plan.evictions] == ["a0"]
    assert refused(c) == {"a1": Reason.RATE_LIMIT}
    c, _ = decide([], burst=2)  # no window: two go, the rest wait for tokens
    assert len(c.plan.evictions) == 2 and sorted(refused(c).values()) == [Reason.RATE_LIMIT] * 3


def crowded(*extra: dict[str, Any]) -> Snapshot:
    """One node at 80% (16 pods of one workload each), three empty: LowNodeUtilization moves several."""
    nodes = [node_obj("full", cpu="10", pods=20), *(node_obj(f"e{i}", cpu="10", pods=20) for i in range(3))]
    pods = [pod_obj(f"p{i}", "full", cpu="500m", owner_name=f"w{i}") for i in range(16)]
    return Snapshot.build([Node.from_api(n) for n in nodes], [Pod.from_api(p) for p in [*pods, *extra]])


@pytest.mark.parametrize("burst", [1, 3])
def test_a_balance_run_in_a_closed_window_plans_a_burst_of_deferred_evictions_and_no_rate_limit(burst: int) -> None:
    """Planning more than the bucket could ever let go at once when the window opens decides nothing
    (the run is repeated then, on fresh state) and costs what stopping at an empty bucket saves."""
    c, admission = decide([FORBID_ALL], burst=burst, stop_when_spent=True, plugins={"LowNodeUtilization": LNU},
                          snapshot=crowded())
    assert len(c.deferred) == burst and {o.cause for o in c.deferred} == {"window"}
    assert not any("rate limit" in n for n in c.plan.notes), c.plan.notes  # before: the bucket "ran dry"
    assert any(f"planned {burst} deferred eviction(s)" in n for n in c.plan.notes), c.plan.notes
    assert Reason.RATE_LIMIT not in {v.reason for v in admission.refused}


def test_a_balance_strategy_the_window_does_not_cover_still_runs_and_evicts() -> None:
    lnu_only = Window("freeze", Cron.parse("* * * * *"), 3600.0, "forbid", strategies=frozenset({"LowNodeUtilization"}))
    dups = [pod_obj(f"dup-{i}", "e0", cpu="100m", owner_name="dup") for i in range(2)]
    c, _ = decide([lnu_only], burst=2, stop_when_spent=True,
                  plugins={"LowNodeUtilization": LNU, "RemoveDuplicates": None}, snapshot=crowded(*dups))
    assert len(c.deferred) == 2 and {o.eviction.strategy for o in c.deferred} == {"LowNodeUtilization"}
    # before: the deferred pods drew both tokens and RemoveDuplicates was "not run: rate limit"
    assert [(e.pod.name, e.strategy) for e in c.plan.evictions] == [("dup-1", "RemoveDuplicates")]
    assert not any("rate limit" in n for n in c.plan.notes), c.plan.notes


def test_under_the_health_brake_no_pod_is_refused_rate_limit_or_counted() -> None:
    down = [Node.from_api(node_obj(f"d{i}", ready=False)) for i in range(3)]  # 3 of 6 nodes NotReady
    base = cluster()
    snap = Snapshot.build([*base.nodes.values(), *down], list(base.pods))
    c, admission = decide([], burst=1, snapshot=snap)
    assert admission.brake is not None and admission.brake.reason is Reason.HEALTH_BRAKE
    assert len(c.deferred) == 5 and {o.cause for o in c.deferred} == {"health-brake"}
    assert refused(c) == {}  # before: one deferred, four "rate-limit"


def guarded_t0() -> Snapshot:
    """:func:`cluster` with t0 under a PodDisruptionBudget that allows no disruption."""
    base = cluster()
    guarded = Pod.from_api(pod_obj("t0", "t", owner_name="t0", labels={"app": "guarded"}))
    pods = [guarded, *(p for p in base.pods if p.name != "t0")]
    return Snapshot.build(list(base.nodes.values()), pods,
                          [PodDisruptionBudget.from_api(pdb_obj("guard", {"app": "guarded"}, disruptions_allowed=0))])


def test_a_pod_the_planner_refuses_after_the_gate_spends_no_token() -> None:
    """The gate's checks pass t0, then the planner refuses it (its PodDisruptionBudget allows no
    disruption): the bucket's token and the record's room are counted only for a pod actually
    planned, so both tokens go to pods that can go (before: t0 drew one, and t2 was refused
    ``rate-limit`` although a token was left unused)."""
    c, _ = decide([], burst=2, snapshot=guarded_t0())
    assert sorted(e.pod.name for e in c.plan.evictions) == ["t1", "t2"]
    assert refused(c) == {"t0": Reason.PDB, "a0": Reason.RATE_LIMIT, "a1": Reason.RATE_LIMIT}


def test_a_pod_the_planner_refuses_after_a_window_defers_it_is_not_counted_as_a_deferral() -> None:
    """In a closed window a balance run plans at most a burst of deferred evictions: a pod the planner
    then refuses (nowhere to go, a budget) is not one of them."""
    c, _ = decide([FORBID_ALL], burst=2, stop_when_spent=True, snapshot=guarded_t0())
    assert refused(c) == {"t0": Reason.PDB}
    assert sorted(o.eviction.pod.name for o in c.deferred) == ["a0", "a1", "t1", "t2"]

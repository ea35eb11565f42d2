"""Per-workload pacing and "somewhere to go", decided on built snapshots (no API server).

Covers: the workload a pod belongs to (Deployment through its ReplicaSets, StatefulSet, bare pods
never grouped), Ready counting, the allowance as a count, a percentage and an annotation, waves,
pods already not Ready holding the first eviction back, "somewhere to go" (capacity, this run's
own reservations, taints, selectors, required anti-affinity), a PDB stricter than the allowance,
and parity: without the safety defaults the plan is exactly what it was.
"""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.engine import plan_run
from kdesched.evictor.pacing import (
    MAX_UNAVAILABLE_ANNOTATION,
    Workload,
    allowance,
    pod_ready,
    workload_of,
    workload_status,
)
from kdesched.policy.safety import Path, Safety, SafetySettings
from kdesched.policy.types import Policy

from tests.builders import NOW, node_obj, pdb_obj, pod, pod_obj, snapshot
from tests.reactor.policies import make_policy

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
READY = [{"type": "Ready", "status": "True"}]
NOT_READY = [{"type": "Ready", "status": "False"}]


def safety(max_unavailable: int | str = 1) -> Safety:
    return Safety(True, "test", max_unavailable, 30.0)


def taints_policy(**evictor: Any) -> Policy:
    return make_policy({"RemovePodsViolatingNodeTaints": None}, evictor=evictor or None)


def web(name: str, node: str, *, rs: str = "web-7d9f8", ready: bool = True, **kw: Any) -> dict[str, Any]:
    """A pod of Deployment ``web`` (ReplicaSet ``rs`` = web-HASH, label pod-template-hash=HASH)."""
    h = rs.rsplit("-", 1)[1]
    labels = {"app": "web", "pod-template-hash": h, **kw.pop("labels", {})}
    return pod_obj(name, node, owner_name=rs, labels=labels, conditions=READY if ready else NOT_READY, **kw)


def tainted_cluster(replicas: int = 3, *, free_nodes: int = 2, extra: list[dict[str, Any]] | None = None,
                    **pod_kw: Any) -> list[dict[str, Any]]:
    objs = [node_obj("n1", taints=[TAINT])] + [node_obj(f"n{i + 2}") for i in range(free_nodes)]
    objs += [web(f"web-7d9f8-{i}", "n1", **pod_kw) for i in range(replicas)]
    return objs + (extra or [])


def waves(plan: Any) -> dict[str, int]:
    assert plan.pacing is not None
    return {e.pod.name: s.wave for e, s in zip(plan.evictions, plan.pacing.steps, strict=True)}


# -- workloads and readiness ----------------------------------------------------------------------

def test_a_replicaset_pod_belongs_to_its_deployment_and_a_rollout_is_one_workload() -> None:
    old, new = pod(**_kw(web("a", "n1", rs="web-7d9f8"))), pod(**_kw(web("b", "n1", rs="web-5c6b4")))
    assert workload_of(old) == workload_of(new) == Workload("Deployment", "default", "web")
    # a ReplicaSet without the Deployment naming rule stays itself
    lone = pod("c", "n1", owner_kind="ReplicaSet", owner_name="standalone")
    assert workload_of(lone) == Workload("ReplicaSet", "default", "standalone")
    assert workload_of(pod("s", "n1", owner_kind="StatefulSet", owner_name="db")) == Workload("StatefulSet", "default", "db")
    assert workload_of(pod("j", "n1", owner_kind="Job", owner_name="batch")) == Workload("Job", "default", "batch")
    assert workload_of(pod("bare", "n1", owner_kind=None)) is None


def _kw(raw: dict[str, Any]) -> dict[str, Any]:
    """``pod(**_kw(raw))``: build a record from a raw object (pod() takes builder arguments)."""
    return {"name": raw["metadata"]["name"], "node": raw["spec"]["nodeName"], "owner_name":
            raw["metadata"]["ownerReferences"][0]["name"], "labels": raw["metadata"]["labels"],
            "conditions": raw["status"].get("conditions")}


def test_ready_means_running_not_terminating_and_ready_condition_true() -> None:
    assert pod_ready(pod("a", "n1", conditions=READY))
    assert not pod_ready(pod("b", "n1", conditions=NOT_READY))
    assert not pod_ready(pod("c", "n1", phase="Pending"))
    assert not pod_ready(pod("d", "n1", conditions=READY, deleting=True))
    assert pod_ready(pod("e", "n1"))  # Running without any Ready condition (hand-written snapshot)


def test_status_counts_terminating_pods_only_for_a_statefulset() -> None:
    dep = Workload("Deployment", "default", "web")
    pods = [pod("a", "n1", conditions=READY), pod("b", "n1", conditions=READY, deleting=True),
            pod("c", "", phase="Pending"), pod("d", "n1", phase="Succeeded")]
    assert (workload_status(dep, pods).expected, workload_status(dep, pods).ready) == (2, 1)
    sts = Workload("StatefulSet", "default", "db")
    assert (workload_status(sts, pods).expected, workload_status(sts, pods).unavailable) == (3, 2)


@pytest.mark.parametrize(("setting", "pods", "expected"), [(1, 10, 1), (3, 2, 3), ("50%", 4, 2), ("25%", 3, 1),
                                                           ("10%", 35, 3), ("100%", 5, 5)])
def test_allowance_count_or_percentage_rounded_down_at_least_one(setting: int | str, pods: int, expected: int) -> None:
    assert allowance(setting, pods) == expected


# -- waves --------------------------------------------------------------------------------------

def test_three_replicas_on_a_tainted_node_go_in_three_waves() -> None:
    plan = plan_run(taints_policy(), snapshot(tainted_cluster()), now=NOW, safety=safety())
    assert waves(plan) == {"web-7d9f8-0": 0, "web-7d9f8-1": 1, "web-7d9f8-2": 2}
    assert plan.refusals == ()
    (pacing,) = plan.pacing.workloads.values() if plan.pacing else ()
    assert (pacing.status.expected, pacing.status.ready, pacing.allowance) == (3, 3, 1)


def test_without_safety_the_plan_is_upstreams() -> None:
    snap = snapshot(tainted_cluster())
    plain = plan_run(taints_policy(), snap, now=NOW)
    off = plan_run(taints_policy(), snap, now=NOW, safety=SafetySettings().resolve(Path.PARITY))
    assert plain.pacing is None and off.pacing is None
    assert [e.pod.name for e in plain.evictions] == [e.pod.name for e in off.evictions] == [
        "web-7d9f8-0", "web-7d9f8-1", "web-7d9f8-2"]


def test_max_unavailable_two_evicts_two_at_once() -> None:
    plan = plan_run(taints_policy(), snapshot(tainted_cluster(5)), now=NOW, safety=safety(2))
    assert sorted(waves(plan).values()) == [0, 0, 1, 1, 2]


def test_percentage_of_the_workload() -> None:
    plan = plan_run(taints_policy(), snapshot(tainted_cluster(4)), now=NOW, safety=safety("50%"))
    assert sorted(waves(plan).values()) == [0, 0, 1, 1]


def test_annotation_on_the_pod_template_overrides_the_policy() -> None:
    plan = plan_run(taints_policy(), snapshot(tainted_cluster(3, annotations={MAX_UNAVAILABLE_ANNOTATION: "3"})),
                    now=NOW, safety=safety())
    assert sorted(waves(plan).values()) == [0, 0, 0]
    assert plan.pacing is not None
    assert [p.allowance_source for p in plan.pacing.workloads.values()] == [f"annotation {MAX_UNAVAILABLE_ANNOTATION}"]


@pytest.mark.parametrize("bad", ["lots", "\u00b2", "\u0663", "\uff11", "2\u00b2", "\u0663%"])
def test_a_bad_annotation_is_named_and_the_policy_value_used(bad: str) -> None:
    """Unicode digits ("²" passes str.isdigit() and int() raised: the event path aborted the strategy,
    and run planned the pod with no pacing) are refused like any other bad value."""
    plan = plan_run(taints_policy(), snapshot(tainted_cluster(2, annotations={MAX_UNAVAILABLE_ANNOTATION: bad})),
                    now=NOW, safety=safety())
    assert sorted(waves(plan).values()) == [0, 1] and not plan.errors
    assert any(MAX_UNAVAILABLE_ANNOTATION in n and "using 1" in n for n in plan.notes)


def test_a_pod_already_not_ready_holds_the_first_eviction_back() -> None:
    sick = web("web-7d9f8-x", "n2", ready=False)
    plan = plan_run(taints_policy(), snapshot(tainted_cluster(2, extra=[sick])), now=NOW, safety=safety())
    assert waves(plan) == {"web-7d9f8-0": 1, "web-7d9f8-1": 2}


def test_bare_pods_are_never_grouped_and_failed_pods_need_no_destination() -> None:
    objs = [node_obj("n1"), node_obj("n2", cpu="0")]  # n2 has no room at all
    objs += [pod_obj(f"bare-{i}", "n1", owner_kind=None, phase="Failed") for i in range(3)]
    policy = make_policy({"RemoveFailedPods": None}, evictor={"evictFailedBarePods": True})
    plan = plan_run(policy, snapshot(objs), now=NOW, safety=safety())
    assert waves(plan) == {"bare-0": 0, "bare-1": 0, "bare-2": 0}
    assert plan.pacing is not None and all(s.workload is None for s in plan.pacing.steps)


def test_statefulset_pods_are_paced_like_any_workload() -> None:
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2")]
    objs += [pod_obj(f"db-{i}", "n1", owner_kind="StatefulSet", owner_name="db", conditions=READY) for i in range(3)]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert waves(plan) == {"db-0": 0, "db-1": 1, "db-2": 2}
    assert plan.pacing is not None
    assert [str(w) for w in plan.pacing.workloads] == ["StatefulSet default/db"]


def test_a_statefulset_pod_still_terminating_counts_as_unavailable() -> None:
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2")]
    objs += [pod_obj("db-0", "n2", owner_kind="StatefulSet", owner_name="db", conditions=READY, deleting=True)]
    objs += [pod_obj(f"db-{i}", "n1", owner_kind="StatefulSet", owner_name="db", conditions=READY) for i in (1, 2)]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert waves(plan) == {"db-1": 1, "db-2": 2}


# -- somewhere to go -------------------------------------------------------------------------------

def test_a_pod_with_nowhere_to_go_is_kept_and_the_report_says_why() -> None:
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2", cpu="1"),
            pod_obj("hog", "n2", cpu="900m", owner_name="db"), web("web-7d9f8-0", "n1", cpu="500m")]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.evictions == ()
    (refusal,) = plan.refusals
    assert refusal.pod.name == "web-7d9f8-0" and refusal.strategy == "RemovePodsViolatingNodeTaints"
    assert refusal.reason.startswith("nowhere to go") and "node n2 has insufficient cpu" in refusal.reason
    # upstream parity: without the safety defaults it is evicted (nodeFit is off by default)
    assert [e.pod.name for e in plan_run(taints_policy(), snapshot(objs), now=NOW).evictions] == ["web-7d9f8-0"]


def test_pods_this_run_moves_use_up_the_room_they_will_land_in() -> None:
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2", cpu="1")]
    objs += [pod_obj(f"{app}-0", "n1", cpu="600m", owner_name=app, conditions=READY) for app in ("a", "b")]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert [e.pod.name for e in plan.evictions] == ["a-0"]
    assert plan.pacing is not None and plan.pacing.steps[0].destination == "n2"
    (refusal,) = plan.refusals
    assert refusal.pod.name == "b-0" and "once the pods this run moves there land" in refusal.reason


def test_other_nodes_taints_and_selectors_and_not_ready_nodes_are_no_destination() -> None:
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2", taints=[{"key": "gpu", "effect": "NoSchedule"}]),
            node_obj("n3", labels={"disk": "hdd"}), node_obj("n4", ready=False), node_obj("n5", unschedulable=True),
            web("web-7d9f8-0", "n1", node_selector={"disk": "ssd"})]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    (refusal,) = plan.refusals
    assert "n2" in refusal.reason and "n3" in refusal.reason and "n5" in refusal.reason
    assert "n4" not in refusal.reason  # not Ready: not even considered


def test_required_anti_affinity_against_pods_there_and_pods_this_run_moves_there() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"),
            web("web-7d9f8-9", "n3", affinity=anti)]
    objs += [web(f"web-7d9f8-{i}", "n1", affinity=anti) for i in range(2)]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety(5))
    # n3 already runs a web pod; n2 takes the first; the second has nowhere left
    assert [e.pod.name for e in plan.evictions] == ["web-7d9f8-0"]
    (refusal,) = plan.refusals
    assert "anti-affinity" in refusal.reason and "n2" in refusal.reason and "n3" in refusal.reason


ZONE = "topology.kubernetes.io/zone"


def anti_to(app: str, key: str, namespaces: list[str] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if namespaces is not None:
        term["namespaces"] = namespaces
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_required_anti_affinity_on_a_zone_counts_every_node_of_the_zone() -> None:
    """NodeFit looks at the candidate node only; the scheduler at the whole zone. web-0 must not share a
    zone with app=db, and db runs on n3, in zone b with n2: n2 is no destination."""
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n2", labels={ZONE: "b"}),
            node_obj("n3", labels={ZONE: "b"}), pod_obj("db-0", "n3", owner_name="db-5c4d3", labels={"app": "db"}),
            web("web-7d9f8-0", "n1", affinity=anti_to("db", ZONE))]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.evictions == ()
    (refusal,) = plan.refusals
    assert "nowhere to go" in refusal.reason and "db-0 on node n3, in the same topology.kubernetes.io/zone as node n2" \
        in refusal.reason
    # a node in a zone of its own takes it
    objs.append(node_obj("n4", labels={ZONE: "c"}))
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert [e.pod.name for e in plan.evictions] == ["web-7d9f8-0"]
    assert plan.pacing is not None and plan.pacing.steps[0].destination == "n4"
    # another namespace's db does not count (the term names none: the pod's own)
    objs[3] = pod_obj("db-0", "n3", namespace="other", owner_name="db-5c4d3", labels={"app": "db"})
    objs.pop()
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert [e.pod.name for e in plan.evictions] == ["web-7d9f8-0"]


def test_the_anti_affinity_of_the_pods_already_there_keeps_a_pod_out() -> None:
    """The scheduler checks the existing pods' required terms against the incoming pod too: db pods on
    n2 and n3 keep every app=web pod off their node."""
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"),
            pod_obj("db-0", "n2", owner_name="db-5c4d3", labels={"app": "db"},
                    affinity=anti_to("web", "kubernetes.io/hostname")),
            pod_obj("db-1", "n3", owner_name="db-5c4d3", labels={"app": "db"},
                    affinity=anti_to("web", "kubernetes.io/hostname")),
            web("web-7d9f8-0", "n1")]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    (refusal,) = plan.refusals
    assert plan.evictions == () and "db-0 on node n2 has required anti-affinity" in refusal.reason
    assert "db-1 on node n3" in refusal.reason
    # a term naming other namespaces only does not keep it out
    for i, node in ((3, "n2"), (4, "n3")):
        objs[i] = pod_obj(f"db-{i - 3}", node, owner_name="db-5c4d3", labels={"app": "db"},
                          affinity=anti_to("web", "kubernetes.io/hostname", ["elsewhere"]))
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert [e.pod.name for e in plan.evictions] == ["web-7d9f8-0"]


def test_a_pod_this_run_evicts_no_longer_keeps_others_out() -> None:
    """Plan-aware: db-0 is on the tainted node too and goes first (it tolerates nothing either), so
    its anti-affinity no longer keeps web-0 out of n2... and web-0's own term no longer sees it."""
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n2", labels={ZONE: "a"}),
            node_obj("n3", labels={ZONE: "b"}),
            pod_obj("db-0", "n1", owner_name="db-5c4d3", labels={"app": "db"}, affinity=anti_to("web", ZONE)),
            web("web-7d9f8-0", "n1")]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.pacing is not None
    assert {e.pod.name: s.destination for e, s in zip(plan.evictions, plan.pacing.steps, strict=True)} == {
        "db-0": "n3", "web-7d9f8-0": "n2"}


def test_two_pods_this_run_moves_never_land_in_one_zone_against_their_anti_affinity() -> None:
    """db-0 and web-0 leave two tainted nodes in one run; web-0 must not share a zone with app=db. Zone
    b has the most free CPU and two nodes: whichever pod is planned first takes it, and the other
    must then go to zone c, not to zone b's other node, though that one has more room."""
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n5", taints=[TAINT], labels={ZONE: "d"}),
            node_obj("n2", cpu="16", labels={ZONE: "b"}), node_obj("n3", cpu="16", labels={ZONE: "b"}),
            node_obj("n4", cpu="8", labels={ZONE: "c"}),
            pod_obj("db-0", "n5", owner_name="db-5c4d3", labels={"app": "db"}),
            web("web-7d9f8-0", "n1", affinity=anti_to("db", ZONE))]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.pacing is not None
    landed = {e.pod.name: s.destination for e, s in zip(plan.evictions, plan.pacing.steps, strict=True)}
    zone = {"n2": "b", "n3": "b", "n4": "c"}
    assert len(landed) == 2 and zone[landed["db-0"]] != zone[landed["web-7d9f8-0"]], landed
    # the same the other way round: db-0's own term against app=web
    objs[5] = pod_obj("db-0", "n5", owner_name="db-5c4d3", labels={"app": "db"}, affinity=anti_to("web", ZONE))
    objs[6] = web("web-7d9f8-0", "n1")
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.pacing is not None
    landed = {e.pod.name: s.destination for e, s in zip(plan.evictions, plan.pacing.steps, strict=True)}
    assert len(landed) == 2 and zone[landed["db-0"]] != zone[landed["web-7d9f8-0"]], landed


def affine_to(app: str, key: str) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


def test_required_pod_affinity_needs_a_pod_to_run_with_in_the_destinations_domain() -> None:
    """web-0 must share a zone with app=cache. The only cache pod runs in zone b (n3); n2 (zone c) has
    the most room, but the scheduler would leave web-0 Pending there: n3's zone is the destination."""
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n2", cpu="64", labels={ZONE: "c"}),
            node_obj("n3", labels={ZONE: "b"}),
            pod_obj("cache-0", "n3", owner_name="cache-5c4d3", labels={"app": "cache"}),
            web("web-7d9f8-0", "n1", affinity=affine_to("cache", ZONE))]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.pacing is not None and [s.destination for s in plan.pacing.steps] == ["n3"]
    # no cache pod in any zone with room: nowhere to go, and the pod stays
    objs[2] = node_obj("n3", labels={ZONE: "b"}, pods=1)
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.evictions == ()
    (refusal,) = plan.refusals
    assert "required pod affinity (topology.kubernetes.io/zone) finds no pod to run with" in refusal.reason
    # a node without the topology key never takes it (the scheduler's rule)
    objs[1] = node_obj("n2", cpu="64")
    objs[2] = node_obj("n3", labels={ZONE: "b"})
    objs[3] = pod_obj("cache-0", "n2", owner_name="cache-5c4d3", labels={"app": "cache"})
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.evictions == () and "node n2 has no topology.kubernetes.io/zone label" in plan.refusals[0].reason


def test_the_first_pod_of_a_group_with_affinity_to_itself_may_go_anywhere() -> None:
    """The scheduler's special case: no pod anywhere matches the term and the pod matches it itself."""
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n2", labels={ZONE: "c"}),
            web("web-7d9f8-0", "n1", affinity=affine_to("web", ZONE))]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.pacing is not None and [s.destination for s in plan.pacing.steps] == ["n2"]
    # not the first when another pod of the group still runs: web-1, on the tainted n1, pulls the
    # replacement into zone a, where the taint keeps it Pending. Both stay
    objs.append(web("web-7d9f8-1", "n1", affinity=affine_to("web", ZONE)))
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety(max_unavailable="100%"))
    assert plan.evictions == () and len(plan.refusals) == 2
    assert all("finds no pod to run with" in r.reason for r in plan.refusals)


def keyed_term(**extra: Any) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE, **extra}]}}


def keyed_cluster(affinity: dict[str, Any], in_zone_b: dict[str, Any]) -> list[dict[str, Any]]:
    """Zone b (n3) has room and a cache pod the term may or may not select; zone c (n4) has the pod
    it selects, but no room: the answer is n3 or nowhere."""
    return [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n3", labels={ZONE: "b"}, cpu="64"),
            node_obj("n4", labels={ZONE: "c"}, pods=1), in_zone_b,
            pod_obj("cache-t1", "n4", owner_name="cache-t1-5c4d3", labels={"app": "cache", "tenant": "t1"}),
            web("web-7d9f8-0", "n1", labels={"tenant": "t1"}, affinity=affinity)]


def cache(name: str, node: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return pod_obj(name, node, namespace=namespace, owner_name=f"{name}-5c4d3", labels={"app": "cache", **labels})


@pytest.mark.parametrize("extra,in_zone_b,goes", [
    ({"matchLabelKeys": ["tenant"]}, cache("cache-t2", "n3", tenant="t2"), False),  # app=cache AND tenant=t1
    ({"matchLabelKeys": ["tenant"]}, cache("cache-t1b", "n3", tenant="t1"), True),
    ({"mismatchLabelKeys": ["tenant"]}, cache("cache-t1b", "n3", tenant="t1"), False),  # tenant notin (t1)
    ({"mismatchLabelKeys": ["tenant"]}, cache("cache-t2", "n3", tenant="t2"), True),
    ({"namespaceSelector": {"matchLabels": {"team": "cache"}}}, cache("cache-d", "n3"), False),  # not 'default'
    ({"namespaceSelector": {"matchLabels": {"team": "cache"}}}, cache("cache-c", "n3", "cache"), True),
    ({"namespaceSelector": {"matchLabels": {"team": "cache"}}}, cache("cache-o", "n3", "unknown-ns"), False),
    ({"namespaceSelector": {}}, cache("cache-o", "n3", "unknown-ns"), True),  # every namespace
], ids=["matchLabelKeys-other", "matchLabelKeys-same", "mismatchLabelKeys-same", "mismatchLabelKeys-other",
        "namespaceSelector-not", "namespaceSelector-yes", "namespaceSelector-unknown-labels", "namespaceSelector-all"])
def test_required_pod_affinity_reads_the_whole_term_as_the_scheduler_does(extra: dict[str, Any],
                                                                         in_zone_b: dict[str, Any], goes: bool) -> None:
    objs = [*keyed_cluster(keyed_term(**extra), in_zone_b),
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cache", "labels": {"team": "cache"}}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {}}}]
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    if goes:
        assert plan.pacing is not None and [s.destination for s in plan.pacing.steps] == ["n3"]
    else:
        assert plan.evictions == () and "finds no pod to run with" in plan.refusals[0].reason


@pytest.mark.parametrize("key", [ZONE, "kubernetes.io/hostname"])
def test_anti_affinity_with_a_namespace_selector_counts_every_namespace_it_selects(key: str) -> None:
    """namespaceSelector: {} is every namespace: the cache pod in namespace 'cache' keeps web out of
    its zone (or its node), which NodeFit, reading namespaces only, does not see."""
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": key, "namespaceSelector": {}}]}}
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n3", labels={ZONE: "b"}, cpu="64"),
            node_obj("n5", labels={ZONE: "b"}, cpu="64"),
            cache("cache-0", "n5" if key == ZONE else "n3", "cache"), web("web-7d9f8-0", "n1", affinity=anti)]
    if key != ZONE:
        del objs[2]  # n3 is the only candidate, and the cache pod is on it
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert plan.evictions == () and "cache/cache-0" in plan.refusals[0].reason


def test_parity_without_the_safety_defaults_keeps_upstreams_node_fit() -> None:
    """The zone and reverse checks are the safety path's: a plain run (safety off) plans exactly as
    upstream, whose NodeFit does not have them."""
    objs = [node_obj("n1", taints=[TAINT], labels={ZONE: "a"}), node_obj("n2", labels={ZONE: "b"}),
            node_obj("n3", labels={ZONE: "b"}), pod_obj("db-0", "n3", owner_name="db-5c4d3", labels={"app": "db"}),
            web("web-7d9f8-0", "n1", affinity=anti_to("db", ZONE))]
    plan = plan_run(taints_policy(nodeFit=True), snapshot(objs), now=NOW, safety=SafetySettings().resolve(Path.PARITY))
    assert [e.pod.name for e in plan.evictions] == ["web-7d9f8-0"]


# -- PodDisruptionBudgets ------------------------------------------------------------------------

def test_a_pdb_stricter_than_the_allowance_still_wins() -> None:
    objs = tainted_cluster(3, annotations={MAX_UNAVAILABLE_ANNOTATION: "3"})
    objs.append(pdb_obj("web", {"app": "web"}, disruptions_allowed=1))
    plan = plan_run(taints_policy(), snapshot(objs), now=NOW, safety=safety())
    assert [e.pod.name for e in plan.evictions] == ["web-7d9f8-0"]
    assert len(plan.refusals) == 2 and all("PodDisruptionBudget default/web" in r.reason for r in plan.refusals)


def test_evictions_held_for_a_later_wave_are_marked_held_at_the_gate() -> None:
    # the reactor's gate spends tokens: only what this run really sends may spend them, so the gate
    # learns which evictions pacing holds (it still checks their cool-downs)
    asked: list[tuple[str, str, bool]] = []

    class Recording:
        def check(self, p: Any, strategy: str, held: bool) -> None:
            asked.append((p.name, strategy, held))

        def passed(self, p: Any, strategy: str, held: bool) -> None:
            pass

    gate = Recording()
    plan = plan_run(taints_policy(), snapshot(tainted_cluster()), now=NOW, safety=safety(), gate=gate)
    assert waves(plan) == {"web-7d9f8-0": 0, "web-7d9f8-1": 1, "web-7d9f8-2": 2}
    taints = "RemovePodsViolatingNodeTaints"
    assert asked == [("web-7d9f8-0", taints, False), ("web-7d9f8-1", taints, True), ("web-7d9f8-2", taints, True)]
    asked.clear()
    plan_run(taints_policy(), snapshot(tainted_cluster()), now=NOW, gate=gate)  # parity: every eviction
    assert [held for _, _, held in asked] == [False, False, False]

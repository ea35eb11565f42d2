"""DefaultEvictor (upstream v0.36): one table row per filter step and argument.

Each row builds real API objects, parses them through the model, and asks the evictor about one
pod (named "p"); the expected value is whether Filter (or PreEvictionFilter) lets it through. A
few rows also check the reason ``why_not`` gives, since operators read it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.model.records import Pod
from kdesched.model.selectors import LabelSelector, parse_selector
from kdesched.policy.types import (
    DEFAULT_PROTECTIONS,
    DefaultEvictorArgs,
    PriorityThreshold,
)
from kdesched.strategies.framework import ClusterState, PlannedEviction

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot

EVICT = {"descheduler.alpha.kubernetes.io/evict": ""}
PREFER_NO = {"descheduler.alpha.kubernetes.io/prefer-no-eviction": ""}
MIRROR = {"kubernetes.io/config.mirror": "abc"}
CRITICAL = 2_000_000_000


def protections(*, off: tuple[str, ...] = (), on: tuple[str, ...] = ()) -> frozenset[str]:
    return frozenset((DEFAULT_PROTECTIONS - set(off)) | set(on))


def pvc(name: str, storage_class: str | None, namespace: str = "default") -> dict[str, Any]:
    spec = {} if storage_class is None else {"storageClassName": storage_class}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def claim_volume(claim: str) -> list[dict[str, Any]]:
    return [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]


def two_owners(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "other-uid", "controller": False})
    return obj


def build(objects: list[dict[str, Any]], args: DefaultEvictorArgs,
          node_selector: str | None = None) -> tuple[DefaultEvictor, ClusterState]:
    sel = parse_selector(node_selector) if node_selector else None
    state = ClusterState(snapshot([node_obj("a"), node_obj("b"), *objects]), NOW, sel)
    return DefaultEvictor(args, state), state


def the_pod(state: ClusterState, name: str = "p") -> Pod:
    return next(p for p in state.snapshot.pods if p.name == name)


A = DefaultEvictorArgs  # short alias for the tables

# (id, evictor args, pod "p" + other objects, Filter result)
FILTER_CASES: list[tuple[str, DefaultEvictorArgs, list[dict[str, Any]], bool]] = [
    ("plain ReplicaSet pod", A(), [pod_obj("p", "a")], True),
    # (1) evict annotation: true, every other check skipped
    ("evict annotation: mirror pod", A(), [pod_obj("p", "a", annotations={**EVICT, **MIRROR})], True),
    ("evict annotation: static pod", A(),
     [pod_obj("p", "a", annotations={**EVICT, "kubernetes.io/config.source": "file"})], True),
    ("evict annotation: DaemonSet pod", A(), [pod_obj("p", "a", owner_kind="DaemonSet", annotations=EVICT)], True),
    ("evict annotation: system-critical pod", A(), [pod_obj("p", "a", priority=CRITICAL, annotations=EVICT)], True),
    ("evict annotation: terminating pod", A(), [pod_obj("p", "a", deleting=True, annotations=EVICT)], True),
    ("evict annotation: bare pod", A(), [pod_obj("p", "a", owner_kind=None, annotations=EVICT)], True),
    ("evict annotation: local storage", A(),
     [pod_obj("p", "a", volumes=[{"name": "t", "emptyDir": {}}], annotations=EVICT)], True),
    ("evict annotation beats Mandatory prefer-no-eviction", A(no_eviction_policy="Mandatory"),
     [pod_obj("p", "a", annotations={**EVICT, **PREFER_NO})], True),
    ("evict annotation: labelSelector mismatch", A(label_selector=LabelSelector((("x", "y"),))),
     [pod_obj("p", "a", annotations=EVICT)], True),
    # (2) noEvictionPolicy
    ("Mandatory + prefer-no-eviction", A(no_eviction_policy="Mandatory"),
     [pod_obj("p", "a", annotations=PREFER_NO)], False),
    ("Preferred + prefer-no-eviction", A(no_eviction_policy="Preferred"),
     [pod_obj("p", "a", annotations=PREFER_NO)], True),
    ("default policy + prefer-no-eviction", A(), [pod_obj("p", "a", annotations=PREFER_NO)], True),
    ("Mandatory without the annotation", A(no_eviction_policy="Mandatory"), [pod_obj("p", "a")], True),
    # (3) mirror, static, terminating
    ("mirror pod", A(), [pod_obj("p", "a", annotations=MIRROR)], False),
    ("static pod (config.source=file)", A(),
     [pod_obj("p", "a", annotations={"kubernetes.io/config.source": "file"})], False),
    ("config.source=api is not static", A(),
     [pod_obj("p", "a", annotations={"kubernetes.io/config.source": "api"})], True),
    ("terminating pod", A(), [pod_obj("p", "a", deleting=True)], False),
    ("mirror pod even with every protection off", A(protections=frozenset()),
     [pod_obj("p", "a", annotations=MIRROR)], False),
    # (4) SystemCriticalPods and priorityThreshold
    ("priority 2e9 protected", A(), [pod_obj("p", "a", priority=CRITICAL)], False),
    ("priority above 2e9 protected", A(), [pod_obj("p", "a", priority=CRITICAL + 1000)], False),
    ("priority just below 2e9 evictable", A(), [pod_obj("p", "a", priority=CRITICAL - 1)], True),
    ("nil priority evictable", A(), [pod_obj("p", "a")], True),
    ("threshold 1000: priority 1000 protected", A(priority_threshold=PriorityThreshold(value=1000)),
     [pod_obj("p", "a", priority=1000)], False),
    ("threshold 1000: priority 999 evictable", A(priority_threshold=PriorityThreshold(value=1000)),
     [pod_obj("p", "a", priority=999)], True),
    ("threshold 1000: nil priority evictable", A(priority_threshold=PriorityThreshold(value=1000)),
     [pod_obj("p", "a")], True),
    ("threshold ignored while SystemCriticalPods is off",
     A(priority_threshold=PriorityThreshold(value=1000), protections=protections(off=("SystemCriticalPods",))),
     [pod_obj("p", "a", priority=5000)], True),
    ("2e9 evictable while SystemCriticalPods is off", A(protections=protections(off=("SystemCriticalPods",))),
     [pod_obj("p", "a", priority=CRITICAL)], True),
    # FailedBarePods
    ("FailedBarePods on: bare Running pod", A(), [pod_obj("p", "a", owner_kind=None)], False),
    ("FailedBarePods on: bare Failed pod", A(), [pod_obj("p", "a", owner_kind=None, phase="Failed")], False),
    ("FailedBarePods off: bare Running pod", A(protections=protections(off=("FailedBarePods",))),
     [pod_obj("p", "a", owner_kind=None)], False),
    ("FailedBarePods off: bare Failed pod", A(protections=protections(off=("FailedBarePods",))),
     [pod_obj("p", "a", owner_kind=None, phase="Failed")], True),
    ("FailedBarePods off: owned Failed pod", A(protections=protections(off=("FailedBarePods",))),
     [pod_obj("p", "a", phase="Failed")], True),
    # PodsWithLocalStorage
    ("emptyDir protected", A(), [pod_obj("p", "a", volumes=[{"name": "t", "emptyDir": {}}])], False),
    ("hostPath protected", A(), [pod_obj("p", "a", volumes=[{"name": "h", "hostPath": {"path": "/x"}}])], False),
    ("configMap volume is not local storage", A(),
     [pod_obj("p", "a", volumes=[{"name": "c", "configMap": {"name": "cm"}}])], True),
    ("local storage evictable when disabled", A(protections=protections(off=("PodsWithLocalStorage",))),
     [pod_obj("p", "a", volumes=[{"name": "t", "emptyDir": {}}])], True),
    # DaemonSetPods
    ("DaemonSet pod protected", A(), [pod_obj("p", "a", owner_kind="DaemonSet")], False),
    ("DaemonSet pod evictable when disabled", A(protections=protections(off=("DaemonSetPods",))),
     [pod_obj("p", "a", owner_kind="DaemonSet")], True),
    # PodsWithPVC
    ("PVC pod evictable by default", A(), [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", "fast")], True),
    ("PodsWithPVC: any PVC protected", A(protections=protections(on=("PodsWithPVC",))),
     [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", "fast")], False),
    ("PodsWithPVC: pod without PVC evictable", A(protections=protections(on=("PodsWithPVC",))),
     [pod_obj("p", "a")], True),
    ("protected class: PVC of that class protected",
     A(protections=protections(on=("PodsWithPVC",)), protected_storage_classes=("fast",)),
     [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", "fast")], False),
    ("protected class: PVC of another class evictable",
     A(protections=protections(on=("PodsWithPVC",)), protected_storage_classes=("fast",)),
     [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", "slow")], True),
    ("protected class: missing PVC protected",
     A(protections=protections(on=("PodsWithPVC",)), protected_storage_classes=("fast",)),
     [pod_obj("p", "a", volumes=claim_volume("gone"))], False),
    ("protected class: class-less PVC protected",
     A(protections=protections(on=("PodsWithPVC",)), protected_storage_classes=("fast",)),
     [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", None)], False),
    ("protected class: PVC of the same name in another namespace does not count",
     A(protections=protections(on=("PodsWithPVC",)), protected_storage_classes=("fast",)),
     [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", "slow", namespace="other")], False),
    # PodsWithoutPDB
    ("PodsWithoutPDB: covered pod evictable", A(protections=protections(on=("PodsWithoutPDB",))),
     [pod_obj("p", "a", labels={"app": "web"}), pdb_obj("web", {"app": "web"})], True),
    ("PodsWithoutPDB: uncovered pod protected", A(protections=protections(on=("PodsWithoutPDB",))),
     [pod_obj("p", "a", labels={"app": "web"}), pdb_obj("db", {"app": "db"})], False),
    ("PodsWithoutPDB: PDB of another namespace does not cover", A(protections=protections(on=("PodsWithoutPDB",))),
     [pod_obj("p", "a", labels={"app": "web"}), pdb_obj("web", {"app": "web"}, namespace="other")], False),
    ("without the protection a PDB-less pod is evictable", A(), [pod_obj("p", "a")], True),
    # PodsWithResourceClaims
    ("PodsWithResourceClaims: pod with claims protected", A(protections=protections(on=("PodsWithResourceClaims",))),
     [pod_obj("p", "a", spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-0"}]})], False),
    ("PodsWithResourceClaims: pod without claims evictable",
     A(protections=protections(on=("PodsWithResourceClaims",))), [pod_obj("p", "a")], True),
    ("resource claims evictable without the protection", A(),
     [pod_obj("p", "a", spec_extra={"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-0"}]})], True),
    # (5) labelSelector
    ("labelSelector matches", A(label_selector=LabelSelector((("app", "web"),))),
     [pod_obj("p", "a", labels={"app": "web"})], True),
    ("labelSelector does not match", A(label_selector=LabelSelector((("app", "web"),))),
     [pod_obj("p", "a", labels={"app": "db"})], False),
    ("empty labelSelector matches everything", A(label_selector=LabelSelector()), [pod_obj("p", "a")], True),
    # minReplicas: counts pods of the owner on any node, in any phase
    ("minReplicas 3, owner has 3 pods (any node, any phase)", A(min_replicas=3),
     [pod_obj("p", "a"), pod_obj("q", "b"), pod_obj("r", "b", phase="Failed")], True),
    ("minReplicas 3, owner has 2 pods", A(min_replicas=3), [pod_obj("p", "a"), pod_obj("q", "b")], False),
    ("minReplicas counts only the same owner", A(min_replicas=2),
     [pod_obj("p", "a"), pod_obj("q", "b", owner_name="other")], False),
    ("minReplicas 1 never protects", A(min_replicas=1), [pod_obj("p", "a")], True),
    ("minReplicas: pod with 2 ownerRefs passes", A(min_replicas=3), [two_owners(pod_obj("p", "a"))], True),
    # minPodAge (from status.startTime)
    ("minPodAge: older pod evictable", A(min_pod_age_seconds=600), [pod_obj("p", "a", started=-601)], True),
    ("minPodAge: exactly that old evictable", A(min_pod_age_seconds=600), [pod_obj("p", "a", started=-600)], True),
    ("minPodAge: younger pod protected", A(min_pod_age_seconds=600), [pod_obj("p", "a", started=-599)], False),
    ("minPodAge: no startTime protected", A(min_pod_age_seconds=600), [pod_obj("p", "a", started=None)], False),
    ("minPodAge: creation time does not count", A(min_pod_age_seconds=600),
     [pod_obj("p", "a", created=-7200, started=-60)], False),
    ("no minPodAge: pod without startTime evictable", A(), [pod_obj("p", "a", started=None)], True),
]


@pytest.mark.parametrize("name,args,objects,expected", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filter(name: str, args: DefaultEvictorArgs, objects: list[dict[str, Any]], expected: bool) -> None:
    evictor, state = build(objects, args)
    pod = the_pod(state)
    assert evictor.filter(pod) is expected
    assert (evictor.why_not(pod) is None) is expected


@pytest.mark.parametrize("args,objects,reason", [
    (A(), [pod_obj("p", "a", priority=CRITICAL)], "system-critical pod (priority >= 2000000000)"),
    (A(priority_threshold=PriorityThreshold(value=1000)), [pod_obj("p", "a", priority=1000)],
     "pod priority 1000 is not below the threshold 1000"),
    (A(), [pod_obj("p", "a", owner_kind=None)], "pod has no owner (bare pod)"),
    (A(min_replicas=3), [pod_obj("p", "a")], "owner ReplicaSet/rs has 1 pod(s), fewer than minReplicas 3"),
    (A(protections=protections(on=("PodsWithPVC",)), protected_storage_classes=("fast",)),
     [pod_obj("p", "a", volumes=claim_volume("c")), pvc("c", "fast")],
     "pod's PVC c uses protected storage class fast"),
    (A(no_eviction_policy="Mandatory"), [pod_obj("p", "a", annotations=PREFER_NO)],
     "pod has the prefer-no-eviction annotation and noEvictionPolicy is Mandatory"),
], ids=["critical", "threshold", "bare", "minReplicas", "protected-class", "mandatory"])
def test_why_not_reasons(args: DefaultEvictorArgs, objects: list[dict[str, Any]], reason: str) -> None:
    evictor, state = build(objects, args)
    assert evictor.why_not(the_pod(state)) == reason


def test_min_replicas_is_plan_aware() -> None:
    """Deliberate difference from upstream: a pod already planned for eviction in this run no
    longer counts toward its owner's replicas, so minReplicas holds after the plan is carried out."""
    evictor, state = build([pod_obj("p", "a"), pod_obj("q", "b"), pod_obj("r", "b")], A(min_replicas=3))
    assert evictor.filter(the_pod(state, "p"))
    q = the_pod(state, "q")
    state.mark_planned(PlannedEviction(q, "b", "S", "prof", "test"))
    assert not evictor.filter(the_pod(state, "p"))
    assert "has 2 pod(s)" in (evictor.why_not(the_pod(state, "p")) or "")


def test_min_pod_age_uses_state_clock() -> None:
    from datetime import timedelta

    objects = [node_obj("a"), node_obj("b"), pod_obj("p", "a", started=-60)]
    args = A(min_pod_age_seconds=600)
    young = DefaultEvictor(args, ClusterState(snapshot(objects), NOW))
    later = DefaultEvictor(args, ClusterState(snapshot(objects), NOW + timedelta(minutes=10)))
    assert not young.filter(young.state.snapshot.pods[0])
    assert later.filter(later.state.snapshot.pods[0])


# --- PreEvictionFilter ------------------------------------------------------------------------

def fit_case(**pod_kw: Any) -> list[dict[str, Any]]:
    return [pod_obj("p", "a", **pod_kw)]


NODE_FIT = A(node_fit=True)
ANTI_AFFINITY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}

# (id, args, objects besides nodes a and b (b replaced when given), replace node b?, result)
PRE_CASES: list[tuple[str, DefaultEvictorArgs, list[dict[str, Any]], dict[str, Any] | None, bool]] = [
    ("nodeFit off: always passes", A(), fit_case(), node_obj("b", unschedulable=True), True),
    ("nodeFit: another node fits", NODE_FIT, fit_case(), None, True),
    ("nodeFit: other node unschedulable", NODE_FIT, fit_case(), node_obj("b", unschedulable=True), False),
    ("nodeFit: other node not Ready", NODE_FIT, fit_case(), node_obj("b", ready=False), False),
    ("nodeFit: nodeSelector does not match the other node", NODE_FIT, fit_case(node_selector={"disk": "ssd"}),
     None, False),
    ("nodeFit: nodeSelector matches the other node", NODE_FIT, fit_case(node_selector={"disk": "ssd"}),
     node_obj("b", labels={"disk": "ssd"}), True),
    ("nodeFit: untolerated NoSchedule taint", NODE_FIT, fit_case(),
     node_obj("b", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]), False),
    ("nodeFit: tolerated taint", NODE_FIT,
     fit_case(tolerations=[{"key": "k", "operator": "Exists"}]),
     node_obj("b", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]), True),
    ("nodeFit: insufficient cpu on the other node", NODE_FIT, fit_case(cpu="2"), node_obj("b", cpu="1"), False),
    ("nodeFit: no free pod slot", NODE_FIT, [pod_obj("p", "a"), pod_obj("q", "b", cpu=None)],
     node_obj("b", pods=1), False),
    ("nodeFit: own anti-affinity matches a pod there", NODE_FIT,
     [pod_obj("p", "a", affinity=ANTI_AFFINITY), pod_obj("db", "b", labels={"app": "db"}, owner_name="db")],
     None, False),
    ("nodeFit: evictor nodeSelector leaves no other node", A(node_fit=True, node_selector="pool=x"), fit_case(),
     node_obj("b", labels={"pool": "y"}), False),
    ("nodeFit: evictor nodeSelector keeps the other node", A(node_fit=True, node_selector="pool=x"), fit_case(),
     node_obj("b", labels={"pool": "x"}), True),
    # namespaceLabelSelector
    ("namespaceLabelSelector matches", A(namespace_label_selector=LabelSelector((("team", "a"),))),
     [pod_obj("p", "a", namespace="ns1"), namespace("ns1", team="a")], None, True),
    ("namespaceLabelSelector does not match", A(namespace_label_selector=LabelSelector((("team", "a"),))),
     [pod_obj("p", "a", namespace="ns1"), namespace("ns1", team="b")], None, False),
    ("namespaceLabelSelector: unknown namespace", A(namespace_label_selector=LabelSelector((("team", "a"),))),
     [pod_obj("p", "a", namespace="ns1")], None, False),
    ("nodeFit fails before namespaceLabelSelector is consulted",
     A(node_fit=True, namespace_label_selector=LabelSelector((("team", "a"),))),
     [pod_obj("p", "a", namespace="ns1"), namespace("ns1", team="a")], node_obj("b", unschedulable=True), False),
]


@pytest.mark.parametrize("name,args,objects,node_b,expected", PRE_CASES, ids=[c[0] for c in PRE_CASES])
def test_pre_eviction_filter(name: str, args: DefaultEvictorArgs, objects: list[dict[str, Any]],
                             node_b: dict[str, Any] | None, expected: bool) -> None:
    state = ClusterState(snapshot([node_obj("a"), node_b or node_obj("b"), *objects]), NOW)
    evictor = DefaultEvictor(args, state)
    assert evictor.pre_eviction_filter(the_pod(state)) is expected


def test_evict_annotation_does_not_bypass_pre_eviction_filter() -> None:
    state = ClusterState(snapshot([node_obj("a"), node_obj("b", unschedulable=True),
                                   pod_obj("p", "a", annotations=EVICT, owner_kind=None)]), NOW)
    evictor = DefaultEvictor(NODE_FIT, state)
    pod = the_pod(state)
    assert evictor.filter(pod)
    assert not evictor.pre_eviction_filter(pod)
    assert evictor.why_not_pre_eviction(pod) == "pod does not fit any other node (nodeFit)"


def test_node_fit_destinations_ignore_the_policy_node_selector() -> None:
    """Upstream's nodeFit lists every Ready node matching the *evictor's* nodeSelector; the
    policy's top-level nodeSelector only limits the nodes the strategies process."""
    evictor, state = build([pod_obj("p", "a")], NODE_FIT, node_selector="kubernetes.io/hostname=a")
    assert [n.name for n in state.nodes] == ["a"]
    assert evictor.pre_eviction_filter(the_pod(state))


def test_node_fit_is_plan_aware() -> None:
    # b is full until the pod there is planned for eviction
    state = ClusterState(snapshot([node_obj("a"), node_obj("b", cpu="1"), pod_obj("p", "a", cpu="800m"),
                                   pod_obj("big", "b", cpu="900m", owner_name="big")]), NOW)
    evictor = DefaultEvictor(NODE_FIT, state)
    assert not evictor.pre_eviction_filter(the_pod(state))
    big = the_pod(state, "big")
    state.mark_planned(PlannedEviction(big, "b", "S", "prof", "test"))
    assert evictor.pre_eviction_filter(the_pod(state))

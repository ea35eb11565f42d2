"""Records from raw API JSON: effective requests as PodRequests computes them, QoS as
ComputePodQOS does, and a ModelError naming the field for every malformed object."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from kdesched.model.errors import ModelError
from kdesched.model.records import (
    Namespace,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
    Taint,
    Toleration,
)

from tests.builders import node_obj, pdb_obj, pod_obj

GI = 2**30


def c(requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "image": "img", "resources": res, **extra}


def sidecar(requests: dict[str, Any]) -> dict[str, Any]:
    return c(requests, restartPolicy="Always")


def raw_pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": containers, **({"initContainers": init} if init else {}), **spec}}


@pytest.mark.parametrize(
    ("containers", "init", "spec", "expected"),
    [
        ([], None, {}, {}),
        ([c({"cpu": "100m", "memory": "1Gi"}), c({"cpu": "200m"})], None, {}, {"cpu": 300, "memory": GI}),
        # init containers: the max of the sum and each init step
        ([c({"cpu": "100m"})], [c({"cpu": "500m"}), c({"cpu": "200m"})], {}, {"cpu": 500}),
        ([c({"cpu": "600m"})], [c({"cpu": "500m", "memory": "2Gi"})], {}, {"cpu": 600, "memory": 2 * GI}),
        # sidecars run beside the containers and beside every later init step
        ([c({"cpu": "100m"})], [sidecar({"cpu": "200m"})], {}, {"cpu": 300}),
        ([c({"cpu": "100m"})], [sidecar({"cpu": "200m"}), c({"cpu": "1"})], {}, {"cpu": 1200}),
        ([c({"cpu": "100m"})], [c({"cpu": "1"}), sidecar({"cpu": "200m"})], {}, {"cpu": 1000}),
        ([c({"cpu": "2"})], [sidecar({"cpu": "200m"}), c({"cpu": "1"})], {}, {"cpu": 2200}),
        ([c({"cpu": "100m"})], [sidecar({"cpu": "1"}), sidecar({"cpu": "1"}), c({"cpu": "500m"})], {},
         {"cpu": 2500}),
        # overhead is added after the max
        ([c({"cpu": "100m"})], [c({"cpu": "1"})], {"overhead": {"cpu": "250m", "memory": "64Mi"}},
         {"cpu": 1250, "memory": 64 * 2**20}),
        # pod-level requests override cpu and memory only; overhead still added
        ([c({"cpu": "100m", "memory": "1Gi", "nvidia.com/gpu": "1"})], None,
         {"resources": {"requests": {"cpu": "2", "memory": "3Gi", "hugepages-2Mi": "2Mi"}},
          "overhead": {"cpu": "100m"}},
         {"cpu": 2100, "memory": 3 * GI, "nvidia.com/gpu": 1}),
        # a pod-level limit without a pod-level request: the containers' request, else the limit
        ([c({"cpu": "100m"})], None, {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
         {"cpu": 100, "memory": GI}),
        # requests default to limits (SetDefaults_Pod), per resource
        ([c(None, {"cpu": "1", "memory": "1Gi"})], None, {}, {"cpu": 1000, "memory": GI}),
        ([c({"cpu": "100m"}, {"cpu": "1", "memory": "1Gi"})], None, {}, {"cpu": 100, "memory": GI}),
        ([c()], [c(None, {"cpu": "3"})], {}, {"cpu": 3000}),
        # zero requests are dropped
        ([c({"cpu": "0", "memory": "0"})], None, {}, {}),
        ([c({"cpu": "1n"})], None, {}, {"cpu": 1}),
    ],
)
def test_effective_requests_follow_pod_requests(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None,
                                                spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert dict(Pod.from_api(raw_pod(containers, init, **spec)).requests) == expected


def test_requested_resource_names_include_zero_and_init_requests() -> None:
    pod = Pod.from_api(raw_pod([c({"cpu": "0"})], [c({"memory": "1Gi"})], resources={"requests": {"cpu": "1"}}))
    assert pod.requested_resource_names == {"cpu", "memory"}


@pytest.mark.parametrize(
    ("containers", "init", "spec", "qos"),
    [
        ([c()], None, {}, "BestEffort"),
        ([c({"cpu": "0"}, {"memory": "0"})], None, {}, "BestEffort"),
        ([c({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})], None, {}, "BestEffort"),
        ([c({"cpu": "100m"})], None, {}, "Burstable"),
        ([c(None, {"memory": "1Gi"})], None, {}, "Burstable"),
        ([c({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], None, {}, "Guaranteed"),
        ([c(None, {"cpu": "1", "memory": "1Gi"})], None, {}, "Guaranteed"),  # requests default to limits
        ([c({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], None, {}, "Burstable"),
        ([c({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}), c()], None, {}, "Burstable"),
        ([c(None, {"cpu": "1", "memory": "1Gi"})], [c()], {}, "Burstable"),  # init containers count
        ([c(None, {"cpu": "1", "memory": "1Gi"})], [c(None, {"cpu": "2", "memory": "1Gi"})], {}, "Guaranteed"),
        ([c()], [c({"memory": "1Gi"})], {}, "Burstable"),
        ([c(None, {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"})], None, {}, "Guaranteed"),
        # pod-level resources decide when set
        ([c()], None, {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, "Guaranteed"),
        ([c({"cpu": "100m"})], None, {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, "Burstable"),
        ([c(None, {"cpu": "1", "memory": "1Gi"})], None, {"resources": {"requests": {"cpu": "1"}}}, "Burstable"),
    ],
)
def test_qos_follows_compute_pod_qos(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None,
                                     spec: dict[str, Any], qos: str) -> None:
    assert Pod.from_api(raw_pod(containers, init, **spec)).qos_class == qos


def test_status_qos_class_is_preferred() -> None:
    raw = raw_pod([c()])
    raw["status"] = {"qosClass": "Guaranteed"}
    assert Pod.from_api(raw).qos_class == "Guaranteed"


def test_pod_fields() -> None:
    raw = pod_obj("web-1", node="n1", priority=100, annotations={
        "kubectl.kubernetes.io/last-applied-configuration": "{}", "descheduler.alpha.kubernetes.io/evict": "true",
        "kubernetes.io/config.mirror": "x", "kdesched.dev/note": "y", "other": "z"},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}}, {"name": "tmp", "emptyDir": {}},
                 {"name": "h", "hostPath": {"path": "/x"}}, {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}],
        container_statuses=[{"name": "c", "restartCount": 3, "ready": True,
                             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                             "lastState": {"terminated": {"reason": "Error", "exitCode": 137}}}],
        init_container_statuses=[{"name": "i", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}],
        conditions=[{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                     "lastTransitionTime": "2026-11-01T11:00:00Z"}],
        status_reason="Evicted", deleting=True,
        spec_extra={"priorityClassName": "high", "schedulerName": "custom", "resourceClaims": [{"name": "gpu"}]})
    pod = Pod.from_api(raw)
    assert (pod.key, pod.node_name, pod.phase, pod.priority, pod.priority_class_name) == (
        "default/web-1", "n1", "Running", 100, "high")
    assert dict(pod.annotations) == {"descheduler.alpha.kubernetes.io/evict": "true",
                                     "kubernetes.io/config.mirror": "x", "kdesched.dev/note": "y"}
    assert [(o.kind, o.name, o.uid, o.controller) for o in pod.owner_refs] == [
        ("ReplicaSet", "rs", "ReplicaSet-rs", True)]
    assert [(v.name, v.kind, v.claim_name) for v in pod.volumes] == [
        ("data", "persistentVolumeClaim", "data-0"), ("tmp", "emptyDir", ""), ("h", "hostPath", ""),
        ("e", "ephemeral", "")]
    (cs,) = pod.container_statuses
    assert (cs.name, cs.restart_count, cs.waiting_reason, cs.terminated_reason, cs.terminated_exit_code,
            cs.last_terminated_reason, cs.last_terminated_exit_code, cs.ready) == (
        "c", 3, "CrashLoopBackOff", "", None, "Error", 137, True)
    (ics,) = pod.init_container_statuses
    assert (ics.terminated_reason, ics.terminated_exit_code, ics.ready) == ("Completed", 0, False)
    (cond,) = pod.conditions
    assert (cond.type, cond.status, cond.reason) == ("Ready", "False", "ContainersNotReady")
    assert cond.last_transition_time == datetime(2026, 11, 1, 11, tzinfo=UTC)
    assert pod.status_reason == "Evicted" and pod.terminating and not pod.terminal
    assert pod.has_resource_claims and pod.scheduler_name == "custom" and pod.images == ("nginx:1.27",)
    assert pod.start_time is not None and pod.start_time.tzinfo is not None


def test_pod_defaults() -> None:
    pod = Pod.from_api({"metadata": {"name": "p"}})
    assert (pod.namespace, pod.phase, pod.priority, pod.qos_class, pod.scheduler_name) == (
        "default", "Pending", None, "BestEffort", "default-scheduler")
    assert pod.affinity is None and pod.owner_refs == () and dict(pod.requests) == {}
    assert pod.creation_time is None and not pod.terminating
    assert Pod.from_api({"metadata": {"name": "p"}, "status": {"phase": "Failed"}}).terminal


@pytest.mark.parametrize(
    ("time", "expected"),
    [
        ("2024-01-02T03:04:05Z", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T05:04:05+02:00", datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05.123456Z", datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        (datetime(2024, 1, 2, 3, 4, 5), datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),  # YAML timestamps
        ("", None),
    ],
)
def test_times(time: Any, expected: datetime | None) -> None:
    raw = {"metadata": {"name": "p", "creationTimestamp": time}}
    assert Pod.from_api(raw).creation_time == expected


def set_path(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    parts = path.replace("[", ".").replace("]", "").split(".")
    cur: Any = obj
    for part in parts[:-1]:
        cur = cur[int(part)] if part.isdigit() else cur.setdefault(part, {})
    last = parts[-1]
    if last.isdigit():
        cur[int(last)] = value
    else:
        cur[last] = value
    return obj


BASE = raw_pod([c({"cpu": "1"}), c({"cpu": "1"})], [c({"cpu": "1"})])
BASE["status"] = {"containerStatuses": [{"name": "c"}]}


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("metadata", "x", "metadata"),
        ("metadata.name", None, "metadata.name"),
        ("metadata.name", 5, "metadata.name"),
        ("metadata.labels", ["a"], "metadata.labels"),
        ("metadata.annotations", "a", "metadata.annotations"),
        ("metadata.ownerReferences", {}, "metadata.ownerReferences"),
        ("metadata.ownerReferences", ["x"], "metadata.ownerReferences[0]"),
        ("metadata.creationTimestamp", "yesterday", "metadata.creationTimestamp"),
        ("metadata.creationTimestamp", 5, "metadata.creationTimestamp"),
        ("spec", [], "spec"),
        ("spec.containers", {}, "spec.containers"),
        ("spec.containers[1]", "c", "spec.containers[1]"),
        ("spec.containers[1].resources", [], "spec.containers[1].resources"),
        ("spec.containers[1].resources.requests", "1", "spec.containers[1].resources.requests"),
        ("spec.containers[1].resources.requests.cpu", "lots", "spec.containers[1].resources.requests.cpu"),
        ("spec.containers[1].resources.limits.memory", "1Gb", "spec.containers[1].resources.limits.memory"),
        ("spec.initContainers[0].resources.requests.cpu", True, "spec.initContainers[0].resources.requests.cpu"),
        ("spec.overhead.cpu", "x", "spec.overhead.cpu"),
        ("spec.resources.requests.memory", "x", "spec.resources.requests.memory"),
        ("spec.resources.limits.cpu", "x", "spec.resources.limits.cpu"),
        ("spec.priority", "100", "spec.priority"),
        ("spec.priority", True, "spec.priority"),
        ("spec.priority", 1.5, "spec.priority"),
        ("spec.tolerations", [{"operator": "Like"}], "spec.tolerations[0].operator"),
        ("spec.nodeSelector", ["a"], "spec.nodeSelector"),
        ("spec.volumes", [{"name": "v", "persistentVolumeClaim": "x"}], "spec.volumes[0].persistentVolumeClaim"),
        ("spec.volumes", ["x"], "spec.volumes[0]"),
        ("spec.topologySpreadConstraints", [{"maxSkew": "1"}], "spec.topologySpreadConstraints[0].maxSkew"),
        ("spec.topologySpreadConstraints", [{"minDomains": "2"}], "spec.topologySpreadConstraints[0].minDomains"),
        ("spec.topologySpreadConstraints", [{"labelSelector": {"matchLabels": 1}}],
         "spec.topologySpreadConstraints[0].labelSelector.matchLabels"),
        ("spec.affinity", "x", "spec.affinity"),
        ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
         [{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["a"]}]}],
         ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
         ".matchExpressions[0].values")),
        ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
         [{"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["a"]}]}],
         ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
         ".matchFields[0].key")),
        ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
         [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}],
         ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
         ".matchFields[0].values")),
        ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
         [{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}],
         ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
         ".matchFields[0].operator")),
        ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
         [{"weight": "heavy", "preference": {}}],
         "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
        ("spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution",
         [{"weight": 1.5, "podAffinityTerm": {}}],
         "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"),
        ("spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
         [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}],
         ("spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
         ".matchExpressions[0].operator")),
        ("spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
         [{"namespaces": "a"}], "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces"),
        ("status", 1, "status"),
        ("status.conditions", [{"type": "Ready", "lastTransitionTime": "never"}], "status.conditions[0].lastTransitionTime"),
        ("status.startTime", "noon", "status.startTime"),
        ("status.containerStatuses[0].restartCount", "3", "status.containerStatuses[0].restartCount"),
        ("status.containerStatuses[0].state", "x", "status.containerStatuses[0].state"),
        ("status.containerStatuses[0].state.terminated", {"exitCode": "1"},
         "status.containerStatuses[0].state.terminated.exitCode"),
        ("status.containerStatuses[0].lastState", {"terminated": {"exitCode": 1.0}},
         "status.containerStatuses[0].lastState.terminated.exitCode"),
        ("status.initContainerStatuses", [{"restartCount": None, "state": {"waiting": 5}}],
         "status.initContainerStatuses[0].state.waiting"),
    ],
)
def test_malformed_pod_names_the_field(path: str, value: Any, where: str) -> None:
    with pytest.raises(ModelError) as info:
        Pod.from_api(set_path(BASE, path, value))
    assert info.value.where == where


@pytest.mark.parametrize("raw", [None, [], "pod", 5])
def test_a_pod_must_be_an_object(raw: Any) -> None:
    with pytest.raises(ModelError):
        Pod.from_api(raw)


def test_affinity_parsing() -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    raw = raw_pod([c()], affinity={
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term, {}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 20, "preference": term}],
        },
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
             "namespaces": ["a", "b"], "namespaceSelector": {"matchLabels": {"team": "x"}},
             "matchLabelKeys": ["pod-template-hash"], "mismatchLabelKeys": ["tenant"]},
            {"topologyKey": "zone"}]},
    })
    aff = Pod.from_api(raw).affinity
    assert aff is not None and aff.node_required is not None and len(aff.node_required) == 2
    assert aff.node_required[0].matches("n", {"zone": "a"}) and not aff.node_required[1].matches("n", {"zone": "a"})
    assert [p.weight for p in aff.node_preferred] == [20]
    assert aff.pod_affinity_required == () and aff.pod_affinity_preferred[0].weight == 5
    assert aff.pod_affinity_preferred[0].term.label_selector is not None
    assert aff.pod_affinity_preferred[0].term.label_selector.empty
    t1, t2 = aff.pod_anti_affinity_required
    assert t1.namespaces == ("a", "b") and t1.topology_key == "kubernetes.io/hostname"
    assert t1.namespace_selector is not None and t1.namespace_selector.matches({"team": "x"})
    assert t1.label_selector is not None and t1.label_selector.matches({"app": "db"})
    assert (t1.match_label_keys, t1.mismatch_label_keys) == (("pod-template-hash",), ("tenant",))
    assert t2.label_selector is None and t2.namespace_selector is None  # nil selects no pod
    assert aff.pod_anti_affinity_preferred == ()


@pytest.mark.parametrize(
    ("affinity", "required"),
    [
        (None, None), ({}, None), ({"nodeAffinity": {}}, None),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}, ()),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}, ()),
    ],
)
def test_required_node_affinity_none_versus_empty(affinity: Any, required: Any) -> None:
    aff = Pod.from_api(raw_pod([c()], affinity=affinity)).affinity
    assert (None if aff is None else aff.node_required) == required


def test_topology_spread_defaults() -> None:
    raw = raw_pod([c()], topologySpreadConstraints=[
        {"topologyKey": "zone"},
        {"maxSkew": 2, "topologyKey": "host", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 3,
         "labelSelector": {"matchLabels": {"app": "a"}}, "nodeAffinityPolicy": "Ignore",
         "nodeTaintsPolicy": "Honor", "matchLabelKeys": ["pod-template-hash"]}])
    d, full = Pod.from_api(raw).topology_spread_constraints
    assert (d.max_skew, d.topology_key, d.when_unsatisfiable, d.label_selector, d.min_domains,
            d.node_affinity_policy, d.node_taints_policy, d.match_label_keys) == (
        1, "zone", "DoNotSchedule", None, None, None, None, ())
    assert (full.max_skew, full.when_unsatisfiable, full.min_domains, full.node_affinity_policy,
            full.node_taints_policy, full.match_label_keys) == (2, "ScheduleAnyway", 3, "Ignore", "Honor",
                                                                ("pod-template-hash",))
    assert full.label_selector is not None and full.label_selector.matches({"app": "a"})


# --- nodes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        (None, True), ([], True),
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "Ready"}], False),
        ([{"type": "MemoryPressure", "status": "True"}], True),
        ([{"type": "DiskPressure", "status": "False"}, {"type": "Ready", "status": "True"}], True),
    ],
)
def test_node_ready_rule(conditions: list[dict[str, str]] | None, ready: bool) -> None:
    raw = node_obj("n")
    raw["status"]["conditions"] = conditions
    assert Node.from_api(raw).ready is ready


def test_node_fields_and_allocatable_fallback() -> None:
    raw = node_obj("n", cpu="3500m", memory="8Gi", labels={"zone": "a"},
                   taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "d", "effect": "NoExecute"}],
                   unschedulable=True)
    n = Node.from_api(raw)
    assert dict(n.allocatable) == {"cpu": 3500, "memory": 8 * GI, "pods": 110}
    assert n.labels["zone"] == "a" and n.unschedulable and n.uid == "node-n"
    assert [str(t) for t in n.taints] == ["k=v:NoSchedule", "d:NoExecute"]
    raw["status"]["allocatable"] = {}
    raw["status"]["capacity"] = {"cpu": "8"}
    assert dict(Node.from_api(raw).allocatable) == {"cpu": 8000}
    del raw["status"]["allocatable"]
    assert dict(Node.from_api(raw).allocatable) == {"cpu": 8000}


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        ("metadata.name", "", "metadata.name"),
        ("spec.taints", [{"effect": "NoSchedule"}], "spec.taints[0].key"),
        ("spec.taints", [{"key": "k", "effect": "Sometimes"}], "spec.taints[0].effect"),
        ("spec.taints", [{"key": "k"}], "spec.taints[0].effect"),
        ("spec.taints", {"key": "k"}, "spec.taints"),
        ("status.allocatable.cpu", "lots", "status.allocatable.cpu"),
        ("status.conditions", [5], "status.conditions[0]"),
        ("metadata.labels", 5, "metadata.labels"),
    ],
)
def test_malformed_node_names_the_field(path: str, value: Any, where: str) -> None:
    with pytest.raises(ModelError) as info:
        Node.from_api(set_path(node_obj("n"), path, value))
    assert info.value.where == where


def test_taint_and_toleration_from_api() -> None:
    assert Taint.from_api({"key": "k", "effect": "NoExecute"}, "t") == Taint("k", "", "NoExecute")
    assert Toleration.from_api({}, "t") == Toleration("", "Equal", "", "")
    assert Toleration.from_api({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
                               "t") == Toleration("k", "Exists", "", "NoSchedule")


# --- PDBs, priority classes, namespaces, PVCs ----------------------------------------------------


def test_pdb_selectors() -> None:
    from tests.builders import pod

    web, other_ns, db = pod("w", labels={"app": "web"}), pod("o", namespace="x", labels={"app": "web"}), pod(
        "d", labels={"app": "db"})
    nil = PodDisruptionBudget.from_api({"metadata": {"name": "nil"}, "spec": {}})
    everything = PodDisruptionBudget.from_api({"metadata": {"name": "all"}, "spec": {"selector": {}}})
    by_app = PodDisruptionBudget.from_api(pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    assert nil.selector is None and not nil.selects(web)
    assert everything.selects(web) and everything.selects(db) and not everything.selects(other_ns)
    assert by_app.selects(web) and not by_app.selects(db) and not by_app.selects(other_ns)
    assert (by_app.namespace, by_app.disruptions_allowed, nil.disruptions_allowed) == ("default", 0, None)
    full = PodDisruptionBudget.from_api({"metadata": {"name": "p", "namespace": "x"}, "spec": {"selector": {}},
                                         "status": {"disruptionsAllowed": 2, "expectedPods": 3}})
    assert (full.disruptions_allowed, full.expected_pods) == (2, 3) and full.selects(other_ns)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"metadata": {}}, "metadata.name"),
        ({"metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": "x"}}}, "spec.selector.matchLabels"),
        ({"metadata": {"name": "p"}, "status": {"disruptionsAllowed": "1"}}, "status.disruptionsAllowed"),
        ({"metadata": {"name": "p"}, "status": {"expectedPods": 1.5}}, "status.expectedPods"),
        ({"metadata": {"name": "p"}, "spec": "x"}, "spec"),
        (None, "metadata.name"),
    ],
)
def test_malformed_pdb(raw: Any, where: str) -> None:
    with pytest.raises(ModelError) as info:
        PodDisruptionBudget.from_api(raw)
    assert info.value.where == where


@pytest.mark.parametrize(
    ("raw", "value_or_where"),
    [
        ({"metadata": {"name": "high"}, "value": 1000}, 1000),
        ({"metadata": {"name": "neg"}, "value": -5}, -5),
        ({"metadata": {"name": "x"}, "value": "1000"}, "value"),
        ({"metadata": {"name": "x"}, "value": True}, "value"),
        ({"metadata": {"name": "x"}, "value": 1.0}, "value"),
        ({"metadata": {"name": "x"}}, "value"),
        ({"value": 1}, "metadata.name"),
    ],
)
def test_priority_class(raw: dict[str, Any], value_or_where: int | str) -> None:
    if isinstance(value_or_where, int):
        assert PriorityClass.from_api(raw) == PriorityClass(raw["metadata"]["name"], value_or_where)
    else:
        with pytest.raises(ModelError) as info:
            PriorityClass.from_api(raw)
        assert info.value.where == value_or_where


def test_namespace_and_pvc() -> None:
    ns = Namespace.from_api({"metadata": {"name": "team", "labels": {"env": "prod"}}})
    assert (ns.name, dict(ns.labels)) == ("team", {"env": "prod"})
    pvc = PersistentVolumeClaim.from_api({"metadata": {"name": "d", "namespace": "x"},
                                          "spec": {"storageClassName": "fast"}})
    assert pvc == PersistentVolumeClaim("x", "d", "fast")
    assert PersistentVolumeClaim.from_api({"metadata": {"name": "d"}}) == PersistentVolumeClaim("default", "d", "")
    for bad, where in (({"metadata": {"name": "n", "labels": [1]}}, "metadata.labels"), ({}, "metadata.name")):
        with pytest.raises(ModelError) as info:
            Namespace.from_api(bad)
        assert info.value.where == where
    with pytest.raises(ModelError) as info:
        PersistentVolumeClaim.from_api({"metadata": {"name": "d"}, "spec": []})
    assert info.value.where == "spec"

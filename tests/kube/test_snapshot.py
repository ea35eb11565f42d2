"""load_live_snapshot over the fake API server.

Covers: every kind read once and turned into records, pagination, the node-scoped pod path (one
``spec.nodeName`` LIST per node, nothing cluster-wide), ``include``, typed errors propagating.
"""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Forbidden
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.model.errors import ModelError

from tests.builders import node_obj, pdb_obj, pod_obj
from tests.fakeapi import FakeApiServer


def cluster() -> list[dict[str, Any]]:
    return [
        node_obj("n1"), node_obj("n2"), node_obj("n3"),
        *(pod_obj(f"a{i}", node="n1") for i in range(4)),
        *(pod_obj(f"b{i}", node="n2", namespace="team") for i in range(3)),
        pod_obj("pending"),
        pdb_obj("pdb", {"app": "rs"}),
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"tier": "web"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "team"},
         "spec": {"storageClassName": "fast"}},
    ]


def test_full_snapshot(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(*cluster())
    snap = load_live_snapshot(kube, page_size=3)
    assert sorted(snap.nodes) == ["n1", "n2", "n3"]
    assert len(snap.pods) == 8
    assert {p.key for p in snap.pods_by_node["n2"]} == {"team/b0", "team/b1", "team/b2"}
    assert [b.name for b in snap.pdbs] == ["pdb"] and snap.priority_classes["high"].value == 1000
    assert snap.namespaces["team"].labels == {"tier": "web"}
    assert snap.pvcs[("team", "data")].storage_class_name == "fast"
    assert snap.notes == ()
    pod_lists = fake_api.requests("GET", "/api/v1/pods")
    assert len(pod_lists) == 3 and all("fieldSelector" not in r.query for r in pod_lists)  # 8 pods, pages of 3
    assert {r.path for r in fake_api.requests()} == {
        "/api/v1/nodes", "/api/v1/pods", "/apis/policy/v1/poddisruptionbudgets",
        "/apis/scheduling.k8s.io/v1/priorityclasses", "/api/v1/namespaces", "/api/v1/persistentvolumeclaims"}


@pytest.mark.parametrize(("pod_nodes", "expected_pods", "lists"), [
    (["n1"], 4, 1),
    (["n1", "n2", "n1"], 7, 2),
    (["n3"], 0, 1),
    ([], 0, 0),
])
def test_node_scoped_pods(fake_api: FakeApiServer, kube: KubeClient, pod_nodes: list[str], expected_pods: int,
                          lists: int) -> None:
    fake_api.add(*cluster())
    snap = load_live_snapshot(kube, pod_nodes=pod_nodes)
    assert len(snap.pods) == expected_pods
    assert len(snap.nodes) == 3  # nodes are always read in full: strategies need the other nodes
    pod_lists = fake_api.requests("GET", "/api/v1/pods")
    assert len(pod_lists) == lists
    assert [r.query["fieldSelector"] for r in pod_lists] == [f"spec.nodeName={n}" for n in dict.fromkeys(pod_nodes)]
    assert any("node(s) only" in note for note in snap.notes)


def test_include_limits_the_kinds_read(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(*cluster())
    snap = load_live_snapshot(kube, include=("Node", "Pod"))
    assert len(snap.nodes) == 3 and len(snap.pods) == 8 and not snap.pdbs
    assert {r.path for r in fake_api.requests()} == {"/api/v1/nodes", "/api/v1/pods"}
    with pytest.raises(ValueError, match="unsupported kind"):
        load_live_snapshot(kube, include=("Node", "Deployment"))


def test_api_errors_propagate_typed(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.script("GET", "/apis/policy/v1/poddisruptionbudgets", [403])
    with pytest.raises(Forbidden):
        load_live_snapshot(kube)


def test_malformed_object_names_the_object(fake_api: FakeApiServer, kube: KubeClient) -> None:
    bad = pod_obj("bad", node="n1")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    fake_api.add(node_obj("n1"), bad)
    with pytest.raises(ModelError, match="Pod bad"):
        load_live_snapshot(kube)

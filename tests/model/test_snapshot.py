"""Snapshot.from_objects buckets kinds, indexes pods, and locates every error."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.model.errors import ModelError
from kdesched.model.snapshot import Snapshot

from tests.builders import node_obj, owner, pdb_obj, pod_obj, snapshot


def test_from_objects_buckets_kinds_and_notes_unknown_ones() -> None:
    shared_owner = pod_obj("two-owners", node="n1")
    shared_owner["metadata"]["ownerReferences"].append(owner("StatefulSet", "ss"))
    objects: list[Any] = [
        node_obj("n1"), node_obj("n2"),
        pod_obj("a", node="n1"), pod_obj("b", node="n1"), pod_obj("pending"), pod_obj("c", node="n2", owner_kind=None),
        shared_owner,
        pdb_obj("web", {"app": "rs"}), pdb_obj("other", {"app": "rs"}, namespace="x"),
        {"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
        {"kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "a"}}},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "x"}, "spec": {}},
        {"kind": "ConfigMap", "metadata": {"name": "cm"}}, {"kind": "ConfigMap", "metadata": {"name": "cm2"}},
        {"kind": "Service"}, {"metadata": {"name": "kindless"}}, {"kind": 5},
    ]
    snap = snapshot(objects)
    assert sorted(snap.nodes) == ["n1", "n2"]
    assert [p.name for p in snap.pods] == ["a", "b", "pending", "c", "two-owners"]
    assert {k: [p.name for p in v] for k, v in snap.pods_by_node.items()} == {
        "n1": ["a", "b", "two-owners"], "n2": ["c"]}  # unscheduled pods are on no node
    assert dict(snap.owner_pod_counts) == {"ReplicaSet-rs": 4, "StatefulSet-ss": 1}
    assert [b.name for b in snap.pdbs] == ["web", "other"]
    assert {k: [b.name for b in v] for k, v in snap.pdbs_by_namespace.items()} == {"default": ["web"], "x": ["other"]}
    assert snap.priority_classes["high"].value == 1000
    assert dict(snap.namespaces["default"].labels) == {"team": "a"}
    assert snap.pvcs[("x", "data")].storage_class_name == ""
    assert snap.notes == ("skipped 2 object(s) of kind (no kind): not used by kdesched",
                          "skipped 2 object(s) of kind ConfigMap: not used by kdesched",
                          "skipped 1 object(s) of kind Service: not used by kdesched")


def test_notes_passed_in_come_first() -> None:
    snap = Snapshot.from_objects([("o", {"kind": "Secret"})], notes=["from the file"])
    assert snap.notes[0] == "from the file" and "Secret" in snap.notes[1]


def test_pdbs_for() -> None:
    objects = [node_obj("n"), pod_obj("a", node="n", labels={"app": "a"}),
               pod_obj("b", node="n", labels={"app": "b"}, namespace="x"),
               pdb_obj("pa", {"app": "a"}), pdb_obj("all", {}), pdb_obj("pb", {"app": "b"}),
               pdb_obj("pbx", {"app": "b"}, namespace="x"),
               {"kind": "PodDisruptionBudget", "metadata": {"name": "nil"}, "spec": {}}]
    snap = snapshot(objects)
    a, b = snap.pods
    assert [d.name for d in snap.pdbs_for(a)] == ["pa", "all"]
    assert [d.name for d in snap.pdbs_for(b)] == ["pbx"]


def test_build_is_empty_by_default() -> None:
    snap = Snapshot.build([], [])
    assert (dict(snap.nodes), list(snap.pods), dict(snap.pods_by_node), snap.notes) == ({}, [], {}, ())


@pytest.mark.parametrize(
    ("index", "obj", "message"),
    [
        (3, pod_obj("x", priority="high"), "objects[3] (Pod x in default): spec.priority: must be an integer"),
        (1, pod_obj("y", namespace="team", cpu="lots"),
         "objects[1] (Pod y in team): spec.containers[0].resources.requests.cpu: 'lots' is not a quantity"),
        (0, {"kind": "Node", "metadata": {"name": "n"}, "spec": {"taints": [{"key": "k"}]}},
         "objects[0] (Node n): spec.taints[0].effect"),
        (2, {"kind": "Pod", "metadata": {"namespace": "z"}}, "objects[2] (Pod ? in z): metadata.name: is required"),
        (0, {"kind": "PriorityClass", "metadata": {"name": "p"}, "value": "1"}, "objects[0] (PriorityClass p): value"),
        (0, {"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "q"},
             "status": {"disruptionsAllowed": "x"}}, "objects[0] (PodDisruptionBudget b in q): status.disruptionsAllowed"),
        (0, ["not", "an", "object"], "objects[0]: expected a Kubernetes object, got list"),
        (0, {"kind": "Pod", "metadata": "x"}, "objects[0] (Pod ? in default): metadata: must be an object"),
    ],
)
def test_errors_are_located(index: int, obj: Any, message: str) -> None:
    objects: list[Any] = [node_obj(f"n{i}") for i in range(index)] + [obj]
    with pytest.raises(ModelError) as info:
        snapshot(objects)
    assert str(info.value).startswith(message)

"""The msgspec fast path for JSON List files decides exactly as the ordinary loader: the same
records in the same order for what it accepts, and the same error (file, item, object, field) for
everything else, because anything unusual is handed to the validating parser."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kdesched.model import fastload, files
from kdesched.model.errors import ModelError
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot

from bench.generate import generate
from tests.builders import node_obj, owner, pdb_obj, pod_obj, ts


def slow_load(path: str, monkeypatch: pytest.MonkeyPatch) -> Snapshot:
    with monkeypatch.context() as m:
        m.setattr(files, "load_json_list", lambda p, n: None)
        return files.load_snapshot(path)


def fields(record: Any) -> tuple[Any, ...]:
    return tuple(getattr(record, f.name) for f in dataclasses.fields(record))


def same_snapshot(a: Snapshot, b: Snapshot) -> None:
    assert [fields(p) for p in a.pods] == [fields(p) for p in b.pods]
    assert {k: fields(v) for k, v in a.nodes.items()} == {k: fields(v) for k, v in b.nodes.items()}
    assert [fields(x) for x in a.pdbs] == [fields(x) for x in b.pdbs]
    assert a.priority_classes == b.priority_classes and a.namespaces == b.namespaces and a.pvcs == b.pvcs
    assert a.notes == b.notes and a.taken_at == b.taken_at
    assert {k: [p.key for p in v] for k, v in a.pods_by_node.items()} == \
        {k: [p.key for p in v] for k, v in b.pods_by_node.items()}


def outcome(path: str, monkeypatch: pytest.MonkeyPatch, slow: bool) -> Any:
    try:
        snap = slow_load(path, monkeypatch) if slow else files.load_snapshot(path)
    except ModelError as exc:
        return ("error", str(exc))
    return ("ok", [fields(p) for p in snap.pods], {k: fields(v) for k, v in snap.nodes.items()}, snap.notes,
            snap.taken_at)


def write_json(tmp_path: Path, obj: Any, name: str = "c.json", **dump: Any) -> str:
    f = tmp_path / name
    f.write_text(json.dumps(obj, **dump), encoding="utf-8")
    return str(f)


def test_generated_cluster_same_records_and_built_without_the_validating_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_json(tmp_path, generate(30, 12, seed=3), separators=(",", ":"))
    calls = []
    slow_parser = Pod.from_api.__func__  # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        m.setattr(Pod, "from_api", classmethod(lambda cls, raw: calls.append(1) or slow_parser(cls, raw)))
        fast = files.load_snapshot(path)
    assert calls == []  # every pod of a well-formed cluster took the fast path
    assert len(fast.pods) == 360
    same_snapshot(fast, slow_load(path, monkeypatch))


def test_typed_list_kind_after_items_and_snapshot_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [{k: v for k, v in pod_obj(f"p{i}", node="n1").items() if k != "kind"} for i in range(3)]
    doc = {"items": pods, "kind": "PodList",
           "metadata": {"annotations": {files.SNAPSHOT_TIME: "2026-01-15T12:00:00Z"}}}
    pod_file = write_json(tmp_path, doc, indent=2, sort_keys=True)
    nodes = write_json(tmp_path, {"kind": "List", "items": [node_obj("n1"), *[dict(p, kind="Pod") for p in pods]],
                                  "metadata": doc["metadata"]}, name="both.json")
    for path in (pod_file, nodes):
        assert outcome(path, monkeypatch, slow=False) == outcome(path, monkeypatch, slow=True)
    snap = files.load_snapshot(nodes)
    assert [p.name for p in snap.pods] == ["p0", "p1", "p2"] and snap.taken_at is not None


def test_pod_list_without_nodes_fails_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_json(tmp_path, {"kind": "PodList", "items": [pod_obj("p", node="n1")]})
    with pytest.raises(ModelError, match="contains no Node objects"):
        files.load_snapshot(path)


def rich_pod() -> dict[str, Any]:
    pod = pod_obj("web-1", node="n1", cpu="250m", memory="64Mi")
    pod["metadata"].update({"ownerReferences": [owner()], "creationTimestamp": ts(-3600),
                            "annotations": {"descheduler.alpha.kubernetes.io/evict": "true", "other": "x"}})
    spec = pod["spec"]
    spec["tolerations"] = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                            "tolerationSeconds": 300}]
    spec["initContainers"] = [{"name": "side", "restartPolicy": "Always",
                               "resources": {"requests": {"cpu": "50m"}, "limits": {"memory": "32Mi"}}}]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
                       {"name": "tmp", "emptyDir": {}}]
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                          "labelSelector": {"matchLabels": {"app": "web"}}}]
    spec["priority"] = 100
    pod["status"] = {"phase": "Running", "startTime": ts(-3500),
                     "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts(-3400)}],
                     "containerStatuses": [{"name": "c", "restartCount": 2, "ready": True,
                                            "state": {"running": {}},
                                            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}
    return pod


# Paths into the rich pod and values the fast structs do not take as they are: each must end with
# the same records (the validating parser converts it) or the same error as before.
MUTATIONS: list[tuple[str, Any]] = [
    ("metadata.name", ""), ("metadata.name", 5), ("metadata", None), ("metadata", "x"), ("metadata.labels", None),
    ("metadata.labels.app", 5), ("metadata.labels.app", None), ("metadata.annotations", ["a"]),
    ("metadata.ownerReferences", {"a": 1}), ("metadata.ownerReferences.0.controller", "yes"),
    ("metadata.creationTimestamp", "yesterday"), ("metadata.creationTimestamp", 5), ("metadata.namespace", ""),
    ("spec", None), ("spec.containers.0.resources.requests.cpu", "-1"), ("spec.containers.0.resources.requests.cpu", 2),
    ("spec.containers.0.resources.requests.cpu", 0.5), ("spec.containers.0.resources.requests.cpu", "lots"),
    ("spec.containers.0.resources.requests.cpu", None), ("spec.containers.0", None), ("spec.containers", "c"),
    ("spec.priority", "high"), ("spec.priority", True), ("spec.priority", 1.0), ("spec.tolerations.0.operator", "In"),
    ("spec.tolerations.0.key", 3), ("spec.volumes.0.persistentVolumeClaim", None),
    ("spec.volumes.0.persistentVolumeClaim.claimName", 7), ("spec.volumes.0", None), ("spec.volumes.1.name", None),
    ("spec.affinity", {}), ("spec.affinity.nodeAffinity", "x"), ("spec.topologySpreadConstraints", {"a": 1}),
    ("spec.topologySpreadConstraints.0.maxSkew", "1"), ("spec.topologySpreadConstraints", None),
    ("spec.initContainers.0.restartPolicy", 1), ("spec.resourceClaims", [{"name": "gpu"}]),
    ("spec.overhead", {"cpu": "10m"}), ("spec.nodeSelector", {"a": True}), ("status", []),
    ("status.phase", 3), ("status.startTime", "2024-13-45T00:00:00Z"), ("status.conditions.0", "Ready"),
    ("status.conditions.0.lastTransitionTime", ""), ("status.containerStatuses.0.restartCount", "2"),
    ("status.containerStatuses.0.restartCount", True), ("status.containerStatuses.0.lastState.terminated.exitCode", 1.5),
    ("status.containerStatuses.0.state", 1), ("kind", None), ("kind", 5), ("kind", "Node"),
    # what the API server would refuse (kdesched.model.validate): the fast path hands these over too
    ("apiVersion", "v2"), ("apiVersion", "apps/v1"), ("status.phase", "Exploded"), ("status.qosClass", "Best"),
    ("spec.containers", []), ("spec.containers.0.name", None), ("spec.containers.0.name", "C_1"),
    ("spec.initContainers.0.name", ""), ("spec.affinity", []), ("spec.affinity", None), ("spec.nodeName", 123),
    ("spec.nodeName", "Node_1"), ("metadata.name", "Web_1"), ("metadata.name", "web-1"), ("metadata.uid", None),
    ("metadata.namespace", "Shop"), ("metadata.labels.app", "a b"), ("metadata.labels", {"-x": "y"}),
    ("metadata.ownerReferences.0.kind", None), ("metadata.ownerReferences.0.apiVersion", ""),
    ("metadata.ownerReferences.0.uid", ""), ("spec.tolerations.0.effect", "Sometimes"), ("spec.priority", 1 << 40),
    ("spec.volumes.0.name", ""), ("spec.nodeName", "n2"),
]


def mutate(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    target: Any = obj
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize(("path", "value"), MUTATIONS, ids=[f"{p}={v!r}" for p, v in MUTATIONS])
def test_unusual_pods_decide_as_the_validating_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      path: str, value: Any) -> None:
    other = rich_pod()  # another pod (its own name and uid), then changed
    other["metadata"]["name"] = "web-2"
    items = [node_obj("n1"), rich_pod(), mutate(other, path, value), pdb_obj("b", {"app": "web"})]
    file = write_json(tmp_path, {"apiVersion": "v1", "kind": "List", "items": items})
    assert outcome(file, monkeypatch, slow=False) == outcome(file, monkeypatch, slow=True)


FILES: dict[str, bytes] = {
    "invalid-json": b'{"kind":"List","items":[{"kind":"Node",}]}',
    "nan": b'{"kind":"List","items":[' + json.dumps(node_obj("n1")).encode() + b',{"kind":"Pod","x":NaN}]}',
    "lone-surrogate": b'{"kind":"List","items":[' + json.dumps(node_obj("n\\ud800")).encode() + b"]}",
    "not-utf8-in-a-skipped-field": b'{"kind":"List","items":[' + json.dumps(node_obj("n1")).encode()
    + b',{"kind":"Pod","metadata":{"name":"p"},"junk":"\xff"}]}',
    "bom": b"\xef\xbb\xbf" + json.dumps({"kind": "List", "items": [node_obj("n1")]}).encode(),
    "trailing-data": json.dumps({"kind": "List", "items": [node_obj("n1")]}).encode() + b" {}",
    "items-not-a-list": b'{"kind":"List","items":{"a":1}}',
    "items-null": json.dumps({"kind": "List", "items": None}).encode(),
    "no-items": json.dumps(node_obj("n1")).encode(),
    "item-not-an-object": b'{"kind":"List","items":[' + json.dumps(node_obj("n1")).encode() + b',[1,2]]}',
    "deep-nesting": b'{"kind":"List","items":[' + json.dumps(node_obj("n1")).encode()
    + b',{"kind":"Pod","metadata":{"name":"p"},"deep":' + b"[" * 5000 + b"]" * 5000 + b"}]}",
    "bad-snapshot-time": json.dumps({"kind": "List", "items": [node_obj("n1")],
                                     "metadata": {"annotations": {files.SNAPSHOT_TIME: "now"}}}).encode(),
    "huge-int": b'{"kind":"List","items":[' + json.dumps(node_obj("n1")).encode()
    + b',{"kind":"Pod","metadata":{"name":"p"},"spec":{"priority":' + b"9" * 40 + b"}}]}",
    "empty": b"",
    "whitespace": b"  \n",
}


@pytest.mark.parametrize("data", FILES.values(), ids=FILES.keys())
def test_unusual_files_fail_or_load_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    f = tmp_path / "c.json"
    f.write_bytes(data)
    assert outcome(str(f), monkeypatch, slow=False) == outcome(str(f), monkeypatch, slow=True)


def test_name_in_messages_is_the_path_as_the_slow_path_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_json(tmp_path, {"kind": "List", "items": [node_obj("n1"), mutate(rich_pod(), "spec.priority", "x")]})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as exc:
        files.load_snapshot("./c.json")
    assert str(exc.value).startswith("c.json items[1] (Pod web-1 in default): spec.priority")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8) | st.sampled_from(["", "100m", "1Gi", "2024-01-02T03:04:05Z", "Exists", "Always"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
leaf_paths = sorted({p for p, _ in MUTATIONS if p != "kind"})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(leaf_paths), value=json_values)
def test_any_value_anywhere_decides_as_the_validating_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             path: str, value: Any) -> None:
    items = [node_obj("n1"), mutate(rich_pod(), path, value)]
    file = write_json(tmp_path, {"kind": "List", "items": items})
    assert outcome(file, monkeypatch, slow=False) == outcome(file, monkeypatch, slow=True)


def test_interning_caches_are_emptied_after_a_load(tmp_path: Path) -> None:
    files.load_snapshot(write_json(tmp_path, generate(5, 6, seed=1)))
    assert not any(fastload._CACHES)


def test_pipes_are_left_to_the_ordinary_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert fastload.load_json_list(str(fifo), str(fifo)) is None  # returns at once: never opened


def test_the_fast_path_passes_pod_fields_in_their_order() -> None:
    assert fastload._POD_FIELDS == tuple(f.name for f in dataclasses.fields(Pod))


def page_outcome(data: bytes, fast: bool) -> Any:
    """A LIST page as the kube client turns it into a snapshot, through the fast path or the
    ordinary json path of ``KubeClient.list_raw``."""
    if fast:
        decoded = fastload.decode_list_page(data, "Pod", "v1")
        if decoded is None:
            return ("not taken",)
        items, meta = decoded
    else:
        page = json.loads(data)
        meta = page.get("metadata") or {}
        items = []
        for item in page.get("items") or ():
            if isinstance(item, dict):
                item.setdefault("kind", "Pod")
                item.setdefault("apiVersion", "v1")
                items.append(item)
    try:
        snap = Snapshot.from_objects((f"API Pod list [{i}]", x) for i, x in enumerate(items))
    except ModelError as exc:
        return ("error", str(exc), meta)
    return ("ok", [fields(p) for p in snap.pods], snap.notes, meta)


def api_pod(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}  # a LIST's items carry neither


@pytest.mark.parametrize(("path", "value"), MUTATIONS, ids=[f"{p}={v!r}" for p, v in MUTATIONS])
def test_api_list_pages_decide_as_the_json_path(path: str, value: Any) -> None:
    page = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7", "continue": "abc"},
            "items": [api_pod(rich_pod()), api_pod(mutate(rich_pod(), path, value)), 5]}
    data = json.dumps(page).encode()
    fast = page_outcome(data, fast=True)
    assert fast != ("not taken",)
    assert fast == page_outcome(data, fast=False)


@pytest.mark.parametrize("data", [b"", b"[]", b'{"items": {}}', b'{"items": [], "metadata": [1]}',
                                  b'{"items": [{"a": NaN}]}', b'{"items": [{"a": "\xff"}]}'])
def test_api_pages_the_fast_path_does_not_take(data: bytes) -> None:
    assert fastload.decode_list_page(data, "Pod", "v1") is None


def test_api_page_with_null_items_and_metadata_is_empty() -> None:
    assert fastload.decode_list_page(b'{"items": null, "metadata": null}', "Pod", "v1") == ([], {})

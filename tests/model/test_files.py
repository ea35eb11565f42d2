"""load_snapshot reads what kubectl writes (YAML, JSON, Lists, typed lists, stdin) and fails with a
ModelError naming the file and place for anything else, never another exception."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kdesched.model.errors import ModelError
from kdesched.model.files import iter_json_list, load_snapshot

from tests.builders import node_obj, pod_obj

NODE = node_obj("n1")
POD = pod_obj("p", node="n1")


def strip_kind(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "kind"}


def write(tmp_path: Path, text: str, name: str = "cluster") -> str:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return str(f)


def kubectl_json(obj: dict[str, Any]) -> str:
    """kubectl -o json: keys sorted, so a list's kind comes after its items."""
    return json.dumps(obj, indent=4, sort_keys=True)


VALID = {
    "yaml-one-doc": yaml.safe_dump(NODE),
    "yaml-multi-doc": "---\n" + yaml.safe_dump(NODE) + "---\n---\n" + yaml.safe_dump(POD) + "...\n",
    "yaml-v1-list": yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [NODE, POD]}),
    "yaml-typed-lists": yaml.safe_dump({"kind": "NodeList", "items": [strip_kind(NODE)]}) + "---\n"
    + yaml.safe_dump({"kind": "PodList", "items": [strip_kind(POD)]}),
    "json-v1-list": kubectl_json({"apiVersion": "v1", "kind": "List", "items": [NODE, POD], "metadata": {}}),
    "json-typed-list-kind-after-items": kubectl_json({"kind": "NodeList", "items": [strip_kind(NODE)]}),
    "json-array": json.dumps([NODE, POD]),
    "json-object": json.dumps(NODE),
    "yaml-flow-mapping": '{kind: Node, metadata: {name: n1}}',
}


@pytest.mark.parametrize("text", VALID.values(), ids=VALID.keys())
def test_load_valid_files(tmp_path: Path, text: str) -> None:
    snap = load_snapshot(write(tmp_path, text))
    assert list(snap.nodes) == ["n1"]
    assert all(p.node_name == "n1" for p in snap.pods)


def test_typed_lists_give_items_their_kind(tmp_path: Path) -> None:
    snap = load_snapshot(write(tmp_path, VALID["yaml-typed-lists"]))
    assert [p.name for p in snap.pods] == ["p"] and snap.notes == ()
    text = kubectl_json({"kind": "PodList", "items": [strip_kind(POD)], "apiVersion": "v1", "metadata": {}})
    both = '{"items": [' + json.dumps(NODE) + "," + json.dumps(strip_kind(POD)) + '], "kind": "PodList"}'
    for t in (text, both):
        items = list(iter_json_list(t, "f") or ())
        assert [o["kind"] for _, o in items][-1] == "Pod"
    assert [p.name for p in load_snapshot(write(tmp_path, both)).pods] == ["p"]


def test_v1_list_items_without_kind_are_refused(tmp_path: Path) -> None:
    # once skipped with a note ("(no kind)"): a Pod that lost its kind silently left the decision
    text = json.dumps({"kind": "List", "items": [NODE, strip_kind(POD)]})
    with pytest.raises(ModelError, match=r"items\[1\]: kind: is required"):
        load_snapshot(write(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "streams"),
    [
        ('{"kind": "List", "items": []}', True),
        ('  {"apiVersion": "v1", "items": [{"kind": "Node"}], "kind": "List"}', True),
        ('{"kind": "Node", "metadata": {"name": "n"}}', False),  # no items array: ordinary object
        ('{"kind": "List", "items": {}}', False),
        ("{}", False), ("[]", False), ("kind: List", False),
        ('{"kind": "List" "items": []}', False),  # bad delimiter before items: ordinary parser reports
        ("{kind: List, items: []}", False),
    ],
)
def test_iter_json_list_streams_only_objects_with_an_items_array(text: str, streams: bool) -> None:
    assert (iter_json_list(text, "f") is not None) is streams


def test_streamed_items_are_located(tmp_path: Path) -> None:
    bad = pod_obj("bad", node="n1", priority="x")  # type: ignore[arg-type]
    text = kubectl_json({"kind": "List", "items": [NODE, POD, bad]})
    path = write(tmp_path, text)
    with pytest.raises(ModelError, match=r"items\[2\] \(Pod bad in default\): spec.priority"):
        load_snapshot(path)


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(VALID["yaml-multi-doc"]))
    assert [p.name for p in load_snapshot("-").pods] == ["p"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("kind: [x"))
    with pytest.raises(ModelError, match="^<stdin>: invalid YAML"):
        load_snapshot("-")


def test_stdin_that_is_not_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe kind: Node"), encoding="utf-8"))
    with pytest.raises(ModelError, match="^<stdin>: is not UTF-8 text .*offset 0"):
        load_snapshot("-")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such file"):
        load_snapshot(str(tmp_path / "nope.yaml"))
    with pytest.raises(ModelError, match="is a directory"):
        load_snapshot(str(tmp_path))
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"kind: N\xe9ud\n")
    with pytest.raises(ModelError, match="is not UTF-8 text .*offset 7"):
        load_snapshot(str(bad))


ITEM = json.dumps(NODE)
INVALID = {
    "empty": ("", "contains no objects"),
    "only-separators": ("---\n---\n", "contains no objects"),
    "bad-yaml": ("kind: Node\nmetadata: {name: n1\n", "invalid YAML at line 3 column 1"),
    "bad-yaml-indent": ("kind: Node\n  metadata: x\n", "invalid YAML at line 2 column 11"),
    "yaml-bad-timestamp": ("kind: Node\nmetadata: {name: n, creationTimestamp: 2024-13-45}\n", "invalid YAML"),
    "json-truncated-list": ('{"kind": "List", "items": [' + ITEM[:40], "invalid JSON at line 1 column"),
    "json-truncated-object": ('{"kind": "Node", "metadata": {"name"', "invalid JSON at line 1 column"),
    "json-trailing-garbage": ('{"kind": "List", "items": []} x', "invalid JSON at line 1 column 31: Extra data"),
    "json-trailing-garbage-object": (ITEM + "\n}", "invalid JSON at line 2 column 1: Extra data"),
    "json-missing-comma-items": ('{"kind": "List", "items": [' + ITEM + " " + ITEM + "]}",
                                 "Expecting ',' delimiter"),
    "json-trailing-comma-items": ('{"kind": "List", "items": [' + ITEM + ",]}", "invalid JSON"),
    "json-missing-comma-after-items": ('{"items": []\n "kind": "List"}', "invalid JSON at line 2 column 2"),
    "json-missing-comma-before-items": ('{"kind": "List"\n "items": []}', "invalid JSON at line 2 column 2"),
    "json-array-truncated": ("[" + ITEM, "invalid JSON at line 1 column"),
    "json-multiline-position": ('{\n  "kind": "List",\n  "items": [\n    {"a": 1,}\n  ]\n}', "line 4 column 13"),
    "no-nodes": (json.dumps({"kind": "List", "items": [POD]}), "contains no Node objects"),
    "scalar-document": ("just text\n", "expected a Kubernetes object or List, got str"),
    "list-document": ("- 1\n- 2\n", "expected a Kubernetes object or List, got list"),
    "json-array-of-scalars": ("[1, 2]", "document 1: expected a Kubernetes object or List, got int"),
    "second-document-scalar": (yaml.safe_dump(NODE) + "---\n5\n", "document 2: expected a Kubernetes object"),
    "items-not-a-list": ("kind: List\nitems: {a: 1}\n", "items: must be a list"),
    "json-items-not-a-list": ('{"kind": "NodeList", "items": "x"}', "items: must be a list"),
    "item-not-an-object": ('{"kind": "List", "items": [' + ITEM + ", 5]}", "items[1]: expected a Kubernetes object"),
}


@pytest.mark.parametrize(("text", "needle"), INVALID.values(), ids=INVALID.keys())
def test_invalid_files(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ModelError) as info:
        load_snapshot(path)
    assert str(info.value).startswith(path)
    assert needle in str(info.value)


SMALL_JSON = kubectl_json({"kind": "List", "items": [NODE, POD, {"kind": "PodDisruptionBudget",
                                                                  "metadata": {"name": "b"}, "spec": {"selector": {}}}]})
SMALL_YAML = VALID["yaml-multi-doc"]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from([SMALL_JSON, SMALL_YAML, VALID["json-typed-list-kind-after-items"]])).encode()
    data = bytearray(base)
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "set", "delete", "insert"]))
        if action == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            data[at] = draw(st.sampled_from(b'{}[],:"\\ \n-#&*!|>%@`0aZ\xff'))
        elif action == "delete":
            del data[at]
        else:
            data[at:at] = draw(st.sampled_from([b"{", b"]", b",", b'"', b": ", b"\n  ", b"- ", b"null", b"1e999"]))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
def test_load_snapshot_raises_only_model_errors(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "mutated"
    path.write_bytes(data)
    try:
        snap = load_snapshot(str(path))
    except ModelError as exc:
        assert str(exc).startswith(str(path))
    else:
        assert snap.nodes

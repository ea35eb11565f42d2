"""Snapshot files are checked as the API server checks objects (kdesched.model.validate): every
problem at once, nothing decided on a refused file, the same answer from the fast JSON path and
the ordinary loader; and a pod on a node the snapshot lacks is a note, not an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kdesched.model import files
from kdesched.model.errors import ModelError
from kdesched.model.files import load_snapshot
from kdesched.model.validate import (
    SHOWN,
    dns_label_problem,
    dns_subdomain_problem,
    label_value_problem,
    qualified_name_problem,
)

from tests.builders import node_obj, pdb_obj, pod_obj


def write(tmp_path: Path, items: list[dict[str, Any]], name: str = "c.json") -> str:
    f = tmp_path / name
    f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), encoding="utf-8")
    return str(f)


def both(path: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The error of the fast path and of the ordinary loader (they must agree)."""
    out = []
    for slow in (False, True):
        with monkeypatch.context() as m:
            if slow:
                m.setattr(files, "load_json_list", lambda p, n: None)
            with pytest.raises(ModelError) as info:
                files.load_snapshot(path)
            out.append(str(info.value))
    assert out[0] == out[1]
    return out


@pytest.mark.parametrize(("value", "ok"), [
    ("web-1", True), ("a.b-c.d", True), ("1", True), ("Web", False), ("web_1", False), ("-web", False),
    ("web.", False), ("web\n", False), ("a" * 253, True), ("a" * 254, False), ("", False),
])
def test_dns_subdomain(value: str, ok: bool) -> None:
    assert (dns_subdomain_problem(value) is None) is ok


@pytest.mark.parametrize(("value", "ok"), [("default", True), ("a.b", False), ("a" * 63, True), ("a" * 64, False)])
def test_dns_label(value: str, ok: bool) -> None:
    assert (dns_label_problem(value) is None) is ok


@pytest.mark.parametrize(("value", "ok"), [
    ("app", True), ("app.kubernetes.io/name", True), ("A_b.c-D", True), ("/app", False), ("Example.com/app", False),
    ("app-", False), ("a" * 64, False), ("a/b/c", False),
])
def test_qualified_name(value: str, ok: bool) -> None:
    assert (qualified_name_problem(value) is None) is ok


@pytest.mark.parametrize(("value", "ok"), [("", True), ("web", True), ("a b", False), ("a" * 64, False)])
def test_label_value(value: str, ok: bool) -> None:
    assert (label_value_problem(value) is None) is ok


def test_every_problem_at_once_capped_with_a_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = [pod_obj(f"web-{i}", node="n1", phase="Exploded") for i in range(SHOWN + 7)]
    path = write(tmp_path, [node_obj("n1"), *bad, pdb_obj("b", {"app": "rs"}) | {"spec": {"minAvailable": "150%"}}])
    message = both(path, monkeypatch)[0]
    assert message.startswith(f"{path}: {SHOWN + 8} problems; nothing was decided:")
    assert message.count("status.phase: must be one of") == SHOWN
    assert message.endswith("... and 8 more")


def test_duplicates_by_name_and_by_uid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    twin = pod_obj("web-2", node="n1")
    twin["metadata"]["uid"] = "u-1"
    first = pod_obj("web-1", node="n1")
    first["metadata"]["uid"] = "u-1"
    path = write(tmp_path, [node_obj("n1"), node_obj("n1"), first, twin, pod_obj("web-3", node="n1"),
                            pod_obj("web-3", node="n1")])
    message = both(path, monkeypatch)[0]
    assert "items[1] (Node n1): metadata.name: the same Node again (first at" in message
    assert "items[3] (Pod web-2 in default): metadata.uid: 'u-1' is also the uid of" in message
    assert "items[5] (Pod web-3 in default): metadata.name: the same Pod again" in message
    # a uid shared by a pod and a node: the same answer from both paths
    shared = pod_obj("web-4", node="n1")
    shared["metadata"]["uid"] = "u-node"
    node = node_obj("n1") | {"metadata": {"name": "n1", "uid": "u-node"}}
    assert "metadata.uid: 'u-node' is also the uid of" in both(write(tmp_path, [node, shared], "uid.json"),
                                                                monkeypatch)[0]
    # the same name in another namespace is another pod
    other = pod_obj("web-3", node="n1", namespace="shop")
    load_snapshot(write(tmp_path, [node_obj("n1"), pod_obj("web-3", node="n1"), other], "ok.json"))


def test_pod_on_a_node_missing_from_the_snapshot_is_a_note(tmp_path: Path) -> None:
    path = write(tmp_path, [node_obj("n1"), pod_obj("a", node="n1"), pod_obj("b", node="gone"),
                            pod_obj("c", node="gone")])
    snap = load_snapshot(path)
    assert [p.name for p in snap.pods] == ["a", "b", "c"]
    assert any(n.startswith("2 pod(s) bound to 1 node(s) not in the snapshot (gone)") for n in snap.notes)


def test_apiversion_may_be_left_out_but_not_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pod = pod_obj("a", node="n1")
    del pod["apiVersion"]
    assert len(load_snapshot(write(tmp_path, [node_obj("n1"), pod])).pods) == 1
    pdb = pdb_obj("b", {"app": "x"}) | {"apiVersion": "v1"}
    assert "apiVersion: must be policy/v1 or policy/v1beta1 for a PodDisruptionBudget, got 'v1'" in \
        both(write(tmp_path, [node_obj("n1"), pdb], "bad.json"), monkeypatch)[0]


NODE_TEXT = '{"kind": "Node", "metadata": {"name": "n1"}}'
POD_TEXT = '{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}'


@pytest.mark.parametrize(("text", "key"), [
    # issue 31: "items" twice exited 0 from a file (msgspec kept the second list) and 2 from stdin
    (f'{{"kind": "List", "items": [{NODE_TEXT}], "items": [{NODE_TEXT}, {POD_TEXT}]}}', "items"),
    (f'{{"kind": "List", "items": [{NODE_TEXT}, {POD_TEXT}], "items": [{NODE_TEXT}]}}', "items"),
    (f'{{"kind": "List", "items": [{NODE_TEXT}],\n "items": [{NODE_TEXT}]}}', "items"),  # same length twice
    (f'{{"kind": "List", "items": [{NODE_TEXT}, {POD_TEXT}], "kind": "List"}}', "kind"),
    (f'{{"kind": "List", "metadata": {{}}, "items": [{NODE_TEXT}], "metadata": {{"a": 1}}}}', "metadata"),
    (f'{{"kind": "List", "metadata": {{"a": 1, "a": 2}}, "items": [{NODE_TEXT}]}}', "a"),
    (f'{{ "kind" : "List" ,\t"items" : [ {NODE_TEXT} , {POD_TEXT} ] , "x": "}}", "x": 1 }}', "x"),
])
def test_a_key_twice_in_the_list_object_is_refused_from_a_file_and_stdin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, key: str) -> None:
    f = tmp_path / "dup.json"
    f.write_text(text, encoding="utf-8")
    assert f"duplicate key {key!r} in an object" in both(str(f), monkeypatch)[0]


def test_the_list_walk_keeps_ordinary_files_on_the_fast_path(tmp_path: Path) -> None:
    """Formatted or compact, keys in any order, an empty metadata: the fast path still reads it."""
    from kdesched.model import fastload

    for text in [f'{{"kind": "List", "items": [{NODE_TEXT}, {POD_TEXT}]}}',
                 f'\n {{ "items" : [\n  {NODE_TEXT} ,\n  {POD_TEXT}\n ] ,\n "kind" : "List", "metadata": {{}} }}\n',
                 (f'{{"apiVersion":"v1","metadata":{{"resourceVersion":"12"}},"items":[{POD_TEXT},{NODE_TEXT}],'
                  f'"kind":"List","x":[1,2.5e3,"\\u00e9",null,true]}}')]:
        f = tmp_path / "ok.json"
        f.write_text(text, encoding="utf-8")
        assert fastload.load_json_list(str(f), "ok.json") is not None, text


@pytest.mark.xfail(strict=True, reason="known gap: msgspec keeps the last of a key given twice inside a Pod "
                                       "that the fast path reads; the ordinary loader refuses it (docs/cli.md)")
def test_duplicate_key_inside_a_pod_on_the_fast_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "dup.json"
    f.write_text('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1"}}, {"kind": "Pod", '
                 '"metadata": {"name": "a"}, "spec": {"nodeName": "n1", "containers": [{"name": "c"}], '
                 '"nodeName": "n2"}}]}', encoding="utf-8")
    assert "duplicate key 'nodeName'" in both(str(f), monkeypatch)[0]


@pytest.mark.parametrize(("containers", "init", "field"), [
    ([{"name": "web"}, {"name": "web"}], [], ("spec.containers[1].name: Duplicate value: 'web' (the name of "
                                            "spec.containers[0].name)")),
    ([{"name": "web"}], [{"name": "web"}], "spec.initContainers[0].name: Duplicate value: 'web'"),
])
def test_a_container_name_twice_in_a_pod_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    containers: list[dict[str, str]], init: list[dict[str, str]],
                                                    field: str) -> None:
    """The API server refuses two containers of one name in a Pod (issue 31: accepted before), on
    the fast path and the ordinary loader alike."""
    pod = pod_obj("a", node="n1")
    pod["spec"]["containers"] = [c | {"image": "nginx"} for c in containers]
    if init:
        pod["spec"]["initContainers"] = [c | {"image": "busybox"} for c in init]
    assert f"(Pod a in default): {field}" in both(write(tmp_path, [node_obj("n1"), pod]), monkeypatch)[0]


@pytest.mark.parametrize("kind", ["pod", "POD", "node", "poddisruptionbudget"])
def test_a_kind_in_the_wrong_case_is_refused_not_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         kind: str) -> None:
    """``kind: pod`` was skipped with a note and left every count (issue 31); the API server knows
    no such kind."""
    other = pod_obj("a", node="n1") | {"kind": kind}
    message = both(write(tmp_path, [node_obj("n1"), other]), monkeypatch)[0]
    assert f"items[1]: kind: {kind!r} is not a kind (kinds are case-sensitive): write " in message

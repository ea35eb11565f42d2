"""Classifier tables: sequences of Node objects (as a watch or ApiServerSource delivers them) and
the semantic events they must produce, exactly once per real change."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kdesched.reactor.events.classifier import Classifier, NodeInputError, digest_of
from kdesched.reactor.events.routing import LABELS_CHANGED, NODE_ADDED, NODE_READY, TAINTS_CHANGED

from tests.builders import node_obj

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


def n(rv: int, *, name: str = "n1", uid: str = "u1", ready: bool = True, taints: list[dict[str, str]] | None = None,
      labels: dict[str, str] | None = None, unschedulable: bool = False, heartbeat: str = "t0",
      annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = node_obj(name, labels=labels, taints=taints, unschedulable=unschedulable, ready=ready)
    obj["metadata"].update({"uid": uid, "resourceVersion": str(rv), "annotations": annotations or {}})
    obj["status"]["conditions"][0]["lastHeartbeatTime"] = heartbeat
    return obj


def run(seed: list[dict[str, Any]], steps: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    c = Classifier()
    c.seed(seed)
    out = []
    for action, obj in steps:
        out.extend((e.type, e.node) for e in c.observe(action, obj))
    return out


CASES = [
    ("heartbeat only", [n(1)], [("update", n(2, heartbeat="t1")), ("update", n(3, heartbeat="t2"))], []),
    ("annotation change", [n(1)], [("update", n(2, annotations={"a": "b"}))], []),
    ("redelivery same rv", [n(1)], [("update", n(2, taints=[UNREACHABLE])), ("update", n(2, taints=[UNREACHABLE]))],
     [(TAINTS_CHANGED, "n1")]),
    ("older rv out of order", [n(1)],
     [("update", n(3, taints=[UNREACHABLE])), ("update", n(2, taints=[]))], [(TAINTS_CHANGED, "n1")]),
    ("non-numeric rv compared for equality only", [n(1)],
     [("update", {**n(1), "metadata": {**n(1)["metadata"], "resourceVersion": "abc"}}),
      ("update", {**n(1, labels={"x": "1"}), "metadata": {**n(1, labels={"x": "1"})["metadata"], "resourceVersion": "abc"}})],
     []),
    ("flap NotReady -> Ready", [n(1)],
     [("update", n(2, ready=False)), ("update", n(3, ready=True)), ("update", n(4, ready=False)),
      ("update", n(5, ready=True))], [(NODE_READY, "n1"), (NODE_READY, "n1")]),
    ("cordon then uncordon", [n(1)],
     [("update", n(2, unschedulable=True)), ("update", n(3, unschedulable=False))], [(NODE_READY, "n1")]),
    ("uncordon while NotReady is not ready", [n(1, unschedulable=True, ready=False)],
     [("update", n(2, unschedulable=False, ready=False))], []),
    ("taint added and removed", [n(1)],
     [("update", n(2, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])), ("update", n(3))],
     [(TAINTS_CHANGED, "n1"), (NODE_READY, "n1"), (TAINTS_CHANGED, "n1")]),  # usable again on removal
    ("PreferNoSchedule and the default NoExecute tolerations never make a node unusable", [n(1)],
     [("update", n(2, taints=[{"key": "k", "effect": "PreferNoSchedule"}, UNREACHABLE])), ("update", n(3))],
     [(TAINTS_CHANGED, "n1"), (TAINTS_CHANGED, "n1")]),
    ("taint order is not a change", [n(1, taints=[UNREACHABLE, NOT_READY_TAINT])],
     [("update", n(2, taints=[NOT_READY_TAINT, UNREACHABLE]))], []),
    ("label edit", [n(1, labels={"zone": "a"})], [("update", n(2, labels={"zone": "b"}))], [(LABELS_CHANGED, "n1")]),
    ("taints and labels in one write", [n(1)],
     [("update", n(2, labels={"x": "1"}, taints=[UNREACHABLE]))], [(TAINTS_CHANGED, "n1"), (LABELS_CHANGED, "n1")]),
    ("brand new node: added, then ready, then taint removal", [n(1, name="a", uid="ua")],
     [("add", n(5, ready=False, taints=[NOT_READY_TAINT])), ("update", n(6, ready=True, taints=[NOT_READY_TAINT])),
      ("update", n(7, ready=True))],
     [(NODE_ADDED, "n1"), (NODE_READY, "n1"), (TAINTS_CHANGED, "n1")]),
    ("add for a cached node is an update", [n(1)], [("add", n(1)), ("add", n(2, heartbeat="x"))], []),
    ("cold start: seeded nodes emit nothing", [n(1), n(1, name="n2", uid="u2")], [("update", n(1, name="n2", uid="u2"))],
     []),
    ("update of an unknown node is an add", [], [("update", n(4))], [(NODE_ADDED, "n1")]),
    ("delete then re-add (new uid)", [n(1)], [("delete", n(2)), ("add", n(3, uid="u9"))], [(NODE_ADDED, "n1")]),
    ("late update after delete is ignored", [n(1)], [("delete", n(5)), ("update", n(4, labels={"x": "y"}))], []),
    ("same name, new uid without delete is a new node", [n(1)], [("update", n(2, uid="u2"))], [(NODE_ADDED, "n1")]),
    ("watch verbs are accepted", [n(1)], [("MODIFIED", n(2, labels={"x": "1"})), ("DELETED", n(3))],
     [(LABELS_CHANGED, "n1")]),
]


@pytest.mark.parametrize("seed,steps,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_sequences(seed: list[dict[str, Any]], steps: list[tuple[str, dict[str, Any]]],
                   expected: list[tuple[str, str]]) -> None:
    assert run(seed, steps) == expected


def test_payloads_carry_only_changed_fields() -> None:
    c = Classifier()
    c.seed([n(1, labels={"zone": "a", "keep": "1", "gone": "x"}, taints=[UNREACHABLE])])
    events = c.observe("update", n(2, labels={"zone": "b", "keep": "1", "new": "y"}, taints=[]))
    by_type = {e.type: e for e in events}
    assert by_type[LABELS_CHANGED].data == {
        "node": "n1", "before": {"gone": "x", "new": None, "zone": "a"}, "after": {"gone": None, "new": "y", "zone": "b"}}
    assert by_type[TAINTS_CHANGED].data == {
        "node": "n1", "before": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        "after": {"taints": []}}
    # ids are stable per change, so a downstream dedupe on (source, id) works across retries
    assert by_type[LABELS_CHANGED].id == "u1-2-labels"


def test_ready_payload_and_added_payload() -> None:
    c = Classifier()
    c.seed([])
    (added,) = c.observe("add", n(1, ready=False, taints=[NOT_READY_TAINT]))
    assert added.data["after"]["ready"] is False
    assert added.data["after"]["taints"] == [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    (ready, taints) = c.observe("update", n(2))
    assert added.data["after"]["usable"] is False
    assert added.data["after"]["unusable"] == "NotReady; tainted node.kubernetes.io/not-ready:NoSchedule"
    assert ready.data == {"node": "n1",
                          "before": {"ready": False, "unschedulable": False, "taints": [NOT_READY_TAINT],
                                     "usable": False,
                                     "unusable": "NotReady; tainted node.kubernetes.io/not-ready:NoSchedule"},
                          "after": {"ready": True, "unschedulable": False, "taints": [], "usable": True}}
    assert taints.type == TAINTS_CHANGED


def test_resync_reports_changes_made_during_a_gap_and_drops_vanished_nodes() -> None:
    c = Classifier()
    c.seed([n(1), n(1, name="n2", uid="u2")])
    events = c.resync([n(5, taints=[UNREACHABLE]), n(1, name="n3", uid="u3")])
    assert [(e.type, e.node) for e in events] == [(TAINTS_CHANGED, "n1"), (NODE_ADDED, "n3")]
    assert c.get("n2") is None and len(c) == 2


def test_seeded_flag() -> None:
    c = Classifier()
    assert not c.seeded
    c.seed([])
    assert c.seeded


@pytest.mark.parametrize("obj,field", [
    ("x", "data"),
    ({"kind": "Pod", "metadata": {"name": "p"}}, "data.kind"),
    ({"metadata": {}}, "data.metadata.name"),
    ({"metadata": {"name": "a"}, "spec": {"taints": "bad"}}, "data.spec.taints"),
    ({"metadata": {"name": "a", "labels": ["x"]}}, "data.metadata.labels"),
], ids=["not an object", "not a node", "no name", "taints not a list", "labels not a map"])
def test_bad_objects_name_the_field(obj: Any, field: str) -> None:
    with pytest.raises(NodeInputError) as err:
        Classifier().observe("update", obj)
    assert err.value.field == field


def test_unknown_action() -> None:
    with pytest.raises(NodeInputError):
        Classifier().observe("patch", n(1))


def test_digest_ignores_heartbeat_fields() -> None:
    a, b = n(1, heartbeat="x"), copy.deepcopy(n(1, heartbeat="y"))
    assert digest_of(a) == digest_of(b)

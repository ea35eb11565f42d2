"""A node deleted and re-created under the same name, with events redelivered late and reordered
(issue 22): what Knative's dispatcher really does, retrying a failed delivery for ~15 s while later
events overtake it. Every sequence here must end with the live incarnation cached, no spurious
``node.added``, the live node's changes classified as changes, and its delete honoured; and the
classifier function's periodic re-LIST must drop nodes deleted while no event could say so.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kdesched.evictor.metrics import REGISTRY
from kdesched.reactor.events.classifier import Classifier
from kdesched.reactor.events.routing import LABELS_CHANGED, NODE_ADDED, TAINTS_CHANGED
from kdesched_functions.classifier import ClassifierFunction, resync_seconds_from

from tests.builders import node_obj

UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


def n(rv: int | str, uid: str, *, name: str = "n1", created: str = "", labels: dict[str, str] | None = None,
      taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    obj = node_obj(name, labels=labels, taints=taints)
    obj["metadata"].update({"uid": uid, "resourceVersion": str(rv)})
    if created:
        obj["metadata"]["creationTimestamp"] = created
    return obj


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def emitted(c: Classifier, steps: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for action, obj in steps:
        out.extend((e.type, e.node) for e in c.observe(action, obj))
    return out


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("kdesched_classifier_dropped_total", {"reason": reason}) or 0.0


def seeded(*nodes: dict[str, Any], clock: Clock | None = None) -> Classifier:
    c = Classifier(clock=clock or Clock())
    c.seed(list(nodes))
    return c


# --- the four effects of issue 22, one test each ----------------------------------------------------


def test_late_event_of_the_dead_incarnation_emits_nothing_and_keeps_the_live_one() -> None:
    """delete u1, add u2, then a retried update of u1 (delivered last): no node.added, no overwrite."""
    c = seeded(n(10, "u1"))
    assert emitted(c, [("delete", n(11, "u1")), ("add", n(12, "u2"))]) == [(NODE_ADDED, "n1")]
    assert emitted(c, [("update", n(10, "u1", labels={"old": "state"}))]) == []
    live = c.get("n1")
    assert live is not None and live.uid == "u2" and live.resource_version == "12"


def test_the_live_nodes_next_label_change_is_a_label_change() -> None:
    c = seeded(n(10, "u1"))
    emitted(c, [("delete", n(11, "u1")), ("add", n(12, "u2")), ("update", n(10, "u1")), ("add", n(9, "u1"))])
    assert emitted(c, [("update", n(13, "u2", labels={"pool": "blue"}))]) == [(LABELS_CHANGED, "n1")]


def test_a_later_delete_of_the_live_node_is_honoured() -> None:
    c = seeded(n(10, "u1"))
    emitted(c, [("delete", n(11, "u1")), ("add", n(12, "u2")), ("update", n(10, "u1"))])
    assert emitted(c, [("delete", n(14, "u2"))]) == []
    assert c.get("n1") is None and len(c) == 0
    assert c.dead_uids("n1") == ("u1", "u2")


def test_late_event_before_the_new_incarnation_arrives_is_not_a_new_node() -> None:
    """The tombstone must hold while nothing is cached too, and a later re-create still counts."""
    c = seeded(n(10, "u1"))
    assert emitted(c, [("delete", n(11, "u1")), ("update", n(10, "u1", taints=[UNREACHABLE])),
                       ("add", n(10, "u1"))]) == []
    assert c.get("n1") is None
    assert emitted(c, [("add", n(12, "u2"))]) == [(NODE_ADDED, "n1")]


# --- reordering -------------------------------------------------------------------------------------


def test_new_incarnation_overtaking_the_old_delete() -> None:
    """add u2 arrives before delete u1: u2 is a new node (u1 dies with it); the late delete of u1 and
    a late update of u1 change nothing."""
    c = seeded(n(10, "u1"))
    assert emitted(c, [("add", n(12, "u2"))]) == [(NODE_ADDED, "n1")]
    assert c.dead_uids("n1") == ("u1",)
    assert emitted(c, [("delete", n(11, "u1")), ("update", n(10, "u1", labels={"x": "1"}))]) == []
    live = c.get("n1")
    assert live is not None and live.uid == "u2"
    assert emitted(c, [("update", n(13, "u2", taints=[UNREACHABLE]))]) == [(TAINTS_CHANGED, "n1")]


def test_delete_of_the_new_incarnation_overtaking_its_add() -> None:
    """u1 cached; u1 deleted, u2 created and deleted; u2's delete arrives first: both are dead,
    nothing is cached, and neither u2's add nor u1's late events bring a node back."""
    c = seeded(n(10, "u1", created="2026-01-01T00:00:00Z"))
    assert emitted(c, [("delete", n(15, "u2", created="2026-01-01T00:00:05Z"))]) == []
    assert c.get("n1") is None and set(c.dead_uids("n1")) == {"u1", "u2"}
    assert emitted(c, [("add", n(13, "u2", created="2026-01-01T00:00:05Z")), ("delete", n(11, "u1")),
                       ("update", n(10, "u1"))]) == []
    assert len(c) == 0


def test_old_incarnation_never_seen_deleted_is_recognised_by_creation_time() -> None:
    """The cache was seeded with u2 (LIST after the re-create); a retried event of u1 arrives, whose
    delete the classifier never saw: older creationTimestamp -> dropped, and u1 is dead from now on."""
    before = dropped("older-incarnation")
    c = seeded(n("x2", "u2", created="2026-01-01T00:00:07Z"))
    assert emitted(c, [("update", n("x1", "u1", created="2026-01-01T00:00:01Z", labels={"a": "b"}))]) == []
    live = c.get("n1")
    assert live is not None and live.uid == "u2"
    assert c.dead_uids("n1") == ("u1",)
    assert dropped("older-incarnation") == before + 1


def test_old_incarnation_within_the_same_second_is_recognised_by_resource_version() -> None:
    c = seeded(n(20, "u2", created="2026-01-01T00:00:07Z"))
    assert emitted(c, [("update", n(18, "u1", created="2026-01-01T00:00:07Z"))]) == []
    live = c.get("n1")
    assert live is not None and live.uid == "u2"


def test_resource_version_outranks_a_skewed_creation_time() -> None:
    """Two API servers with skewed clocks: the re-created node carries an EARLIER creationTimestamp
    than the one it replaces. Integer resourceVersions (etcd's one counter) still order them: the
    live node is a new node, not taken for a late event (which would ignore it for good)."""
    c = seeded(n(20, "u1", created="2026-01-01T00:00:09Z"))
    assert emitted(c, [("add", n(25, "u2", created="2026-01-01T00:00:08Z"))]) == [(NODE_ADDED, "n1")]
    live = c.get("n1")
    assert live is not None and live.uid == "u2" and c.dead_uids("n1") == ("u1",)


def test_undecidable_uid_change_is_still_a_new_node() -> None:
    """Neither creation time nor an integer resourceVersion orders them, and the old uid was never
    seen dead: the change is taken as a re-create (the only safe default; the sweep is the net)."""
    c = seeded(n("b", "u1"))
    assert emitted(c, [("update", n("a", "u2"))]) == [(NODE_ADDED, "n1")]
    assert c.dead_uids("n1") == ("u1",)


def test_delete_of_an_unordered_other_uid_keeps_the_cached_node() -> None:
    c = seeded(n("b", "u2"))
    assert emitted(c, [("delete", n("a", "u1"))]) == []
    live = c.get("n1")
    assert live is not None and live.uid == "u2"
    assert c.dead_uids("n1") == ("u1",)
    assert emitted(c, [("add", n("a", "u1"))]) == []  # and the deleted one cannot come back


def test_redelivered_delete_and_duplicates_are_harmless() -> None:
    c = seeded(n(10, "u1"))
    assert emitted(c, [("delete", n(11, "u1")), ("delete", n(11, "u1")), ("add", n(12, "u2")),
                       ("add", n(12, "u2")), ("delete", n(11, "u1"))]) == [(NODE_ADDED, "n1")]
    assert c.get("n1") is not None


def test_preview_changes_nothing() -> None:
    """The function previews (commit=False), hands the events over, then commits: a preview must not
    bury a uid nor count a drop."""
    c = seeded(n(10, "u1"))
    before = dropped("redelivered")
    assert [e.type for e in c.observe("add", n(12, "u2"), commit=False)] == [NODE_ADDED]
    assert c.observe("update", n(10, "u1"), commit=False) == []
    assert c.dead_uids("n1") == () and dropped("redelivered") == before
    live = c.get("n1")
    assert live is not None and live.uid == "u1"


# --- drops are logged and counted ---------------------------------------------------------------------


def test_drops_are_logged_at_debug_and_counted_by_reason(caplog: pytest.LogCaptureFixture) -> None:
    reasons = ("dead-uid", "redelivered", "older")
    before = {r: dropped(r) for r in reasons}
    c = seeded(n(10, "u1"), n(10, "u9", name="n2"))
    with caplog.at_level(logging.DEBUG, logger="kdesched.reactor.classifier"):
        emitted(c, [("update", n(12, "u9", name="n2")), ("update", n(12, "u9", name="n2")),
                    ("update", n(11, "u9", name="n2")), ("delete", n(13, "u1")), ("update", n(12, "u1"))])
    assert {r: dropped(r) - before[r] for r in reasons} == {"dead-uid": 1, "redelivered": 1, "older": 1}
    text = caplog.text
    assert "node n1: dropped a stale update event (uid u1, resourceVersion 12): dead-uid" in text
    assert "node n2: dropped a stale update event (uid u9, resourceVersion 12): redelivered" in text


# --- bounds -------------------------------------------------------------------------------------------


def test_dead_uids_are_bounded_per_name_oldest_forgotten_first() -> None:
    c = Classifier(clock=Clock(), max_dead_per_name=3)
    for i in range(5):
        c.observe("delete", n(i, f"u{i}"))
    assert c.dead_uids("n1") == ("u2", "u3", "u4")


def test_dead_names_are_bounded_least_recently_buried_forgotten_first() -> None:
    c = Classifier(clock=Clock(), max_tombstones=2)
    for name in ("a", "b", "c"):
        c.observe("delete", n(1, f"u-{name}", name=name))
    c.observe("delete", n(2, "u-b2", name="b"))  # b buried again: now the most recent
    c.observe("delete", n(1, "u-d", name="d"))
    assert (c.dead_uids("a"), c.dead_uids("c")) == ((), ())
    assert c.dead_uids("b") == ("u-b", "u-b2") and c.dead_uids("d") == ("u-d",)


def test_dead_uids_are_pruned_by_age() -> None:
    clock = Clock()
    c = Classifier(clock=clock, tombstone_seconds=60)
    c.observe("delete", n(1, "u1"))
    clock.now += 30
    c.observe("delete", n(1, "v1", name="n2"))
    clock.now += 31  # u1 is 61 s old, v1 31 s
    assert c.dead_uids("n1") == () and c.dead_uids("n2") == ("v1",)
    # forgotten: an event of u1 now counts as a node again (after the retries have long stopped)
    assert emitted(c, [("add", n(1, "u1"))]) == [(NODE_ADDED, "n1")]


# --- re-sync --------------------------------------------------------------------------------------------


def test_resync_drops_a_node_deleted_unseen_and_its_late_events() -> None:
    c = seeded(n(1, "u1"), n(1, "u2", name="n2"))
    assert c.resync([n(1, "u2", name="n2")]) == []
    assert c.get("n1") is None and len(c) == 1 and c.dead_uids("n1") == ("u1",)
    assert emitted(c, [("update", n(2, "u1", labels={"x": "y"}))]) == []


def test_resync_keeps_what_was_cached_after_its_list_began() -> None:
    clock = Clock()
    c = seeded(n(1, "u1"), clock=clock)
    listed_at = clock.now
    clock.now += 1
    assert emitted(c, [("add", n(5, "u3", name="n3"))]) == [(NODE_ADDED, "n3")]  # created after the LIST
    assert emitted(c, [("delete", n(6, "u1")), ("add", n(7, "u4"))]) == [(NODE_ADDED, "n1")]  # re-created
    # the LIST (sent before those events) still has u1 and no n3
    assert c.resync([n(1, "u1")], listed_at=listed_at) == []
    n1, n3 = c.get("n1"), c.get("n3")
    assert n1 is not None and n1.uid == "u4" and n3 is not None and n3.uid == "u3"


def test_resync_replaces_an_incarnation_and_reports_the_gap() -> None:
    c = seeded(n(1, "u1"))
    events = c.resync([n(9, "u2", taints=[UNREACHABLE])])
    assert [(e.type, e.node) for e in events] == [(NODE_ADDED, "n1")]
    assert c.dead_uids("n1") == ("u1",)


def test_resync_skips_a_listed_uid_already_seen_deleted() -> None:
    c = seeded(n(1, "u1"))
    c.observe("delete", n(2, "u1"))
    assert c.resync([n(1, "u1")]) == [] and len(c) == 0
    assert c.seed([n(1, "u1")]) == 0  # a seed from a LIST older than the delete, likewise


class Nodes:
    """A stand-in for KubeClient.list_raw: the nodes the API server holds now."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.nodes = list(nodes)
        self.lists = 0
        self.fail = False

    def list_raw(self, kind: str) -> Any:
        assert kind == "Node"
        self.lists += 1
        if self.fail:
            raise RuntimeError("API server down")
        return type("Listing", (), {"items": list(self.nodes), "resource_version": ""})()


class Posted:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, url: str, function: str, replies: list[Any]) -> None:
        self.calls.append((url, [r.type for r in replies]))


def test_function_relists_on_the_first_event_after_the_interval() -> None:
    """The classifier function (the one instance behind the Trigger) re-LISTs on the first event
    once KDESCHED_CLASSIFIER_RESYNC_SECONDS have passed since its last LIST: a node deleted while the
    adapter was down leaves the cache (and /readyz's count), a change made unseen is posted."""
    clock = Clock()
    api = Nodes(n(1, "u1"), n(1, "u2", name="n2"))
    posted = Posted()
    fn = ClassifierFunction(api, "http://broker", posted, resync_seconds=60, clock=clock)
    assert fn.seed() and len(fn.classifier) == 2 and api.lists == 1
    api.nodes = [n(3, "u2", name="n2", taints=[UNREACHABLE])]  # n1 deleted and n2 tainted, unseen
    clock.now += 59
    fn.resync_if_due()
    assert api.lists == 1 and len(fn.classifier) == 2  # not due yet
    clock.now += 1
    fn.resync_if_due()
    assert api.lists == 2 and len(fn.classifier) == 1 and fn.ready() == (True, "node cache seeded (1 nodes)")
    assert posted.calls == [("http://broker", [TAINTS_CHANGED])]
    fn.resync_if_due()
    assert api.lists == 2  # the interval starts again


def test_function_relist_failure_is_logged_and_retried_after_the_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    api = Nodes(n(1, "u1"))
    fn = ClassifierFunction(api, "", Posted(), resync_seconds=10, clock=clock)
    fn.seed()
    api.fail, api.nodes = True, []
    clock.now += 10
    fn.resync_if_due()
    assert "re-listing nodes failed" in caplog.text and len(fn.classifier) == 1
    api.fail = False
    fn.resync_if_due()
    assert api.lists == 2  # not on every event: after the interval
    clock.now += 10
    fn.resync_if_due()
    assert api.lists == 3 and len(fn.classifier) == 0


def test_function_resync_zero_never_relists() -> None:
    clock = Clock()
    api = Nodes(n(1, "u1"))
    fn = ClassifierFunction(api, "", Posted(), resync_seconds=0, clock=clock)
    fn.seed()
    clock.now += 10**6
    fn.resync_if_due()
    assert api.lists == 1


@pytest.mark.parametrize("raw,want", [("", 300.0), ("0", 0.0), ("12.5", 12.5)])
def test_resync_seconds_setting(raw: str, want: float) -> None:
    assert resync_seconds_from({"KDESCHED_CLASSIFIER_RESYNC_SECONDS": raw} if raw else {}) == want


@pytest.mark.parametrize("raw", ["-1", "soon", "nan", "inf"])
def test_bad_resync_seconds_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=r"KDESCHED_CLASSIFIER_RESYNC_SECONDS: must be a number of seconds >= 0"):
        resync_seconds_from({"KDESCHED_CLASSIFIER_RESYNC_SECONDS": raw})

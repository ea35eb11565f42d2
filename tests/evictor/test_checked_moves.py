"""Checked moves (pure): following each evicted pod's replacement when the ledger settles, the
wasted-move rules one by one, the per-strategy exponential back-off and its record, and the gate's
refusal. The real control-plane target is tests/realk8s/test_wasted_moves.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kdesched.admission.control import RunContext
from kdesched.admission.pipeline import AdmissionSettings, Pipeline, RunAdmission
from kdesched.evictor.ledger import (
    ACHIEVED,
    MAX_BACKOFFS,
    PENDING_TIMEOUT,
    UNKNOWN,
    WASTED,
    Admission,
    Backoff,
    Ledger,
    backoff_key,
    backoff_seconds,
)
from kdesched.evictor.reasons import Reason
from kdesched.model.records import Node, Pod
from kdesched.model.snapshot import Snapshot
from kdesched.policy.errors import PolicyError
from kdesched.reactor.io.whynot import BACKOFF, classify
from kdesched.reactor.run.settings import parse_settings

from tests.builders import NOW, node_obj, pod_obj
from tests.evictor.test_pacing import TAINT, web

T0 = NOW.timestamp()
KEY = "Deployment/default/web"
TAINTS, AFFINITY, DUPLICATES, LOW = ("RemovePodsViolatingNodeTaints", "RemovePodsViolatingNodeAffinity",
                                     "RemoveDuplicates", "LowNodeUtilization")
BASE, CAP = 300.0, 3600.0


def wpod(name: str, node: str, *, ready: bool = True, created: float = -3600, **kw: Any) -> Pod:
    return Pod.from_api(web(name, node, ready=ready, created=created, **kw))


def nodes(*objs: dict[str, Any]) -> dict[str, Node]:
    return {o["metadata"]["name"]: Node.from_api(o) for o in objs}


def moved(pods: list[Pod], strategy: str, *, at: float = T0, destination: str = "n2", ready: int = 2) -> Ledger:
    """A ledger with ``pods`` in flight for ``strategy`` (the workload had ``ready`` Ready pods)."""
    return Ledger().admit([Admission(p, strategy, False, "node:n1:" + strategy, destination, ready, ready)
                           for p in pods], at)


def ready_pod(name: str, node: str, created: float, ready: float) -> Pod:
    """A pod of ``web`` created and Ready ``created`` and ``ready`` seconds after T0 (whole seconds, as
    the API server stamps them)."""
    raw = web(name, node, created=created)
    stamp = datetime.fromtimestamp(T0 + ready, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}]
    return Pod.from_api(raw)


CLUSTER = nodes(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))


# -- following the replacement ---------------------------------------------------------------------

def test_a_replacement_ready_elsewhere_is_an_achieved_move_with_its_time_to_ready() -> None:
    a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
    ledger = moved([a], TAINTS)
    settled = ledger.settle({KEY: [b, wpod("web-c", "n3", created=2)]}, T0 + 9, 120, CLUSTER)
    (c,) = settled.checked
    assert (c.outcome, c.source, c.destination, c.landed, c.seconds) == (ACHIEVED, "n1", "n2", "n3", 9.0)
    assert c.to_json()["destination"] == "n2" and c.to_json()["landed"] == "n3" and settled.changed
    assert settled.ledger.backoffs == {}


def test_the_ready_condition_time_is_the_time_to_ready() -> None:
    ready_at = (NOW + timedelta(seconds=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    raw = web("web-c", "n3", created=1)
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]
    r = Pod.from_api(raw)
    (c,) = moved([wpod("web-a", "n1")], TAINTS, ready=1).settle({KEY: [r]}, T0 + 30, 120, CLUSTER).checked
    assert c.seconds == 4.0


def test_landing_back_on_the_node_it_left_is_wasted_unless_the_strategy_wants_a_fresh_pod() -> None:
    for strategy in (TAINTS, AFFINITY, DUPLICATES, LOW, "RemovePodsViolatingTopologySpreadConstraint"):
        settled = moved([wpod("web-a", "n1")], strategy).settle(
            {KEY: [wpod("web-b", "n2"), wpod("web-c", "n1", created=3)]}, T0 + 5, 120, CLUSTER)
        (c,) = settled.checked
        assert (c.outcome, c.why) == (WASTED, "landed back on node n1"), strategy
        assert settled.ledger.backoffs[backoff_key(KEY, strategy)] == Backoff(1, T0 + 5, "landed back on node n1")
    for strategy in ("PodLifeTime", "RemoveFailedPods", "RemovePodsHavingTooManyRestarts"):
        (c,) = moved([wpod("web-a", "n1")], strategy).settle(
            {KEY: [wpod("web-b", "n2"), wpod("web-c", "n1", created=3)]}, T0 + 5, 120, CLUSTER).checked
        assert c.outcome == ACHIEVED, strategy  # a fresh pod was the purpose, wherever it runs


MAINTENANCE = nodes(node_obj("n1", taints=[TAINT]), node_obj("n2", taints=[TAINT]), node_obj("n3"),
                    node_obj("n4", taints=[{"key": "gpu", "value": "yes", "effect": "NoExecute"}]))


def test_taints_rule_a_node_the_move_drains_that_still_has_the_taint() -> None:
    # a maintenance of n1 and n2: web-a (n1) and web-b (n2) in flight; web-a's replacement lands on n2
    ledger = moved([wpod("web-a", "n1"), wpod("web-b", "n2")], TAINTS, ready=3)
    pods = [wpod("web-x", "n3"), wpod("web-c", "n2", created=3), wpod("web-d", "n3", created=4)]
    checked = {c.pod: c for c in ledger.settle({KEY: pods}, T0 + 5, 120, MAINTENANCE).checked}
    assert checked["default/web-a"].outcome == WASTED
    assert checked["default/web-a"].why == ("landed on node n2, which the same move is draining for its taint "
                                            "maintenance=true:NoSchedule")
    assert checked["default/web-b"].outcome == ACHIEVED
    # tolerated there (the taint is not why the move drains it for this pod): achieved
    tolerant = Pod.from_api(web("web-c", "n2", created=3, tolerations=[{"key": "maintenance", "operator": "Exists"}]))
    checked = {c.pod: c for c in ledger.settle({KEY: [pods[0], tolerant, pods[2]]}, T0 + 5, 120, MAINTENANCE).checked}
    assert checked["default/web-a"].outcome == ACHIEVED


def test_a_node_tainted_after_the_replacement_landed_is_not_a_wasted_move() -> None:
    # a rolling maintenance: n1 first; the replacement lands on n4, which the next step taints (the
    # scheduler never places a pod on an untolerated taint, so it came after): a new reason, not a waste
    (c,) = moved([wpod("web-a", "n1")], TAINTS).settle(
        {KEY: [wpod("web-b", "n3"), wpod("web-c", "n4", created=3)]}, T0 + 5, 120, MAINTENANCE).checked
    assert c.outcome == ACHIEVED and c.landed == "n4"


def test_affinity_rule_a_node_the_move_drains_that_still_fails_the_affinity() -> None:
    world = nodes(node_obj("n1"), node_obj("n2"), node_obj("n3", labels={"disk": "ssd"}))
    sel = {"disk": "ssd"}
    ledger = moved([wpod("web-a", "n1", node_selector=sel), wpod("web-b", "n2", node_selector=sel)], AFFINITY, ready=2)
    pods = [wpod("web-c", "n2", created=3, node_selector=sel), wpod("web-d", "n3", created=4, node_selector=sel)]
    checked = {c.pod: c for c in ledger.settle({KEY: pods}, T0 + 5, 120, world).checked}
    assert checked["default/web-a"].outcome == WASTED and "failing its node affinity" in checked["default/web-a"].why
    assert checked["default/web-b"].outcome == ACHIEVED
    # a node that fails the affinity but is not one the move drains: the label went after the placement
    (c,) = moved([wpod("web-a", "n1", node_selector=sel)], AFFINITY, ready=1).settle(
        {KEY: [wpod("web-c", "n2", created=3, node_selector=sel)]}, T0 + 5, 120, world).checked
    assert c.outcome == ACHIEVED


def test_a_node_the_move_took_on_after_the_eviction_is_not_a_wasted_landing() -> None:
    # web-a leaves n1 (tainted); its replacement lands on n2; then n2 is tainted too and the same
    # move holds web-b there: n2 is a node the move drains now, but it was fine at the placement
    ledger = moved([wpod("web-a", "n1")], TAINTS, ready=2)
    ledger = ledger.admit([Admission(wpod("web-b", "n2"), TAINTS, True, "node:n2:" + TAINTS, "", 2, 2)], T0 + 4)
    pods = [wpod("web-b", "n2"), wpod("web-c", "n2", created=3)]
    (c,) = ledger.settle({KEY: pods}, T0 + 6, 120, MAINTENANCE).checked
    assert c.outcome == ACHIEVED and c.landed == "n2"


def test_duplicates_and_utilization_rule_a_node_the_same_move_takes_pods_off() -> None:
    for strategy in (DUPLICATES, LOW):
        a, b = wpod("web-a", "n1"), wpod("web-b", "n2")
        ledger = moved([a, b], strategy, ready=3)
        pods = [wpod("web-x", "n3"), wpod("web-c", "n2", created=3), wpod("web-d", "n3", created=4)]
        checked = {c.pod: c for c in ledger.settle({KEY: pods}, T0 + 5, 120, CLUSTER).checked}
        # web-a's replacement (the earliest) landed on n2, which web-b was taken off
        assert checked["default/web-a"].why == "landed on node n2, which the same move is taking pods off", strategy
        assert checked["default/web-b"].outcome == ACHIEVED  # n3 already had web-x: not a node the move drains


def test_a_replacement_still_pending_at_the_timeout_is_wasted() -> None:
    ledger = moved([wpod("web-a", "n1")], TAINTS)
    pending = wpod("web-c", "", ready=False, created=2, phase="Pending")
    assert not ledger.settle({KEY: [wpod("web-b", "n2"), pending]}, T0 + 119, 120, CLUSTER).checked
    settled = ledger.settle({KEY: [wpod("web-b", "n2"), pending]}, T0 + 121, 120, CLUSTER)
    (c,) = settled.checked
    assert c.outcome == PENDING_TIMEOUT and c.why.startswith("replacement default/web-c still Pending 121s")
    assert settled.ledger.backoffs[backoff_key(KEY, TAINTS)].wasted == 1
    # no replacement at all (scaled down, or the controller is gone): pending too
    (none,) = ledger.settle({KEY: [wpod("web-b", "n2")]}, T0 + 121, 120, CLUSTER).checked
    assert none.outcome == PENDING_TIMEOUT and none.why.startswith("no replacement")
    # without every pod nothing can be told: the move expires unchecked
    assert not ledger.settle(None, T0 + 121, 120).checked


def test_a_pod_that_existed_before_the_eviction_is_not_its_replacement() -> None:
    # the workload is back at its count because an older pod became Ready: the move cannot be told
    (c,) = moved([wpod("web-a", "n1")], TAINTS, ready=1).settle(
        {KEY: [wpod("web-b", "n1", created=-60)]}, T0 + 5, 120, CLUSTER).checked
    assert c.outcome == UNKNOWN and c.landed == ""
    assert moved([wpod("web-a", "n1")], TAINTS, ready=1).settle(
        {KEY: [wpod("web-b", "n1", created=-60)]}, T0 + 5, 120, CLUSTER).ledger.backoffs == {}


def test_pods_of_the_admission_second_that_were_ready_before_are_not_replacements() -> None:
    """creationTimestamp has second resolution: a Deployment's original pods created a moment before
    the eviction was admitted must not be taken for its replacement (on a real control plane that
    reported RemoveDuplicates' move as landed back on its node, and backed the workload off)."""
    ledger = moved([wpod("web-a", "n1")], DUPLICATES, at=T0 + 0.5, ready=3)
    before = [ready_pod("web-b", "n1", -1, -1), ready_pod("web-c", "n1", 0, 0)]  # Ready at T0, before T0 + 0.5
    (c,) = ledger.settle({KEY: [*before, ready_pod("web-d", "n2", 1, 2)]}, T0 + 3, 120, CLUSTER).checked
    assert (c.outcome, c.landed) == (ACHIEVED, "n2")
    # 3 pods when the move began, back at 2 Ready without a new one: web-c (created and Ready in the
    # admission's second) is one of the originals, not a replacement
    back = Ledger().admit([Admission(wpod("web-a", "n1"), DUPLICATES, False, "node:n1:" + DUPLICATES, "n2", 3, 2)],
                          T0 + 0.5)
    (c,) = back.settle({KEY: before}, T0 + 3, 120, CLUSTER).checked
    assert c.outcome == UNKNOWN and c.landed == ""  # (before the fix: "landed back on node n1", wasted)


def test_a_fast_replacement_ready_in_the_admission_second_is_found() -> None:
    """A replacement created and Ready within the second its eviction was admitted (a fast kubelet):
    the Ready time's second is the admission's, yet it is the replacement (the workload has one pod
    more than it had left). Before, it was taken for a pod that existed already: 'unknown'."""
    raw = web("web-d", "n2", created=0)
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                    "lastTransitionTime": datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}]
    fast = Pod.from_api(raw)
    ledger = Ledger().admit([Admission(wpod("web-a", "n1"), TAINTS, False, "node:n1:" + TAINTS, "n2", 3, 3)], T0 + 0.2)
    others = [wpod("web-b", "n3"), wpod("web-c", "n3")]
    (c,) = ledger.settle({KEY: [*others, fast]}, T0 + 2, 120, CLUSTER).checked
    assert (c.outcome, c.landed) == (ACHIEVED, "n2")


def test_a_replacement_created_in_the_second_before_an_admission_stamped_a_little_ahead_is_found() -> None:
    """The admission's time is the API server's clock as this process estimates it (kdesched.kube.clock):
    right after the estimate restarted its bounds are a second wide, so the stamp may be a little
    ahead of the server's. An eviction admitted at 0.95 s into a second and stamped 0.15 s ahead has a
    replacement whose creationTimestamp is in the second before the stamp's. Before, it was no
    replacement at all: the move settled 'unknown', the wasted-move back-off lapsed, and a
    1-replica workload pinned back on its tainted node was evicted again at once (the CI at 0de3ba2:
    3 evictions in 40 s under a 20 s base)."""
    ledger = moved([wpod("web-a", "n1")], TAINTS, at=T0 + 1.1, ready=1)
    back = ready_pod("web-b", "n1", 0, 2)  # created at T0 + 0.97 by the server's clock
    settled = ledger.settle({KEY: [back]}, T0 + 3, 120, CLUSTER)
    (c,) = settled.checked
    assert (c.outcome, c.landed) == (WASTED, "n1") and c.why == "landed back on node n1"
    assert settled.ledger.backoffs[backoff_key(KEY, TAINTS)].wasted == 1
    # a clear replacement (created after the stamp's second) still wins over such a pod
    three = moved([wpod("web-a", "n1")], TAINTS, at=T0 + 1.1, ready=3)
    (c,) = three.settle({KEY: [ready_pod("web-b", "n1", 0, 2), wpod("web-c", "n3"), ready_pod("web-d", "n2", 2, 3)]},
                        T0 + 4, 120, CLUSTER).checked
    assert (c.outcome, c.landed) == (ACHIEVED, "n2")
    # and it is taken only when the workload has a pod more than it had left (3 pods, back at 2 Ready
    # without a new one: web-b is one of the originals)
    short = Ledger().admit([Admission(wpod("web-a", "n1"), TAINTS, False, "node:n1:" + TAINTS, "n2", 3, 2)],
                           T0 + 1.1)
    (c,) = short.settle({KEY: [ready_pod("web-b", "n1", 0, 2), wpod("web-c", "n3")]}, T0 + 4, 120, CLUSTER).checked
    assert c.outcome == UNKNOWN
    # a pod created two seconds before the stamp is never its replacement
    (c,) = ledger.settle({KEY: [ready_pod("web-f", "n1", -1, 2)]}, T0 + 3, 120, CLUSTER).checked
    assert c.outcome == UNKNOWN


def test_of_several_ambiguous_pods_the_one_created_last_is_the_replacement() -> None:
    """A fast kubelet on a real control plane (CI at b611fd4, test_concurrent_moves): the Deployment's
    original pods were created and Ready in the second before the eviction's admission (within the
    clock slack), and the replacement was created and Ready in the admission's own second. All three
    are ambiguous; the first created was taken, an original on the node the pod left, so the move was
    reported "landed back on node n1", and the wasted-move back-off held the next move for 300 s.
    The replacement is the pod created last (then Ready last): an original existed before it."""
    ledger = moved([wpod("web-a", "n1")], DUPLICATES, at=T0 + 0.6, ready=3)
    originals = [ready_pod("web-b", "n1", -1, -1), ready_pod("web-c", "n1", -1, -1)]
    replacement = ready_pod("web-d", "n2", 0, 0)
    (c,) = ledger.settle({KEY: [*originals, replacement]}, T0 + 2, 120, CLUSTER).checked
    assert (c.outcome, c.landed) == (ACHIEVED, "n2")
    assert ledger.settle({KEY: [replacement, *originals]}, T0 + 2, 120, CLUSTER).checked[0].landed == "n2"
    # created in the same second, the one Ready last is the replacement
    (c,) = moved([wpod("web-a", "n1")], DUPLICATES, at=T0 + 1.6, ready=3).settle(
        {KEY: [ready_pod("web-b", "n1", 0, 0), ready_pod("web-c", "n1", 0, 0), ready_pod("web-e", "n3", 0, 1)]},
        T0 + 3, 120, CLUSTER).checked
    assert (c.outcome, c.landed) == (ACHIEVED, "n3")


def test_a_bare_pod_has_no_replacement_to_follow() -> None:
    bare = Pod.from_api(pod_obj("lone", "n1", owner_kind=None))
    ledger = Ledger().admit([Admission(bare, TAINTS, False, "s", "n2", 1, 1)], T0)
    assert not ledger.settle({"Pod/default/lone": []}, T0 + 5, 120, CLUSTER).checked


# -- the back-off --------------------------------------------------------------------------------

def test_the_back_off_doubles_per_wasted_move_up_to_the_cap() -> None:
    assert [backoff_seconds(n, BASE, CAP) for n in range(6)] == [0, 300, 600, 1200, 2400, 3600]
    assert backoff_seconds(1000, BASE, CAP) == CAP and backoff_seconds(3, 0, CAP) == 0


def test_consecutive_wasted_moves_count_up_one_per_wave_and_an_achieved_move_resets() -> None:
    ledger = Ledger()
    for i in range(3):
        at = T0 + i * 1000
        # two pods of one wave both back on their node: one step, not two
        a, b = wpod(f"web-a{i}", "n1"), wpod(f"web-b{i}", "n2")
        ledger = ledger.admit([Admission(p, TAINTS, False, "s", "", 2, 2) for p in (a, b)], at)
        back = [wpod(f"web-c{i}", "n1", created=at - T0 + 1), wpod(f"web-d{i}", "n2", created=at - T0 + 2)]
        ledger = ledger.settle({KEY: back}, at + 5, 120, CLUSTER).ledger
        assert ledger.backoffs[backoff_key(KEY, TAINTS)].wasted == i + 1
    at = T0 + 5000
    ledger = ledger.admit([Admission(wpod("web-e", "n1"), TAINTS, False, "s", "", 1, 1)], at)
    ledger = ledger.settle({KEY: [wpod("web-f", "n3", created=at - T0 + 1)]}, at + 5, 120, CLUSTER).ledger
    assert ledger.backoffs == {}


def admission(ledger: Ledger, now: float) -> RunAdmission:
    settings = AdmissionSettings(cooldown_workload_seconds=0, cooldown_node_seconds=0, backoff_base_seconds=BASE,
                                 backoff_max_seconds=CAP, bucket=None)
    return Pipeline.build(settings).begin(RunContext(ledger, Snapshot.build([], []), now))


def test_the_gate_refuses_a_backed_off_workload_for_that_strategy_only() -> None:
    ledger = Ledger(backoffs={backoff_key(KEY, TAINTS): Backoff(2, T0, "landed back on node n1")})
    a = wpod("web-a", "n1")
    run = admission(ledger, T0 + 599)
    verdict = run.check(a, TAINTS, False)
    end = datetime.fromtimestamp(T0 + 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert verdict is not None and verdict.message == (
        f"backed off after 2 wasted move(s) (last: landed back on node n1); next try after {end} (1s)")
    assert run.refused == [verdict] and run.until == T0 + 600  # a node-scoped run is repeated then
    assert verdict.reason == Reason.BACKOFF and classify(verdict.reason) == BACKOFF
    assert verdict.reason.value == "wasted-move-backoff"  # the metric label
    assert run.check(a, DUPLICATES, False) is None  # another strategy is not held back
    assert admission(ledger, T0 + 600).check(a, TAINTS, False) is None


def test_back_offs_round_trip_in_the_record_and_an_older_record_has_none() -> None:
    ledger = Ledger(backoffs={backoff_key(KEY, TAINTS): Backoff(3, T0, "landed back on node n1")})
    again, problem = Ledger.from_annotation(ledger.to_annotation())
    assert problem == "" and again.backoffs == ledger.backoffs and bool(again)
    older, problem = Ledger.from_annotation('{"v":2,"m":{},"o":{},"n":{}}')
    assert problem == "" and older.backoffs == {} and '"b"' not in older.to_annotation()
    broken, problem = Ledger.from_annotation('{"v":2,"m":{},"o":{},"n":{},"b":{"x":[1]}}')
    assert "malformed" in problem and broken.backoffs == {}


def test_back_offs_are_pruned_by_age_and_bounded() -> None:
    many = {backoff_key(f"Deployment/default/w{i}", TAINTS): Backoff(1, T0 + i, "x")
            for i in range(MAX_BACKOFFS + 20)}
    pruned = Ledger(backoffs=many).prune(T0 + 100, 300, 1000, 7200)
    assert len(pruned.backoffs) == MAX_BACKOFFS
    assert backoff_key("Deployment/default/w0", TAINTS) not in pruned.backoffs  # the oldest went first
    few = dict(list(many.items())[:30])
    assert Ledger(backoffs=few).prune(T0 + 7200 + 10, 300, 1000, 7200).backoffs.keys() == {
        backoff_key(f"Deployment/default/w{i}", TAINTS) for i in range(11, 30)}  # 7200 s after the last waste


# -- settings ------------------------------------------------------------------------------------

def test_the_back_off_settings_default_to_the_workload_cool_down_and_name_their_field() -> None:
    s = parse_settings({}, env={})
    assert (s.wasted_move_base_seconds, s.wasted_move_max_seconds) == (300.0, 3600.0)
    s = parse_settings({"cooldown": {"workloadSeconds": 60}}, env={})
    assert s.wasted_move_base_seconds == 60.0
    s = parse_settings({"cooldown": {"workloadSeconds": 0, "wastedMoveMaxSeconds": 900}}, env={})
    assert (s.wasted_move_base_seconds, s.wasted_move_max_seconds) == (300.0, 900.0)
    with pytest.raises(PolicyError) as err:
        parse_settings({"cooldown": {"wastedMoveBaseSeconds": "soon", "wastedMoveMaxSeconds": -1}}, env={})
    text = str(err.value)
    assert "kdesched.cooldown.wastedMoveBaseSeconds: must be a number >= 0" in text
    assert "kdesched.cooldown.wastedMoveMaxSeconds: must be a number >= 0" in text
    with pytest.raises(PolicyError, match="wastedMoveMaxSeconds: must be >= wastedMoveBaseSeconds"):
        parse_settings({"cooldown": {"wastedMoveBaseSeconds": 600, "wastedMoveMaxSeconds": 60}}, env={})

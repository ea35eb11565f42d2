"""RemovePodsViolatingNodeTaints: every argument and algorithm step of upstream v0.36."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.records import Taint, Toleration
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import DefaultEvictorArgs, Namespaces, RemovePodsViolatingNodeTaintsArgs
from kdesched.strategies.framework import ClusterState, Handle
from kdesched.strategies.node_taints import SPEC, taint_filter, untolerated_taint

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot
from tests.harness import run_strategy

Args = RemovePodsViolatingNodeTaintsArgs


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def tol(key: str = "", op: str = "Equal", value: str = "", effect: str = "") -> dict[str, str]:
    out = {"operator": op}
    if key:
        out["key"] = key
    if value:
        out["value"] = value
    if effect:
        out["effect"] = effect
    return out


def tainted(*taints: dict[str, str], name: str = "t") -> dict[str, Any]:
    return node_obj(name, taints=list(taints))


CLEAN = node_obj("clean")

CASES: list[tuple[str, Args, list[dict[str, Any]], list[str]]] = [
    ("no pods", Args(), [tainted(taint("dedicated")), CLEAN], []),
    ("NoSchedule taint not tolerated -> evicted; clean node untouched",
     Args(), [tainted(taint("dedicated", value="gpu")), CLEAN,
              pod_obj("p1", "t"), pod_obj("p2", "clean")], ["p1"]),
    ("Equal toleration with the right value tolerates",
     Args(), [tainted(taint("dedicated", value="gpu")), CLEAN,
              pod_obj("ok", "t", tolerations=[tol("dedicated", "Equal", "gpu", "NoSchedule")]),
              pod_obj("wrongvalue", "t", tolerations=[tol("dedicated", "Equal", "cpu", "NoSchedule")])],
     ["wrongvalue"]),
    ("Exists toleration on the key tolerates any value",
     Args(), [tainted(taint("dedicated", value="gpu")), CLEAN,
              pod_obj("ok", "t", tolerations=[tol("dedicated", "Exists")])], []),
    ("empty key with Exists tolerates every taint",
     Args(), [tainted(taint("a"), taint("b", value="x")), CLEAN, pod_obj("ok", "t", tolerations=[tol(op="Exists")])],
     []),
    ("toleration for another effect does not tolerate",
     Args(), [tainted(taint("dedicated")), CLEAN,
              pod_obj("bad", "t", tolerations=[tol("dedicated", "Exists", effect="NoExecute")]),
              pod_obj("good", "t", tolerations=[tol("dedicated", "Exists", effect="NoSchedule")])], ["bad"]),
    ("every considered taint must be tolerated",
     Args(), [tainted(taint("a"), taint("b")), CLEAN,
              pod_obj("half", "t", tolerations=[tol("a", "Exists")]),
              pod_obj("both", "t", tolerations=[tol("a", "Exists"), tol("b", "Exists")])], ["half"]),
    ("NoExecute is never considered",
     Args(), [tainted(taint("gone", "NoExecute")), CLEAN, pod_obj("p", "t")], []),
    ("PreferNoSchedule ignored by default",
     Args(), [tainted(taint("soft", "PreferNoSchedule")), CLEAN, pod_obj("p", "t")], []),
    ("includePreferNoSchedule considers PreferNoSchedule",
     Args(include_prefer_no_schedule=True), [tainted(taint("soft", "PreferNoSchedule")), CLEAN, pod_obj("p", "t")],
     ["p"]),
    ("excludedTaints by key",
     Args(excluded_taints=("maintenance",)),
     [tainted(taint("maintenance", value="yes")), CLEAN, pod_obj("p", "t")], []),
    ("excludedTaints by key=value matches only that value",
     Args(excluded_taints=("dedicated=gpu",)),
     [tainted(taint("dedicated", value="gpu"), name="t"), tainted(taint("dedicated", value="tpu"), name="u"),
      pod_obj("ongpu", "t"), pod_obj("ontpu", "u")], ["ontpu"]),
    ("excluded taint skipped, another taint still enforced",
     Args(excluded_taints=("maintenance",)),
     [tainted(taint("maintenance"), taint("dedicated")), CLEAN, pod_obj("p", "t")], ["p"]),
    ("includedTaints: only the listed taints are enforced",
     Args(included_taints=("dedicated",)),
     [tainted(taint("other"), name="t"), tainted(taint("dedicated", value="x"), name="u"),
      pod_obj("on-other", "t"), pod_obj("on-dedicated", "u")], ["on-dedicated"]),
    ("includedTaints by key=value",
     Args(included_taints=("dedicated=x",)),
     [tainted(taint("dedicated", value="x"), name="t"), tainted(taint("dedicated", value="y"), name="u"),
      pod_obj("x", "t"), pod_obj("y", "u")], ["x"]),
    ("includedTaints set but empty includes no taint",
     Args(included_taints=()), [tainted(taint("dedicated")), CLEAN, pod_obj("p", "t")], []),
    ("includedTaints still limited to the enforced effects",
     Args(included_taints=("soft",)), [tainted(taint("soft", "PreferNoSchedule")), CLEAN, pod_obj("p", "t")], []),
    ("namespaces include",
     Args(namespaces=Namespaces(include=("team",))),
     [tainted(taint("d")), CLEAN, pod_obj("in", "t", namespace="team"), pod_obj("out", "t")], ["in"]),
    ("namespaces exclude",
     Args(namespaces=Namespaces(exclude=("team",))),
     [tainted(taint("d")), CLEAN, pod_obj("in", "t", namespace="team"), pod_obj("out", "t")], ["out"]),
    ("labelSelector",
     Args(label_selector=LabelSelector((("tier", "web"),))),
     [tainted(taint("d")), CLEAN, pod_obj("web", "t", labels={"tier": "web"}), pod_obj("db", "t", labels={"tier": "db"})],
     ["web"]),
    ("Filter: DaemonSet and bare pods are protected",
     Args(), [tainted(taint("d")), CLEAN, pod_obj("ds", "t", owner_kind="DaemonSet"),
              pod_obj("bare", "t", owner_kind=None), pod_obj("rs", "t")], ["rs"]),
    ("terminal pods are not listed",
     Args(), [tainted(taint("d")), CLEAN, pod_obj("done", "t", phase="Succeeded"), pod_obj("run", "t")], ["run"]),
]


@pytest.mark.parametrize(("args", "objects", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cases(args: Args, objects: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, objects).names == expected


def test_reason_names_the_taint_and_node() -> None:
    result = run_strategy(SPEC, Args(), [tainted(taint("dedicated", value="gpu")), CLEAN, pod_obj("p", "t")])
    assert [e.reason for e in result.evictions] == ["pod does not tolerate taint dedicated=gpu:NoSchedule of node t"]
    assert result.evictions[0].strategy == "RemovePodsViolatingNodeTaints"


def test_pre_eviction_filter_node_fit() -> None:
    # With nodeFit the pod must fit another node; the only other node is full (pods=1, one pod on it).
    objects = [tainted(taint("d")), node_obj("full", pods=1), pod_obj("p", "t"), pod_obj("other", "full")]
    assert run_strategy(SPEC, Args(), objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == []
    objects[1] = node_obj("full", pods=2)
    assert run_strategy(SPEC, Args(), objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == ["p"]


@pytest.mark.parametrize(("limits", "expected"), [
    (Limits(per_node=1), ["a1", "b1"]),   # node limit -> next node
    (Limits(total=2), ["a1", "a2"]),      # total limit -> stop
    (Limits(per_namespace=1), ["a1", "a3"]),  # namespace limit -> next pod
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = [tainted(taint("d"), name="a"), tainted(taint("d"), name="b"),
               pod_obj("a1", "a"), pod_obj("a2", "a"), pod_obj("a3", "a", namespace="other"),
               pod_obj("b1", "b")]
    assert run_strategy(SPEC, Args(), objects, limits=limits).names == expected


def test_pdb_budget_refusal_moves_on() -> None:
    objects = [tainted(taint("d")), CLEAN,
               pod_obj("w1", "t", labels={"app": "web"}), pod_obj("w2", "t", labels={"app": "web"}),
               pod_obj("x", "t", labels={"app": "x"}), pdb_obj("web", {"app": "web"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, Args(), objects)
    assert result.names == ["w1", "x"]
    assert [r.pod.name for r in result.refusals] == ["w2"]


def test_event_scoped_run_touches_only_that_node() -> None:
    objects = [tainted(taint("d"), name="a"), tainted(taint("d"), name="b"), pod_obj("pa", "a"), pod_obj("pb", "b")]
    assert run_strategy(SPEC, Args(), objects, nodes=["b"]).names == ["pb"]


def test_plan_aware_pod_planned_earlier_is_not_seen() -> None:
    objects = [tainted(taint("d")), CLEAN, pod_obj("p1", "t"), pod_obj("p2", "t")]
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    first = next(p for p in state.pods_on_node("t") if p.name == "p1")
    evictor.evict(first, strategy="Earlier", profile="x", reason="earlier")
    SPEC.run(Args(), Handle(state, evictor, "x", SPEC.name), state.nodes)
    assert [(e.pod.name, e.strategy) for e in state.planned] == [("p1", "Earlier"), ("p2", SPEC.name)]


@pytest.mark.parametrize(("args", "taint_", "considered"), [
    (Args(), Taint("k", "v", "NoSchedule"), True),
    (Args(), Taint("k", "v", "NoExecute"), False),
    (Args(include_prefer_no_schedule=True), Taint("k", "", "PreferNoSchedule"), True),
    (Args(excluded_taints=("k=v",)), Taint("k", "v", "NoSchedule"), False),
    (Args(excluded_taints=("k=",)), Taint("k", "", "NoSchedule"), True),  # key= never names a valueless taint
    (Args(included_taints=("k",)), Taint("k", "v", "NoSchedule"), True),
    (Args(included_taints=("k",), excluded_taints=("k",)), Taint("k", "v", "NoSchedule"), False),
], ids=["noschedule", "noexecute", "prefer", "excluded-kv", "excluded-k=-no-value", "included", "excluded-wins"])
def test_taint_filter(args: Args, taint_: Taint, considered: bool) -> None:
    assert taint_filter(args)(taint_) is considered


def test_untolerated_taint_returns_the_first_missing() -> None:
    taints = [Taint("a", "", "NoSchedule"), Taint("b", "", "NoSchedule")]
    assert untolerated_taint((Toleration("a", "Exists"),), taints, lambda t: True) == taints[1]
    assert untolerated_taint((Toleration("", "Exists"),), taints, lambda t: True) is None

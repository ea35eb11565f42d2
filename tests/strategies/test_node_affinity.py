"""RemovePodsViolatingNodeAffinity: both modes, every argument and algorithm step of upstream v0.36."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import (
    PREFERRED_AFFINITY,
    REQUIRED_AFFINITY,
    DefaultEvictorArgs,
    Namespaces,
    RemovePodsViolatingNodeAffinityArgs,
)
from kdesched.strategies.framework import ClusterState, Handle
from kdesched.strategies.node_affinity import SPEC

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot
from tests.harness import run_strategy

Args = RemovePodsViolatingNodeAffinityArgs
REQ = Args(node_affinity_type=(REQUIRED_AFFINITY,))
PREF = Args(node_affinity_type=(PREFERRED_AFFINITY,))


def required(key: str = "disk", *values: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": list(values or ("ssd",))}]}]}}}


def preferred(*terms: tuple[int, str, str]) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]}}
        for w, k, v in terms]}}


SSD = node_obj("ssd", labels={"disk": "ssd"})
HDD = node_obj("hdd", labels={"disk": "hdd"})

CASES: list[tuple[str, Args, list[dict[str, Any]], list[str]]] = [
    ("no pods", REQ, [SSD, HDD], []),
    ("required: pod on a node it no longer matches is evicted; matching one stays",
     REQ, [SSD, HDD, pod_obj("wrong", "hdd", affinity=required()), pod_obj("right", "ssd", affinity=required())],
     ["wrong"]),
    ("required: no node fits -> kept (PodFitsAnyNode)",
     REQ, [SSD, HDD, pod_obj("nvme", "hdd", affinity=required("disk", "nvme"))], []),
    ("required: the only matching node is unschedulable -> kept",
     REQ, [node_obj("ssd", labels={"disk": "ssd"}, unschedulable=True), HDD,
           pod_obj("p", "hdd", affinity=required())], []),
    ("required: the only matching node is full -> kept",
     REQ, [node_obj("ssd", labels={"disk": "ssd"}, pods=1), HDD,
           pod_obj("p", "hdd", affinity=required()), pod_obj("filler", "ssd")], []),
    ("required: the only matching node has an untolerated taint -> kept",
     REQ, [node_obj("ssd", labels={"disk": "ssd"}, taints=[{"key": "x", "effect": "NoSchedule"}]), HDD,
           pod_obj("p", "hdd", affinity=required())], []),
    ("required: nodeSelector alone is not required affinity",
     REQ, [SSD, HDD, pod_obj("sel", "hdd", node_selector={"disk": "ssd"})], []),
    ("required: a nodeSelector mismatch also counts when the pod has required affinity",
     REQ, [node_obj("ssd", labels={"disk": "ssd", "zone": "a"}), node_obj("ssd2", labels={"disk": "ssd", "zone": "b"}),
           pod_obj("p", "ssd", affinity=required(), node_selector={"zone": "b"})], ["p"]),
    ("required mode ignores preferred-only pods",
     REQ, [SSD, HDD, pod_obj("p", "hdd", affinity=preferred((10, "disk", "ssd")))], []),
    ("preferred: a better node it fits -> evicted",
     PREF, [SSD, HDD, pod_obj("p", "hdd", affinity=preferred((10, "disk", "ssd")))], ["p"]),
    ("preferred: already on the best node -> kept",
     PREF, [SSD, HDD, pod_obj("p", "ssd", affinity=preferred((10, "disk", "ssd")))], []),
    ("preferred: equal weight elsewhere is not better",
     PREF, [node_obj("a", labels={"disk": "ssd"}), node_obj("b", labels={"disk": "ssd"}),
            pod_obj("p", "a", affinity=preferred((10, "disk", "ssd")))], []),
    ("preferred: weights of matching terms are summed",
     PREF, [node_obj("one", labels={"disk": "ssd"}), node_obj("two", labels={"disk": "hdd", "gpu": "yes"}),
            pod_obj("p", "one", affinity=preferred((10, "disk", "ssd"), (6, "gpu", "yes"), (5, "disk", "hdd")))],
     ["p"]),
    ("preferred: sum lower elsewhere -> kept",
     PREF, [node_obj("one", labels={"disk": "ssd"}), node_obj("two", labels={"disk": "hdd", "gpu": "yes"}),
            pod_obj("p", "one", affinity=preferred((12, "disk", "ssd"), (6, "gpu", "yes"), (5, "disk", "hdd")))],
     []),
    ("preferred: the better node is full -> kept (best weight over the nodes it fits)",
     PREF, [node_obj("ssd", labels={"disk": "ssd"}, pods=1), HDD, pod_obj("filler", "ssd"),
            pod_obj("p", "hdd", affinity=preferred((10, "disk", "ssd")))], []),
    ("preferred: the better node is tainted -> kept",
     PREF, [node_obj("ssd", labels={"disk": "ssd"}, taints=[{"key": "x", "effect": "NoSchedule"}]), HDD,
            pod_obj("p", "hdd", affinity=preferred((10, "disk", "ssd")))], []),
    ("preferred mode ignores required-only pods",
     PREF, [SSD, HDD, pod_obj("p", "hdd", affinity=required())], []),
    ("both types: evicted once, by the first mode that finds it",
     Args(node_affinity_type=(REQUIRED_AFFINITY, PREFERRED_AFFINITY)),
     [SSD, HDD, pod_obj("req", "hdd", affinity=required()), pod_obj("pref", "hdd", affinity=preferred((1, "disk", "ssd")))],
     ["req", "pref"]),
    ("unknown type is skipped, the valid one still runs",
     Args(node_affinity_type=("bogus", REQUIRED_AFFINITY)),
     [SSD, HDD, pod_obj("p", "hdd", affinity=required())], ["p"]),
    ("namespaces include",
     Args(node_affinity_type=(REQUIRED_AFFINITY,), namespaces=Namespaces(include=("team",))),
     [SSD, HDD, pod_obj("in", "hdd", namespace="team", affinity=required()), pod_obj("out", "hdd", affinity=required())],
     ["in"]),
    ("namespaces exclude",
     Args(node_affinity_type=(REQUIRED_AFFINITY,), namespaces=Namespaces(exclude=("team",))),
     [SSD, HDD, pod_obj("in", "hdd", namespace="team", affinity=required()), pod_obj("out", "hdd", affinity=required())],
     ["out"]),
    ("labelSelector",
     Args(node_affinity_type=(REQUIRED_AFFINITY,), label_selector=LabelSelector((("app", "x"),))),
     [SSD, HDD, pod_obj("x", "hdd", labels={"app": "x"}, affinity=required()),
      pod_obj("y", "hdd", labels={"app": "y"}, affinity=required())], ["x"]),
    ("Filter protects DaemonSet pods",
     REQ, [SSD, HDD, pod_obj("ds", "hdd", owner_kind="DaemonSet", affinity=required()),
           pod_obj("rs", "hdd", affinity=required())], ["rs"]),
    ("terminal pods are not listed",
     REQ, [SSD, HDD, pod_obj("done", "hdd", phase="Failed", affinity=required())], []),
]


@pytest.mark.parametrize(("args", "objects", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cases(args: Args, objects: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, objects).names == expected


def test_reasons() -> None:
    objects = [SSD, HDD, pod_obj("req", "hdd", affinity=required()),
               pod_obj("pref", "hdd", affinity=preferred((10, "disk", "ssd")))]
    both = Args(node_affinity_type=(REQUIRED_AFFINITY, PREFERRED_AFFINITY))
    assert [e.reason for e in run_strategy(SPEC, both, objects).evictions] == [
        "pod's nodeSelector/required node affinity no longer matches node hdd",
        "node ssd matches preferred node affinity terms of weight 10, node hdd only 0",
    ]


def test_unknown_type_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="kdesched.strategies"):
        run_strategy(SPEC, Args(node_affinity_type=("bogus",)), [SSD, HDD])
    assert "invalid nodeAffinityType 'bogus'" in caplog.text


def test_event_scoped_fit_uses_every_node() -> None:
    # Only node hdd is processed (label-change event), but the pod's destination ssd still counts.
    objects = [SSD, HDD, pod_obj("p", "hdd", affinity=required()), pod_obj("q", "ssd", affinity=required("disk", "hdd"))]
    assert run_strategy(SPEC, REQ, objects, nodes=["hdd"]).names == ["p"]


def test_plan_aware_freed_capacity_makes_room() -> None:
    # ssd holds one pod slot, taken by "leaving"; once an earlier strategy plans "leaving", "p" fits.
    objects = [node_obj("ssd", labels={"disk": "ssd"}, pods=1), HDD,
               pod_obj("leaving", "ssd"), pod_obj("p", "hdd", affinity=required())]
    assert run_strategy(SPEC, REQ, objects).names == []
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    evictor.evict(next(p for p in state.pods_on_node("ssd")), strategy="Earlier", profile="x", reason="r")
    SPEC.run(REQ, Handle(state, evictor, "x", SPEC.name), state.nodes)
    assert [e.pod.name for e in state.planned] == ["leaving", "p"]


def test_plan_aware_pod_planned_earlier_is_not_seen() -> None:
    objects = [SSD, HDD, pod_obj("p", "hdd", affinity=required())]
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    evictor.evict(state.pods_on_node("hdd")[0], strategy="Earlier", profile="x", reason="r")
    SPEC.run(REQ, Handle(state, evictor, "x", SPEC.name), state.nodes)
    assert [(e.pod.name, e.strategy) for e in state.planned] == [("p", "Earlier")]


@pytest.mark.parametrize(("limits", "expected"), [
    (Limits(per_node=1), ["h1", "c1"]),
    (Limits(total=2), ["h1", "h2"]),
    (Limits(per_namespace=1), ["h1", "h3"]),
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = [SSD, HDD, node_obj("cpu", labels={"disk": "none"}),
               pod_obj("h1", "hdd", affinity=required()), pod_obj("h2", "hdd", affinity=required()),
               pod_obj("h3", "hdd", namespace="other", affinity=required()), pod_obj("c1", "cpu", affinity=required())]
    assert run_strategy(SPEC, REQ, objects, limits=limits).names == expected


def test_pdb_budget_refusal() -> None:
    objects = [SSD, HDD, pod_obj("w1", "hdd", labels={"app": "w"}, affinity=required()),
               pod_obj("w2", "hdd", labels={"app": "w"}, affinity=required()), pdb_obj("w", {"app": "w"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, REQ, objects)
    assert result.names == ["w1"]
    assert [r.pod.name for r in result.refusals] == ["w2"]


def test_pre_eviction_filter_namespace_label_selector() -> None:
    objects = [SSD, HDD, pod_obj("p", "hdd", affinity=required()),
               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"env": "prod"}}}]
    ev = DefaultEvictorArgs(namespace_label_selector=LabelSelector((("env", "dev"),)))
    assert run_strategy(SPEC, REQ, objects, evictor_args=ev).names == []
    ev = DefaultEvictorArgs(namespace_label_selector=LabelSelector((("env", "prod"),)))
    assert run_strategy(SPEC, REQ, objects, evictor_args=ev).names == ["p"]

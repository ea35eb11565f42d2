"""RemovePodsViolatingInterPodAntiAffinity: every argument and algorithm step of upstream v0.36."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.records import Node, Pod
from kdesched.model.selectors import LabelSelector
from kdesched.model.snapshot import Snapshot
from kdesched.policy.types import DefaultEvictorArgs, Namespaces, RemovePodsViolatingInterPodAntiAffinityArgs
from kdesched.strategies.framework import ClusterState, Handle
from kdesched.strategies.inter_pod_anti_affinity import SPEC

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot
from tests.harness import run_strategy

Args = RemovePodsViolatingInterPodAntiAffinityArgs
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def anti(match: dict[str, str] | None, key: str = HOST, namespaces: list[str] | None = None,
         preferred: bool = False) -> dict[str, Any]:
    term: dict[str, Any] = {"topologyKey": key}
    if match is not None:
        term["labelSelector"] = {"matchLabels": match}
    if namespaces:
        term["namespaces"] = namespaces
    if preferred:
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def web(name: str, node: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("labels", {"app": "web"})
    kw.setdefault("affinity", anti({"app": "web"}))
    return pod_obj(name, node, **kw)


A, B = node_obj("a", labels={ZONE: "z1"}), node_obj("b", labels={ZONE: "z1"})
C = node_obj("c", labels={ZONE: "z2"})
NOZONE = node_obj("n")

CASES: list[tuple[str, Args, list[dict[str, Any]], list[str]]] = [
    ("no pods", Args(), [A, B], []),
    ("two replicas on one host: the first in priority order goes, the other's conflict disappears",
     Args(), [A, B, web("w1", "a"), web("w2", "a"), web("w3", "b")], ["w1"]),
    ("lower priority evicted first",
     Args(), [A, B, web("hi", "a", priority=100), web("lo", "a", priority=10)], ["lo"]),
    ("nil priority before any priority",
     Args(), [A, B, web("zero", "a", priority=0), web("nil", "a")], ["nil"]),
    ("BestEffort before Guaranteed at equal priority",
     Args(), [A, B, web("g", "a", priority=5, cpu="1", memory="1Gi", limits={"cpu": "1", "memory": "1Gi"}),
              web("be", "a", priority=5, cpu=None)], ["be"]),
    ("only P's own term counts (Q without a term is not evicted)",
     Args(), [A, B, pod_obj("q", "a", labels={"app": "web"}), web("p", "a", labels={"app": "other"})], ["p"]),
    ("not symmetric: Q has a term against P, P has none",
     Args(), [A, B, pod_obj("p", "a", labels={"app": "db"}), web("q", "a", labels={"app": "web"},
                                                                 affinity=anti({"app": "db"}))], ["q"]),
    ("different hosts do not conflict on the hostname key",
     Args(), [A, B, web("w1", "a"), web("w2", "b")], []),
    ("zone key: another node of the same zone conflicts",
     Args(), [A, B, C, web("w1", "a", affinity=anti({"app": "web"}, ZONE)), web("w2", "b"), web("w3", "c")], ["w1"]),
    ("zone key: different zones do not conflict",
     Args(), [A, C, web("w1", "a", affinity=anti({"app": "web"}, ZONE)), web("w3", "c")], []),
    ("node without the topology key: only the same node conflicts",
     Args(), [NOZONE, A, web("w1", "n", affinity=anti({"app": "web"}, ZONE)), web("w2", "a")], []),
    ("node without the topology key: same node still conflicts",
     Args(), [NOZONE, A, web("w1", "n", affinity=anti({"app": "web"}, ZONE)), web("w2", "n", affinity=None)], ["w1"]),
    ("Q's node lacks the key while P's has it: no conflict across nodes",
     Args(), [A, NOZONE, web("w1", "a", affinity=anti({"app": "web"}, ZONE)), web("w2", "n", affinity=None)], []),
    ("term namespaces default to P's namespace",
     Args(), [A, B, web("p", "a"), web("q", "a", namespace="other", affinity=None)], []),
    ("explicit term namespaces",
     Args(), [A, B, web("p", "a", affinity=anti({"app": "web"}, namespaces=["other"])),
              web("q", "a", namespace="other", affinity=None)], ["p"]),
    ("Q != P is by name: a same-named pod in another namespace is not a conflict",
     Args(), [A, B, web("same", "a", affinity=anti({"app": "web"}, namespaces=["default", "other"])),
              web("same", "a", namespace="other", affinity=None)], []),
    ("a nil labelSelector matches no pod",
     Args(), [A, B, web("p", "a", affinity=anti(None)), web("q", "a", affinity=None)], []),
    ("preferred terms are ignored",
     Args(), [A, B, web("p", "a", affinity=anti({"app": "web"}, preferred=True)), web("q", "a", affinity=None)], []),
    ("namespaces include: P and Q both need an included namespace",
     Args(namespaces=Namespaces(include=("team",))),
     [A, B, web("p", "a", namespace="team"), web("q", "a", namespace="team"),
      web("x", "b"), web("y", "b")], ["p"]),
    ("namespaces exclude hides Q as well",
     Args(namespaces=Namespaces(exclude=("hidden",))),
     [A, B, web("p", "a", affinity=anti({"app": "web"}, namespaces=["hidden"])),
      web("q", "a", namespace="hidden", affinity=None)], []),
    ("labelSelector applies to P and Q",
     Args(label_selector=LabelSelector((("team", "x"),))),
     [A, B, web("p", "a", labels={"app": "web", "team": "x"}), web("q", "a", affinity=None)], []),
    ("labelSelector: matching P and Q",
     Args(label_selector=LabelSelector((("team", "x"),))),
     [A, B, web("p", "a", labels={"app": "web", "team": "x"}), web("q", "a", labels={"app": "web", "team": "x"})],
     ["p"]),
    ("Filter: a protected P stays and still counts as Q for the next pod",
     Args(), [A, B, web("ds", "a", owner_kind="DaemonSet"), web("rs", "a", priority=10)], ["rs"]),
    ("Q failing Filter still counts",
     Args(), [A, B, web("p", "a"), web("ds", "a", owner_kind="DaemonSet", affinity=None)], ["p"]),
    ("terminal Q does not count",
     Args(), [A, B, web("p", "a"), web("done", "a", phase="Succeeded", affinity=None)], []),
    ("matchExpressions selector",
     Args(), [A, B, web("p", "a", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
         {"topologyKey": HOST, "labelSelector": {"matchExpressions": [
             {"key": "app", "operator": "In", "values": ["db", "web"]}]}}]}}),
              pod_obj("db", "a", labels={"app": "db"})], ["p"]),
    ("NotIn expression (no index shortcut)",
     Args(), [A, B, web("p", "a", labels={"app": "web"}, affinity={"podAntiAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": HOST, "labelSelector": {"matchExpressions": [
             {"key": "app", "operator": "NotIn", "values": ["web"]}]}}]}}),
              pod_obj("cache", "a", labels={"app": "cache"})], ["p"]),
]


@pytest.mark.parametrize(("args", "objects", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cases(args: Args, objects: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, objects).names == expected


def test_three_on_one_host_two_go() -> None:
    result = run_strategy(SPEC, Args(), [A, B, web("w1", "a"), web("w2", "a"), web("w3", "a")])
    assert result.names == ["w1", "w2"]
    assert result.evictions[0].reason == "pod's required anti-affinity (app=web) matches another pod in kubernetes.io/hostname=a"


def test_zone_reason() -> None:
    result = run_strategy(SPEC, Args(), [A, B, web("w1", "a", affinity=anti({"app": "web"}, ZONE)), web("w2", "b")])
    assert result.evictions[0].reason == (
        f"pod's required anti-affinity (app=web) matches another pod in {ZONE}=z1")


def test_refused_eviction_keeps_the_conflict() -> None:
    # w1's PDB has no budget, so w1 stays and w2 (conflicting with w1) must go.
    objects = [A, B, web("w1", "a", labels={"app": "web", "pdb": "yes"}), web("w2", "a", priority=5),
               pdb_obj("none-left", {"pdb": "yes"}, disruptions_allowed=0)]
    result = run_strategy(SPEC, Args(), objects)
    assert result.names == ["w2"]
    assert [r.pod.name for r in result.refusals] == ["w1"]


def test_pre_eviction_filter_node_fit() -> None:
    objects = [node_obj("a", pods=2), node_obj("b", pods=1), pod_obj("filler", "b"), web("w1", "a"), web("w2", "a")]
    assert run_strategy(SPEC, Args(), objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == []
    objects[1] = node_obj("b", pods=3)
    assert run_strategy(SPEC, Args(), objects, evictor_args=DefaultEvictorArgs(node_fit=True)).names == ["w1"]


@pytest.mark.parametrize(("limits", "expected"), [
    (Limits(per_node=1), ["a1", "b1"]),
    (Limits(total=1), ["a1"]),
    (Limits(per_namespace=1), ["a1", "o1"]),
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = [A, B, web("a1", "a"), web("a2", "a"), web("a3", "a"),
               web("o1", "a", namespace="o"), web("o2", "a", namespace="o"), web("b1", "b"), web("b2", "b")]
    assert run_strategy(SPEC, Args(), objects, limits=limits).names == expected


def test_event_scoped_run_sees_conflicts_on_other_nodes() -> None:
    # Only node a is processed, but its pod conflicts with a pod on node b of the same zone.
    objects = [A, B, web("w1", "a", affinity=anti({"app": "web"}, ZONE)), web("w2", "b"), web("w3", "b")]
    assert run_strategy(SPEC, Args(), objects, nodes=["a"]).names == ["w1"]


def test_plan_aware_pod_planned_earlier_is_neither_p_nor_q() -> None:
    objects = [A, B, web("w1", "a"), web("w2", "a")]
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    evictor.evict(state.pods_on_node("a")[0], strategy="Earlier", profile="x", reason="r")
    SPEC.run(Args(), Handle(state, evictor, "x", SPEC.name), state.nodes)
    assert [(e.pod.name, e.strategy) for e in state.planned] == [("w1", "Earlier")]


def test_index_avoids_a_quadratic_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,000 nodes x 150 pods = 150,000 pods; 200 of them carry a hostname anti-affinity term.
    # Counting selector evaluations (not time): a scan of every pod per term-carrying pod would
    # take 200 x 150,000; the label index needs about one evaluation per pod labelled app=web.
    template = Pod.from_api(pod_obj("t", "n0"))
    nodes = [Node.from_api(node_obj(f"n{i}", labels={ZONE: f"z{i % 3}"})) for i in range(1000)]
    pods = [replace(template, name=f"p{i}-{j}", node_name=f"n{i}", labels={"app": f"app{j}"})
            for i in range(1000) for j in range(150)]
    term_pod = Pod.from_api(web("w", "n0"))
    pods += [replace(term_pod, name=f"w{k}", node_name=f"n{k // 2}") for k in range(200)]
    state = ClusterState(Snapshot.build(nodes, pods), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    calls = 0
    original = LabelSelector.matches

    def counting(self: LabelSelector, labels: Any) -> bool:
        nonlocal calls
        calls += 1
        return original(self, labels)

    monkeypatch.setattr(LabelSelector, "matches", counting)
    SPEC.run(Args(), Handle(state, evictor, "x", SPEC.name), state.nodes)
    assert len(state.planned) == 100  # one of each pair sharing a host
    assert 0 < calls < 1_000, calls

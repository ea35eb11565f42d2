"""RemovePodsViolatingTopologySpreadConstraint: upstream v0.36 steps 1-4, every argument, no oscillation."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.model.records import Pod, TopologySpreadConstraint
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import (
    DefaultEvictorArgs,
    Namespaces,
    RemovePodsViolatingTopologySpreadConstraintArgs,
)
from kdesched.strategies.framework import ClusterState, Handle
from kdesched.strategies.topology_spread import SPEC, SpreadConstraint

from tests.builders import NOW, node_obj, pdb_obj, pod_obj, snapshot
from tests.harness import run_strategy

Args = RemovePodsViolatingTopologySpreadConstraintArgs
ZONE = "zone"
BOTH = ("DoNotSchedule", "ScheduleAnyway")


def spread(max_skew: int = 1, key: str = ZONE, when: str = "DoNotSchedule", match: dict[str, str] | None = None,
           **extra: Any) -> list[dict[str, Any]]:
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when, **extra}
    if match is not None or "labelSelector" not in extra:
        c["labelSelector"] = {"matchLabels": match or {"app": "web"}}
    if c.get("labelSelector") is None:
        del c["labelSelector"]
    return [c]


def zone_nodes(*zones: str, **kw: Any) -> list[dict[str, Any]]:
    return [node_obj(z, labels={ZONE: z}, **kw) for z in zones]


def web(name: str, node: str, constraint: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    kw.setdefault("labels", {"app": "web"})
    return pod_obj(name, node, spread=spread() if constraint is None else constraint, **kw)


def layout(counts: dict[str, int], constraint: list[dict[str, Any]] | None = None, **kw: Any) -> list[dict[str, Any]]:
    """Pods named <zone><n> (a1, a2...) placed on the node named like the zone."""
    return [web(f"{z}{i}", z, constraint, **kw) for z, n in counts.items() for i in range(1, n + 1)]


def evicted_per_zone(names: list[str]) -> dict[str, int]:
    return dict(Counter(n[0] for n in names))


ABC = zone_nodes("a", "b", "c")
AB = zone_nodes("a", "b")

# (id, args, objects, expected evicted names)
CASES: list[tuple[str, Args, list[dict[str, Any]], list[str]]] = [
    ("no pods", Args(), ABC, []),
    ("2 domains [2,1] maxSkew 1: balanced", Args(), AB + layout({"a": 2, "b": 1}), []),
    ("3 domains [2,2,1] maxSkew 1: balanced", Args(), ABC + layout({"a": 2, "b": 2, "c": 1}), []),
    ("[3,1] -> move 1 (the tail of a)", Args(), AB + layout({"a": 3, "b": 1}), ["a3"]),
    ("[5,2] -> move 1", Args(), AB + layout({"a": 5, "b": 2}), ["a5"]),
    ("[4,0] -> move 2", Args(), AB + layout({"a": 4}), ["a3", "a4"]),
    ("[2,6] maxSkew 2 -> move 1", Args(), AB + layout({"a": 2, "b": 6}, spread(2)), ["b6"]),
    ("[0,1,3,5] -> move 3", Args(), zone_nodes("a", "b", "c", "d") + layout({"b": 1, "c": 3, "d": 5}),
     ["d4", "d5", "d3"]),
    ("[8,7,0] -> move 5 to reach [5,5,5]", Args(), ABC + layout({"a": 8, "b": 7}),
     ["a6", "a7", "a8", "b6", "b7"]),
    ("ScheduleAnyway ignored by default", Args(), AB + layout({"a": 3, "b": 1}, spread(when="ScheduleAnyway")), []),
    ("ScheduleAnyway with constraints [DoNotSchedule, ScheduleAnyway]", Args(constraints=BOTH),
     AB + layout({"a": 3, "b": 1}, spread(when="ScheduleAnyway")), ["a3"]),
    ("constraints [ScheduleAnyway] skips DoNotSchedule", Args(constraints=("ScheduleAnyway",)),
     AB + layout({"a": 3, "b": 1}), []),
    ("a constraint on one pod applies to every selected pod of the namespace", Args(),
     AB + [web("a1", "a"), web("a2", "a", []), web("a3", "a", []), web("b1", "b", [])], ["a3"]),
    ("missing labelSelector selects no pod", Args(),
     AB + layout({"a": 3}, [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]), []),
    ("pods the selector does not match are not counted", Args(),
     AB + layout({"a": 2, "b": 1}) + [pod_obj("other", "a", labels={"app": "other"})], []),
    ("lowest priority evicted first, nil lowest", Args(),
     AB + [web("hi", "a", priority=100), web("nil", "a"), web("lo", "a", priority=1), web("b1", "b")], ["nil"]),
    ("lowest priority evicted first", Args(),
     AB + [web("lo", "a", priority=1), web("hi", "a", priority=100), web("mid", "a", priority=50), web("b1", "b")],
     ["lo"]),
    ("pods with a nodeSelector/affinity are evicted after the others", Args(topology_balance_node_fit=False),
     AB + [web("plain-hi", "a", priority=100), web("sel-lo", "a", priority=1, node_selector={"kubernetes.io/os": "linux"}),
           web("a3", "a", priority=100), web("b1", "b")], ["a3"]),
    ("topologyBalanceNodeFit: pods that cannot move are not evicted but still counted as moved", Args(),
     AB + [web("sel1", "a", node_selector={ZONE: "a"}), web("sel2", "a", node_selector={ZONE: "a"}),
           web("aff", "a", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
               "nodeSelectorTerms": [{"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]}}}),
           web("plain", "a")], ["plain"]),
    ("a pod that fits a node below average is preferred over the tail that does not", Args(),
     zone_nodes("a") + [node_obj("b", cpu="1", labels={ZONE: "b"})]
     + [web("small", "a", cpu="100m"), web("big", "a", cpu="3")], ["small"]),
    ("topologyBalanceNodeFit: destination tainted -> nothing", Args(),
     [node_obj("a", labels={ZONE: "a"}, taints=[{"key": "x", "effect": "NoSchedule"}]), node_obj("b", labels={ZONE: "b"})]
     + layout({"a": 2, "b": 6}, spread(2)), []),
    ("destinations are only the nodes of domains below the average", Args(),
     zone_nodes("a", "b") + [node_obj("c", labels={ZONE: "c"}, taints=[{"key": "x", "effect": "NoSchedule"}])]
     + layout({"a": 4, "b": 2}), []),
    ("topologyBalanceNodeFit false: evicted even if it fits nowhere", Args(topology_balance_node_fit=False),
     [node_obj("a", labels={ZONE: "a"}), node_obj("b", labels={ZONE: "b"}, taints=[{"key": "x", "effect": "NoSchedule"}])]
     + layout({"a": 6, "b": 2}, spread(2)), ["a6"]),
    ("topologyBalanceNodeFit: destination lacks cpu -> nothing", Args(),
     [node_obj("a", cpu="200m", labels={ZONE: "a"}), node_obj("b", labels={ZONE: "b"})]
     + layout({"b": 6}, spread(2), cpu="300m") + layout({"a": 2}, spread(2), cpu=None), []),
    ("matchLabelKeys: each revision is spread on its own", Args(),
     AB + [web(f"r1-{i}", "a", spread(matchLabelKeys=["rev"]), labels={"app": "web", "rev": "1"}) for i in (1, 2)]
     + [web(f"r2-{i}", "b", spread(matchLabelKeys=["rev"]), labels={"app": "web", "rev": "2"}) for i in (1, 2)],
     ["r1-2", "r2-2"]),
    ("without matchLabelKeys the revisions balance each other", Args(),
     AB + [web(f"r1-{i}", "a", labels={"app": "web", "rev": "1"}) for i in (1, 2)]
     + [web(f"r2-{i}", "b", labels={"app": "web", "rev": "2"}) for i in (1, 2)], []),
    ("nodeAffinityPolicy nil = Honor: domains the pods cannot use do not count", Args(topology_balance_node_fit=False),
     [node_obj("a", labels={ZONE: "a", "os": "linux"}), node_obj("b", labels={ZONE: "b", "os": "linux"}),
      node_obj("c", labels={ZONE: "c", "os": "windows"})]
     + layout({"a": 2, "b": 1}, node_selector={"os": "linux"}), []),
    ("nodeAffinityPolicy Ignore: every domain counts", Args(topology_balance_node_fit=False),
     [node_obj("a", labels={ZONE: "a", "os": "linux"}), node_obj("b", labels={ZONE: "b", "os": "linux"}),
      node_obj("c", labels={ZONE: "c", "os": "windows"})]
     + layout({"a": 2, "b": 1}, spread(nodeAffinityPolicy="Ignore"), node_selector={"os": "linux"}), ["a2"]),
    ("nodeTaintsPolicy nil = Ignore: a tainted domain counts", Args(topology_balance_node_fit=False),
     zone_nodes("a", "b") + [node_obj("c", labels={ZONE: "c"}, taints=[{"key": "x", "effect": "NoSchedule"}])]
     + layout({"a": 2, "b": 1}), ["a2"]),
    ("nodeTaintsPolicy Honor: an untolerated tainted domain does not count", Args(topology_balance_node_fit=False),
     zone_nodes("a", "b") + [node_obj("c", labels={ZONE: "c"}, taints=[{"key": "x", "effect": "NoSchedule"}])]
     + layout({"a": 2, "b": 1}, spread(nodeTaintsPolicy="Honor")), []),
    ("nodeTaintsPolicy Honor with a toleration: the domain counts", Args(topology_balance_node_fit=False),
     zone_nodes("a", "b") + [node_obj("c", labels={ZONE: "c"}, taints=[{"key": "x", "effect": "NoSchedule"}])]
     + layout({"a": 2, "b": 1}, spread(nodeTaintsPolicy="Honor"), tolerations=[{"key": "x", "operator": "Exists"}]),
     ["a2"]),
    ("minDomains is ignored", Args(), AB + layout({"a": 2, "b": 1}, spread(minDomains=3)), []),
    ("nodes without the topology key are not domains", Args(), AB + [node_obj("nokey")] + layout({"a": 2, "b": 1}), []),
    ("NotReady nodes are not domains", Args(), AB + [node_obj("c", labels={ZONE: "c"}, ready=False)]
     + layout({"a": 2, "b": 1}), []),
    ("namespaces include", Args(namespaces=Namespaces(include=("team",))),
     AB + layout({"a": 3, "b": 1}) + [web(f"t{i}", "a", namespace="team") for i in (1, 2)], ["t2"]),
    ("namespaces exclude", Args(namespaces=Namespaces(exclude=("default",))),
     AB + layout({"a": 3, "b": 1}) + [web(f"t{i}", "a", namespace="team") for i in (1, 2)], ["t2"]),
    ("each namespace is balanced separately", Args(),
     AB + layout({"a": 2, "b": 1}) + [web("t1", "a", namespace="team"), web("t2", "b", namespace="team")], []),
    ("labelSelector: unmatched pods are neither counted nor evicted",
     Args(label_selector=LabelSelector((("tier", "front"),))),
     AB + [web(f"a{i}", "a", labels={"app": "web", "tier": "front"}) for i in (1, 2, 3)]
     + [web("b1", "b", labels={"app": "web", "tier": "back"}), web("b2", "b", labels={"app": "web", "tier": "back"})],
     ["a3"]),  # without the labelSelector [3,2] would be balanced
    ("without labelSelector the same layout is balanced", Args(),
     AB + [web(f"a{i}", "a", labels={"app": "web", "tier": "front"}) for i in (1, 2, 3)]
     + [web("b1", "b", labels={"app": "web", "tier": "back"}), web("b2", "b", labels={"app": "web", "tier": "back"})],
     []),
    ("non-evictable pods are not counted", Args(),
     AB + [web("a1", "a"), web("bare1", "a", owner_kind=None), web("bare2", "a", owner_kind=None), web("b1", "b")], []),
    ("terminating pods are not counted (even with the evict annotation)", Args(),
     AB + layout({"a": 2, "b": 1}) + [web("going", "a", deleting=True,
                                          annotations={"descheduler.alpha.kubernetes.io/evict": "true"})], []),
    ("terminal pods are not counted", Args(), AB + layout({"a": 2, "b": 1}) + [web("done", "a", phase="Succeeded")], []),
]


@pytest.mark.parametrize(("args", "objects", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_cases(args: Args, objects: list[dict[str, Any]], expected: list[str]) -> None:
    assert run_strategy(SPEC, args, objects).names == expected


def test_zero_one_hundred_moves_66() -> None:
    result = run_strategy(SPEC, Args(), ABC + layout({"b": 1, "c": 100}))
    assert len(result.names) == 66
    assert evicted_per_zone(result.names) == {"c": 66}


def test_reason() -> None:
    result = run_strategy(SPEC, Args(), AB + layout({"a": 3, "b": 1}))
    assert [e.reason for e in result.evictions] == [
        ("zone=a has 3 pods matching the spread constraint (zone maxSkew=1 DoNotSchedule selector app=web) "
         "of namespace default, zone=b has 1; average 2 over 2 domains")]


# --- no oscillation ------------------------------------------------------------------------------


def reschedule(objects: list[dict[str, Any]], evicted: list[str], zones: list[str]) -> list[dict[str, Any]]:
    """What the scheduler does with the evicted pods under a maxSkew-1 DoNotSchedule constraint:
    each replacement goes to the zone with the fewest matching pods (first such zone on a tie)."""
    out = copy.deepcopy(objects)
    pods = [o for o in out if o["kind"] == "Pod"]
    counts = Counter(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"] not in evicted)
    for p in pods:
        if p["metadata"]["name"] in evicted:
            target = min(zones, key=lambda z: (counts[z], zones.index(z)))
            p["spec"]["nodeName"] = target
            counts[target] += 1
    return out


@pytest.mark.parametrize(("zones", "counts", "max_skew"), [
    (["a", "b"], {"a": 3, "b": 1}, 1),
    (["a", "b"], {"a": 4}, 1),
    (["a", "b", "c"], {"a": 8, "b": 7}, 1),
    (["a", "b", "c"], {"b": 1, "c": 100}, 1),
    (["a", "b", "c", "d"], {"b": 1, "c": 3, "d": 5}, 1),
    (["a", "b"], {"a": 2, "b": 6}, 2),
    (["a", "b", "c"], {"a": 9, "b": 1, "c": 1}, 3),
], ids=["3-1", "4-0", "8-7-0", "0-1-100", "0-1-3-5", "2-6-skew2", "9-1-1-skew3"])
def test_after_the_evictions_nothing_more_to_do(zones: list[str], counts: dict[str, int], max_skew: int) -> None:
    objects = zone_nodes(*zones) + layout(counts, spread(max_skew))
    first = run_strategy(SPEC, Args(), objects).names
    assert first, "the layout must be unbalanced"
    again = run_strategy(SPEC, Args(), reschedule(objects, first, zones))
    assert again.names == []


def test_seed_zone_comes_back() -> None:
    # Three zones ran one api pod each. Zone c's node stopped and its pod was recreated in zone a
    # (a: 2, b: 1, c: 0). Zone c is Ready again: exactly one pod leaves the crowded zone a, and it
    # fits only onto zone c (the zone below the average), where the scheduler will put it.
    api = spread(match={"app": "api"})
    objects = zone_nodes("a", "b", "c") + [
        web("api-1", "a", api, labels={"app": "api"}), web("api-2", "b", api, labels={"app": "api"}),
        web("api-3-moved", "a", api, labels={"app": "api"})]
    result = run_strategy(SPEC, Args(), objects)
    assert result.names == ["api-3-moved"]
    assert result.evictions[0].node == "a"
    assert run_strategy(SPEC, Args(), reschedule(objects, result.names, ["c"])).names == []
    # While zone c is still down (NotReady) the same layout is balanced over the two live zones.
    down = copy.deepcopy(objects)
    down[2] = node_obj("c", labels={ZONE: "c"}, ready=False)
    assert run_strategy(SPEC, Args(), down).names == []


# --- framework interplay -------------------------------------------------------------------------


@pytest.mark.parametrize(("limits", "expected"), [
    (Limits(per_node=1), ["c3", "a3"]),      # node limit: skip the rest of that node's pods
    (Limits(total=1), ["c3"]),               # total limit: stop
    (Limits(per_namespace=2), ["c3", "c4"]),  # namespace limit: next pod
], ids=["per-node", "total", "per-namespace"])
def test_limits(limits: Limits, expected: list[str]) -> None:
    objects = zone_nodes("a", "b", "c", "d") + layout({"a": 4, "c": 4})
    # domains sorted by size, equal sizes in node order: [b0, d0, a4, c4]; j starts at c
    assert run_strategy(SPEC, Args(), objects).names == ["c3", "c4", "a3", "a4"]
    assert run_strategy(SPEC, Args(), objects, limits=limits).names == expected


def test_pdb_budget_refusal() -> None:
    objects = AB + layout({"a": 4}) + [pdb_obj("web", {"app": "web"}, disruptions_allowed=1)]
    result = run_strategy(SPEC, Args(), objects)
    assert result.names == ["a3"]
    assert [r.pod.name for r in result.refusals] == ["a4"]


def test_pre_eviction_filter_node_fit() -> None:
    # The evictor's nodeFit needs another node; the only other node is full.
    objects = [node_obj("a", labels={ZONE: "a"}), node_obj("b", labels={ZONE: "b"}, pods=1),
               node_obj("x", pods=0)] + layout({"a": 3})
    assert run_strategy(SPEC, Args(topology_balance_node_fit=False), objects).names == ["a3"]
    assert run_strategy(SPEC, Args(topology_balance_node_fit=False), objects,
                        evictor_args=DefaultEvictorArgs(node_fit=True, node_selector="kubernetes.io/hostname=x")
                        ).names == []


def test_plan_aware_planned_pods_are_not_counted() -> None:
    # [3,1] is unbalanced, but an earlier strategy already planned one pod of zone a: [2,1] is fine.
    objects = AB + layout({"a": 3, "b": 1})
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    evictor.evict(state.pods_on_node("a")[0], strategy="Earlier", profile="x", reason="r")
    SPEC.run(Args(), Handle(state, evictor, "x", SPEC.name), state.nodes)
    assert [(e.pod.name, e.strategy) for e in state.planned] == [("a1", "Earlier")]


def _constraint(pod_raw: dict[str, Any]) -> SpreadConstraint:
    pod = Pod.from_api(pod_raw)
    return SpreadConstraint.of(pod.topology_spread_constraints[0], pod)


@pytest.mark.parametrize(("one", "two", "same"), [
    (web("p", "a"), web("q", "b"), True),
    (web("p", "a", tolerations=[{"key": "x", "operator": "Exists"}]), web("q", "b"), True),
    (web("p", "a", spread(nodeTaintsPolicy="Honor"), tolerations=[{"key": "x", "operator": "Exists"}]),
     web("q", "b", spread(nodeTaintsPolicy="Honor")), False),
    (web("p", "a", node_selector={"os": "linux"}), web("q", "b"), False),
    (web("p", "a", spread(nodeAffinityPolicy="Ignore"), node_selector={"os": "linux"}),
     web("q", "b", spread(nodeAffinityPolicy="Ignore")), True),
    (web("p", "a", spread(matchLabelKeys=["rev"]), labels={"app": "web", "rev": "1"}),
     web("q", "b", spread(matchLabelKeys=["rev"]), labels={"app": "web", "rev": "2"}), False),
    (web("p", "a", spread(2)), web("q", "b"), False),
], ids=["identical", "tolerations-ignored", "tolerations-honored", "selector-honored", "selector-ignored",
        "matchLabelKeys", "maxSkew"])
def test_constraint_dedup(one: dict[str, Any], two: dict[str, Any], same: bool) -> None:
    assert (_constraint(one) == _constraint(two)) is same


def test_match_label_keys_merge_into_selector() -> None:
    sc = _constraint(web("p", "a", spread(matchLabelKeys=["rev", "absent"]), labels={"app": "web", "rev": "7"}))
    assert sc.selects(Pod.from_api(web("q", "a", labels={"app": "web", "rev": "7"})))
    assert not sc.selects(Pod.from_api(web("q", "a", labels={"app": "web", "rev": "8"})))
    assert not sc.selects(Pod.from_api(web("q", "a", labels={"rev": "7"})))
    nil = SpreadConstraint.of(TopologySpreadConstraint(1, ZONE, "DoNotSchedule", None, match_label_keys=("rev",)),
                              Pod.from_api(web("p", "a", labels={"rev": "7"})))
    assert not nil.selects(Pod.from_api(web("q", "a", labels={"rev": "7"})))

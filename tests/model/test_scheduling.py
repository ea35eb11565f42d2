"""Scheduler predicates: taint toleration, node selection, preferred weights, eviction order."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.model.records import Taint, Toleration
from kdesched.model.scheduling import (
    has_required_node_affinity,
    is_daemonset_pod,
    is_mirror_pod,
    is_static_pod,
    matches_node_selector,
    preferred_affinity_weight,
    priority_sort_key,
    sort_by_priority_low_to_high,
    tolerates_all,
)

from tests.builders import node, pod

NS, PNS, NE = "NoSchedule", "PreferNoSchedule", "NoExecute"


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("", "Exists"), Taint("any", "v", NE), True),  # empty key + Exists: everything
        (Toleration("", "Exists", "", NS), Taint("any", "v", NE), False),
        (Toleration("k", "Exists"), Taint("k", "whatever", NS), True),
        (Toleration("k", "Exists"), Taint("other", "", NS), False),
        (Toleration("k", "Equal", "v"), Taint("k", "v", NS), True),
        (Toleration("k", "Equal", "v"), Taint("k", "w", NS), False),
        (Toleration("k", "Equal", ""), Taint("k", "", NS), True),
        (Toleration("k", "Equal", "v", NE), Taint("k", "v", NS), False),
        (Toleration("k", "Equal", "v", NS), Taint("k", "v", NS), True),
        (Toleration("", "Equal", "v"), Taint("any", "v", PNS), True),  # ToleratesTaint: empty key matches any key
        (Toleration("k", "Gt", "5"), Taint("k", "7", NS), True),
        (Toleration("k", "Gt", "5"), Taint("k", "3", NS), False),
        (Toleration("k", "Lt", "5"), Taint("k", "3", NS), True),
        (Toleration("k", "Lt", "5"), Taint("k", "x", NS), False),
    ],
)
def test_toleration_tolerates(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


@pytest.mark.parametrize(
    ("tolerations", "taints", "effects", "ok"),
    [
        ((), (), (NS, NE), True),
        ((), (Taint("k", "", PNS),), (NS, NE), True),  # PreferNoSchedule is not a filter
        ((), (Taint("k", "", PNS),), (NS, NE, PNS), False),
        ((), (Taint("k", "", NE),), (NS, NE), False),
        ((), (Taint("k", "", NE),), (NS,), True),
        ((Toleration("k", "Exists", "", NE),), (Taint("k", "", NE), Taint("j", "", NS)), (NS, NE), False),
        ((Toleration("k", "Exists"), Toleration("j", "Equal", "x")), (Taint("k", "", NE), Taint("j", "x", NS)),
         (NS, NE), True),
    ],
)
def test_tolerates_all(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...], effects: tuple[str, ...],
                       ok: bool) -> None:
    assert tolerates_all(tolerations, taints, effects) is ok


def test_tolerates_all_defaults_to_noschedule_and_noexecute() -> None:
    assert tolerates_all((), [Taint("k", "", PNS)])
    assert not tolerates_all((), [Taint("k", "", NE)])


def req_affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


ZONE_A = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
GPU = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
NAMED_N1 = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
NOT_N1 = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}


@pytest.mark.parametrize(
    ("node_selector", "affinity", "node_name", "labels", "matches"),
    [
        (None, None, "n1", {}, True),
        ({"disk": "ssd"}, None, "n1", {"disk": "ssd"}, True),
        ({"disk": "ssd"}, None, "n1", {"disk": "hdd"}, False),
        ({"disk": "ssd"}, req_affinity(ZONE_A), "n1", {"disk": "ssd", "zone": "b"}, False),
        ({"disk": "ssd"}, req_affinity(ZONE_A), "n1", {"disk": "hdd", "zone": "a"}, False),
        (None, req_affinity(ZONE_A, GPU), "n1", {"gpu": "1"}, True),  # terms are ORed
        (None, req_affinity(ZONE_A, GPU), "n1", {"zone": "b"}, False),
        (None, req_affinity(), "n1", {"zone": "a"}, False),  # an empty terms list matches nothing
        (None, req_affinity({}), "n1", {"zone": "a"}, False),  # so does an empty term
        (None, req_affinity(NAMED_N1), "n1", {}, True),
        (None, req_affinity(NAMED_N1), "n2", {}, False),
        (None, req_affinity(NOT_N1), "n2", {}, True),
        (None, req_affinity({**ZONE_A, **NAMED_N1}), "n1", {"zone": "b"}, False),  # ANDed inside a term
        (None, req_affinity({**ZONE_A, **NAMED_N1}), "n1", {"zone": "a"}, True),
        (None, {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": ZONE_A}]}}, "n1", {}, True),  # preferences do not filter
    ],
)
def test_matches_node_selector(node_selector: dict[str, str] | None, affinity: dict[str, Any] | None,
                               node_name: str, labels: dict[str, str], matches: bool) -> None:
    p = pod("p", node_selector=node_selector, affinity=affinity)
    assert matches_node_selector(p, node(node_name, labels=labels)) is matches


def test_has_required_node_affinity() -> None:
    assert has_required_node_affinity(pod("p", affinity=req_affinity()))
    assert not has_required_node_affinity(pod("p"))


def test_preferred_affinity_weight() -> None:
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": ZONE_A}, {"weight": 5, "preference": GPU},
        {"weight": 100, "preference": {}}]}}  # an empty preference matches no node
    p = pod("p", affinity=affinity)
    assert preferred_affinity_weight(p, node("n", labels={"zone": "a", "gpu": ""})) == 15
    assert preferred_affinity_weight(p, node("n", labels={"gpu": ""})) == 5
    assert preferred_affinity_weight(p, node("n")) == 0
    assert preferred_affinity_weight(pod("q"), node("n")) == 0


def test_priority_sort_key_order() -> None:
    prefer = {"descheduler.alpha.kubernetes.io/prefer-no-eviction": ""}
    guaranteed = {"cpu": "1", "memory": "1Gi"}
    pods = [
        pod("high-guaranteed", cpu="1", memory="1Gi", limits=guaranteed, priority=100),
        pod("high-prefer", cpu=None, priority=100, annotations=prefer),
        pod("high-burstable", priority=100),
        pod("high-besteffort", cpu=None, priority=100),
        pod("zero", cpu=None, priority=0),
        pod("negative", cpu=None, priority=-5),
        pod("nil-prefer", cpu=None, annotations=prefer),
        pod("nil-guaranteed", cpu="1", memory="1Gi", limits=guaranteed),
        pod("nil-besteffort", cpu=None),
    ]
    ordered = [p.name for p in sort_by_priority_low_to_high(pods)]
    assert ordered == ["nil-besteffort", "nil-prefer", "nil-guaranteed", "negative", "zero", "high-besteffort",
                       "high-prefer", "high-burstable", "high-guaranteed"]
    assert priority_sort_key(pods[4]) < priority_sort_key(pods[3])


@pytest.mark.parametrize(
    ("annotations", "owner_kind", "mirror", "static", "daemonset"),
    [
        (None, "ReplicaSet", False, False, False),
        ({"kubernetes.io/config.mirror": "abc", "kubernetes.io/config.source": "file"}, "Node", True, True, False),
        ({"kubernetes.io/config.source": "api"}, None, False, False, False),
        ({"kubernetes.io/config.source": "http"}, None, False, True, False),
        (None, "DaemonSet", False, False, True),
    ],
)
def test_pod_kind_predicates(annotations: dict[str, str] | None, owner_kind: str | None, mirror: bool, static: bool,
                             daemonset: bool) -> None:
    p = pod("p", annotations=annotations, owner_kind=owner_kind)
    assert (is_mirror_pod(p), is_static_pod(p), is_daemonset_pod(p)) == (mirror, static, daemonset)

"""The shared math of Low/HighNodeUtilization, checked value by value against upstream's rules
(``normalizer``, ``capNodeCapacityToThreshold``, ``isNodeBelowThreshold``/``AboveThreshold``,
``PodToleratesTaints``)."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.strategies.nodeutilization import (
    DestinationTaints,
    average_percentages,
    cap_capacity,
    deviation_thresholds,
    is_above,
    is_below,
    raw_usage_sum,
    tracked_resources,
    usage_percentages,
)

from tests.builders import node, pod


@pytest.mark.parametrize("usage, capacity, expected", [
    ({"cpu": 1000}, {"cpu": 4000}, {"cpu": 25.0}),
    ({}, {"cpu": 4000}, {"cpu": 0.0}),
    ({"cpu": 1000}, {"cpu": 0}, {"cpu": 0.0}),  # zero capacity -> 0 %
    ({"cpu": 1000}, {}, {}),  # the node does not have the resource -> no entry
    ({"cpu": 5000}, {"cpu": 4000}, {"cpu": 125.0}),  # overcommitted requests are not clamped
], ids=["quarter", "unused", "zero-capacity", "missing-capacity", "overcommitted"])
def test_usage_percentages(usage: dict[str, int], capacity: dict[str, int], expected: dict[str, float]) -> None:
    assert usage_percentages(usage, capacity, ["cpu"]) == expected


def test_average_counts_only_nodes_reporting_the_resource() -> None:
    assert average_percentages([{"cpu": 10.0, "gpu": 100.0}, {"cpu": 30.0}]) == {"cpu": 20.0, "gpu": 100.0}


def test_deviation_thresholds_clamp_and_follow_the_average_keys() -> None:
    low, high = deviation_thresholds({"cpu": 5.0, "memory": 95.0}, {"cpu": 10, "memory": 10, "gpu": 10},
                                     {"cpu": 10, "memory": 10, "gpu": 10})
    assert low == {"cpu": 0.0, "memory": 85.0}
    assert high == {"cpu": 15.0, "memory": 100.0}


@pytest.mark.parametrize("percent, below, above", [
    ({"cpu": 20.0, "pods": 5.0}, True, False),  # at the threshold: below, not above
    ({"cpu": 20.1, "pods": 5.0}, False, True),
    ({"pods": 5.0}, True, False),  # missing usage counts as 0
    ({"cpu": 10.0, "memory": 99.0}, True, False),  # unthresholded resources are ignored
], ids=["at-threshold", "just-above", "missing", "unthresholded"])
def test_below_and_above(percent: dict[str, float], below: bool, above: bool) -> None:
    thresholds = {"cpu": 20.0, "pods": 20.0}
    assert is_below(percent, thresholds) is below
    assert is_above(percent, thresholds) is above


def test_cap_capacity() -> None:
    capacity = {"cpu": 4000, "memory": 1000, "pods": 110}
    caps = cap_capacity(capacity, {"cpu": 33, "pods": 50}, ("cpu", "memory", "pods", "nvidia.com/gpu"))
    assert caps == {"cpu": 1320, "memory": 1000, "pods": 55, "nvidia.com/gpu": 0}
    assert cap_capacity({"pods": 7}, {"pods": 50}, ("pods",)) == {"pods": 3}  # int() truncates 3.5


def test_tracked_resources_and_usage_sum() -> None:
    assert tracked_resources({"nvidia.com/gpu": 1, "cpu": 1}) == ("cpu", "memory", "pods", "nvidia.com/gpu")
    assert raw_usage_sum({"cpu": 500, "memory": 1024, "pods": 2, "other": 9}, ("cpu", "memory", "pods")) == 1526


NS = {"key": "k", "effect": "NoSchedule"}
PNS = {"key": "k", "effect": "PreferNoSchedule"}
J = {"key": "j", "effect": "NoExecute"}


@pytest.mark.parametrize("node_taints, tolerations, allowed", [
    ([[]], [], True),
    ([[NS]], [], False),
    ([[NS]], [{"key": "k", "operator": "Exists"}], True),
    ([[PNS]], [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}], False),  # any effect counts
    ([[NS, J]], [{"operator": "Exists"}], False),  # 1 toleration < 2 taints, even a wildcard
    ([[NS, J]], [{"operator": "Exists"}, {"key": "x", "operator": "Exists"}], True),
    ([[NS], [J]], [{"key": "j", "operator": "Exists"}], True),  # one destination is enough
], ids=["untainted", "untolerated", "tolerated", "prefer-no-schedule", "fewer-tolerations", "enough-tolerations",
        "one-of-two"])
def test_destination_taints(node_taints: list[list[dict[str, Any]]], tolerations: list[dict[str, Any]],
                            allowed: bool) -> None:
    dest = DestinationTaints.of(node(f"n{i}", taints=t) for i, t in enumerate(node_taints))
    p = pod("p", "src", tolerations=tolerations)
    assert dest.allows(p) is allowed
    assert dest.allows(p) is allowed  # cached answer is the same

"""The balancing examples (remove-duplicates, low-node-utilization, high-node-utilization) plan
what their expected.json says, through the real snapshot loader, policy loader and engine; and
the argument each example showcases is what makes the difference."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from kdesched.engine import RunPlan, plan_run
from kdesched.model.files import load_snapshot
from kdesched.policy.load import load_policy
from kdesched.policy.types import Policy
from kdesched.strategies import high_node_utilization, low_node_utilization, remove_duplicates
from kdesched.strategies.registry import Registry

from tests.harness import EXAMPLES, registry_of
from tests.harness import SNAPSHOT_NOW as NOW

OURS = ["remove-duplicates", "low-node-utilization", "high-node-utilization"]


def registry() -> Registry:
    return registry_of(remove_duplicates, low_node_utilization, high_node_utilization)


def plan(example: str, **changed_args: Any) -> RunPlan:
    """Plan the example; ``changed_args`` overrides fields of its one balance plugin's args."""
    folder = EXAMPLES / example
    policy = load_policy(str(folder / "policy.yaml"))
    if changed_args:
        profile = policy.profiles[0]
        name = profile.balance[0]
        new_args = dataclasses.replace(profile.plugin_args[name], **changed_args)
        policy = dataclasses.replace(policy, profiles=(dataclasses.replace(
            profile, plugin_args={**profile.plugin_args, name: new_args}),))
    result = plan_run(policy, load_snapshot(str(folder / "cluster.yaml")), now=NOW, registry=registry())
    assert not result.errors
    return result


def names(result: RunPlan) -> list[str]:
    return [e.pod.name for e in result.evictions]


@pytest.mark.parametrize("example", OURS)
def test_example_plans_expected_evictions(example: str) -> None:
    expected = json.loads((EXAMPLES / example / "expected.json").read_text())["evictions"]
    got = [{"namespace": e.pod.namespace, "pod": e.pod.name, "node": e.node, "strategy": e.strategy}
           for e in plan(example).evictions]
    assert got == expected  # the order is deterministic: node order, then priority/snapshot order


def test_policies_load_as_the_strategies_expect() -> None:
    policy: Policy = load_policy(str(EXAMPLES / "low-node-utilization" / "policy.yaml"))
    args = policy.profiles[0].plugin_args["LowNodeUtilization"]
    assert dict(args.thresholds) == {"cpu": 20, "memory": 20, "pods": 20}
    assert args.eviction_limits_node == 5


def test_remove_duplicates_example_excludes_jobs() -> None:
    # without excludeOwnerKinds the batch Job's 3 pods on node-2 are duplicates too (even share 1)
    assert names(plan("remove-duplicates", exclude_owner_kinds=())) == [
        "web-5d8f7c9b6-q9z2w", "web-5d8f7c9b6-t4n8c",
        "nightly-report-29012345-9mz4q", "nightly-report-29012345-7wq3n"]


def test_low_node_utilization_example_protects_monitoring_and_limits_per_node() -> None:
    assert "grafana-6f7d8c9b5-p4k2m" in names(plan("low-node-utilization", evictable_namespaces=None))
    assert names(plan("low-node-utilization", eviction_limits_node=1)) == ["report-29012345-8kx2p"]


def test_high_node_utilization_example_keeps_pods_without_requests() -> None:
    assert "toolbox-5c6b7d8e9-r2d2x" in names(plan("high-node-utilization", eviction_modes=()))

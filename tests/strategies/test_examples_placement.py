"""The placement examples (node-taints, node-affinity, anti-affinity, topology-spread) plan what
their expected.json says, through the real snapshot loader, policy loader and engine."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from kdesched.engine import plan_run
from kdesched.model.files import load_snapshot
from kdesched.model.snapshot import Snapshot
from kdesched.policy.load import load_policy
from kdesched.strategies import inter_pod_anti_affinity, node_affinity, node_taints, topology_spread
from kdesched.strategies.registry import Registry

from tests.harness import EXAMPLES, registry_of
from tests.harness import SNAPSHOT_NOW as NOW

OURS = ["node-taints", "node-affinity", "anti-affinity", "topology-spread"]


def registry() -> Registry:
    return registry_of(node_taints, node_affinity, inter_pod_anti_affinity, topology_spread)


def key(e: dict[str, str]) -> tuple[str, str]:
    return e["namespace"], e["pod"]


@pytest.mark.parametrize("example", OURS)
def test_example_plans_expected_evictions(example: str) -> None:
    folder = EXAMPLES / example
    expected = json.loads((folder / "expected.json").read_text())["evictions"]
    assert expected, "every example demonstrates at least one eviction"
    plan = plan_run(load_policy(str(folder / "policy.yaml")), load_snapshot(str(folder / "cluster.yaml")),
                    now=NOW, registry=registry())
    assert not plan.errors
    got = [{"namespace": e.pod.namespace, "pod": e.pod.name, "node": e.node, "strategy": e.strategy}
           for e in plan.evictions]
    assert sorted(got, key=key) == sorted(expected, key=key)


@pytest.mark.parametrize(("example", "node"), [("node-taints", "node-2"), ("node-affinity", "node-1")])
def test_event_scoped_run_on_the_changed_node_plans_the_same(example: str, node: str) -> None:
    folder = EXAMPLES / example
    policy, snap = load_policy(str(folder / "policy.yaml")), load_snapshot(str(folder / "cluster.yaml"))
    full = plan_run(policy, snap, now=NOW, registry=registry())
    scoped = plan_run(policy, snap, now=NOW, registry=registry(), nodes=[node])
    assert [e.pod.name for e in scoped.evictions] == [e.pod.name for e in full.evictions]


def test_topology_spread_example_is_stable_once_the_pod_moved() -> None:
    folder = EXAMPLES / "topology-spread"
    policy, snap = load_policy(str(folder / "policy.yaml")), load_snapshot(str(folder / "cluster.yaml"))
    plan = plan_run(policy, snap, now=NOW, registry=registry())
    assert [e.pod.name for e in plan.evictions] == ["api-5f7d9c8b7-r4n6c"]
    # The scheduler recreates it in the empty zone (node-c): nothing more to do.
    after = Snapshot.build(snap.nodes.values(), [
        replace(p, node_name="node-c") if p.name == "api-5f7d9c8b7-r4n6c" else p for p in snap.pods], snap.pdbs,
        snap.priority_classes.values(), snap.namespaces.values())
    assert plan_run(policy, after, now=NOW, registry=registry()).evictions == ()
    # While node-c is still down the api layout (2/1 over two live zones) is within maxSkew.
    down = Snapshot.build([n for n in snap.nodes.values() if n.name != "node-c"], snap.pods, snap.pdbs,
                          snap.priority_classes.values(), snap.namespaces.values())
    assert plan_run(policy, down, now=NOW, registry=registry()).evictions == ()


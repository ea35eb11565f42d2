"""The pod-health examples (too-many-restarts, pod-lifetime, failed-pods) plan what their
expected.json says, through the real snapshot loader, policy loader and engine."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kdesched.engine import plan_run
from kdesched.model.files import load_snapshot
from kdesched.policy.load import load_policy
from kdesched.strategies import failed_pods, pod_lifetime, too_many_restarts
from kdesched.strategies.registry import Registry

from tests.harness import EXAMPLES, registry_of
from tests.harness import SNAPSHOT_NOW as NOW

OURS = ["too-many-restarts", "pod-lifetime", "failed-pods"]


def registry() -> Registry:
    return registry_of(too_many_restarts, pod_lifetime, failed_pods)


def key(e: dict[str, str]) -> tuple[str, str]:
    return e["namespace"], e["pod"]


@pytest.mark.parametrize("example", OURS)
def test_example_plans_expected_evictions(example: str) -> None:
    folder = EXAMPLES / example
    expected = json.loads((folder / "expected.json").read_text())["evictions"]
    plan = plan_run(load_policy(str(folder / "policy.yaml")), load_snapshot(str(folder / "cluster.yaml")),
                    now=NOW, registry=registry())
    assert not plan.errors
    got = [{"namespace": e.pod.namespace, "pod": e.pod.name, "node": e.node, "strategy": e.strategy}
           for e in plan.evictions]
    assert sorted(got, key=key) == sorted(expected, key=key)


def test_pod_lifetime_example_reports_pdb_refusals() -> None:
    folder = EXAMPLES / "pod-lifetime"
    plan = plan_run(load_policy(str(folder / "policy.yaml")), load_snapshot(str(folder / "cluster.yaml")),
                    now=NOW, registry=registry())
    assert [(r.pod.name, r.reason) for r in plan.refusals] == [
        ("ledger-0", "PodDisruptionBudget apps/ledger allows 0 disruption(s) and 0 are already planned"),
        ("gateway-6b8c7d9f4-k7l8m", "PodDisruptionBudget apps/gateway allows 1 disruption(s) and 1 are already planned"),
    ]


def test_examples_depend_on_the_clock() -> None:
    # twelve days earlier session-cache ...-a1b2c was just created and only gateway ...-g5h6j (then
    # 9 days old) is past the week; ledger-0 is still held by its PDB
    folder = EXAMPLES / "pod-lifetime"
    policy, snap = load_policy(str(folder / "policy.yaml")), load_snapshot(str(folder / "cluster.yaml"))
    early = plan_run(policy, snap, now=datetime(2026, 10, 20, 12, 0, 0, tzinfo=UTC), registry=registry())
    assert [e.pod.name for e in early.evictions] == ["gateway-6b8c7d9f4-g5h6j"]

"""Budgets count an evicted pod "until its replacement is Ready or the workload is whole"
(docs/safety.md), also past the replacement timeout (a lingering eviction). Before, a lingering
eviction ended only when the workload was back at the Ready count it had when the move began: a
scale-down, or an unrelated replica crash-looping, kept it counted for ever, and a cluster-wide
budget of 1 then refused every eviction in the cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kdesched.admission.budgets import Budget, BudgetCheck
from kdesched.evictor.ledger import Admission, Ledger, workload_key
from kdesched.model.records import Pod

from tests.builders import pod_obj

TAINTS = "RemovePodsViolatingNodeTaints"
T0 = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC).timestamp()
TIMEOUT = 600.0


def web(i: int, node: str, *, created: float = -3600, ready: bool = True, name: str = "") -> Pod:
    # pod_obj's times are relative to 2026-11-01T12:00:00Z == T0
    return Pod.from_api(pod_obj(name or f"web-7d9f8-{i}", node, owner_name="web-7d9f8",
                                labels={"app": "web", "pod-template-hash": "7d9f8"}, created=created,
                                conditions=[{"type": "Ready", "status": "True" if ready else "False"}]))


def _move_with_one_eviction() -> tuple[Ledger, list[Pod]]:
    pods = [web(i, f"n{i}") for i in range(3)]
    ledger = Ledger().admit([Admission(pods[0], TAINTS, False, f"node:n0:{TAINTS}", "", 3, 3)], T0, "run-1", 60)
    return ledger, pods


def _budget_down(ledger: Ledger, snapshot_pods: list[Pod]) -> int:
    check = BudgetCheck([Budget("cluster", count=1)], ledger, snapshot_pods, lambda _ns: {})
    return check.down


def _settled(ledger: Ledger, key: str, now_pods: list[Pod], steps: tuple[float, ...]) -> Ledger:
    """The ledger after a settle at each of ``steps`` seconds after T0, against ``now_pods``."""
    for step in steps:
        ledger = ledger.settle({key: now_pods}, T0 + step, TIMEOUT).ledger
    return ledger


A_WEEK = (60, TIMEOUT + 120, 3600, 86400, 7 * 86400)


@pytest.mark.parametrize("case", ["replacement-ready-another-pod-unready", "scaled-down-all-ready"])
def test_budget_stops_counting_a_lingering_eviction(case: str) -> None:
    ledger, pods = _move_with_one_eviction()
    key = workload_key(pods[0])
    if case == "replacement-ready-another-pod-unready":
        # the evicted pod is gone; its replacement (created after the admission) is Ready on n3;
        # an unrelated replica (web-2) is crash-looping: not Ready
        now_pods = [web(9, "n3", created=30, name="web-7d9f8-new"), pods[1],
                    web(2, "n2", ready=False, name=pods[2].name)]
    else:
        # the Deployment was scaled from 3 to 2 while the pod was in flight: no replacement comes,
        # the two remaining pods are Ready: the workload is whole at its new size
        now_pods = [pods[1], pods[2]]
    ledger = _settled(ledger, key, now_pods, A_WEEK)
    down = _budget_down(ledger, now_pods)
    assert down == 0, (f"{case}: a week later the cluster-wide budget (maxUnavailable 1) still counts {down} "
                       f"pod(s) of {key} as disrupted, so it refuses every eviction in the cluster; the record "
                       f"is kept for ever: {ledger.moves.get(key)}")
    assert key not in ledger.moves


def test_budget_still_counts_while_the_replacement_is_pending() -> None:
    ledger, pods = _move_with_one_eviction()
    key = workload_key(pods[0])
    # the replacement is Pending (not Ready), and another replica is crash-looping: down it is
    pending = web(9, "", created=30, ready=False, name="web-7d9f8-new")
    now_pods = [pending, pods[1], web(2, "n2", ready=False, name=pods[2].name)]
    ledger = _settled(ledger, key, now_pods, (60, TIMEOUT + 120, 3600))
    assert _budget_down(ledger, now_pods) == 1
    # the replacement turns Ready: no longer counted, though web-2 still crash-loops
    now_pods[0] = web(9, "n3", created=30, name="web-7d9f8-new")
    ledger = _settled(ledger, key, now_pods, (7200,))
    assert _budget_down(ledger, now_pods) == 0 and key not in ledger.moves

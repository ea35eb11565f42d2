"""Fresh node change (kdesched.admission.fresh_change): a node event's eviction waits until the
scheduler has had time to see the taint or label written seconds ago, read from the node's
managedFields. Pure here; through the reactor in tests/reactor/test_controls.py, and the race it
closes on the real control plane in tests/realk8s/test_serve.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kdesched.admission.control import RunContext
from kdesched.admission.fresh_change import FreshChange
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.reasons import Reason
from kdesched.model.records import Node, Pod
from kdesched.model.snapshot import Snapshot
from kdesched.strategies.framework import PlannedEviction

from tests.builders import node_obj, pod_obj

T = datetime(2026, 11, 26, 10, 0, 0, tzinfo=UTC).timestamp()
TAINTS, AFFINITY = "RemovePodsViolatingNodeTaints", "RemovePodsViolatingNodeAffinity"


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def managed(manager: str, at: float, fields: dict[str, Any], subresource: str = "") -> dict[str, Any]:
    return {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": stamp(at),
            "fieldsType": "FieldsV1", "fieldsV1": fields, **({"subresource": subresource} if subresource else {})}


def tainted(at: float, *extra: dict[str, Any]) -> dict[str, Any]:
    raw = node_obj("n1", taints=[{"key": "maintenance", "effect": "NoSchedule"}])
    raw["metadata"]["managedFields"] = [
        managed("kubelet", T - 3600, {"f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}}}}),
        managed("kubectl-taint", at, {"f:spec": {"f:taints": {}}}),
        # the kubelet's status writes are a subresource's: never the taints' time
        managed("kubelet", T, {"f:status": {"f:conditions": {}}, "f:spec": {"f:taints": {}}}, "status"),
        *extra]
    return raw


def test_the_node_record_keeps_when_its_taints_and_labels_were_last_written() -> None:
    node = Node.from_api(tainted(T - 1))
    assert node.taints_written_at == T - 1 and node.labels_written_at == T - 3600
    assert Node.from_api(node_obj("n1")).taints_written_at is None  # no managedFields: not known
    later = Node.from_api(tainted(T - 9, managed("karpenter", T - 2, {"f:spec": {"f:taints": {}}})))
    assert later.taints_written_at == T - 2  # the latest writer
    # an entry that cannot be read is skipped (the API server validates them; it only ever delays)
    odd = tainted(T - 5, {"time": "yesterday", "fieldsV1": {"f:spec": {"f:taints": {}}}}, "not an entry",
                  {"fieldsV1": "x"})
    assert Node.from_api(odd).taints_written_at == T - 5
    junk = node_obj("n1")
    junk["metadata"]["managedFields"] = {"not": "a list"}
    assert Node.from_api(junk).taints_written_at is None


def check(raw_node: dict[str, Any], now: float, trigger: str = "taints", strategy: str = TAINTS,
          origin: str = "") -> Any:
    pod = Pod.from_api(pod_obj("web-1", "n1"))
    snapshot = Snapshot.build([Node.from_api(raw_node)], [pod])
    c = FreshChange().start(RunContext(Ledger(), snapshot, now, trigger=trigger, origin=origin))
    return c.planned(PlannedEviction(pod, "n1", strategy, "default", "untolerated taint"), False)


def test_a_taint_written_within_three_seconds_defers_the_node_events_eviction_until_then() -> None:
    v = check(tainted(T), T + 0.4)
    assert v is not None and v.reason is Reason.FRESH_CHANGE and v.reason.defers
    assert v.until == pytest.approx(T + 3)
    assert "node n1's taints were written 0.4s ago: evicting in 2.6s" in v.message
    assert check(tainted(T), T + 3) is None  # the scheduler has had its time
    assert check(tainted(T - 10), T) is None  # an old taint: at once


def test_only_node_event_runs_and_the_strategies_the_change_drives_wait() -> None:
    for trigger in ("manual", "sweep", "rebalance", "run", ""):
        assert check(tainted(T), T + 0.4, trigger=trigger) is None, trigger  # upstream's decisions, at once
    assert check(tainted(T), T + 0.4, strategy="RemoveDuplicates") is None
    labelled = node_obj("n1")
    labelled["metadata"]["managedFields"] = [managed("kubectl-label", T, {"f:metadata": {"f:labels": {"f:disk": {}}}})]
    v = check(labelled, T + 1, trigger="affinity", strategy=AFFINITY)
    assert v is not None and "node n1's labels were written 1.0s ago" in v.message
    assert check(labelled, T + 1, trigger="affinity", strategy=TAINTS) is None  # its taints are not fresh


def test_the_repeat_of_a_node_events_balance_scoped_run_waits_too() -> None:
    """A label change that runs balance strategies runs under the Lease; its repeat is a
    continuation whose origin is ``affinity``: it waits like the first run."""
    labelled = node_obj("n1")
    labelled["metadata"]["managedFields"] = [managed("kubectl-label", T, {"f:metadata": {"f:labels": {"f:zone": {}}}})]
    v = check(labelled, T + 1, trigger="continuation", strategy=AFFINITY, origin="affinity")
    assert v is not None and v.until == pytest.approx(T + 3)
    assert check(labelled, T + 1, trigger="continuation", strategy=AFFINITY, origin="manual") is None


def test_a_written_time_far_ahead_of_the_runs_clock_holds_nothing() -> None:
    """API servers whose clocks are apart, or managedFields written by a client: a time further ahead
    than the catch-up says nothing about when the node changed, and waiting for it would hold every
    repeat until then. A little ahead (one server a second off) waits at most twice the catch-up."""
    for ahead in (4.0, 60.0, 3600.0, 100 * 365 * 86400.0):  # (the times have whole seconds)
        assert check(tainted(T + ahead), T) is None, ahead
    v = check(tainted(T + 1), T)
    assert v is not None and v.until == pytest.approx(T + 4)

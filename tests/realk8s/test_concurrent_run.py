"""A concurrent ``kdesched run`` against the real API server: several pods under one PDB in flight.

Why: with evictions in flight at once, the only thing keeping a PodDisruptionBudget is the API
server's eviction handler, which checks and decrements ``disruptionsAllowed`` with an
optimistic-concurrency update of the PDB's status (retried on conflict). Here the planner is made
to believe the budget is larger than it is (its snapshot is "a moment stale", as a watch-cache read
may be), so it plans 7 evictions of pods under a PDB that allows 2, all sent at once: exactly 2 must
be evicted and the other 5 reported ``blocked`` after their retries, never more. No controllers run,
so nothing restores the budget meanwhile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main
from kdesched.evictor.execute import EVENT_RETRY, LiveExecutor, RetrySettings
from kdesched.kube.client import KubeClient

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane

NS = "concurrent"
POLICY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: spread
  pluginConfig:
  - name: DefaultEvictor
  - name: RemoveDuplicates
  plugins:
    balance:
      enabled: [RemoveDuplicates]
"""
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def test_concurrent_evictions_under_one_pdb_evict_exactly_the_budget(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cluster.namespace(NS)
    for i in range(8):
        cluster.node(f"node-{i}", cpu="8", memory="16Gi")
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "db", "uid": "3f1c2a7e-0000-4000-8000-000000000001",
             "controller": True}
    for i in range(8):
        cluster.pod(f"db-{i}", NS, labels={"app": "db"}, node="node-0", owner=owner)
        cluster.set_pod_status(NS, f"db-{i}", READY)
    pdb = cluster.pdb("db", {"app": "db"}, NS, min_available=6)
    cluster.api.patch(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/db/status", {"status": {
        "disruptionsAllowed": 2, "currentHealthy": 8, "desiredHealthy": 6, "expectedPods": 8,
        "observedGeneration": pdb["metadata"].get("generation", 1)}})

    real_list = KubeClient.list_for_snapshot

    def stale(self: KubeClient, kind: str, **kwargs: Any) -> list[Any]:
        items = real_list(self, kind, **kwargs)
        if kind == "PodDisruptionBudget":  # the planner believes every replica may go
            for item in items:
                item["status"]["disruptionsAllowed"] = 8
        return items

    monkeypatch.setattr(KubeClient, "list_for_snapshot", stale)
    # short retries: the budget never recovers here (no disruption controller), only the count matters
    monkeypatch.setattr(LiveExecutor.__init__, "__defaults__", (
        RetrySettings(max_attempts=3, initial_backoff_seconds=0.05, max_backoff_seconds=0.2), True, time.sleep, None,
        EVENT_RETRY, time.monotonic))
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    code = main(["run", "--kubeconfig", str(control_plane.admin_kubeconfig), "--policy", str(policy), "-o", "json",
                 "-q", "--kube-api-qps", "1000", "--kube-api-burst", "1000", "--max-concurrent-evictions", "8"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["summary"]
    results = [e["result"] for e in report["evictions"]]
    assert len(results) == 7, report["blocked"]
    assert results.count("evicted") == 2 and results.count("blocked") == 5
    assert all("disruption budget" in e["message"] and e["attempts"] == 3
               for e in report["evictions"] if e["result"] == "blocked")
    # the real Eviction API's 429 carries the DisruptionBudget cause: blocked, not throttled
    assert {e["cause"] for e in report["evictions"] if e["result"] == "blocked"} == {"disruption-budget"}
    status = cluster.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/db")["status"]  # type: ignore[index]
    assert status["disruptionsAllowed"] == 0
    standing = [p for p in cluster.pods(NS) if not p["metadata"].get("deletionTimestamp")]
    assert len(standing) == 6
    evicted = {e["pod"] for e in report["evictions"] if e["result"] == "evicted"}
    assert not evicted & {p["metadata"]["name"] for p in standing}

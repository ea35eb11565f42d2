"""``kdesched run`` and the cluster-health brake: it refuses to evict (exit 1, a clear error in the
report) while more than healthBrake.maxUnhealthyShare of the nodes are NotReady or unreachable,
unless --ignore-cluster-health; a dry run goes ahead (it evicts nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kdesched.cli.main import main

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.test_cli_run import kubeconfig, load_example


def outage(fake: FakeApiServer) -> None:
    load_example(fake, "seed-new-node")  # 3 Ready nodes and one eviction to make
    fake.add(*[node_obj(f"down-{i}", ready=False) for i in range(2)])  # 2 of 5 NotReady: 40%


def test_run_refuses_while_the_cluster_is_unhealthy(fake_api: FakeApiServer, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    outage(fake_api)
    code = main(["run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["evictions"] == []
    (error,) = report["summary"]["errors"]
    assert "2 of 5 nodes (40%)" in error and "--ignore-cluster-health" in error
    assert not [r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]


def test_run_goes_ahead_when_told_to_ignore_cluster_health(fake_api: FakeApiServer, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    outage(fake_api)
    code = main(["run", "--ignore-cluster-health", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and [e["result"] for e in report["evictions"]] == ["evicted"]


def test_a_dry_run_is_not_refused(fake_api: FakeApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outage(fake_api)
    code = main(["run", "--dry-run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-o", "json", "-q"])
    assert code == 0 and json.loads(capsys.readouterr().out)["evictions"]


POLICY_SAFETY_OFF = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: default
  pluginConfig:
  - name: DefaultEvictor
  - name: RemovePodsViolatingNodeTaints
  plugins:
    deschedule:
      enabled: [RemovePodsViolatingNodeTaints]
kdesched:
  safety:
    enabled: false
"""


def test_simulate_event_with_safety_off_judges_every_node_of_the_snapshot(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``simulate --event`` plans from a whole snapshot file: the brake judges its Nodes whatever the
    safety defaults say (a node run over the API reads only its node's pods: tests/reactor/test_controls.py)."""
    from tests.builders import pod_obj

    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    items = [node_obj("t", taints=[taint]), node_obj("a"), *(node_obj(f"down-{i}", ready=False) for i in range(2)),
             pod_obj("web-1", "t", owner_name="web")]  # 2 of 4 NotReady
    (tmp_path / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    (tmp_path / "policy.yaml").write_text(POLICY_SAFETY_OFF)
    code = main(["simulate", str(tmp_path / "cluster.json"), "--policy", str(tmp_path / "policy.yaml"),
                 "--event", "dev.kdesched.node.taints.changed:t", "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["summary"]["safety"]["enabled"] is False
    assert [(e["pod"], e["result"], e["cause"]) for e in report["evictions"]] == [("web-1", "deferred", "health-brake")]

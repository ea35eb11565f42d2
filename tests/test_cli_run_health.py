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

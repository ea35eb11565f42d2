"""The benchmarks that need a real control plane run here, at a tiny size, on this tier's control
plane (the session's etcd + kube-apiserver, its scheduler, controllers and kubelet stand-in; the
differential report, which needs none of them running, is in test_benchmark_differential.py).

Why: as tests/bench/test_benchmarks.py does for the others, so that a refactoring that breaks one
fails CI instead of the next person who wants a figure. Each is run through its own code (the
functions its ``main`` runs, or ``main`` itself with the session's control plane in place of the
one it would start), and only that it completes is checked, not its figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench import bench_admissions, bench_reaction, bench_run_vs_upstream
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "knative" / "common" / "policy.yaml"


def test_bench_reaction_one_story(control_plane: ControlPlane, real: Cluster, tmp_path: Path) -> None:
    """``python bench/bench_reaction.py --stories taint --repeat 1``'s run, on this control plane."""
    run = bench_reaction.one_run(control_plane, "taint", tmp_path, POLICY, timeout=60)
    assert run["seconds"] is not None, run
    assert run["replaced"] == bench_reaction.STORIES_EXPECTED["taint"] == run["expected"], run


@contextmanager
def _this_control_plane(cp: ControlPlane) -> Iterator[ControlPlane]:
    yield cp  # started and stopped by the session fixture


def test_bench_run_vs_upstream_at_a_tiny_size(control_plane: ControlPlane, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``python bench/bench_run_vs_upstream.py --nodes 3 --pods-per-node 2 --variants upstream,kdesched``
    with the session's API server in place of the one it would start."""
    monkeypatch.setattr(bench_run_vs_upstream, "ControlPlane", lambda _bins: _this_control_plane(control_plane))
    code = bench_run_vs_upstream.main(["--nodes", "3", "--pods-per-node", "2", "--variants", "upstream,kdesched",
                                       "--load-workers", "2", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "kdesched" in out and "upstream" in out


def test_bench_admissions_at_a_tiny_size(control_plane: ControlPlane, cluster: Cluster,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``python bench/bench_admissions.py --tiny`` with the session's API server in place of the one
    it would start: writers in processes admitting through the ledger's records and commit Lease."""
    monkeypatch.setattr(bench_admissions, "ControlPlane", lambda _bins: _this_control_plane(control_plane))
    code = bench_admissions.main(["--tiny"])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert "1 writer(s):" in out and "2 writer(s):" in out and "conflicts per admission" in out

"""``python -m bench.differential --seeds 1 --no-whole-policy --kubeconfig K`` on this tier's API
server, at its smallest (one seed, each strategy alone): the report completes and every
disagreement has its documented cause (see tests/bench/test_benchmarks.py for why benchmarks run in
the suite). A module of its own: the decisions are compared with no scheduler or controller-manager
running, as tests/realk8s/test_differential.py compares them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import differential
from tests.realk8s.controlplane import ControlPlane


def test_bench_differential_one_seed(control_plane: ControlPlane, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m bench.differential --seeds 1 --no-whole-policy --kubeconfig K`` on this API server
    (disposable: the tier resets it after every test)."""
    code = differential.main(["--seeds", "1", "--no-whole-policy", "--kubeconfig", str(control_plane.admin_kubeconfig),
                              "--workdir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]

"""`kdesched policy validate` vs what `kdesched serve` refuses in the same policy."""

from __future__ import annotations

from pathlib import Path

import pytest

POLICY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  plugins:
    deschedule:
      enabled: [RemovePodsViolatingNodeTaints]
kdesched:
  sweepIntervalSeconds: 1209600   # two weeks
"""


def test_policy_validate_refuses_the_sweep_interval_serve_refuses(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """docs/cli.md: "Every command (`simulate`, `run`, `serve`, `function`, `policy validate`,
    `policy convert`) checks the policy the same way", and `kdesched.sweepIntervalSeconds` "has the
    same upper bound" (604800, a week) as `--sweep-interval` in `serve`. An operator who runs
    `kdesched policy validate policy.yaml` in CI before rolling out gets "valid policy"; the
    standalone Deployment then exits 2 at start (`kdesched.sweepIntervalSeconds: must be at most
    604800`) and crash-loops. The bound is checked in `cmd_serve` only, not in the policy's
    `kdesched:` block parser."""
    from kdesched.cli.main import main

    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    assert main(["serve", "--policy", str(path), "--kubeconfig", str(tmp_path / "none")]) == 2
    assert "sweepIntervalSeconds" in capsys.readouterr().err  # serve refuses it, naming the field
    code = main(["policy", "validate", str(path)])
    out = capsys.readouterr()
    assert code == 2, f"policy validate accepted it: {out.out.strip()!r}"


def test_the_flag_and_the_policy_have_one_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kdesched.cli import serve
    from kdesched.cli.main import main
    from kdesched.reactor.run import settings

    assert serve.MAX_SWEEP_SECONDS == settings.MAX_SWEEP_SECONDS == 604800
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY.replace("1209600   # two weeks", "604800"), encoding="utf-8")
    assert main(["policy", "validate", str(path)]) == 0, capsys.readouterr()

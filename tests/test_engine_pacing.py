"""The safety defaults through the commands: which mode each command decides in, waves in the
simulate output (JSON adds fields, renames none), and ``kdesched run`` pacing against the fake API
server. Parity (a plain policy in simulate/run deciding as upstream) is proved by every existing
example and strategy test passing unchanged; here only its visible marks are checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kdesched.cli.main import build_parser, main

from tests.fakeapi import FakeApiServer
from tests.test_cli_run import kubeconfig, load_example

ROOT = Path(__file__).resolve().parent.parent
SEED_TAINT = str(ROOT / "examples" / "seed-taint" / "cluster.yaml")
EVENT = "dev.kdesched.node.taints.changed:gpu-1"


def policy_file(tmp_path: Path, safety: dict[str, object] | None) -> str:
    doc: dict[str, object] = {
        "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
        "profiles": [{"name": "taints", "pluginConfig": [{"name": "DefaultEvictor", "args": {}}],
                      "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}]}
    if safety is not None:
        doc["kdesched"] = {"safety": safety}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main(["simulate", *args, "-o", "json", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_simulate_event_shows_the_waves(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = simulate(capsys, SEED_TAINT, "--event", EVENT, "--policy", policy_file(tmp_path, None))
    assert report["summary"]["safety"]["enabled"] is True and "event path" in report["summary"]["safety"]["why"]
    rows = [(e["pod"], e["result"], e["wave"], e["workload"], e.get("waitsFor")) for e in report["evictions"]]
    assert rows == [("shop-84c5b9f6d-9wt5k", "dry-run", 0, "Deployment default/shop", None),
                    ("shop-84c5b9f6d-bq2mr", "dry-run", 1, "Deployment default/shop", ["default/shop-84c5b9f6d-9wt5k"])]
    # the contract's fields are all still there
    assert all({"namespace", "pod", "node", "strategy", "profile", "reason"} <= set(e) for e in report["evictions"])
    waves = report["summary"]["pacing"]["waves"]
    assert [(w["wave"], w["evictions"]) for w in waves] == [(0, ["default/shop-84c5b9f6d-9wt5k"]),
                                                          (1, ["default/shop-84c5b9f6d-bq2mr"])]


def test_simulate_with_a_plain_policy_is_upstream_parity(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = simulate(capsys, SEED_TAINT, "--policy", policy_file(tmp_path, None))
    assert report["summary"]["safety"]["enabled"] is False and "parity" in report["summary"]["safety"]["why"]
    assert "pacing" not in report["summary"]
    assert len(report["evictions"]) == 2 and all("wave" not in e for e in report["evictions"])


def test_the_policy_switch_wins_both_ways(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    on = simulate(capsys, SEED_TAINT, "--policy", policy_file(tmp_path, {"enabled": True}))
    assert [e["wave"] for e in on["evictions"]] == [0, 1] and "policy" in on["summary"]["safety"]["why"]
    off = simulate(capsys, SEED_TAINT, "--event", EVENT, "--policy", policy_file(tmp_path, {"enabled": False}))
    assert off["summary"]["safety"]["enabled"] is False and "pacing" not in off["summary"]


def test_the_shipped_default_policy_turns_the_safety_defaults_on(capsys: pytest.CaptureFixture[str]) -> None:
    report = simulate(capsys, SEED_TAINT)
    assert report["summary"]["safety"] == {"enabled": True, "why": "kdesched.safety.enabled: true in the policy"}
    assert [e["wave"] for e in report["evictions"]] == [0, 1]


def test_simulate_table_names_the_mode_and_the_waves(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["simulate", SEED_TAINT, "--event", EVENT, "-q"]) == 0
    out = capsys.readouterr().out
    assert "WAVE" in out and "wave 0 (at once): default/shop-84c5b9f6d-9wt5k" in out
    assert "wave 1 (once the replacements of wave 0 are Ready: Deployment default/shop)" in out
    assert "mode: kdesched safety defaults" in out
    assert main(["simulate", SEED_TAINT, "--policy", policy_file(tmp_path, None), "-q"]) == 0
    plain = capsys.readouterr().out
    assert "mode: upstream parity" in plain and "WAVE" not in plain


def test_a_bad_safety_block_is_a_clear_input_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["simulate", SEED_TAINT, "--policy", policy_file(tmp_path, {"maxUnavailable": 0}), "-q"])
    _, err = capsys.readouterr()
    assert code == 2 and "kdesched.safety.maxUnavailable" in err and "Traceback" not in err


def test_help_says_which_mode_each_command_is_in(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for command, words in (("simulate", "upstream parity"), ("run", "upstream parity"), ("serve", "event path"),
                           ("function", "event path")):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        assert words in " ".join(capsys.readouterr().out.split()), command


def test_run_with_safety_paces_instead_of_evicting_both(fake_api: FakeApiServer, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-taint")
    # no controller behind the fake: the replacement never comes, so the second waits and is paced
    policy = policy_file(tmp_path, {"enabled": True, "replacementTimeoutSeconds": 0})
    code = main(["run", "--policy", policy, "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-o", "json",
                 "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0  # paced is not a failure
    assert [(e["pod"], e["result"]) for e in report["evictions"]] == [("shop-84c5b9f6d-9wt5k", "evicted"),
                                                                     ("shop-84c5b9f6d-bq2mr", "paced")]
    assert fake_api.get("Pod", "shop-84c5b9f6d-bq2mr", "default") is not None
    assert report["summary"]["results"] == {"evicted": 1, "paced": 1}
    assert [p["pod"] for p in report["summary"]["pacing"]["paced"]] == ["shop-84c5b9f6d-bq2mr"]
    assert sorted(e["reason"] for e in fake_api.list("Event")) == ["EvictionPaced", "RemovePodsViolatingNodeTaints"]


def test_simulate_predicts_where_each_pod_goes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The node the planner reserved for each evicted pod (checked moves compare it with where the
    replacement became Ready): in the JSON rows, ``null`` when nothing was reserved (parity mode
    reserves nothing), and the DESTINATION column of the table."""
    report = simulate(capsys, SEED_TAINT, "--event", EVENT)
    dests = [e["destination"] for e in report["evictions"]]
    assert dests and all(isinstance(d, str) and d for d in dests), dests
    assert all(e["destination"] == e["likelyDestination"] for e in report["evictions"])
    plain = simulate(capsys, SEED_TAINT, "--policy", policy_file(tmp_path, None))
    assert plain["evictions"] and all(e["destination"] is None for e in plain["evictions"])
    assert main(["simulate", SEED_TAINT, "--event", EVENT, "-q"]) == 0
    out = capsys.readouterr().out
    assert "DESTINATION" in out and dests[0] in out

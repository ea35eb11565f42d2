"""The bundled examples retell the seed stories; each one's expected outcome is checked here
through the real CLI (``kdesched simulate``), both as a full run and as the event it describes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kdesched.cli.main import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SEEDS = sorted(p.name for p in EXAMPLES.glob("seed-*") if (p / "expected.json").exists())


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main(["simulate", *args, "--output", "json", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def pick(evictions: list[dict]) -> list[dict]:
    return sorted(({k: e[k] for k in ("namespace", "pod", "node", "strategy")} for e in evictions),
                  key=lambda e: (e["namespace"], e["pod"]))


def test_all_four_seed_stories_are_bundled() -> None:
    assert SEEDS == ["seed-lost-label", "seed-new-node", "seed-taint", "seed-zone-recovery"]


@pytest.mark.parametrize("example", SEEDS)
def test_seed_story_full_run(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((EXAMPLES / example / "expected.json").read_text())
    report = simulate(capsys, str(EXAMPLES / example / "cluster.yaml"), "--now", "2026-11-01T12:00:00Z")
    assert report["dryRun"] is True
    assert pick(report["evictions"]) == pick(expected["evictions"])
    assert all(e["result"] == "dry-run" for e in report["evictions"])


@pytest.mark.parametrize("example", SEEDS)
def test_seed_story_as_its_event(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((EXAMPLES / example / "expected.json").read_text())
    report = simulate(capsys, str(EXAMPLES / example / "cluster.yaml"), "--event", expected["event"],
                      "--now", "2026-11-01T12:00:00Z")
    assert pick(report["evictions"]) == pick(expected["evictions"])


def test_new_node_story_moves_one_replica_and_reports_pods_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    report = simulate(capsys, str(EXAMPLES / "seed-new-node" / "cluster.yaml"))
    per_node = report["summary"]["podsPerNode"]
    # nginx x2 + coredns + kube-proxy on node-1; one nginx leaves
    assert per_node["node-1"] == {"before": 4, "after": 3}
    assert per_node["node-3"] == {"before": 1, "after": 1}


STRATEGY_EXAMPLES = sorted(p.name for p in EXAMPLES.iterdir()
                           if (p / "policy.yaml").exists() and (p / "expected.json").exists())
SNAPSHOT_TIME = "2026-11-01T12:00:00Z"  # when every bundled snapshot was taken


def test_every_strategy_has_an_example() -> None:
    import yaml
    from kdesched.strategies.registry import default_registry

    covered: set[str] = set()
    for name in STRATEGY_EXAMPLES:
        covered.update(e["strategy"] for e in json.loads((EXAMPLES / name / "expected.json").read_text())["evictions"])
        doc = yaml.safe_load((EXAMPLES / name / "policy.yaml").read_text())
        for profile in doc.get("profiles", []):
            for point in ("deschedule", "balance"):
                covered.update(profile.get("plugins", {}).get(point, {}).get("enabled", []))
    assert set(default_registry()) <= covered


@pytest.mark.parametrize("example", STRATEGY_EXAMPLES)
def test_cli_runs_each_strategy_example(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    folder = EXAMPLES / example
    expected = json.loads((folder / "expected.json").read_text())
    report = simulate(capsys, str(folder / "cluster.yaml"), "--policy", str(folder / "policy.yaml"),
                      "--now", SNAPSHOT_TIME)
    assert pick(report["evictions"]) == pick(expected["evictions"])
    assert report["summary"]["errors"] == []


def test_profile_preset_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    # AffinityAndTaints holds RemovePodsViolatingNodeTaints: the taint story comes out the same
    report = simulate(capsys, str(EXAMPLES / "seed-taint" / "cluster.yaml"), "--profile", "AffinityAndTaints",
                      "--now", SNAPSHOT_TIME)
    assert {e["strategy"] for e in report["evictions"]} == {"RemovePodsViolatingNodeTaints"}
    assert {e["profile"] for e in report["evictions"]} == {"AffinityAndTaints"}
    # presets that may not be combined are refused with exit 2
    code = main(["simulate", str(EXAMPLES / "seed-taint" / "cluster.yaml"), "--profile", "LifecycleAndUtilization",
                 "--profile", "LongLifecycle"])
    err = capsys.readouterr().err
    assert code == 2 and "LongLifecycle" in err

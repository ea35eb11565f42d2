"""The ``kdesched`` command's contract: exit codes, messages that name the bad input, output
formats, ``--help``. Run in-process through ``main()``; one test runs the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kdesched.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SEED = str(ROOT / "examples" / "seed-new-node" / "cluster.yaml")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_simulate_table_output_names_strategy_reason_and_counts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", SEED, "-q")
    assert code == 0
    assert "EVICTIONS (dry run: nothing was evicted)" in out
    assert "nginx-6d4cf56db6-f9qzt" in out and "RemoveDuplicates" in out and "would evict" in out
    assert "PODS PER NODE" in out
    assert "1 eviction(s) planned on 3 node(s)" in out
    # a report that lists an eviction never also says there were none (with or without waves)
    assert "No evictions" not in out


def test_simulate_table_says_no_evictions_only_when_there_are_none(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n"
                      "- name: p\n  plugins:\n    deschedule:\n      enabled: [RemovePodsViolatingNodeTaints]\n")
    code, out, _ = run(capsys, "simulate", SEED, "--policy", str(policy), "-q")
    assert code == 0
    assert "No evictions (dry run: nothing was evicted)." in out
    assert "EVICTIONS" not in out


def test_simulate_reads_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(Path(SEED).read_text()))
    code, out, _ = run(capsys, "simulate", "-", "-o", "json", "-q")
    assert code == 0
    assert [e["pod"] for e in json.loads(out)["evictions"]] == ["nginx-6d4cf56db6-f9qzt"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "contains no objects"),
        ("kind: [unclosed", "invalid YAML at line 2 column 1"),
        ('{"kind": "List", "items": [', "invalid"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {namespace: x}\n", "metadata.name: is required"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: lots}}\n",
         "status.allocatable.cpu"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "contains no Node objects"),
        ("- 1\n- 2\n", "expected a Kubernetes object"),
    ],
    ids=["empty", "bad-yaml", "bad-json", "pod-without-name", "bad-quantity", "no-nodes", "not-objects"],
)
def test_bad_cluster_file_exits_2_with_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 content: str, needle: str) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_text(content)
    code, out, err = run(capsys, "simulate", str(f))
    assert code == 2
    assert needle in err and str(f) in err
    assert "Traceback" not in err and out == ""


def test_missing_cluster_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "simulate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such file" in err


def test_bad_now_and_bad_event(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", SEED, "--now", "yesterday")
    assert code == 2 and "--now" in err
    code, _, err = run(capsys, "simulate", SEED, "--event", "no-colon")
    assert code == 2 and "TYPE:NODE" in err
    code, out, err = run(capsys, "simulate", SEED, "--event", "dev.kdesched.node.ready:node-9")
    assert code == 2 and out == ""
    assert "node 'node-9' is not in" in err and "node-1, node-2, node-3" in err
    code, _, err = run(capsys, "simulate", SEED, "--event", "dev.kdesched.node.bogus:node-1")
    assert code == 2 and "unknown event type" in err


def test_bad_policy_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "policy.yaml"
    p.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n"
                 "  pluginConfig:\n  - name: LowNodeUtilization\n    args: {thresholds: {cpu: 120}, targetThresholds: {cpu: 50}}\n"
                 "  plugins: {balance: {enabled: [LowNodeUtilization]}}\n")
    code, out, err = run(capsys, "simulate", SEED, "--policy", str(p))
    assert code == 2 and out == ""
    assert "LowNodeUtilization" in err and "thresholds" in err and "Traceback" not in err
    code, _, err = run(capsys, "policy", "validate", str(p))
    assert code == 2 and "thresholds" in err


def test_policy_validate_and_convert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    p = tmp_path / "v1.yaml"
    p.write_text('apiVersion: "descheduler/v1alpha1"\nkind: "DeschedulerPolicy"\nstrategies:\n'
                 '  "RemoveDuplicates":\n     enabled: true\n  "RemovePodsViolatingNodeTaints":\n     enabled: true\n')
    code, out, _ = run(capsys, "policy", "validate", str(p))
    assert code == 0 and "valid" in out
    code, out, _ = run(capsys, "policy", "convert", str(p))
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc["apiVersion"] == "descheduler/v1alpha2"
    assert [pr["name"] for pr in doc["profiles"]] == ["strategy-RemoveDuplicates-profile",
                                                      "strategy-RemovePodsViolatingNodeTaints-profile"]


def test_help_explains_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("simulate", "run", "serve", "function", "policy"):
        assert cmd in out
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "--event" in out and "--now" in out and "RFC 3339" in out


def test_console_script_is_installed() -> None:
    exe = shutil.which("kdesched")
    assert exe, "the kdesched console script should be on PATH after `pip install`"
    res = subprocess.run([exe, "simulate", SEED, "-o", "json", "-q"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["dryRun"] is True


def test_simulate_event_report_says_what_the_event_runs_and_why(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    """The event's scope is in the report's notes, not only in the log: a node that is not usable
    for ordinary pods yet runs nothing, and the JSON says why."""
    from tests.builders import node_obj, pod_obj

    uninit = node_obj("n3")
    uninit["spec"]["taints"] = [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true",
                                 "effect": "NoSchedule"}]
    cluster = {"apiVersion": "v1", "kind": "List", "items": [
        node_obj("n1"), node_obj("n2"), uninit, *[pod_obj(f"p{i}", "n1", owner_name=f"o{i}") for i in range(3)]]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    code, out, _ = run(capsys, "simulate", str(path), "--event", "dev.kdesched.node.added:n3", "-o", "json")
    notes = json.loads(out)["summary"]["notes"]
    assert code == 0 and any(n.startswith("event dev.kdesched.node.added on n3 runs nothing: ") and "not usable" in n
                             for n in notes), notes
    code, out, _ = run(capsys, "simulate", str(path), "--event", "dev.kdesched.node.added:n2", "-o", "json")
    notes = json.loads(out)["summary"]["notes"]
    assert code == 0 and any(n.startswith("event dev.kdesched.node.added on n2 runs LowNodeUtilization") for n in notes)

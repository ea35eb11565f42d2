"""What the README and ``--help`` promise is what the CLI does (issue 13): one policy check for
every command, the dry-run decision and its reason, the snapshot clock, files written whole,
quantities bounded as the API server bounds them, messages in the operator's words, and
consistent options. Everything runs through ``main()`` (or the console script) with real files."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kdesched.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SEED = str(EXAMPLES / "seed-new-node" / "cluster.yaml")

BAD_BLOCK_POLICY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
kdesched: {settleSeconds: "x", notAKey: 1}
profiles:
- name: p
  pluginConfig:
  - name: LowNodeUtilization
    args: {thresholds: {cpu: 120}, targetThresholds: {cpu: 50}}
  plugins: {balance: {enabled: [LowNodeUtilization]}}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- item 1: one policy check, dryRun from the policy ------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["simulate", SEED, "--policy", "{p}"],
    ["policy", "validate", "{p}"],
    ["policy", "convert", "{p}"],
    ["run", "--policy", "{p}", "--kubeconfig", "/nonexistent/kubeconfig"],
    ["serve", "--policy", "{p}", "--kubeconfig", "/nonexistent/kubeconfig"],
    ["function", "rebalance", "--policy", "{p}"],
], ids=["simulate", "validate", "convert", "run", "serve", "function"])
def test_every_command_reports_plugin_and_kdesched_errors_together(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path, "p.yaml", BAD_BLOCK_POLICY)
    code, out, err = run(capsys, *[a.replace("{p}", policy) for a in argv])
    assert code == 2 and out == ""
    assert policy in err
    assert "thresholds.cpu" in err  # the plugin error ...
    assert 'kdesched.settleSeconds: must be a number >= 0, got "x"' in err  # ... and the block's, in one report
    assert "kdesched.notAKey: unknown field" in err
    assert "kubeconfig" not in err  # nothing else was looked at
    assert "Traceback" not in err


def test_simulate_reports_why_it_is_a_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "simulate", SEED, "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["dryRun"] is True and report["dryRunWhy"] == "simulate never evicts"
    assert "dry run" in err.splitlines()[0]
    code, out, _ = run(capsys, "simulate", SEED, "-q")
    assert out.startswith("Dry run: simulate never evicts.\n")


def test_serve_settings_take_dry_run_from_the_policy(tmp_path: Path) -> None:
    from kdesched.cli.main import load_policy_arg

    policy = write(tmp_path, "p.yaml", "apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\n"
                                       "kdesched: {dryRun: true}\nprofiles: []\n")
    loaded = load_policy_arg(policy)
    assert loaded.dry_run and loaded.settings.dry_run
    assert loaded.dry_run_why == f"kdesched.dryRun: true in {policy}"
    live = load_policy_arg(None)
    assert not live.dry_run and "no --dry-run flag" in live.dry_run_why
    assert load_policy_arg(None, dry_run_flag=True).dry_run_why == "--dry-run"


# --- item 2: the snapshot records its time ------------------------------------------------------------


EXAMPLES_WITH_EXPECTATIONS = sorted(p.name for p in EXAMPLES.iterdir()
                                    if (p / "policy.yaml").exists() and (p / "expected.json").exists())


@pytest.mark.parametrize("example", EXAMPLES_WITH_EXPECTATIONS)
def test_examples_give_what_expected_json_says_without_now(example: str, capsys: pytest.CaptureFixture[str]) -> None:
    folder = EXAMPLES / example
    code, out, _ = run(capsys, "simulate", str(folder / "cluster.yaml"), "--policy", str(folder / "policy.yaml"),
                       "-o", "json", "-q")
    report = json.loads(out)
    expected = json.loads((folder / "expected.json").read_text())
    assert code == 0
    assert sorted(e["pod"] for e in report["evictions"]) == sorted(e["pod"] for e in expected["evictions"])
    assert report["clock"] == {"time": "2026-11-01T12:00:00+00:00",
                               "from": "the snapshot's kdesched.dev/snapshot-time annotation"}


def test_the_snapshot_clock_is_what_keeps_ages_fixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = EXAMPLES / "pod-lifetime"
    policy = str(folder / "policy.yaml")
    # a year later by --now: more pods are old enough (what a newcomer got before the annotation)
    code, out, _ = run(capsys, "simulate", str(folder / "cluster.yaml"), "--policy", policy,
                       "--now", "2027-11-01T12:00:00Z", "-o", "json", "-q")
    later = json.loads(out)
    assert code == 0 and later["clock"]["from"] == "--now"
    assert len(later["evictions"]) > len(json.loads((folder / "expected.json").read_text())["evictions"])
    # without the annotation the current time is used, and the report says so
    doc = yaml.safe_load((folder / "cluster.yaml").read_text())
    del doc["metadata"]["annotations"]
    bare = write(tmp_path, "c.yaml", yaml.safe_dump(doc))
    code, out, _ = run(capsys, "simulate", bare, "--policy", policy, "-o", "json", "-q")
    assert json.loads(out)["clock"]["from"].startswith("the current time")


def test_the_snapshot_time_in_a_json_list_is_read_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((EXAMPLES / "pod-lifetime" / "cluster.yaml").read_text())
    items = doc.pop("items")
    doc["items"] = items  # metadata first, as kubectl writes it
    as_json = write(tmp_path, "c.json", json.dumps(doc))
    code, out, _ = run(capsys, "simulate", as_json, "--policy", str(EXAMPLES / "pod-lifetime" / "policy.yaml"),
                       "-o", "json", "-q")
    assert code == 0 and json.loads(out)["clock"]["time"] == "2026-11-01T12:00:00+00:00"


def test_an_unquoted_snapshot_time_in_yaml_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (EXAMPLES / "pod-lifetime" / "cluster.yaml").read_text()
    unquoted = write(tmp_path, "c.yaml", text.replace("'2026-11-01T12:00:00Z'", "2026-11-01T12:00:00Z"))
    code, out, _ = run(capsys, "simulate", unquoted, "--policy", str(EXAMPLES / "pod-lifetime" / "policy.yaml"),
                       "-o", "json", "-q")
    assert code == 0 and json.loads(out)["clock"]["time"] == "2026-11-01T12:00:00+00:00"
    naive = write(tmp_path, "d.yaml", text.replace("'2026-11-01T12:00:00Z'", "2026-11-01T12:00:00"))
    code, _, err = run(capsys, "simulate", naive)
    assert code == 2 and "time zone" in err


@pytest.mark.parametrize("value", ["yesterday", "2026-11-01T12:00:00", ""])
def test_a_bad_snapshot_time_names_the_annotation(value: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(Path(SEED).read_text())
    doc["metadata"]["annotations"] = {"kdesched.dev/snapshot-time": value}
    code, out, err = run(capsys, "simulate", write(tmp_path, "c.yaml", yaml.safe_dump(doc)))
    assert code == 2 and out == ""
    assert "metadata.annotations[kdesched.dev/snapshot-time]" in err and "time zone" in err


# --- item 3: no traceback, nothing half-written, quantities as the API server bounds them -----------


def test_convert_to_a_directory_or_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = str(EXAMPLES / "pod-lifetime" / "policy.yaml")
    code, out, err = run(capsys, "policy", "convert", policy, "--output-file", str(tmp_path))
    assert code == 2 and out == "" and "is a directory" in err and str(tmp_path) in err and "Traceback" not in err
    missing = tmp_path / "no" / "such" / "out.yaml"
    code, _, err = run(capsys, "policy", "convert", policy, "--output-file", str(missing))
    assert code == 2 and "does not exist" in err and str(missing.parent) in err
    assert not missing.parent.exists() and list(tmp_path.iterdir()) == []


def test_convert_replaces_a_file_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("old content\n")
    code, _, _ = run(capsys, "policy", "convert", str(EXAMPLES / "pod-lifetime" / "policy.yaml"),
                     "--output-file", str(target))
    assert code == 0
    assert yaml.safe_load(target.read_text())["apiVersion"] == "descheduler/v1alpha2"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]  # no temporary file left behind


def _seed_with_request(cpu: str) -> str:
    doc = yaml.safe_load(Path(SEED).read_text())
    pod = next(i for i in doc["items"] if i["kind"] == "Pod")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return yaml.safe_dump(doc)


@pytest.mark.parametrize("cpu", ["-5", "-1m", "-0.5"])
def test_a_negative_request_is_refused_as_the_api_server_does(cpu: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "c.yaml", _seed_with_request(cpu))
    code, out, err = run(capsys, "simulate", path)
    assert code == 2 and out == ""
    assert path in err and "spec.containers[0].resources.requests.cpu" in err
    assert "must be greater than or equal to 0" in err


def test_a_huge_request_is_capped_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # kube-apiserver stores cpu: 1e400 (as 10e399); no component can compute with it
    path = write(tmp_path, "c.yaml", _seed_with_request("1e400"))
    code, out, err = run(capsys, "simulate", path, "-o", "json", "-q")
    report = json.loads(out)
    assert code == 0 and report["summary"]["errors"] == []
    assert "OverflowError" not in out + err and "Traceback" not in err


# --- item 4: messages in the operator's words --------------------------------------------------------


def test_random_bytes_on_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for argv in (["simulate", "-"], ["policy", "validate", "-"], ["simulate", SEED, "--policy", "-"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"kind: \xff\xfe\x80 x"), errors="surrogateescape"))
        code, _, err = run(capsys, *argv)
        assert code == 2 and "<stdin>" in err and "not UTF-8 text" in err, argv
        assert "surrogates" not in err


def test_stdin_cannot_be_read_twice(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", "-", "--policy", "-")
    assert code == 2 and "read only once" in err and "CLUSTER" in err and "--policy" in err


def test_a_cluster_snapshot_given_as_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", SEED, "--policy", SEED)
    assert code == 2 and "looks like a cluster snapshot" in err
    code, _, err = run(capsys, "policy", "validate", SEED)
    assert code == 2 and "looks like a cluster snapshot" in err


def test_validate_names_the_format_it_really_detected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = write(tmp_path, "values.yaml", "removeDuplicates: true\nlowNodeUtilization: true\n")
    code, out, _ = run(capsys, "policy", "validate", values)
    assert code == 0 and "Deckhouse descheduler module values" in out and "deckhouse.io" not in out
    module = EXAMPLES / "policies"
    for path in module.glob("*.yaml"):
        code, out, _ = run(capsys, "policy", "validate", str(path))
        text = path.read_text()
        assert code == 0
        detected = out.split("valid policy (", 1)[1].split(")", 1)[0]
        assert detected in text or detected == "Deckhouse descheduler module values", (path, detected)


@pytest.mark.parametrize("now", ["", " ", "2026-11-01T12:00:00", "2026-11-01", "soon"])
def test_now_must_be_rfc3339_with_a_time_zone(now: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "simulate", SEED, "--now", now)
    assert code == 2 and out == ""
    assert "--now" in err and "RFC 3339" in err


def test_now_with_an_offset_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", SEED, "--now", "2026-11-01T14:00:00+02:00", "-o", "json", "-q")
    assert code == 0 and json.loads(out)["clock"] == {"time": "2026-11-01T14:00:00+02:00", "from": "--now"}


# --- item 7: consistent options ---------------------------------------------------------------------


def test_dash_o_means_output_everywhere(capsys: pytest.CaptureFixture[str]) -> None:
    policy = str(EXAMPLES / "pod-lifetime" / "policy.yaml")
    code, out, _ = run(capsys, "policy", "convert", policy, "-o", "json")
    assert code == 0 and json.loads(out)["apiVersion"] == "descheduler/v1alpha2"
    code, out, _ = run(capsys, "policy", "convert", policy, "--output", "yaml")
    assert code == 0 and yaml.safe_load(out)["kind"] == "DeschedulerPolicy"


def test_help_descriptions_are_wrapped(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["simulate"], ["run"], ["serve"], ["function"], ["policy", "validate"], ["policy", "convert"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = capsys.readouterr().out
        assert max(len(line) for line in text.splitlines()) <= 100, command


def test_convert_keeps_what_was_written_even_when_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path, "p.yaml", """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
evictionFailureEventNotification: false
profiles:
- name: p
  pluginConfig:
  - name: DefaultEvictor
    args: {nodeFit: false, priorityThreshold: {value: 2000000000}, minReplicas: 0}
  - name: RemovePodsViolatingTopologySpreadConstraint
    args: {topologyBalanceNodeFit: true}
  plugins: {balance: {enabled: [RemovePodsViolatingTopologySpreadConstraint]}}
""")
    code, out, _ = run(capsys, "policy", "convert", policy)
    doc = yaml.safe_load(out)
    assert code == 0
    assert doc["evictionFailureEventNotification"] is False
    configs = {c["name"]: c.get("args", {}) for c in doc["profiles"][0]["pluginConfig"]}
    assert configs["DefaultEvictor"] == {"nodeFit": False, "priorityThreshold": {"value": 2000000000},
                                         "minReplicas": 0}
    assert configs["RemovePodsViolatingTopologySpreadConstraint"]["topologyBalanceNodeFit"] is True
    # what nobody wrote stays out, and the result loads back to the same policy
    again = write(tmp_path, "again.yaml", out)
    code, out2, _ = run(capsys, "policy", "convert", again)
    assert code == 0 and yaml.safe_load(out2) == doc


def test_console_script_exits_2_without_traceback_on_bad_stdin() -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "kdesched")
    proc = subprocess.run([exe, "simulate", "-"], input=os.urandom(2048), capture_output=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr and b"not UTF-8 text" in proc.stderr


def test_a_broken_profile_does_not_make_the_event_map_look_wrong(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    policy = write(tmp_path, "p.yaml", BAD_BLOCK_POLICY.replace(
        '{settleSeconds: "x", notAKey: 1}', "{events: {dev.kdesched.node.ready: [LowNodeUtilization]}}"))
    code, _, err = run(capsys, "policy", "validate", policy)
    assert code == 2 and "thresholds.cpu" in err
    assert "kdesched.events" not in err  # LowNodeUtilization is configured; only its threshold is wrong
    fixed = write(tmp_path, "q.yaml", Path(policy).read_text().replace("cpu: 120", "cpu: 20"))
    code, _, err = run(capsys, "policy", "validate", fixed)
    assert code == 0, err
    unconfigured = write(tmp_path, "r.yaml", Path(fixed).read_text().replace(
        "node.ready: [LowNodeUtilization]", "node.ready: [HighNodeUtilization]"))
    code, _, err = run(capsys, "policy", "validate", unconfigured)
    assert code == 2 and "kdesched.events.dev.kdesched.node.ready: strategy HighNodeUtilization needs args" in err

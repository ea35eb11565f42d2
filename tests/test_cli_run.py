"""``kdesched run`` end to end against the local fake API server: a kubeconfig file, real LISTs,
real Eviction API calls, Events, and the exit codes when the cluster cannot be reached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kdesched.cli.main import main

from tests.fakeapi import DROP, PDB_MESSAGE, FakeApiServer, Fault

ROOT = Path(__file__).resolve().parent.parent


def kubeconfig(path: Path, server: str) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
    }))
    return str(path)


def load_example(fake: FakeApiServer, name: str) -> None:
    doc = yaml.safe_load((ROOT / "examples" / name / "cluster.yaml").read_text())
    fake.add(*doc["items"])


def test_run_evicts_through_the_api_and_posts_events(fake_api: FakeApiServer, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-new-node")
    code = main(["run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["dryRun"] is False
    assert [(e["pod"], e["result"]) for e in report["evictions"]] == [("nginx-6d4cf56db6-f9qzt", "evicted")]
    evictions = fake_api.requests("POST")
    assert [r.path for r in evictions if r.path.endswith("/eviction")] == [
        "/api/v1/namespaces/default/pods/nginx-6d4cf56db6-f9qzt/eviction"]
    assert fake_api.get("Pod", "nginx-6d4cf56db6-f9qzt", "default") is None
    events = [e for e in fake_api.list("Event")]
    assert len(events) == 1 and events[0]["reason"] == "RemoveDuplicates"
    assert "node-1" in events[0]["note"]


def test_run_dry_run_touches_nothing(fake_api: FakeApiServer, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-taint")
    code = main(["run", "--dry-run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["dryRun"] is True and len(report["evictions"]) == 2
    assert fake_api.requests("POST") == []
    assert all(r.method == "GET" for r in fake_api.requests())


def test_run_reports_a_pdb_block_without_crashing(fake_api: FakeApiServer, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-zone-recovery")
    # the PDB's status says 1 disruption is allowed, but the API server refuses every time
    refusal = Fault(429, PDB_MESSAGE, details={"causes": [{"reason": "DisruptionBudget", "message": "no"}]})
    fake_api.script_eviction("default/api-5f7d9c8b7-r4n6c", [refusal] * 20)
    policy = tmp_path / "p.yaml"
    policy.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: d\n"
                      "  pluginConfig: [{name: RemoveDuplicates}]\n  plugins: {balance: {enabled: [RemoveDuplicates]}}\n")
    code = main(["run", "--policy", str(policy), "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0  # a blocked eviction is an outcome, not a failure
    assert [(e["pod"], e["result"]) for e in report["evictions"]] == [("api-5f7d9c8b7-r4n6c", "blocked")]
    assert report["blocked"] and report["blocked"][0]["pod"] == "api-5f7d9c8b7-r4n6c"
    assert fake_api.get("Pod", "api-5f7d9c8b7-r4n6c", "default") is not None


def test_run_unreachable_cluster_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--kubeconfig", kubeconfig(tmp_path / "kc", "http://127.0.0.1:9"), "-q"])
    err = capsys.readouterr().err
    assert code == 1
    # the server, what went wrong and what to check, in the operator's words, not urllib3's
    assert "cannot reach the API server at http://127.0.0.1:9" in err and "connection refused" in err
    assert "--kubeconfig" in err
    assert "Retrying" not in err and "MaxRetryError" not in err and "HTTPConnection" not in err
    assert "Traceback" not in err


def test_run_that_cannot_read_still_reports(fake_api: FakeApiServer, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A LIST that still fails after its retries: the JSON report (the contract of docs/cli.md)
    names the failed read in summary.errors, nothing is evicted, exit 1 (was exit 1, no report)."""
    load_example(fake_api, "seed-new-node")
    fake_api.script("GET", "/apis/policy/v1/poddisruptionbudgets", [403])
    code = main(["run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-o", "json", "-q"])
    cap = capsys.readouterr()
    report = json.loads(cap.out)
    assert code == 1
    assert report["evictions"] == [] and report["summary"]["planned"] == 0
    (error,) = report["summary"]["errors"]
    assert error.startswith(f"cannot read the cluster from the API server at {fake_api.url}: HTTP 403")
    assert set(report) == {"dryRun", "dryRunWhy", "evictions", "blocked", "summary"}
    assert fake_api.requests("POST") == []
    # the table says it too
    fake_api.script("GET", "/apis/policy/v1/poddisruptionbudgets", [403])
    assert main(["run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), "-q"]) == 1
    assert "error: cannot read the cluster" in capsys.readouterr().out


def test_run_reads_through_transient_faults(fake_api: FakeApiServer, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """429 with Retry-After, 503, a plain 500 and dropped connections on the LISTs: the run reads
    the cluster anyway and decides what it decides without faults."""
    load_example(fake_api, "seed-new-node")
    kc = kubeconfig(tmp_path / "kc", fake_api.url)
    assert main(["run", "--dry-run", "--kubeconfig", kc, "-o", "json", "-q"]) == 0
    clean = json.loads(capsys.readouterr().out)
    fake_api.script("GET", "/api/v1/pods", [(429, 0), 503, DROP, DROP])
    fake_api.script("GET", "/api/v1/nodes", [500, (503, 0)])
    assert main(["run", "--dry-run", "--kubeconfig", kc, "-o", "json", "-q"]) == 0
    faulty = json.loads(capsys.readouterr().out)
    assert faulty["evictions"] == clean["evictions"] and faulty["summary"]["errors"] == []
    assert not fake_api.scripts[("GET", "/api/v1/pods")] and not fake_api.scripts[("GET", "/api/v1/nodes")]


DRY_RUN_POLICY = ("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nkdesched: {dryRun: true}\nprofiles:\n"
                  "- name: d\n  pluginConfig: [{name: RemoveDuplicates}]\n"
                  "  plugins: {balance: {enabled: [RemoveDuplicates]}}\n")


def test_run_honours_dry_run_from_the_policy(fake_api: FakeApiServer, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-new-node")
    policy = tmp_path / "p.yaml"
    policy.write_text(DRY_RUN_POLICY)
    code = main(["run", "--policy", str(policy), "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 "-o", "json"])
    cap = capsys.readouterr()
    report = json.loads(cap.out)
    assert code == 0
    assert report["dryRun"] is True and f"kdesched.dryRun: true in {policy}" in report["dryRunWhy"]
    assert [(e["pod"], e["result"]) for e in report["evictions"]] == [("nginx-6d4cf56db6-f9qzt", "dry-run")]
    assert fake_api.requests("POST") == []  # no eviction, no Event
    assert fake_api.get("Pod", "nginx-6d4cf56db6-f9qzt", "default") is not None
    first = cap.err.splitlines()[0]
    assert "dry run" in first and "kdesched.dryRun: true" in first


def test_run_flag_only_adds_dry_run(fake_api: FakeApiServer, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-new-node")
    policy = tmp_path / "p.yaml"
    policy.write_text(DRY_RUN_POLICY)
    kc = kubeconfig(tmp_path / "kc", fake_api.url)
    code = main(["run", "--dry-run", "--policy", str(policy), "--kubeconfig", kc, "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["dryRun"] is True
    assert report["dryRunWhy"] == f"--dry-run and kdesched.dryRun: true in {policy}"
    assert fake_api.requests("POST") == []
    # a live run says so, and why
    policy.write_text(DRY_RUN_POLICY.replace("dryRun: true", "dryRun: false"))
    code = main(["run", "--policy", str(policy), "--kubeconfig", kc, "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["dryRun"] is False and "no --dry-run flag" in report["dryRunWhy"]
    assert [r.path for r in fake_api.requests("POST") if r.path.endswith("/eviction")]


def test_run_refuses_a_bad_kdesched_block_before_any_request(fake_api: FakeApiServer, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    load_example(fake_api, "seed-new-node")
    policy = tmp_path / "p.yaml"
    policy.write_text(DRY_RUN_POLICY.replace("{dryRun: true}", '{settleSeconds: "x", bogus: 1}')
                      .replace("[{name: RemoveDuplicates}]", "[{name: RemoveDuplicates, args: {nope: 1}}]"))
    code = main(["run", "--policy", str(policy), "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url)])
    err = capsys.readouterr().err
    assert code == 2
    # one report: the plugin error and both kdesched: errors together
    assert "nope" in err and 'kdesched.settleSeconds: must be a number >= 0, got "x"' in err
    assert "kdesched.bogus: unknown field" in err
    assert fake_api.requests() == []


def test_run_bad_kubeconfig_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--kubeconfig", str(tmp_path / "missing")])
    assert code == 2
    assert "missing" in capsys.readouterr().err


EVICTION = "/api/v1/namespaces/default/pods/nginx-6d4cf56db6-f9qzt/eviction"
EVENTS = "/apis/events.k8s.io/v1/namespaces/default/events"


def test_run_reports_each_outcome_with_its_cause(fake_api: FakeApiServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A throttled eviction is ``throttled`` (cause throttled), exit 1; the table names the cause;
    an Event that cannot be posted is counted in summary.eventsLost and said under the table."""
    load_example(fake_api, "seed-new-node")
    kc = kubeconfig(tmp_path / "kc", fake_api.url)
    fake_api.script("POST", EVICTION, [(429, 0)] * 5)
    code = main(["run", "--kubeconfig", kc, "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    (row,) = report["evictions"]
    assert code == 1 and (row["result"], row["cause"], row["attempts"]) == ("throttled", "throttled", 5)
    assert report["blocked"] == [] and report["summary"]["results"] == {"throttled": 1}
    assert report["summary"]["eventsLost"] == 0
    # the table: the result with its cause, then the eviction goes through; its Event is lost
    fake_api.script("POST", EVICTION, [403])
    assert main(["run", "--kubeconfig", kc, "-q"]) == 1
    assert "failed (rejected)" in capsys.readouterr().out
    fake_api.script("POST", EVENTS, [503] * 10)
    code = main(["run", "--kubeconfig", kc, "-o", "json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and [(e["result"], e["cause"]) for e in report["evictions"]] == [("evicted", "accepted")]
    assert report["summary"]["eventsLost"] == 1 and fake_api.list("Event") == []

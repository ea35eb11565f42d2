"""``--kube-api-qps``, ``--kube-api-burst`` and ``--max-concurrent-evictions`` on run and serve:
validated through ``main()`` (exit 2 naming the flag or the variable, no traceback, no request),
and a concurrent ``kdesched run`` against the fake API server with the flags given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kdesched.cli.main import main

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.test_cli_run import kubeconfig


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize(("flag", "value", "problem"), [
    ("--kube-api-qps", "0", "must be a number > 0"),
    ("--kube-api-qps", "lots", "must be a number > 0"),
    ("--kube-api-qps", "nan", "must be a number > 0"),
    ("--kube-api-qps", "inf", "must be a number > 0"),
    ("--kube-api-qps", "1e10", "must be a number > 0 (requests per second) and at most 10,000"),
    # an upper bound since the issue-25 flag review: "must be an integer >= 1" before
    ("--kube-api-burst", "0", "must be an integer from 1 to 10000"),
    ("--kube-api-burst", "2.5", "must be an integer from 1 to 10000"),
    ("--kube-api-burst", "10001", "must be an integer from 1 to 10000"),
    ("--max-concurrent-evictions", "0", "must be an integer from 1 to 256"),
    ("--max-concurrent-evictions", "257", "must be an integer from 1 to 256"),
])
def test_a_bad_flag_exits_2_naming_it(command: str, flag: str, value: str, problem: str, fake_api: FakeApiServer,
                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url), flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {problem}" in err and "Traceback" not in err
    assert fake_api.requests() == []


def test_a_bad_environment_value_exits_2_naming_the_variable(fake_api: FakeApiServer, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KDESCHED_MAX_CONCURRENT_EVICTIONS", "many")
    code = main(["run", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url)])
    err = capsys.readouterr().err
    assert code == 2
    assert "$KDESCHED_MAX_CONCURRENT_EVICTIONS: must be an integer" in err and "Traceback" not in err
    assert fake_api.requests() == []


def test_a_flag_wins_over_a_bad_environment_value(fake_api: FakeApiServer, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KDESCHED_KUBE_API_QPS", "-3")
    code = main(["run", "--dry-run", "-q", "-o", "json", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 "--kube-api-qps", "20"])
    assert code == 0, capsys.readouterr().err


def test_run_evicts_concurrently_with_the_flags(fake_api: FakeApiServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # eight nodes, 8 replicas of one ReplicaSet on the first: RemoveDuplicates evicts 7 of them (a
    # plain upstream policy: parity, no pacing), all in one batch
    fake_api.add(node_obj("a"), *[node_obj(f"n{i}") for i in range(7)])
    fake_api.add(*[pod_obj(f"web-{i}", node="a") for i in range(8)])
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n"
                      "  pluginConfig:\n  - name: DefaultEvictor\n  - name: RemoveDuplicates\n"
                      "  plugins:\n    balance:\n      enabled: [RemoveDuplicates]\n")
    fake_api.gather_evictions(4)
    code = main(["run", "--policy", str(policy), "-q", "-o", "json",
                 "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 "--kube-api-qps", "1000", "--kube-api-burst", "1000", "--max-concurrent-evictions", "4"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [e["result"] for e in report["evictions"]] == ["evicted"] * 7
    assert fake_api.max_evictions_in_flight == 4
    assert len(fake_api.list("Event")) == 7


@pytest.mark.parametrize(("flags", "expected_rv"), [((), "0"), (("--consistent-read",), None)])
def test_run_reads_from_the_watch_cache_unless_asked_for_a_consistent_read(
        flags: tuple[str, ...], expected_rv: str | None, fake_api: FakeApiServer, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_api.add(node_obj("a"), pod_obj("p", node="a"))
    code = main(["run", "--dry-run", "-q", "-o", "json", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 *flags])
    assert code == 0, capsys.readouterr().err
    lists = [r for r in fake_api.requests("GET") if "watch" not in r.query]
    assert {r.path for r in lists} >= {"/api/v1/pods", "/api/v1/nodes",
                                        "/apis/policy/v1/poddisruptionbudgets"}
    assert {r.query.get("resourceVersion") for r in lists} == {expected_rv}
    assert all(r.query["limit"] == "500" for r in lists)


def test_run_logs_its_limits_and_phases(fake_api: FakeApiServer, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    fake_api.add(node_obj("a"), pod_obj("p", node="a"))
    code = main(["run", "--dry-run", "-o", "json", "--kubeconfig", kubeconfig(tmp_path / "kc", fake_api.url),
                 "--kube-api-qps", "20", "--kube-api-burst", "5", "--max-concurrent-evictions", "3"])
    err = capsys.readouterr().err
    assert code == 0
    assert "client limits: 20 requests/s, burst 5, up to 3 evictions in flight" in err
    assert "read the cluster in " in err and ": 1 pods, 1 nodes; 6 requests, " in err
    assert "planned in " in err
    assert "carried out the plan in " in err and ": 0 requests, 0 bytes; requests waited " in err

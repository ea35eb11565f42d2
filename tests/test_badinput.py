"""The README's promise about bad input, checked on a corpus (tests/badinput/): every malformed
policy, cluster file, command line and CloudEvent ends in exit 2 (or a 4xx Knative does not retry)
with a message naming the file and field, and never a traceback.

Each corpus file says what its message must contain on its first line (``# expect: ...``; two
messages joined by `` || `` when the answer depends on a dependency's release within its range);
command lines and CloudEvents are listed in ``cli.yaml`` and ``events/cases.yaml``."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.cli.main import main
from kdesched.kube.client import KubeClient
from kdesched_functions import FUNCTIONS

from tests.fakeapi import FakeApiServer
from tests.functions.helpers import MODES, ce_request
from tests.functions.test_functions import make_reactor

CORPUS = Path(__file__).resolve().parent / "badinput"
ROOT = CORPUS.parent.parent
SEED = str(ROOT / "examples" / "seed-new-node" / "cluster.yaml")
POLICY = str(ROOT / "examples" / "pod-lifetime" / "policy.yaml")
RETRIED = {404, 408, 409, 429}


def expectation(path: Path) -> tuple[str, ...]:
    """The messages of which the error must contain one. A JSON file, which has no comments, says
    it in its first key instead: ``{"# expect": "...",`` on its first line."""
    first = path.read_bytes().split(b"\n", 1)[0].decode("latin-1")
    if first.startswith('{"# expect": '):
        first = "# expect: " + json.loads(first[len('{"# expect": '):].rstrip().rstrip(","))
    assert first.startswith("# expect: "), f"{path} must start with '# expect: ...'"
    return tuple(part.strip() for part in first[len("# expect: "):].split(" || "))


def cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value itself: exit 2, "argument --flag: ..."
        code = exc.code if isinstance(exc.code, int) else 1
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_refused(code: int, out: str, err: str, expect: str | tuple[str, ...], names: str = "") -> None:
    assert code == 2, err
    assert out == ""
    assert any(e in err for e in ((expect,) if isinstance(expect, str) else expect)), err
    if names:
        assert names in err, err
    assert "Traceback" not in err and 'File "' not in err


POLICIES = sorted((CORPUS / "policies").iterdir())
CLUSTERS = sorted((CORPUS / "clusters").iterdir())


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
@pytest.mark.parametrize("command", ["validate", "convert", "simulate", "run", "serve"])
def test_bad_policy_files(path: Path, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = str(tmp_path / "never-read")
    argv = {"validate": ["policy", "validate", str(path)], "convert": ["policy", "convert", str(path)],
            "simulate": ["simulate", SEED, "--policy", str(path)],
            "run": ["run", "--policy", str(path), "--kubeconfig", kubeconfig],
            "serve": ["serve", "--policy", str(path), "--kubeconfig", kubeconfig]}[command]
    assert_refused(*cli(capsys, argv), expectation(path), names=str(path))


@pytest.mark.parametrize("path", CLUSTERS, ids=[p.name for p in CLUSTERS])
def test_bad_cluster_files(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_refused(*cli(capsys, ["simulate", str(path)]), expectation(path), names=str(path))


@pytest.mark.parametrize("path", CLUSTERS, ids=[p.name for p in CLUSTERS])
def test_bad_cluster_files_on_stdin(path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes()), errors="surrogateescape"))
    assert_refused(*cli(capsys, ["simulate", "-"]), tuple(e.replace(str(path), "<stdin>") for e in expectation(path)),
                   names="<stdin>")


CLI_CASES = yaml.safe_load((CORPUS / "cli.yaml").read_text())


@pytest.mark.parametrize("case", CLI_CASES, ids=[" ".join(c["argv"])[:60] for c in CLI_CASES])
def test_bad_command_lines(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    argv = [a.format(seed=SEED, policy=POLICY, tmp=tmp_path, corpus=CORPUS) for a in case["argv"]]
    assert_refused(*cli(capsys, argv), case["expect"])
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written


EVENT_CASES = yaml.safe_load((CORPUS / "events" / "cases.yaml").read_text())


def _request(case: dict[str, Any], mode: str) -> tuple[dict[str, str], bytes]:
    data = case.get("data")
    raw: bytes | None = case["raw"].encode() if "raw" in case else None
    if "depth" in case:
        raw = b'{"a":' * case["depth"] + b"1" + b"}" * case["depth"]
    headers, body = ce_request(case["type"], {"x": 1} if raw is not None else data, mode,
                               drop=case.get("drop", ""), override=case.get("override"))
    if raw is None:
        return headers, body
    if mode == "binary":
        return headers, raw
    doc = json.loads(body)
    doc["data"] = "__RAW__"
    return headers, json.dumps(doc).encode().replace(b'"__RAW__"', raw)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", EVENT_CASES,
                         ids=[f"{c['function']}-{c.get('field') or c.get('error')}"[:50] for c in EVENT_CASES])
def test_bad_cloudevents(case: dict[str, Any], mode: str, fake_api: FakeApiServer, kube: KubeClient,
                         caplog: pytest.LogCaptureFixture) -> None:
    name = case["function"]
    fn = FUNCTIONS[name]
    if name == "classifier":
        app = fn.create_app(client=kube, broker_url="")
    elif fn.needs_policy:
        app = fn.create_app(reactor=make_reactor(kube))
    else:
        app = fn.create_app()
    with caplog.at_level(logging.INFO):
        resp = app.test_client().post("/", data=_request(case, mode)[1], headers=_request(case, mode)[0])
    assert resp.status_code == case["status"], resp.get_data()[:300]
    assert 400 <= resp.status_code < 500 and resp.status_code not in RETRIED
    body = resp.get_json()
    if "field" in case:
        assert body.get("field") == case["field"], body
    if "error" in case:
        assert case["error"] in body["error"], body
    assert "Traceback" not in caplog.text

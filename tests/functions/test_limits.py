"""Input that can never succeed is a 4xx with a reason in every function, never a 500 that Knative
would retry five times: bodies over the size limit, JSON nested past the depth limit, and
``run.completed`` reports with the wrong shape. Real CloudEvents, binary and structured mode."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched_functions import FUNCTIONS
from kdesched_functions.common import MAX_BODY_BYTES, MAX_JSON_DEPTH, json_depth_exceeds

from tests.fakeapi import FakeApiServer
from tests.functions.helpers import MODES, ce_request, post
from tests.functions.test_functions import make_reactor


def app_for(name: str, kube: KubeClient) -> Any:
    fn = FUNCTIONS[name]
    if name == "classifier":
        return fn.create_app(client=kube, broker_url="").test_client()
    if fn.needs_policy:
        return fn.create_app(reactor=make_reactor(kube)).test_client()
    return fn.create_app().test_client()


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def with_body(headers: dict[str, str], body: bytes, mode: str, data: bytes) -> tuple[dict[str, str], bytes]:
    """The request of ``ce_request`` with its JSON data replaced by raw ``data`` bytes."""
    if mode == "binary":
        return headers, data
    doc = json.loads(body)
    marker = b'"__DATA__"'
    doc["data"] = "__DATA__"
    return headers, json.dumps(doc).encode().replace(marker, data)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_deep_json_is_400_in_every_function(name: str, mode: str, fake_api: FakeApiServer, kube: KubeClient,
                                            caplog: pytest.LogCaptureFixture) -> None:
    client = app_for(name, kube)
    etype = FUNCTIONS[name].accepts[0]
    headers, body = with_body(*ce_request(etype, {"x": 1}, mode), mode, nested(100_000))
    with caplog.at_level(logging.INFO):
        resp = post(client, headers, body)
    assert resp.status_code == 400, resp.get_data()[:300]
    assert f"nested more than {MAX_JSON_DEPTH} levels" in resp.get_json()["error"]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_an_oversized_body_is_413_in_every_function(name: str, mode: str, fake_api: FakeApiServer,
                                                    kube: KubeClient) -> None:
    client = app_for(name, kube)
    etype = FUNCTIONS[name].accepts[0]
    padding = b'"' + b"x" * (MAX_BODY_BYTES + 1) + b'"'
    resp = post(client, *with_body(*ce_request(etype, {"x": 1}, mode), mode, padding))
    assert resp.status_code == 413
    assert "limit" in resp.get_json()["error"]


def test_depth_within_the_limit_and_strings_do_not_count() -> None:
    assert not json_depth_exceeds(nested(MAX_JSON_DEPTH))
    assert json_depth_exceeds(nested(MAX_JSON_DEPTH + 1))
    assert not json_depth_exceeds(json.dumps({"s": "[[[[{{{{" * 100, "q": '\\"[[['}).encode())


def test_an_unterminated_string_is_string_to_the_end_and_scanned_once() -> None:
    """The string pattern once had to end on a quote: from every escaped quote of an unterminated
    string it rescanned the rest of the body (quadratic: docs/benchmarks.md, "The JSON depth
    check"), inside the function's only event slot. Now the rest is one string, read once."""
    assert not json_depth_exceeds(b'{"a": "' + b"[" * (MAX_JSON_DEPTH + 10))  # json.loads refuses it, flat
    assert json_depth_exceeds(b"{" * (MAX_JSON_DEPTH + 1) + b'"' + b'\\"' * 100_000)  # ~200 kB: minutes with the old pattern
    assert not json_depth_exceeds(b'["ok\\\\", "[[[[[[', MAX_JSON_DEPTH) and json_depth_exceeds(b"[" * 3 + b'"\\', 2)


@pytest.mark.parametrize("mode", MODES)
def test_a_body_of_escaped_quotes_is_answered_400_not_held(mode: str) -> None:
    client = FUNCTIONS["deadletter"].create_app().test_client()
    body = b"{" * (MAX_JSON_DEPTH + 1) + b'"' + b'\\"' * ((MAX_BODY_BYTES - 4096) // 2)
    resp = post(client, *with_body(*ce_request("dev.kdesched.run.completed", {"x": 1}, mode), mode, body))
    assert resp.status_code == 400 and resp.get_json()["field"] == "body"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("data", [
    {"evictions": 3}, {"blocked": 7}, {"evictions": "many"}, {"evictions": [], "blocked": {"a": 1}},
], ids=["evictions-number", "blocked-number", "evictions-string", "blocked-object"])
def test_deadletter_refuses_a_malformed_report_with_400(data: dict[str, Any], mode: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    client = FUNCTIONS["deadletter"].create_app().test_client()
    with caplog.at_level(logging.INFO):
        resp = post(client, *ce_request("dev.kdesched.run.completed", data, mode))
    assert resp.status_code == 400
    body = resp.get_json()
    key = next(iter(k for k in ("evictions", "blocked") if not isinstance(data.get(k, []), list)))
    assert body["field"] == f"data.{key}" and "must be a list" in body["error"]
    assert "Traceback" not in caplog.text


def test_deadletter_still_audits_a_good_report(caplog: pytest.LogCaptureFixture) -> None:
    client = FUNCTIONS["deadletter"].create_app().test_client()
    data = {"dryRun": True, "evictions": [{"namespace": "a", "pod": "p", "node": "n", "strategy": "S"}],
            "blocked": []}
    with caplog.at_level(logging.INFO):
        resp = post(client, *ce_request("dev.kdesched.run.completed", data, "binary"))
    assert resp.status_code == 202
    assert "evictions=1 blocked=0" in caplog.text


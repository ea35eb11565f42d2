"""Decoding, validation and status codes shared by every function, through a real Flask test client."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kdesched.kube.errors import Forbidden, Unavailable
from kdesched.reactor.coordination import LockBusy, ShuttingDown
from kdesched.reactor.requests import RequestError
from kdesched_functions.common import (
    Ack,
    HttpError,
    Incoming,
    Reply,
    create_function_app,
    decode_knative_error,
)

from tests.functions.helpers import MODES, ce_request, post, reply_event, reply_mode

T = "dev.kdesched.run.requested"


def app_with(handler: Any, accepted: tuple[str, ...] | None = (T,)) -> Any:
    return create_function_app("test", handler, accepted).test_client()


def echo(incoming: Incoming) -> Reply:
    return Reply("dev.kdesched.run.completed", {"got": incoming.data, "mode": incoming.mode, "type": incoming.type})


@pytest.mark.parametrize("mode", MODES)
def test_reply_in_the_same_mode_as_the_request(mode: str) -> None:
    resp = post(app_with(echo), *ce_request(T, {"dryRun": True}, mode))
    assert resp.status_code == 200 and reply_mode(resp) == mode
    ev = reply_event(resp)
    assert ev.get_type() == "dev.kdesched.run.completed" and ev.get_source() == "/kdesched/test"
    assert ev.get_datacontenttype() == "application/json"
    assert ev.get_data() == {"got": {"dryRun": True}, "mode": mode, "type": T}


@pytest.mark.parametrize("mode", MODES)
def test_no_data_is_none(mode: str) -> None:
    resp = post(app_with(echo), *ce_request(T, None, mode))
    assert resp.status_code == 200 and reply_event(resp).get_data()["got"] is None


@pytest.mark.parametrize("mode", MODES)
def test_ack_is_202_with_empty_body(mode: str) -> None:
    resp = post(app_with(lambda i: Ack()), *ce_request(T, {}, mode))
    assert resp.status_code == 202 and resp.get_data() == b""


NEGATIVE = [
    ({"drop": "id"}, "id"), ({"drop": "source"}, "source"), ({"drop": "type"}, "type"),
    ({"drop": "specversion"}, "specversion"), ({"override": {"specversion": "0.3"}}, "specversion"),
    ({"override": {"type": "dev.kdesched.something.else"}}, "type"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kw,field", NEGATIVE, ids=[f"{next(iter(k))}-{f}" for k, f in NEGATIVE])
def test_missing_or_invalid_attribute_is_400_naming_it(mode: str, kw: dict[str, Any], field: str) -> None:
    resp = post(app_with(echo), *ce_request(T, {"a": 1}, mode, **kw))
    assert resp.status_code == 400
    body = resp.get_json()
    assert body["field"] == field and body["error"]


def test_non_json_data_binary() -> None:
    headers, _ = ce_request(T, {"a": 1}, "binary")
    resp = post(app_with(echo), headers, b"{not json")
    assert resp.status_code == 400 and resp.get_json()["field"] == "data"
    headers["content-type"] = "text/plain"
    resp = post(app_with(echo), headers, b"hello")
    assert resp.status_code == 400 and resp.get_json()["field"] == "datacontenttype"


def test_non_json_data_structured() -> None:
    doc = {"id": "1", "source": "/s", "type": T, "specversion": "1.0", "datacontenttype": "application/json",
           "data": "{not json"}
    resp = post(app_with(echo), {"content-type": "application/cloudevents+json"}, json.dumps(doc).encode())
    assert resp.status_code == 400 and resp.get_json()["field"] == "data"
    doc = {"id": "1", "source": "/s", "type": T, "specversion": "1.0", "data_base64": "aGk="}
    resp = post(app_with(echo), {"content-type": "application/cloudevents+json"}, json.dumps(doc).encode())
    assert resp.status_code == 400 and resp.get_json()["field"] == "data"


@pytest.mark.parametrize("headers,body,field", [
    ({"content-type": "application/json"}, b"{}", "content-type"),
    ({"content-type": "application/cloudevents+json"}, b"[1]", "body"),
    ({"content-type": "application/cloudevents+json"}, b"{oops", "body"),
    ({"content-type": "application/cloudevents-batch+json"}, b"[]", "content-type"),
], ids=["plain json", "structured not an object", "structured not json", "batch"])
def test_not_a_cloudevent(headers: dict[str, str], body: bytes, field: str) -> None:
    resp = post(app_with(echo), headers, body)
    assert resp.status_code == 400 and resp.get_json()["field"] == field


def raiser(exc: BaseException) -> Any:
    def handle(incoming: Incoming) -> Reply:
        raise exc

    return handle


@pytest.mark.parametrize("exc,status", [
    (RequestError("data.strategies: unknown strategy 'X'", "data.strategies"), 400),
    (HttpError(400, "bad", "data.node"), 400),
    (LockBusy("held"), 429),
    (ShuttingDown("bye"), 503),
    (Unavailable("Connection refused"), 503),
    (Forbidden(403, "Forbidden", "nope"), 500),
    (RuntimeError("bug"), 500),
], ids=["request", "http400", "lock", "shutdown", "unreachable", "forbidden", "bug"])
def test_error_mapping(exc: BaseException, status: int) -> None:
    resp = post(app_with(raiser(exc)), *ce_request(T, {}))
    assert resp.status_code == status
    assert resp.status_code not in (404, 408, 409) and resp.get_json()["error"]
    if status == 400:
        assert resp.get_json()["field"]


def test_health_ready_metrics() -> None:
    client = create_function_app("t", echo, (T,), ready=lambda: (False, "cache not seeded")).test_client()
    assert client.get("/healthz").status_code == 200
    r = client.get("/readyz")
    assert r.status_code == 503 and r.get_json()["reason"] == "cache not seeded"
    post(client, *ce_request(T, {}))
    text = client.get("/metrics").get_data(as_text=True)
    assert "kdesched_reactor_events_total" in text and 'function="t"' in text and "kdesched_runs_total" in text


def test_decode_knative_error() -> None:
    data = base64.b64encode(b'{"error":"boom"}').decode()
    assert decode_knative_error({"knativeerrorcode": "500", "knativeerrordata": data, "other": 1}) == {
        "knativeerrorcode": "500", "knativeerrordata": '{"error":"boom"}'}

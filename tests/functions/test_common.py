"""Decoding, validation and status codes shared by every function, through the app's werkzeug test client."""

from __future__ import annotations

import base64
import importlib
import json
import uuid
from typing import Any

import pytest
from kdesched import errors
from kdesched.engine import PlanError
from kdesched.kube.errors import Forbidden, Unavailable
from kdesched.model.errors import ModelError
from kdesched.reactor.events.classifier import NodeInputError
from kdesched.reactor.events.requests import RequestError
from kdesched.reactor.io.lease import LockBusy, ShuttingDown
from kdesched_functions.apierrors import API_ANSWERS
from kdesched_functions.common import (
    Ack,
    Incoming,
    Reply,
    create_function_app,
    decode_knative_error,
    error_status,
    reply_id,
)

from tests.functions.helpers import MODES, ce_request, post, reply_event, reply_mode

T = "dev.kdesched.run.requested"


def app_with(handler: Any, accepted: tuple[str, ...] | None = (T,)) -> Any:
    return create_function_app("test", handler, accepted, answers=API_ANSWERS).test_client()


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
    # no body, so no media type (Flask's default would say text/html)
    assert "Content-Type" not in resp.headers and resp.headers.get("Content-Length") == "0"


def test_reply_id_is_derived_from_the_event() -> None:
    """A redelivery (same source and id) gets the same reply id; another event, another id."""
    got: list[str] = []

    def reply(incoming: Incoming) -> Reply:
        return Reply("dev.kdesched.run.completed", {}, id=reply_id(incoming, "dev.kdesched.run.completed"))

    client = app_with(reply)
    for mode, eid, source in (("binary", "e1", "/s"), ("structured", "e1", "/s"), ("binary", "e2", "/s"),
                              ("binary", "e1", "/other")):
        got.append(reply_event(post(client, *ce_request(T, {}, mode, id=eid, source=source))).get_id())
    assert got[0] == got[1] and len(set(got)) == 3
    assert str(uuid.UUID(got[0])) == got[0]  # a UUID, as CloudEvents producers usually send


def test_replies_without_an_id_get_a_fresh_one() -> None:
    client = app_with(echo)
    ids = {reply_event(post(client, *ce_request(T, {}))).get_id() for _ in range(2)}
    assert len(ids) == 2


# --- UTF-8 only (issue 25: a UTF-16 body was answered 200 and started a live run) -------------------

DATA = {"node": "n1", "note": "caf\u00e9"}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig", "latin-1"])
def test_binary_data_that_is_not_utf8_is_400_naming_data(encoding: str) -> None:
    headers, _ = ce_request(T, DATA, "binary")
    resp = post(app_with(echo), headers, json.dumps(DATA, ensure_ascii=False).encode(encoding))
    assert resp.status_code == 400 and resp.get_json()["field"] == "data", resp.get_json()
    assert "UTF-8" in resp.get_json()["error"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig", "latin-1"])
def test_structured_envelope_that_is_not_utf8_is_400_naming_the_body(encoding: str) -> None:
    headers, body = ce_request(T, DATA, "structured")
    resp = post(app_with(echo), headers, json.dumps(json.loads(body), ensure_ascii=False).encode(encoding))
    assert resp.status_code == 400 and resp.get_json()["field"] == "body", resp.get_json()
    assert "UTF-8" in resp.get_json()["error"]


@pytest.mark.parametrize("mode", MODES)
def test_utf8_with_non_ascii_characters_is_accepted(mode: str) -> None:
    headers, body = ce_request(T, DATA, mode)
    if mode == "binary":
        body = json.dumps(DATA, ensure_ascii=False).encode("utf-8")
    resp = post(app_with(echo), headers, body)
    assert resp.status_code == 200 and reply_event(resp).get_data()["got"]["note"] == "caf\u00e9"


@pytest.mark.parametrize("mode,charset,field", [
    ("binary", "utf-16", "datacontenttype"), ("binary", "ISO-8859-1", "datacontenttype"),
    ("structured", "utf-16", "content-type"), ("binary", "UTF-8", ""), ("binary", '"utf-8"', "")])
def test_a_charset_other_than_utf8_is_refused(mode: str, charset: str, field: str) -> None:
    headers, body = ce_request(T, {"a": 1}, mode)
    key = next(k for k in headers if k.lower() == "content-type")
    headers[key] += f"; charset={charset}"
    resp = post(app_with(echo), headers, body)
    if field:
        assert resp.status_code == 400 and resp.get_json()["field"] == field
    else:
        assert resp.status_code == 200


def test_structured_datacontenttype_charset_is_checked() -> None:
    doc = {"id": "1", "source": "/s", "type": T, "specversion": "1.0",
           "datacontenttype": "application/json; charset=utf-16", "data": {"a": 1}}
    resp = post(app_with(echo), {"content-type": "application/cloudevents+json"}, json.dumps(doc).encode())
    assert resp.status_code == 400 and resp.get_json()["field"] == "datacontenttype"


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
    (errors.InvalidEvent("bad", "data.node"), 400),
    (NodeInputError("metadata.name", "missing"), 400),
    (LockBusy("held"), 429),
    (ShuttingDown("bye"), 503),
    (errors.Overloaded("full"), 503),
    (Unavailable("Connection refused"), 503),
    (Forbidden(403, "Forbidden", "nope"), 500),
    (PlanError("no such priority class"), 500),
    (ModelError("item 3", "bad"), 500),
    (RuntimeError("bug"), 500),
], ids=["request", "invalid", "node-input", "lock", "shutdown", "overloaded", "unreachable", "forbidden", "plan",
        "model", "bug"])
def test_error_mapping(exc: BaseException, status: int) -> None:
    resp = post(app_with(raiser(exc)), *ce_request(T, {}))
    assert resp.status_code == status
    assert resp.status_code not in (404, 408, 409) and resp.get_json()["error"]
    if status == 400:
        assert resp.get_json()["field"]
    if status in (429, 503):  # "try again later": when
        assert int(resp.headers["Retry-After"]) >= 1
    else:
        assert "Retry-After" not in resp.headers


def _renamed(cls: type[BaseException], monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    """``cls`` as if it had been renamed and moved: the same bases and body under another name in
    another module, and the old name gone from its module (what the old map by class-name strings
    could not survive: the name it looked up no longer existed, so the answer became a 500)."""
    body = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
    body.update(__module__="kdesched.elsewhere", __qualname__="Renamed")
    monkeypatch.delattr(importlib.import_module(cls.__module__), cls.__name__)
    return type("Renamed", cls.__bases__, body)


@pytest.mark.parametrize("cls,args,status", [
    (LockBusy, ("held",), 429), (ShuttingDown, ("bye",), 503), (RequestError, ("bad", "data.node"), 400),
    (NodeInputError, ("metadata.name", "missing"), 400), (PlanError, ("x",), 500),
], ids=["LockBusy", "ShuttingDown", "RequestError", "NodeInputError", "PlanError"])
def test_renaming_a_class_keeps_its_answer(cls: type[BaseException], args: tuple[str, ...], status: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors are types, not names: the answer comes from the class's base in kdesched.errors."""
    exc = _renamed(cls, monkeypatch)(*args)
    assert type(exc).__name__ == "Renamed"
    assert error_status(exc).status == status
    resp = post(app_with(raiser(exc)), *ce_request(T, {}))
    assert resp.status_code == status


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def test_every_error_class_answers_something_knative_handles_right() -> None:
    """Every KdeschedError anywhere in the code: never 404/408/409 (Knative would retry a permanent
    error), a 4xx never 429 unless it is "try later", and every 429/503 says when to retry."""
    for module in ("kdesched.reactor.serve.server", "kdesched.reactor.events.requests", "kdesched.reactor.events.classifier",
                   "kdesched.engine", "kdesched.model.errors", "kdesched_functions.classifier",
                   "kdesched_functions.deadletter", "kdesched_functions.manual"):
        importlib.import_module(module)
    classes = _subclasses(errors.KdeschedError)
    assert {LockBusy, ShuttingDown, RequestError, NodeInputError, PlanError, ModelError} <= set(classes)
    for cls in classes:
        assert cls.status in (400, 413, 429, 500, 503), cls
        if cls.status in (429, 503):
            assert cls.retry_after and cls.retry_after >= 1, cls


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


def test_routes_other_than_the_four_answer_json_404_and_405() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("bug in ready")

    client = create_function_app("t", echo, (T,), ready=broken).test_client()
    resp = client.get("/nope")
    assert resp.status_code == 404 and resp.get_json()["error"]
    resp = client.get("/")
    assert resp.status_code == 405 and resp.headers["Allow"] == "POST" and resp.get_json()["error"]
    resp = client.post("/healthz")
    assert resp.status_code == 405 and resp.headers["Allow"] == "GET"
    assert client.head("/healthz").status_code == 200
    resp = client.get("/readyz")  # a failing view is a JSON 500, not a traceback page
    assert resp.status_code == 500 and "bug in ready" in resp.get_json()["error"]


def test_a_structured_event_with_a_stray_ce_header_is_read_as_structured() -> None:
    """The HTTP binding picks the mode by Content-Type: application/cloudevents+json is structured
    whatever other headers come along (a tracing proxy's ce-traceid). The SDK's own detection took
    any ce-* header for binary mode, and the event was refused (400: lost)."""
    from kdesched_functions import FUNCTIONS

    client = FUNCTIONS["deadletter"].create_app().test_client()
    headers, body = ce_request("dev.kdesched.run.completed", {"evictions": [], "blocked": []}, "structured")
    resp = post(client, {**headers, "ce-traceid": "abc"}, body)
    assert resp.status_code == 202, resp.get_data()
    headers, body = ce_request("dev.kdesched.run.completed", {"evictions": 3}, "structured")
    resp = post(client, {**headers, "ce-traceid": "abc"}, body)  # and its data is still the envelope's
    assert resp.status_code == 400 and resp.get_json()["field"] == "data.evictions"

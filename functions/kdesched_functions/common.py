"""The HTTP part every function shares: CloudEvent decoding and validation, replies, status codes,
health and metrics endpoints, and the WSGI app. The runtime (policy, settings, API client,
reactor) is :mod:`kdesched_functions.runtime`, imported only by the functions that evict.

Why two modules: a function imports only what it uses, because with scale-to-zero every import is
paid again on the first event after an idle period. This module imports neither the reactor nor
the policy package nor the kubernetes client, so ``deadletter`` starts with werkzeug and the
CloudEvents SDK alone (docs/reactor.md, "Cold start"; a test checks ``sys.modules``). The app is
plain werkzeug (:class:`FunctionApp`, four fixed routes), not Flask: Flask on top (its routing,
jinja2 templates, click CLI) cost CPU on every start (docs/benchmarks.md, "Figures behind the code")
for nothing a function uses. gunicorn serves it (:mod:`kdesched.httpserver`); tests drive the same
app with werkzeug's test client.

Knative retries 5xx/404/408/409/429 and treats a 2xx with a body that is not a CloudEvent as
a failure (502 at the broker). Every function must therefore map outcomes to status codes the same
way, by the exception's type (:func:`error_status`; each class carries its answer, the bases are in
the leaf module :mod:`kdesched.errors`):

=====================================================  =========================================
outcome                                                answer
=====================================================  =========================================
a run (or a semantic event) to report                  200 + CloudEvent, same mode as the request
nothing to reply                                       202, empty body, no Content-Type
not a CloudEvent, missing/invalid attribute, wrong     400 + JSON ``{"error", "field"}`` (never
type, data or body not UTF-8 JSON, bad data field,     404/408/409/429: those would be retried)
unknown strategy
another run holds the lock / Lease                     429 + Retry-After (retried later)
API server unreachable or failing, shutting down,      503 + Retry-After (retried)
classifier cache not seeded, every event slot taken
anything else (a bug, RBAC forbids, bad kubeconfig)    500 + JSON
=====================================================  =========================================

Limits on input that can never succeed (checked before anything is parsed, answered 413/400 so
Knative does not retry): a request body of at most :data:`MAX_BODY_BYTES` (4 MiB, werkzeug's
``max_content_length``; a run report of 10,000 evictions is about 2 MiB) and JSON nested at most
:data:`MAX_JSON_DEPTH` (64) levels deep (a kdesched event needs fewer than 10; Python's JSON
parser would fail with RecursionError near 1,000). JSON is UTF-8 (RFC 8259 section 8.1, and the
CloudEvents JSON format): ``json.loads`` of bytes would also guess UTF-16 and UTF-32, so bodies
are decoded as strict UTF-8 first, and a byte order mark, NUL bytes or a ``charset`` other than
UTF-8 are refused.

CloudEvents SDK 2.x (``cloudevents.core``) auto-fills ``id`` and ``specversion`` when they are
absent, so the required attributes are checked on the wire before the SDK decodes the message.
"""

from __future__ import annotations

import base64
import codecs
import http.client
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from cloudevents.core.bindings.http import (
    HTTPMessage,
    from_binary_event,
    from_structured_event,
    to_binary_event,
    to_structured_event,
)
from cloudevents.core.v1.event import CloudEvent
from kdesched import errors
from kdesched.bounded_http import open_by
from kdesched.errors import BodyTooLarge, InvalidEvent, KdeschedError, Overloaded
from kdesched.evictor.metrics import REGISTRY
from kdesched.reactor import metrics as m
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment
    from werkzeug.test import Client

log = logging.getLogger("kdesched.functions")

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 64

REQUIRED = ("id", "source", "type", "specversion")
STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"


DEFAULT_MAX_EVENTS = 1000
"""Events handled at once when the server sets no limit (tests, an app built in-process)."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """A decoded, validated CloudEvent."""

    event: CloudEvent
    mode: str  # "binary" | "structured"
    type: str
    id: str
    source: str
    data: Any  # parsed JSON (dict, list, ...) or None when there is no data
    extensions: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer 200 with this CloudEvent."""

    type: str
    data: Any
    subject: str = ""
    id: str = ""
    """Empty: a random id. A reply to an event carries :func:`reply_id` (the same on redelivery)."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Answer 202 with an empty body."""


Result = Reply | Ack
Handler = Callable[[Incoming], Result]


# --- decoding ------------------------------------------------------------------------------------


def _bad(message: str, field: str = "") -> InvalidEvent:
    return InvalidEvent(message, field)


def _json_content_type(ct: str) -> bool:
    base = ct.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json") or base == "text/json"


def _charset(ct: str) -> str:
    """The ``charset`` parameter of a media type, lower case ("" when there is none)."""
    for param in ct.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return ""


def _check_charset(ct: str, fld: str) -> None:
    charset = _charset(ct)
    if charset and charset not in ("utf-8", "utf8"):
        raise _bad(f"{fld} {ct!r} names charset {charset!r}: CloudEvent JSON must be UTF-8", fld)


def utf8_text(raw: bytes, what: str, fld: str) -> str:
    """``raw`` decoded as strict UTF-8, else 400 naming ``fld``. ``json.loads`` of bytes would guess
    UTF-16 or UTF-32 and accept them; JSON exchanged between systems is UTF-8 without a byte order
    mark (RFC 8259 section 8.1), and a NUL byte can appear in no JSON text (the mark of UTF-16/32)."""
    if raw.startswith(codecs.BOM_UTF8):
        raise _bad(f"{what} starts with a byte order mark: JSON must be UTF-8 without one", fld)
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in raw:
        raise _bad(f"{what} is not UTF-8 (a byte order mark or NUL bytes: UTF-16 or UTF-32?): JSON must be UTF-8",
                   fld)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(f"{what} is not UTF-8 ({exc.reason} at byte {exc.start}): JSON must be UTF-8", fld) from None


# a string, or an unterminated one up to the end of the body: each scan then consumes what it read
# (a pattern that must end on a quote rescanned the rest of the body from every escaped quote of an
# unterminated string: quadratic in the body's size; docs/benchmarks.md, "The JSON depth check")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)')
_BRACKETS = re.compile(rb"[\[\]{}]")


def json_depth_exceeds(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests arrays/objects more than ``limit`` deep (strings ignored), checked
    without parsing it: a deep body must be refused before ``json.loads`` recurses into it."""
    if body.count(b"[") + body.count(b"{") <= limit:  # the usual case: too few to nest that deep
        return False
    depth = 0
    for match in _BRACKETS.finditer(_JSON_STRING.sub(b'""', body)):
        if match.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def decode(headers: Mapping[str, str], body: bytes, accepted: Sequence[str] | None) -> Incoming:
    """Decode and validate one CloudEvent from an HTTP request (binary or structured mode)."""
    if len(body) > MAX_BODY_BYTES:
        raise BodyTooLarge(f"request body of {len(body)} bytes is over the limit of {MAX_BODY_BYTES}", "body")
    if json_depth_exceeds(body):
        raise _bad(f"JSON nested more than {MAX_JSON_DEPTH} levels deep; a kdesched event needs far fewer", "body")
    lower = {k.lower(): v for k, v in headers.items()}
    ctype = lower.get("content-type", "")
    base_ct = ctype.split(";", 1)[0].strip().lower()
    if base_ct == BATCH:
        raise _bad("batched CloudEvents are not supported; send one event per request", "content-type")
    if base_ct == STRUCTURED:
        mode = "structured"
        _check_charset(ctype, "content-type")
        try:
            raw = json.loads(utf8_text(body, "structured CloudEvent body", "body") or "null")
        except ValueError as exc:
            raise _bad(f"structured CloudEvent body is not valid JSON: {exc}", "body") from None
        if not isinstance(raw, dict):
            raise _bad("structured CloudEvent body must be a JSON object", "body")
        attrs = {k: raw.get(k) for k in REQUIRED}
    elif any(k.startswith("ce-") for k in lower):
        mode = "binary"
        raw = None
        attrs = {k: lower.get(f"ce-{k}") for k in REQUIRED}
    else:
        raise _bad("not a CloudEvent: no ce-* headers and Content-Type is not application/cloudevents+json",
                   "content-type")
    for name in REQUIRED:
        value = attrs[name]
        if not isinstance(value, str) or not value:
            raise _bad(f"missing or empty required CloudEvent attribute {name!r}", name)
    if attrs["specversion"] != "1.0":
        raise _bad(f"unsupported specversion {attrs['specversion']!r}: only 1.0", "specversion")
    if accepted is not None and attrs["type"] not in accepted:
        raise _bad(f"this function does not accept type {attrs['type']!r} (accepts: {', '.join(accepted)})", "type")
    text: str | None = None  # binary mode: the data, checked as UTF-8 JSON text before the SDK reads it
    if mode == "binary" and body:
        if ctype and not _json_content_type(ctype):
            raise _bad(f"data must be JSON, got Content-Type {ctype!r}", "datacontenttype")
        _check_charset(ctype, "datacontenttype")
        text = utf8_text(body, "data", "data")
    try:
        # the mode chosen above, by the HTTP binding's rule (the Content-Type): the SDK's own detection
        # takes any ce-* header for binary mode, and a structured event with a stray one was refused
        read = from_structured_event if mode == "structured" else from_binary_event
        event = cast(CloudEvent, read(HTTPMessage(dict(lower), body or b"")))
    except Exception as exc:  # noqa: BLE001 - the SDK's validation errors: bad time, bad extension names...
        raise _bad(f"invalid CloudEvent: {exc}", "event") from None
    # data: JSON only
    if mode == "structured":
        assert isinstance(raw, dict)
        if "data_base64" in raw:
            raise _bad("data must be JSON, got data_base64", "data")
        data = raw.get("data")
        dct = raw.get("datacontenttype")
        if dct is not None:
            _check_charset(str(dct), "datacontenttype")
        if isinstance(data, str) and dct and _json_content_type(str(dct)):
            data = _parse_json(data)
        elif isinstance(data, str) and dct and not _json_content_type(str(dct)):
            raise _bad(f"data must be JSON, got datacontenttype {dct!r}", "datacontenttype")
    else:
        data = None if text is None else _parse_json(text)
    ext = {k: v for k, v in event.get_attributes().items()
           if k not in (*REQUIRED, "datacontenttype", "dataschema", "subject", "time")}
    return Incoming(event, mode, str(attrs["type"]), str(attrs["id"]), str(attrs["source"]), data, ext)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _bad(f"data is not valid JSON: {exc}", "data") from None


# --- encoding ------------------------------------------------------------------------------------


_REPLY_IDS = uuid.UUID("5d0f1e52-3c7a-5b8e-9f1a-6b2c4d8e0a17")
"""The uuid5 namespace of reply ids (a fixed constant: ids must not change between releases)."""


def reply_id(incoming: Incoming, reply_type: str) -> str:
    """The id of the ``reply_type`` reply to ``incoming``, derived from the event's identity (source
    + id, which CloudEvents define as unique): every delivery of one event gets the same reply id,
    so a redelivery's reply is a duplicate a consumer (the audit log) can drop, not a second event."""
    return str(uuid.uuid5(_REPLY_IDS, json.dumps([reply_type, incoming.source, incoming.id])))


def make_event(function: str, reply: Reply) -> CloudEvent:
    attrs: dict[str, Any] = {"type": reply.type, "source": f"/kdesched/{function}",
                             "id": reply.id or str(uuid.uuid4()), "specversion": "1.0",
                             "datacontenttype": "application/json", "time": datetime.now(UTC)}
    if reply.subject:
        attrs["subject"] = reply.subject
    return CloudEvent(attributes=attrs, data=reply.data)


def encode(event: CloudEvent, mode: str) -> tuple[bytes, dict[str, str]]:
    msg = to_structured_event(event) if mode == "structured" else to_binary_event(event)
    return msg.body, dict(msg.headers)


def post_events(url: str, function: str, replies: Sequence[Reply], *, attempts: int = 3, timeout: float = 5.0,
                within: float | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
    """POST events to the broker (binary mode), each with bounded retries; raises on final failure.

    ``timeout`` bounds each attempt as a whole (connect, send, the answer's status line and headers:
    :func:`kdesched.bounded_http.open_by`), not each read: a broker or proxy that trickled its answer
    would otherwise hold the function's own request past Knative's timeout. So one event's post gives
    up within ``attempts * timeout`` plus the back-off (defaults: 3 x 5 s + 0.6 s), the DNS lookup aside.
    ``within`` bounds the whole call, however many events: no attempt runs and no back-off is slept
    past it (the last attempt is cut to what is left). A caller answering a request passes it (the
    classifier posts its extra events before its reply); the start-up reconcile and the re-sync, which
    answer nobody, post each event with its own bound."""
    end = None if within is None else time.monotonic() + within
    for posted, reply in enumerate(replies):
        body, headers = encode(make_event(function, reply), "binary")
        for attempt in range(1, attempts + 1):
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            deadline = time.monotonic() + timeout
            try:
                with open_by(req, deadline if end is None else min(deadline, end)) as resp:
                    if 200 <= resp.status < 300:
                        m.EMITTED.labels(reply.type).inc()
                        break
                    err: Exception = RuntimeError(f"broker answered {resp.status}")
            except urllib.error.HTTPError as exc:
                err = exc
                if exc.code < 500 and exc.code not in (404, 408, 409, 429):
                    raise RuntimeError(f"broker rejected {reply.type}: HTTP {exc.code}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                # (an answer that is not HTTP, e.g. a proxy's garbage: BadStatusLine, a failed attempt)
                late = isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)
                err = TimeoutError(f"the broker did not answer within {timeout:g}s") if late else exc
            back_off = 0.2 * 2 ** (attempt - 1) if attempt < attempts else 0.0
            if end is not None and time.monotonic() + back_off >= end:
                raise RuntimeError(f"posting {reply.type} to {url} ran out of the {within:g}s given to post "
                                   f"{len(replies)} event(s) ({posted} posted): {err}")
            if attempt == attempts:
                raise RuntimeError(f"posting {reply.type} to {url} failed after {attempts} attempts: {err}")
            sleep(back_off)


# --- status mapping ------------------------------------------------------------------------------


class Answer(NamedTuple):
    """The answer to an exception raised while handling an event."""

    status: int
    message: str
    field: str = ""
    retry_after: int | None = None


TypeAnswers = tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int, str], ...]
"""(exception types, status, message prefix), first match wins: the answers to errors of a layer
that cannot carry its own (the kube layer's: :mod:`kdesched_functions.apierrors`)."""
RETRY_AFTER_SECONDS = 5
"""Retry-After of a 429 or 503 whose exception names none."""


def error_status(exc: BaseException, answers: TypeAnswers = ()) -> Answer:
    """The answer to ``exc``, raised while handling an event: by its type, never by its name. Our
    own errors carry their answer (:mod:`kdesched.errors`: ``status``, ``field``, ``retry_after``),
    whichever module raised them; werkzeug's are mapped here, and ``answers`` maps other types (the
    kube layer's, for an app that talks to the API server); anything else is a 500."""
    if isinstance(exc, KdeschedError):
        retry = exc.retry_after if exc.retry_after is not None else (
            RETRY_AFTER_SECONDS if exc.status in (429, 503) else None)
        return Answer(exc.status, str(exc), exc.field, retry)
    if isinstance(exc, RequestEntityTooLarge):  # max_content_length, before the body is read
        return Answer(413, f"request body over the limit of {MAX_BODY_BYTES} bytes", "body")
    if isinstance(exc, HTTPException) and exc.code is not None and 400 <= exc.code < 500 \
            and exc.code not in (404, 408, 409, 429):
        return Answer(exc.code, str(exc.description or exc.name))
    for types, status, prefix in answers:
        if isinstance(exc, types):
            return Answer(status, f"{prefix}{exc}", "", RETRY_AFTER_SECONDS if status == 503 else None)
    if isinstance(exc, RecursionError):  # a safety net: decode() refuses deep JSON before parsing
        return Answer(400, "input nested too deeply")
    return Answer(500, f"internal error: {type(exc).__name__}: {exc}")


def expected_error(exc: BaseException) -> bool:
    """An answer the code meant to give (logged at INFO, without a traceback): our own errors
    other than :class:`~kdesched.errors.CannotRun`."""
    return isinstance(exc, (errors.InvalidEvent, errors.TryLater, errors.Unavailable))


def _json_response(status: int, payload: Mapping[str, Any]) -> Response:
    return Response(json.dumps(payload), status=status, mimetype="application/json")


def empty_response(status: int = 202) -> Response:
    """An answer without a body, and so without a Content-Type (werkzeug would say ``text/plain``): an
    acknowledgement the broker must not read as a reply (Knative: a 2xx with an empty body is a
    plain ack; 202 is never a reply)."""
    resp = Response(b"", status=status)
    del resp.headers["Content-Type"]
    return resp


# --- the app ---------------------------------------------------------------------------------------


View = Callable[[Request], Response]


class FunctionApp:
    """One function over HTTP, a WSGI app: ``POST /`` (the CloudEvent) plus ``GET /healthz``,
    ``/readyz`` and ``/metrics``. ``config`` holds what tests and the factories attach
    (``KDESCHED_FUNCTION``, the classifier's ``KDESCHED_CLASSIFIER``)."""

    def __init__(self, name: str, handler: Handler, accepted: Sequence[str] | None,
                 ready: Callable[[], tuple[bool, str]] | None = None, max_events: int = DEFAULT_MAX_EVENTS,
                 answers: TypeAnswers = ()) -> None:
        self.name = name
        self.handler = handler
        self.accepted = accepted
        self.ready = ready
        self.config: dict[str, Any] = {"KDESCHED_FUNCTION": name}
        self.answers = answers
        self.max_events = max_events
        self._slots = threading.BoundedSemaphore(max_events)
        self._routes: dict[str, dict[str, View]] = {
            "/": {"POST": self._receive}, "/healthz": {"GET": self._healthz},
            "/readyz": {"GET": self._readyz}, "/metrics": {"GET": self._metrics}}

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Any:
        request = Request(environ)
        request.max_content_length = MAX_BODY_BYTES  # 413 before more of the body is read
        methods = self._routes.get(request.path)
        if methods is None:
            response = _json_response(404, {"error": f"no such path {request.path!r} (POST / takes CloudEvents)"})
        else:
            view = methods.get(request.method) or (methods.get("GET") if request.method == "HEAD" else None)
            if view is None:
                response = _json_response(405, {"error": f"{request.method} is not allowed on {request.path}"})
                response.headers["Allow"] = ", ".join(methods)
            else:
                try:
                    response = view(request)
                except Exception as exc:  # boundary: a bug answers 500, never a traceback page
                    log.exception("%s: %s %s failed", self.name, request.method, request.path)
                    response = _json_response(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})
        return response(environ, start_response)

    def limit_events(self, max_events: int) -> None:
        """Handle at most ``max_events`` events at once (the server sets the Service's
        ``containerConcurrency``); set before serving."""
        self.max_events = max_events
        self._slots = threading.BoundedSemaphore(max_events)

    def test_client(self) -> Client:
        """A werkzeug test client (tests only: ``client.post("/", data=..., headers=...)``)."""
        from werkzeug.test import Client

        return Client(self)

    def _receive(self, request: Request) -> Response:
        name, ce_type, ce_id = self.name, "-", "-"
        try:
            # at most max_events at once (the Service's containerConcurrency): one more is answered
            # 503 + Retry-After at once, never queued behind a run while it holds a server thread
            if not self._slots.acquire(blocking=False):
                raise Overloaded(f"{self.max_events} event(s) in progress, the most this instance takes at once")
            try:
                incoming = decode(dict(request.headers), request.get_data(cache=False), self.accepted)
                ce_type, ce_id = incoming.type, incoming.id
                result = self.handler(incoming)
            finally:
                self._slots.release()
            if isinstance(result, Ack):
                m.EVENTS.labels(name, ce_type, "202").inc()
                return empty_response(202)
            body, headers = encode(make_event(name, result), incoming.mode)
            m.EVENTS.labels(name, ce_type, "200").inc()
            return Response(body, status=200, headers=headers)
        except Exception as exc:
            answer = error_status(exc, self.answers)
            status, message, fld = answer.status, answer.message, answer.field
            m.EVENTS.labels(name, ce_type, str(status)).inc()
            expected = expected_error(exc)
            level = logging.ERROR if status >= 500 and not expected else logging.INFO
            log.log(level, "%s: %s %s -> %d: %s", name, ce_type, ce_id, status, message,
                    exc_info=status == 500 and not isinstance(exc, KdeschedError),
                    extra={"function": name, "ce_type": ce_type, "ce_id": ce_id, "status": status,
                           **({"field": fld} if fld else {})})
            payload: dict[str, Any] = {"error": message}
            if fld:
                payload["field"] = fld
            resp = _json_response(status, payload)
            if answer.retry_after is not None:
                resp.headers["Retry-After"] = str(answer.retry_after)
            return resp

    def _healthz(self, request: Request) -> Response:
        return _json_response(200, {"status": "ok"})

    def _readyz(self, request: Request) -> Response:
        ok, why = self.ready() if self.ready is not None else (True, "ready")
        return _json_response(200 if ok else 503, {"status": "ready" if ok else "not ready", "reason": why})

    def _metrics(self, request: Request) -> Response:
        return Response(generate_latest(REGISTRY), status=200, mimetype=CONTENT_TYPE_LATEST)


def create_function_app(name: str, handler: Handler, accepted: Sequence[str] | None, *,
                        ready: Callable[[], tuple[bool, str]] | None = None,
                        max_events: int = DEFAULT_MAX_EVENTS, answers: TypeAnswers = ()) -> FunctionApp:
    """The app serving one function at ``POST /`` plus /healthz, /readyz and /metrics, handling at
    most ``max_events`` events at once (more: 503 with Retry-After); ``answers``: see
    :func:`error_status`."""
    return FunctionApp(name, handler, accepted, ready, max_events, answers)


def decode_knative_error(ext: Mapping[str, Any]) -> dict[str, Any]:
    """The dead-letter extensions, with ``knativeerrordata`` base64-decoded."""
    out: dict[str, Any] = {}
    for key in ("knativeerrordest", "knativeerrorcode", "knativeerrordata"):
        if key not in ext:
            continue
        value = ext[key]
        if key == "knativeerrordata" and isinstance(value, str):
            try:
                value = base64.b64decode(value, validate=True).decode("utf-8", "replace")
            except (ValueError, TypeError):
                pass
        out[key] = value
    return out

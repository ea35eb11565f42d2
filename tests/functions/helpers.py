"""Build real CloudEvent HTTP requests with the SDK (binary and structured), and read replies."""

from __future__ import annotations

import json
from typing import Any

from cloudevents.core.bindings.http import HTTPMessage, from_http_event, to_binary_event, to_structured_event
from cloudevents.core.v1.event import CloudEvent

MODES = ("binary", "structured")


def ce_request(etype: str, data: Any = None, mode: str = "binary", *, id: str = "evt-1", source: str = "/test",
               drop: str = "", override: dict[str, Any] | None = None,
               extensions: dict[str, Any] | None = None) -> tuple[dict[str, str], bytes]:
    """Headers and body of a CloudEvent request; ``drop`` removes one attribute on the wire,
    ``override`` replaces attribute values on the wire (e.g. specversion)."""
    attrs: dict[str, Any] = {"type": etype, "source": source, "id": id, "specversion": "1.0",
                             **(extensions or {})}
    if data is not None:
        attrs["datacontenttype"] = "application/json"
    event = CloudEvent(attributes=attrs, data=data)
    if mode == "binary":
        msg = to_binary_event(event)
        headers = dict(msg.headers)
        if drop:
            headers.pop(f"ce-{drop}", None)
        for k, v in (override or {}).items():
            headers[f"ce-{k}"] = v
        return headers, msg.body
    msg = to_structured_event(event)
    doc = json.loads(msg.body)
    if drop:
        doc.pop(drop, None)
    doc.update(override or {})
    return dict(msg.headers), json.dumps(doc).encode()


def post(client: Any, headers: dict[str, str], body: bytes) -> Any:
    return client.post("/", data=body, headers=headers)


def reply_event(resp: Any) -> CloudEvent:
    """Decode a 200 reply with the SDK (it must be a valid CloudEvent)."""
    return from_http_event(HTTPMessage({k.lower(): v for k, v in resp.headers.items()}, resp.get_data()))


def reply_mode(resp: Any) -> str:
    return "structured" if resp.headers.get("Content-Type", "").startswith("application/cloudevents+json") else "binary"

"""deadletter: the dead-letter sink of every Trigger, and the audit log of ``run.completed``.

Why: an event that exhausted its retries is otherwise lost silently; here it is logged once with
the ``knativeerrordest`` / ``knativeerrorcode`` / ``knativeerrordata`` extensions decoded (the
data is base64 of the failed response body), so an operator can see what failed and why. Run
reports (``run.completed``) routed here are logged as the audit trail of evictions. Always 202
with an empty body: nothing is replied, nothing retried.

It imports the HTTP part of the functions (:mod:`kdesched_functions.common`) and nothing else:
no API client, no reactor, no policy, so it answers its first request soon after its process
starts (docs/reactor.md, "Cold start"; a test checks its ``sys.modules``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kdesched.errors import InvalidEvent
from kdesched.reactor.events.types import RUN_COMPLETED

from kdesched_functions import Function
from kdesched_functions.common import (
    Ack,
    FunctionApp,
    Incoming,
    Result,
    create_function_app,
    decode_knative_error,
)

NAME = "deadletter"
log = logging.getLogger("kdesched.functions.deadletter")


def handle(incoming: Incoming) -> Result:
    failure = decode_knative_error(incoming.extensions)
    if incoming.type == RUN_COMPLETED and not failure:
        data = incoming.data if isinstance(incoming.data, dict) else {}
        for key in ("evictions", "blocked"):
            if data.get(key) is not None and not isinstance(data[key], list):
                raise InvalidEvent(f"data.{key}: must be a list of pods in a run.completed report, got "
                                   f"{type(data[key]).__name__}", f"data.{key}")
        evictions = data.get("evictions") or []
        log.info("audit: run %s (trigger %s) evictions=%d blocked=%d dryRun=%s: %s", incoming.id,
                 json.dumps(data.get("trigger")), len(evictions), len(data.get("blocked") or []), data.get("dryRun"),
                 json.dumps([{k: e.get(k) for k in ("namespace", "pod", "node", "strategy", "result")}
                             for e in evictions if isinstance(e, dict)]),
                 extra={"function": NAME, "ce_type": incoming.type, "ce_id": incoming.id})
    else:
        log.warning("dead letter: type=%s id=%s source=%s error=%s data=%s", incoming.type, incoming.id,
                    incoming.source, json.dumps(failure), json.dumps(incoming.data)[:2000],
                    extra={"function": NAME, "ce_type": incoming.type, "ce_id": incoming.id})
    return Ack()


def create_app(function: Function, **_: Any) -> FunctionApp:
    """The app; it needs no policy or API access and accepts every event type."""
    return create_function_app(function.name, handle, None, ready=lambda: (True, "ready"))

"""classifier: ApiServerSource Node events (Resource mode) -> semantic ``dev.kdesched.node.*`` events.

Why: ApiServerSource sends only the new Node object and nothing for nodes that existed before it
started, and most of its events are status heartbeats. This function keeps the per-node digest
cache (:mod:`kdesched.reactor.classifier`), seeded with one LIST of nodes at start, and turns a
real change into semantic events: the first is the reply (200 + CloudEvent, the broker routes it),
any further ones (a write that changed both taints and labels) are posted to the broker first
(``K_SINK`` or ``KDESCHED_BROKER_URL``, binary mode, bounded retries). Nothing to emit -> 202 with
an empty body. The cache is committed only after the extra events were handed over, so a failed
hand-over answers 503 and the redelivery emits them again. Never seeded (LIST failed) -> 503.
Deploy as a singleton (min-scale = max-scale = 1): the cache is per process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from kdesched.reactor import metrics as m
from kdesched.reactor.classifier import Classifier, NodeInputError, digest_of
from kdesched.reactor.coordination import NodeLocks
from kdesched.reactor.settings import BROKER_ENV

from kdesched_functions import Function
from kdesched_functions.common import (
    Ack,
    FunctionApp,
    HttpError,
    Incoming,
    Reply,
    Result,
    create_function_app,
    post_events,
)

NAME = "classifier"
log = logging.getLogger("kdesched.functions.classifier")


class ClassifierFunction:
    """The cache, its seeding, and the handler."""

    def __init__(self, client: Any, broker_url: str = "", post: Callable[..., None] = post_events) -> None:
        self.client = client
        self.broker_url = broker_url
        self.post = post
        self.classifier = Classifier()
        self.locks = NodeLocks()
        self._seed_lock = threading.Lock()

    def seed(self) -> bool:
        """One LIST of nodes into the cache; False (logged) if the API server cannot be read."""
        with self._seed_lock:
            if self.classifier.seeded:
                return True
            try:
                nodes = self.client.list_raw("Node").items
                count = self.classifier.seed(nodes)
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                log.error("seeding the node cache failed (will retry on the next event): %s", exc)
                return False
            m.CLASSIFIER_NODES.set(count)
            log.info("node cache seeded with %d node(s)", count)
            return True

    def ready(self) -> tuple[bool, str]:
        if self.classifier.seeded:
            return True, f"node cache seeded ({len(self.classifier)} nodes)"
        return False, "node cache not seeded yet (LIST nodes failed)"

    def handle(self, incoming: Incoming) -> Result:
        if not self.classifier.seeded and not self.seed():
            raise HttpError(503, "the node cache is not seeded: LIST nodes failed; retry later")
        action = incoming.type.rsplit(".", 1)[-1]  # add | update | delete
        try:
            name = digest_of(incoming.data).name
        except NodeInputError as exc:
            raise HttpError(400, str(exc), exc.field) from None
        with self.locks.get(name):
            events = self.classifier.observe(action, incoming.data, commit=False)
            replies = [Reply(e.type, dict(e.data), subject=e.node, id=e.id) for e in events]
            if len(replies) > 1:
                if not self.broker_url:
                    raise HttpError(500, f"{len(replies) - 1} more event(s) to emit but neither "
                                         f"{' nor '.join(BROKER_ENV)} is set")
                try:
                    self.post(self.broker_url, NAME, replies[1:])
                except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                    raise HttpError(503, f"could not post events to the broker: {exc}") from None
            self.classifier.observe(action, incoming.data)  # commit
            m.CLASSIFIER_NODES.set(len(self.classifier))
        if not replies:
            return Ack()
        m.EMITTED.labels(replies[0].type).inc()
        for r in replies:
            log.info("node %s: %s", name, r.type, extra={"function": NAME, "node": name, "ce_type": r.type})
        return replies[0]


def create_app(function: Function, *, client: Any = None, broker_url: str | None = None, post: Callable[..., None] = post_events,
               **_: Any) -> FunctionApp:
    """The app; seeds the cache at start (a failure is retried on the next event)."""
    if client is None:
        from kdesched.kube.client import KubeClient

        client = KubeClient.from_config(os.environ.get("KUBECONFIG") or None)
    if broker_url is None:
        broker_url = next((os.environ[k] for k in BROKER_ENV if os.environ.get(k)), "")
    fn = ClassifierFunction(client, broker_url, post)
    fn.seed()
    app = create_function_app(function.name, fn.handle, function.accepts, ready=fn.ready)
    app.config["KDESCHED_CLASSIFIER"] = fn
    return app

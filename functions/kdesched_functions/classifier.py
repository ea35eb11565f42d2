"""classifier: ApiServerSource Node events (Resource mode) -> semantic ``dev.kdesched.node.*`` events.

Why: ApiServerSource sends only the new Node object and nothing for nodes that existed before it
started, and most of its events are status heartbeats. This function keeps the per-node digest
cache (:mod:`kdesched.reactor.events.classifier`), seeded with one LIST of nodes at start, and turns a
real change into semantic events: the first is the reply (200 + CloudEvent, the broker routes it),
any further ones (a write that changed both taints and labels) are posted to the broker first
(``K_SINK`` or ``KDESCHED_BROKER_URL``, binary mode, bounded retries). Nothing to emit -> 202 with
an empty body. The cache is committed only after the extra events were handed over, so a failed
hand-over answers 503 and the redelivery emits them again. Never seeded (LIST failed) -> 503.
Deploy as a singleton (min-scale = max-scale = 1): the cache is per process.

Re-sync: ApiServerSource sends nothing for what changed while it was down (a node deleted then
stayed in the cache for good). So the first event after ``KDESCHED_CLASSIFIER_RESYNC_SECONDS``
(default 300; 0 = never) since the last LIST starts a re-LIST of the nodes, on a thread of its own
(one at a time; the event is answered meanwhile, within its own bound): nodes gone leave the cache
(their uids count as dead), changes made in the gap are posted to the broker like extra events.

Redelivery, across restarts too (issue 31): the reply can be lost between this function and the
broker (the filter then fails the delivery and the dispatcher sends the same event again), and the
process may restart before the redelivery arrives: its new cache, seeded by a LIST that already
shows the change, would see a heartbeat and answer 202, and the change would wait for the sweep.
So every event that emitted something gets its answer written to the Lease ``kdesched-classifier``
*before* the reply is returned, in the same PUT as the node record with the node's new state
(:meth:`kdesched.reactor.io.reconcile.NodeRecorder.answer`, then the cache is committed): keyed by the
event's source + id (unique by the CloudEvents spec), the reply with its id
(``<uid>-<resourceVersion>-<kind>``). A redelivery, in this process or a restarted one, gets the same
reply, same id, so a consumer's dedup holds, as long as that node incarnation is cached (a late event
of a node deleted since goes through the tombstones: nothing). The extra events were handed to the
broker before and are not posted twice. A different event with the same node state (a heartbeat) is
answered 202, and so is a duplicate of an answer older than the journal's bound (one hour; 256 answers,
or all of the retry window's; the room the node record leaves on the Lease:
:mod:`kdesched.reactor.events.answers`), so nothing is replayed for ever.
Why this and not a reply recomputed from the recorded node state: that module's docstring. Why the
record is written with the answer: a restarted classifier's start-up reconcile then does not send the
answered change a second time under another id. A write that fails (API server unreachable) is
logged and the reply still returned: the answer stays in memory for a redelivery to this process,
and only a restart before the next successful write can lose it (the sweep remains); failing the
event instead would send it to the dead-letter sink after the Trigger's retries, a certain loss.

Start-up reconcile: a restarted classifier (a rollout, a crash) also missed what changed while it was
down. After seeding it posts the difference between the nodes and the node record on that Lease
(:class:`kdesched.reactor.io.reconcile.NodeRecorder`, the same code as ``kdesched serve``'s leader) to
the broker as the events a watch would have sent, and keeps the record current (at most every 10 s
when it changed, besides the answers' writes). RBAC: get/update on that one Lease, create on Leases
in the namespace (knative/base/rbac-functions.yaml).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kdesched.errors import CannotRun, Unavailable
from kdesched.reactor import metrics as m
from kdesched.reactor.events.answers import AnswerJournal
from kdesched.reactor.events.classifier import Classifier, SemanticEvent, digest_of
from kdesched.reactor.io.reconcile import NodeRecorder, NodeRecordStore
from kdesched.reactor.run.coalescing import NodeLocks
from kdesched.reactor.run.settings import BROKER_ENV, LEASE_NAMESPACE_ENV

from kdesched_functions import Function
from kdesched_functions.apierrors import API_ANSWERS
from kdesched_functions.common import (
    Ack,
    FunctionApp,
    Incoming,
    Reply,
    Result,
    create_function_app,
    post_events,
)

NAME = "classifier"
RECORD_LEASE = "kdesched-classifier"  # the Lease whose annotation holds the classifier's node record
RESYNC_ENV = "KDESCHED_CLASSIFIER_RESYNC_SECONDS"
# the extra events of one event, posted before its reply: all of them within this (Knative's request
# timeout for the classifier is 30 s; each event's own bound is 3 attempts of 5 s)
POST_WITHIN_SECONDS = 20.0
DEFAULT_RESYNC_SECONDS = 300.0
log = logging.getLogger("kdesched.functions.classifier")


def resync_seconds_from(env: Mapping[str, str]) -> float:
    """``KDESCHED_CLASSIFIER_RESYNC_SECONDS`` (seconds >= 0; 0 = never re-list); ValueError naming it."""
    raw = env.get(RESYNC_ENV, "")
    if raw == "":
        return DEFAULT_RESYNC_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{RESYNC_ENV}: must be a number of seconds >= 0 (0 = never), got {raw!r}")
    return value


class ClassifierFunction:
    """The cache, its seeding, and the handler."""

    def __init__(self, client: Any, broker_url: str = "", post: Callable[..., None] = post_events, *,
                 resync_seconds: float = DEFAULT_RESYNC_SECONDS, clock: Callable[[], float] = time.monotonic,
                 record_namespace: str | None = None) -> None:
        self.client = client
        self.broker_url = broker_url
        self.post = post
        self.post_within = POST_WITHIN_SECONDS
        self.resync_seconds = resync_seconds
        self.clock = clock
        self.classifier = Classifier(clock=clock)
        self.locks = NodeLocks()
        # (source, id) of an event that emitted something -> its reply (kdesched.reactor.events.answers)
        self.answers = AnswerJournal()
        # the node record, the answers and the start-up reconcile (kdesched.reactor.io.reconcile) on the
        # Lease kdesched-classifier; without a namespace (a test's injected client), in memory only
        self.recorder = None if record_namespace is None else NodeRecorder(
            NodeRecordStore(client, record_namespace, RECORD_LEASE, ""), self.classifier, holder_only=False,
            answers=self.answers, clock=clock)
        self._seed_lock = threading.Lock()
        self._listed_at = 0.0  # clock() when the last LIST (seed or re-sync) was sent
        self._resync_start = threading.Lock()  # one re-sync thread at a time
        self._resync_thread: threading.Thread | None = None

    def seed(self, *, background: bool = False) -> bool:
        """One LIST of nodes into the cache; False (logged) if the API server cannot be read. Then the
        start-up reconcile: in a thread with ``background`` (a deployed function: posting to the
        broker waits for the subscribers, which must not delay the function's first answer)."""
        with self._seed_lock:
            if self.classifier.seeded:
                return True
            started = self.clock()
            try:
                listed = self.client.list_raw("Node")
                count = self.classifier.seed(listed.items, list_version=listed.resource_version)
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                log.error("seeding the node cache failed (will retry on the next event): %s", exc)
                return False
            self._listed_at = started
            m.CLASSIFIER_NODES.set(count)
            log.info("node cache seeded with %d node(s)", count)
            if self.recorder is not None:
                self.recorder.read()  # the answers on the Lease, before the first event is answered
        if background:
            threading.Thread(target=self.reconcile, name="kdesched-reconcile", daemon=True).start()
        else:
            self.reconcile()
        return True

    def reconcile(self) -> None:
        """After the seed: post the changes made since the node record was last written (a node
        tainted while no classifier ran, say) to the broker, then keep the record. Events that could
        not be posted are logged and sent again by the next start; the sweep remains."""
        if self.recorder is not None:
            self.recorder.reconcile(self._send)

    def _send(self, events: list[SemanticEvent]) -> None:
        if not self.broker_url:
            raise CannotRun(f"neither {' nor '.join(BROKER_ENV)} is set")
        self.post(self.broker_url, NAME, [reply_of(e) for e in events])

    def write_record(self, *, force: bool = False) -> None:
        """Keep the node record current: at most every 10 s (or now with ``force``), and only when
        something changed."""
        if self.recorder is not None:
            self.recorder.write(force=force)

    def _resync_due(self) -> bool:
        return self.resync_seconds > 0 and self.classifier.seeded and self.clock() - self._listed_at >= self.resync_seconds

    def start_resync_if_due(self) -> bool:
        """:meth:`resync_if_due` on a thread of its own, when due and none is running: True if one
        was started. An event's answer must not wait for it: the re-sync LISTs every node and posts
        what it found with each event's own bound (3 x 5 s) and no overall one, so on the request it
        pushed the answer past Knative's timeout against a slow broker (the delivery lost, once per
        interval: review L). It answers nobody, like the start-up reconcile; events handled
        meanwhile are safe (:meth:`Classifier.resync` keeps what was observed after its LIST began)."""
        if not self._due_and_idle():
            return False
        with self._resync_start:
            if not self._due_and_idle():
                return False
            self._resync_thread = threading.Thread(target=self.resync_if_due, name="kdesched-resync", daemon=True)
            self._resync_thread.start()
        return True

    def _due_and_idle(self) -> bool:
        running = self._resync_thread is not None and self._resync_thread.is_alive()
        return not running and self._resync_due()

    def wait_for_resync(self, timeout: float | None = None) -> bool:
        """Wait for a re-sync started by :meth:`start_resync_if_due`; True once none is running."""
        thread = self._resync_thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def resync_if_due(self) -> None:
        """Re-LIST the nodes into the cache (:meth:`Classifier.resync`) when the last LIST is
        ``resync_seconds`` old: nodes deleted unseen leave it, changes made in the gap are posted
        to the broker. One at a time (the seed lock); events go on meanwhile (handled on their own
        requests: :meth:`start_resync_if_due`). A LIST that fails is logged and tried again by the
        next event after the interval. Changes whose post fails stay held in the
        node record at their previous state (:meth:`NodeRecorder.send_held`): the next re-sync posts
        them again, and so does the next start's reconcile if this process dies first."""
        if not self._resync_due() or not self._seed_lock.acquire(blocking=False):
            return
        try:
            started = self.clock()
            if started - self._listed_at < self.resync_seconds:
                return
            self._listed_at = started
            if self.recorder is not None:
                self.recorder.resend(self._send)  # what an earlier re-sync or reconcile could not post
            before = self.recorder.marks_now() if self.recorder is not None else {}
            try:
                listed = self.client.list_raw("Node")
                events = self.classifier.resync(listed.items, listed_at=started, list_version=listed.resource_version)
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                log.warning("re-listing nodes failed (tried again in %.0fs): %s", self.resync_seconds, exc)
                return
            m.CLASSIFIER_NODES.set(len(self.classifier))
            log.info("node cache re-synced: %d node(s), %d change(s) made unseen", len(self.classifier), len(events))
            if events and self.recorder is not None:
                # held at their previous marks until posted: a failed post is sent again by the next
                # re-sync, or by the next start's reconcile
                self.recorder.send_held(events, {e.node: before.get(e.node) for e in events}, self._send, "re-sync")
            elif events and self.broker_url:
                try:
                    self.post(self.broker_url, NAME, [reply_of(e) for e in events])
                except Exception as exc:  # noqa: BLE001 - boundary: the sweep catches up
                    log.warning("could not post the re-sync's %d event(s) to the broker: %s", len(events), exc)
            elif events:
                log.warning("the re-sync found %d change(s) but neither %s is set: not emitted",
                            len(events), " nor ".join(BROKER_ENV))
        finally:
            self._seed_lock.release()
        self.write_record(force=True)  # the record follows the re-sync

    def ready(self) -> tuple[bool, str]:
        if self.classifier.seeded:
            return True, f"node cache seeded ({len(self.classifier)} nodes)"
        return False, "node cache not seeded yet (LIST nodes failed)"

    def handle(self, incoming: Incoming) -> Result:
        if not self.classifier.seeded and not self.seed(background=True):
            raise Unavailable("the node cache is not seeded: LIST nodes failed; retry later")
        if self.recorder is not None:
            self.recorder.read()  # (at once once read: the seed reads it before its first answer)
        self.start_resync_if_due()  # not on this request: its answer has its own bound (POST_WITHIN_SECONDS)
        action = incoming.type.rsplit(".", 1)[-1]  # add | update | delete
        digest = digest_of(incoming.data)  # NodeInputError: 400 naming the field
        name = digest.name
        key = (incoming.source, incoming.id)
        with self.locks.get(name):
            again = self.answers.get(key)
            cached = self.classifier.get(name)
            if again is not None and cached is not None and cached.uid == digest.uid == again.uid:
                # only while that incarnation lives: a node deleted since must not come back as
                # node.added (a late event of a dead node goes through the tombstones below)
                log.info("event %s delivered again (node %s): the same reply, %s", incoming.id, name, again.reply.type,
                         extra={"function": NAME, "node": name, "ce_id": incoming.id, "ce_type": again.reply.type})
                return reply_of(again.reply)
            events = self.classifier.observe(action, incoming.data, commit=False)
            replies = [reply_of(e) for e in events]
            if len(replies) > 1:
                if not self.broker_url:
                    raise CannotRun(f"{len(replies) - 1} more event(s) to emit but neither "
                                         f"{' nor '.join(BROKER_ENV)} is set")
                try:
                    self.post(self.broker_url, NAME, replies[1:], within=self.post_within)
                except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                    raise Unavailable(f"could not post events to the broker: {exc}") from None

            def commit() -> None:
                self.classifier.observe(action, incoming.data)

            if events and self.recorder is not None:
                self.recorder.answer(key, digest, events[0], commit)  # written to the Lease, then committed
            else:
                if events:
                    self.answers.answer(key, digest.uid, events[0])
                commit()
            m.CLASSIFIER_NODES.set(len(self.classifier))
        self.write_record()
        if not replies:
            return Ack()
        m.EMITTED.labels(replies[0].type).inc()
        for r in replies:
            log.info("node %s: %s", name, r.type, extra={"function": NAME, "node": name, "ce_type": r.type})
        return replies[0]


def reply_of(e: SemanticEvent) -> Reply:
    return Reply(e.type, dict(e.data), subject=e.node, id=e.id)


def create_app(function: Function, *, client: Any = None, broker_url: str | None = None, post: Callable[..., None] = post_events,
               record_namespace: str | None = None, **_: Any) -> FunctionApp:
    """The app; seeds the cache at start (a failure is retried on the next event). A client a test
    injects keeps no node record (no start-up reconcile, answers in memory only) unless the test
    names the ``record_namespace``."""
    deployed = client is None
    if client is None:
        from kdesched.kube.client import KubeClient

        client = KubeClient.from_config(os.environ.get("KUBECONFIG") or None)
    if broker_url is None:
        broker_url = next((os.environ[k] for k in BROKER_ENV if os.environ.get(k)), "")
    try:
        resync_seconds = resync_seconds_from(os.environ)
    except ValueError as exc:
        from kdesched.kube.errors import ConfigError  # `kdesched function` reports it as bad input, exit 2

        raise ConfigError(str(exc)) from None
    if deployed and record_namespace is None:
        record_namespace = os.environ.get(LEASE_NAMESPACE_ENV) or os.environ.get("POD_NAMESPACE") or "kdesched"
    fn = ClassifierFunction(client, broker_url, post, resync_seconds=resync_seconds, record_namespace=record_namespace)
    fn.seed(background=True)
    app = create_function_app(function.name, fn.handle, function.accepts, ready=fn.ready, answers=API_ANSWERS)
    app.config["KDESCHED_CLASSIFIER"] = fn
    return app

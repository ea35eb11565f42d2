"""The classifier's answers to node events it emitted something for, kept across restarts.

Why: the classifier function replies with the semantic event of a node change (200 + CloudEvent)
and commits its cache. The reply can still be lost between the function and the broker (the filter
fails the delivery and the dispatcher sends the same event again). A process that remembers its
answers answers the redelivery with the same reply; a process restarted in between seeds its cache
with a LIST that already shows the change, so without a persisted memory the redelivery looked like
a heartbeat (202) and the change waited for the 900 s sweep (issue 31).

So every answer that emitted something is an :class:`Answer` keyed by the incoming event's
(source, id), which CloudEvents define as unique, holding the reply (a
:class:`~kdesched.reactor.events.classifier.SemanticEvent`, whose id is ``<uid>-<resourceVersion>-<kind>``,
so the replayed reply is the same CloudEvent and a consumer's dedup on source + id holds). The
journal is written with the node record (:mod:`kdesched.reactor.io.reconcile`, one PUT of the record
Lease) *before* the reply is returned: whatever reply left the process is on the Lease.

Why a journal of answers and not a reply recomputed from (recorded node state, event): a
recomputation needs the node's previous state in full (the taints before, the old value of each
changed label), and the node record keeps hashes (about 13 bytes a node) so that a cluster of
thousands of nodes fits one annotation; and a redelivery of a change that a later change of the
same node has overtaken would find the recorded state already past it. The journal keeps only the
few answers still inside the retry window, whatever the cluster's size.

Bounds (the annotation must fit beside the node record in the API server's 256 KiB of
annotations), oldest answers dropped first:
- none older than :data:`ANSWER_SECONDS` (by the wall clock, since the journal outlives processes:
  a skew of minutes between two processes does not matter at this scale);
- at most :data:`MAX_ANSWERS` answers, except those younger than :data:`RETRY_WINDOW_SECONDS`: a
  burst (a zone of 300 nodes tainted ``unreachable`` within seconds, a label rolled out to every
  node) must not push its first answers out while their redeliveries are still due. The answers in
  that window are bounded by :data:`MAX_RECENT_ANSWERS` only (memory);
- on the Lease, the room the node record leaves in the annotations
  (:data:`kdesched.reactor.io.reconcile.ANNOTATIONS_BUDGET`; at least :data:`MAX_ANSWERS_BYTES`):
  some 2,600 answers beside the record of 1,000 nodes (docs/benchmarks.md, "Figures behind the code").
The Trigger retries a classifier delivery for about 16 s (knative/base/triggers.yaml: 5 retries
from 0.5 s); an hour leaves ample margin for a backed-up broker and a slow restart, and a duplicate
of an answered event arriving later still is answered 202 (its node state is the cached one): never
replayed for ever.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kdesched.reactor.events.classifier import SemanticEvent

ANSWERS_ANNOTATION = "kdesched.dev/classifier-answers"
ANSWERS_VERSION = "a1:"
MAX_ANSWERS = 256
ANSWER_SECONDS = 3600.0
RETRY_WINDOW_SECONDS = 120.0  # the Trigger's ~16 s of retries, with margin for a backed-up broker
MAX_RECENT_ANSWERS = 20_000  # answers inside the retry window, in memory
MIN_ANSWER_BYTES = 50  # below what an answer takes encoded (docs/benchmarks.md): a cut before compressing
MAX_ANSWERS_BYTES = 32_000  # the least room on the Lease: beside a node record at its 200,000 bytes

Key = tuple[str, str]  # (source, id) of the answered event


@dataclass(frozen=True, slots=True)
class Answer:
    """The reply given to one event."""

    key: Key
    uid: str  # the node incarnation it was about: replayed only while that incarnation is cached
    reply: SemanticEvent
    at: float  # wall-clock seconds when it was answered


def encode_answers(answers: Iterable[Answer], max_bytes: int = MAX_ANSWERS_BYTES) -> str:
    """The journal's annotation text, oldest answers dropped until it fits ``max_bytes``."""
    rows = [[a.key[0], a.key[1], a.uid, round(a.at, 3), a.reply.type, a.reply.id, a.reply.node, a.reply.data]
            for a in sorted(answers, key=lambda a: a.at)]
    rows = rows[-max(1, max_bytes // MIN_ANSWER_BYTES):]  # more would not fit: not worth compressing
    while True:
        packed = zlib.compress(json.dumps(rows, separators=(",", ":"), sort_keys=True).encode(), 6)
        text = ANSWERS_VERSION + base64.b64encode(packed).decode()
        if len(text) <= max_bytes or not rows:
            return text
        # keep the newest rows in proportion to the room (less 5%), and at least one fewer
        keep = min(len(rows) - 1, int(len(rows) * max_bytes / len(text) * 0.95))
        rows = rows[len(rows) - keep:] if keep > 0 else []


def decode_answers(text: str | None) -> list[Answer]:
    """The journal, or nothing when there is none or it cannot be read (a newer format, garbage)."""
    if not text or not text.startswith(ANSWERS_VERSION):
        return []
    try:
        rows = json.loads(zlib.decompress(base64.b64decode(text[len(ANSWERS_VERSION):], validate=True)))
        return [Answer((str(r[0]), str(r[1])), str(r[2]), SemanticEvent(str(r[4]), str(r[5]), str(r[6]), dict(r[7])),
                       float(r[3])) for r in rows]
    except (ValueError, TypeError, KeyError, IndexError, zlib.error, AttributeError):
        return []


class AnswerJournal:
    """The answers in memory (thread-safe), bounded as the module says; persisted by the node
    record's writer (:class:`kdesched.reactor.io.reconcile.NodeRecorder`)."""

    def __init__(self, *, max_answers: int = MAX_ANSWERS, max_seconds: float = ANSWER_SECONDS,
                 wall: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._answers: OrderedDict[Key, Answer] = OrderedDict()  # oldest first
        self.max_answers = max_answers
        self.max_seconds = max_seconds
        self.wall = wall

    def __len__(self) -> int:
        with self._lock:
            self._trim()
            return len(self._answers)

    def get(self, key: Key) -> Answer | None:
        with self._lock:
            self._trim()
            return self._answers.get(key)

    def answer(self, key: Key, uid: str, reply: SemanticEvent) -> Answer:
        """Remember the reply to ``key`` (now)."""
        a = Answer(key, uid, reply, self.wall())
        self.merge([a])
        return a

    def merge(self, answers: Iterable[Answer]) -> None:
        """Add answers (read from the Lease, or new): per key the latest wins; kept in time order."""
        with self._lock:
            merged = dict(self._answers)
            for a in answers:
                have = merged.get(a.key)
                if have is None or a.at >= have.at:
                    merged[a.key] = a
            self._answers = OrderedDict((a.key, a) for a in sorted(merged.values(), key=lambda a: a.at))
            self._trim()

    def entries(self) -> list[Answer]:
        with self._lock:
            self._trim()
            return list(self._answers.values())

    def _trim(self) -> None:
        now = self.wall()
        cutoff, recent = now - self.max_seconds, now - RETRY_WINDOW_SECONDS
        while self._answers:
            key, oldest = next(iter(self._answers.items()))
            count = len(self._answers)
            if oldest.at >= cutoff and (count <= self.max_answers or oldest.at >= recent) \
                    and count <= MAX_RECENT_ANSWERS:
                break
            del self._answers[key]

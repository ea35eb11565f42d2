"""The start-up reconcile: what changed on the nodes while kdesched was starting or down.

Why: a watch (and ApiServerSource) announces only changes made after its first LIST. A taint put
on a node while ``kdesched serve`` restarts, or 0.2 s before its first node LIST, was never acted on
until the 900 s sweep. So the leader keeps a compact record of every node as it last saw it (one
mark per node: incarnation, usable or not, a hash of its taints, a hash of its labels) in an
annotation of its leader Lease, and a new leader compares the nodes it lists at start with that
record: the differences become the semantic events a watch would have sent (a node that is new or
re-created: ``node.added``; usable now and not then: ``node.ready``; other taints:
``taints.changed``; other labels: ``labels.changed``, keys unknown so the conservative scope).

The record holds hashes, not the nodes: a few dozen bytes per node, zlib-compressed (how many
nodes fit in the annotation budget: docs/benchmarks.md, "Figures behind the code"). A cluster too
large for it, or a first start (no record), reconciles nothing: the sweep remains the safety net, and the log says so.

What it cannot catch: a change acted on by no run because the process died between seeing it and
running (the record is written from the classifier, i.e. from what was seen). A run that had
admitted evictions left its move in the disruption ledger, which a new leader resumes.

One implementation, :class:`NodeRecorder`, for both writers: ``kdesched serve``'s leader (the
record on its leader Lease, written only while it holds it; the reconcile's events dispatched in
process) and the classifier function (the record on the Lease ``kdesched-classifier``; the events
posted to the broker). The classifier function also keeps its answers there
(:mod:`kdesched.reactor.events.answers`): :meth:`NodeRecorder.answer` writes the record with the node's
new state *and* the reply in one PUT before the reply leaves the process, then commits the cache.
So a reply lost on its way to the broker and a restart lose nothing: the record already holds the
change (the restarted classifier's reconcile does not send it a second time under another id), and
the redelivered event finds its answer on the Lease and gets the same reply, same id.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Conflict
from kdesched.kube.lease import get_lease
from kdesched.reactor import metrics as m
from kdesched.reactor.events.answers import (
    ANSWERS_ANNOTATION,
    MAX_ANSWERS_BYTES,
    Answer,
    AnswerJournal,
    Key,
    decode_answers,
    encode_answers,
)
from kdesched.reactor.events.classifier import Classifier, NodeDigest, SemanticEvent, changes
from kdesched.reactor.events.types import LABELS_CHANGED, NODE_READY, TAINTS_CHANGED

log = logging.getLogger("kdesched.reactor.reconcile")

RECORD_ANNOTATION = "kdesched.dev/node-record"
RECORD_VERSION = "z1:"
MAX_RECORD_BYTES = 200_000  # of the annotation's text; the API server allows 256 KiB for all annotations
ANNOTATIONS_BUDGET = 240_000  # the record and the answers together (the rest: keys, others' annotations)
RECORD_SECONDS = 10.0  # how often the record follows the nodes (when they changed), answers aside


@dataclass(frozen=True, slots=True)
class NodeMark:
    """What the record keeps of one node."""

    uid: str  # a hash of metadata.uid: the incarnation
    usable: bool
    taints: str  # hash of the sorted taints
    labels: str  # hash of the sorted labels


def _hash(value: Any) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True, separators=(",", ":")).encode(),
                           digest_size=5).hexdigest()


def mark_of(d: NodeDigest) -> NodeMark:
    return NodeMark(_hash(d.uid), d.usable, _hash([list(t) for t in d.taints]), _hash(dict(d.labels)))


def encode(marks: Mapping[str, NodeMark]) -> str:
    rows = {n: [m.uid, int(m.usable), m.taints, m.labels] for n, m in sorted(marks.items())}
    packed = zlib.compress(json.dumps(rows, separators=(",", ":")).encode(), 9)
    return RECORD_VERSION + base64.b64encode(packed).decode()


def decode(text: str | None) -> dict[str, NodeMark] | None:
    """The record, or None when there is none or it cannot be read (a newer format, garbage)."""
    if not text or not text.startswith(RECORD_VERSION):
        return None
    try:
        rows = json.loads(zlib.decompress(base64.b64decode(text[len(RECORD_VERSION):], validate=True)))
        return {str(n): NodeMark(str(r[0]), bool(r[1]), str(r[2]), str(r[3])) for n, r in rows.items()}
    except (ValueError, TypeError, KeyError, IndexError, zlib.error, AttributeError):
        return None


def differences(recorded: Mapping[str, NodeMark], current: Iterable[NodeDigest]) -> list[SemanticEvent]:
    """The events a watch would have sent between ``recorded`` and the nodes as they are now.
    Deleted nodes send nothing (as a watch's delete does not)."""
    out: list[SemanticEvent] = []
    for d in current:
        was = recorded.get(d.name)
        base = f"reconcile-{d.uid or d.name}-{d.resource_version}"
        if was is None or was.uid != _hash(d.uid):
            out.extend(SemanticEvent(e.type, f"{base}-added", e.node, e.data) for e in changes(None, d))
            continue
        now = mark_of(d)
        if now.usable and not was.usable:
            out.append(SemanticEvent(NODE_READY, f"{base}-ready", d.name, {
                "node": d.name, "after": {"ready": d.ready, "unschedulable": d.unschedulable, "usable": True,
                                          "taints": [{"key": k, **({"value": v} if v else {}), "effect": e}
                                                     for k, v, e in d.taints]}}))
        if now.taints != was.taints:
            out.append(SemanticEvent(TAINTS_CHANGED, f"{base}-taints", d.name, {"node": d.name}))
        if now.labels != was.labels:
            # which keys changed is not recorded: the conservative scope (topology strategies too)
            out.append(SemanticEvent(LABELS_CHANGED, f"{base}-labels", d.name, {"node": d.name}))
    return out


class NodeRecordStore:
    """The record on the Lease ``namespace/name``: read at start, written by its one writer (``serve``'s
    leader, or the classifier function)."""

    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity

    def read(self) -> dict[str, NodeMark] | None:
        return self.read_all()[0]

    def read_all(self) -> tuple[dict[str, NodeMark] | None, list[Answer]]:
        """The node record (None: none, or unreadable) and the classifier's answers on the Lease."""
        lease = get_lease(self.client, self.namespace, self.name)
        notes = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        return decode(notes.get(RECORD_ANNOTATION)), decode_answers(notes.get(ANSWERS_ANNOTATION))

    def write(self, marks: Mapping[str, NodeMark], *, holder_only: bool = True,
              answers: AnswerJournal | None = None, released: bool = False) -> str:
        """Write the record (``holder_only``: only while this identity holds the Lease, as ``serve``'s
        leader, or with ``released`` also while it names no holder: the stopping leader's last record,
        written just after it released the Lease; the replace carries the resourceVersion read, so a
        standby taking the Lease meanwhile makes it re-read and refuse; else as the one classifier
        function, creating the Lease if needed), and with
        ``answers`` the journal of answers, merged with the one on the Lease (a classifier of a
        rollout's other revision may have written its own). Returns "" or why it was not written
        (too large, not the holder, lost the race twice: the next tick tries again)."""
        text = encode(marks)
        if len(text) > MAX_RECORD_BYTES:
            return (f"the node record of {len(marks)} nodes is {len(text)} bytes, over {MAX_RECORD_BYTES}: not kept "
                    "(the start-up reconcile is off; the sweep remains)")
        for _ in range(3):
            lease = get_lease(self.client, self.namespace, self.name)
            notes = {RECORD_ANNOTATION: text}
            if answers is not None:
                on_lease = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(ANSWERS_ANNOTATION)
                answers.merge(decode_answers(on_lease))
                notes[ANSWERS_ANNOTATION] = encode_answers(
                    answers.entries(), max(MAX_ANSWERS_BYTES, ANNOTATIONS_BUDGET - len(text)))
            if lease is None and not holder_only:
                try:
                    self.client.create_raw("Lease", {"metadata": {"name": self.name, "namespace": self.namespace,
                                                                  "annotations": notes},
                                                     "spec": {}})
                    return ""
                except Conflict:
                    continue
            holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
            if lease is None or (holder_only and holder != self.identity and (holder or not released)):
                return "not the leader Lease's holder"
            meta = dict(lease.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **notes}
            try:
                self.client.replace_raw("Lease", {**lease, "metadata": meta})
                return ""
            except Conflict:
                continue
        return f"the Lease {self.namespace}/{self.name} kept changing"


class NodeRecorder:
    """The node record and the start-up reconcile of one process: ``kdesched serve``'s leader and
    the classifier function use this one implementation.

    - :meth:`read` (once, at start): the previous record, and the answers on the Lease into
      ``answers`` (the classifier function's journal);
    - :meth:`reconcile`: once the cache is seeded, ``send`` the events a watch would have sent
      between the previous record and the cache (in process for ``serve``, to the broker for the
      function); then write the record. Events that could not be sent keep their nodes' previous
      marks in every record this process writes, so the next start sends them again;
    - :meth:`write`: keep the record current, at most every ``every_seconds`` unless ``force``,
      and only when something changed;
    - :meth:`answer`: the classifier function's write-ahead (module docstring): the reply and the
      node's new state written together, then ``commit`` (the cache), under the writer's lock so a
      concurrent :meth:`write` never records the cache without it.

    A write that fails is logged (at debug level for ``serve``'s standbys, whose writes are refused
    while they do not hold the Lease) and retried by the next one."""

    def __init__(self, store: NodeRecordStore, classifier: Classifier, *, holder_only: bool = True,
                 answers: AnswerJournal | None = None, every_seconds: float = RECORD_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.classifier = classifier
        self.holder_only = holder_only
        self.answers = answers
        self.every_seconds = every_seconds
        self.clock = clock
        self.previous: dict[str, NodeMark] | None = None  # the record read at start
        self.recorded: dict[str, NodeMark] | None = None  # what this process last wrote
        self._written_keys: frozenset[Key] = frozenset()  # the answers it last wrote
        self._recorded_at = float("-inf")
        self._unsent: dict[str, NodeMark | None] = {}  # nodes whose reconcile events were not sent: their old marks
        self._read = threading.Event()
        self._read_lock = threading.Lock()
        self._lock = threading.Lock()  # one write at a time; an answer's write and its commit together

    @property
    def where(self) -> str:
        return f"{self.store.namespace}/{self.store.name}"

    @property
    def has_read(self) -> bool:
        """Has the previous record been read? Until then nothing is written (it would overwrite
        the changes the start-up reconcile has yet to send)."""
        return self._read.is_set()

    def read(self) -> bool:
        """Read the previous record and answers (once; later calls return at once). False when the
        Lease could not be read (logged: no start-up reconcile; records are written all the same)."""
        with self._read_lock:
            if self._read.is_set():
                return self.previous is not None
            try:
                self.previous, answers = self.store.read_all()
            except Exception as exc:  # noqa: BLE001 - boundary: the sweep remains the safety net
                log.warning("reading the node record on the Lease %s failed: no start-up reconcile (%s)",
                            self.where, exc)
                answers = []
            if self.answers is not None:
                self.answers.merge(answers)
            self._read.set()
            return self.previous is not None

    def reconcile(self, send: Callable[[list[SemanticEvent]], None]) -> list[SemanticEvent]:
        """The start-up reconcile: ``send`` what changed since the previous record (an exception from
        ``send`` is logged); then write the record. Returns the events sent."""
        self.read()
        events: list[SemanticEvent] = []
        if self.previous is None:
            log.info("no node record on the Lease %s (first start, or unreadable): no start-up reconcile", self.where)
        else:
            recorded = self.previous
            events = differences(recorded, self.classifier.digests())
            log.info("start-up reconcile: %d node change(s) since the last record%s", len(events),
                     ": " + ", ".join(f"{e.type.removeprefix('dev.kdesched.')} {e.node}" for e in events[:10])
                     if events else "")
            if events:
                if self.send_held(events, {e.node: recorded.get(e.node) for e in events}, send, "start-up reconcile"):
                    m.RECONCILED.inc(len(events))
                else:
                    events = []
        self.write(force=True)
        return events

    def send_held(self, events: list[SemanticEvent], before: Mapping[str, NodeMark | None],
                  send: Callable[[list[SemanticEvent]], None], what: str) -> bool:
        """``send(events)``, holding their nodes at their marks ``before`` (None: not in the record)
        in every record written meanwhile, and after a failure (logged) until :meth:`resend` sends
        them: a record written while the send is in flight, or after it failed, must not say the
        change was seen, or a crash then loses it for good (the next start's reconcile compares with
        that record). True when sent."""
        held = self.hold(before)
        try:
            send(events)
        except Exception as exc:  # noqa: BLE001 - the next resend or start tries again
            log.warning("could not send the %s's %d event(s) (sent again later, or by the next start): %s",
                        what, len(events), exc)
            return False
        self._let_go(held)
        return True

    def _let_go(self, held: Mapping[str, NodeMark | None]) -> None:
        """Stop holding the nodes still held at the marks ``held`` (a newer hold stays)."""
        with self._lock:
            for node, mark in held.items():
                if node in self._unsent and self._unsent[node] == mark:
                    del self._unsent[node]

    def hold(self, before: Mapping[str, NodeMark | None]) -> dict[str, NodeMark | None]:
        """Hold nodes at their marks ``before`` (None: not in the record) in every record written
        from now on, until :meth:`resend` sends their changes: their events were not acted on, so
        the next start's reconcile must send them again. A node already held keeps its older mark.
        Returns the marks held."""
        with self._lock:
            for node, mark in before.items():
                self._unsent.setdefault(node, mark)
            return {node: self._unsent[node] for node in before}

    def recorded_mark(self, node: str) -> NodeMark | None:
        """The node's mark in the record as it stands (held, last written, else read at start):
        what :meth:`hold` keeps it at if an event about a change seen now is not acted on."""
        with self._lock:
            if node in self._unsent:
                return self._unsent[node]
            record = self.recorded if self.recorded is not None else self.previous
            return record.get(node) if record is not None else None

    def resend(self, send: Callable[[list[SemanticEvent]], None]) -> list[SemanticEvent]:
        """Send again what :meth:`send_held` could not: the events between each held node's mark and
        the node as cached now (a node deleted since is let go). Returns the events sent."""
        with self._lock:
            held = dict(self._unsent)
        if not held:
            return []
        current = [d for d in self.classifier.digests() if d.name in held]
        with self._lock:
            for gone in set(held) - {d.name for d in current}:
                self._unsent.pop(gone, None)
        events = differences({n: mk for n, mk in held.items() if mk is not None}, current)
        if not events:  # each held node is back as it was recorded: nothing to say
            self._let_go(held)
            return []
        return events if self.send_held(events, held, send, "held changes") else []

    def marks_now(self) -> dict[str, NodeMark]:
        """The marks of the nodes as cached now (what a :meth:`send_held` holds them at)."""
        return {d.name: mark_of(d) for d in self.classifier.digests()}

    def write(self, *, force: bool = False, released: bool = False) -> str:
        """Write the record if it is due (or ``force``) and changed; "" or why not (logged).
        ``released``: also on a Lease that names no holder (:meth:`NodeRecordStore.write`)."""
        with self._lock:
            return self._write(force, released=released)

    def answer(self, key: Key, digest: NodeDigest, reply: SemanticEvent, commit: Callable[[], object]) -> str:
        """Remember ``reply`` as the answer to event ``key`` about ``digest`` (the node's new state),
        write it with the record, then ``commit()``. "" or why the write failed (logged: the answer is
        still remembered in memory and written by the next write)."""
        with self._lock:
            if self.answers is not None:
                self.answers.answer(key, digest.uid, reply)
            why = self._write(True, digest)
            commit()
            return why

    def _marks(self, pending: NodeDigest | None) -> dict[str, NodeMark]:
        digests = {d.name: d for d in self.classifier.digests()}
        if pending is not None:
            digests[pending.name] = pending
        marks = {name: mark_of(d) for name, d in digests.items()}
        for name, old in self._unsent.items():
            if name not in marks:
                continue
            if old is None:
                del marks[name]
            else:
                marks[name] = old
        return marks

    def _write(self, force: bool, pending: NodeDigest | None = None, *, released: bool = False) -> str:
        if not self.classifier.seeded or not self._read.is_set():
            return "not seeded, or the previous record not read yet"  # (it would lose the gap)
        now = self.clock()
        if not force and now - self._recorded_at < self.every_seconds:
            return ""
        marks = self._marks(pending)
        keys = frozenset(a.key for a in self.answers.entries()) if self.answers is not None else frozenset()
        if marks == self.recorded and keys <= self._written_keys:
            return ""
        self._recorded_at = now
        try:
            why = self.store.write(marks, holder_only=self.holder_only, answers=self.answers, released=released)
        except Exception as exc:  # noqa: BLE001 - the next write tries again
            why = str(exc) or type(exc).__name__
        if why:
            log.log(logging.DEBUG if self.holder_only else logging.WARNING, "node record not written on the Lease %s: %s",
                    self.where, why)
        else:
            self.recorded = marks
            self._written_keys = keys
        return why

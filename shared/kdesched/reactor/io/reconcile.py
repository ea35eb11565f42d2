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
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Conflict
from kdesched.kube.lease import get_lease
from kdesched.reactor.events.classifier import NodeDigest, SemanticEvent, changes
from kdesched.reactor.events.types import LABELS_CHANGED, NODE_READY, TAINTS_CHANGED

log = logging.getLogger("kdesched.reactor.reconcile")

RECORD_ANNOTATION = "kdesched.dev/node-record"
RECORD_VERSION = "z1:"
MAX_RECORD_BYTES = 200_000  # of the annotation's text; the API server allows 256 KiB for all annotations


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
    """The record on the leader Lease ``namespace/name``: read by a new leader, written by the leader."""

    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity

    def read(self) -> dict[str, NodeMark] | None:
        lease = get_lease(self.client, self.namespace, self.name)
        return decode((((lease or {}).get("metadata") or {}).get("annotations") or {}).get(RECORD_ANNOTATION))

    def write(self, marks: Mapping[str, NodeMark], *, holder_only: bool = True) -> str:
        """Write the record (``holder_only``: only while this identity holds the Lease, as ``serve``'s
        leader; else as the one classifier function, creating the Lease if needed). Returns "" or why
        it was not written (too large, not the holder, lost the race twice: the next tick tries again)."""
        text = encode(marks)
        if len(text) > MAX_RECORD_BYTES:
            return (f"the node record of {len(marks)} nodes is {len(text)} bytes, over {MAX_RECORD_BYTES}: not kept "
                    "(the start-up reconcile is off; the sweep remains)")
        for _ in range(2):
            lease = get_lease(self.client, self.namespace, self.name)
            if lease is None and not holder_only:
                try:
                    self.client.create_raw("Lease", {"metadata": {"name": self.name, "namespace": self.namespace,
                                                                  "annotations": {RECORD_ANNOTATION: text}},
                                                     "spec": {}})
                    return ""
                except Conflict:
                    continue
            if lease is None or (holder_only and (lease.get("spec") or {}).get("holderIdentity") != self.identity):
                return "not the leader Lease's holder"
            meta = dict(lease.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), RECORD_ANNOTATION: text}
            try:
                self.client.replace_raw("Lease", {**lease, "metadata": meta})
                return ""
            except Conflict:
                continue
        return "the leader Lease kept changing"

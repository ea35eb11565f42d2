"""Node watch events -> semantic events (``node.added``, ``.ready``, ``.taints.changed``, ``.labels.changed``).

``node.ready`` means "became usable for ordinary pods" (:mod:`kdesched.reactor.lifecycle`): sent
once, on the write that completes Ready + uncordoned + no refusing taint, whichever comes last.

Why: ApiServerSource (and a plain WATCH) hands over only the new Node object, never the old one,
and most Node writes are status heartbeats that change nothing a strategy cares about. This
module keeps a small per-node digest of what matters (Ready, ``spec.unschedulable``, taints,
labels, plus ``uid``/``resourceVersion`` for dedupe) and emits exactly one semantic event per real
change. Redelivered and older events are recognised and emit nothing (at-least-once, unordered
delivery). Pure: no I/O; the caller seeds it with one LIST of nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.reactor.eventtypes import LABELS_CHANGED, NODE_ADDED, NODE_READY, TAINTS_CHANGED
from kdesched.reactor.lifecycle import unusable_reason

MAX_TOMBSTONES = 1000
Taints = tuple[tuple[str, str, str], ...]  # (key, value, effect), sorted


class NodeInputError(ValueError):
    """The object is not a Node the classifier can read (names the field)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class NodeDigest:
    """What the classifier remembers of one node."""

    name: str
    uid: str
    resource_version: str
    ready: bool
    unschedulable: bool
    taints: Taints
    labels: Mapping[str, str]

    @property
    def schedulable(self) -> bool:
        """Ready and not cordoned (taints aside)."""
        return self.ready and not self.unschedulable

    @property
    def unusable_reason(self) -> str:
        """Why ordinary pods cannot land here ("" = usable), see :mod:`kdesched.reactor.lifecycle`."""
        return unusable_reason(self.ready, self.unschedulable, self.taints)

    @property
    def usable(self) -> bool:
        return not self.unusable_reason


@dataclass(frozen=True, slots=True)
class SemanticEvent:
    """One emitted event: ``type``, an ``id`` stable across redeliveries, and its ``data``."""

    type: str
    id: str
    node: str
    data: Mapping[str, Any]


def _str_map(raw: Any, field: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise NodeInputError(field, "must be an object")
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def digest_of(obj: Any) -> NodeDigest:
    """The digest of a raw Node object (API JSON)."""
    if not isinstance(obj, Mapping):
        raise NodeInputError("data", "must be a Node object")
    kind = obj.get("kind")
    if kind not in (None, "Node"):
        raise NodeInputError("data.kind", f"must be Node, got {kind!r}")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise NodeInputError("data.metadata", "is required")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise NodeInputError("data.metadata.name", "is required")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, Mapping):
        raise NodeInputError("data.spec", "must be an object")
    if not isinstance(status, Mapping):
        raise NodeInputError("data.status", "must be an object")
    taints_raw = spec.get("taints") or []
    if not isinstance(taints_raw, list):
        raise NodeInputError("data.spec.taints", "must be a list")
    taints = []
    for i, t in enumerate(taints_raw):
        if not isinstance(t, Mapping):
            raise NodeInputError(f"data.spec.taints[{i}]", "must be an object")
        taints.append((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "")))
    ready = False
    conditions = status.get("conditions") or []
    if not isinstance(conditions, list):
        raise NodeInputError("data.status.conditions", "must be a list")
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
    return NodeDigest(
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(sorted(set(taints))),
        labels=_str_map(meta.get("labels"), "data.metadata.labels"),
    )


def _taints_json(taints: Taints) -> list[dict[str, str]]:
    return [{"key": k, **({"value": v} if v else {}), "effect": e} for k, v, e in taints]


def _older_or_same(new: NodeDigest, old: NodeDigest) -> bool:
    """A redelivery (same uid + resourceVersion) or an out-of-order older version of the same node.
    resourceVersions are opaque: compared as integers only when both parse, else for equality."""
    if new.uid != old.uid:
        return False
    if new.resource_version == old.resource_version:
        return True
    try:
        return int(new.resource_version) < int(old.resource_version)
    except ValueError:
        return False


def changes(old: NodeDigest | None, new: NodeDigest) -> list[SemanticEvent]:
    """The semantic events between two digests of one node (``old`` None = a node not seen before)."""
    base = f"{new.uid or new.name}-{new.resource_version}"
    if old is None or old.uid != new.uid:
        # ``usable`` tells the rebalance function whether this event is the trigger (usable now) or
        # only an announcement (node.ready follows on the transition to usable)
        after = {"ready": new.ready, "unschedulable": new.unschedulable, "taints": _taints_json(new.taints),
                 "labels": dict(new.labels), "usable": new.usable,
                 **({"unusable": new.unusable_reason} if not new.usable else {})}
        return [SemanticEvent(NODE_ADDED, f"{base}-added", new.name, {"node": new.name, "before": {}, "after": after})]
    out: list[SemanticEvent] = []
    if new.usable and not old.usable:
        out.append(SemanticEvent(NODE_READY, f"{base}-ready", new.name, {
            "node": new.name,
            "before": {"ready": old.ready, "unschedulable": old.unschedulable, "taints": _taints_json(old.taints),
                       "usable": False, "unusable": old.unusable_reason},
            "after": {"ready": new.ready, "unschedulable": new.unschedulable, "taints": _taints_json(new.taints),
                      "usable": True}}))
    if new.taints != old.taints:
        out.append(SemanticEvent(TAINTS_CHANGED, f"{base}-taints", new.name, {
            "node": new.name, "before": {"taints": _taints_json(old.taints)},
            "after": {"taints": _taints_json(new.taints)}}))
    if new.labels != old.labels:
        keys = sorted(k for k in set(old.labels) | set(new.labels) if old.labels.get(k) != new.labels.get(k))
        out.append(SemanticEvent(LABELS_CHANGED, f"{base}-labels", new.name, {
            "node": new.name, "before": {k: old.labels.get(k) for k in keys},
            "after": {k: new.labels.get(k) for k in keys}}))
    return out


class Classifier:
    """The per-node digest cache. Thread-safe: deliveries may arrive in parallel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeDigest] = {}
        # deleted nodes, so that a late redelivery of an event of a deleted node is not a new node
        self._tombstones: dict[str, NodeDigest] = {}
        self._seeded = False

    @property
    def seeded(self) -> bool:
        return self._seeded

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, name: str) -> NodeDigest | None:
        with self._lock:
            return self._nodes.get(name)

    def seed(self, nodes: Iterable[Mapping[str, Any]]) -> int:
        """Replace the cache with one LIST of nodes. Emits nothing: ApiServerSource does not announce
        existing nodes, and whatever changed while no one watched is the sweep's job."""
        digests = {d.name: d for d in (digest_of(n) for n in nodes)}
        with self._lock:
            self._nodes = digests
            self._seeded = True
        return len(digests)

    def resync(self, nodes: Iterable[Mapping[str, Any]]) -> list[SemanticEvent]:
        """A re-LIST (after a watch expired): diff it against the cache, so that changes made during
        the gap are not lost, and drop nodes that disappeared."""
        digests = [digest_of(n) for n in nodes]
        out: list[SemanticEvent] = []
        with self._lock:
            seen = set()
            for d in digests:
                seen.add(d.name)
                out.extend(self._apply(d))
            for name in set(self._nodes) - seen:
                del self._nodes[name]
            self._seeded = True
        return out

    def observe(self, action: str, obj: Mapping[str, Any], *, commit: bool = True) -> list[SemanticEvent]:
        """One watch event: ``action`` is add, update or delete (ApiServerSource's type suffix, or a
        WATCH's ADDED/MODIFIED/DELETED). Returns the semantic events, usually none.

        ``commit=False`` only previews them (the cache is unchanged): the classifier function
        commits once the events are safely handed over, so a failed hand-over is retried."""
        action = action.lower()
        if action in ("added",):
            action = "add"
        elif action in ("modified",):
            action = "update"
        elif action in ("deleted",):
            action = "delete"
        if action not in ("add", "update", "delete"):
            raise NodeInputError("type", f"unknown change {action!r} (add, update or delete)")
        digest = digest_of(obj)
        with self._lock:
            if action == "delete":
                if not commit:
                    return []
                old = self._nodes.get(digest.name)
                # a stale delete (older than what we hold, e.g. of a previous incarnation) is ignored
                if old is not None and (old.uid == digest.uid or not digest.uid):
                    del self._nodes[digest.name]
                    self._tombstones[digest.name] = digest if digest.resource_version else old
                    while len(self._tombstones) > MAX_TOMBSTONES:
                        del self._tombstones[next(iter(self._tombstones))]
                return []
            # an add for a node already cached (redelivery, relist) is an update
            return self._apply(digest, commit)

    def _apply(self, digest: NodeDigest, commit: bool = True) -> list[SemanticEvent]:
        old = self._nodes.get(digest.name)
        if old is not None and _older_or_same(digest, old):
            return []
        if old is None:
            dead = self._tombstones.get(digest.name)
            if dead is not None and _older_or_same(digest, dead):
                return []  # a late event of the node that was deleted
            if commit:
                self._tombstones.pop(digest.name, None)
        if commit:
            self._nodes[digest.name] = digest
        return changes(old, digest)

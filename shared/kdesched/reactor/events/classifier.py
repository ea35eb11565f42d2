"""Node watch events -> semantic events (``node.added``, ``.ready``, ``.taints.changed``, ``.labels.changed``).

``node.ready`` means "became usable for ordinary pods" (:mod:`kdesched.reactor.events.lifecycle`): sent
once, on the write that completes Ready + uncordoned + no refusing taint, whichever comes last.

Why: ApiServerSource (and a plain WATCH) hands over only the new Node object, never the old one,
and most Node writes are status heartbeats that change nothing a strategy cares about. This
module keeps a small per-node digest of what matters (Ready, ``spec.unschedulable``, taints,
labels, plus ``uid``/``resourceVersion`` for dedupe) and emits exactly one semantic event per real
change. Redelivered and older events are recognised and emit nothing (at-least-once, unordered
delivery). Pure: no I/O; the caller seeds it with one LIST of nodes and re-syncs it with later ones.

Incarnations: a node deleted and re-created under the same name (a kubelet re-registering, a cloud
reusing a hostname) is a new object with a new ``uid``, and Knative's dispatcher retries a failed
delivery for ~15 s while later events overtake it. So every uid seen deleted (or replaced by a
newer incarnation) is remembered per name as *dead* (bounded per name and in names, pruned by age),
and checked before a changed uid counts as a new node: an event of a dead incarnation never emits
``node.added``, never overwrites the cache, and so never turns the live node's next change into
``node.added`` nor hides its delete. Such events are dropped with a debug log and the metric
``kdesched_classifier_dropped_total{reason}``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.errors import InvalidEvent
from kdesched.model.names import is_dns_subdomain
from kdesched.reactor import metrics as m
from kdesched.reactor.events.lifecycle import unusable_reason
from kdesched.reactor.events.types import LABELS_CHANGED, NODE_ADDED, NODE_READY, TAINTS_CHANGED

log = logging.getLogger("kdesched.reactor.classifier")

# Dead incarnations kept: names (least recently buried dropped first), uids per name (oldest dropped
# first), and for how long. Redeliveries stop after the Trigger's retries (~15 s for the classifier,
# knative/base/triggers.yaml); an hour leaves ample margin for a backed-up broker.
MAX_TOMBSTONES = 1000
MAX_DEAD_PER_NAME = 8
TOMBSTONE_SECONDS = 3600.0
Taints = tuple[tuple[str, str, str], ...]  # (key, value, effect), sorted


class NodeInputError(InvalidEvent):
    """The object is not a Node the classifier can read (HTTP 400, names the field)."""

    def __init__(self, field: str, message: str) -> None:
        InvalidEvent.__init__(self, f"{field}: {message}", field)


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
    created: str = ""  # metadata.creationTimestamp (RFC 3339, UTC, whole seconds): orders incarnations
    # when resourceVersions are not integers

    @property
    def schedulable(self) -> bool:
        """Ready and not cordoned (taints aside)."""
        return self.ready and not self.unschedulable

    @property
    def unusable_reason(self) -> str:
        """Why ordinary pods cannot land here ("" = usable), see :mod:`kdesched.reactor.events.lifecycle`."""
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
    if not is_dns_subdomain(name):  # as the API server names Nodes: every function downstream refuses it
        raise NodeInputError("data.metadata.name", f"must be a node name (a DNS subdomain), got {name!r}")
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
        created=str(meta.get("creationTimestamp") or ""),
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


def _older_incarnation(a: NodeDigest, b: NodeDigest) -> bool:
    """``a`` is an incarnation created before ``b`` (two different uids of one name).

    By resourceVersion when both parse as integers: etcd's revision, one counter for the whole
    store, and every write of an old incarnation precedes the creation of the next. Otherwise by
    ``creationTimestamp`` when both have one and they differ (whole seconds, and stamped by the
    clock of whichever API server created the object, so only a fallback). Otherwise undecidable:
    False."""
    try:
        return int(a.resource_version) < int(b.resource_version)
    except ValueError:
        pass
    if a.created and b.created and a.created != b.created:
        return a.created < b.created
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
    """The per-node digest cache. Thread-safe: deliveries may arrive in parallel.

    ``clock`` (monotonic seconds) ages the dead incarnations and dates each cache write, so that a
    :meth:`resync` does not drop a node cached after its LIST began."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 tombstone_seconds: float = TOMBSTONE_SECONDS, max_tombstones: int = MAX_TOMBSTONES,
                 max_dead_per_name: int = MAX_DEAD_PER_NAME) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._tombstone_seconds = tombstone_seconds
        self._max_tombstones = max_tombstones
        self._max_dead_per_name = max_dead_per_name
        self._nodes: dict[str, NodeDigest] = {}
        self._written: dict[str, float] = {}  # name -> clock() of the last cache write
        # name -> {uid: clock() when seen dead}; both dicts in the order of burial (oldest first)
        self._dead: dict[str, dict[str, float]] = {}
        self._listed_rv: int | None = None  # the resourceVersion of the last LIST, when it parses
        self._seeded = False

    @property
    def seeded(self) -> bool:
        return self._seeded

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, name: str) -> NodeDigest | None:
        with self._lock:
            return self._nodes.get(name)

    def digests(self) -> list[NodeDigest]:
        """Every cached node, as the classifier last saw it (the start-up reconcile's record)."""
        with self._lock:
            return list(self._nodes.values())

    def dead_uids(self, name: str) -> tuple[str, ...]:
        """The uids of ``name`` known dead (oldest first), after pruning by age."""
        with self._lock:
            self._prune()
            return tuple(self._dead.get(name, {}))

    def seed(self, nodes: Iterable[Mapping[str, Any]], *, list_version: str = "") -> int:
        """Replace the cache with one LIST of nodes. Emits nothing: ApiServerSource does not announce
        existing nodes, and whatever changed while no one watched is the sweep's job.

        ``list_version``: the LIST's resourceVersion. A later add or update of a node absent from
        the cache, whose own resourceVersion is not above it, describes a node the LIST (a later
        state of the store) no longer held: deleted since, and dropped (:meth:`observe`)."""
        digests = {d.name: d for d in (digest_of(n) for n in nodes)}
        with self._lock:
            now = self._clock()
            self._note_list(list_version)
            self._nodes = {name: d for name, d in digests.items() if not self._is_dead(d)}
            self._written = dict.fromkeys(self._nodes, now)
            self._seeded = True
        return len(self._nodes)

    def resync(self, nodes: Iterable[Mapping[str, Any]], *, listed_at: float | None = None,
               list_version: str = "") -> list[SemanticEvent]:
        """A later LIST of nodes (a watch re-list, or the periodic re-LIST of the classifier
        function): diff it against the cache, so that changes made during a gap are not lost, and
        drop the nodes that are gone (their uids become dead: a node deleted while no event could
        say so does not stay in the cache for good).

        ``listed_at`` (``clock()`` when the LIST was sent): a cache entry written after it is newer
        than the LIST and is kept; a listed node of another uid does not replace it."""
        digests = [digest_of(n) for n in nodes]
        out: list[SemanticEvent] = []
        with self._lock:
            self._prune()
            seen = set()
            for d in digests:
                seen.add(d.name)
                if self._is_dead(d):
                    self._drop(d, "resync", "dead-uid")
                    continue
                old = self._nodes.get(d.name)
                if (old is not None and old.uid != d.uid and listed_at is not None
                        and self._written.get(d.name, float("-inf")) > listed_at):
                    self._drop(d, "resync", "older-incarnation")
                    continue
                out.extend(self._apply(d))
            for name in set(self._nodes) - seen:
                if listed_at is not None and self._written.get(name, float("-inf")) > listed_at:
                    continue  # cached after the LIST began: not in it, yet alive
                gone = self._nodes.pop(name)
                self._written.pop(name, None)
                self._bury(name, gone.uid)
                log.info("node %s (uid %s) is gone: dropped from the cache by a re-list", name, gone.uid)
            self._note_list(list_version)
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
            self._prune()
            if self._is_dead(digest):
                if commit:
                    self._drop(digest, action, "dead-uid")
                return []
            if action == "delete":
                if commit:
                    self._delete(digest)
                return []
            if digest.name not in self._nodes and self._before_list(digest):
                # a late event (a redelivery after a restart, say) of a node deleted before the LIST
                if commit:
                    self._drop(digest, action, "older-than-list")
                    self._bury(digest.name, digest.uid)
                return []
            # an add for a node already cached (redelivery, relist) is an update
            return self._apply(digest, commit, action)

    # -- under the lock ----------------------------------------------------------------------------
    def _note_list(self, list_version: str) -> None:
        try:
            listed = int(list_version)
        except ValueError:
            return  # none, or opaque: no comparison (as in _older_or_same)
        self._listed_rv = listed if self._listed_rv is None else max(self._listed_rv, listed)

    def _before_list(self, digest: NodeDigest) -> bool:
        """Was this version of the node written before the last LIST (which did not hold it)?"""
        if self._listed_rv is None:
            return False
        try:
            return int(digest.resource_version) <= self._listed_rv
        except ValueError:
            return False

    def _delete(self, digest: NodeDigest) -> None:
        name = digest.name
        old = self._nodes.get(name)
        if old is not None and (not digest.uid or old.uid == digest.uid or _older_incarnation(old, digest)):
            # the cached node is deleted; or a later incarnation was, so the cached one is dead too
            del self._nodes[name]
            self._written.pop(name, None)
            self._bury(name, old.uid)
        elif old is not None and not _older_incarnation(digest, old):
            log.debug("node %s: delete of uid %s while uid %s is cached, order unknown: keeping the "
                      "cached node until the next re-list", name, digest.uid, old.uid)
        # whatever the cache holds, the deleted uid is dead: its late add/update must not revive it
        self._bury(name, digest.uid)

    def _apply(self, digest: NodeDigest, commit: bool = True, action: str = "resync") -> list[SemanticEvent]:
        old = self._nodes.get(digest.name)
        if old is not None and _older_or_same(digest, old):
            if commit:
                same = digest.resource_version == old.resource_version
                self._drop(digest, action, "redelivered" if same else "older")
            return []
        if old is not None and old.uid != digest.uid:
            # a changed uid: a new incarnation, unless this is an event of an older one
            if _older_incarnation(digest, old):
                if commit:
                    self._drop(digest, action, "older-incarnation")
                    self._bury(digest.name, digest.uid)
                return []
            if commit:
                self._bury(digest.name, old.uid)  # replaced: the cached incarnation is dead
        if commit:
            self._nodes[digest.name] = digest
            self._written[digest.name] = self._clock()
        return changes(old, digest)

    def _is_dead(self, digest: NodeDigest) -> bool:
        return bool(digest.uid) and digest.uid in self._dead.get(digest.name, ())

    def _bury(self, name: str, uid: str) -> None:
        if not uid:
            return
        now = self._clock()
        dead = self._dead.pop(name, {})  # re-inserted last: names ordered by their latest burial
        dead.pop(uid, None)
        dead[uid] = now
        while len(dead) > self._max_dead_per_name:
            del dead[next(iter(dead))]
        self._dead[name] = dead
        while len(self._dead) > self._max_tombstones:
            del self._dead[next(iter(self._dead))]

    def _prune(self) -> None:
        """Forget dead uids older than ``tombstone_seconds`` (names in burial order: stop at the
        first name buried recently, then trim that name's own old uids lazily in :meth:`_bury`)."""
        cutoff = self._clock() - self._tombstone_seconds
        while self._dead:
            name, dead = next(iter(self._dead.items()))
            for uid in [u for u, at in dead.items() if at < cutoff]:
                del dead[uid]
            if dead:
                break
            del self._dead[name]

    @staticmethod
    def _drop(digest: NodeDigest, action: str, reason: str) -> None:
        log.debug("node %s: dropped a stale %s event (uid %s, resourceVersion %s): %s", digest.name, action,
                  digest.uid, digest.resource_version, reason)
        m.CLASSIFIER_DROPPED.labels(reason).inc()

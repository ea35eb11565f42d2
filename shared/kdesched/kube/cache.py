"""The watch cache: every kind a decision reads, kept current by one LIST + WATCH per kind.

Why: without it every balance run of ``kdesched serve`` LISTs and decodes all pods again (at
150,000 pods that is seconds and hundreds of MB per run), and every node-scoped run LISTs the Node
list. With it a node event is decided from memory: the event node's pods come from a by-node
index, and the only API read left is the Lease GET of the cool-down history.

How (docs/reactor.md, "Warm cache in serve"):

- One :class:`Reflector` thread per kind LISTs it once (paginated; pods through the msgspec fast
  path of :mod:`kdesched.model.fastload`), then WATCHes from the list's resourceVersion with
  ``allowWatchBookmarks=true`` (a bookmark only advances the resourceVersion; v1.24 sends none in
  practice, nothing depends on one). A 410 Gone re-LISTs the kind and *replaces* its store; any
  other error reconnects with exponential backoff (0.5 s -> 30 s).
- The stores hold the records the model's parsers build (``Node.from_api``... and the fast path's
  Pod records): the same records a LIST-based snapshot (:func:`kdesched.kube.snapshot.load_live_snapshot`)
  holds, in the same order (the API server lists in etcd key order, ``namespace/name``; the
  stores sort by that key), so a run plans exactly as it would after LISTing.
  ``tests/realk8s/test_cache_real.py`` compares the two on a real API server.
- Has-synced gating: :meth:`ClusterCache.usable` is False until every kind a run needs has
  completed its first LIST; the caller then LISTs as before (``serve`` never plans from a kind
  the cache has not seen whole). A malformed object is kept as its error: a snapshot that
  includes it raises the same :class:`~kdesched.model.errors.ModelError` a LIST would.
- Memory is bounded: past ``max_objects`` (all kinds together) the cache says so (log,
  :attr:`ClusterCache.disabled`, ``/readyz`` and ``/metrics``), drops its stores, stops watching
  (except Nodes, when the classifier listens to them) and the caller falls back to per-event LISTs.
  Every ``recheck_seconds`` it counts the objects (one LIST of one object per kind and its
  ``remainingItemCount``); under :data:`RECOVER_FRACTION` of the ceiling it lists and watches again.
- The Pod store also keeps what a run would otherwise derive from every pod again
  (:mod:`kdesched.model.derived`: each node's usage, the owner counts, the pods of each workload),
  updated pod by pod; a full snapshot gets copies of them (:class:`~kdesched.model.snapshot.Derived`).
- Records are immutable; a snapshot copies the (sorted) lists of records under a short lock, so a
  run never sees a half-applied change. Staleness is the watch lag; the eviction's uid
  precondition (``KubeClient.evict_pod``) refuses a pod that was replaced meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone
from kdesched.model.derived import WorkloadKey, add_pod_usage, empty_usage, workload_key
from kdesched.model.errors import ModelError
from kdesched.model.records import (
    Namespace,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
)
from kdesched.model.snapshot import KINDS, Derived, Snapshot

log = logging.getLogger("kdesched.kube.cache")

PARSERS: Mapping[str, Callable[[Any], Any]] = {
    "Node": Node.from_api, "Pod": Pod.from_api, "PodDisruptionBudget": PodDisruptionBudget.from_api,
    "PriorityClass": PriorityClass.from_api, "Namespace": Namespace.from_api,
    "PersistentVolumeClaim": PersistentVolumeClaim.from_api,
}
CLUSTER_SCOPED = frozenset({"Node", "PriorityClass", "Namespace"})

# Estimated resident bytes per cached record (records plus the store's dict and index entries),
# measured with tracemalloc on bench/generate.py's clusters (docs/reactor.md, "Warm cache"); a
# pod's share of the usage / owner / workload indexes is ~125 of its 2,725.
BYTES_PER_RECORD: Mapping[str, int] = {
    "Pod": 2725, "Node": 1400, "PodDisruptionBudget": 700, "PriorityClass": 250, "Namespace": 450,
    "PersistentVolumeClaim": 350,
}
# All kinds together. 300,000 is twice the Kubernetes scalability limit of 150,000 pods (about
# 0.8 GB estimated); past it the cache gives up and runs LIST per event again.
DEFAULT_MAX_OBJECTS = 300_000
# Once over the ceiling, the object counts are re-checked this often (one LIST of a single object
# per kind, its remainingItemCount); under RECOVER_FRACTION of the ceiling the cache lists again.
DEFAULT_RECHECK_SECONDS = 900.0
RECOVER_FRACTION = 0.8
DEFAULT_PAGE_SIZE = 500


def record_key(kind: str, namespace: str, name: str) -> str:
    """The store key: ``namespace/name`` (``name`` for cluster-scoped kinds), the order the API
    server lists in (its etcd keys are ``/registry/<resource>/<namespace>/<name>``)."""
    return name if kind in CLUSTER_SCOPED else f"{namespace}/{name}"


def _raw_key(kind: str, raw: Mapping[str, Any]) -> str | None:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = meta.get("namespace")
    return record_key(kind, namespace if isinstance(namespace, str) and namespace else "default", name)


def _raw_node(raw: Mapping[str, Any]) -> str:
    spec = raw.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


class KindListener(Protocol):
    """Told about a kind's raw objects after the store applied them (the classifier on Nodes)."""

    def listed(self, items: list[dict[str, Any]]) -> None:
        """A (re-)LIST: every object of the kind, raw."""

    def changed(self, etype: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED), raw."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What ``/metrics`` and ``/readyz`` report about the cache."""

    objects: Mapping[str, int]
    bytes_estimate: int
    synced: tuple[str, ...]
    unsynced: tuple[str, ...]
    disabled: str  # "" = in use; else why the cache gave up
    lists: int
    relists_gone: int
    watch_errors: int
    requests: int
    bytes_read: int
    recoveries: int = 0  # times it came back under the ceiling after giving up


class _Store:
    """One kind's records by key, with the sorted view; for pods also the indexes a run derives from
    them (:mod:`kdesched.model.derived`), kept up to date pod by pod so no run recomputes them."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.records: dict[str, Any] = {}
        self.bad: dict[str, tuple[str, ModelError]] = {}  # key -> (pod's node, the parse error)
        self.synced = False
        self._sorted: tuple[Any, ...] | None = None
        self.by_node: dict[str, dict[str, Pod]] = {}
        self._node_sorted: dict[str, tuple[Pod, ...]] = {}
        self.usage: dict[str, dict[str, int]] = {}  # node -> its pods' requests (add_pod_usage)
        self.owner_counts: dict[str, int] = {}  # owner uid -> pods naming it (any node, any phase)
        self.by_workload: dict[WorkloadKey, dict[str, Pod]] = {}
        self._workload_sorted: dict[WorkloadKey, tuple[Pod, ...]] = {}

    def __len__(self) -> int:
        return len(self.records) + len(self.bad)

    def replace(self, records: dict[str, Any], bad: dict[str, tuple[str, ModelError]]) -> None:
        self.records = records
        self.bad = bad
        self._sorted = None
        self._node_sorted, self._workload_sorted = {}, {}
        self.by_node, self.usage, self.owner_counts, self.by_workload = {}, {}, {}, {}
        if self.kind == "Pod":
            for key, pod in records.items():
                self._add_index(key, pod)
            # sort once now, so the first run after a (re)list is not the slow one: later changes
            # re-sort only the nodes and workloads they touch
            for node in self.by_node:
                self.node_pods(node)
            for wkey in self.by_workload:
                self.workload_pods(wkey)
        self.sorted_records()
        self.synced = True

    def clear(self) -> None:
        self.replace({}, {})
        self.synced = False

    def put(self, key: str, record: Any) -> None:
        self._drop_index(key)
        self.bad.pop(key, None)
        self.records[key] = record
        self._sorted = None
        if self.kind == "Pod":
            self._add_index(key, record)

    def put_bad(self, key: str, node: str, error: ModelError) -> None:
        self.remove(key)
        self.bad[key] = (node, error)

    def remove(self, key: str) -> None:
        self._drop_index(key)
        self.bad.pop(key, None)
        if self.records.pop(key, None) is not None:
            self._sorted = None

    def _add_index(self, key: str, pod: Pod) -> None:
        node = pod.node_name
        if node:
            self.by_node.setdefault(node, {})[key] = pod
            self._node_sorted.pop(node, None)
            usage = self.usage.get(node)
            if usage is None:
                usage = self.usage[node] = empty_usage()
            add_pod_usage(usage, pod)
        if pod.owner_refs:
            counts = self.owner_counts
            for ref in pod.owner_refs:
                counts[ref.uid] = counts.get(ref.uid, 0) + 1
            wkey = workload_key(pod)
            if wkey is not None:
                self.by_workload.setdefault(wkey, {})[key] = pod
                self._workload_sorted.pop(wkey, None)

    def _drop_index(self, key: str) -> None:
        if self.kind != "Pod":
            return
        old = self.records.get(key)
        if old is None:
            return
        node = old.node_name
        if node:
            pods = self.by_node.get(node)
            if pods is not None:
                pods.pop(key, None)
                if not pods:
                    del self.by_node[node]
                    self.usage.pop(node, None)
                else:
                    add_pod_usage(self.usage[node], old, -1)
            self._node_sorted.pop(node, None)
        if old.owner_refs:
            counts = self.owner_counts
            for ref in old.owner_refs:
                left = counts.get(ref.uid, 0) - 1
                if left > 0:
                    counts[ref.uid] = left
                else:
                    counts.pop(ref.uid, None)
            wkey = workload_key(old)
            if wkey is not None:
                members = self.by_workload.get(wkey)
                if members is not None:
                    members.pop(key, None)
                    if not members:
                        del self.by_workload[wkey]
                self._workload_sorted.pop(wkey, None)

    def sorted_records(self) -> tuple[Any, ...]:
        if self._sorted is None:
            # the dict is in LIST (key) order plus later additions: timsort is near-linear on that
            self._sorted = tuple(self.records[k] for k in sorted(self.records))
        return self._sorted

    def node_pods(self, node: str) -> tuple[Pod, ...]:
        cached = self._node_sorted.get(node)
        if cached is None:
            pods = self.by_node.get(node) or {}
            cached = self._node_sorted[node] = tuple(pods[k] for k in sorted(pods))
        return cached

    def workload_pods(self, wkey: WorkloadKey) -> tuple[Pod, ...]:
        cached = self._workload_sorted.get(wkey)
        if cached is None:
            pods = self.by_workload.get(wkey) or {}
            cached = self._workload_sorted[wkey] = tuple(pods[k] for k in sorted(pods))
        return cached

    def derived(self) -> Derived:
        """The indexes of every pod, as :meth:`Snapshot.build` would compute them from
        :meth:`sorted_records` (copies: the stores change under the next watch event)."""
        return Derived(
            pods_by_node={n: self.node_pods(n) for n in self.by_node},
            owner_pod_counts=dict(self.owner_counts),
            node_usage={n: dict(u) for n, u in self.usage.items()},
            workload_pods={w: self.workload_pods(w) for w in self.by_workload},
        )

    def first_error(self, nodes: Collection[str] | None) -> ModelError | None:
        for node, error in self.bad.values():
            if nodes is None or node in nodes:
                return error
        return None


def _parse(kind: str, key: str, raw: Any) -> Any:
    """The record of one raw object (a Pod record from the fast path is kept as it is)."""
    if type(raw) is Pod:
        return raw
    namespace, _, name = key.rpartition("/")
    where = f"API {kind} watch cache ({kind} {name}{' in ' + namespace if namespace else ''})"
    try:
        return PARSERS[kind](raw)
    except ModelError as exc:
        raise exc.within(where) from None
    except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
        raise ModelError(where, f"malformed object: {exc}") from None


class Reflector:
    """LIST + WATCH one kind into the cache until ``stop`` is set (or the cache gives up)."""

    def __init__(self, cache: ClusterCache, kind: str) -> None:
        self.cache = cache
        self.kind = kind
        self.resource_version: str | None = None
        self.listeners: list[KindListener] = []
        self.thread: threading.Thread | None = None
        self.retired = False  # replaced by a new reflector (the cache came back): writes nothing more

    def relist(self) -> None:
        """LIST the kind and replace its store (a re-list after 410 too: what the gap deleted goes)."""
        client = self.cache.client
        items, resource_version = client.list_for_cache(self.kind, page_size=self.cache.page_size)
        records: dict[str, Any] = {}
        bad: dict[str, tuple[str, ModelError]] = {}
        raws: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, Pod):
                records[record_key("Pod", item.namespace, item.name)] = item
                continue
            key = _raw_key(self.kind, item)
            if key is None:
                log.warning("%s list: ignoring an object without a name", self.kind)
                continue
            raws.append(item)
            try:
                records[key] = _parse(self.kind, key, item)
            except ModelError as exc:
                bad[key] = (_raw_node(item), exc)
        records = {k: records[k] for k in sorted(records)}  # key order, whatever the server's order
        self.cache._replace(self.kind, records, bad, self)
        self.resource_version = resource_version
        for listener in self.listeners:
            listener.listed(raws)

    def apply(self, etype: str, obj: dict[str, Any]) -> None:
        """One watch event into the store, then to the listeners."""
        key = _raw_key(self.kind, obj)
        if key is None:
            log.warning("%s watch: ignoring a %s event for an object without a name", self.kind, etype)
            return
        if etype == "DELETED":
            self.cache._remove(self.kind, key, self)
        else:
            try:
                record = _parse(self.kind, key, obj)
            except ModelError as exc:
                log.warning("%s watch: %s", self.kind, exc)
                self.cache._put_bad(self.kind, key, _raw_node(obj), exc, self)
            else:
                self.cache._put(self.kind, key, record, self)
        for listener in self.listeners:
            listener.changed(etype, obj)

    def watch_once(self) -> None:
        """One WATCH request from the current resourceVersion until the server ends it."""
        assert self.resource_version is not None
        self.cache._count("watches")
        stream = self.cache.client.watch_raw(self.kind, resource_version=self.resource_version,
                                             timeout_seconds=self.cache.watch_timeout_seconds, allow_bookmarks=True)
        try:
            for etype, obj in stream:  # (closing the stream early drops the connection)
                if self.cache.stop.is_set() or not self._wanted():
                    return
                meta = obj.get("metadata")
                rv = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
                if etype != "BOOKMARK":
                    self.apply(etype, obj)
                if rv:
                    self.resource_version = rv
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _wanted(self) -> bool:
        return not self.retired and (not self.cache.disabled or bool(self.listeners))

    def run(self) -> None:
        backoff = self.cache.backoff_initial
        while not self.cache.stop.is_set() and self._wanted():
            try:
                if self.resource_version is None:
                    self.relist()
                    self.cache._count("lists")
                    if self.cache.stop.is_set():  # closed while listing: no watch to wait out
                        break
                self.watch_once()
                backoff = self.cache.backoff_initial
            except Gone:
                log.info("%s watch expired (410 Gone): re-listing", self.kind)
                self.cache._count("relists_gone")
                self.resource_version = None
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                if self.cache.stop.is_set():  # closing the cache (and its client) ends the watch
                    log.debug("%s watch ended while stopping: %s", self.kind, exc)
                    break
                self.cache._count("watch_errors")
                log.warning("%s %s failed, retrying in %.1fs: %s", self.kind,
                            "list" if self.resource_version is None else "watch", backoff, exc)
                self.cache.stop.wait(backoff)
                backoff = min(self.cache.backoff_max, backoff * 2)


class ClusterCache:
    """Watch-fed stores of the kinds in ``kinds``; :meth:`snapshot` builds a :class:`Snapshot`."""

    def __init__(self, client: KubeClient, *, kinds: Iterable[str] = KINDS,
                 max_objects: int = DEFAULT_MAX_OBJECTS, stop: threading.Event | None = None,
                 watch_timeout_seconds: int = 300, page_size: int | None = None,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0, own_client: bool = True,
                 recheck_seconds: float = DEFAULT_RECHECK_SECONDS) -> None:
        wanted = tuple(dict.fromkeys(kinds))
        unknown = set(wanted) - set(KINDS)
        if unknown:
            raise ValueError(f"unsupported kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
        if max_objects < 1:
            raise ValueError(f"max_objects must be >= 1, got {max_objects}")
        self.kinds = tuple(k for k in KINDS if k in wanted)  # the order snapshots list kinds in
        # one watch per kind stays open: its own pool, so runs keep theirs (and its traffic counts apart)
        self.client = client.sibling(pool_size=len(self.kinds) + 2) if own_client else client
        self._owns_client = own_client
        self.max_objects = max_objects
        self.stop = stop or threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size or DEFAULT_PAGE_SIZE
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.disabled = ""
        self.recheck_seconds = recheck_seconds  # 0: once over the ceiling, off until restarted
        self._recheck: threading.Thread | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stores = {k: _Store(k) for k in self.kinds}
        self.reflectors = {k: Reflector(self, k) for k in self.kinds}
        self._counters = {"lists": 0, "relists_gone": 0, "watch_errors": 0, "watches": 0, "recoveries": 0}
        self.generation = 0  # bumped on every change (tests wait on it)

    # -- lifecycle ----------------------------------------------------------------------------------
    def listen(self, kind: str, listener: KindListener) -> None:
        """Tell ``listener`` about ``kind``'s objects (before :meth:`start`)."""
        if kind == "Pod":
            raise ValueError("Pod listeners are not supported (pods are decoded straight into records)")
        self.reflectors[kind].listeners.append(listener)

    def start(self) -> ClusterCache:
        for kind, reflector in self.reflectors.items():
            if reflector.thread is None:
                reflector.thread = threading.Thread(target=reflector.run, name=f"kdesched-cache-{kind}", daemon=True)
                reflector.thread.start()
        return self

    def close(self, join_seconds: float = 0.0) -> None:
        """Stop the reflectors (a watch in progress ends at its timeout, or when the server goes)."""
        self.stop.set()
        deadline = time.monotonic() + join_seconds
        for reflector in self.reflectors.values():
            if reflector.thread is not None and join_seconds > 0:
                reflector.thread.join(max(0.0, deadline - time.monotonic()))
        if self._owns_client:
            self.client.close()

    def wait_synced(self, timeout: float, kinds: Collection[str] | None = None) -> bool:
        """Block until every kind (or ``kinds``) has been listed, or the cache gave up; True if synced."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._synced(kinds):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.disabled:
                    return False
                self._changed.wait(min(remaining, 0.5))
        return True

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` (re-checked after every change) holds; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                seen = self.generation
            if predicate():  # outside the lock: it may read the cache
                return True
            with self._changed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if self.generation == seen:
                    self._changed.wait(min(remaining, 0.5))

    # -- state ---------------------------------------------------------------------------------------
    def _synced(self, kinds: Collection[str] | None) -> bool:
        return all(s.synced for k, s in self._stores.items() if kinds is None or k in kinds) and \
            (kinds is None or all(k in self._stores for k in kinds))

    def unsynced(self, kinds: Collection[str] | None = None) -> tuple[str, ...]:
        with self._lock:
            return tuple(k for k in (kinds or self.kinds) if k not in self._stores or not self._stores[k].synced)

    def usable(self, kinds: Collection[str]) -> bool:
        """Whether a run that reads ``kinds`` can plan from the cache now (every one listed, and the
        cache not given up)."""
        with self._lock:
            return not self.disabled and self._synced(kinds)

    def stats(self) -> CacheStats:
        with self._lock:
            objects = {k: len(s) for k, s in self._stores.items()}
            synced = tuple(k for k, s in self._stores.items() if s.synced)
            counters = dict(self._counters)
        client = self.client.stats
        return CacheStats(objects, sum(BYTES_PER_RECORD[k] * n for k, n in objects.items()), synced,
                          tuple(k for k in self.kinds if k not in synced), self.disabled, counters["lists"],
                          counters["relists_gone"], counters["watch_errors"], client.requests, client.bytes_read,
                          counters["recoveries"])

    def describe(self) -> str:
        """One line for /readyz and logs."""
        s = self.stats()
        if s.disabled:
            again = (f"; counting again every {self.recheck_seconds:g} s, back on under "
                     f"{int(RECOVER_FRACTION * self.max_objects)}" if self.recheck_seconds > 0 else "")
            return f"watch cache off ({s.disabled}): LIST per event{again}"
        if s.unsynced:
            return f"watch cache syncing: not listed yet: {', '.join(s.unsynced)}"
        return (f"watch cache synced: {sum(s.objects.values())} objects "
                f"(~{s.bytes_estimate / 2**20:.1f} MiB estimated)")

    # -- store updates (reflector threads) --------------------------------------------------------------
    def _count(self, counter: str) -> None:
        with self._lock:
            self._counters[counter] += 1

    def _total(self) -> int:
        return sum(len(s) for s in self._stores.values())

    def _bump(self) -> None:
        self.generation += 1
        self._changed.notify_all()

    def _replace(self, kind: str, records: dict[str, Any], bad: dict[str, tuple[str, ModelError]],
                 by: Reflector | None = None) -> None:
        with self._lock:
            if (self.disabled and kind != "Node") or (by is not None and by.retired):
                return
            self._stores[kind].replace(records, bad)
            self._check_ceiling()
            self._bump()

    def _put(self, kind: str, key: str, record: Any, by: Reflector | None = None) -> None:
        with self._lock:
            if (self.disabled and kind != "Node") or (by is not None and by.retired):
                return
            self._stores[kind].put(key, record)
            self._check_ceiling()
            self._bump()

    def _put_bad(self, kind: str, key: str, node: str, error: ModelError, by: Reflector | None = None) -> None:
        with self._lock:
            if (self.disabled and kind != "Node") or (by is not None and by.retired):
                return
            self._stores[kind].put_bad(key, node, error)
            self._bump()

    def _remove(self, kind: str, key: str, by: Reflector | None = None) -> None:
        with self._lock:
            if by is not None and by.retired:
                return
            self._stores[kind].remove(key)
            self._bump()

    def _check_ceiling(self) -> None:
        """Caller holds the lock. Past the ceiling: give up (drop every store but Nodes) until the
        counts are back under :data:`RECOVER_FRACTION` of it (:meth:`_recheck_loop`)."""
        total = self._total()
        if self.disabled or total <= self.max_objects:
            return
        counts = ", ".join(f"{k} {len(s)}" for k, s in self._stores.items() if len(s))
        self.disabled = (f"{total} objects over the ceiling of {self.max_objects} ({counts}); "
                         f"raise --cache-max-objects to keep it")
        log.warning("watch cache: %s; falling back to a LIST per event%s", self.disabled,
                    f", counting again every {self.recheck_seconds:g} s" if self.recheck_seconds > 0 else "")
        for kind, store in self._stores.items():
            if kind != "Node":
                store.clear()
        if self.recheck_seconds > 0 and (self._recheck is None or not self._recheck.is_alive()):
            self._recheck = threading.Thread(target=self._recheck_loop, name="kdesched-cache-recheck", daemon=True)
            self._recheck.start()

    def _recheck_loop(self) -> None:
        """While off: every ``recheck_seconds``, count the objects (one small LIST per kind); once
        they are under :data:`RECOVER_FRACTION` of the ceiling, list and watch again. (The margin
        keeps a cluster hovering at the ceiling from re-listing everything at every check.)"""
        while not self.stop.wait(self.recheck_seconds):
            counts: dict[str, int] = {}
            for kind in self.kinds:
                try:
                    n = self.client.count_objects(kind)
                except Exception as exc:  # noqa: BLE001 - the next check tries again
                    log.warning("watch cache: counting %s objects failed, trying again in %g s: %s",
                                kind, self.recheck_seconds, exc)
                    break
                if n is None:
                    log.warning("watch cache: the API server does not say how many %s objects exist "
                                "(remainingItemCount); the cache stays off until restarted", kind)
                    return
                counts[kind] = n
            else:
                total = sum(counts.values())
                if total <= RECOVER_FRACTION * self.max_objects:
                    self._come_back(total, counts)
                    return
                log.info("watch cache: still %d objects (back on under %d); checking again in %g s",
                         total, int(RECOVER_FRACTION * self.max_objects), self.recheck_seconds)

    def _come_back(self, total: int, counts: Mapping[str, int]) -> None:
        """List and watch every kind again with fresh reflectors (the old ones, possibly still in a
        watch, are retired: nothing they read is written any more). A Node reflector that kept
        running for its listeners keeps running, and its store."""
        with self._lock:
            if not self.disabled:
                return
            self.disabled = ""
            for kind, store in self._stores.items():
                old = self.reflectors[kind]
                if kind == "Node" and old.listeners and old.thread is not None and old.thread.is_alive():
                    continue
                store.clear()
                old.retired = True
                fresh = Reflector(self, kind)
                fresh.listeners = old.listeners
                self.reflectors[kind] = fresh
            self._counters["recoveries"] += 1
            self._bump()
        log.warning("watch cache: %d objects now (%s), under %d%% of the ceiling of %d: listing and "
                    "watching again", total, ", ".join(f"{k} {n}" for k, n in counts.items()),
                    int(RECOVER_FRACTION * 100), self.max_objects)
        self.start()

    # -- reading ---------------------------------------------------------------------------------------
    def snapshot(self, pod_nodes: Collection[str] | None = None, include: Collection[str] = KINDS,
                 notes: Iterable[str] = ()) -> Snapshot:
        """The snapshot :func:`kdesched.kube.snapshot.load_live_snapshot` would build now (same
        arguments, same records, same order, same notes), from memory. Raises ``LookupError`` when
        the cache cannot serve it (:meth:`usable` is False), and the :class:`ModelError` of a
        malformed object the snapshot would include. ``notes`` are appended to the snapshot's."""
        unknown = set(include) - set(KINDS)
        if unknown:
            raise ValueError(f"unsupported kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
        nodes = list(dict.fromkeys(pod_nodes)) if pod_nodes is not None else None
        parts: dict[str, tuple[Any, ...]] = {}
        derived: Derived | None = None
        with self._lock:
            if self.disabled or not self._synced(include):
                raise LookupError(f"the watch cache cannot serve {', '.join(include)}: "
                                  + (self.disabled or "not listed yet: " + ", ".join(
                                      k for k in include if k not in self._stores or not self._stores[k].synced)))
            for kind in KINDS:
                if kind not in include:
                    continue
                store = self._stores[kind]
                error = store.first_error(nodes if kind == "Pod" else None)
                if error is not None:
                    raise error
                if kind == "Pod" and nodes is not None:
                    parts[kind] = tuple(itertools.chain.from_iterable(store.node_pods(n) for n in nodes))
                else:
                    parts[kind] = store.sorted_records()
                    if kind == "Pod":
                        derived = store.derived()
        all_notes = []
        if nodes is not None and "Pod" in include:
            all_notes.append(f"pods read for {len(nodes)} node(s) only: {', '.join(nodes) or '-'}")
        return Snapshot.build(parts.get("Node", ()), parts.get("Pod", ()), parts.get("PodDisruptionBudget", ()),
                              parts.get("PriorityClass", ()), parts.get("Namespace", ()),
                              parts.get("PersistentVolumeClaim", ()), [*all_notes, *notes], derived=derived)


__all__ = ["BYTES_PER_RECORD", "DEFAULT_MAX_OBJECTS", "CacheStats", "ClusterCache", "KindListener", "Reflector",
           "record_key"]

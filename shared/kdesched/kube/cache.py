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
  other error reconnects from the last resourceVersion. Both wait first (:class:`Backoff`).
- Backoff, as client-go's reflector (``k8s.io/client-go/tools/cache/reflector.go``: its
  ``backoffManager`` is ``wait.NewExponentialBackoffManager(800*time.Millisecond, 30*time.Second,
  2*time.Minute, 2.0, 1.0, clock)`` and ``Run`` is ``wait.BackoffUntil(ListAndWatch, backoffManager,
  true, stopCh)``, so every return of ListAndWatch, a 410 included, waits one step; apimachinery's
  ``exponentialBackoffManagerImpl.getNextBackoff`` resets the step when the last backoff began more
  than ``resetDuration`` ago): 0.8 s doubling to 30 s, each wait jittered up to twice its step
  (jitter 1.0: the cap waits 30-60 s), reset after 2 minutes without one. Every re-LIST waits (after
  a 410, a failed LIST or WATCH, and after the cache comes back under its ceiling), every
  reconnect too; the first LIST of a kind does not. A watch the server ends within a second
  without one event is a failure, as client-go's "very short watch" (else a server closing
  watches at once is a tight loop). Waits end at once when the cache stops; ``stats().backoffs``.
- Every request of the cache (LIST pages, WATCH starts, counts) takes a token from the client's
  rate limit (:class:`~kdesched.kube.client.TokenBucket`): the cache's own client (its own pool,
  :meth:`KubeClient.sibling`) shares the bucket of the client it was made from, so the cache and
  the runs together stay within ``--kube-api-qps``. The first sync fits the bucket: one token
  per 500 objects (at 150,000 pods 300 pages: the burst of 100, then at most 4 s of refill at the
  default 50 qps, spread over a LIST that reads hundreds of MiB anyway), plus one count per kind.
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
  The ceiling is checked *before* a LIST is read: each LIST is preceded by a count of the kind (a
  LIST of one object and its ``remainingItemCount``, :meth:`KubeClient.count_objects`), and a kind
  that would take the cache past the ceiling is not listed at all (a server that does not count
  is checked as the list lands, as are watch events). Every ``recheck_seconds`` it counts the
  objects again; under :data:`RECOVER_FRACTION` of the ceiling it lists and watches again.
- The default ceiling follows the container's memory limit (:func:`auto_ceiling`, the cgroup read by
  :mod:`kdesched.kube.memlimit`): :data:`MEMORY_SHARE` of it at a pod's measured bytes per record.
  Without a limit it is :data:`DEFAULT_MAX_OBJECTS`; an explicit ``max_objects`` wins.
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
import random as _random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone
from kdesched.kube.memlimit import MemoryLimit, read_memory_limit
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
# measured with tracemalloc on bench/generate.py's clusters (how and when: docs/benchmarks.md,
# "Figures behind the code").
BYTES_PER_RECORD: Mapping[str, int] = {
    "Pod": 2725, "Node": 1400, "PodDisruptionBudget": 700, "PriorityClass": 250, "Namespace": 450,
    "PersistentVolumeClaim": 350,
}
# All kinds together, when no container memory limit is found: twice the Kubernetes scalability
# limit of 150,000 pods (its estimated size: docs/benchmarks.md, "Figures behind the code"); past
# it the cache gives up and runs LIST per event again.
DEFAULT_MAX_OBJECTS = 300_000
# The share of the container's memory limit the stores may take (auto_ceiling). A re-LIST (after
# 410, or coming back under the ceiling) builds the new store while the old one still serves runs,
# so the peak is about twice the steady store, and RSS runs a little above the estimate: this
# share keeps a re-LIST at the ceiling near 80% of the limit, leaving the rest to the interpreter,
# the LIST page being decoded and a run's planning (half the limit would pass it during a
# re-LIST). The measured ratios and what the share allows at 1 and 2 Gi: docs/benchmarks.md,
# "Figures behind the code".
MEMORY_SHARE = 0.35
# Bytes per object for the ceiling: a pod's (the largest record, and almost all of the objects).
CEILING_BYTES_PER_OBJECT = BYTES_PER_RECORD["Pod"]
# client-go's reflector backoff (module docstring): 0.8 s doubling to 30 s, jitter 1.0 (a wait is
# its step times 1 to 2), reset after 2 minutes without a backoff.
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0
BACKOFF_RESET_SECONDS = 120.0
BACKOFF_JITTER = 1.0
# A watch the server ends this soon with no event is a failure (client-go's "very short watch").
SHORT_WATCH_SECONDS = 1.0
# Once over the ceiling, the object counts are re-checked this often (one LIST of a single object
# per kind, its remainingItemCount); under RECOVER_FRACTION of the ceiling the cache lists again.
DEFAULT_RECHECK_SECONDS = 900.0
RECOVER_FRACTION = 0.8
DEFAULT_PAGE_SIZE = 500


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The cache's object ceiling and where it came from (logged at start)."""

    objects: int
    why: str


def ceiling_for(limit: MemoryLimit | None, *, share: float = MEMORY_SHARE,
                bytes_per_object: int = CEILING_BYTES_PER_OBJECT) -> Ceiling:
    """The ceiling for a container memory limit: ``share`` of it at ``bytes_per_object`` per
    object (at least 1); without a limit :data:`DEFAULT_MAX_OBJECTS`."""
    if not 0 < share <= 1 or bytes_per_object < 1:
        raise ValueError(f"share must be in (0, 1] and bytes_per_object >= 1, got {share} and {bytes_per_object}")
    if limit is None:
        return Ceiling(DEFAULT_MAX_OBJECTS, f"the default: no container memory limit found ({DEFAULT_MAX_OBJECTS:,} "
                                            f"objects, ~{DEFAULT_MAX_OBJECTS * bytes_per_object / 2**30:.2f} GiB)")
    objects = max(1, int(limit.bytes * share) // bytes_per_object)
    return Ceiling(objects, f"{share:.0%} of the memory limit of {limit.describe()} at {bytes_per_object:,} bytes "
                            "per object")


def auto_ceiling(cgroup_root: str | None = None) -> Ceiling:
    """The default ceiling: from this container's memory limit (:func:`ceiling_for`), logged."""
    ceiling = ceiling_for(read_memory_limit(cgroup_root))
    log.info("watch cache ceiling: %d objects (%s)", ceiling.objects, ceiling.why)
    return ceiling


class Backoff:
    """client-go's reflector backoff (``wait.NewExponentialBackoffManager``, module docstring): each
    :meth:`next_delay` is the current step times ``1 + jitter * random()``; the step then doubles up
    to ``cap``; a call more than ``reset_after`` seconds after the previous one starts again at
    ``initial`` (the time between was healthy). Clock and random source are injectable."""

    def __init__(self, initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_MAX, *,
                 reset_after: float = BACKOFF_RESET_SECONDS, factor: float = 2.0, jitter: float = BACKOFF_JITTER,
                 clock: Callable[[], float] = time.monotonic, random: Callable[[], float] = _random.random) -> None:
        if not (initial > 0 and cap >= initial and factor >= 1 and jitter >= 0 and reset_after >= 0):
            raise ValueError(f"backoff needs 0 < initial <= cap, factor >= 1, jitter >= 0, reset_after >= 0; got "
                             f"initial={initial} cap={cap} factor={factor} jitter={jitter} reset_after={reset_after}")
        self.initial, self.cap, self.reset_after, self.factor, self.jitter = initial, cap, reset_after, factor, jitter
        self._clock, self._random = clock, random
        self._step = initial
        self._last = clock()  # as client-go: the first call within reset_after of creation does not reset

    def next_delay(self) -> float:
        now = self._clock()
        if now - self._last > self.reset_after:
            self._step = self.initial
        self._last = now
        step = self._step
        self._step = min(self.cap, step * self.factor)
        return step * (1.0 + self.jitter * self._random())


class ShortWatch(Exception):
    """The server ended a watch at once without an event: retried after a backoff, as an error."""


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
    backoffs: int = 0  # waits before a re-LIST or a reconnect (after 410, errors, a recovery)
    backoff_seconds: float = 0.0  # their total length (jittered steps)
    max_objects: int = 0  # the ceiling


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
    """LIST + WATCH one kind into the cache until ``stop`` is set (or the cache gives up).

    ``backoff``: the kind's :class:`Backoff` (a reflector replacing a retired one keeps it);
    ``wait_first``: back off before the first LIST (a re-LIST after the cache came back)."""

    def __init__(self, cache: ClusterCache, kind: str, *, backoff: Backoff | None = None,
                 wait_first: bool = False) -> None:
        self.cache = cache
        self.kind = kind
        self.resource_version: str | None = None
        self.listeners: list[KindListener] = []
        self.thread: threading.Thread | None = None
        self.retired = False  # replaced by a new reflector (the cache came back): writes nothing more
        self.backoff = backoff or cache.new_backoff()
        self.wait_first = wait_first

    def relist(self) -> bool:
        """LIST the kind and replace its store (a re-list after 410 too: what the gap deleted goes).
        First count it: a kind that would take the cache past its ceiling is not read (the cache
        gives up instead); False then, and nothing was listed. (A Node reflector whose classifier
        still needs the nodes lists them anyway: their store is kept while the cache is off.)"""
        cache = self.cache
        cache._admit(self.kind)
        if not self._wanted():
            return False
        try:
            items, resource_version = cache.client.list_for_cache(self.kind, page_size=cache.page_size)
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
            del items
            records = {k: records[k] for k in sorted(records)}  # key order, whatever the server's order
            cache._replace(self.kind, records, bad, self)
        finally:
            cache._release(self.kind)
        self.resource_version = resource_version
        for listener in self.listeners:
            listener.listed(raws)
        return True

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
        """One WATCH request from the current resourceVersion until the server ends it. Raises
        :class:`ShortWatch` when the server ended it at once without an event."""
        assert self.resource_version is not None
        cache = self.cache
        cache._count("watches")
        started = cache.clock()
        events = 0
        stream = cache.client.watch_raw(self.kind, resource_version=self.resource_version,
                                        timeout_seconds=cache.watch_timeout_seconds, allow_bookmarks=True)
        try:
            for etype, obj in stream:  # (closing the stream early drops the connection)
                if cache.stop.is_set() or not self._wanted():
                    return
                events += 1
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
        lasted = cache.clock() - started
        if not events and lasted < min(SHORT_WATCH_SECONDS, cache.watch_timeout_seconds / 2) \
                and not cache.stop.is_set():
            raise ShortWatch(f"the server ended the watch after {lasted:.2f} s without an event")

    def _wanted(self) -> bool:
        return not self.retired and (not self.cache.disabled or bool(self.listeners))

    def _back_off(self) -> float:
        """The next wait (counted in the cache's stats)."""
        delay = self.backoff.next_delay()
        self.cache._backed_off(delay)
        return delay

    def run(self) -> None:
        cache = self.cache
        if self.wait_first and self._wanted():
            delay = self._back_off()
            log.info("%s: listing again in %.1fs", self.kind, delay)
            cache.wait(delay)
        while not cache.stop.is_set() and self._wanted():
            try:
                if self.resource_version is None:
                    if not self.relist():
                        continue  # counted over the ceiling: the cache gave up (the loop ends)
                    cache._count("lists")
                    if cache.stop.is_set():  # closed while listing: no watch to wait out
                        break
                self.watch_once()
            except Gone:
                self.cache._count("relists_gone")
                self.resource_version = None
                delay = self._back_off()
                log.info("%s watch expired (410 Gone): re-listing in %.1fs", self.kind, delay)
                cache.wait(delay)
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                if cache.stop.is_set():  # closing the cache (and its client) ends the watch
                    log.debug("%s watch ended while stopping: %s", self.kind, exc)
                    break
                cache._count("watch_errors")
                delay = self._back_off()
                log.warning("%s %s failed, retrying in %.1fs: %s", self.kind,
                            "list" if self.resource_version is None else "watch", delay, exc)
                cache.wait(delay)


class ClusterCache:
    """Watch-fed stores of the kinds in ``kinds``; :meth:`snapshot` builds a :class:`Snapshot`."""

    def __init__(self, client: KubeClient, *, kinds: Iterable[str] = KINDS,
                 max_objects: int | None = None, stop: threading.Event | None = None,
                 watch_timeout_seconds: int = 300, page_size: int | None = None,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 backoff_reset_seconds: float = BACKOFF_RESET_SECONDS, backoff_jitter: float = BACKOFF_JITTER,
                 own_client: bool = True, recheck_seconds: float = DEFAULT_RECHECK_SECONDS,
                 clock: Callable[[], float] = time.monotonic, random: Callable[[], float] = _random.random,
                 wait: Callable[[float], object] | None = None) -> None:
        """``max_objects`` None: :func:`auto_ceiling` (the container's memory limit). ``clock``,
        ``random`` and ``wait`` (default: wait on ``stop``, so a backoff ends when the cache stops)
        are for tests: backoffs without real waiting."""
        wanted = tuple(dict.fromkeys(kinds))
        unknown = set(wanted) - set(KINDS)
        if unknown:
            raise ValueError(f"unsupported kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
        if max_objects is not None and max_objects < 1:
            raise ValueError(f"max_objects must be >= 1, got {max_objects}")
        self.kinds = tuple(k for k in KINDS if k in wanted)  # the order snapshots list kinds in
        # one watch per kind stays open: its own pool, so runs keep theirs (and its traffic counts
        # apart); but the same rate limit: the API server sees one client
        if own_client:
            self.client = client.sibling(pool_size=len(self.kinds) + 2)
            self.client.rate_limiter = client.rate_limiter
        else:
            self.client = client
        self._owns_client = own_client
        self.max_objects = max_objects if max_objects is not None else auto_ceiling().objects
        self.stop = stop or threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size or DEFAULT_PAGE_SIZE
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.backoff_reset_seconds = backoff_reset_seconds
        self.backoff_jitter = backoff_jitter
        self.clock = clock
        self.random = random
        self.wait: Callable[[float], object] = wait or self.stop.wait
        self.new_backoff()  # bad backoff settings fail here, not in a reflector thread
        self.disabled = ""
        self.recheck_seconds = recheck_seconds  # 0: once over the ceiling, off until restarted
        self._recheck: threading.Thread | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stores = {k: _Store(k) for k in self.kinds}
        self._expected: dict[str, int] = {}  # kind -> objects counted for the LIST in progress
        self.reflectors = {k: Reflector(self, k) for k in self.kinds}
        self._counters = {"lists": 0, "relists_gone": 0, "watch_errors": 0, "watches": 0, "recoveries": 0,
                          "backoffs": 0}
        self._backoff_seconds = 0.0
        self.generation = 0  # bumped on every change (tests wait on it)

    def new_backoff(self) -> Backoff:
        """A kind's backoff, with this cache's settings."""
        return Backoff(self.backoff_initial, self.backoff_max, reset_after=self.backoff_reset_seconds,
                       jitter=self.backoff_jitter, clock=self.clock, random=self.random)

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
            backoff_seconds = self._backoff_seconds
        client = self.client.stats
        return CacheStats(objects, sum(BYTES_PER_RECORD[k] * n for k, n in objects.items()), synced,
                          tuple(k for k in self.kinds if k not in synced), self.disabled, counters["lists"],
                          counters["relists_gone"], counters["watch_errors"], client.requests, client.bytes_read,
                          counters["recoveries"], counters["backoffs"], backoff_seconds, self.max_objects)

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

    def _backed_off(self, delay: float) -> None:
        with self._lock:
            self._counters["backoffs"] += 1
            self._backoff_seconds += delay

    def _admit(self, kind: str) -> None:
        """Before a LIST of ``kind``: count it (one LIST of a single object); when the stores, the
        LISTs in progress and this one would be past the ceiling, give up now, before the objects
        are read. A server that does not count leaves it to :meth:`_check_ceiling` as the list
        lands. A failed count raises (the reflector backs off as after a failed LIST)."""
        if self.disabled:
            return  # only a Node reflector feeding its listeners lists now; that store is kept
        n = self.client.count_objects(kind)
        if n is None:
            return
        with self._lock:
            if self.disabled:
                return
            counts = {k: max(len(s), self._expected.get(k, 0)) for k, s in self._stores.items() if k != kind}
            counts[kind] = n
            total = sum(counts.values())
            if total > self.max_objects:
                self._give_up(total, counts, before=kind)
                self._bump()
            else:
                self._expected[kind] = n

    def _release(self, kind: str) -> None:
        with self._lock:
            self._expected.pop(kind, None)

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
        self._give_up(total, {k: len(s) for k, s in self._stores.items()})

    def _give_up(self, total: int, counts: Mapping[str, int], before: str = "") -> None:
        """Caller holds the lock: over the ceiling with ``total`` objects (``counts`` by kind;
        ``before``: counted before listing that kind, which was not read)."""
        listed = ", ".join(f"{k} {counts[k]}" for k in self._stores if counts.get(k))
        self.disabled = (f"{total} objects over the ceiling of {self.max_objects} ({listed})"
                         f"{f'; counted before listing {before}' if before else ''}; raise the memory limit "
                         f"or --cache-max-objects to keep it")
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
                # the kind's backoff goes on, and this re-LIST waits a step of it first
                fresh = Reflector(self, kind, backoff=old.backoff, wait_first=True)
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


__all__ = ["BYTES_PER_RECORD", "DEFAULT_MAX_OBJECTS", "MEMORY_SHARE", "Backoff", "CacheStats", "Ceiling",
           "ClusterCache", "KindListener", "Reflector", "ShortWatch", "auto_ceiling", "ceiling_for", "record_key"]

"""The watch cache: every kind a decision reads, kept current by one LIST + WATCH per kind.

Why: without it every balance run of ``kdesched serve`` LISTs and decodes all pods again (at
150,000 pods that is seconds and hundreds of MB per run), and every node-scoped run LISTs the Node
list. With it a node event is decided from memory: the event node's pods come from a by-node
index, and the only API read left is the Lease GET of the cool-down history.

How (docs/reactor.md, "Warm cache in serve"), in three roles, each a module:

- **reflectors**: one :class:`Reflector` thread per kind, the kube layer's one LIST + WATCH loop
  (:class:`kdesched.kube.reflector.ListWatch`: resourceVersion and bookmarks, a 410 Gone re-LISTs
  the kind and *replaces* its store, client-go's backoff before every re-LIST and reconnect, the
  "very short watch"; a re-LIST after a failed watch is served by the API server's watch cache
  when its answer fits the memory a re-LIST may take), LISTing pods through the msgspec fast path
  of :mod:`kdesched.model.fastload`.
  ``stats().backoffs``. Every request of the cache (LIST pages, WATCH starts, counts) takes a token
  from the client's rate limit (:class:`~kdesched.kube.transport.TokenBucket`): the cache's own
  client (its own pool, :meth:`KubeClient.sibling`) shares the bucket of the client it was made
  from, so the cache and the runs together stay within ``--kube-api-qps``. The first sync fits the
  bucket: one token per 500 objects (at 150,000 pods 300 pages: the burst of 100, then at most 4 s
  of refill at the default 50 qps, spread over a LIST that reads hundreds of MiB anyway), plus one
  count per kind.
- **stores** (:mod:`kdesched.kube.store`): the records the model's parsers build (``Node.from_api``...
  and the fast path's Pod records): the same records a LIST-based snapshot
  (:func:`kdesched.kube.snapshot.load_live_snapshot`) holds, in the same order, so a run plans
  exactly as it would after LISTing (``tests/realk8s/test_cache_real.py`` compares the two on a
  real API server), and for pods the indexes a run derives; a full snapshot gets copies of them
  (:class:`~kdesched.model.snapshot.Derived`).
- **the memory governor** (:mod:`kdesched.kube.governor`): past ``max_objects`` (by default from the
  container's memory limit) the cache gives up, counts again every ``recheck_seconds`` and comes
  back under :data:`RECOVER_FRACTION` of it.

:class:`ClusterCache` holds them together under one lock. Has-synced gating:
:meth:`ClusterCache.usable` is False until every kind a run needs has completed its first LIST;
the caller then LISTs as before (``serve`` never plans from a kind the cache has not seen whole).
Records are immutable; a snapshot copies the (sorted) lists of records under a short lock, so a
run never sees a half-applied change. Staleness is the watch lag, and bounded: a kind with no
watch open and no LIST for longer than ``max_stale_seconds`` (:data:`DEFAULT_MAX_STALE_SECONDS`;
its age: :meth:`ListWatch.age`) makes :meth:`ClusterCache.usable` False too, and says so in
:meth:`ClusterCache.describe` (``/readyz``), until it is listed or watched again. The eviction's
uid precondition (``KubeClient.evict_pod``) refuses a pod that was replaced meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import random as _random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.governor import (
    BYTES_PER_RECORD,
    DEFAULT_MAX_OBJECTS,
    DEFAULT_RECHECK_SECONDS,
    MEMORY_SHARE,
    RECOVER_FRACTION,
    Ceiling,
    MemoryGovernor,
    auto_ceiling,
    ceiling_for,
)
from kdesched.kube.reflector import (
    BACKOFF_INITIAL,
    BACKOFF_JITTER,
    BACKOFF_MAX,
    BACKOFF_RESET_SECONDS,
    COUNTERS,
    SHORT_WATCH_SECONDS,
    Backoff,
    KindListener,
    ListWatch,
    ShortWatch,
)
from kdesched.kube.store import (
    CLUSTER_SCOPED,
    PARSERS,
    KindStore,
    parse_record,
    raw_key,
    raw_node,
    record_key,
)
from kdesched.model.derived import pod_ready
from kdesched.model.errors import ModelError
from kdesched.model.records import Pod
from kdesched.model.snapshot import KINDS, Derived, Snapshot

log = logging.getLogger("kdesched.kube.cache")

DEFAULT_PAGE_SIZE = 500
# A kind not current for longer than this (no watch open and no LIST since: ListWatch.age) is not
# served; runs LIST per event until it is listed or watched again. Twice the longest backoff wait
# (the 30 s cap, jittered up to 60 s): a kind whose WATCH keeps failing while its LISTs work
# re-LISTs after every failure and stays served (its data at most a wait and a LIST old); one that
# missed two retries at the cap, or whose LISTs fail too, is not. An API server restart of a
# minute or so stays under it. It does not bound an open watch (current while open): a watch gone
# silent ends by its read timeout (timeoutSeconds + 30 s) or TCP keepalive (~165 s) and then counts
# from its last event; any other watch counts from when it ended or broke (ListWatch.age).
DEFAULT_MAX_STALE_SECONDS = 120.0
_Store = KindStore  # the name tests and benchmarks knew it by


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
    stale: tuple[tuple[str, float], ...] = ()  # (kind, age): listed, not current for over the bound: not served


class Reflector(ListWatch):
    """LIST + WATCH one kind into the cache's store, then to its listeners, until ``stop`` is set
    (or the cache gives up). ``backoff``: the kind's :class:`Backoff` (a reflector replacing a
    retired one keeps it); ``wait_first``: back off before the first LIST (a re-LIST after the cache
    came back)."""

    def __init__(self, cache: ClusterCache, kind: str, *, backoff: Backoff | None = None,
                 wait_first: bool = False) -> None:
        super().__init__(cache.client, kind, stop=cache.stop, watch_timeout_seconds=cache.watch_timeout_seconds,
                         backoff=backoff or cache.new_backoff(), wait_first=wait_first,
                         wait=lambda delay: cache.wait(delay), clock=cache.clock, logger=log)
        self.cache = cache
        self.retired = False  # replaced by a new reflector (the cache came back): writes nothing more

    def relist(self) -> bool:
        """LIST the kind and replace its store (a re-list after 410 too: what the gap deleted goes).
        First count it: a kind that would take the cache past its ceiling is not read (the cache
        gives up instead); False then, and nothing was listed. (A Node reflector whose classifier
        still needs the nodes lists them anyway: their store is kept while the cache is off.)"""
        cache = self.cache
        started = self.clock()  # what the LIST is current as of (ListWatch.age), set as it is stored
        counted = cache.governor.admit(self.kind)
        try:  # the count is given back whatever happens next, a LIST not wanted any more included
            if not self.wanted():
                return False
            if self.relist_from and not cache.governor.unpaged_fits(self.kind, counted):
                log.info("%s re-LIST: %s objects read in one answer would not fit the memory a re-LIST may take: "
                         "in pages, a consistent read", self.kind, "uncounted" if counted is None else counted)
                self.relist_from = None
            items, resource_version = self.list_at(lambda rv: self.client.list_for_cache(
                self.kind, page_size=None if rv else cache.page_size, resource_version=rv))
            records: dict[str, Any] = {}
            bad: dict[str, tuple[str, ModelError]] = {}
            raws: list[dict[str, Any]] = []
            for item in items:
                if isinstance(item, Pod):
                    records[record_key("Pod", item.namespace, item.name)] = item
                    continue
                key = raw_key(self.kind, item)
                if key is None:
                    log.warning("%s list: ignoring an object without a name", self.kind)
                    continue
                raws.append(item)
                try:
                    records[key] = parse_record(self.kind, key, item)
                except ModelError as exc:
                    bad[key] = (raw_node(item), exc)
            del items
            records = {k: records[k] for k in sorted(records)}  # key order, whatever the server's order
            self.fresh_at = started
            cache._replace(self.kind, records, bad, self)
        finally:
            cache.governor.release(self.kind)
        self.counted("lists")
        self.resource_version = resource_version
        for listener in self.listeners:
            listener.listed(raws)
        return True

    def apply(self, etype: str, obj: dict[str, Any]) -> None:
        """One watch event into the store, then to the listeners."""
        key = raw_key(self.kind, obj)
        if key is None:
            log.warning("%s watch: ignoring a %s event for an object without a name", self.kind, etype)
            return
        if etype == "DELETED":
            self.cache._remove(self.kind, key, self)
        else:
            try:
                record = parse_record(self.kind, key, obj)
            except ModelError as exc:
                log.warning("%s watch: %s", self.kind, exc)
                self.cache._put_bad(self.kind, key, raw_node(obj), exc, self)
            else:
                self.cache._put(self.kind, key, record, self)
        super().apply(etype, obj)

    def wanted(self) -> bool:
        return not self.retired and (not self.cache.disabled or bool(self.listeners))

    def counted(self, counter: str) -> None:
        self.cache._count(counter)

    def backed_off(self, delay: float) -> None:
        self.cache._backed_off(delay)


def _plain_put(write: Callable[[Callable[[KindStore], None]], None], key: str, record: Any) -> None:
    write(lambda store: store.put(key, record))


class ReadyHooks:
    """The pods the watch sees turn Ready (they were not Ready, or not known): what a paced move
    waits for (``kdesched serve`` wakes the moves of the pod's workload). Hooks are called from the
    Pod reflector's thread, outside the cache's lock; an exception is logged."""

    def __init__(self) -> None:
        self.hooks: list[Callable[[Pod], object]] = []

    def put(self, write: Callable[[Callable[[KindStore], None]], None], key: str, record: Pod) -> None:
        """Put ``record`` through ``write`` (the cache's locked change), then call the hooks if it turned Ready."""
        before: list[Any] = []

        def change(store: KindStore) -> None:
            before.append(store.records.get(key))
            store.put(key, record)

        write(change)
        if before and pod_ready(record) and not (before[0] is not None and pod_ready(before[0])):
            for hook in self.hooks:
                try:
                    hook(record)
                except Exception:  # a wake-up must never break the watch
                    log.exception("pod-Ready hook failed for %s", key)


class ClusterCache:
    """Watch-fed stores of the kinds in ``kinds``; :meth:`snapshot` builds a :class:`Snapshot`."""

    def __init__(self, client: KubeClient, *, kinds: Iterable[str] = KINDS,
                 max_objects: int | None = None, stop: threading.Event | None = None,
                 watch_timeout_seconds: int = 300, page_size: int | None = None,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 backoff_reset_seconds: float = BACKOFF_RESET_SECONDS, backoff_jitter: float = BACKOFF_JITTER,
                 own_client: bool = True, recheck_seconds: float = DEFAULT_RECHECK_SECONDS,
                 clock: Callable[[], float] = time.monotonic, random: Callable[[], float] = _random.random,
                 wait: Callable[[float], object] | None = None,
                 max_stale_seconds: float = DEFAULT_MAX_STALE_SECONDS) -> None:
        """``max_objects`` None: :func:`auto_ceiling` (the container's memory limit). ``clock``,
        ``random`` and ``wait`` (default: wait on ``stop``, so a backoff ends when the cache stops)
        are for tests: backoffs without real waiting. ``max_stale_seconds``: the module docstring."""
        wanted = tuple(dict.fromkeys(kinds))
        unknown = set(wanted) - set(KINDS)
        if unknown:
            raise ValueError(f"unsupported kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
        if (max_objects is not None and max_objects < 1) or not max_stale_seconds > 0:
            raise ValueError(f"max_objects must be >= 1 and max_stale_seconds > 0, got {max_objects} "
                             f"and {max_stale_seconds}")
        self.max_stale_seconds = max_stale_seconds
        self.kinds = tuple(k for k in KINDS if k in wanted)  # the order snapshots list kinds in
        # one watch per kind stays open: its own pool, so runs keep theirs (and its traffic counts
        # apart); but the same rate limit: the API server sees one client
        if own_client:
            self.client = client.sibling(pool_size=len(self.kinds) + 2)
            self.client.rate_limiter, self.client.lane_limiters = client.rate_limiter, client.lane_limiters
        else:
            self.client = client
        self._owns_client = own_client
        self.stop = stop or threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.page_size = page_size or DEFAULT_PAGE_SIZE
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self.backoff_reset_seconds, self.backoff_jitter = backoff_reset_seconds, backoff_jitter
        self.clock = clock
        self.random = random
        self.wait: Callable[[float], object] = wait or self.stop.wait
        self.new_backoff()  # bad backoff settings fail here, not in a reflector thread
        self.governor = MemoryGovernor(self, max_objects if max_objects is not None else auto_ceiling().objects,
                                       recheck_seconds)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stores = {k: KindStore(k) for k in self.kinds}
        self.reflectors = {k: Reflector(self, k) for k in self.kinds}
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._backoff_seconds = 0.0
        self.generation = 0  # bumped on every change (tests wait on it)
        self.ready_hooks = ReadyHooks()  # on_pod_ready

    @property
    def disabled(self) -> str:
        """"" while in use; else why the cache gave up (:mod:`kdesched.kube.governor`)."""
        return self.governor.disabled

    @property
    def max_objects(self) -> int:
        return self.governor.max_objects

    @property
    def recheck_seconds(self) -> float:
        return self.governor.recheck_seconds

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

    def _renew_reflectors(self) -> None:
        """Caller holds the lock; the cache came back under its ceiling: every kind is listed and
        watched again by a fresh reflector (the old ones, possibly still in a watch, are retired:
        nothing they read is written any more). A Node reflector that kept running for its
        listeners keeps running, and its store."""
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

    def _synced(self, kinds: Collection[str] | None) -> bool:
        return all(s.synced for k, s in self._stores.items() if kinds is None or k in kinds) and \
            (kinds is None or all(k in self._stores for k in kinds))

    def unsynced(self, kinds: Collection[str] | None = None) -> tuple[str, ...]:
        with self._lock:
            return tuple(k for k in (kinds or self.kinds) if k not in self._stores or not self._stores[k].synced)

    def usable(self, kinds: Collection[str]) -> bool:
        """Whether a run that reads ``kinds`` can plan from the cache now (every one listed and
        current, and the cache not given up)."""
        with self._lock:
            return not self.disabled and self._synced(kinds) and not self._stale(kinds)

    def _stale(self, kinds: Collection[str]) -> dict[str, float]:
        """Caller holds the lock: the listed kinds of ``kinds`` older than the bound, with their ages."""
        now = self.clock()
        ages = {k: self.reflectors[k].age(now) for k in kinds if k in self._stores and self._stores[k].synced}
        return {k: age for k, age in ages.items() if age > self.max_stale_seconds}

    def stats(self) -> CacheStats:
        with self._lock:
            objects = {k: len(s) for k, s in self._stores.items()}
            synced = tuple(k for k, s in self._stores.items() if s.synced)
            counters = dict(self._counters)
            backoff_seconds = self._backoff_seconds
            stale = tuple(self._stale(self.kinds).items())
        client = self.client.stats
        return CacheStats(objects, sum(BYTES_PER_RECORD[k] * n for k, n in objects.items()), synced,
                          tuple(k for k in self.kinds if k not in synced), self.disabled, counters["lists"],
                          counters["relists_gone"], counters["watch_errors"], client.requests, client.bytes_read,
                          self.governor.recoveries, counters["backoffs"], backoff_seconds, self.max_objects, stale)

    def describe(self) -> str:
        """One line for /readyz and logs."""
        s = self.stats()
        if s.disabled:
            return self.governor.describe_off()
        if s.unsynced:
            return f"watch cache syncing: not listed yet: {', '.join(s.unsynced)}"
        if s.stale:
            return ("watch cache stale: " + ", ".join(f"{k} not listed or watched for {a:.0f} s" for k, a in s.stale)
                    + f" (over {self.max_stale_seconds:g} s; {s.watch_errors} failed LISTs/WATCHes): LIST per event")
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

    def _bump(self) -> None:
        self.generation += 1
        self._changed.notify_all()

    def _replace(self, kind: str, records: dict[str, Any], bad: dict[str, tuple[str, ModelError]],
                 by: Reflector | None = None) -> None:
        self._write(kind, by, lambda store: store.replace(records, bad))

    def on_pod_ready(self, hook: Callable[[Pod], object]) -> None:  # see ReadyHooks
        self.ready_hooks.hooks.append(hook)

    def _put(self, kind: str, key: str, record: Any, by: Reflector | None = None) -> None:
        put = self.ready_hooks.put if kind == "Pod" and self.ready_hooks.hooks else _plain_put
        put(lambda change: self._write(kind, by, change), key, record)

    def _put_bad(self, kind: str, key: str, node: str, error: ModelError, by: Reflector | None = None) -> None:
        self._write(kind, by, lambda store: store.put_bad(key, node, error), check=False)

    def _remove(self, kind: str, key: str, by: Reflector | None = None) -> None:
        self._write(kind, by, lambda store: store.remove(key), check=False, while_off=True)

    def _write(self, kind: str, by: Reflector | None, change: Callable[[KindStore], None], *,
               check: bool = True, while_off: bool = False) -> None:
        """A reflector's change to ``kind``'s store, under the lock, then the ceiling checked
        (``check``). Dropped when ``by`` was retired, and while the cache is off (but for Nodes,
        and unless ``while_off``)."""
        with self._lock:
            if (by is not None and by.retired) or (self.disabled and kind != "Node" and not while_off):
                return
            change(self._stores[kind])
            if check:
                self.governor.check()
            self._bump()

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
        with self._lock:
            stale = self._stale(include)
            if self.disabled or not self._synced(include) or stale:
                raise LookupError(f"the watch cache cannot serve {', '.join(include)}: " + (
                    self.disabled or (f"not current: {', '.join(stale)}" if stale else "not listed yet: " + ", ".join(
                        k for k in include if k not in self._stores or not self._stores[k].synced))))
            parts, derived = _read_stores(self._stores, include, nodes)
        all_notes = []
        if nodes is not None and "Pod" in include:
            all_notes.append(f"pods read for {len(nodes)} node(s) only: {', '.join(nodes) or '-'}")
        return Snapshot.build(parts.get("Node", ()), parts.get("Pod", ()), parts.get("PodDisruptionBudget", ()),
                              parts.get("PriorityClass", ()), parts.get("Namespace", ()),
                              parts.get("PersistentVolumeClaim", ()), [*all_notes, *notes], derived=derived)


def _read_stores(stores: Mapping[str, KindStore], include: Collection[str], nodes: list[str] | None
                 ) -> tuple[dict[str, tuple[Any, ...]], Derived | None]:
    """Under the cache's lock: the records of the kinds in ``include`` (a Pod store's for ``nodes``
    only, when given) and the Pod store's indexes for a full read; raises the :class:`ModelError`
    of a malformed object they include."""
    parts: dict[str, tuple[Any, ...]] = {}
    derived: Derived | None = None
    for kind in KINDS:
        if kind not in include:
            continue
        store = stores[kind]
        error = store.first_error(nodes if kind == "Pod" else None)
        if error is not None:
            raise error
        if kind == "Pod" and nodes is not None:
            parts[kind] = tuple(itertools.chain.from_iterable(store.node_pods(n) for n in nodes))
        else:
            parts[kind] = store.sorted_records()
            if kind == "Pod":
                derived = store.derived()
    return parts, derived


__all__ = ["BACKOFF_INITIAL", "BACKOFF_JITTER", "BACKOFF_MAX", "BACKOFF_RESET_SECONDS", "BYTES_PER_RECORD",
           "CLUSTER_SCOPED", "DEFAULT_MAX_OBJECTS", "DEFAULT_MAX_STALE_SECONDS", "DEFAULT_PAGE_SIZE",
           "DEFAULT_RECHECK_SECONDS", "MEMORY_SHARE", "PARSERS", "RECOVER_FRACTION", "SHORT_WATCH_SECONDS", "Backoff", "CacheStats", "Ceiling", "ClusterCache",
           "KindListener", "Reflector", "ShortWatch", "auto_ceiling", "ceiling_for", "record_key"]

"""The watch cache's memory governor: how many objects the cache may hold, and what it does past
that (gives up, counts again now and then, comes back).

Why a module of its own: memory is the one way the watch cache can hurt the process it serves (at
150,000 pods the stores are hundreds of MB, and a re-LIST builds a new store beside the old one),
and the rules bounding it are a policy of their own, apart from keeping stores
(:mod:`kdesched.kube.store`) and watching (:mod:`kdesched.kube.reflector`):

- Past ``max_objects`` (all kinds together) the cache says so (log, :attr:`ClusterCache.disabled`,
  ``/readyz`` and ``/metrics``), drops its stores, stops watching (except Nodes, when the
  classifier listens to them) and the caller falls back to per-event LISTs.
- The ceiling is checked *before* a LIST is read: each LIST is preceded by a count of the kind (a
  LIST of one object and its ``remainingItemCount``, :meth:`KubeClient.count_objects`), and a kind
  that would take the cache past the ceiling is not listed at all (a server that does not count
  is checked as the list lands, as are watch events). Every ``recheck_seconds`` it counts the
  objects again; under :data:`RECOVER_FRACTION` of the ceiling it lists and watches again.
- The default ceiling follows the container's memory limit (:func:`auto_ceiling`, the cgroup read by
  :mod:`kdesched.kube.memlimit`): :data:`MEMORY_SHARE` of it at a pod's measured bytes per record.
  Without a limit it is :data:`DEFAULT_MAX_OBJECTS`; an explicit ``max_objects`` wins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kdesched.kube.memlimit import MemoryLimit, read_memory_limit


class Governed(Protocol):
    """What the governor needs of the cache it keeps under its ceiling (kdesched.kube.cache's
    ClusterCache; named here, not imported, so the two modules do not import each other)."""

    client: Any
    stop: threading.Event
    kinds: tuple[str, ...]
    _lock: threading.Lock
    _stores: Mapping[str, Any]

    def _bump(self) -> None: ...

    def _renew_reflectors(self) -> None: ...

    def start(self) -> object: ...

log = logging.getLogger("kdesched.kube.cache")

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
# An unpaged LIST (the re-LIST after a failed watch, from the API server's watch cache:
# kdesched.kube.reflector) is read whole before it is decoded, beside both stores: its peak bytes
# per object, an estimate: a pod's JSON as served (~3.7 KB for bench/generate.py's pods, more with
# managedFields) twice over while urllib3 joins the chunks of the answer. A paged LIST holds one
# page of 500 at a time instead.
UNPAGED_BYTES_PER_OBJECT = 8192
# Once over the ceiling, the object counts are re-checked this often (one LIST of a single object
# per kind, its remainingItemCount); under RECOVER_FRACTION of the ceiling the cache lists again.
DEFAULT_RECHECK_SECONDS = 900.0
RECOVER_FRACTION = 0.8


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


def fits_unpaged(*, max_objects: int, held: int, listing: int | None) -> bool:
    """Whether an unpaged LIST of ``listing`` objects (None: not counted, so not known) fits the
    memory the ceiling leaves a re-LIST: the stores twice over (:data:`MEMORY_SHARE`), here the
    ``held`` objects of the stores as they are, the new store, and the answer read whole
    (:data:`UNPAGED_BYTES_PER_OBJECT`). At a pod's bytes per record that is a kind of up to about
    40 % of the ceiling with the others small."""
    if listing is None:
        return False
    need = held * CEILING_BYTES_PER_OBJECT + listing * (CEILING_BYTES_PER_OBJECT + UNPAGED_BYTES_PER_OBJECT)
    return need <= 2 * max_objects * CEILING_BYTES_PER_OBJECT


class MemoryGovernor:
    """Keeps one :class:`~kdesched.kube.cache.ClusterCache` under its ceiling (module docstring).
    It works under the cache's lock (the methods saying so) and on its stores."""

    def __init__(self, cache: Governed, max_objects: int, recheck_seconds: float) -> None:
        if max_objects < 1:
            raise ValueError(f"max_objects must be >= 1, got {max_objects}")
        self.cache = cache
        self.max_objects = max_objects
        self.recheck_seconds = recheck_seconds  # 0: once over the ceiling, off until restarted
        self.disabled = ""  # "" = in use; else why the cache gave up
        self.recoveries = 0
        self._expected: dict[str, int] = {}  # kind -> objects counted for the LIST in progress
        self._recheck: threading.Thread | None = None

    def describe_off(self) -> str:
        again = (f"; counting again every {self.recheck_seconds:g} s, back on under "
                 f"{int(RECOVER_FRACTION * self.max_objects)}" if self.recheck_seconds > 0 else "")
        return f"watch cache off ({self.disabled}): LIST per event{again}"

    def admit(self, kind: str) -> int | None:
        """Before a LIST of ``kind``: count it (one LIST of a single object); when the stores, the
        LISTs in progress and this one would be past the ceiling, give up now, before the objects
        are read. A server that does not count leaves it to :meth:`check` as the list lands. A
        failed count raises (the reflector backs off as after a failed LIST). Returns the count
        (None: not counted)."""
        if self.disabled:
            return None  # only a Node reflector feeding its listeners lists now; that store is kept
        cache = self.cache
        n = cache.client.count_objects(kind)
        if n is None:
            return None
        with cache._lock:
            if self.disabled:
                return n
            counts = {k: max(len(s), self._expected.get(k, 0)) for k, s in cache._stores.items() if k != kind}
            counts[kind] = n
            total = sum(counts.values())
            if total > self.max_objects:
                self.give_up(total, counts, before=kind)
                cache._bump()
            else:
                self._expected[kind] = n
        return n

    def unpaged_fits(self, kind: str, listing: int | None) -> bool:
        """Whether a LIST of ``kind`` (``listing`` objects counted by :meth:`admit`) may be read
        unpaged (:func:`fits_unpaged`), with what the stores and the other LISTs in progress hold."""
        with self.cache._lock:
            held = sum(len(s) if k == kind else max(len(s), self._expected.get(k, 0))
                       for k, s in self.cache._stores.items())
        return fits_unpaged(max_objects=self.max_objects, held=held, listing=listing)

    def release(self, kind: str) -> None:
        """The LIST of ``kind`` admitted by :meth:`admit` is over (stored or failed)."""
        with self.cache._lock:
            self._expected.pop(kind, None)

    def check(self) -> None:
        """Caller holds the lock. Past the ceiling: give up (drop every store but Nodes) until the
        counts are back under :data:`RECOVER_FRACTION` of it (:meth:`_recheck_loop`)."""
        stores = self.cache._stores
        total = sum(len(s) for s in stores.values())
        if self.disabled or total <= self.max_objects:
            return
        self.give_up(total, {k: len(s) for k, s in stores.items()})

    def give_up(self, total: int, counts: Mapping[str, int], before: str = "") -> None:
        """Caller holds the lock: over the ceiling with ``total`` objects (``counts`` by kind;
        ``before``: counted before listing that kind, which was not read)."""
        stores = self.cache._stores
        listed = ", ".join(f"{k} {counts[k]}" for k in stores if counts.get(k))
        self.disabled = (f"{total} objects over the ceiling of {self.max_objects} ({listed})"
                         f"{f'; counted before listing {before}' if before else ''}; raise the memory limit "
                         f"or --cache-max-objects to keep it")
        log.warning("watch cache: %s; falling back to a LIST per event%s", self.disabled,
                    f", counting again every {self.recheck_seconds:g} s" if self.recheck_seconds > 0 else "")
        for kind, store in stores.items():
            if kind != "Node":
                store.clear()
        if self.recheck_seconds > 0 and (self._recheck is None or not self._recheck.is_alive()):
            self._recheck = threading.Thread(target=self._recheck_loop, name="kdesched-cache-recheck", daemon=True)
            self._recheck.start()

    def _recheck_loop(self) -> None:
        """While off: every ``recheck_seconds``, count the objects (one small LIST per kind); once
        they are under :data:`RECOVER_FRACTION` of the ceiling, list and watch again. (The margin
        keeps a cluster hovering at the ceiling from re-listing everything at every check.)"""
        cache = self.cache
        while not cache.stop.wait(self.recheck_seconds):
            counts: dict[str, int] = {}
            for kind in cache.kinds:
                try:
                    n = cache.client.count_objects(kind)
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
        """Back under the ceiling: the cache lists and watches every kind again."""
        cache = self.cache
        with cache._lock:
            if not self.disabled:
                return
            self.disabled = ""
            cache._renew_reflectors()
            self.recoveries += 1
            cache._bump()
        log.warning("watch cache: %d objects now (%s), under %d%% of the ceiling of %d: listing and "
                    "watching again", total, ", ".join(f"{k} {n}" for k, n in counts.items()),
                    int(RECOVER_FRACTION * 100), self.max_objects)
        cache.start()


__all__ = ["BYTES_PER_RECORD", "CEILING_BYTES_PER_OBJECT", "DEFAULT_MAX_OBJECTS", "DEFAULT_RECHECK_SECONDS",
           "MEMORY_SHARE", "RECOVER_FRACTION", "UNPAGED_BYTES_PER_OBJECT", "Ceiling", "MemoryGovernor", "auto_ceiling",
           "ceiling_for", "fits_unpaged"]

"""The one LIST + WATCH loop of kdesched: list a kind, watch it from the list's resourceVersion,
and after a 410 Gone or a failure wait a back-off step before listing or reconnecting again.

Why a module of its own: two users need it, the watch cache (:mod:`kdesched.kube.cache`, one
reflector per kind, into its stores) and ``kdesched serve``'s Node watch without the cache
(:class:`kdesched.reactor.io.watch.NodeWatcher`, into the classifier). They used to have a loop each
and drifted (the Node watch re-listed at once after a 410 and knew no short watch); now both are
a :class:`ListWatch`, differing only in what a LIST and an event do (:meth:`ListWatch.relist`,
:meth:`ListWatch.apply`) and in who is told (:class:`KindListener`).

What the loop does, as client-go's reflector (``k8s.io/client-go/tools/cache/reflector.go``):

- LIST, remember its resourceVersion, then WATCH from it with
  ``allowWatchBookmarks=true``. Every event's ``metadata.resourceVersion`` is kept, a BOOKMARK's
  too (it only advances the resourceVersion; v1.24 sends none in practice, nothing depends on one),
  so a reconnect does not replay history.
- A 410 Gone (HTTP, or an ``ERROR`` event) forgets the resourceVersion: the next round re-LISTs,
  and a user *replaces* (or diffs) what it holds, so what the gap changed is not lost. So does
  any other failed watch, as client-go's ``ListAndWatch`` returns and ``Run`` lists again: a
  WATCH the server (or a proxy) answers with an error (403 where RBAC grants ``list`` but not
  ``watch``, 5xx), an ``ERROR`` event, a very short watch (below). Only a failure that says
  nothing about the watch itself reconnects from the last resourceVersion (:func:`resumable`):
  a lost connection (refused, reset, cut mid-stream, a read timeout: client-go's stream decoder
  ends such a stream as a normal close) and a 429 (client-go's ``isWatchErrorRetriable``); a
  re-LIST there would only add load to a server that is down or throttling. Before this, a kind
  whose every WATCH failed kept its first LIST for ever. Every retry waits first (:class:`Backoff`).
- What a LIST asks (:attr:`ListWatch.relist_from`). The first LIST, and a re-LIST after a 410, is
  a consistent read: no resourceVersion, in pages of 500 (``limit``/``continue``), from etcd. A
  re-LIST after any other failed watch asks the last resourceVersion seen (the LIST's, or the
  last event's) with no ``limit``, as client-go's ``relistResourceVersion`` (paging switched off
  "to avoid thundering herd on etcd"): a v1.24 API server answers that from its watch cache, at
  least as fresh as that version, in one response (its ``shouldDelegateList`` sends
  ``resourceVersion=""``, a ``continue``, or a ``limit`` with a resourceVersion other than "0"
  to etcd), so a watch that keeps failing costs no etcd read of the whole kind at every step. A
  version the server cannot serve (410; 504 "Too large resource version" from an API server whose
  watch cache is behind) falls back to the consistent read at once, as client-go's
  ``isExpiredError || isTooLargeResourceVersionError``; any other failure keeps it for the next
  round. That LIST is one attempt (``KubeClient._at_version_retry``): a quiet kind's watch cache
  may not reach the etcd LIST's version until its next write, and the server answers that after
  3 s. The watch cache reads such an answer whole only when it fits the memory its ceiling
  leaves a re-LIST (:func:`kdesched.kube.governor.fits_unpaged`); else in pages, from etcd.
- Backoff: client-go's ``backoffManager`` is ``wait.NewExponentialBackoffManager(800*time.Millisecond,
  30*time.Second, 2*time.Minute, 2.0, 1.0, clock)`` and ``Run`` is ``wait.BackoffUntil(ListAndWatch,
  backoffManager, true, stopCh)``, so every return of ListAndWatch, a 410 included, waits one step;
  apimachinery's ``exponentialBackoffManagerImpl.getNextBackoff`` resets the step when the last
  backoff began more than ``resetDuration`` ago: 0.8 s doubling to 30 s, each wait jittered up to
  twice its step (jitter 1.0: the cap waits 30-60 s), reset after 2 minutes without one. The first
  LIST does not wait (unless ``wait_first``). Waits end at once when ``stop`` is set. Unlike
  client-go, the time spent in a LIST (worked or failed) does not count towards the reset
  (:meth:`Backoff.unhealthy_until_now`): the 2 minutes are of a watch, or of back-off waits.
  Otherwise a kind whose LIST takes over 2 minutes (150,000 pods from a loaded server) and whose
  WATCH keeps failing would re-LIST after 0.8-1.6 s every time, back to back.
- A watch the server ends within a second without one event is a failure (:class:`ShortWatch`,
  client-go's "very short watch"): else a server closing watches at once is a tight loop. So is
  one whose connection breaks by then (a proxy resetting every stream): it re-LISTs.
- Freshness (:meth:`ListWatch.age`): while a watch is open the kind is current (a watch gone
  silent on a dead peer ends by its read timeout: :meth:`kdesched.kube.verbs.ResourceClient.watch`);
  otherwise it is as old as the last LIST's start or the end of the last watch: a watch is current
  until the server ends it or its connection breaks (an API server restart, a reset), so a quiet
  kind (no event for minutes) does not turn stale the moment its watch breaks. Only a watch that
  broke because nothing came for too long (:func:`went_silent`: its read timeout, keepalive) counts
  from its last event or start: its peer may have been dead since. The watch cache stops serving
  a kind older than its bound (:mod:`kdesched.kube.cache`).
"""

from __future__ import annotations

import logging
import random as _random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError, Gone, Unavailable

# client-go's reflector backoff (module docstring): 0.8 s doubling to 30 s, jitter 1.0 (a wait is
# its step times 1 to 2), reset after 2 minutes without a backoff.
BACKOFF_INITIAL = 0.8
BACKOFF_MAX = 30.0
BACKOFF_RESET_SECONDS = 120.0
BACKOFF_JITTER = 1.0
# A watch the server ends this soon with no event is a failure (client-go's "very short watch").
SHORT_WATCH_SECONDS = 1.0

COUNTERS = ("lists", "watches", "relists_gone", "watch_errors", "backoffs")
# A consistent LIST's page size (a re-LIST from a resourceVersion asks no limit).
PAGE_SIZE = 500

_T = TypeVar("_T")


class Backoff:
    """client-go's reflector backoff (``wait.NewExponentialBackoffManager``, module docstring): each
    :meth:`next_delay` is the current step times ``1 + jitter * random()``; the step then doubles up
    to ``cap``; a call more than ``reset_after`` seconds after the previous one (or after
    :meth:`unhealthy_until_now`) starts again at ``initial`` (the time between was healthy). Clock
    and random source are injectable."""

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

    def unhealthy_until_now(self) -> None:
        """The time until now says nothing of the watch's health (a LIST ran): the reset interval
        starts again from now, so a LIST longer than ``reset_after`` does not reset the step."""
        self._last = self._clock()

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


def resumable(exc: BaseException) -> bool:
    """Whether a watch that failed with ``exc`` reconnects from its resourceVersion (module
    docstring): a lost connection or a 429. Any other failure re-LISTs."""
    return isinstance(exc, Unavailable) or (isinstance(exc, ApiError) and exc.status == 429)


def unservable_version(exc: BaseException) -> bool:
    """Whether a LIST at a resourceVersion failed because the server cannot serve that version:
    410 (compacted), or 504 "Too large resource version" (its watch cache is behind it; v1.24's
    ``storage.NewTooLargeResourceVersionError``, cause ``ResourceVersionTooLarge``)."""
    if isinstance(exc, Gone):
        return True
    if not isinstance(exc, ApiError) or exc.status != 504:
        return False
    causes = (exc.details or {}).get("causes")
    if isinstance(causes, list) and any(isinstance(c, Mapping) and c.get("reason") == "ResourceVersionTooLarge"
                                        for c in causes):
        return True
    return "too large resource version" in (exc.message or "").lower()


def went_silent(exc: Unavailable) -> bool:
    """Whether a watch's connection broke because nothing came for too long: the read timeout
    (``timeoutSeconds`` + 30 s, past the server's own end of the watch) or TCP keepalive finding the
    peer gone. The peer may have been dead since the watch's last sign of life, so the kind's age
    counts from that (:meth:`ListWatch.age`); any other break (reset, cut, closed: an API server
    restart, a proxy) had a live peer until then."""
    return "timed out" in (exc.message or "")


class KindListener(Protocol):
    """Told about a kind's raw objects (after a store applied them, when there is one)."""

    def listed(self, items: list[dict[str, Any]]) -> None:
        """A (re-)LIST: every object of the kind, raw."""

    def changed(self, etype: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED), raw."""


class ListWatch:
    """LIST + WATCH one kind until ``stop`` is set (or :meth:`wanted` turns False): see the module
    docstring. By itself it hands each LIST and each event to its :attr:`listeners`; a subclass
    overrides :meth:`relist` and :meth:`apply` to keep a store too, and :meth:`counted` /
    :meth:`backed_off` to count elsewhere. ``what``: how logs name it (default: the kind);
    ``wait``: how a backoff waits (default ``stop.wait``; tests record instead)."""

    def __init__(self, client: KubeClient, kind: str, *, stop: threading.Event | None = None,
                 watch_timeout_seconds: int = 300, backoff: Backoff | None = None, wait_first: bool = False,
                 wait: Callable[[float], object] | None = None, clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger | None = None, what: str | None = None) -> None:
        self.client = client
        self.kind = kind
        self.stop = stop if stop is not None else threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff = backoff if backoff is not None else Backoff(clock=clock)
        self.wait_first = wait_first
        self.wait: Callable[[float], object] = wait or self.stop.wait
        self.clock = clock
        self.log = logger or logging.getLogger("kdesched.kube.reflector")
        self.what = what or kind
        self.resource_version: str | None = None
        #: what the next LIST asks (module docstring): the last resourceVersion seen, after a failed
        #: watch; None: a consistent read (the first LIST, after a 410)
        self.relist_from: str | None = None
        self.listeners: list[KindListener] = []
        self.thread: threading.Thread | None = None
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.backoff_seconds = 0.0
        #: when the kind was last known current (:meth:`age`), on :attr:`clock`; None: never listed
        self.fresh_at: float | None = None
        self.watching = False  # a watch stream is open

    # -- what a subclass changes -------------------------------------------------------------------
    def relist(self) -> bool:
        """LIST the kind (counted before anyone is told of it), tell the listeners, and keep the
        list's resourceVersion, and (:attr:`fresh_at`) when the LIST began, what it is current as of.
        False: nothing was listed (a subclass declined to), so no watch follows."""
        started = self.clock()
        result = self.list_at(lambda rv: self.client.list_raw(
            self.kind, resource_version=rv, page_size=None if rv else PAGE_SIZE))
        self.fresh_at = started
        self.counted("lists")
        for listener in self.listeners:
            listener.listed(result.items)
        self.resource_version = result.resource_version
        return True

    def list_at(self, read: Callable[[str | None], _T]) -> _T:
        """``read(resourceVersion)``: at :attr:`relist_from` when set, else (None) a consistent
        read; a version the server cannot serve (:func:`unservable_version`) falls back to the
        consistent read at once. Any other failure keeps :attr:`relist_from` for the next round."""
        rv = self.relist_from
        if rv:
            try:
                return read(rv)
            except ApiError as exc:
                if not unservable_version(exc):
                    raise
                self.log.info("%s: the API server cannot list at resourceVersion %s (%s): a consistent read",
                              self.what, rv, exc)
                self.relist_from = None
        return read(None)

    def apply(self, etype: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) to the listeners."""
        for listener in self.listeners:
            listener.changed(etype, obj)

    def wanted(self) -> bool:
        """Whether to keep listing and watching (checked before each round and at each event)."""
        return True

    def counted(self, counter: str) -> None:
        """One more of ``counter`` (:data:`COUNTERS`)."""
        self.counts[counter] += 1

    def backed_off(self, delay: float) -> None:
        """A backoff wait of ``delay`` seconds is about to begin."""
        self.counts["backoffs"] += 1
        self.backoff_seconds += delay

    def age(self, now: float) -> float:
        """Seconds since the kind was last known current (module docstring): 0 while a watch is
        open; infinite before the first LIST."""
        if self.watching:
            return 0.0
        fresh_at = self.fresh_at
        return float("inf") if fresh_at is None else max(0.0, now - fresh_at)

    # -- the loop ----------------------------------------------------------------------------------
    def watch_once(self) -> None:
        """One WATCH request from the current resourceVersion until the server ends it. Raises
        :class:`ShortWatch` when it ended (or its connection broke) at once without an event,
        :class:`Gone` when the resourceVersion is too old."""
        assert self.resource_version is not None
        self.counted("watches")
        started = self.clock()
        events = 0
        stream = self.client.watch_raw(self.kind, resource_version=self.resource_version,
                                       timeout_seconds=self.watch_timeout_seconds, allow_bookmarks=True)
        self.fresh_at, self.watching = self.clock(), True  # open: the server sends every change from here
        short = min(SHORT_WATCH_SECONDS, self.watch_timeout_seconds / 2)
        try:
            for etype, obj in stream:  # (closing the stream early drops the connection)
                if self.stop.is_set() or not self.wanted():
                    return
                events += 1
                meta = obj.get("metadata")
                rv = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
                if etype != "BOOKMARK":
                    self.apply(etype, obj)
                if rv:
                    self.resource_version = rv
                self.fresh_at = self.clock()
        except Unavailable as exc:  # the stream broke: resumed from here, unless it never worked
            if not went_silent(exc):  # open until now (a restart, a reset): every change until now came
                self.fresh_at = self.clock()
            lasted = self.clock() - started
            if events or lasted >= short or self.stop.is_set():
                raise
            raise ShortWatch(f"the watch's connection broke after {lasted:.2f} s without an event: {exc}") from exc
        finally:
            self.watching = False
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        lasted = self.clock() - started
        if not events and lasted < short and not self.stop.is_set():
            raise ShortWatch(f"the server ended the watch after {lasted:.2f} s without an event")
        self.fresh_at = self.clock()  # the server ended it: every change until now was delivered

    def _back_off(self) -> float:
        delay = self.backoff.next_delay()
        self.backed_off(delay)
        return delay

    def run(self) -> None:
        """The loop (module docstring) until ``stop`` is set or :meth:`wanted` turns False. Never raises."""
        if self.wait_first and self.wanted():
            delay = self._back_off()
            self.log.info("%s: listing again in %.1fs", self.what, delay)
            self.wait(delay)
        while not self.stop.is_set() and self.wanted():
            try:
                if self.resource_version is None:
                    try:
                        listed = self.relist()
                    finally:  # a LIST, worked or failed, is no healthy time (module docstring, Backoff)
                        self.backoff.unhealthy_until_now()
                    if not listed:
                        continue  # declined (the cache gave up): the loop ends or lists again
                    self.relist_from = None
                    if self.stop.is_set():  # stopped while listing: no watch to wait out
                        break
                self.watch_once()
            except Gone:
                self.counted("relists_gone")
                self.resource_version = self.relist_from = None  # a consistent re-LIST
                delay = self._back_off()
                self.log.info("%s watch expired (410 Gone): re-listing in %.1fs", self.what, delay)
                self.wait(delay)
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                if self.stop.is_set():  # stopping closed the connection: not a failure to report
                    self.log.debug("%s watch ended while stopping: %s", self.what, exc)
                    break
                self.counted("watch_errors")
                what, then = ("list", "retrying") if self.resource_version is None else ("watch", "retrying")
                if what == "watch" and not resumable(exc):  # as client-go: the next round LISTs, from here
                    self.relist_from, self.resource_version = self.resource_version, None
                    then = f"re-listing from resourceVersion {self.relist_from}"
                delay = self._back_off()
                self.log.warning("%s %s failed, %s in %.1fs: %s", self.what, what, then, delay, exc)
                self.wait(delay)


__all__ = ["BACKOFF_INITIAL", "BACKOFF_JITTER", "BACKOFF_MAX", "BACKOFF_RESET_SECONDS", "COUNTERS",
           "PAGE_SIZE", "SHORT_WATCH_SECONDS", "Backoff", "KindListener", "ListWatch", "ShortWatch", "resumable",
           "unservable_version", "went_silent"]

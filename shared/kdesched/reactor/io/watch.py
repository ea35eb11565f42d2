"""Watching Nodes through the API (LIST + WATCH), feeding the classifier: ``kdesched serve``'s eyes.

Why: without Knative, kdesched needs what ApiServerSource provides, but better: a LIST seeds the
classifier, a WATCH from that resourceVersion streams changes (with bookmarks, so a restart of the
watch does not replay history), a 410 Gone re-lists and *diffs* the new list against the cache (so
changes made during the gap are not lost, unlike ApiServerSource), and errors reconnect with
exponential backoff.

With the watch cache on (``kdesched serve --cache``), the cache's Node reflector does the LIST +
WATCH and :class:`ClassifierFeed` hands its objects to the classifier: one Node watch for both, and
the cache holds a node's new state before the event about it is dispatched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone
from kdesched.reactor.events.classifier import Classifier, SemanticEvent

log = logging.getLogger("kdesched.reactor.watch")

OnEvents = Callable[[list[SemanticEvent]], None]


class NodeWatcher:
    """LIST + WATCH Nodes until ``stop`` is set; semantic events go to ``on_events``."""

    def __init__(self, client: KubeClient, classifier: Classifier, on_events: OnEvents, *,
                 stop: threading.Event | None = None, watch_timeout_seconds: int = 300,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0) -> None:
        self.client = client
        self.classifier = classifier
        self.on_events = on_events
        self.stop = stop or threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.resource_version: str | None = None
        self.listed = threading.Event()  # set after the first successful LIST
        self.lists = 0
        self.watches = 0

    def relist(self) -> None:
        result = self.client.list_raw("Node")
        feed_list(self.classifier, result.items, self.on_events)
        self.resource_version = result.resource_version
        self.lists += 1
        self.listed.set()

    def watch_once(self) -> None:
        """One WATCH request from the current resourceVersion until the server ends it."""
        assert self.resource_version is not None
        self.watches += 1
        stream = self.client.watch_raw("Node", resource_version=self.resource_version,
                                       timeout_seconds=self.watch_timeout_seconds, allow_bookmarks=True)
        for etype, obj in stream:
            if self.stop.is_set():
                return
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if etype == "BOOKMARK":
                if rv:
                    self.resource_version = rv
                continue
            feed_event(self.classifier, etype, obj, self.on_events)
            if rv:
                self.resource_version = rv

    def run(self) -> None:
        backoff = self.backoff_initial
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                    if self.stop.is_set():  # stopped while listing: no watch to wait out
                        break
                self.watch_once()
                backoff = self.backoff_initial
            except Gone:
                log.info("watch expired (410 Gone): re-listing nodes")
                self.resource_version = None
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                if self.stop.is_set():  # stopping closed the connection: not a failure to report
                    log.debug("node watch ended while stopping: %s", exc)
                    break
                log.warning("node watch failed, retrying in %.1fs: %s", backoff, exc)
                self.stop.wait(backoff)
                backoff = min(self.backoff_max, backoff * 2)


def feed_list(classifier: Classifier, items: list[dict[str, Any]], on_events: OnEvents) -> None:
    """A Node LIST into the classifier: the seed, or (re-list) a diff whose changes are emitted."""
    if classifier.seeded:
        events = classifier.resync(items)
        if events:
            log.info("re-list found %d change(s) made while not watching", len(events))
            on_events(events)
    else:
        count = classifier.seed(items)
        log.info("node cache seeded with %d node(s)", count)


def feed_event(classifier: Classifier, etype: str, obj: dict[str, Any], on_events: OnEvents) -> None:
    """One Node watch event into the classifier (a malformed object must not stop the watch)."""
    try:
        events = classifier.observe(etype, obj)
    except ValueError as exc:
        log.warning("ignoring a %s event: %s", etype, exc)
        return
    if events:
        on_events(events)


class ClassifierFeed:
    """The classifier as a listener of the watch cache's Node reflector
    (:class:`kdesched.kube.cache.KindListener`)."""

    def __init__(self, classifier: Classifier, on_events: OnEvents, listed: threading.Event | None = None) -> None:
        self.classifier = classifier
        self.on_events = on_events
        self.listed_event = listed or threading.Event()  # set after the first LIST

    def listed(self, items: list[dict[str, Any]]) -> None:
        feed_list(self.classifier, items, self.on_events)
        self.listed_event.set()

    def changed(self, etype: str, obj: dict[str, Any]) -> None:
        feed_event(self.classifier, etype, obj, self.on_events)

"""Watching Nodes through the API (LIST + WATCH), feeding the classifier: ``kdesched serve``'s eyes.

Why: without Knative, kdesched needs what ApiServerSource provides, but better: a LIST seeds the
classifier, a WATCH from that resourceVersion streams changes (with bookmarks, so a restart of the
watch does not replay history), a 410 Gone re-lists and *diffs* the new list against the cache (so
changes made during the gap are not lost, unlike ApiServerSource), and errors reconnect with
exponential backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone
from kdesched.reactor.classifier import Classifier, SemanticEvent

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
        if self.classifier.seeded:
            events = self.classifier.resync(result.items)
            if events:
                log.info("re-list found %d change(s) made while not watching", len(events))
                self.on_events(events)
        else:
            count = self.classifier.seed(result.items)
            log.info("node cache seeded with %d node(s)", count)
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
            try:
                events = self.classifier.observe(etype, obj)
            except ValueError as exc:  # a malformed object must not stop the watch
                log.warning("ignoring a %s event: %s", etype, exc)
                events = []
            if rv:
                self.resource_version = rv
            if events:
                self.on_events(events)

    def run(self) -> None:
        backoff = self.backoff_initial
        while not self.stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once()
                backoff = self.backoff_initial
            except Gone:
                log.info("watch expired (410 Gone): re-listing nodes")
                self.resource_version = None
            except Exception as exc:  # noqa: BLE001 - boundary: reported, never raised further
                log.warning("node watch failed, retrying in %.1fs: %s", backoff, exc)
                self.stop.wait(backoff)
                backoff = min(self.backoff_max, backoff * 2)

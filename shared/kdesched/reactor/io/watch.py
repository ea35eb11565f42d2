"""Watching Nodes through the API (LIST + WATCH), feeding the classifier: ``kdesched serve``'s eyes.

Why: without Knative, kdesched needs what ApiServerSource provides, but better: a LIST seeds the
classifier, a WATCH from that resourceVersion streams changes (with bookmarks, so a restart of the
watch does not replay history), a 410 Gone re-lists and *diffs* the new list against the cache (so
changes made during the gap are not lost, unlike ApiServerSource), and errors reconnect.

The LIST + WATCH loop is the kube layer's one (:class:`kdesched.kube.reflector.ListWatch`, the
watch cache's too): resourceVersion and bookmark bookkeeping, client-go's backoff before every
re-LIST (a 410 included) and reconnect, a watch the server ends at once counted as a failure. This
module only says what a Node LIST and a Node event mean to the classifier (:class:`ClassifierFeed`).
With the watch cache on (``kdesched serve --cache``), the cache's Node reflector does the LIST +
WATCH and :class:`ClassifierFeed` hands its objects to the classifier: one Node watch for both, and
the cache holds a node's new state before the event about it is dispatched. Without it,
:class:`NodeWatcher` is that loop with the feed as its only listener.
"""

from __future__ import annotations

import logging
import random as _random
import threading
import time
from collections.abc import Callable
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.reflector import BACKOFF_JITTER, BACKOFF_RESET_SECONDS, Backoff, ListWatch
from kdesched.reactor.events.classifier import Classifier, SemanticEvent

log = logging.getLogger("kdesched.reactor.watch")

OnEvents = Callable[[list[SemanticEvent]], None]


class NodeWatcher(ListWatch):
    """LIST + WATCH Nodes until ``stop`` is set; semantic events go to ``on_events``. ``wait``,
    ``clock`` and ``random``: for tests (backoffs recorded, not slept)."""

    def __init__(self, client: KubeClient, classifier: Classifier, on_events: OnEvents, *,
                 stop: threading.Event | None = None, watch_timeout_seconds: int = 300,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 wait: Callable[[float], object] | None = None, clock: Callable[[], float] = time.monotonic,
                 random: Callable[[], float] = _random.random) -> None:
        backoff = Backoff(backoff_initial, max(backoff_max, backoff_initial), reset_after=BACKOFF_RESET_SECONDS,
                          jitter=BACKOFF_JITTER, clock=clock, random=random)
        super().__init__(client, "Node", stop=stop, watch_timeout_seconds=watch_timeout_seconds, backoff=backoff,
                         wait=wait, clock=clock, logger=log, what="node")
        self.classifier = classifier
        self.on_events = on_events
        self.feed = ClassifierFeed(classifier, on_events)
        self.listed = self.feed.listed_event  # set after the first successful LIST
        self.listeners.append(self.feed)

    @property
    def lists(self) -> int:
        """Node LISTs so far (the first and every re-LIST)."""
        return self.counts["lists"]

    @property
    def watches(self) -> int:
        """WATCH requests so far."""
        return self.counts["watches"]


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

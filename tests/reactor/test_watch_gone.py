"""Both users of the kube layer's one LIST + WATCH loop (kdesched.kube.reflector.ListWatch) back off
after a 410 Gone before they LIST again, and lose nothing the gap changed.

The users: ``serve``'s Node watch without the cache (kdesched.reactor.io.watch.NodeWatcher, which
used to re-list at once) and the watch cache's reflectors (kdesched.kube.cache). The fake API
server (tests/fakeapi.py) answers the watch with a scripted HTTP 410; the backoff's wait is
recorded, not slept, with the number of Node LISTs sent so far, and a Node is tainted during the
wait (the gap): the re-LIST must come after the wait and must see the taint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.classifier import Classifier, SemanticEvent
from kdesched.reactor.io.watch import NodeWatcher

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def wait_for(cond: Callable[[], Any], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def node_lists(fake: FakeApiServer) -> int:
    """Node LISTs that read objects (not the watches, not the cache's counts of limit=1)."""
    return sum(1 for r in fake.requests("GET", "/api/v1/nodes")
               if "watch" not in r.query and r.query.get("limit") != "1")


class GapWaits:
    """A loop's ``wait``: records (delay, Node LISTs so far); at the first wait (the gap after the
    410) taints n2 in the API server; returns at once (True, "stopped", once ``stop`` is set)."""

    def __init__(self, fake: FakeApiServer, stop: threading.Event) -> None:
        self.fake, self.stop = fake, stop
        self.seen: list[tuple[float, int]] = []

    def __call__(self, delay: float) -> bool:
        self.seen.append((round(delay, 3), node_lists(self.fake)))
        if len(self.seen) == 1:
            node = self.fake.get("Node", "n2")
            assert node is not None
            node["spec"]["taints"] = [TAINT]
            self.fake.update(node)
        return self.stop.is_set()


def test_the_node_watcher_backs_off_after_a_410_before_listing_again(fake_api: FakeApiServer,
                                                                     kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    fake_api.script("GET", "/api/v1/nodes", [200, 410])  # the LIST goes through, the WATCH gets 410
    stop = threading.Event()
    waits = GapWaits(fake_api, stop)
    seen: list[SemanticEvent] = []
    # (a short watch timeout: a watch still being opened when the test stops it ends soon anyway)
    watcher = NodeWatcher(kube, Classifier(), seen.extend, stop=stop, watch_timeout_seconds=2, wait=waits,
                          random=lambda: 0.0)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: watcher.lists == 2 and watcher.watches >= 2)
    finally:
        stop.set()
        fake_api.send_bookmark()  # the open watch sees the stop at its next event
        thread.join(10)
    assert not thread.is_alive()
    # one backoff step (0.5 s, no jitter) after the 410, while only the first LIST had been sent
    assert waits.seen == [(0.5, 1)]
    assert watcher.counts["relists_gone"] == 1 and watcher.counts["backoffs"] == 1
    # the re-LIST diffed the gap's change into the classifier
    assert [(e.type, e.node) for e in seen] == [(ev.TAINTS_CHANGED, "n2")]


def test_the_watch_cache_backs_off_after_a_410_before_listing_again(fake_api: FakeApiServer,
                                                                    kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    fake_api.script("GET", "/api/v1/nodes", [200, 200, 410])  # the count and the LIST go through, the WATCH 410
    stop = threading.Event()
    waits = GapWaits(fake_api, stop)
    cache = ClusterCache(kube, kinds=["Node"], stop=stop, watch_timeout_seconds=30, wait=waits, random=lambda: 0.0)
    cache.start()
    try:
        assert cache.wait_for(lambda: cache.stats().lists == 2, 15)
        assert cache.wait_for(lambda: any(n.taints for n in cache.snapshot(include=["Node"]).nodes.values()), 15)
    finally:
        cache.close(join_seconds=0)
        fake_api.cut_connections()
    stats = cache.stats()
    # one backoff step (0.8 s, client-go's first, no jitter) after the 410, before the re-LIST
    assert waits.seen == [(0.8, 1)]
    assert stats.relists_gone == 1 and stats.backoffs == 1 and stats.watch_errors == 0

"""The watch cache's limits on what it asks of the API server and of memory (kdesched.kube.cache).

Covers: the reflector backoff (client-go's: 0.8 s doubling to 30 s, jitter up to 2x, reset after
2 quiet minutes) on a fake clock; re-LISTs after a 410, a failed LIST or a watch cut, a watch the
server ends at once, and a re-LIST after the cache came back under its ceiling all wait a backoff
step first (waits recorded, not slept; the re-LIST comes after its wait); a backoff wait ends when
the cache closes; every request of the cache (counts, LIST pages, WATCH starts) takes a token of
the client's rate limit; the ceiling is checked by counting before a LIST is read (a kind over it
is never listed; Nodes a listener needs are); the default ceiling comes from the cgroup memory
limit. The fake API server (tests/fakeapi.py) serves the 410s and failures.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kdesched.kube import memlimit
from kdesched.kube.cache import (
    DEFAULT_MAX_OBJECTS,
    SHORT_WATCH_SECONDS,
    Backoff,
    ClusterCache,
    auto_ceiling,
    ceiling_for,
)
from kdesched.kube.client import KubeClient, TokenBucket
from kdesched.kube.config import ClientLimits
from kdesched.kube.memlimit import MemoryLimit

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the backoff itself --------------------------------------------------------------------------------


def test_backoff_doubles_to_the_cap_with_jitter_up_to_twice_the_step() -> None:
    clock = Clock()
    low = Backoff(clock=clock, random=lambda: 0.0)
    assert [round(low.next_delay(), 3) for _ in range(9)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]
    high = Backoff(clock=clock, random=lambda: 0.5)
    assert [round(high.next_delay(), 3) for _ in range(8)] == [1.2, 2.4, 4.8, 9.6, 19.2, 38.4, 45.0, 45.0]
    # the jitter of client-go's reflector is 1.0: a wait is in [step, 2 x step)
    almost = Backoff(clock=clock, random=lambda: 0.999)
    assert 1.59 < almost.next_delay() < 1.6


def test_backoff_resets_after_two_minutes_without_one() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock, random=lambda: 0.0)
    assert [backoff.next_delay() for _ in range(3)] == pytest.approx([0.8, 1.6, 3.2])
    clock.now += 119.0  # failing again within 2 minutes: the step goes on
    assert backoff.next_delay() == pytest.approx(6.4)
    clock.now += 120.5  # 2 minutes healthy: back to the first step
    assert backoff.next_delay() == pytest.approx(0.8)
    assert backoff.next_delay() == pytest.approx(1.6)


@pytest.mark.parametrize("kw", [{"initial": 0.0}, {"initial": 5.0, "cap": 1.0}, {"jitter": -1.0}, {"factor": 0.5}])
def test_backoff_refuses_bad_settings(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(**kw)


# -- the reflectors' waits, over the fake API ---------------------------------------------------------------


class Waits:
    """The cache's ``wait``: records (thread, delay, full Pod LISTs so far), returns at once."""

    def __init__(self, fake: FakeApiServer, stop_after: int | None = None,
                 hold: threading.Event | None = None) -> None:
        self.fake = fake
        self.stop_after = stop_after
        self.hold = hold  # when given, a wait returns only once it is set (the test acts meanwhile)
        self.cache: ClusterCache | None = None
        self.lock = threading.Lock()
        self.seen: list[tuple[str, float, int]] = []

    def __call__(self, delay: float) -> bool:
        with self.lock:
            self.seen.append((threading.current_thread().name.removeprefix("kdesched-cache-"), delay,
                              len(pod_lists(self.fake))))
            if self.stop_after is not None and len(self.seen) >= self.stop_after and self.cache is not None:
                self.cache.stop.set()
        if self.hold is not None:
            self.hold.wait(10)
        return self.cache is not None and self.cache.stop.is_set()

    def of(self, kind: str) -> list[float]:
        with self.lock:
            return [round(d, 3) for k, d, _ in self.seen if k == kind]


def pod_lists(fake: FakeApiServer) -> list[Any]:
    """The Pod LIST requests that read objects (not the watches, not the counts of limit=1)."""
    return [r for r in fake.requests("GET", "/api/v1/pods") if "watch" not in r.query and r.query.get("limit") != "1"]


@pytest.fixture
def build(kube: KubeClient) -> Iterator[Callable[..., ClusterCache]]:
    caches: list[ClusterCache] = []

    def make(**kw: Any) -> ClusterCache:
        kw.setdefault("watch_timeout_seconds", 30)
        kw.setdefault("random", lambda: 0.0)
        client = kw.pop("client", kube)
        cache = ClusterCache(client, **kw)
        if isinstance(kw.get("wait"), Waits):
            kw["wait"].cache = cache
        caches.append(cache)
        return cache

    yield make
    for cache in caches:
        cache.close()


def test_a_failing_list_is_retried_after_a_growing_backoff(
        fake_api: FakeApiServer, build: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), pod_obj("p", "n1"))
    # the first count and its two retries fail with an answer the client does not retry itself (its own
    # read retries absorb 5xx: kube.errors.is_transient), so the cache sees each failure
    fake_api.script("GET", "/api/v1/pods", [403, 403, 403])
    waits = Waits(fake_api)
    cache = build(kinds=["Node", "Pod"], wait=waits).start()
    assert cache.wait_synced(10)
    assert waits.of("Pod") == [0.8, 1.6, 3.2] and waits.of("Node") == []
    stats = cache.stats()
    assert stats.backoffs == 3 and stats.backoff_seconds == pytest.approx(5.6) and stats.watch_errors == 3


def test_a_410_relists_only_after_a_backoff(fake_api: FakeApiServer, kube: KubeClient,
                                            build: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i}", "n1") for i in range(3)))
    hold = threading.Event()
    waits = Waits(fake_api, hold=hold)
    cache = build(kinds=["Node", "Pod"], wait=waits).start()
    assert cache.wait_synced(10)
    assert cache.wait_for(lambda: sum(r.query.get("watch") == "true" for r in fake_api.requests("GET")) >= 2, 10)
    assert len(pod_lists(fake_api)) == 1 and waits.seen == []
    time.sleep(SHORT_WATCH_SECONDS + 0.1)  # watches that worked: a cut resumes them (a very short one re-LISTs)
    # the history is compacted while the watches are cut (both held in their backoff wait): the
    # reconnect gets 410 and re-lists. (Compacting while a watch is open would end it with 410 in the
    # stream instead, and which of the two a kind sees would depend on the threads' timing.)
    fake_api.cut_connections()
    assert cache.wait_for(lambda: len(waits.of("Pod")) == 1 and len(waits.of("Node")) == 1, 10)
    fake_api.delete("Pod", "p0", "default")
    fake_api.add(pod_obj("p9", "n1"))
    fake_api.compact()
    hold.set()
    assert cache.wait_for(lambda: cache.stats().relists_gone == 2 and cache.stats().lists == 4, 10)
    assert cache.wait_for(lambda: {p.name for p in cache.snapshot(include=["Node", "Pod"]).pods} == {"p1", "p2", "p9"}, 10)
    # per kind: a step after the cut (reconnect), the next step after the 410 (re-list)
    assert waits.of("Pod") == [0.8, 1.6] and waits.of("Node") == [0.8, 1.6]
    # ... and the Pod re-LIST was not sent before its wait: one LIST (the first) when it began
    assert [lists for kind, _, lists in waits.seen if kind == "Pod"] == [1, 1]
    assert len(pod_lists(fake_api)) == 2


def test_a_watch_the_server_ends_at_once_backs_off(
        fake_api: FakeApiServer, build: Callable[..., ClusterCache]) -> None:
    """A server that ends every watch at once without an event would make a tight loop of
    reconnects: each is a failure (client-go's "very short watch"), retried after a backoff from a
    new LIST (client-go's ListAndWatch returns, and Run lists again)."""
    fake_api.add(node_obj("n1"))
    waits = Waits(fake_api, stop_after=3)
    cache = build(kinds=["Node"], wait=waits)
    opened: list[str] = []

    def watch_raw(kind: str, **kw: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        opened.append(kw["resource_version"])
        return iter(())

    cache.client.watch_raw = watch_raw  # type: ignore[method-assign]
    cache.start()
    thread = cache.reflectors["Node"].thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    assert waits.of("Node") == [0.8, 1.6, 3.2] and len(opened) == 3
    assert cache.stats().watch_errors == 3 and cache.stats().lists == 3  # a LIST before each watch


def test_a_backoff_wait_ends_when_the_cache_closes(
        fake_api: FakeApiServer, build: Callable[..., ClusterCache]) -> None:
    fake_api.script("GET", "/api/v1/nodes", [403] * 100)  # not retried by the client itself
    cache = build(kinds=["Node"], backoff_initial=600.0, backoff_max=600.0).start()  # waits on its stop event
    assert cache.wait_for(lambda: cache.stats().backoffs == 1, 10)
    thread = cache.reflectors["Node"].thread
    assert thread is not None and thread.is_alive()
    cache.close()
    thread.join(5)
    assert not thread.is_alive()


# -- the rate limit ------------------------------------------------------------------------------------


def test_every_request_of_the_cache_takes_a_token_of_the_clients_bucket(fake_api: FakeApiServer) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"), *(pod_obj(f"p{i}", "n1") for i in range(5)))
    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=1, burst=1000, max_concurrent_evictions=2))
    client.rate_limiter = bucket = TokenBucket(1, 1000, clock=Clock())  # frozen clock: no refill
    cache = ClusterCache(client, kinds=["Node", "Pod"], page_size=2, watch_timeout_seconds=30)
    try:
        assert cache.client is not client and cache.client.rate_limiter is bucket
        cache.start()
        assert cache.wait_synced(10)
        assert cache.wait_for(lambda: sum(r.query.get("watch") == "true" for r in fake_api.requests("GET")) >= 2, 10)
        # per kind: the count, the pages (Pod: 3 pages of 2, Node: 1), the watch
        assert cache.stats().requests == (1 + 3 + 1) + (1 + 1 + 1)
        assert 1000 - bucket._tokens == pytest.approx(cache.stats().requests)
        assert client.stats.requests == 0  # all of it on the cache's own client, and its own pool
    finally:
        cache.close()
        client.close()


# -- the ceiling, before a LIST is read -------------------------------------------------------------------


class NodeListener:
    def __init__(self) -> None:
        self.lists: list[list[str]] = []

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.lists.append([o["metadata"]["name"] for o in items])

    def changed(self, etype: str, obj: dict[str, Any]) -> None:
        pass


def test_a_kind_counted_over_the_ceiling_is_never_listed(
        fake_api: FakeApiServer, build: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i:02}", "n1") for i in range(10)))
    cache = build(kinds=["Node", "Pod"], max_objects=6, page_size=2, recheck_seconds=0)
    nodes = NodeListener()
    cache.listen("Node", nodes)  # the classifier still needs the nodes: listed anyway
    cache.start()
    assert cache.wait_for(lambda: bool(cache.disabled) and nodes.lists == [["n1"]], 10)
    assert re.fullmatch(r"1[01] objects over the ceiling of 6 \((Node 1, )?Pod 10\); counted before listing Pod; "
                        r"raise the memory limit or --cache-max-objects to keep it", cache.disabled), cache.disabled
    # not one page of pods was read: the only Pod requests were counts (a LIST of one object)
    pods = fake_api.requests("GET", "/api/v1/pods")
    assert pods and all(r.query.get("limit") == "1" for r in pods)
    assert pod_lists(fake_api) == [] and cache.stats().objects == {"Node": 1, "Pod": 0}


def test_the_lists_in_progress_count_against_the_ceiling(
        fake_api: FakeApiServer, build: Callable[..., ClusterCache]) -> None:
    """Two kinds listing at once: each counted alone fits, both together do not. The second count
    sees the first kind's LIST in progress (reserved at its count), so it is not read."""
    fake_api.add(node_obj("n1"), node_obj("n2"), *(pod_obj(f"p{i}", "n1") for i in range(4)))
    cache = build(kinds=["Node", "Pod"], max_objects=5, recheck_seconds=0)
    cache.governor.admit("Node")  # Node's LIST in progress: 2 reserved
    cache.governor.admit("Pod")   # 2 + 4 > 5: gives up before reading the pods
    assert "6 objects over the ceiling of 5 (Node 2, Pod 4); counted before listing Pod" in cache.disabled
    cache.governor.release("Node")


def test_a_list_admitted_then_not_wanted_gives_its_count_back(
        fake_api: FakeApiServer, build: Callable[..., ClusterCache]) -> None:
    """A reflector retired (or a cache giving up) between its count and its LIST lists nothing: the
    objects its count reserved must not go on counting against the other kinds' LISTs (review J)."""
    fake_api.add(node_obj("n1"), node_obj("n2"), *(pod_obj(f"p{i}", "n1") for i in range(4)))
    cache = build(kinds=["Node", "Pod"], max_objects=5, recheck_seconds=0)
    pods = cache.reflectors["Pod"]
    count = cache.client.count_objects

    def count_then_retire(kind: str) -> int | None:
        n = count(kind)
        pods.retired = True  # a concurrent retirement: the reflector is not wanted any more
        return n

    cache.client.count_objects = count_then_retire  # type: ignore[method-assign]
    assert pods.relist() is False  # admitted (4 pods fit), then not wanted: nothing listed
    assert pod_lists(fake_api) == []
    cache.client.count_objects = count  # type: ignore[method-assign]
    cache.governor.admit("Node")  # 2 nodes; the Pod store is empty and no Pod LIST is in progress
    assert cache.disabled == ""
    cache.governor.release("Node")


def test_back_under_the_ceiling_each_kind_waits_a_step_before_listing_again(
        fake_api: FakeApiServer, kube: KubeClient, build: Callable[..., ClusterCache]) -> None:
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i}", "n1") for i in range(7)))  # the pods alone are over 6
    waits = Waits(fake_api)
    cache = build(kinds=["Node", "Pod"], max_objects=6, recheck_seconds=0.05, wait=waits).start()
    assert cache.wait_for(lambda: bool(cache.disabled), 10)
    assert pod_lists(fake_api) == []  # counted, never listed
    for i in range(4):  # 4 objects: under 80% of the ceiling
        fake_api.delete("Pod", f"p{i}", "default")
    assert cache.wait_for(lambda: not cache.disabled and cache.usable(["Node", "Pod"]), 10)
    assert cache.stats().recoveries == 1
    # the fresh reflectors waited one step each before their LIST (none had been sent then)
    assert waits.of("Pod") == [0.8] and waits.of("Node") == [0.8]
    assert [lists for kind, _, lists in waits.seen if kind == "Pod"] == [0]
    assert len(pod_lists(fake_api)) == 1
    assert sorted(p.name for p in cache.snapshot(include=["Node", "Pod"]).pods) == ["p4", "p5", "p6"]


# -- the default ceiling from the memory limit ----------------------------------------------------------------


def test_the_ceiling_is_a_share_of_the_memory_limit() -> None:
    assert ceiling_for(MemoryLimit(2 * 2**30, "x")).objects == 275_823  # 35% of 2 GiB / 2,725 bytes
    assert ceiling_for(MemoryLimit(2**30, "x")).objects == 137_911
    assert ceiling_for(MemoryLimit(2**30, "x"), share=0.5, bytes_per_object=1000).objects == 536_870
    assert ceiling_for(MemoryLimit(1000, "x")).objects == 1  # never 0
    none = ceiling_for(None)
    assert none.objects == DEFAULT_MAX_OBJECTS and "no container memory limit" in none.why
    assert "35% of the memory limit of 2.00 GiB (x)" in ceiling_for(MemoryLimit(2 * 2**30, "x")).why
    with pytest.raises(ValueError, match="share"):
        ceiling_for(None, share=0)


def test_a_cache_without_a_ceiling_takes_it_from_the_cgroup(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kube: KubeClient) -> None:
    (tmp_path / "memory.max").write_text("1073741824\n")
    monkeypatch.setattr(memlimit, "CGROUP_ROOT", tmp_path)
    assert auto_ceiling().objects == 137_911
    cache = ClusterCache(kube, kinds=["Node"])
    try:
        assert cache.max_objects == 137_911 and cache.stats().max_objects == 137_911
        assert ClusterCache(kube, kinds=["Node"], max_objects=42, own_client=False).max_objects == 42  # explicit wins
    finally:
        cache.close()
    (tmp_path / "memory.max").write_text("max\n")
    assert auto_ceiling().objects == DEFAULT_MAX_OBJECTS


def test_the_cli_option_defaults_to_auto() -> None:
    from kdesched.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve"]).cache_max_objects is None
    assert parser.parse_args(["serve", "--cache-max-objects", "auto"]).cache_max_objects is None
    assert parser.parse_args(["serve", "--cache-max-objects", "120,000"]).cache_max_objects == 120_000

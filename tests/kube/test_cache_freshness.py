"""A watch that keeps failing does not leave the watch cache serving its first LIST (review J,
finding 2).

Why: after any failed WATCH but a 410 the reflector reconnected from its last resourceVersion and
never listed again, and ``ClusterCache.usable()`` ignored freshness. With RBAC granting ``list``
but not ``watch`` on a kind (403 on every WATCH), a proxy that closes or resets streams, or a
watch endpoint answering 5xx, the cache served the cluster as it was at start, as "synced", for
ever: deleted pods still planned, new ones invisible, stale Ready counts.

Covers (kdesched.kube.reflector, kdesched.kube.cache): as client-go's reflector, a WATCH that
fails with an answer (403, 5xx), an ERROR event, or one whose connection breaks at once, re-LISTs
(after the back-off) and the store is replaced; a lost connection or a 429 reconnects from the
resourceVersion; a cache whose every WATCH is refused still drops a deleted pod (review J's
repro); a kind not listed or watched for longer than ``max_stale_seconds`` makes the cache not
usable, names it in describe() (/readyz) and snapshot() refuses it, an open quiet watch does not
age, and the next successful LIST serves again (a fake clock, waits not slept). A watch is current
until it ends or breaks, so a quiet kind whose watch breaks is not stale at once (review L,
finding 2), unless it broke by going silent (read timeout, keepalive).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kdesched.kube.cache import DEFAULT_MAX_STALE_SECONDS, ClusterCache
from kdesched.kube.client import KubeClient, ListResult
from kdesched.kube.errors import Unavailable
from kdesched.kube.reflector import ListWatch
from kdesched.reactor.events.classifier import Classifier
from kdesched.reactor.io.watch import NodeWatcher

from tests.builders import node_obj, pod_obj
from tests.fakeapi import Dropped, FakeApiServer, Reply, status_body

FORBIDDEN = ('pods is forbidden: User "system:serviceaccount:kdesched:kdesched" cannot watch resource "pods" '
             'in API group "" at the cluster scope')


def wait_until(cond: Callable[[], Any], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def requests_of(fake: FakeApiServer, path: str) -> list[str]:
    """The GETs of ``path`` in order, as "list" or "watch@<resourceVersion>" (counts of limit=1 left out)."""
    return [f"watch@{r.query['resourceVersion']}" if r.query.get("watch") == "true" else "list"
            for r in fake.requests("GET", path) if r.query.get("limit") != "1"]


def test_a_cache_whose_watch_is_always_refused_lists_again_and_drops_what_was_deleted(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Review J's repro: RBAC grants list but not watch on pods."""
    fake_api.add(node_obj("n1"), node_obj("n2"), pod_obj("a", node="n1"), pod_obj("b", node="n2"))
    real_watch = fake_api.watch

    def watch_forbidden(handler: Any, path: str, query: dict[str, str]) -> None:
        if path.endswith("/pods"):
            raise Reply(403, FORBIDDEN)
        real_watch(handler, path, query)

    fake_api.watch = watch_forbidden  # type: ignore[method-assign]
    cache = ClusterCache(kube, kinds=("Node", "Pod"), watch_timeout_seconds=2, backoff_initial=0.05,
                         backoff_max=0.2, own_client=False).start()
    try:
        assert cache.wait_synced(10)
        fake_api.delete("Pod", "a", "default")  # a LIST shows it gone at once
        assert cache.wait_for(lambda: cache.usable(("Node", "Pod")) and
                              {p.name for p in cache.snapshot(None, ("Node", "Pod")).pods} == {"b"}, 10), (
            f"the cache still serves deleted pod 'a' after {cache.stats().watch_errors} failed watches and "
            f"{cache.stats().lists} LIST(s); describe(): {cache.describe()}")
        stats = cache.stats()
        assert stats.watch_errors >= 1 and stats.lists >= 3  # Node, Pod, and a Pod re-LIST at least
        assert cache.describe().startswith("watch cache synced")  # its LISTs are current: served
    finally:
        cache.close()


class Recorded:
    """A loop's ``wait``: records the delays, returns at once; sets ``stop`` after ``n`` of them."""

    def __init__(self, stop: threading.Event, n: int) -> None:
        self.stop, self.n = stop, n
        self.delays: list[float] = []

    def __call__(self, delay: float) -> bool:
        self.delays.append(delay)
        if len(self.delays) >= self.n:
            self.stop.set()
        return self.stop.is_set()


def run_node_watcher(fake_api: FakeApiServer, kube: KubeClient, waits: int) -> list[str]:
    stop = threading.Event()
    watcher = NodeWatcher(kube, Classifier(), lambda events: None, stop=stop, watch_timeout_seconds=2,
                          wait=Recorded(stop, waits), random=lambda: 0.0)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    thread.join(15)
    assert not thread.is_alive()
    return requests_of(fake_api, "/api/v1/nodes")


def test_a_watch_refused_with_an_answer_lists_again_but_a_429_resumes(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """client-go: a 429 (and a refused connection) retries the WATCH; any other failure returns from
    ListAndWatch, and the next round LISTs."""
    fake_api.add(node_obj("n1"))
    rv = str(fake_api.rv)
    # LIST, WATCH 429, WATCH 500, LIST, WATCH 403, LIST, WATCH 410 (the 4th wait stops the loop)
    fake_api.script("GET", "/api/v1/nodes", [200, 429, 500, 200, 403, 200, 410])
    seen = run_node_watcher(fake_api, kube, waits=4)
    assert seen == ["list", f"watch@{rv}", f"watch@{rv}", "list", f"watch@{rv}", "list", f"watch@{rv}"]


def test_an_error_event_lists_again(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    rv = str(fake_api.rv)

    def watch_error(handler: Any, path: str, query: dict[str, str]) -> None:
        handler.start_stream()  # one ERROR event (a 500 Status), then the stream ends
        handler.send_chunk({"type": "ERROR", "object": status_body(500, "etcd went away")})
        handler.end_stream()

    fake_api.watch = watch_error  # type: ignore[method-assign]
    assert run_node_watcher(fake_api, kube, waits=2) == ["list", f"watch@{rv}", "list", f"watch@{rv}"]


def test_a_connection_cut_after_the_watch_worked_resumes_from_its_resource_version(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    stop = threading.Event()
    watcher = NodeWatcher(kube, Classifier(), lambda events: None, stop=stop, watch_timeout_seconds=30,
                          wait=Recorded(stop, 2), random=lambda: 0.0)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    rv = str(fake_api.rv)
    try:
        wait_until(lambda: watcher.watches == 1)
        fake_api.add(node_obj("n2"))  # an event: the stream works
        wait_until(lambda: watcher.resource_version == str(fake_api.rv))
        fake_api.cut_connections()
        wait_until(lambda: watcher.watches == 2)
    finally:
        stop.set()
        fake_api.send_bookmark()
        thread.join(10)
    assert requests_of(fake_api, "/api/v1/nodes")[:3] == ["list", f"watch@{rv}", f"watch@{fake_api.rv}"]
    assert watcher.lists == 1


def test_a_watch_whose_connection_breaks_at_once_lists_again(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A proxy resetting every stream at once: no event ever arrives, so resuming would never
    refresh anything (client-go: a "very short watch")."""
    fake_api.add(node_obj("n1"))

    def watch_cut(handler: Any, path: str, query: dict[str, str]) -> None:
        handler.start_stream()
        handler.wfile.write(b'20\r\n{"type": "ADD')  # half a chunk, then the connection goes
        handler.wfile.flush()
        raise Dropped()

    fake_api.watch = watch_cut  # type: ignore[method-assign]
    rv = str(fake_api.rv)
    assert run_node_watcher(fake_api, kube, waits=2) == ["list", f"watch@{rv}", "list", f"watch@{rv}"]


# -- the staleness bound, on a fake clock ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clocked(fake_api: FakeApiServer, kube: KubeClient) -> Iterator[tuple[ClusterCache, Clock]]:
    fake_api.add(node_obj("n1"), pod_obj("a", node="n1"))
    clock = Clock()
    stop = threading.Event()

    def wait(delay: float) -> bool:  # a short real wait: the failing loop does not spin
        return stop.wait(0.05)

    cache = ClusterCache(kube, kinds=("Node", "Pod"), watch_timeout_seconds=30, own_client=False, clock=clock,
                         random=lambda: 0.0, wait=wait, stop=stop, max_stale_seconds=120).start()
    assert cache.wait_synced(10)
    assert cache.wait_for(lambda: all(r.watching for r in cache.reflectors.values()), 10)
    yield cache, clock
    cache.close()


def test_an_open_quiet_watch_keeps_the_cache_current(clocked: tuple[ClusterCache, Clock]) -> None:
    cache, clock = clocked
    clock.now += 3600  # an hour without an event: the watch is open, every change would have come
    assert cache.usable(("Node", "Pod")) and cache.stats().stale == ()
    assert cache.describe().startswith("watch cache synced")


def test_a_kind_neither_listed_nor_watched_past_the_bound_is_not_served(
        fake_api: FakeApiServer, clocked: tuple[ClusterCache, Clock]) -> None:
    cache, clock = clocked
    assert DEFAULT_MAX_STALE_SECONDS == 120.0
    # every Pod request fails from now on (RBAC revoked, say): no LIST, no WATCH
    fake_api.script("GET", "/api/v1/pods", [403] * 10_000)
    clock.now += 5
    fake_api.cut_connections()
    reflector = cache.reflectors["Pod"]
    nodes = cache.reflectors["Node"]  # its watch was cut too, and resumed (a lost connection)
    assert cache.wait_for(lambda: not reflector.watching and cache.stats().watch_errors >= 3 and nodes.watching, 10)
    # the watch was open until the cut (current until then), and nothing has worked since
    clock.now += 100  # 100 s since: within the bound, still served
    assert cache.usable(("Node", "Pod"))
    clock.now += 25  # 125 s
    assert not cache.usable(("Node", "Pod")) and cache.usable(("Node",))
    assert cache.stats().stale == (("Pod", pytest.approx(125.0)),)
    described = cache.describe()
    assert described.startswith("watch cache stale: Pod not listed or watched for 125 s (over 120 s; ")
    assert described.endswith("failed LISTs/WATCHes): LIST per event")
    with pytest.raises(LookupError, match="not current: Pod"):
        cache.snapshot(None, ("Node", "Pod"))
    assert stale_gauge(cache) == {"Node": 0.0, "Pod": 1.0}  # /metrics says so too: alertable
    # the API answers again: the next LIST (a re-LIST: the watch failed) serves again
    fake_api.scripts.clear()
    assert cache.wait_for(lambda: cache.usable(("Node", "Pod")), 10)
    assert {p.name for p in cache.snapshot(None, ("Node", "Pod")).pods} == {"a"}
    assert stale_gauge(cache) == {"Node": 0.0, "Pod": 0.0}


def stale_gauge(cache: ClusterCache) -> dict[str, float]:
    """``kdesched_cache_stale{kind}`` as serve's /metrics would show it for ``cache``."""
    from kdesched.reactor.serve.server import CACHE_METRICS

    before = CACHE_METRICS.cache
    CACHE_METRICS.cache = cache
    try:
        families = {f.name: f for f in CACHE_METRICS.collect()}
    finally:
        CACHE_METRICS.cache = before
    return {s.labels["kind"]: s.value for s in families["kdesched_cache_stale"].samples}


# -- a watch that was open is current until it ends (review L, finding 2) ------------------------------------


def test_a_quiet_watch_that_breaks_is_not_stale_at_once(
        fake_api: FakeApiServer, clocked: tuple[ClusterCache, Clock]) -> None:
    """Review L's repro: the Pod watch is open with no event for 200 s (quiet kinds: PriorityClass,
    Namespace, PDB...), then the connection is cut (an API server restart) and the reconnect is
    throttled. The kind was current a second ago: the cache keeps serving it, no per-event LISTs."""
    cache, clock = clocked
    clock.now += 200
    assert cache.usable(("Node", "Pod"))
    fake_api.script("GET", "/api/v1/pods", [429] * 10_000)  # the reconnect is throttled: resumed, no re-LIST
    fake_api.cut_connections()
    reflector = cache.reflectors["Pod"]
    try:
        assert cache.wait_for(lambda: not reflector.watching and cache.stats().watch_errors >= 1, 10)
        clock.now += 1  # one second without a watch
        assert reflector.age(clock.now) == pytest.approx(1.0)
        assert cache.usable(("Node", "Pod")), cache.describe()
        clock.now += 120  # but the bound still holds from the moment the watch ended
        assert not cache.usable(("Node", "Pod"))
        assert cache.stats().stale == (("Pod", pytest.approx(121.0)),)
    finally:
        fake_api.scripts.clear()


class OneWatch:
    """A client whose LIST answers at once and whose one WATCH stays quiet for ``quiet`` seconds
    (on ``clock``), then fails with ``error`` (None: the server ends it)."""

    def __init__(self, clock: Clock, quiet: float, error: Exception | None) -> None:
        self.clock, self.quiet, self.error = clock, quiet, error

    def list_raw(self, kind: str, **_: Any) -> Any:
        return ListResult([], "7")

    def watch_raw(self, kind: str, **_: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        def stream() -> Iterator[tuple[str, dict[str, Any]]]:
            self.clock.now += self.quiet
            if self.error is not None:
                raise self.error
            yield from ()
        return stream()


@pytest.mark.parametrize(("error", "age"), [
    (None, 1.0),  # the server ended it (its timeoutSeconds): current until then
    ("connection lost: connection reset", 1.0),  # an API server restart, a load balancer reset
    ("connection lost: the answer was cut off", 1.0),
    # no byte for longer than the read timeout, or keepalive found the peer gone: the peer may have
    # been dead since the watch's last sign of life, which its age counts from (as before)
    ("connection lost: timed out", 201.0),
    ("connection lost: connection timed out", 201.0),
], ids=["ended", "reset", "cut", "read-timeout", "keepalive"])
def test_a_watch_is_current_until_it_ends_unless_its_peer_went_silent(error: str | None, age: float) -> None:
    clock = Clock()
    client = OneWatch(clock, 200.0, Unavailable(error, maybe_sent=True) if error else None)
    lw = ListWatch(client, "Namespace", clock=clock)  # type: ignore[arg-type]
    lw.resource_version = "7"
    try:
        lw.watch_once()
    except Unavailable:
        pass
    assert not lw.watching
    assert lw.age(clock.now + 1) == pytest.approx(age)

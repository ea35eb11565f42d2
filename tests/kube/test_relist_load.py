"""What a re-LIST after a failed watch asks the API server (review L, finding 3).

Why: 184df19 re-LISTs after every watch failure that is not a lost connection or a 429 (a 403, a
5xx, an ERROR event, a very short watch), as client-go's reflector. But it sent a consistent read,
``limit=500`` and no resourceVersion: every object from etcd, page by page (300 pages at 150,000
pods), at every back-off step while the watch kept failing, exactly when the API server is in
trouble. client-go's re-LIST asks ``resourceVersion=<last synced>`` with paging off, which a v1.24
API server answers from its watch cache (``shouldDelegateList``: only ``resourceVersion=""``, a
``continue`` or a ``limit`` with a resourceVersion other than "0" go to etcd).

Covers (kdesched.kube.reflector, kdesched.kube.cache, kdesched.kube.governor): the re-LIST after
a failed watch asks the last resourceVersion seen (an event's, not only the LIST's) without a
limit, still counted first by the memory governor; the first LIST and the re-LIST after a 410 stay
consistent paged reads; a re-LIST whose resourceVersion the server cannot serve (410, or 504
"Too large resource version" from an API server whose watch cache lags) falls back to a consistent
read at once; an unpaged answer that would not fit the memory the ceiling leaves a re-LIST is read
in pages instead; serve's Node watch without the cache does the same.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient, ListResult
from kdesched.kube.errors import ApiError, Gone, ServerError, error_from_status
from kdesched.kube.governor import fits_unpaged
from kdesched.kube.reflector import ListWatch
from kdesched.reactor.events.classifier import Classifier
from kdesched.reactor.io.watch import NodeWatcher

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer, Reply


def lists_of(fake: FakeApiServer, path: str) -> list[dict[str, str]]:
    """The queries of the LISTs of ``path`` that read objects (not the watches, not the counts)."""
    return [dict(r.query) for r in fake.requests("GET", path)
            if r.query.get("watch") != "true" and r.query.get("limit") != "1"]


def failing_pod_watch(fake: FakeApiServer, status: int = 500) -> None:
    real_watch = fake.watch

    def watch(handler: Any, path: str, query: dict[str, str]) -> None:
        if path.endswith("/pods"):
            raise Reply(status, "etcdserver: request timed out")
        real_watch(handler, path, query)

    fake.watch = watch  # type: ignore[method-assign]


def run_cache(kube: KubeClient, lists: int, **kw: Any) -> ClusterCache:
    cache = ClusterCache(kube, kinds=("Pod",), watch_timeout_seconds=2, backoff_initial=0.05, backoff_max=0.1,
                         own_client=False, **kw).start()
    try:
        assert cache.wait_for(lambda: cache.stats().lists >= lists, 10), cache.describe()
    finally:
        cache.close(join_seconds=5)
    return cache


def test_a_relist_after_a_failed_watch_is_served_from_the_watch_cache(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Review L's repro."""
    fake_api.add(node_obj("n1"), pod_obj("a", node="n1"))
    failing_pod_watch(fake_api)
    run_cache(kube, lists=3)
    lists = lists_of(fake_api, "/api/v1/pods")
    watched = [r.query["resourceVersion"] for r in fake_api.requests("GET", "/api/v1/pods")
               if r.query.get("watch") == "true"]
    assert lists[0] == {"limit": "500"}  # the first LIST: a consistent read, in pages
    assert lists[1] == {"resourceVersion": watched[0]}, (
        f"the re-LIST after a failed watch asked {lists[1]} (client-go asks resourceVersion={watched[0]} "
        "without a limit: the API server's watch cache answers)")
    assert lists[2] == {"resourceVersion": watched[1]}
    # the governor still counts before every LIST: a count (limit=1) right before each
    sent = [("count" if r.query.get("limit") == "1" else "list") for r in fake_api.requests("GET", "/api/v1/pods")
            if r.query.get("watch") != "true"]
    assert sent[:6] == ["count", "list"] * 3


def test_a_relist_after_a_410_is_a_consistent_read(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), pod_obj("a", node="n1"))
    failing_pod_watch(fake_api, 410)
    run_cache(kube, lists=3)
    assert lists_of(fake_api, "/api/v1/pods")[:3] == [{"limit": "500"}] * 3


class ScriptedClient:
    """LISTs answer the scripted errors first, then resourceVersion 12; a WATCH delivers
    ``events`` then fails with ``then``."""

    def __init__(self, errors: list[Exception], events: Sequence[tuple[str, dict[str, Any]]] = (),
                 then: Exception | None = None) -> None:
        self.errors, self.events, self.then = list(errors), list(events), then
        self.asked: list[tuple[str | None, int | None]] = []

    def list_raw(self, kind: str, *, resource_version: str | None = None, page_size: int | None = 500,
                 **_: Any) -> ListResult:
        self.asked.append((resource_version, page_size))
        if self.errors:
            raise self.errors.pop(0)
        return ListResult([], "12")

    def watch_raw(self, kind: str, **_: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        def stream() -> Iterator[tuple[str, dict[str, Any]]]:
            yield from self.events
            if self.then is not None:
                raise self.then
        return stream()


@pytest.mark.parametrize("answer", [
    Gone(410, "Gone", "too old resource version: 5 (9)"),
    error_from_status(504, "Gateway Timeout", "Too large resource version: 9, current: 5", status_reason="Timeout",
                      details={"causes": [{"reason": "ResourceVersionTooLarge",
                                           "message": "Too large resource version"}], "retryAfterSeconds": 1}),
], ids=["410", "too-large"])
def test_a_relist_the_server_cannot_serve_at_its_resource_version_reads_consistently_at_once(answer: ApiError) -> None:
    """client-go: an expired or too large resourceVersion on the re-LIST falls back to
    ``resourceVersion=""`` (a consistent read) at once, so the reflector makes progress."""
    client = ScriptedClient([answer])
    lw = ListWatch(client, "Node", wait=lambda delay: None)  # type: ignore[arg-type]
    lw.resource_version = "9"
    lw.relist_from = "9"
    assert lw.relist()
    assert client.asked == [("9", None), (None, 500)]
    assert lw.resource_version == "12" and lw.relist_from is None


def test_a_relist_that_fails_otherwise_keeps_its_resource_version() -> None:
    """A 5xx (after the client's own retries) or a lost connection: the next round asks the same
    resourceVersion again after its back-off (client-go keeps it too)."""
    client = ScriptedClient([ServerError(500, "Internal Server Error", "etcd went away")])
    lw = ListWatch(client, "Node", wait=lambda delay: None)  # type: ignore[arg-type]
    lw.relist_from = "9"
    with pytest.raises(ServerError):
        lw.relist()
    assert lw.relist_from == "9" and client.asked == [("9", None)]


def test_the_relist_asks_the_last_resource_version_an_event_brought() -> None:
    event = ("MODIFIED", {"metadata": {"name": "n1", "resourceVersion": "17"}})
    client = ScriptedClient([], [event], then=error_from_status(500, "", "etcd went away"))
    stop = threading.Event()
    waits: list[float] = []

    def wait(delay: float) -> bool:
        waits.append(delay)
        if len(waits) >= 2:
            stop.set()
        return stop.is_set()

    lw = ListWatch(client, "Node", stop=stop, wait=wait)  # type: ignore[arg-type]
    lw.run()
    assert client.asked == [(None, 500), ("17", None)]


def test_serve_node_watch_without_the_cache_relists_from_its_resource_version(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    rv = str(fake_api.rv)
    # LIST, WATCH 500, LIST, WATCH 410, LIST, WATCH 403 (the third wait stops the loop)
    fake_api.script("GET", "/api/v1/nodes", [200, 500, 200, 410, 200, 403])
    stop = threading.Event()
    waits: list[float] = []

    def wait(delay: float) -> bool:
        waits.append(delay)
        if len(waits) >= 3:
            stop.set()
        return stop.is_set()

    watcher = NodeWatcher(kube, Classifier(), lambda events: None, stop=stop, watch_timeout_seconds=2, wait=wait,
                          random=lambda: 0.0)
    watcher.run()
    assert lists_of(fake_api, "/api/v1/nodes") == [{"limit": "500"}, {"resourceVersion": rv}, {"limit": "500"}]


# -- memory: an unpaged answer is read whole -------------------------------------------------------------------


def test_an_unpaged_relist_must_fit_the_memory_the_ceiling_leaves_a_relist() -> None:
    """The ceiling leaves a re-LIST room for the stores twice over (MEMORY_SHARE); an unpaged answer
    is read whole beside them, so it is asked only for a kind well under the ceiling."""
    assert fits_unpaged(max_objects=300_000, held=100_000, listing=100_000)
    assert not fits_unpaged(max_objects=300_000, held=150_000, listing=150_000)
    assert fits_unpaged(max_objects=300_000, held=115_000, listing=115_000)  # under 40 % of the ceiling
    assert not fits_unpaged(max_objects=300_000, held=1_000, listing=None)  # not counted: not known


def test_a_kind_too_large_for_an_unpaged_answer_is_relisted_in_pages(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), *(pod_obj(f"p{i}", node="n1") for i in range(4)))
    failing_pod_watch(fake_api)
    run_cache(kube, lists=2, max_objects=5)  # 4 pods: under the ceiling, but not twice over with the answer
    assert lists_of(fake_api, "/api/v1/pods")[:2] == [{"limit": "500"}] * 2


# -- a watch cache behind the version asked (seen on the real v1.24 API server) ---------------------------------


def too_large_at_a_version(fake: FakeApiServer) -> None:
    """The API server's answer to a LIST at a resourceVersion its watch cache of the kind has not
    reached after 3 s (a quiet kind: the etcd LIST's version is the whole store's): 504 with the
    ResourceVersionTooLarge cause and Retry-After 1 (real v1.24: 'Too large resource version: 205,
    current: 1' after 3.01 s for pods with no pod written since the API server started)."""
    real_list = fake._list

    def answer(kind: str, namespace: str, query: dict[str, str]) -> dict[str, Any]:
        if query.get("resourceVersion") not in (None, "0") and "limit" not in query:
            raise Reply(504, f"Too large resource version: {query['resourceVersion']}, current: 1", retry_after=1,
                        details={"causes": [{"reason": "ResourceVersionTooLarge",
                                             "message": "Too large resource version"}], "retryAfterSeconds": 1})
        return real_list(kind, namespace, query)

    fake._list = answer  # type: ignore[method-assign]


def test_a_list_at_a_version_is_one_attempt(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The client would retry a 504 with Retry-After for up to its 60 s read budget, 3 s on the
    server each: the re-LIST falls back to a consistent read instead, at once."""
    fake_api.add(pod_obj("a", node="n1"))
    too_large_at_a_version(fake_api)
    with pytest.raises(ServerError, match="Too large resource version"):
        kube.list_for_cache("Pod", page_size=None, resource_version="9")
    assert len(fake_api.requests("GET", "/api/v1/pods")) == 1
    assert kube.list_for_cache("Pod")[1]  # a consistent read: retried as any read


def test_a_watch_cache_behind_the_version_falls_back_to_a_consistent_read(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), pod_obj("a", node="n1"))
    failing_pod_watch(fake_api)
    too_large_at_a_version(fake_api)
    cache = run_cache(kube, lists=3)
    rv = str(fake_api.rv)
    assert lists_of(fake_api, "/api/v1/pods")[:5] == [
        {"limit": "500"}, {"resourceVersion": rv}, {"limit": "500"}, {"resourceVersion": rv}, {"limit": "500"}]
    assert cache.stats().relists_gone == 0  # not a 410 of the watch

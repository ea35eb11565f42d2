"""watch_raw over a chunked HTTP stream from the fake API server.

Covers: the backlog after a resourceVersion and live changes (ADDED, MODIFIED, DELETED),
bookmarks (on request and at the server's timeout), 410 as an ERROR event and as an HTTP status
(both -> Gone), the connection being reusable after a watch is abandoned midway.
"""

from __future__ import annotations

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer


def test_backlog_then_live_changes(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    rv = kube.list_raw("Node").resource_version
    fake_api.add(node_obj("n2"))
    stream = kube.watch_raw("Node", resource_version=rv, timeout_seconds=10)
    etype, obj = next(stream)
    assert (etype, obj["metadata"]["name"], obj["kind"]) == ("ADDED", "n2", "Node")
    fake_api.update(node_obj("n1", taints=[{"key": "k", "effect": "NoSchedule"}]))
    etype, obj = next(stream)
    assert (etype, obj["metadata"]["name"]) == ("MODIFIED", "n1")
    assert obj["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    fake_api.delete("Node", "n2")
    assert next(stream)[0] == "DELETED"
    stream.close()
    (request,) = fake_api.requests("GET", "/api/v1/nodes")[1:]
    assert request.query == {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "10",
                             "allowWatchBookmarks": "true"}
    # the abandoned stream's connection is not reused with unread data on it
    assert [n["metadata"]["name"] for n in kube.list_raw("Node").items] == ["n1"]


def test_bookmarks(fake_api: FakeApiServer, kube: KubeClient) -> None:
    rv = kube.list_raw("Node").resource_version
    stream = kube.watch_raw("Node", resource_version=rv, timeout_seconds=10)
    fake_api.send_bookmark()
    etype, obj = next(stream)
    assert etype == "BOOKMARK" and obj["metadata"]["resourceVersion"] == str(fake_api.rv)
    stream.close()


def test_stream_ends_at_server_timeout_with_a_bookmark(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    events = list(kube.watch_raw("Node", resource_version="0", timeout_seconds=0))
    assert [t for t, _ in events] == ["ADDED", "BOOKMARK"]


def test_without_bookmarks_none_are_sent(fake_api: FakeApiServer, kube: KubeClient) -> None:
    events = list(kube.watch_raw("Node", resource_version="0", timeout_seconds=0, allow_bookmarks=False))
    assert events == []
    assert "allowWatchBookmarks" not in fake_api.requests()[0].query


def test_too_old_resource_version_raises_gone(fake_api: FakeApiServer, kube: KubeClient) -> None:
    rv = kube.list_raw("Node").resource_version
    fake_api.add(node_obj("n1"))
    fake_api.compact()
    with pytest.raises(Gone, match="too old resource version"):
        list(kube.watch_raw("Node", resource_version=rv, timeout_seconds=10))
    # a fresh resourceVersion works again
    fresh = kube.list_raw("Node").resource_version
    fake_api.add(node_obj("n2"))
    stream = kube.watch_raw("Node", resource_version=fresh, timeout_seconds=10)
    assert next(stream)[1]["metadata"]["name"] == "n2"
    stream.close()


def test_http_410_raises_gone(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.script("GET", "/api/v1/nodes", [410])
    with pytest.raises(Gone):
        list(kube.watch_raw("Node", resource_version="5", timeout_seconds=10))


def test_an_open_watch_whose_unsent_changes_are_compacted_away_gets_410(fake_api: FakeApiServer,
                                                                        kube: KubeClient) -> None:
    """The fake API server's own rule, as the real one's watch cache: a watch that has not sent the
    changes the history held when it was compacted ends with 410, so its client re-lists. Before, it
    went on without them: the CI at 08c97dd failed test_cache's 410 story when a delete and an add
    made back to back with compact() (under load: before the watch's thread woke) never reached the
    cache. Held here with the fake's lock, so the watch cannot wake in between."""
    rv = kube.list_raw("Node").resource_version
    stream = kube.watch_raw("Node", resource_version=rv, timeout_seconds=10)
    fake_api.add(node_obj("n1"))
    assert next(stream)[1]["metadata"]["name"] == "n1"  # the watch is open and current
    with fake_api._lock:
        fake_api.add(node_obj("n2"))
        fake_api.delete("Node", "n1")
        fake_api.compact()
    with pytest.raises(Gone, match="too old resource version"):
        next(stream)
    # a watch that has sent everything stays open through a compaction
    fresh = kube.list_raw("Node").resource_version
    stream = kube.watch_raw("Node", resource_version=fresh, timeout_seconds=10)
    fake_api.add(node_obj("n3"))
    assert next(stream)[1]["metadata"]["name"] == "n3"
    fake_api.compact()
    fake_api.add(node_obj("n4"))
    assert next(stream)[1]["metadata"]["name"] == "n4"
    stream.close()


def test_expired_continue_token_raises_gone(fake_api: FakeApiServer, kube: KubeClient,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake_api.add(*(node_obj(f"n{i}") for i in range(4)))
    original = fake_api.handle

    def change_and_compact_after_each_page(method: str, path: str, query: dict[str, str],
                                           body: object, headers: dict[str, str]) -> tuple[int, object]:
        result = original(method, path, query, body, headers)
        fake_api.add(node_obj(f"late-{fake_api.rv}"))
        fake_api.compact()
        return result

    monkeypatch.setattr(fake_api, "handle", change_and_compact_after_each_page)
    with pytest.raises(Gone, match="continue parameter is too old"):
        kube.list_raw("Node", page_size=2)
    # the list starts over after each expired token (ReadRetry.max_list_restarts = 3), then gives up:
    # 4 tries of 2 pages each (was 2 requests when an expired token ended the list at once)
    assert len(fake_api.requests("GET", "/api/v1/nodes")) == 2 * (1 + kube.read_retry.max_list_restarts)

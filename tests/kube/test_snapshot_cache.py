"""Reading a snapshot from the API server's watch cache (``from_cache``): every cluster-wide LIST
asks ``resourceVersion=0``, the small kinds are read concurrently with the pods, and the items come
out in etcd's key order whatever order the cache answered in (decisions follow that order)."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Forbidden
from kdesched.kube.snapshot import load_live_snapshot

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer


def shuffled(real: Any) -> Any:
    def wrapper(self: KubeClient, kind: str, **kwargs: Any) -> list[Any]:
        items = real(self, kind, **kwargs)
        return items[::-1]  # what a watch cache may do: no order at all
    return wrapper


def test_a_cache_read_is_put_back_in_etcd_order(fake_api: FakeApiServer, kube: KubeClient,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # "a-b" < "a" as etcd keys ("a-b/..." sorts before "a/..."), unlike (namespace, name) tuples
    fake_api.add(node_obj("n2"), node_obj("n1"), node_obj("n10"))
    fake_api.add(pod_obj("x", node="n1", namespace="a"), pod_obj("y", node="n1", namespace="a-b"),
                 pod_obj("b", node="n1", namespace="a"), pod_obj("z", node="n2", namespace="default"))
    monkeypatch.setattr(KubeClient, "list_for_snapshot", shuffled(KubeClient.list_for_snapshot))
    cached = load_live_snapshot(kube, from_cache=True)
    assert [p.key for p in cached.pods] == ["a-b/y", "a/b", "a/x", "default/z"]
    assert list(cached.nodes) == ["n1", "n10", "n2"]
    assert {r.query.get("resourceVersion") for r in fake_api.requests("GET")} == {"0"}


def test_a_paged_read_keeps_the_servers_order(fake_api: FakeApiServer, kube: KubeClient,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake_api.add(node_obj("n1"), pod_obj("a", node="n1"), pod_obj("b", node="n1"))
    monkeypatch.setattr(KubeClient, "list_for_snapshot", shuffled(KubeClient.list_for_snapshot))
    paged = load_live_snapshot(kube)
    assert [p.name for p in paged.pods] == ["b", "a"]  # not re-sorted: etcd already answers in order
    assert all("resourceVersion" not in r.query for r in fake_api.requests("GET"))


def test_an_error_of_any_list_propagates_and_requests_are_counted(fake_api: FakeApiServer,
                                                                  kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), pod_obj("a", node="n1"))
    fake_api.script("GET", "/apis/policy/v1/poddisruptionbudgets", [403])
    with pytest.raises(Forbidden):
        load_live_snapshot(kube, from_cache=True)
    # the LISTs go out at once; once one fails the ones not started yet are cancelled (a race: how
    # many went out varies), and every request that did go out is counted exactly once
    sent = fake_api.requests("GET")
    assert kube.stats.requests == len(sent) <= 6
    assert any(r.path == "/apis/policy/v1/poddisruptionbudgets" for r in sent)

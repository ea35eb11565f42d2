"""``kdesched serve`` with its watch cache, against the fake API server: a node event is decided
from memory (no LIST of pods or nodes after the cache synced), /readyz and /metrics report the
cache, ``cache=False`` LISTs per event as before, and past the ceiling serve falls back to LISTs
and still evicts."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.io.loaders import CACHE_NOTE
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import ReactorServer
from kdesched_functions.manual import create_serve_app

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.test_serve import TAINT, wait_for


@pytest.fixture
def start(fake_api: FakeApiServer, kube: KubeClient) -> Iterator[Callable[..., ReactorServer]]:
    started: list[tuple[ReactorServer, threading.Thread, list[int]]] = []

    def run(**kw: Any) -> ReactorServer:
        fake_api.add(node_obj("n1"), node_obj("n2"), node_obj("n3"))
        fake_api.add(pod_obj("intolerant", "n1", owner_name="web"), pod_obj("other", "n2", owner_name="db"))
        block = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5}
        policy = default_like_policy(kdesched=block)
        settings = parse_settings(block, policy=policy, env={})
        srv = ReactorServer(policy, settings, kube, host="127.0.0.1", port=0, app_factory=create_serve_app,
                            sweep_interval_seconds=0, identity="serve-test", watch_timeout_seconds=2, **kw)
        result: list[int] = []
        thread = threading.Thread(target=lambda: result.append(srv.run()), daemon=True)
        thread.start()
        started.append((srv, thread, result))
        wait_for(lambda: srv.ready()[0])
        return srv

    yield run
    for srv, thread, result in started:
        srv.shutdown()
        thread.join(timeout=20)
        assert result == [0]


def get(srv: ReactorServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def taint_n1(fake_api: FakeApiServer) -> None:
    node = fake_api.get("Node", "n1")
    assert node is not None
    node["spec"]["taints"] = [TAINT]
    fake_api.update(node)


def lists(fake_api: FakeApiServer, path: str) -> list[dict[str, str]]:
    return [r.query for r in fake_api.requests("GET", path) if "watch" not in r.query]


def taint_report(srv: ReactorServer) -> dict[str, Any]:
    return wait_for(lambda: next((r for r in srv.reports if r["trigger"]["type"] == ev.TAINTS_CHANGED), None))


def test_a_taint_is_decided_from_the_cache_without_listing(start: Callable[..., ReactorServer],
                                                          fake_api: FakeApiServer) -> None:
    srv = start()
    assert srv.cache is not None and srv.cache.kinds == ("Node", "Pod", "PodDisruptionBudget")
    status, body = get(srv, "/readyz")
    assert status == 200 and "watch cache synced: 5 objects" in json.loads(body)["reason"]
    fake_api.clear_journal()
    taint_n1(fake_api)
    wait_for(lambda: fake_api.get("Pod", "intolerant", "default") is None)
    report = taint_report(srv)
    assert report["evictions"][0]["pod"] == "intolerant" and report["evictions"][0]["result"] == "evicted"
    assert CACHE_NOTE in report["notes"]
    # no LIST of pods, nodes or PDBs for the run: one Node watch (the classifier's and the cache's)
    assert lists(fake_api, "/api/v1/pods") == lists(fake_api, "/api/v1/nodes") == []
    assert lists(fake_api, "/apis/policy/v1/poddisruptionbudgets") == []
    assert srv.watcher.lists == 0 and srv.snapshots_listed == 0 and srv.snapshots_from_cache >= 1
    assert fake_api.get("Pod", "other", "default") is not None
    _, metrics = get(srv, "/metrics")
    assert 'kdesched_cache_objects{kind="Node"} 3.0' in metrics
    assert 'kdesched_cache_synced{kind="Pod"} 1.0' in metrics and "kdesched_cache_disabled 0.0" in metrics


def test_without_the_cache_runs_list_as_before(start: Callable[..., ReactorServer], fake_api: FakeApiServer) -> None:
    srv = start(cache=False)
    assert srv.cache is None and srv.watcher.lists == 1
    fake_api.clear_journal()
    taint_n1(fake_api)
    report = taint_report(srv)
    assert report["evictions"][0]["pod"] == "intolerant" and CACHE_NOTE not in report["notes"]
    assert {"fieldSelector": "spec.nodeName=n1", "limit": "500"} in lists(fake_api, "/api/v1/pods")


def test_past_the_ceiling_serve_lists_per_event_and_still_evicts(start: Callable[..., ReactorServer],
                                                                 fake_api: FakeApiServer) -> None:
    srv = start(cache_max_objects=4)
    assert srv.cache is not None
    wait_for(lambda: srv.cache is not None and srv.cache.disabled)
    status, body = get(srv, "/readyz")
    assert status == 200 and "watch cache off (" in json.loads(body)["reason"]
    taint_n1(fake_api)  # the Node reflector keeps feeding the classifier
    report = taint_report(srv)
    assert report["evictions"][0]["pod"] == "intolerant" and CACHE_NOTE not in report["notes"]
    assert srv.snapshots_listed >= 1
    _, metrics = get(srv, "/metrics")
    assert "kdesched_cache_disabled 1.0" in metrics

"""``kdesched serve`` against the fake API server: watch -> classify -> evict, the HTTP endpoint,
re-list after 410 Gone, leader election, and a clean stop (in-process and by SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone
from kdesched.kube.lease import LeaseLock
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.classifier import Classifier, SemanticEvent
from kdesched.reactor.io.watch import NodeWatcher
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import ReactorServer
from kdesched_functions.manual import create_serve_app

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request
from tests.reactor.policies import default_like_policy

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def wait_for(cond: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Poll a condition with short waits (the watch is asynchronous); fail loudly on timeout."""
    deadline = time.monotonic() + timeout
    done = threading.Event()
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        done.wait(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture
def server(fake_api: FakeApiServer, kube: KubeClient) -> Iterator[ReactorServer]:
    fake_api.add(node_obj("n1"), node_obj("n2"), node_obj("n3"))
    fake_api.add(pod_obj("intolerant", "n1", owner_name="web"), pod_obj("other", "n2", owner_name="db"))
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5}
    policy = default_like_policy(kdesched=block)
    settings = parse_settings(block, policy=policy, env={})
    srv = ReactorServer(policy, settings, kube, host="127.0.0.1", port=0, app_factory=create_serve_app,
                        sweep_interval_seconds=0, identity="serve-test", watch_timeout_seconds=2)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(srv.run()), daemon=True)
    thread.start()
    wait_for(srv.watcher.listed.is_set)
    yield srv
    srv.shutdown()
    thread.join(timeout=20)
    assert result == [0]


def test_taint_on_a_watched_node_evicts_the_intolerant_pod(server: ReactorServer, fake_api: FakeApiServer) -> None:
    node = fake_api.get("Node", "n1")
    assert node is not None
    node["spec"]["taints"] = [TAINT]
    fake_api.update(node)
    wait_for(lambda: fake_api.get("Pod", "intolerant", "default") is None)
    evictions = [r.path for r in fake_api.requests("POST") if r.path.endswith("/eviction")]
    assert evictions == ["/api/v1/namespaces/default/pods/intolerant/eviction"]
    report = wait_for(lambda: next((r for r in server.reports if r["trigger"]["type"] == ev.TAINTS_CHANGED), None))
    assert report["trigger"]["node"] == "n1" and report["evictions"][0]["result"] == "evicted"
    assert fake_api.get("Pod", "other", "default") is not None


def test_heartbeat_does_not_run_anything(server: ReactorServer, fake_api: FakeApiServer) -> None:
    node = fake_api.get("Node", "n2")
    assert node is not None
    node["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-01T12:00:10Z"
    fake_api.update(node)
    marker = fake_api.get("Node", "n3")
    assert marker is not None
    marker["metadata"]["labels"]["team"] = "x"  # a real change after the heartbeat, to know it was seen
    fake_api.update(marker)
    wait_for(lambda: any(r["trigger"]["node"] == "n3" for r in server.reports))
    assert [r["trigger"]["node"] for r in server.reports] == ["n3"]


def test_http_endpoint_runs_manual_requests(server: ReactorServer, fake_api: FakeApiServer) -> None:
    headers, body = ce_request(ev.RUN_REQUESTED, {"strategies": ["RemovePodsViolatingNodeTaints"], "dryRun": True})
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200 and resp.headers["ce-type"] == ev.RUN_COMPLETED
        assert json.loads(resp.read())["dryRun"] is True
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz", timeout=10) as resp:
        assert json.loads(resp.read())["status"] == "ready"


def test_only_the_leader_watches(fake_api: FakeApiServer, kube: KubeClient) -> None:
    settings = parse_settings({}, env={})
    assert LeaseLock(kube, "kdesched", "kdesched-leader", "someone-else", 60).try_acquire()
    srv = ReactorServer(default_like_policy(), settings, kube, port=0, sweep_interval_seconds=0, identity="follower")
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_for(srv.leadership.checked.is_set)
    assert not srv.leadership.is_leader.is_set() and srv.ready() == (True, "standby (not the leader)")
    srv.shutdown()
    thread.join(timeout=10)
    assert not thread.is_alive() and srv.watcher.lists == 0


def test_relist_after_gone_reports_changes_made_in_the_gap(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    seen: list[SemanticEvent] = []
    watcher = NodeWatcher(kube, Classifier(), seen.extend, watch_timeout_seconds=1)
    watcher.relist()
    stale = watcher.resource_version
    node = fake_api.get("Node", "n2")
    assert node is not None
    node["spec"]["taints"] = [TAINT]
    fake_api.update(node)
    fake_api.compact()
    watcher.resource_version = stale
    with pytest.raises(Gone):
        watcher.watch_once()
    watcher.relist()
    assert [(e.type, e.node) for e in seen] == [(ev.TAINTS_CHANGED, "n2")]


def test_watch_follows_bookmarks(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    watcher = NodeWatcher(kube, Classifier(), lambda evs: None, watch_timeout_seconds=1)
    watcher.relist()
    before = watcher.resource_version
    fake_api.add(pod_obj("p", "n1"))  # moves the resourceVersion without a Node change
    fake_api.send_bookmark()
    watcher.watch_once()
    assert int(watcher.resource_version or 0) > int(before or 0)


def test_a_stopped_node_watch_ends_quietly(fake_api: FakeApiServer, kube: KubeClient,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """The watch in flight when serve stops ends with an error (the server or the connection
    goes): that is the stop, not a "node watch failed, retrying" warning at every shutdown."""
    fake_api.add(node_obj("n1"))
    watcher = NodeWatcher(kube, Classifier(), lambda evs: None, watch_timeout_seconds=30, backoff_initial=0.05)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    wait_for(lambda: any(r.query.get("watch") == "true" for r in fake_api.requests("GET", "/api/v1/nodes")))
    caplog.set_level("DEBUG", logger="kdesched.reactor.watch")
    watcher.stop.set()
    deadline = time.monotonic() + 10
    while thread.is_alive() and time.monotonic() < deadline:
        # the stream ends mid-response now, not at its timeout (cut again: a watch request cut before
        # its answer is sent again once by urllib3's own retry, and would then wait out its 30 s)
        fake_api.cut_connections()
        thread.join(0.2)
    assert not thread.is_alive()
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    assert any("node watch ended while stopping" in r.getMessage() for r in caplog.records)


def test_sigterm_stops_serve_cleanly(fake_api: FakeApiServer, tmp_path: Path) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    kubeconfig = fake_api.kubeconfig(tmp_path / "kubeconfig")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KDESCHED_LEASE_NAMESPACE": "kdesched"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "kdesched", "serve", "--kubeconfig", str(kubeconfig), "--port", "0",
                             "--sweep-interval", "0", "--host", "127.0.0.1", "--identity", "sub"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (fake_api.get("Lease", "kdesched-leader", "kdesched") or {}).get("spec", {})
                 .get("holderIdentity") == "sub" and fake_api.requests("GET", "/api/v1/nodes"), timeout=30)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, proc.stderr.read().decode() if proc.stderr else ""
    lease = fake_api.get("Lease", "kdesched-leader", "kdesched")
    assert lease is not None and not lease["spec"].get("holderIdentity")


def test_the_event_log_line_counts_evictions_not_paced_pods(fake_api: FakeApiServer, kube: KubeClient,
                                                             caplog: pytest.LogCaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One pod evicted and two paced: ``1 eviction(s), 2 paced`` (issue 31: serve logged
    ``3 eviction(s)``, counting every outcome of the run)."""
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5}
    policy = default_like_policy(kdesched=block)
    srv = ReactorServer(policy, parse_settings(block, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                        app_factory=create_serve_app, sweep_interval_seconds=0, identity="serve-test")
    outcomes = [{"pod": "web-1", "result": "evicted"}, {"pod": "web-2", "result": "paced"},
                {"pod": "web-3", "result": "paced"}]
    monkeypatch.setattr(srv.reactor, "node_event",
                        lambda *a, **k: {"evictions": outcomes, "blocked": [{"pod": "db-1"}], "coalesced": 1})
    caplog.set_level("INFO", logger="kdesched.reactor.serve")
    try:
        srv.dispatcher.run_event(SemanticEvent(ev.TAINTS_CHANGED, "e1", "n1", {"node": "n1"}))
    finally:
        srv.shutdown()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(ev.TAINTS_CHANGED)]
    assert lines == [f"{ev.TAINTS_CHANGED} on n1: 1 eviction(s), 2 paced, 1 blocked"]

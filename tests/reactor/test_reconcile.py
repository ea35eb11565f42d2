"""The start-up reconcile: the node record (pure) and ``serve`` acting on changes made while no
one watched (fake API server). On the real control plane: tests/realk8s/test_concurrent_moves.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.classifier import digest_of
from kdesched.reactor.io.reconcile import (
    MAX_RECORD_BYTES,
    NodeMark,
    NodeRecordStore,
    decode,
    differences,
    encode,
    mark_of,
)
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import ReactorServer

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def node(name: str, uid: str = "", **kw: Any) -> dict[str, Any]:
    obj = node_obj(name, **kw)
    obj["metadata"]["uid"] = uid or f"uid-{name}"
    obj["metadata"].setdefault("resourceVersion", "7")
    return obj


def marks(*objs: dict[str, Any]) -> dict[str, NodeMark]:
    return {d.name: mark_of(d) for d in map(digest_of, objs)}


def types(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.type, e.node) for e in events]


def test_the_record_round_trips_and_garbage_is_no_record() -> None:
    rec = marks(node("n1"), node("n2", taints=[TAINT]))
    assert decode(encode(rec)) == rec
    for bad in (None, "", "z1:not base64!", "z9:abc", "z1:" + "QUJD"):
        assert decode(bad) is None


def test_differences_are_the_events_a_watch_would_have_sent() -> None:
    before = marks(node("same"), node("tainted"), node("relabelled"), node("recovered", unschedulable=True),
                   node("recreated"), node("deleted"))
    now = [digest_of(o) for o in (
        node("same"), node("tainted", taints=[TAINT]), node("relabelled", labels={"zone": "b"}),
        node("recovered"), node("recreated", uid="uid-recreated-2"), node("new"))]
    got = types(differences(before, now))
    assert got == [(ev.TAINTS_CHANGED, "tainted"), (ev.LABELS_CHANGED, "relabelled"), (ev.NODE_READY, "recovered"),
                   (ev.NODE_ADDED, "recreated"), (ev.NODE_ADDED, "new")]
    assert differences(before, [digest_of(node("same"))]) == []


def test_a_large_cluster_fits_and_a_too_large_one_is_refused(kube: KubeClient, fake_api: FakeApiServer) -> None:
    many = {f"node-{i:05d}": NodeMark(f"{i:012x}", True, "0" * 10, "1" * 10) for i in range(5000)}
    assert len(encode(many)) < MAX_RECORD_BYTES
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    assert LeaseLock(kube, "kdesched", "kdesched-leader", "me", 60).try_acquire()
    store = NodeRecordStore(kube, "kdesched", "kdesched-leader", "me")
    assert store.write(many) == "" and store.read() == many
    assert NodeRecordStore(kube, "kdesched", "kdesched-leader", "other").write(many) == "not the leader Lease's holder"


def wait_for(cond: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def serve(kube: KubeClient, identity: str) -> tuple[ReactorServer, threading.Thread]:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5, "leaseDurationSeconds": 5}
    policy = default_like_policy(kdesched=block)
    srv = ReactorServer(policy, parse_settings(block, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                        sweep_interval_seconds=0, identity=identity, watch_timeout_seconds=2, cache=False)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    return srv, thread


def test_a_taint_made_while_serve_was_down_is_acted_on_at_start(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node("n1"), node("n2"), node("n3"))
    fake_api.add(pod_obj("intolerant", "n1", owner_name="web"))
    first, thread = serve(kube, "first")
    wait_for(first.watcher.listed.is_set)
    wait_for(lambda: first.node_records.has_read)  # no record is written before the previous one is read
    first.shutdown()  # a clean stop writes the record of what it saw
    thread.join(timeout=20)
    assert NodeRecordStore(kube, "kdesched", "kdesched-leader", "x").read() is not None
    n1 = fake_api.get("Node", "n1")
    assert n1 is not None
    n1["spec"]["taints"] = [TAINT]  # while no kdesched watched
    fake_api.update(n1)
    second, thread = serve(kube, "second")
    try:
        wait_for(lambda: fake_api.get("Pod", "intolerant", "default") is None)
        report = wait_for(lambda: next((r for r in second.reports if r["trigger"]["type"] == ev.TAINTS_CHANGED), None))
        assert report["trigger"]["node"] == "n1" and report["evictions"][0]["result"] == "evicted"
    finally:
        second.shutdown()
        thread.join(timeout=20)


def test_without_a_record_nothing_is_reconciled(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node("n1", taints=[TAINT]), node("n2"), node("n3"))
    fake_api.add(pod_obj("intolerant", "n1", owner_name="web"))
    srv, thread = serve(kube, "only")
    try:
        wait_for(srv.watcher.listed.is_set)
        time.sleep(0.5)
        assert fake_api.get("Pod", "intolerant", "default") is not None and srv.reports == []
    finally:
        srv.shutdown()
        thread.join(timeout=20)


class Posted:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def __call__(self, url: str, function: str, replies: list[Any]) -> None:
        self.events += [(r.type, r.subject) for r in replies]


def test_a_restarted_classifier_function_posts_what_changed_while_it_was_down(fake_api: FakeApiServer,
                                                                              kube: KubeClient) -> None:
    """The Knative side of the start-up reconcile: the classifier function keeps its node record on
    the Lease kdesched-classifier and, once a new process has seeded, posts the difference."""
    from kdesched_functions.classifier import ClassifierFunction

    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    fake_api.add(node("n1"), node("n2"))
    posted = Posted()
    first = ClassifierFunction(kube, "http://broker", posted, record_namespace="kdesched")
    assert first.seed() and posted.events == []  # a first start: no record yet, nothing to send
    lease = fake_api.get("Lease", "kdesched-classifier", "kdesched")
    assert lease is not None and "kdesched.dev/node-record" in lease["metadata"]["annotations"]
    n1 = fake_api.get("Node", "n1")
    assert n1 is not None
    n1["spec"]["taints"] = [TAINT]  # while no classifier runs
    fake_api.update(n1)
    fake_api.add(node("n3"))
    second = ClassifierFunction(kube, "http://broker", posted, record_namespace="kdesched")
    assert second.seed()
    assert posted.events == [(ev.TAINTS_CHANGED, "n1"), (ev.NODE_ADDED, "n3")]
    # the record follows: a third start finds nothing new
    third = ClassifierFunction(kube, "http://broker", Posted(), record_namespace="kdesched")
    assert third.seed() and third.post.events == []  # type: ignore[attr-defined]


def test_serve_and_the_classifier_function_keep_the_record_with_one_implementation(kube: KubeClient) -> None:
    from kdesched.reactor.io.reconcile import NodeRecorder
    from kdesched_functions.classifier import ClassifierFunction

    block = {"settleSeconds": 0.05}
    policy = default_like_policy(kdesched=block)
    srv = ReactorServer(policy, parse_settings(block, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                        sweep_interval_seconds=0, identity="me", cache=False)
    fn = ClassifierFunction(kube, "http://broker", Posted(), record_namespace="kdesched")
    assert isinstance(srv.node_records, NodeRecorder) and srv.node_records.holder_only  # only as the leader
    assert isinstance(fn.recorder, NodeRecorder) and not fn.recorder.holder_only
    # the function's answers go with its record; serve classifies in process: no replies to remember
    assert fn.recorder.answers is fn.answers and srv.node_records.answers is None


def test_a_reconcile_that_could_not_be_posted_is_sent_again_by_the_next_start(fake_api: FakeApiServer,
                                                                                kube: KubeClient) -> None:
    from kdesched_functions.classifier import ClassifierFunction

    class Down:
        def __call__(self, url: str, function: str, replies: list[Any]) -> None:
            raise RuntimeError("broker down")

    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    fake_api.add(node("n1"), node("n2"))
    assert ClassifierFunction(kube, "http://broker", Posted(), record_namespace="kdesched").seed()
    n1 = fake_api.get("Node", "n1")
    assert n1 is not None
    n1["spec"]["taints"] = [TAINT]  # while no classifier runs
    fake_api.update(n1)
    second = ClassifierFunction(kube, "http://broker", Down(), record_namespace="kdesched")
    assert second.seed()
    second.write_record(force=True)  # its records keep n1 as it was recorded: the change was not sent
    posted = Posted()
    third = ClassifierFunction(kube, "http://broker", posted, record_namespace="kdesched")
    assert third.seed() and posted.events == [(ev.TAINTS_CHANGED, "n1")]

"""Each function end to end: Flask test client, SDK-made CloudEvents, the fake API server behind."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings
from kdesched_functions import FUNCTIONS

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import MODES, ce_request, post, reply_event, reply_mode
from tests.reactor.policies import default_like_policy
from tests.reactor.reactors import STARTED

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
TAINTS = "RemovePodsViolatingNodeTaints"
APISERVER_SOURCE = "https://10.96.0.1:443"


def make_reactor(kube: KubeClient, **block: Any) -> Reactor:
    block = {"settleSeconds": 0.02, "leaseWaitSeconds": 0.1, **block}
    policy = default_like_policy(kdesched=block)
    r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="fn-test")
    STARTED.append(r)  # a braked run leaves a continuation timer: stopped after the test (tests/conftest.py)
    return r


def cluster(fake: FakeApiServer) -> None:
    fake.add(node_obj("n1", taints=[TAINT], labels={"team": "a"}), node_obj("n2", labels={"team": "b"}), node_obj("n3", labels={"team": "a"}))
    fake.add(pod_obj("intolerant", "n1", owner_name="web"),
             pod_obj("picky", "n2", owner_name="api", affinity={"nodeAffinity": {
                 "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                     {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}]}}}))


# --- classifier ----------------------------------------------------------------------------------


class Posted:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, list[Any]]] = []
        self.within: list[float | None] = []
        self.fail = fail

    def __call__(self, url: str, function: str, replies: list[Any], *, within: float | None = None) -> None:
        self.within.append(within)
        if self.fail:
            raise RuntimeError("broker down")
        self.calls.append((url, [r.type for r in replies]))


def node_change(fake: FakeApiServer, name: str, **kw: Any) -> dict[str, Any]:
    obj = fake.get("Node", name)
    assert obj is not None
    obj.update({k: v for k, v in kw.items() if k in ("spec", "status")})
    if "labels" in kw:
        obj["metadata"]["labels"] = kw["labels"]
    fake.update(obj)
    out = fake.get("Node", name)
    assert out is not None
    return out


@pytest.mark.parametrize("mode", MODES)
def test_classifier_replies_posts_extra_and_acks(fake_api: FakeApiServer, kube: KubeClient, mode: str) -> None:
    cluster(fake_api)
    posted = Posted()
    app = FUNCTIONS["classifier"].create_app(client=kube, broker_url="http://broker.local/ns/b", post=posted)
    c = app.test_client()
    assert c.get("/readyz").status_code == 200
    unchanged = fake_api.get("Node", "n2")
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, unchanged, mode, source=APISERVER_SOURCE))
    assert resp.status_code == 202 and resp.get_data() == b""
    changed = node_change(fake_api, "n2", spec={"taints": [TAINT]}, labels={"team": "c"})
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, changed, mode, id="e2", source=APISERVER_SOURCE))
    assert resp.status_code == 200 and reply_mode(resp) == mode
    reply = reply_event(resp)
    assert reply.get_type() == ev.TAINTS_CHANGED and reply.get_source() == "/kdesched/classifier"
    assert reply.get_data()["node"] == "n2" and reply.get_subject() == "n2"
    assert posted.calls == [("http://broker.local/ns/b", [ev.LABELS_CHANGED])]
    assert posted.within == [20.0]  # the extra events, posted before the reply: within the classifier's deadline
    # a redelivery of the same event (its reply was lost on the way to the broker): the same reply, same
    # id, and the extra event is not posted twice
    again = post(c, *ce_request(ev.APISERVER_UPDATE, changed, mode, id="e2", source=APISERVER_SOURCE))
    assert again.status_code == 200 and reply_event(again).get_type() == ev.TAINTS_CHANGED
    assert reply_event(again).get_id() == reply.get_id()
    assert posted.calls == [("http://broker.local/ns/b", [ev.LABELS_CHANGED])]
    # another event carrying the same node state (a heartbeat): nothing
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, changed, mode, id="e2-heartbeat", source=APISERVER_SOURCE))
    assert resp.status_code == 202
    # delete drops the digest, a re-add with a new uid is a new node
    assert post(c, *ce_request(ev.APISERVER_DELETE, changed, mode, id="e3")).status_code == 202
    readd = {**changed, "metadata": {**changed["metadata"], "uid": "new-uid", "resourceVersion": "999"}}
    resp = post(c, *ce_request(ev.APISERVER_ADD, readd, mode, id="e4"))
    assert resp.status_code == 200 and reply_event(resp).get_type() == ev.NODE_ADDED


def test_classifier_does_not_replay_a_reply_for_a_node_deleted_since(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The answer to a node's add is remembered for redeliveries only while that incarnation lives:
    the add delivered again after the node was deleted emits nothing (it would bring back a dead node)."""
    cluster(fake_api)
    c = FUNCTIONS["classifier"].create_app(client=kube, broker_url="").test_client()
    new = node_obj("n4")
    new["metadata"]["uid"] = "uid-n4"
    resp = post(c, *ce_request(ev.APISERVER_ADD, new, id="add-n4", source=APISERVER_SOURCE))
    assert resp.status_code == 200 and reply_event(resp).get_type() == ev.NODE_ADDED
    again = post(c, *ce_request(ev.APISERVER_ADD, new, id="add-n4", source=APISERVER_SOURCE))
    assert again.status_code == 200 and reply_event(again).get_id() == reply_event(resp).get_id()
    assert post(c, *ce_request(ev.APISERVER_DELETE, new, id="del-n4", source=APISERVER_SOURCE)).status_code == 202
    late = post(c, *ce_request(ev.APISERVER_ADD, new, id="add-n4", source=APISERVER_SOURCE))
    assert late.status_code == 202 and late.get_data() == b""
    assert c.get("/readyz").get_json()["reason"] == "node cache seeded (3 nodes)"


def test_classifier_broker_failure_is_503_and_not_committed(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    c = FUNCTIONS["classifier"].create_app(client=kube, broker_url="http://broker", post=Posted(fail=True)).test_client()
    changed = node_change(fake_api, "n2", spec={"taints": [TAINT]}, labels={"team": "c"})
    assert post(c, *ce_request(ev.APISERVER_UPDATE, changed)).status_code == 503
    fn = c.application.config["KDESCHED_CLASSIFIER"]
    fn.post = Posted()
    # the retry of the same delivery emits the events again: the cache was not committed
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, changed))
    assert resp.status_code == 200 and reply_event(resp).get_type() == ev.TAINTS_CHANGED
    assert fn.post.calls == [("http://broker", [ev.LABELS_CHANGED])]


def test_classifier_without_broker_url_cannot_emit_two_events(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    c = FUNCTIONS["classifier"].create_app(client=kube, broker_url="").test_client()
    changed = node_change(fake_api, "n2", spec={"taints": [TAINT]}, labels={"team": "c"})
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, changed))
    assert resp.status_code == 500 and "K_SINK" in resp.get_json()["error"]


def test_classifier_unseeded_is_503_until_the_list_works(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    unreachable = KubeClient.for_host("http://127.0.0.1:9")
    app = FUNCTIONS["classifier"].create_app(client=unreachable, broker_url="")
    c = app.test_client()
    fn = app.config["KDESCHED_CLASSIFIER"]
    assert not fn.classifier.seeded and c.get("/readyz").status_code == 503
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, fake_api.get("Node", "n1")))
    assert resp.status_code == 503
    fn.client = kube  # the API server is back: the next delivery seeds, then classifies
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, fake_api.get("Node", "n1")))
    assert resp.status_code == 202 and c.get("/readyz").status_code == 200


@pytest.mark.parametrize("data,field", [({"kind": "Pod", "metadata": {"name": "x"}}, "data.kind"),
                                        ({"metadata": {}}, "data.metadata.name")])
def test_classifier_bad_object_is_400(fake_api: FakeApiServer, kube: KubeClient, data: Any, field: str) -> None:
    c = FUNCTIONS["classifier"].create_app(client=kube, broker_url="").test_client()
    resp = post(c, *ce_request(ev.APISERVER_UPDATE, data))
    assert resp.status_code == 400 and resp.get_json()["field"] == field


def test_classifier_rejects_other_types(fake_api: FakeApiServer, kube: KubeClient) -> None:
    c = FUNCTIONS["classifier"].create_app(client=kube, broker_url="").test_client()
    resp = post(c, *ce_request(ev.NODE_READY, {"node": "n1"}))
    assert resp.status_code == 400 and resp.get_json()["field"] == "type"


# --- node functions --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_taints_function_evicts_and_reports(fake_api: FakeApiServer, kube: KubeClient, mode: str) -> None:
    cluster(fake_api)
    c = FUNCTIONS["taints"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.TAINTS_CHANGED, {"node": "n1", "before": {"taints": []},
                                                   "after": {"taints": [TAINT]}}, mode, id="t1"))
    assert resp.status_code == 200 and reply_mode(resp) == mode
    reply = reply_event(resp)
    assert reply.get_type() == ev.RUN_COMPLETED and reply.get_source() == "/kdesched/taints"
    data = reply.get_data()
    assert data["trigger"] == {"type": ev.TAINTS_CHANGED, "id": "t1", "node": "n1", "source": "/test"}
    assert data["strategies"] == ["RemovePodsViolatingNodeTaints"] and data["dryRun"] is False
    assert [(e["pod"], e["namespace"], e["node"], e["strategy"], e["result"]) for e in data["evictions"]] == [
        ("intolerant", "default", "n1", "RemovePodsViolatingNodeTaints", "evicted")]
    assert data["evictions"][0]["reason"] and data["coalesced"] == 1 and "durationSeconds" in data
    assert fake_api.get("Pod", "intolerant", "default") is None


def test_taints_function_with_safety_off_is_braked_when_half_the_nodes_are_not_ready(fake_api: FakeApiServer,
                                                                                      kube: KubeClient) -> None:
    """The function reads only its node's pods (and, without the cache, a few Nodes); the health brake
    still judges every Node (tests/reactor/test_controls.py has the reads)."""
    cluster(fake_api)
    fake_api.add(*(node_obj(f"down{i}", ready=False) for i in range(3)))  # 3 of 6 nodes NotReady
    c = FUNCTIONS["taints"].create_app(reactor=make_reactor(kube, safety={"enabled": False})).test_client()
    resp = post(c, *ce_request(ev.TAINTS_CHANGED, {"node": "n1", "before": {"taints": []},
                                                   "after": {"taints": [TAINT]}}, id="t1"))
    assert resp.status_code == 200
    data = reply_event(resp).get_data()
    assert [(e["pod"], e["result"], e.get("cause")) for e in data["evictions"]] == [
        ("intolerant", "deferred", "health-brake")]
    assert fake_api.get("Pod", "intolerant", "default") is not None


def test_affinity_function_runs_node_affinity_only_without_topology_change(fake_api: FakeApiServer,
                                                                          kube: KubeClient) -> None:
    cluster(fake_api)
    c = FUNCTIONS["affinity"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.LABELS_CHANGED, {"node": "n2", "before": {"team": "a"}, "after": {"team": "b"}}))
    data = reply_event(resp).get_data()
    assert resp.status_code == 200 and data["strategies"] == ["RemovePodsViolatingNodeAffinity"]
    assert [e["pod"] for e in data["evictions"]] == ["picky"]
    resp = post(c, *ce_request(ev.LABELS_CHANGED, {"node": "n3", "before": {"topology.kubernetes.io/zone": "a"},
                                                   "after": {"topology.kubernetes.io/zone": "b"}}, id="z"))
    data = reply_event(resp).get_data()
    assert "RemovePodsViolatingTopologySpreadConstraint" in data["strategies"]


@pytest.mark.parametrize("data,field", [({"node": "Bad Name"}, "data.node"), ({}, "data.node"), ("n1", "data"),
                                        ({"node": "n1", "before": []}, "data.before")])
def test_node_functions_bad_data(fake_api: FakeApiServer, kube: KubeClient, data: Any, field: str) -> None:
    c = FUNCTIONS["taints"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.TAINTS_CHANGED, data))
    assert resp.status_code == 400 and resp.get_json()["field"] == field


def test_rebalance_waits_for_ready_and_rejects_other_types(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    fake_api.add(node_obj("fresh", ready=False))
    c = FUNCTIONS["rebalance"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.NODE_ADDED, {"node": "fresh"}))
    data = reply_event(resp).get_data()
    assert resp.status_code == 200 and "waiting for node.ready" in data["notes"][0] and data["evictions"] == []
    resp = post(c, *ce_request(ev.TAINTS_CHANGED, {"node": "fresh"}))
    assert resp.status_code == 400 and resp.get_json()["field"] == "type"
    resp = post(c, *ce_request(ev.NODE_READY, {"node": "n3"}))
    assert resp.status_code == 200 and reply_event(resp).get_data()["strategies"] == ["LowNodeUtilization",
                                                                                       "RemoveDuplicates"]


def test_rebalance_api_unreachable_is_503(kube: KubeClient, fake_api: FakeApiServer) -> None:
    r = make_reactor(KubeClient.for_host("http://127.0.0.1:9"))
    c = FUNCTIONS["rebalance"].create_app(reactor=r).test_client()
    resp = post(c, *ce_request(ev.NODE_READY, {"node": "n3"}))
    assert resp.status_code == 503


# --- manual --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_manual_dry_run_and_ping(fake_api: FakeApiServer, kube: KubeClient, mode: str) -> None:
    cluster(fake_api)
    c = FUNCTIONS["manual"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.RUN_REQUESTED, {"strategies": ["RemovePodsViolatingNodeTaints"], "dryRun": True},
                               mode))
    data = reply_event(resp).get_data()
    assert resp.status_code == 200 and data["dryRun"] is True and data["strategies"] == ["RemovePodsViolatingNodeTaints"]
    assert [e["result"] for e in data["evictions"]] == ["dry-run"]
    resp = post(c, *ce_request(ev.PING, None, mode, source="/apis/v1/namespaces/kdesched/pingsources/sweep"))
    data = reply_event(resp).get_data()
    assert resp.status_code == 200 and data["trigger"]["type"] == ev.PING
    assert {e["pod"] for e in data["evictions"]} == {"intolerant", "picky"}


@pytest.mark.parametrize("data,field,needle", [
    ({"strategies": ["NoSuchStrategy"]}, "data.strategies", "'NoSuchStrategy'"),
    ({"dryRun": "true"}, "data.dryRun", "true or false"),
    ({"nodes": ["UPPER"]}, "data.nodes", "UPPER"),
    ({"strategies": ["HighNodeUtilization"]}, "data.strategies", "HighNodeUtilization"),
    # nodes scope Deschedule strategies; a Balance one would weigh and evict across every node
    ({"nodes": ["n2"]}, "data.nodes", "LowNodeUtilization"),
    ({"nodes": ["n2"], "strategies": ["RemoveDuplicates"]}, "data.nodes", "RemoveDuplicates is a Balance strategy"),
])
def test_manual_bad_requests(fake_api: FakeApiServer, kube: KubeClient, data: Any, field: str, needle: str) -> None:
    c = FUNCTIONS["manual"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.RUN_REQUESTED, data))
    assert resp.status_code == 400 and resp.get_json()["field"] == field and needle in resp.get_json()["error"]
    assert evictions(fake_api) == []


def test_manual_nodes_scope_deschedule_strategies(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """data.nodes with Deschedule strategies only: those nodes' pods, nobody else's."""
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    fake_api.add(node_obj("n1", taints=[taint]), node_obj("n2", taints=[taint]), node_obj("n3"), node_obj("n4"),
                 pod_obj("on-n1", "n1", owner_name="a"), pod_obj("on-n2", "n2", owner_name="b"))
    c = FUNCTIONS["manual"].create_app(reactor=make_reactor(kube)).test_client()
    resp = post(c, *ce_request(ev.RUN_REQUESTED, {"nodes": ["n2"], "strategies": ["RemovePodsViolatingNodeTaints"]}))
    assert resp.status_code == 200
    assert [e["pod"] for e in reply_event(resp).get_data()["evictions"]] == ["on-n2"]


@pytest.mark.parametrize("mode", MODES)
def test_a_redelivered_run_request_gets_the_first_runs_report_and_runs_nothing(fake_api: FakeApiServer,
                                                                              kube: KubeClient, mode: str) -> None:
    """source + id make a CloudEvent unique: the same run.requested again (a reply lost on the way
    back) is answered with the run it already made, not run a second time."""
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    fake_api.add(node_obj("n1", taints=[taint]), node_obj("n2"), node_obj("n3"),
                 pod_obj("on-n1", "n1", owner_name="a"))
    c = FUNCTIONS["manual"].create_app(reactor=make_reactor(kube)).test_client()
    data = {"strategies": ["RemovePodsViolatingNodeTaints"]}
    first = reply_event(post(c, *ce_request(ev.RUN_REQUESTED, data, mode, id="ci-42", source="/ci")))
    assert [e["pod"] for e in first.get_data()["evictions"]] == ["on-n1"] and len(evictions(fake_api)) == 1
    fake_api.add(pod_obj("later", "n1", owner_name="b"))  # what a second run would evict
    again = reply_event(post(c, *ce_request(ev.RUN_REQUESTED, data, mode, id="ci-42", source="/ci")))
    assert again.get_id() == first.get_id() and again.get_data()["redelivered"] is True
    assert again.get_data()["evictions"] == first.get_data()["evictions"]
    assert len(evictions(fake_api)) == 1  # nothing ran
    # another id, or the same id from another source, is another request
    other = reply_event(post(c, *ce_request(ev.RUN_REQUESTED, data, mode, id="ci-42", source="/elsewhere")))
    assert [e["pod"] for e in other.get_data()["evictions"]] == ["later"] and "redelivered" not in other.get_data()


def test_a_used_id_with_other_data_is_refused_not_answered_with_another_runs_report(fake_api: FakeApiServer,
                                                                                    kube: KubeClient) -> None:
    """A dry run, then the live request under the same id (two requests in one second with an id made
    from the time): not a redelivery, since its data differs. A 400 naming id, never a 200 carrying
    the dry run's report while nothing was evicted."""
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    fake_api.add(node_obj("n1", taints=[taint]), node_obj("n2"), pod_obj("on-n1", "n1", owner_name="a"))
    c = FUNCTIONS["manual"].create_app(reactor=make_reactor(kube)).test_client()
    dry = post(c, *ce_request(ev.RUN_REQUESTED, {"strategies": [TAINTS], "dryRun": True}, id="manual-1", source="/op"))
    assert dry.status_code == 200
    live = post(c, *ce_request(ev.RUN_REQUESTED, {"strategies": [TAINTS]}, id="manual-1", source="/op"))
    assert live.status_code == 400 and live.get_json()["field"] == "id"
    assert "with other data" in live.get_json()["error"] and evictions(fake_api) == []


def test_a_redelivery_that_arrives_while_the_first_delivery_runs_gets_its_report(fake_api: FakeApiServer,
                                                                                 kube: KubeClient) -> None:
    """The broker re-sends while the first delivery is still running (a reply timeout): the second
    waits for the balance lock, then finds the first run's report instead of running again."""
    import threading
    from types import SimpleNamespace

    from kdesched_functions.manual import create_serve_app

    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    fake_api.add(node_obj("n1", taints=[taint]), node_obj("n2"), node_obj("n3"), pod_obj("on-n1", "n1", owner_name="a"))
    reactor = make_reactor(kube, leaseWaitSeconds=30)
    real, started, release, calls = reactor._decide_and_execute, threading.Event(), threading.Event(), []

    def held(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        out = real(*a, **kw)
        fake_api.add(pod_obj("later", "n1", owner_name="b"))  # what a second run would evict
        started.set()
        release.wait(30)
        return out

    reactor._decide_and_execute = held  # type: ignore[method-assign]
    app = create_serve_app(SimpleNamespace(reactor=reactor, ready=lambda: (True, "ready"), http_concurrency=10))
    replies: dict[str, Any] = {}

    def deliver(name: str) -> None:
        resp = post(app.test_client(), *ce_request(ev.RUN_REQUESTED, {"strategies": [TAINTS]}, id="ci-42", source="/ci"))
        replies[name] = resp

    first = threading.Thread(target=deliver, args=("first",))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=deliver, args=("second",))
    second.start()
    second.join(0.3)  # it waits for the balance lock the first delivery's run holds
    release.set()
    first.join(30)
    second.join(30)
    assert replies["first"].status_code == replies["second"].status_code == 200
    assert len(calls) == 1 and [p.split("/")[-2] for p in evictions(fake_api)] == ["on-n1"]
    assert reply_event(replies["second"]).get_data()["redelivered"] is True
    assert reply_event(replies["second"]).get_id() == reply_event(replies["first"]).get_id()


# --- deadletter ------------------------------------------------------------------------------------


def test_deadletter_logs_decoded_errors_and_acks(caplog: pytest.LogCaptureFixture) -> None:
    c = FUNCTIONS["deadletter"].create_app().test_client()
    with caplog.at_level(logging.INFO, logger="kdesched.functions.deadletter"):
        resp = post(c, *ce_request(ev.TAINTS_CHANGED, {"node": "n1"}, extensions={
            "knativeerrorcode": "500", "knativeerrordest": "http://taints", "knativeerrordata": "Ym9vbQ=="}))
        assert resp.status_code == 202 and resp.get_data() == b""
        resp = post(c, *ce_request(ev.RUN_COMPLETED, {"trigger": {"type": "x"}, "evictions": [
            {"pod": "p", "namespace": "d", "node": "n", "strategy": "S", "result": "evicted"}]}, "structured"))
        assert resp.status_code == 202
    text = caplog.text
    assert '"knativeerrordata": "boom"' in text and "audit:" in text and '"pod": "p"' in text
    resp = post(c, *ce_request(ev.RUN_COMPLETED, None, drop="id"))
    assert resp.status_code == 400


# --- replies: the same id on redelivery, no media type on an ack ---------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_redelivered_event_gets_the_same_run_completed_id(fake_api: FakeApiServer, kube: KubeClient,
                                                            mode: str) -> None:
    cluster(fake_api)
    taints = FUNCTIONS["taints"].create_app(reactor=make_reactor(kube)).test_client()
    event = ce_request(ev.TAINTS_CHANGED, {"node": "n1"}, mode, id="t-1", source="/broker")
    first, again = reply_event(post(taints, *event)), reply_event(post(taints, *event))
    assert first.get_type() == again.get_type() == ev.RUN_COMPLETED
    assert first.get_id() == again.get_id()  # one audit event, however often it is delivered
    assert first.get_data()["evictions"] and not again.get_data()["evictions"]  # the pod went the first time
    other = reply_event(post(taints, *ce_request(ev.TAINTS_CHANGED, {"node": "n1"}, mode, id="t-2", source="/broker")))
    assert other.get_id() != first.get_id()
    manual = FUNCTIONS["manual"].create_app(reactor=make_reactor(kube)).test_client()
    request = ce_request(ev.RUN_REQUESTED, {"dryRun": True}, mode, id="r-1", source="/ci")
    assert reply_event(post(manual, *request)).get_id() == reply_event(post(manual, *request)).get_id()


def test_acks_carry_no_content_type(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    deadletter = FUNCTIONS["deadletter"].create_app().test_client()
    resp = post(deadletter, *ce_request(ev.RUN_COMPLETED, {"evictions": []}))
    assert resp.status_code == 202 and resp.get_data() == b"" and "Content-Type" not in resp.headers
    classifier = FUNCTIONS["classifier"].create_app(client=kube, broker_url="").test_client()
    resp = post(classifier, *ce_request(ev.APISERVER_UPDATE, fake_api.get("Node", "n2"), source=APISERVER_SOURCE))
    assert resp.status_code == 202 and resp.get_data() == b"" and "Content-Type" not in resp.headers


# --- issue 25: refused at the edge, 400 naming the field, nothing run ----------------------------------


def evictions(fake: FakeApiServer) -> list[str]:
    return [r.path for r in fake.requests("POST") if r.path.endswith("/eviction")]


def utf16(mode: str, etype: str, data: Any) -> tuple[dict[str, str], bytes]:
    """A CloudEvent whose JSON is UTF-16: the data (binary mode) or the whole envelope (structured)."""
    headers, body = ce_request(etype, data, mode)
    return headers, body.decode("utf-8").encode("utf-16")


BAD_EVENTS = [
    # (function, type, data, field in binary mode, field in structured mode)
    ("taints", ev.TAINTS_CHANGED, {"node": "n1\n"}, "data.node", "data.node"),
    ("rebalance", ev.NODE_READY, {"node": "n3\n"}, "data.node", "data.node"),
    ("manual", ev.RUN_REQUESTED, {"strategies": []}, "data.strategies", "data.strategies"),
    ("manual", ev.RUN_REQUESTED, {"nodes": []}, "data.nodes", "data.nodes"),
    ("manual", ev.RUN_REQUESTED, {"nodes": ["n1\n"]}, "data.nodes", "data.nodes"),
    ("taints", ev.TAINTS_CHANGED, "utf-16", "data", "body"),
    ("manual", ev.RUN_REQUESTED, "utf-16", "data", "body"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,etype,data,binary_field,structured_field", BAD_EVENTS,
                         ids=[f"{n}-{f}-{i}" for i, (n, _, _, f, _) in enumerate(BAD_EVENTS)])
def test_bad_events_are_400_and_evict_nothing(fake_api: FakeApiServer, kube: KubeClient, mode: str, name: str,
                                              etype: str, data: Any, binary_field: str,
                                              structured_field: str) -> None:
    cluster(fake_api)  # n1 is tainted and its pod intolerant: a run that went ahead would evict it
    client = FUNCTIONS[name].create_app(reactor=make_reactor(kube)).test_client()
    fake_api.clear_journal()
    if data == "utf-16":
        resp = post(client, *utf16(mode, etype, {"node": "n1"} if name == "taints" else {"dryRun": False}))
    else:
        resp = post(client, *ce_request(etype, data, mode))
    assert resp.status_code == 400
    assert resp.get_json()["field"] == (binary_field if mode == "binary" else structured_field)
    assert evictions(fake_api) == [] and fake_api.requests() == []  # not even a read
    assert fake_api.get("Pod", "intolerant", "default") is not None
    # the same event, well formed, does evict: the refusal above is what kept the pod
    if name == "taints":
        assert post(client, *ce_request(etype, {"node": "n1"}, mode)).status_code == 200
        assert evictions(fake_api) and fake_api.get("Pod", "intolerant", "default") is None

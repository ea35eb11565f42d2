"""A burst of node changes must not push the first answers out of the journal while their
redeliveries are still due. Before: the count bound (256) was reached inside the retry window by an
ordinary burst (a zone of 300 nodes turning unreachable gets the node controller's
``unreachable:NoSchedule`` taint within seconds; a label rolled out to every node). The reply to
one of the first events is lost; its redelivery, a few seconds later, finds its answer already
trimmed and the cache already past the change: 202, and the change is lost (issue 31 again)."""

from __future__ import annotations

import time
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched_functions import FUNCTIONS

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request, post, reply_event

NS = "kdesched"
SOURCE = "https://10.96.0.1:443"
TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}
NODES = 300


def test_a_redelivery_inside_the_retry_window_of_a_300_node_burst_gets_its_reply(fake_api: FakeApiServer,
                                                                                  kube: KubeClient) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake_api.add(*[node_obj(f"n{i:03d}") for i in range(NODES)])
    posted: list[Any] = []
    app = FUNCTIONS["classifier"].create_app(client=kube, broker_url="http://broker.local",
                                             post=lambda u, f, r, **k: posted.extend(r), record_namespace=NS)
    fn = app.config["KDESCHED_CLASSIFIER"]
    deadline = time.monotonic() + 10
    while fn.recorder.recorded is None and time.monotonic() < deadline:
        time.sleep(0.01)
    client = app.test_client()

    started = time.monotonic()
    first_reply = None
    first_obj = None
    for i in range(NODES):
        obj = fake_api.get("Node", f"n{i:03d}")
        obj["spec"]["taints"] = [TAINT]
        fake_api.update(obj)
        obj = fake_api.get("Node", f"n{i:03d}")
        resp = post(client, *ce_request(ev.APISERVER_UPDATE, obj, id=f"upd-{i}", source=SOURCE))
        assert resp.status_code == 200
        if i == 0:
            first_reply, first_obj = reply_event(resp), obj  # ... lost on its way to the broker
    burst = time.monotonic() - started

    # the dispatcher redelivers the first event (its retries span ~16 s: knative/base/triggers.yaml)
    again = post(client, *ce_request(ev.APISERVER_UPDATE, first_obj, id="upd-0", source=SOURCE))
    assert again.status_code == 200, (
        f"the redelivery of a node change whose reply was lost, {burst:.1f} s later (within the Trigger's retry "
        f"window), was answered {again.status_code}: its answer was trimmed by the {len(fn.answers)}-answer bound; "
        f"the change of n000 is lost")
    assert reply_event(again).get_id() == first_reply.get_id()

"""A late (redelivered) update of a node deleted just before the classifier restarted.

The delete was seen by the old process (its tombstone lives only in that process's memory). The
restarted classifier seeds from a LIST without the node; the dispatcher's retry of an earlier update
of that node (Knative retries a classifier delivery for ~16 s) then reads as a brand-new node:
``node.added`` for a node that no longer exists, and a ghost entry in the cache (and in the node
record) until the next re-list."""

from __future__ import annotations

import time

from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched_functions import FUNCTIONS

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request, post

NS = "kdesched"
SOURCE = "https://10.96.0.1:443"


def start(kube: KubeClient):
    app = FUNCTIONS["classifier"].create_app(client=kube, broker_url="http://broker.local", post=lambda *a, **k: None,
                                             record_namespace=NS)
    fn = app.config["KDESCHED_CLASSIFIER"]
    deadline = time.monotonic() + 10
    while fn.recorder.recorded is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return app.test_client(), fn


def test_a_late_update_of_a_node_deleted_before_a_restart_is_not_a_new_node(fake_api: FakeApiServer,
                                                                              kube: KubeClient) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake_api.add(node_obj("n1"), node_obj("gone"))
    first, _ = start(kube)
    # an update of "gone" (labels), its first delivery fails (the reply is lost: the dispatcher retries)
    obj = fake_api.get("Node", "gone")
    obj["metadata"]["labels"] = {"pool": "spot"}
    fake_api.update(obj)
    late = fake_api.get("Node", "gone")
    assert post(first, *ce_request(ev.APISERVER_UPDATE, late, id="upd", source=SOURCE)).status_code == 200
    # the node is deleted (a spot reclaim); the old classifier sees the delete
    fake_api.delete("Node", "gone")
    assert post(first, *ce_request(ev.APISERVER_DELETE, late, id="del", source=SOURCE)).status_code == 202
    # the classifier restarts; the dispatcher's retry of the update arrives
    restarted, fn = start(kube)
    resp = post(restarted, *ce_request(ev.APISERVER_UPDATE, late, id="upd", source=SOURCE))  # same id: a retry
    assert resp.status_code == 202, (
        f"a late update of a deleted node was answered {resp.status_code} "
        f"{resp.headers.get('ce-type')}: a node.added for a node that no longer exists")
    assert fn.classifier.get("gone") is None, "a ghost node is in the cache (and the node record)"

"""The classifier function's start-up reconcile vs. record writes made while it sends.

A classifier restarts; while it was down node n1 was tainted. Its start-up reconcile (a background
thread) computes the difference and starts posting it to the broker, which is slow. Meanwhile an
ordinary event (about another node) is handled, and its handler writes the node record from the
cache, which already shows n1 tainted. If the process dies before the broker post returns (a
rollout's SIGTERM, an OOM kill, the post never succeeding), the next start's reconcile finds the
record already equal to the nodes: the taint change was never sent to anyone. Now the reconciled
nodes are held at their recorded marks until the send returns (NodeRecorder.send_held).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched_functions import FUNCTIONS

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request, post

NS = "kdesched"
SOURCE = "https://10.96.0.1:443"
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


class Broker:
    """Records posts; with ``hang`` set, a post blocks until released (a slow/unreachable broker)."""

    def __init__(self, hang: bool = False) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.hang = hang
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, url: str, function: str, replies: list[Any], *, within: float | None = None) -> None:
        if self.hang:
            self.entered.set()
            self.release.wait(20)
            raise RuntimeError("the process died during this post")
        self.events += [(r.type, r.subject, r.id) for r in replies]


def app_for(kube: KubeClient, broker: Broker) -> Any:
    return FUNCTIONS["classifier"].create_app(client=kube, broker_url="http://broker.local", post=broker,
                                              record_namespace=NS)


def wait_recorded(app: Any) -> None:
    fn = app.config["KDESCHED_CLASSIFIER"]
    deadline = time.monotonic() + 10
    while fn.recorder.recorded is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fn.recorder.recorded is not None


@pytest.mark.parametrize("other_event", [False, True], ids=["control-no-other-event", "other-event-handled"])
def test_a_change_missed_while_down_survives_a_crash_during_the_reconcile_send(fake_api: FakeApiServer,
                                                                               kube: KubeClient,
                                                                               other_event: bool) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake_api.add(node_obj("n1"), node_obj("n2", labels={"team": "b"}))
    first = app_for(kube, Broker())
    wait_recorded(first)  # the record now holds n1 untainted

    # the classifier is down; n1 is tainted meanwhile (its ApiServerSource event dead-lettered)
    n1 = fake_api.get("Node", "n1")
    n1["spec"]["taints"] = [TAINT]
    fake_api.update(n1)

    # it restarts; its reconcile posts "n1 taints.changed" to a broker that hangs
    slow = Broker(hang=True)
    second = app_for(kube, slow)
    assert slow.entered.wait(10), "the start-up reconcile should be posting n1's change"
    if other_event:  # an ordinary event about n2 arrives meanwhile and is handled (a label change)
        n2 = fake_api.get("Node", "n2")
        n2["metadata"]["labels"] = {"team": "c"}
        fake_api.update(n2)
        resp = post(second.test_client(), *ce_request(ev.APISERVER_UPDATE, fake_api.get("Node", "n2"),
                                                      id="n2-upd", source=SOURCE))
        assert resp.status_code == 200
    # ... and the process dies before the reconcile's post returned (it never delivered n1's change)

    try:
        third_broker = Broker()
        third = app_for(kube, third_broker)
        wait_recorded(third)
        sent = [(t, n) for t, n, _ in third_broker.events]
        assert (ev.TAINTS_CHANGED, "n1") in sent, (
            f"n1's taint change, made while the classifier was down and never delivered, is lost: the restarted "
            f"classifier's reconcile sent {sent}")
    finally:
        slow.release.set()

"""A change found by the classifier function's periodic re-LIST whose post to the broker fails
is held in the node record at the node's previous state and posted again: by the next re-sync of
the same process, or by the next start's reconcile if the process dies first. Before, it was
committed to the cache and to the record anyway, and nothing ever sent it again."""

from __future__ import annotations

from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched_functions.classifier import ClassifierFunction

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer

NS = "kdesched"
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


class Broker:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.down = False

    def __call__(self, url: str, function: str, replies: list[Any]) -> None:
        if self.down:
            raise RuntimeError("broker unavailable (503)")
        self.events += [(r.type, r.subject) for r in replies]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def failed_resync(fake_api: FakeApiServer, kube: KubeClient) -> tuple[ClassifierFunction, Broker, Clock]:
    """A classifier whose periodic re-LIST found n1 tainted (made while no event reached it:
    ApiServerSource restarting, say) while the broker was failing."""
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake_api.add(node_obj("n1"), node_obj("n2"))
    broker, clock = Broker(), Clock()
    fn = ClassifierFunction(kube, "http://broker.local", broker, resync_seconds=300, clock=clock, record_namespace=NS)
    assert fn.seed()
    assert fn.recorder is not None and fn.recorder.recorded is not None
    n1 = fake_api.get("Node", "n1")
    n1["spec"]["taints"] = [TAINT]
    fake_api.update(n1)
    clock.now += 301
    broker.down = True
    fn.resync_if_due()
    assert broker.events == []
    broker.down = False
    return fn, broker, clock


def test_a_resync_change_whose_post_failed_is_posted_by_the_next_resync_and_then_let_go(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fn, broker, clock = failed_resync(fake_api, kube)
    clock.now += 301
    fn.resync_if_due()
    assert broker.events == [(ev.TAINTS_CHANGED, "n1")], (
        f"n1's taint change was found by the re-sync but its post failed; it was not sent again: {broker.events}")
    # once sent, it is let go: neither a later re-sync nor a restart sends it a second time
    clock.now += 301
    fn.resync_if_due()
    assert broker.events == [(ev.TAINTS_CHANGED, "n1")]
    assert restarted_sends(kube, clock) == []


def test_a_resync_change_whose_post_failed_is_posted_by_the_next_start(fake_api: FakeApiServer,
                                                                         kube: KubeClient) -> None:
    fn, _, clock = failed_resync(fake_api, kube)
    fn.write_record(force=True)  # whatever this process writes before it dies keeps n1 as it was
    assert (ev.TAINTS_CHANGED, "n1") in restarted_sends(kube, clock)


def restarted_sends(kube: KubeClient, clock: Clock) -> list[tuple[str, str]]:
    """What a classifier started now sends in its start-up reconcile."""
    broker = Broker()
    restarted = ClassifierFunction(kube, "http://broker.local", broker, resync_seconds=300, clock=clock,
                                   record_namespace=NS)
    assert restarted.seed()
    return broker.events

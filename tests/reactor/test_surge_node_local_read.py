"""A surge-first move begun by a node's run that read only that node's pods (no watch cache: the
node-local read) is judged on the workload's pods, not the node's share of them
(kdesched.reactor.run.surge, Surges.choose with ``complete=False``).

Before, the candidate's siblings were the snapshot's pods of the workload: with a node-local read,
only the pods on the event's node. So the move's ledger record said the workload had the node's
Ready pods (1 of 3 here): the count its move settles back to, which a later settle of the
workload's held pods (they go on behind the move) takes as "back at its Ready count" while a
replacement is still not Ready; and the rollout check (a pod of another template) and a PDB's Ready
count without status saw the node's pods alone. Now each candidate Deployment's pods are listed
first (one LIST by its selector, the Deployment's own pods kept); a workload whose pods cannot be
listed does not move surge-first from such a run."""

from __future__ import annotations

from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Unavailable
from kdesched.model.records import Pod

from tests.builders import pdb_obj, pod, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.test_health_brake_surge_settle import cluster, taint_event
from tests.reactor.test_surge import KEY, READY, StubClient, surges

LABELS = {"app": "web", "pod-template-hash": "abc"}


class Listing(StubClient):
    """The owners' stub, listing the workload's pods by its selector (``None``: the LIST fails)."""

    def __init__(self, replicas: int, listed: list[Pod] | None) -> None:
        super().__init__(replicas, generation=6)
        self.listed = listed

    def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
        self.calls.append(("list", label_selector))
        if self.listed is None:
            raise Unavailable("connection refused (scripted)")
        return self.listed


def three_replicas(fake_api: FakeApiServer, kube: KubeClient, extra: list[dict[str, Any]],
                   listed: list[Pod] | None) -> tuple[Any, Listing]:
    """web: a-web-1 on node-a (tainted, the event's), a-web-2 on spare-1, a-web-3 on spare-2, Ready; a
    PDB that allows no disruption: a-web-1 is a surge-first candidate of node-a's (node-local) run."""
    pods = [pod_obj("a-web-1", "node-a", owner_name="web-abc", labels=LABELS, conditions=READY),
            pod_obj("a-web-2", "spare-1", owner_name="web-abc", labels=LABELS, conditions=READY),
            pod_obj("a-web-3", "spare-2", owner_name="web-abc", labels=LABELS, conditions=READY), *extra]
    reactor = cluster(fake_api, kube, 0, *pods, pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    client = Listing(3, listed)
    reactor.execution.surges = surges(client)
    return reactor, client


def web_pods(*extra: Pod) -> list[Pod]:
    return [pod("a-web-1", "node-a", owner_name="web-abc", labels=LABELS, conditions=READY),
            pod("a-web-2", "spare-1", owner_name="web-abc", labels=LABELS, conditions=READY),
            pod("a-web-3", "spare-2", owner_name="web-abc", labels=LABELS, conditions=READY), *extra]


def test_the_move_records_the_workloads_ready_count_not_the_nodes(fake_api: FakeApiServer, kube: KubeClient) -> None:
    reactor, client = three_replicas(fake_api, kube, [], web_pods())
    out = taint_event(reactor)
    assert any(n.startswith("pods read: node node-a") for n in out["notes"]), out["notes"]  # the node-local read
    assert [c for c in client.calls if c[0] == "scale"] == [("scale", (4, "41"))]  # begun: 3 -> 4
    mv = reactor.execution.store.read().ledger.moves[KEY]
    assert (mv.expected, mv.ready) == (3, 3), f"the move records {mv.ready} Ready of {mv.expected}: the node's share"
    assert ("list", "app=web") in client.calls


def test_a_pod_of_another_template_elsewhere_stops_the_move(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A pod of another ReplicaSet of web on spare-2 (a rollout the Deployment's status does not show
    yet): the rollout check sees it in the listed pods, not in the node's."""
    rolled = pod("a-web-4", "spare-2", owner_name="web-def", labels={"app": "web", "pod-template-hash": "def"},
                 conditions=READY)
    reactor, client = three_replicas(fake_api, kube, [], web_pods(rolled))
    out = taint_event(reactor)
    assert [c for c in client.calls if c[0] == "scale"] == []
    assert [f["reason"] for f in out["summary"]["surge"]["fallbacks"]] == ["rollout"]


def test_a_canary_listed_with_the_workload_is_not_its_pod(fake_api: FakeApiServer, kube: KubeClient) -> None:
    canary = pod("web-canary-1", "spare-2", owner_name="web-canary-zzz",
                 labels={"app": "web", "track": "canary", "pod-template-hash": "zzz"}, conditions=READY)
    reactor, client = three_replicas(fake_api, kube, [], web_pods(canary))
    taint_event(reactor)
    assert [c for c in client.calls if c[0] == "scale"] == [("scale", (4, "41"))]  # no "rollout"
    mv = reactor.execution.store.read().ledger.moves[KEY]
    assert (mv.expected, mv.ready) == (3, 3)


def test_pods_that_cannot_be_listed_keep_the_normal_rules(fake_api: FakeApiServer, kube: KubeClient) -> None:
    reactor, client = three_replicas(fake_api, kube, [], None)
    out = taint_event(reactor)
    assert [c for c in client.calls if c[0] == "scale"] == []
    assert [f["reason"] for f in out["summary"]["surge"]["fallbacks"]] == ["owner-unreadable"]
    assert not reactor.execution.store.read().ledger.surges

"""Redelivery and reordering through the real dispatcher, including a node deleted and re-created
under the same name with a late event of the old incarnation (issue 22).

A loopback proxy sits between the filter and the classifier (Trigger ``classifier`` points at it,
as its subscriber URI): it records every delivery and can deliver one twice (a redelivery after a
lost answer). A late event is a recorded delivery posted again to the Broker ingress with its
CloudEvent id (what the adapter's own retries or a redelivery produce), after newer events.

Why not make the dispatcher's retries late: on this data plane one adapter's events do not
overtake each other. The adapter sends synchronously in watch order and the ingress, channel and
filter answer only once the subscriber did, retries included; a classifier answering 503 holds
every later node event until its retries end (~16 s with the Trigger's 5 retries from 0.5 s), then
the event goes to the dead-letter sink and the rest follow. Late events come from elsewhere:
duplicates from the source, a second adapter during a rollout, redelivery by a persistent broker.

Everything else is the real data plane: the adapter's events, the classifier's replies re-entering
the Broker and reaching the other functions. Target: zero spurious or lost semantic events.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time

import pytest

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane
from tests.realk8s.serve_stories import set_labels, set_taints
from tests.realknative.dataplane import Delivery, KnativeDataPlane, Proxy

UPDATE = "dev.knative.apiserver.resource.update"
ADD = "dev.knative.apiserver.resource.add"
DELETE = "dev.knative.apiserver.resource.delete"
ADDED, LABELS, TAINTS = "dev.kdesched.node.added", "dev.kdesched.node.labels.changed", "dev.kdesched.node.taints.changed"
COUNTED = {"affinity": LABELS, "taints": TAINTS}


@pytest.fixture
def quiet_cluster(cluster: Cluster, knative: KnativeDataPlane) -> Cluster:
    """No scheduler or pods: these tests are about which semantic events come out, not evictions."""
    return cluster


def counts(knative: KnativeDataPlane) -> dict[str, float]:
    return {name: knative.functions[name].events(ce_type) for name, ce_type in COUNTED.items()}


def delta(knative: KnativeDataPlane, before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in counts(knative).items()}


def emitted(knative: KnativeDataPlane, node: str) -> list[str]:
    """The semantic events the classifier emitted for ``node`` (its log: one line per event; the
    probe nodes' node.added replies may still be on their way to rebalance, so its count is not used)."""
    prefix = f"node {node}: "
    return [m[len(prefix):] for m in knative.functions["classifier"].messages() if m.startswith(prefix)]


def dropped(knative: KnativeDataPlane, reason: str) -> float:
    code, text = knative.functions["classifier"].get("/metrics")
    assert code == 200
    for line in text.splitlines():
        if line.startswith(f'kdesched_classifier_dropped_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_late_events_of_a_deleted_node_after_its_re_creation(control_plane: ControlPlane, quiet_cluster: Cluster,
                                                             knative: KnativeDataPlane) -> None:
    """node-x (uid 1) is added, labelled and deleted, then re-created (uid 2). uid 1's add, update
    and delete arrive again, late (re-posted to the Broker with their ids). They must emit nothing
    and change nothing: uid 2 stays cached, its next label change is labels.changed (not
    node.added) and its own delete empties the cache."""
    proxy = Proxy([knative.functions["classifier"].url])
    knative.route("classifier", proxy)
    before = counts(knative)
    uid1 = quiet_cluster.node("node-x")["metadata"]["uid"]
    control_plane.wait_for(lambda: emitted(knative, "node-x") == [ADDED], 30, what="node.added of node-x")
    set_labels(quiet_cluster, "node-x", {"incarnation": "old"})
    control_plane.wait_for(lambda: delta(knative, before)["affinity"] == 1, 30, what="labels.changed of node-x")
    quiet_cluster.api.delete("/api/v1/nodes/node-x", grace=0)
    control_plane.wait_for(lambda: [d for d in proxy.deliveries(DELETE) if d.uid == uid1], 30, what="the delete")
    uid2 = quiet_cluster.node("node-x")["metadata"]["uid"]
    assert uid2 != uid1
    control_plane.wait_for(lambda: emitted(knative, "node-x") == [ADDED, LABELS, ADDED], 30,
                           what="node.added of the new node-x")
    old = [d for d in proxy.deliveries() if d.uid == uid1]
    assert [d.ce_type for d in old] == [ADD, UPDATE, DELETE]
    dead = dropped(knative, "dead-uid")
    for d in old:
        assert knative.repost(d) == 202
    control_plane.wait_for(lambda: len([d for d in proxy.deliveries() if d.uid == uid1]) == 6, 30,
                           what="the three late events to reach the classifier")
    assert [d.status for d in proxy.deliveries() if d.uid == uid1][3:] == [202, 202, 202]  # nothing emitted
    assert dropped(knative, "dead-uid") == dead + 3
    time.sleep(1)
    assert delta(knative, before) == {"affinity": 1, "taints": 0}
    assert emitted(knative, "node-x") == [ADDED, LABELS, ADDED]
    assert knative.nodes_cached() == "node cache seeded (1 nodes)"  # the late delete did not remove uid 2
    # the live node's next label change is a label change
    set_labels(quiet_cluster, "node-x", {"pool": "blue"})
    control_plane.wait_for(lambda: delta(knative, before)["affinity"] == 2, 30, what="labels.changed of node-x")
    # and its delete is honoured
    quiet_cluster.api.delete("/api/v1/nodes/node-x", grace=0)
    control_plane.wait_for(lambda: knative.nodes_cached() == "node cache seeded (0 nodes)", 30,
                           what="node-x to leave the cache")
    time.sleep(1)
    assert delta(knative, before) == {"affinity": 2, "taints": 0}
    assert emitted(knative, "node-x") == [ADDED, LABELS, ADDED, LABELS]


def test_redelivered_and_reordered_updates_of_the_live_node(control_plane: ControlPlane, quiet_cluster: Cluster,
                                                            knative: KnativeDataPlane) -> None:
    """An update delivered twice (its answer lost) is answered twice with the same reply (same id;
    the proxy keeps the first); an older update arriving after a newer one as another event emits
    nothing; the same event redelivered late gets its reply again; nothing is lost."""
    repeated: list[str] = []

    def repeat(d: Delivery) -> bool:
        if d.ce_type == UPDATE and b'"zone":"a"' in d.body and not repeated:
            repeated.append(d.ce_id)
            return True
        return False

    proxy = Proxy([knative.functions["classifier"].url], repeat=repeat)
    knative.route("classifier", proxy)
    quiet_cluster.node("node-y")
    control_plane.wait_for(lambda: [d for d in proxy.deliveries(ADD) if d.status == 200], 30, what="node-y's add")
    before = counts(knative)
    set_labels(quiet_cluster, "node-y", {"zone": "a"})  # delivered twice
    control_plane.wait_for(lambda: len([d for d in proxy.deliveries() if repeated and d.ce_id == repeated[0]]) == 2,
                           30, what="the update's two deliveries")
    control_plane.wait_for(lambda: delta(knative, before)["affinity"] == 1, 30, what="labels.changed of zone=a")
    assert [d.status for d in proxy.deliveries() if d.ce_id == repeated[0]] == [200, 200]
    set_taints(quiet_cluster, "node-y", [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
    control_plane.wait_for(lambda: delta(knative, before)["taints"] == 1, 30, what="taints.changed")
    (tainted,) = [d for d in proxy.deliveries(UPDATE) if b'"dedicated"' in d.body]
    set_labels(quiet_cluster, "node-y", {"pool": "blue"})
    control_plane.wait_for(lambda: delta(knative, before)["affinity"] == 2, 30, what="labels.changed of pool=blue")
    older = dropped(knative, "older")
    # the taint's update as another event (a new id), after the newer label update: older, dropped
    stale = dataclasses.replace(tainted, headers={**tainted.headers, "ce-id": f"{tainted.ce_id}-stale"})
    assert knative.repost(stale) == 202
    control_plane.wait_for(lambda: dropped(knative, "older") == older + 1, 30,
                           what="the late taint update to be dropped as older")
    time.sleep(1)
    assert delta(knative, before) == {"affinity": 2, "taints": 1}
    assert emitted(knative, "node-y") == [ADDED, LABELS, TAINTS, LABELS]
    # the same event delivered again, late: its answer may have been lost, so it gets the same reply
    # (same id) rather than nothing; a taints run more is harmless, a taints.changed lost is not
    assert knative.repost(tainted) == 202
    control_plane.wait_for(lambda: delta(knative, before)["taints"] == 2, 30, what="the same taints.changed again")
    assert dropped(knative, "older") == older + 1


def test_a_reply_lost_before_the_broker_took_it_is_sent_again(control_plane: ControlPlane, quiet_cluster: Cluster,
                                                              knative: KnativeDataPlane) -> None:
    """The classifier committed a label change and replied labels.changed, but the answer never
    reached the filter (the proxy answers 503 in its place): the dispatcher sends the update again,
    and the classifier, whose cache already holds the change, answers it with the same reply, which
    the broker now routes to affinity. Before, the redelivery was answered 202 and the change was lost."""
    lost: list[str] = []

    def lose(d: Delivery) -> bool:
        if d.ce_type == UPDATE and b'"zone":"b"' in d.body and not lost:
            lost.append(d.ce_id)
            return True
        return False

    proxy = Proxy([knative.functions["classifier"].url], lose=lose)
    knative.route("classifier", proxy)
    quiet_cluster.node("node-z")
    control_plane.wait_for(lambda: [d for d in proxy.deliveries(ADD) if d.status == 200], 30, what="node-z's add")
    before = counts(knative)
    set_labels(quiet_cluster, "node-z", {"zone": "b"})
    control_plane.wait_for(lambda: delta(knative, before)["affinity"] == 1, 30,
                           what="labels.changed of zone=b, through the redelivery")
    deliveries = [d for d in proxy.deliveries() if d.ce_id == lost[0]]
    assert [(d.lost, d.status) for d in deliveries] == [(200, 503), (0, 200)]
    time.sleep(1)
    assert delta(knative, before) == {"affinity": 1, "taints": 0}


def test_a_reply_lost_then_a_classifier_crash_is_sent_again_by_the_new_one(control_plane: ControlPlane,
                                                                          quiet_cluster: Cluster,
                                                                          knative: KnativeDataPlane) -> None:
    """Issue 31: the classifier replied labels.changed, the answer never reached the filter, and the
    classifier crashed (SIGKILL) before the dispatcher sent the update again. The new process, whose
    cache is seeded by a LIST that already shows the label, answers the redelivery from the answer
    the first one wrote to its Lease before replying: the same reply, routed to affinity once; its
    start-up reconcile does not send the change a second time. Before, the redelivery was answered
    202 and the change waited for the sweep."""
    lost: list[str] = []
    restarted = threading.Event()

    def lose(d: Delivery) -> bool:  # (the proxy's thread: the classifier is restarted by the test's)
        if d.ce_type == UPDATE and b'"zone":"c"' in d.body and not lost:
            lost.append(d.ce_id)
            assert restarted.wait(60), "the classifier was not restarted"
            return True
        return False

    classifier = knative.functions["classifier"]
    proxy = Proxy([classifier.url], lose=lose)
    knative.route("classifier", proxy)
    quiet_cluster.node("node-w")
    control_plane.wait_for(lambda: [d for d in proxy.deliveries(ADD) if d.status == 200], 30, what="node-w's add")
    before = counts(knative)
    set_labels(quiet_cluster, "node-w", {"zone": "c"})
    control_plane.wait_for(lambda: bool(lost), 30, what="the label update answered by the classifier")
    classifier.stop(signal.SIGKILL)  # its reply is still held by the proxy: lost with the process
    classifier.start()
    restarted.set()
    control_plane.wait_for(lambda: delta(knative, before)["affinity"] == 1, 30,
                           what="labels.changed of zone=c, through the redelivery to the restarted classifier")
    deliveries = [d for d in proxy.deliveries() if d.ce_id == lost[0]]
    assert [(d.lost, d.status) for d in deliveries] == [(200, 503), (0, 200)]
    time.sleep(2)
    assert delta(knative, before) == {"affinity": 1, "taints": 0}

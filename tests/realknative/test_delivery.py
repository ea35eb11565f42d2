"""Delivery through Knative's real Broker: run requests posted to the ingress, the periodic sweep
from the real PingSource adapter, 4xx answers going to the dead-letter sink without retry, a
function down and up again (the dispatcher's retries arrive), and the classifier's cache re-synced
after the adapter missed a delete.

Each story is set up unseen (``knative.quiet()``), as the lifecycle tests do. Deliveries are
counted from each function's own ``kdesched_reactor_events_total``; evictions from the cluster.
"""

from __future__ import annotations

import time

import pytest

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc
from tests.realk8s.serve_stories import placement, set_taints, set_unschedulable, taint, uids, wait_placement
from tests.realknative.dataplane import KnativeDataPlane, dead_letter_error

RUN_REQUESTED, RUN_COMPLETED = "dev.kdesched.run.requested", "dev.kdesched.run.completed"
PING = "dev.knative.sources.ping"
TAINTS = "dev.kdesched.node.taints.changed"
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.fixture
def real(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet,
         cluster: Cluster, knative: KnativeDataPlane) -> Cluster:
    return cluster


def tainted_unseen(cp: ControlPlane, cluster: Cluster, knative: KnativeDataPlane) -> set[str]:
    """Two one-pod workloads (shop, cart) on gpu-1, tainted while the adapter is down: only a full run
    (run.requested or the sweep) can find them. One pod per workload, so that one run evicts both
    within the per-workload allowance (maxUnavailable 1). Their uids.

    Both opt out of surge-first moves (``kdesched.dev/surge: "false"``): these stories are about
    delivery, and a one-replica workload is otherwise moved surge-first, its replacement Ready on
    node-1 before the old pod is evicted by a later, repeated run (tests/realk8s/test_surge.py)."""
    with knative.quiet():
        cluster.node("node-1", unschedulable=True)
        cluster.node("gpu-1")
        for app in ("shop", "cart"):
            cluster.deployment(app, 1, cpu="200m", annotations={"kdesched.dev/surge": "false"})
        for app in ("shop", "cart"):
            wait_placement(cp, cluster, app, lambda p: p == {"gpu-1": 1})
        set_unschedulable(cluster, "node-1", False)
        set_taints(cluster, "gpu-1", [GPU_TAINT])
    time.sleep(1)
    assert moved(cluster) == (0, 0)
    return uids(cluster, "shop") | uids(cluster, "cart")


def moved(cluster: Cluster) -> tuple[int, int]:
    """(shop, cart) pods Ready on node-1."""
    return placement(cluster, "shop").get("node-1", 0), placement(cluster, "cart").get("node-1", 0)


def test_run_requested_posted_to_the_broker_evicts_and_is_audited(control_plane: ControlPlane, real: Cluster,
                                                                  knative: KnativeDataPlane) -> None:
    before = tainted_unseen(control_plane, real, knative)
    manual = knative.functions["manual"]
    ok = manual.events(RUN_REQUESTED, "200")
    assert knative.post_event(RUN_REQUESTED, {"strategies": ["RemovePodsViolatingNodeTaints"]},
                              id="ci-run-1", source="/ci/pipeline") == 202
    control_plane.wait_for(lambda: moved(real) == (1, 1), 60, what="shop and cart moved off gpu-1")
    assert len(before - uids(real, "shop") - uids(real, "cart")) == 2
    control_plane.wait_for(lambda: manual.events(RUN_REQUESTED, "200") == ok + 1, 30, what="manual answered 200")
    # its run.completed reply re-entered the broker and reached the audit log (deadletter, Trigger audit)
    control_plane.wait_for(lambda: [a for a in knative.audits() if "ci-run-1" in a and "evictions=2" in a], 30,
                           what="the audit line of the run")
    assert knative.dead_letters() == []


def test_a_400_goes_to_the_dead_letter_sink_without_retry(control_plane: ControlPlane, real: Cluster,
                                                          knative: KnativeDataPlane) -> None:
    manual = knative.functions["manual"]
    bad, total = manual.events(RUN_REQUESTED, "400"), manual.events(RUN_REQUESTED)
    knative.post_event(RUN_REQUESTED, {"strategies": ["RemovePodsViolatingNodeTaints"], "bogus": 1}, id="bad-1")
    control_plane.wait_for(lambda: [d for d in knative.dead_letters() if "id=bad-1" in d], 30,
                           what="the refused request in the dead-letter log")
    (letter,) = [d for d in knative.dead_letters() if "id=bad-1" in d]
    error = dead_letter_error(letter)
    assert error["knativeerrorcode"] == "400"
    assert "/triggers/kdesched/manual/" in error["knativeerrordest"]
    assert "data.bogus: unknown field" in error["response"]  # the function's answer, carried along
    time.sleep(6)  # longer than the manual Trigger's first backoff (5 s): a retry would have come
    assert (manual.events(RUN_REQUESTED, "400") - bad, manual.events(RUN_REQUESTED) - total) == (1, 1)
    assert len([d for d in knative.dead_letters() if "id=bad-1" in d]) == 1


def test_a_function_down_then_up_gets_the_retried_event(control_plane: ControlPlane, real: Cluster,
                                                         knative: KnativeDataPlane) -> None:
    """taints is down when the taint is made: the filter answers the dispatcher 5xx, the dispatcher
    retries (Trigger taints: 5 retries from 2 s, doubling), taints comes back on the same address
    and the retried event evicts. Nothing reaches the dead-letter sink."""
    with knative.quiet():
        story = taint(control_plane, real)
    taints = knative.functions["taints"]
    before = uids(real, "shop")
    taints.stop()
    classifier = knative.functions["classifier"]
    replied = classifier.events("dev.knative.apiserver.resource.update", "200")
    story.change()
    # the classifier replied taints.changed; its deliveries to taints fail meanwhile
    control_plane.wait_for(lambda: classifier.events("dev.knative.apiserver.resource.update", "200") > replied, 30,
                           what="the classifier's taints.changed reply")
    time.sleep(3)
    assert uids(real, "shop") == before
    taints.start()  # a new process: its counters start at 0
    wait_placement(control_plane, real, "shop", story.done, what="shop evicted by the retried event")
    assert len(before - uids(real, "shop")) == 2
    assert taints.events(TAINTS, "200") >= 1
    assert knative.dead_letters() == []


def test_the_classifier_cache_is_resynced_after_the_adapter_missed_a_delete(control_plane: ControlPlane,
                                                                            real: Cluster,
                                                                            knative: KnativeDataPlane) -> None:
    """A node deleted while the adapter is down stays in the classifier's cache (the adapter
    re-lists silently); the classifier's periodic re-LIST (here every 2 s) drops it on the next event."""
    classifier = knative.functions["classifier"]
    classifier.env["KDESCHED_CLASSIFIER_RESYNC_SECONDS"] = "2"
    try:
        with knative.quiet():
            real.node("node-1")
            real.node("node-2")
        # the probe's nodes pass through the cache: a late add of a probe node that timed out under load
        # is followed by its delete a moment later, so wait for the two real nodes to be all there is
        control_plane.wait_for(lambda: knative.nodes_cached() == "node cache seeded (2 nodes)", 30,
                               what="the classifier's cache to hold node-1 and node-2 only")
        knative.stop_adapter()
        real.api.delete("/api/v1/nodes/node-2", grace=0)
        knative.start_adapter()
        time.sleep(2.5)
        assert knative.nodes_cached() == "node cache seeded (2 nodes)"  # no event told it
        knative.probe()  # any node event: the classifier re-lists first
        control_plane.wait_for(lambda: knative.nodes_cached() == "node cache seeded (1 nodes)", 30,
                               what="node-2 to leave the classifier's cache")
    finally:
        classifier.env["KDESCHED_CLASSIFIER_RESYNC_SECONDS"] = str(knative.resync_seconds)
        classifier.stop()
        classifier.start()


def test_the_periodic_sweep_from_the_real_pingsource(control_plane: ControlPlane, real: Cluster,
                                                     knative: KnativeDataPlane) -> None:
    """knative/base/pingsource.yaml with its schedule shortened to every minute (the one test that
    waits for a minute boundary): mtping sends the sweep, Trigger manual-sweep routes it by type and
    the kdeschedsweep extension, manual runs the whole policy and evicts what the events missed."""
    before = tainted_unseen(control_plane, real, knative)
    manual = knative.functions["manual"]
    pings, requested = manual.events(PING, "200"), manual.events(RUN_REQUESTED)
    knative.set_ping("* * * * *")
    control_plane.wait_for(lambda: moved(real) == (1, 1), 150, what="the sweep to move shop and cart off gpu-1")
    assert len(before - uids(real, "shop") - uids(real, "cart")) == 2
    control_plane.wait_for(lambda: manual.events(PING, "200") > pings, 30, what="manual to answer the ping")
    assert manual.events(RUN_REQUESTED) == requested
    (audit,) = [a for a in knative.audits() if "evictions=2" in a]
    assert "dev.knative.sources.ping" in audit and "/pingsources/kdesched-sweep" in audit

"""Node lifecycles through Knative's real data plane: the ApiServerSource adapter sees the Node
write, the Broker (ingress, in-memory channel, filter) carries it to the classifier function, its
reply re-enters the Broker and reaches the evicting function, which evicts; the real scheduler
places the replacement and the kubelet stand-in makes it Ready.

The stories and their expected evictions are those of tests/realk8s/test_serve.py (seed stories in
tests/realk8s/serve_stories.py), with the same safety defaults: the policy is the shipped one.
Each is set up unseen (``knative.quiet()``: as if kdesched were deployed afterwards), then the
change is made. Assertions are about cluster state and the deliveries each function answered,
never about timing.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc
from tests.realk8s.serve_stories import (
    NOT_READY,
    UNINITIALIZED,
    UNSCHEDULABLE,
    app_pods,
    placement,
    recovery,
    scale_out,
    set_labels,
    set_ready,
    set_taints,
    set_unschedulable,
    taint,
    uids,
    wait_placement,
)
from tests.realknative.dataplane import KnativeDataPlane, adapter_settings

ADDED, READY = "dev.kdesched.node.added", "dev.kdesched.node.ready"
TAINTS, LABELS = "dev.kdesched.node.taints.changed", "dev.kdesched.node.labels.changed"


@pytest.fixture
def real(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet,
         cluster: Cluster, knative: KnativeDataPlane) -> Cluster:
    return cluster


def settled(knative: KnativeDataPlane, name: str, ce_type: str, count: float, timeout: float = 60) -> None:
    fn = knative.functions[name]
    knative.cp.wait_for(lambda: fn.events(ce_type) >= count, timeout, what=f"{name} to answer {count:g} {ce_type}")


def test_new_cloud_node_gets_its_pod_once_initialised(control_plane: ControlPlane, real: Cluster,
                                                      knative: KnativeDataPlane) -> None:
    """node.added while `uninitialized` runs nothing; node.ready when the cloud controller lifts the
    taint runs the rebalance: exactly one nginx pod moves to node-3."""
    rebalance = knative.functions["rebalance"]
    with knative.quiet():
        story = scale_out(control_plane, real, lift_after=2.0)
    before = uids(real, "nginx")
    added, ready = rebalance.events(ADDED), rebalance.events(READY)
    story.change()
    got = wait_placement(control_plane, real, "nginx", story.done, what="a replacement on node-3")
    assert got == {"node-1": 1, "node-2": 1, "node-3": 1}
    assert len(before - uids(real, "nginx")) == 1
    settled(knative, "rebalance", READY, ready + 1)
    assert (rebalance.events(ADDED) - added, rebalance.events(READY) - ready) == (1, 1)
    assert any("node-3 is not usable for ordinary pods yet" in m and "uninitialized" in m for m in rebalance.messages())
    time.sleep(1)  # nothing more happens afterwards
    assert placement(real, "nginx") == got and len(before - uids(real, "nginx")) == 1


def test_recovered_node_gets_back_its_pod_once_the_not_ready_taints_go(control_plane: ControlPlane, real: Cluster,
                                                                      knative: KnativeDataPlane) -> None:
    """NotReady then Ready: nothing moves while the not-ready taints are on; when they go, the
    extra api pod on node-a moves back to node-c (PDB minAvailable 2 respected)."""
    with knative.quiet():
        story = recovery(control_plane, real)
        set_ready(real, "node-c", False)  # it fails again, unseen, so that Ready is seen below
    before = uids(real, "api")
    set_ready(real, "node-c", True)  # back, still tainted by the node controller
    time.sleep(2)
    assert uids(real, "api") == before
    story.change()
    wait_placement(control_plane, real, "api", story.done, what="api back on node-c")
    assert len(before - uids(real, "api")) == 1


def test_taint_cordon_and_label(control_plane: ControlPlane, real: Cluster, knative: KnativeDataPlane) -> None:
    """A taint evicts the intolerant pods of that node; a cordon (kubectl + the node controller's
    taint) evicts nothing; a label a pod requires, moved to another node, moves only that pod."""
    with knative.quiet():
        story = taint(control_plane, real)
        set_labels(real, "node-1", {"pool": "blue"})
        real.deployment("picky", 1, cpu="100m", affinity={"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["blue"]}]}]}}})
        wait_placement(control_plane, real, "picky", lambda p: p == {"node-1": 1})
    taints, affinity = knative.functions["taints"], knative.functions["affinity"]
    before = uids(real, "shop")
    story.change()
    # two paced moves, each through the Broker; 120 s: a CI machine at load 10 took over 60 s once
    wait_placement(control_plane, real, "shop", story.done, timeout=120, what="shop on node-1")
    assert len(before - uids(real, "shop")) == 2
    # cordon: not a drain
    shop, picky = uids(real, "shop"), uids(real, "picky")
    seen = taints.events(TAINTS)
    set_unschedulable(real, "node-1", True)
    set_taints(real, "node-1", [UNSCHEDULABLE])
    settled(knative, "taints", TAINTS, seen + 1)
    time.sleep(1)
    assert uids(real, "shop") == shop and uids(real, "picky") == picky
    # uncordon; the label picky requires moves to gpu-2, a new node: picky follows it
    set_unschedulable(real, "node-1", False)
    set_taints(real, "node-1", [])
    real.node("gpu-2", labels={"pool": "blue"})
    labels = affinity.events(LABELS)
    set_labels(real, "node-1", {"pool": None})
    wait_placement(control_plane, real, "picky", lambda p: p == {"gpu-2": 1}, what="picky on gpu-2")
    assert affinity.events(LABELS) == labels + 1
    assert uids(real, "shop") == shop  # the label change on node-1 touched only picky


def test_not_ready_taints_keep_pods_and_the_uninitialized_node_gets_none(control_plane: ControlPlane, real: Cluster,
                                                                        knative: KnativeDataPlane) -> None:
    with knative.quiet():
        story = taint(control_plane, real)
    before = uids(real, "shop")
    seen = knative.functions["taints"].events(TAINTS)
    set_ready(real, "gpu-1", False)
    set_taints(real, "gpu-1", NOT_READY)
    real.node("node-9", taints=[UNINITIALIZED])
    settled(knative, "taints", TAINTS, seen + 1)  # the taints function ran, and let them be
    time.sleep(1)
    assert uids(real, "shop") == before  # a NotReady node is not drained by kdesched
    set_ready(real, "gpu-1", True)
    set_taints(real, "gpu-1", [])
    story.change()
    wait_placement(control_plane, real, "shop", story.done)
    assert not [p for p in app_pods(real, "shop") if p["spec"].get("nodeName") == "node-9"]


def test_the_adapter_runs_with_what_the_source_manifest_says(knative: KnativeDataPlane) -> None:
    """K_SOURCE_CONFIG / K_CE_OVERRIDES derived from knative/base/apiserversource.yaml, as the
    ApiServerSource controller derives them (the kit's README gives the same JSON for this source)."""
    env = adapter_settings(knative.source)
    assert json.loads(env["K_SOURCE_CONFIG"]) == {
        "namespaces": ["kdesched"], "allNamespaces": False, "mode": "Resource", "failFast": False,
        "resources": [{"gvr": {"Group": "", "Version": "v1", "Resource": "nodes"}}]}
    assert json.loads(env["K_CE_OVERRIDES"]) == {"extensions": {"kdeschedorigin": "nodes"}}
    assert (env["NAME"], env["NAMESPACE"]) == ("kdesched-nodes", "kdesched")
    assert knative.kubeconfigs["kdesched-node-source"].exists()  # its serviceAccountName, not the admin

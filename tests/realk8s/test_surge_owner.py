"""Surge-first moves on a real control plane when the move does not go as planned: the Deployment
written by someone else mid-move, an eviction that keeps being refused, the maintenance cancelled,
a brake holding the eviction. The promise in each (docs/safety.md, "Surge-first moves"): the
replicas go back to the owner's value unless the owner wrote them, and no pod leaves other than
through the Eviction API. Fixtures and helpers are tests/realk8s/test_surge.py's."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import TERMINATE_AFTER, ApiError, ControlPlane, Kubelet
from tests.realk8s.ledger_view import read_ledger
from tests.realk8s.serve_stories import GPU, Serve, app_pods, set_ready, set_taints, set_unschedulable
from tests.realk8s.test_surge import (
    READY_3S,
    controller_manager,  # noqa: F401  (the fixture: resourcequota too)
    deployment,
    logged,
    on_node_a,
    start_serve,
    wait_leading,
)


def leading_serve(control_plane: ControlPlane, real: Cluster, serves: list[Serve], tmp_path: Path,
                  safety: dict[str, float] | None = None) -> Serve:
    """A ``kdesched serve`` started with ``safety`` and leading."""
    kubeconfig = control_plane.admin_kubeconfig
    s = start_serve(serves, tmp_path, kubeconfig, safety=safety) if safety else start_serve(serves, tmp_path, kubeconfig)
    wait_leading(control_plane, real, s)
    return s


def taint_node_a_until_surged(control_plane: ControlPlane, real: Cluster, app: str, surged: int) -> None:
    """The maintenance taint on node-a; returns once ``app``'s Deployment is scaled up to ``surged``."""
    set_taints(real, "node-a", [GPU])
    control_plane.wait_for(lambda: deployment(real, app)["spec"]["replicas"] == surged, 15, interval=0.02,
                           what="the scale-up")


def test_an_annotation_mid_move_does_not_leave_the_deployment_surged(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """An annotation written to the Deployment mid-move (Argo CD, Flux, a person) moves its generation
    but not spec.replicas, whose managedFields entry stays kdesched's scale write: the move finishes and
    the replicas go back to 1, and no second move of the workload begins on top of the first."""
    before = on_node_a(control_plane, real, "web", 1)
    s = leading_serve(control_plane, real, serves, tmp_path)
    leaving = {p["metadata"]["uid"] for p in app_pods(real, "web")}
    with logged(s):
        taint_node_a_until_surged(control_plane, real, "web", 2)
        real.api.patch("/apis/apps/v1/namespaces/default/deployments/web",
                       {"metadata": {"annotations": {"team": "payments"}}})
        annotated = deployment(real, "web")
        assert annotated["metadata"]["generation"] > before["metadata"]["generation"] + 1
        control_plane.wait_for(lambda: not (leaving & {p["metadata"]["uid"] for p in app_pods(real, "web")
                                                       if not p["metadata"].get("deletionTimestamp")}),
                               30, what="the pod off node-a")
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, 15, what="the scale-back")
        time.sleep(5)  # several settles (each run is repeated every second while a move is under way)
        after = deployment(real, "web")["spec"]["replicas"]
    assert after == 1, f"Deployment web at {after} replicas (original 1) after an annotation mid-move"
    assert "replicas 2 -> 3" not in s.log()


def test_a_move_whose_eviction_a_pdb_keeps_refusing_is_given_up_at_the_timeout(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """A PodDisruptionBudget with maxUnavailable 0 appears mid-move: every eviction is refused (429).
    The move is given up at replacementTimeoutSeconds (10 s), the replicas put back: the extra pod,
    doubled-up with nothing on its node, is the one the ReplicaSet removes (newest, shortest Ready)."""
    on_node_a(control_plane, real, "web", 1)
    # the original pod Ready well before the move: the ReplicaSet compares Ready times in power-of-two
    # buckets (then by uid), and kdesched gives up only when the extra pod's bucket is certainly lower
    time.sleep(20)
    s = leading_serve(control_plane, real, serves, tmp_path, safety={"replacementTimeoutSeconds": 10})
    original = {p["metadata"]["uid"] for p in app_pods(real, "web")}
    with logged(s):
        taint_node_a_until_surged(control_plane, real, "web", 2)
        real.pdb("web", {"app": "web"}, max_unavailable=0)
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, 30, what="the give-up")
        time.sleep(3)
        left = {p["metadata"]["uid"] for p in app_pods(real, "web") if not p["metadata"].get("deletionTimestamp")}
    assert original <= left, "the original pod was removed by the scale-down"


def test_a_move_given_up_under_the_health_brake_deletes_no_pod_behind_the_eviction_api(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """2 replicas on node-a, PDB minAvailable 2: surge-first. The extra pod is Ready on a spare node, then
    the health brake holds the eviction (another node NotReady). Scaling back at the timeout would make
    the ReplicaSet delete an original pod (two on node-a rank before the lone extra pod): no pod may
    leave while the brake holds, so the +1 is kept past the timeout and both original pods stay."""
    on_node_a(control_plane, real, "shop", 2)
    real.pdb("shop", {"app": "shop"}, min_available=2)
    real.wait_pdb_observed("default", "shop")
    s = leading_serve(control_plane, real, serves, tmp_path, safety={"replacementTimeoutSeconds": 15})
    original = {p["metadata"]["uid"]: p["metadata"]["name"] for p in app_pods(real, "shop")}
    with logged(s):
        taint_node_a_until_surged(control_plane, real, "shop", 3)

        def surge_node() -> str | None:
            extra = [p for p in app_pods(real, "shop") if p["metadata"]["uid"] not in original]
            return extra[0]["spec"].get("nodeName") if extra and extra[0]["spec"].get("nodeName") else None
        control_plane.wait_for(lambda: surge_node() is not None, 10, interval=0.02, what="the extra pod bound")
        other = "spare-2" if surge_node() == "spare-1" else "spare-1"
        set_ready(real, other, False)  # the health brake: 1 of 3 nodes NotReady
        time.sleep(25)  # past the timeout (15 s)
        left = {p["metadata"]["uid"] for p in app_pods(real, "shop")}
        gone = [name for uid, name in original.items() if uid not in left]
        replicas = deployment(real, "shop")["spec"]["replicas"]
        evictions = [e for e in real.events("default") if e.get("reason") == "Descheduled"]
    assert not gone, f"{gone} deleted by the ReplicaSet's scale-down (no eviction, brake on)"
    assert replicas == 3 and not evictions  # the +1 kept while the brake holds


def test_a_taint_removed_mid_move_still_gets_the_replicas_back_promptly(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """The maintenance is cancelled (the taint removed) right after the scale-up: the node's run keeps
    repeating while the move is in the ledger, so the move is settled within its timeout (10 s) and a
    few seconds, not at the next sweep (the harness's serve has none)."""
    on_node_a(control_plane, real, "web", 1)
    s = leading_serve(control_plane, real, serves, tmp_path, safety={"replacementTimeoutSeconds": 10})
    with logged(s):
        taint_node_a_until_surged(control_plane, real, "web", 2)
        set_taints(real, "node-a", [])
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, 25,
                               what="the replicas back")


def test_a_late_scale_back_after_the_eviction_deletes_no_original_pod(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """3 replicas on node-a, PDB minAvailable 3: surge-first. kdesched crashes right after the scale-up;
    meanwhile the pod is evicted (here by the test, as a drain would) and the ReplicaSet's pod for it
    is Ready by the time the next process settles the move. The evicted pod, terminating, is not
    counted by the ReplicaSet (FilterActivePods): a scale-back then makes it choose among 4 Ready pods,
    and the 2 originals left on node-a (doubled-up) rank before the lone pods made during the move.
    No original pod may leave but through the Eviction API: the ReplicaSet deletes none of them."""
    on_node_a(control_plane, real, "shop", 3, annotations={**READY_3S, TERMINATE_AFTER: "20"})
    real.pdb("shop", {"app": "shop"}, min_available=3)
    real.wait_pdb_observed("default", "shop")
    a = leading_serve(control_plane, real, serves, tmp_path)
    original = {p["metadata"]["uid"]: p["metadata"]["name"] for p in app_pods(real, "shop")}
    with logged(a):
        taint_node_a_until_surged(control_plane, real, "shop", 4)
        a.stop(signal.SIGKILL)

    def ready_new(n: int) -> list[dict[str, Any]] | None:
        new = [p for p in app_pods(real, "shop") if p["metadata"]["uid"] not in original and is_ready(p)]
        return new if len(new) == n else None
    extra = control_plane.wait_for(lambda: ready_new(1), 15, what="the extra pod Ready")[0]
    set_unschedulable(real, extra["spec"]["nodeName"], True)  # the ReplicaSet's next pod alone on the other node
    evicted = read_ledger(real).surges["Deployment/default/shop"].pod.partition("/")[2]  # the move's pod

    def evict() -> bool:
        try:
            real.api.request("POST", f"/api/v1/namespaces/default/pods/{evicted}/eviction",
                             {"apiVersion": "policy/v1", "kind": "Eviction",
                              "metadata": {"name": evicted, "namespace": "default"}})
        except ApiError as exc:  # 429 until the PDB's status counts the extra pod
            if exc.status != 429:
                raise
            return False
        return True
    control_plane.wait_for(evict, 15, what="the eviction of the move's pod")
    control_plane.wait_for(lambda: ready_new(2), 15, what="the ReplicaSet's pod for the evicted one Ready")
    set_unschedulable(real, extra["spec"]["nodeName"], False)
    b = start_serve(serves, tmp_path, control_plane.admin_kubeconfig, "b")
    with logged(b):
        wait_leading(control_plane, real, b)
        control_plane.wait_for(lambda: b.metric("kdesched_surge_moves_total", outcome="done") >= 1, 30,
                               what="the move done")
        assert deployment(real, "shop")["spec"]["replicas"] == 3
        time.sleep(3)  # the ReplicaSet's scale-down
        deleted = [e["note"] for e in real.events("default") if e.get("reason") == "SuccessfulDelete"]
        gone = [name for name in original.values() if name != evicted and any(name in note for note in deleted)]
        assert not gone, f"{gone} deleted by the ReplicaSet's scale-down, not evicted: {deleted}"
        assert "kept at 4 replicas, the extra pod" in b.log()

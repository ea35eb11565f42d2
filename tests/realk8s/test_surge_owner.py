"""Surge-first moves on a real control plane when the move does not go as planned: the Deployment
written by someone else mid-move, an eviction that keeps being refused, the maintenance cancelled,
a brake holding the eviction. The promise in each (docs/safety.md, "Surge-first moves"): the
replicas go back to the owner's value unless the owner wrote them, and no pod leaves other than
through the Eviction API. Fixtures and helpers are tests/realk8s/test_surge.py's."""

from __future__ import annotations

import time
from pathlib import Path

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet
from tests.realk8s.serve_stories import GPU, Serve, app_pods, set_taints
from tests.realk8s.test_surge import (
    controller_manager,  # noqa: F401  (the fixture: resourcequota too)
    deployment,
    logged,
    on_node_a,
    start_serve,
    wait_leading,
)


def test_an_annotation_mid_move_does_not_leave_the_deployment_surged(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """An annotation written to the Deployment mid-move (Argo CD, Flux, a person) moves its generation
    but not spec.replicas, whose managedFields entry stays kdesched's scale write: the move finishes and
    the replicas go back to 1, and no second move of the workload begins on top of the first."""
    before = on_node_a(control_plane, real, "web", 1)
    s = start_serve(serves, tmp_path, control_plane.admin_kubeconfig)
    wait_leading(control_plane, real, s)
    leaving = {p["metadata"]["uid"] for p in app_pods(real, "web")}
    with logged(s):
        set_taints(real, "node-a", [GPU])
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 2, 15, interval=0.02,
                               what="the scale-up")
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


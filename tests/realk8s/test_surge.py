"""Surge-first moves on a real control plane (issue 29): the replacement before the eviction.

The real Deployment and ReplicaSet controllers do the work (the scale-up, the deletion-cost ranking
on the scale-down), the real scheduler places the extra pod, and the kubelet stand-in makes every
new pod Ready 3 s after it starts (``realk8s.kdesched.dev/ready-after: "3"`` on the template).
``kdesched serve`` runs the shipped policy (surge-first moves on by default in the event path).

What is measured, with a pod sampler every 0.1 s: the lowest Ready count of the workload while it
moves, and the time from the taint to the moment the pod that had to go is deleted (off the node).
The figures are printed (``-s``): ``[surge figures] ...``.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import READY_AFTER, ControlPlane, Kubelet, Proc
from tests.realk8s.serve_stories import (
    GPU,
    NS,
    SERVE_SA,
    Serve,
    app_pods,
    install_standalone_rbac,
    leader,
    policy_text,
    service_account_kubeconfig,
    set_taints,
    wait_placement,
    whoami,
    write_file,
)

READY_3S = {READY_AFTER: "3"}
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def deployment(cluster: Cluster, name: str) -> dict[str, Any]:
    found = cluster.get(f"/apis/apps/v1/namespaces/default/deployments/{name}")
    assert found is not None
    return found


def replicasets(cluster: Cluster, app: str) -> list[str]:
    items = cluster.api.get("/apis/apps/v1/namespaces/default/replicasets", labelSelector=f"app={app}")["items"]
    return sorted(rs["metadata"]["name"] for rs in items)


def ready_pods(cluster: Cluster, app: str) -> list[dict[str, Any]]:
    return [p for p in app_pods(cluster, app) if not p["metadata"].get("deletionTimestamp") and is_ready(p)]


class Watcher:
    """Samples ``app``'s pods every 0.1 s in a thread: the lowest Ready count (not terminating), and
    when each pod of ``leaving`` (uids) was first seen deleted or gone."""

    def __init__(self, cluster: Cluster, app: str, leaving: set[str]) -> None:
        self.cluster, self.app, self.leaving = cluster, app, set(leaving)
        self.lowest: int | None = None
        self.off: dict[str, float] = {}
        self.replicas_seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                pods = app_pods(self.cluster, self.app)
            except Exception:  # noqa: BLE001, S112 - a failed sample is skipped, not counted
                continue
            now = time.monotonic()
            ready = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp") and is_ready(p))
            self.lowest = ready if self.lowest is None else min(self.lowest, ready)
            alive = {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}
            for uid in self.leaving - alive:
                self.off.setdefault(uid, now)


@contextlib.contextmanager
def logged(*procs: Serve) -> Iterator[None]:
    """On a failure inside, the end of each serve's log goes into the assertion message."""
    try:
        yield
    except (AssertionError, TimeoutError) as exc:
        logs = "\n".join(f"--- {p.identity} ---\n{p.log()[-6000:]}" for p in procs)
        raise AssertionError(f"{exc}\n{logs}") from exc


def start_serve(serves: list[Serve], tmp_path: Path, kubeconfig: Path, identity: str = "a",
                **kdesched: Any) -> Serve:
    policy = write_file(tmp_path, f"policy-{identity}.yaml", policy_text(**kdesched))
    s = Serve(kubeconfig, policy, identity, workdir=tmp_path).start()
    serves.append(s)
    return s


def wait_leading(cp: ControlPlane, cluster: Cluster, s: Serve) -> None:
    def check() -> bool:
        assert s.alive(), f"serve exited:\n{s.log()[-3000:]}"
        status, why = s.readyz()
        return leader(cluster) == s.identity and status == 200 and "leader, watching" in why
    cp.wait_for(check, 60, what=f"{s.identity} to lead and watch")


def on_node_a(cp: ControlPlane, cluster: Cluster, app: str, replicas: int, **kwargs: Any) -> dict[str, Any]:
    """``app`` with all its pods on node-a (the only node when it starts), then two spare nodes."""
    cluster.node("node-a")
    cluster.deployment(app, replicas, annotations=READY_3S, **kwargs)
    wait_placement(cp, cluster, app, lambda p: p == {"node-a": replicas})
    cp.wait_for(lambda: len(ready_pods(cluster, app)) == replicas, 30, what=f"{app} Ready")
    cluster.node("spare-1")
    cluster.node("spare-2")
    return deployment(cluster, app)


def assert_restored(cluster: Cluster, app: str, before: dict[str, Any], rs_before: list[str]) -> None:
    after = deployment(cluster, app)
    assert after["spec"]["replicas"] == before["spec"]["replicas"]
    assert after["spec"]["template"] == before["spec"]["template"]
    assert replicasets(cluster, app) == rs_before  # no new ReplicaSet: no rollout
    for p in app_pods(cluster, app):
        assert DELETION_COST not in (p["metadata"].get("annotations") or {}), p["metadata"]["name"]


def test_one_replica_moves_off_a_tainted_node_without_ever_being_down(
        control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet, cluster: Cluster,
        serves: list[Serve], tmp_path: Path) -> None:
    """Issue 29's first target, with exactly the shipped standalone RBAC (the least privilege works)."""
    real = cluster
    before = on_node_a(control_plane, real, "web", 1)
    rs_before = replicasets(real, "web")
    install_standalone_rbac(real)
    kubeconfig = service_account_kubeconfig(control_plane, real, tmp_path / "sa.kubeconfig")
    assert SERVE_SA in whoami(kubeconfig)
    s = start_serve(serves, tmp_path, kubeconfig)
    wait_leading(control_plane, real, s)
    leaving = {p["metadata"]["uid"] for p in app_pods(real, "web")}
    with Watcher(real, "web", leaving) as w, logged(s):
        t0 = time.monotonic()
        set_taints(real, "node-a", [GPU])
        wait_placement(control_plane, real, "web", lambda p: p.get("node-a", 0) == 0 and sum(p.values()) == 1,
                       timeout=30, what="web off node-a")
        control_plane.wait_for(lambda: w.off.keys() == leaving, 10, what="the old pod deleted")
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, 10, what="replicas back")
        time.sleep(0.5)
    off = max(w.off.values()) - t0
    print(f"[surge figures] 1 replica: lowest Ready {w.lowest}, off node-a {off:.1f}s after the taint")
    assert w.lowest is not None and w.lowest >= 1, f"web was down (lowest Ready {w.lowest})"
    assert off <= 10.0, f"off the node only {off:.1f}s after the taint"
    assert_restored(real, "web", before, rs_before)
    assert "403" not in s.log() and "Forbidden" not in s.log(), s.log()[-3000:]
    assert s.metric("kdesched_surge_moves_total", outcome="done") >= 1
    assert s.metric("kdesched_moves_total", strategy="RemovePodsViolatingNodeTaints", outcome="achieved") >= 1
    started = [e for e in real.events("default") if e.get("reason") == "SurgeMoveStarted"]
    assert started and started[0]["regarding"]["kind"] == "Deployment"


def test_a_pdb_that_allows_nothing_no_longer_pins_a_workload_to_a_tainted_node(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    before = on_node_a(control_plane, real, "shop", 2)
    rs_before = replicasets(real, "shop")
    real.pdb("shop", {"app": "shop"}, min_available=2)
    real.wait_pdb_observed("default", "shop")
    s = start_serve(serves, tmp_path, control_plane.admin_kubeconfig)
    wait_leading(control_plane, real, s)
    leaving = {p["metadata"]["uid"] for p in app_pods(real, "shop")}
    with Watcher(real, "shop", leaving) as w:
        t0 = time.monotonic()
        set_taints(real, "node-a", [GPU])
        control_plane.wait_for(lambda: w.off.keys() == leaving, 30, what="both pods off node-a")
        control_plane.wait_for(lambda: deployment(real, "shop")["spec"]["replicas"] == 2, 10, what="replicas back")
        wait_placement(control_plane, real, "shop", lambda p: p.get("node-a", 0) == 0 and sum(p.values()) == 2)
        time.sleep(0.5)
    off = max(w.off.values()) - t0
    print(f"[surge figures] 2 replicas, PDB minAvailable 2: lowest Ready {w.lowest}, off node-a {off:.1f}s after "
          "the taint")
    assert w.lowest is not None and w.lowest >= 2, f"shop went below its PDB (lowest Ready {w.lowest})"
    assert off <= 20.0, f"off the node only {off:.1f}s after the taint"
    assert_restored(real, "shop", before, rs_before)
    assert s.metric("kdesched_surge_moves_total", outcome="done") >= 2

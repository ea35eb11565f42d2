"""The fixture itself: what the other real-tier tests rely on (so a broken fixture fails here, by
name, not as a puzzling failure elsewhere)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realk8s import controlplane
from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import (
    NOT_READY,
    READY_AFTER,
    TERMINATE_AFTER,
    ApiError,
    ControlPlane,
    Kubelet,
    Proc,
    RawApi,
    find_binaries,
)


def test_binaries_come_from_the_env_variable_then_the_kit(tmp_path: Path, control_plane: ControlPlane,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_binaries({"KDESCHED_K8S_BIN": str(control_plane.bin_dir)}) == control_plane.bin_dir
    monkeypatch.setattr(controlplane, "SHARED_KIT", tmp_path / "no-kit")
    assert find_binaries({"KDESCHED_K8S_BIN": str(tmp_path)}) is None  # an empty directory is no kit
    assert find_binaries({}) is None  # -> the conftest skips with one line (or fails when required)


def test_rbac_is_enforced_for_an_impersonated_service_account(control_plane: ControlPlane, cluster: Cluster) -> None:
    assert control_plane.api is not None
    sa = control_plane.api.as_user("system:serviceaccount:default:nobody")
    with pytest.raises(ApiError) as denied:
        sa.get("/api/v1/pods")
    assert denied.value.status == 403
    cluster.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "realk8s-pod-reader"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    cluster.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "realk8s-pod-reader"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "realk8s-pod-reader"},
                    "subjects": [{"kind": "ServiceAccount", "namespace": "default", "name": "nobody"}]})
    control_plane.wait_for(lambda: _allowed(sa, "/api/v1/pods"), 10, what="the binding to take effect")
    with pytest.raises(ApiError) as still_denied:
        sa.get("/api/v1/nodes")
    assert still_denied.value.status == 403


def _allowed(api: RawApi, path: str) -> bool:
    try:
        api.get(path)
    except ApiError as exc:
        if exc.status == 403:
            return False
        raise
    return True


def test_nodes_are_ready_with_capacity(cluster: Cluster) -> None:
    node = cluster.node("n1", cpu="2", memory="4Gi", pods=20, labels={"zone": "a"})
    assert node["status"]["allocatable"] == {"cpu": "2", "memory": "4Gi", "pods": "20"}
    assert [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
    assert not node["spec"].get("taints")  # no not-ready taint: nothing would lift it here


def test_scheduler_controllers_and_kubelet_run_a_deployment(
        cluster: Cluster, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet) -> None:
    cluster.nodes(2, cpu="1")
    cluster.namespace("t")
    cluster.deployment("web", 3, "t", cpu="300m")
    pods = cluster.wait_running("t", 3)
    assert {p["spec"]["nodeName"] for p in pods} <= {"node-0", "node-1"}
    assert all(p["status"]["podIP"] and p["status"]["containerStatuses"][0]["ready"] for p in pods)
    # the ReplicaSet controller replaces a deleted pod and the stand-in finishes the deletion
    victim = pods[0]["metadata"]["name"]
    cluster.api.delete(f"/api/v1/namespaces/t/pods/{victim}")
    cluster.wait_gone(f"/api/v1/namespaces/t/pods/{victim}")
    assert victim not in {p["metadata"]["name"] for p in cluster.wait_running("t", 3)}


def test_per_pod_annotations_slow_or_hold_a_pod(cluster: Cluster, control_plane: ControlPlane,
                                                kubelet: Kubelet) -> None:
    cluster.node("n1")
    cluster.pod("fast", node="n1")
    cluster.pod("never", node="n1", annotations={READY_AFTER: "never"})
    cluster.pod("unready", node="n1", annotations={NOT_READY: "true"})
    cluster.pod("lingers", node="n1", annotations={TERMINATE_AFTER: "never"})
    control_plane.wait_for(lambda: is_ready(cluster.get("/api/v1/namespaces/default/pods/fast") or {}), 10)
    control_plane.wait_for(lambda: is_ready(cluster.get("/api/v1/namespaces/default/pods/lingers") or {}), 10)
    unready = control_plane.wait_for(
        lambda: (p := cluster.get("/api/v1/namespaces/default/pods/unready")) and p["status"].get("phase") == "Running"
        and p, 10)
    assert not is_ready(unready)
    never = cluster.get("/api/v1/namespaces/default/pods/never")
    assert never is not None and never["status"]["phase"] == "Pending"
    cluster.api.delete("/api/v1/namespaces/default/pods/lingers")
    kubelet.sync()
    lingering = cluster.get("/api/v1/namespaces/default/pods/lingers")
    assert lingering is not None and lingering["metadata"].get("deletionTimestamp")


def test_reset_leaves_an_empty_cluster(cluster: Cluster, control_plane: ControlPlane) -> None:
    cluster.node("n1")
    cluster.namespace("gone")
    cluster.pod("p", "gone", node="n1", annotations={TERMINATE_AFTER: "never"})
    cluster.priority_class("high", 1000)
    control_plane.reset()
    assert cluster.pods() == []
    assert cluster.get("/api/v1/namespaces/gone") is None
    assert cluster.get("/api/v1/nodes/n1") is None
    assert cluster.get("/apis/scheduling.k8s.io/v1/priorityclasses/high") is None
    assert cluster.get("/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical") is not None


def test_a_second_control_plane_stops_cleanly(control_plane: ControlPlane) -> None:
    other = ControlPlane(control_plane.bin_dir).start()
    procs = [other.etcd, other.apiserver]
    workdir = other.workdir
    other.stop()
    other.stop()  # idempotent
    assert all(p is not None and p.popen.poll() is not None for p in procs)
    assert not workdir.exists()


def test_no_stray_processes_when_the_test_run_is_killed(control_plane: ControlPlane) -> None:
    # a test process killed with SIGKILL runs no atexit or finalizer: the children must still die
    script = ("import sys, time\n"
              "from tests.realk8s.controlplane import ControlPlane\n"
              f"cp = ControlPlane({str(control_plane.bin_dir)!r}).start()\n"
              "print(cp.etcd.popen.pid, cp.apiserver.popen.pid, cp.workdir, flush=True)\n"
              "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=controlplane.REPO_ROOT)
    children: list[int] = []
    try:
        assert parent.stdout is not None
        etcd, apiserver, workdir = parent.stdout.readline().split()
        children = [int(etcd), int(apiserver)]
        assert all(_alive(pid) for pid in children)
        parent.kill()
        parent.wait(10)
        control_plane.wait_for(lambda: not any(_alive(pid) for pid in children), 15, what="the orphans to die")
    finally:
        for pid in children:  # only if the assertion above failed: do not leave them running
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
        if children:
            shutil.rmtree(workdir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"  # a zombie has exited
    except (FileNotFoundError, IndexError):
        return False

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
import os
import random
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import DEFAULT_CONTROLLERS, READY_AFTER, ControlPlane, Kubelet, Proc
from tests.realk8s.serve_stories import (
    GPU,
    SERVE_SA,
    Serve,
    app_pods,
    install_standalone_rbac,
    leader,
    policy_text,
    service_account_kubeconfig,
    set_taints,
    strip_times,
    wait_placement,
    whoami,
    write_file,
)

READY_3S = {READY_AFTER: "3"}


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[Proc]:
    """The usual controllers plus resourcequota (it keeps a ResourceQuota's usage, without which the
    API server's quota admission refuses every pod of its namespace)."""
    proc = control_plane.start_controller_manager((*DEFAULT_CONTROLLERS, "resourcequota"))
    try:
        yield proc
    finally:
        control_plane.stop_controller_manager()
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
    cluster.deployment(app, replicas, **{"annotations": READY_3S, **kwargs})
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
    assert not re.search(r"\b403\b(?!,\d)|Forbidden", strip_times(s.log())), s.log()[-3000:]
    control_plane.wait_for(lambda: s.metric("kdesched_surge_moves_total", outcome="done") >= 1, 15,
                           what="the move to end done")
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
    with Watcher(real, "shop", leaving) as w, logged(s):
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
    control_plane.wait_for(lambda: s.metric("kdesched_surge_moves_total", outcome="done") >= 2, 15,
                           what="both moves to end done")


def test_a_crash_mid_move_is_finished_by_the_next_process(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """SIGKILL the only kdesched the moment it has scaled up; the next one (another identity, so it
    has no memory of the move) finishes it from the ledger: the pod moves, the replicas go back."""
    before = on_node_a(control_plane, real, "web", 1)
    rs_before = replicasets(real, "web")
    a = start_serve(serves, tmp_path, control_plane.admin_kubeconfig, "a")
    wait_leading(control_plane, real, a)
    leaving = {p["metadata"]["uid"] for p in app_pods(real, "web")}
    with Watcher(real, "web", leaving) as w, logged(a):
        set_taints(real, "node-a", [GPU])
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 2, 15, interval=0.02,
                               what="the scale-up")
        a.stop(signal.SIGKILL)
        killed = time.monotonic()
        assert leaving <= {p["metadata"]["uid"] for p in app_pods(real, "web")}  # not moved yet
        b = start_serve(serves, tmp_path, control_plane.admin_kubeconfig, "b")
    with Watcher(real, "web", leaving) as w2, logged(b):
        control_plane.wait_for(lambda: w2.off.keys() == leaving, 60, what="the move finished by b")
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, 15, what="replicas back")
        wait_placement(control_plane, real, "web", lambda p: p.get("node-a", 0) == 0 and sum(p.values()) == 1)
    finished = max(w2.off.values()) - killed
    lowest = min(x for x in (w.lowest, w2.lowest) if x is not None)
    print(f"[surge figures] crash mid-move: the next process finished it {finished:.1f}s after the kill "
          f"(lease takeover included); lowest Ready {lowest}")
    assert lowest >= 1
    assert_restored(real, "web", before, rs_before)
    control_plane.wait_for(lambda: b.metric("kdesched_surge_moves_total", outcome="done") >= 1, 15,
                           what="b to end the move done")


def test_an_unschedulable_surge_pod_is_given_up_and_the_owner_restored_within_the_timeout(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """The PDB allows nothing and no other node has room: the extra pod stays Pending. At
    replacementTimeoutSeconds the move is given up: replicas back, the Pending pod removed by the
    ReplicaSet, the pod that had to go untouched, and no second try right away."""
    real.node("node-a")
    real.deployment("web", 1, annotations=READY_3S, cpu="1")
    wait_placement(control_plane, real, "web", lambda p: p == {"node-a": 1})
    control_plane.wait_for(lambda: len(ready_pods(real, "web")) == 1, 30, what="web Ready")
    real.node("spare-1", cpu="500m")  # too small for the extra pod
    real.pdb("web", {"app": "web"}, min_available=1)
    real.wait_pdb_observed("default", "web")
    before, rs_before = deployment(real, "web"), replicasets(real, "web")
    original = {p["metadata"]["uid"] for p in app_pods(real, "web")}
    timeout = 10
    s = start_serve(serves, tmp_path, control_plane.admin_kubeconfig, safety={"replacementTimeoutSeconds": timeout})
    wait_leading(control_plane, real, s)
    with Watcher(real, "web", original) as w, logged(s):
        set_taints(real, "node-a", [GPU])
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 2, 15, interval=0.05,
                               what="the scale-up")
        up = time.monotonic()
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, timeout + 15, interval=0.1,
                               what="the replicas restored")
        restored = time.monotonic() - up
        control_plane.wait_for(lambda: len(app_pods(real, "web")) == 1, 15, what="the Pending pod removed")
        time.sleep(3)  # no second try right away (the workload is blocked from surging for a while)
    print(f"[surge figures] unschedulable surge pod: replicas restored {restored:.1f}s after the scale-up "
          f"(replacementTimeoutSeconds {timeout}); lowest Ready {w.lowest}")
    assert restored <= timeout + 3  # the timeout, plus the 1 s repeat that finds it passed and the write
    assert {p["metadata"]["uid"] for p in app_pods(real, "web")} == original and not w.off
    assert_restored(real, "web", before, rs_before)
    assert deployment(real, "web")["spec"]["replicas"] == 1
    assert s.metric("kdesched_surge_moves_total", outcome="gave-up") == 1
    ended = [e for e in real.events("default") if e.get("reason") == "SurgeMoveEnded"]
    assert ended and "no replacement was Ready" in ended[0]["note"]


def test_where_no_surge_is_possible_it_says_why_and_keeps_the_normal_rules(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """A StatefulSet, a Deployment with maxSurge 0 and one that opts out, one replica each, on a
    tainted node: each is evicted the normal way (a 1-replica workload is then down for a moment,
    as the allowance permits), and a NoSurge Event and the metric say why. A StatefulSet whose PDB
    allows nothing stays put (never a PDB violation)."""
    real.node("node-a")
    real.statefulset("db", 1, annotations=READY_3S)
    real.statefulset("pinned", 1, annotations=READY_3S)
    real.create(_no_surge("nosurge"))
    real.deployment("optout", 1, annotations=READY_3S)
    real.api.patch("/apis/apps/v1/namespaces/default/deployments/optout",
                   {"metadata": {"annotations": {"kdesched.dev/surge": "false"}}})
    for app in ("db", "pinned", "nosurge", "optout"):
        wait_placement(control_plane, real, app, lambda p: p == {"node-a": 1})
        control_plane.wait_for(lambda app=app: len(ready_pods(real, app)) == 1, 30, what=f"{app} Ready")
    real.pdb("pinned", {"app": "pinned"}, min_available=1)
    real.wait_pdb_observed("default", "pinned")
    real.node("spare-1")
    s = start_serve(serves, tmp_path, control_plane.admin_kubeconfig)
    wait_leading(control_plane, real, s)
    with logged(s):
        set_taints(real, "node-a", [GPU])
        for app in ("db", "nosurge", "optout"):
            wait_placement(control_plane, real, app, lambda p: p == {"spare-1": 1}, timeout=60,
                           what=f"{app} moved the normal way")
        time.sleep(2)
    assert placement_of(real, "pinned") == {"node-a": 1}  # its PDB allows nothing and it cannot surge
    reasons = {(e["regarding"]["name"], e["note"].split("cannot be moved surge-first: ")[-1][:40])
               for e in real.events("default") if e.get("reason") == "NoSurge"}
    names = {n for n, _ in reasons}
    assert {"db", "pinned", "nosurge", "optout"} <= names, reasons
    assert s.metric("kdesched_surge_fallbacks_total", reason="not-a-deployment") >= 2
    assert s.metric("kdesched_surge_fallbacks_total", reason="max-surge-0") >= 1
    assert s.metric("kdesched_surge_fallbacks_total", reason="opt-out") >= 1
    assert s.metric("kdesched_surge_moves_total", outcome="started") == 0
    for app in ("nosurge", "optout"):
        assert deployment(real, app)["spec"]["replicas"] == 1
    print(f"[surge figures] fallbacks: {sorted(reasons)}")


def test_a_quota_that_refuses_the_extra_pod_restores_at_once_and_falls_back(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    """A ResourceQuota of one pod: the scale-up cannot create the extra pod (the ReplicaSet says
    ReplicaFailure, exceeded quota). The move is given up at once (well before the timeout), the
    replicas restored, the reason reported; the workload then keeps the normal rules (an eviction,
    as the allowance permits)."""
    real.node("node-a")
    real.deployment("web", 1, annotations=READY_3S)
    wait_placement(control_plane, real, "web", lambda p: p == {"node-a": 1})
    control_plane.wait_for(lambda: len(ready_pods(real, "web")) == 1, 30, what="web Ready")
    real.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "one-pod", "namespace": "default"},
                 "spec": {"hard": {"pods": "1"}}})
    try:
        _quota_story(control_plane, real, serves, tmp_path)
    finally:  # the reset between tests does not know ResourceQuotas
        real.api.delete("/api/v1/namespaces/default/resourcequotas/one-pod")


def _quota_story(control_plane: ControlPlane, real: Cluster, serves: list[Serve], tmp_path: Path) -> None:
    control_plane.wait_for(lambda: ((real.get("/api/v1/namespaces/default/resourcequotas/one-pod") or {})
                                    .get("status") or {}).get("used", {}).get("pods") == "1", 30,
                           what="the quota's usage")
    real.node("spare-1")
    before, rs_before = deployment(real, "web"), replicasets(real, "web")
    s = start_serve(serves, tmp_path, control_plane.admin_kubeconfig)
    wait_leading(control_plane, real, s)
    with logged(s):
        set_taints(real, "node-a", [GPU])
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 2, 15, interval=0.05,
                               what="the scale-up")
        up = time.monotonic()
        control_plane.wait_for(lambda: deployment(real, "web")["spec"]["replicas"] == 1, 30, interval=0.1,
                               what="the replicas restored")
        restored = time.monotonic() - up
        control_plane.wait_for(lambda: s.metric("kdesched_surge_moves_total", outcome="gave-up") >= 1, 15,
                               what="the move given up")
        ended = [e for e in real.events("default") if e.get("reason") == "SurgeMoveEnded"]
        # then the normal rules: evicted (the allowance permits one of one), the replacement on spare-1
        wait_placement(control_plane, real, "web", lambda p: p == {"spare-1": 1}, timeout=60,
                       what="web moved the normal way")
    print(f"[surge figures] quota refusing the extra pod: replicas restored {restored:.1f}s after the scale-up; "
          f"then evicted the normal way")
    assert restored < 10, f"restored only {restored:.1f}s after the scale-up (the timeout is 120 s)"
    assert ended and "exceeded quota" in ended[0]["note"], ended
    assert s.metric("kdesched_surge_fallbacks_total", reason="recent-failure") >= 1
    assert_restored(real, "web", before, rs_before)


def _no_surge(name: str) -> dict[str, Any]:
    from tests.realk8s.cluster import workload_obj

    obj = workload_obj("Deployment", name, 1, annotations=READY_3S)
    obj["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return obj


def placement_of(cluster: Cluster, app: str) -> dict[str, int]:
    from tests.realk8s.serve_stories import placement

    return placement(cluster, app)


class Hpa:
    """An HPA stand-in: every 0.5-2 s, sets a random Deployment's replicas to a random value through
    the scale subresource (what an HPA or a GitOps sync does), and remembers the last value it wrote."""

    def __init__(self, cluster: Cluster, apps: list[str], values: tuple[int, ...], seed: int) -> None:
        self.cluster, self.apps, self.values = cluster, apps, values
        self.rng = random.Random(seed)
        self.last: dict[str, int] = {}
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.rng.uniform(0.5, 2.0)):
            app = self.rng.choice(self.apps)
            value = self.rng.choice(self.values)
            path = f"/apis/apps/v1/namespaces/default/deployments/{app}/scale"
            try:
                scale = self.cluster.api.get(path)
                scale["spec"]["replicas"] = value
                self.cluster.api.request("PUT", path, scale)
            except Exception:  # noqa: BLE001, S112 - a conflict with kdesched's write: the next tick writes again
                continue
            self.last[app] = value
            self.writes += 1


class Allowance:
    """Samples every app's Ready pods and desired replicas every 0.1 s; a workload is below its
    allowance when fewer pods are Ready than the lowest replicas it was asked for in the last
    ``window`` s (a scale-up's new pods need a few seconds; a scale-down lowers the bar at once)."""

    def __init__(self, cluster: Cluster, apps: list[str], window: float = 8.0) -> None:
        self.cluster, self.apps, self.window = cluster, apps, window
        self.desired: dict[str, list[tuple[float, int]]] = {a: [] for a in apps}
        self.worst: dict[str, int] = {a: 0 for a in apps}  # most pods short of the bar
        self.lowest: dict[str, int] = {}  # fewest Ready pods
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            try:
                deps = {d["metadata"]["name"]: d for d in self.cluster.api.get(
                    "/apis/apps/v1/namespaces/default/deployments")["items"]}
                pods = self.cluster.pods("default")
            except Exception:  # noqa: BLE001, S112 - a failed sample is skipped
                continue
            for app in self.apps:
                # kdesched's own +1 is not something the owner asked for: the bar is the HPA's value
                self.desired[app].append((now, deps[app]["spec"]["replicas"]))
                self.desired[app] = [(t, v) for t, v in self.desired[app] if now - t <= self.window]
                bar = min(v for _, v in self.desired[app])
                ready = sum(1 for p in pods if p["metadata"].get("labels", {}).get("app") == app
                            and not p["metadata"].get("deletionTimestamp") and is_ready(p))
                self.worst[app] = max(self.worst[app], bar - ready)
                self.lowest[app] = min(self.lowest.get(app, ready), ready)


SEEDS = [int(x) for x in os.environ.get("KDESCHED_SURGE_SEEDS", "29").split(",") if x.strip()]


@pytest.mark.parametrize("seed", SEEDS)
def test_replicas_changed_during_moves_as_an_hpa_would(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path,
        seed: int) -> None:
    """Three Deployments of 2 under a PDB ``minAvailable: 2`` on a tainted node, while an HPA stand-in
    rewrites their replicas (2-4) at random for 30 s: at 2 replicas the PDB allows nothing and the
    moves are surge-first, at 3-4 they are plain evictions paced by the allowance (maxUnavailable 1),
    and an HPA write lands in the middle of a move. No workload is ever below its allowance (more than
    1 short of the replicas it was asked for, or below the PDB's 2), and at the end every Deployment
    has the replicas the HPA last wrote (or its own), none of kdesched's +1 left, and nothing on the
    tainted node."""
    apps = ["a0", "a1", "a2"]
    real.node("node-a")
    for app in apps:
        real.deployment(app, 2, annotations=READY_3S)
    for app in apps:
        wait_placement(control_plane, real, app, lambda p: p == {"node-a": 2})
    for app in apps:
        control_plane.wait_for(lambda app=app: len(ready_pods(real, app)) == 2, 30, what=f"{app} Ready")
        real.pdb(app, {"app": app}, min_available=2)
        real.wait_pdb_observed("default", app)
    real.node("spare-1")
    real.node("spare-2")
    templates = {app: deployment(real, app)["spec"]["template"] for app in apps}
    rs_before = {app: replicasets(real, app) for app in apps}
    s = start_serve(serves, tmp_path, control_plane.admin_kubeconfig, sweepIntervalSeconds=5,
                    cooldown={"workloadSeconds": 0, "nodeSeconds": 0})
    wait_leading(control_plane, real, s)
    with Allowance(real, apps) as allowance, logged(s):
        set_taints(real, "node-a", [GPU])
        with Hpa(real, apps, (2, 3, 4), seed) as hpa:
            time.sleep(30)
        want = {app: hpa.last.get(app, 2) for app in apps}

        def settled() -> bool:
            on_a = [p for p in real.pods("default") if p["spec"].get("nodeName") == "node-a"
                    and not p["metadata"].get("deletionTimestamp")]
            return not on_a and all(deployment(real, app)["spec"]["replicas"] == want[app] for app in apps)
        control_plane.wait_for(settled, 120, interval=0.5, what="every pod off node-a with the HPA's replicas")
    moves = {o: s.metric("kdesched_surge_moves_total", outcome=o) for o in ("started", "done", "overridden", "gave-up")}
    print(f"[surge figures] HPA storm seed {seed}: {hpa.writes} replica writes, surge-first moves {moves}, worst "
          f"shortfall {allowance.worst}, lowest Ready {allowance.lowest}")
    assert all(v <= 1 for v in allowance.worst.values()), allowance.worst  # maxUnavailable 1
    assert all(v >= 2 for v in allowance.lowest.values()), allowance.lowest  # the PDB
    for app in apps:
        assert deployment(real, app)["spec"]["template"] == templates[app]
        assert replicasets(real, app) == rs_before[app]
    assert moves["done"] >= 1

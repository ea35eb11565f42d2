"""The operator's controls on a real control plane (issue 24's targets), with ``kdesched serve``
(the shipped policy), the real scheduler and controller-manager and the kubelet stand-in:

* a closed disruption window: a maintenance taint of six nodes evicts nothing, each node's run
  defers its pod (a "why not" Event on each node says so); when the window opens the move
  completes under pacing, never more than one replica down;
* a 20% namespace budget on a 10-pod namespace of five workloads: never more than 2 of its pods
  unavailable at once, and all of them move;
* 30% of the nodes NotReady: no eviction from a taint or a node joining until the nodes are back,
  then the pending move happens.

Assertions are about cluster state; time bounds are generous functional bounds.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self

import pytest

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import ControlPlane, Kubelet
from tests.realk8s.serve_stories import (
    GPU,
    ReadySampler,
    Serve,
    leader,
    maintenance,
    policy_text,
    set_ready,
    set_taints,
    set_unschedulable,
    uids,
    wait_placement,
    write_file,
)


def start(serves: list[Serve], tmp_path: Path, cp: ControlPlane, cluster: Cluster, **kdesched: Any) -> Serve:
    policy = write_file(tmp_path, "policy.yaml", policy_text(**kdesched))
    s = Serve(cp.admin_kubeconfig, policy, "a", workdir=tmp_path).start()
    serves.append(s)

    def check() -> bool:
        assert s.alive(), f"serve exited:\n{s.log()[-3000:]}"
        status, why = s.readyz()
        return leader(cluster) == "a" and status == 200 and "leader, watching" in why
    cp.wait_for(check, 60, what="serve to lead and watch")
    return s


def why_not(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.events("default") if e.get("reason") == reason
            and e.get("reportingController") == "kdesched.dev/descheduler"]


def test_a_closed_window_defers_a_taint_storm_and_the_move_completes_when_it_opens(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path) -> None:
    pool, spares = maintenance(control_plane, real)
    before = uids(real, "web")
    kubelet.ready_delay = 3.0
    now = datetime.now(UTC)
    began = now.replace(second=0, microsecond=0)
    ends = now + timedelta(seconds=60)  # the window closes evicting now and opens in a minute
    window = {"name": "change-freeze", "schedule": f"{began.minute} {began.hour} * * *",
              "duration": f"{int((ends - began).total_seconds())}s", "action": "forbid"}
    s = start(serves, tmp_path, control_plane, real, disruptionWindows=[window])
    for n in pool:  # kubectl taint nodes -l pool=a dedicated=gpu:NoSchedule
        set_taints(real, n, [GPU])
    control_plane.wait_for(lambda: len({e["regarding"]["name"] for e in why_not(real, "DisruptionWindow")}) == 6,
                           30, what="each pool node's run to defer its pod (a DisruptionWindow Event on each)")
    events = why_not(real, "DisruptionWindow")
    assert {e["regarding"]["name"] for e in events} == set(pool)
    assert all('"change-freeze"' in e["note"] and "1 eviction(s) held back" in e["note"] for e in events)
    assert datetime.now(UTC) < ends - timedelta(seconds=5), "the setup took too long to see the window closed"
    while datetime.now(UTC) < ends - timedelta(seconds=2):  # nothing moves while the window is closed
        assert uids(real, "web") == before
        time.sleep(0.5)
    with ReadySampler(real, "web") as sampler:
        wait_placement(control_plane, real, "web", lambda p: sum(p.values()) == 6 and set(p) <= set(spares),
                       timeout=150, interval=0.2, what="all six replicas on the spare nodes after the window")
    assert sampler.lowest is not None and sampler.lowest >= 5, f"{6 - sampler.lowest} replicas were down at once"
    settled = (datetime.now(UTC) - ends).total_seconds()
    print(f"[window figures] the six moves settled {settled:.1f}s after the window opened, "
          f"never fewer than {sampler.lowest} of 6 Ready")
    assert not before & uids(real, "web") and len(uids(real, "web")) == 6  # each moved once
    assert s.alive()


class Unavailable:
    """Samples, in a thread, how many of a namespace's ``desired`` pods are not Ready (missing,
    terminating, or not Ready yet) and keeps the highest count seen."""

    def __init__(self, cluster: Cluster, namespace: str, desired: int) -> None:
        self.cluster, self.namespace, self.desired = cluster, namespace, desired
        self.highest = 0
        self.samples = 0
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
                pods = self.cluster.pods(self.namespace)
            except Exception:  # noqa: BLE001, S112 - a failed sample is skipped
                continue
            ready = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp") and is_ready(p))
            self.samples += 1
            self.highest = max(self.highest, self.desired - ready)


@pytest.mark.parametrize("budget", [True, False], ids=["budget-20%", "no-budget"])
def test_a_namespace_budget_of_20_percent_keeps_at_most_2_of_10_pods_down(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path,
        budget: bool) -> None:
    """Without the budget (the control run) the same taint takes 5 pods down at once (one per
    workload, each at its allowance): the sampler sees it, so the 20% run's bound is meaningful."""
    real.namespace("shop", labels={"tier": "web"})
    real.node("node-1", unschedulable=True)
    real.node("gpu-1")
    for w in range(5):  # five workloads of two: the per-workload allowance alone would let 5 go at once
        real.deployment(f"app{w}", 2, namespace="shop", cpu="100m")
    real.wait_running("shop", 10)
    set_unschedulable(real, "node-1", False)
    kubelet.ready_delay = 3.0
    budgets = [{"name": "shop", "maxUnavailable": "20%", "namespaceSelector": {"matchLabels": {"tier": "web"}}}]
    start(serves, tmp_path, control_plane, real, disruptionBudgets=budgets if budget else [])
    with Unavailable(real, "shop", 10) as sampler:
        set_taints(real, "gpu-1", [GPU])

        def moved() -> bool:
            pods = [p for p in real.pods("shop") if not p["metadata"].get("deletionTimestamp")]
            return len(pods) == 10 and all(is_ready(p) and p["spec"].get("nodeName") == "node-1" for p in pods)
        control_plane.wait_for(moved, 180, interval=0.2, what="all ten pods moved off gpu-1")
    print(f"[budget figures] budget={budget}: at most {sampler.highest} of 10 pods down at once "
          f"({sampler.samples} samples)")
    assert sampler.samples > 20
    if not budget:
        assert sampler.highest >= 3, sampler.highest
        return
    assert sampler.highest <= 2, f"{sampler.highest} of the namespace's 10 pods were down at once (budget 20%)"
    assert any("shop" in e["note"] for e in why_not(real, "DisruptionBudget")), "no DisruptionBudget Event"


def test_30_percent_of_nodes_not_ready_brakes_every_trigger_until_healthy(
        control_plane: ControlPlane, real: Cluster, serves: list[Serve], tmp_path: Path) -> None:
    real.node("node-1", unschedulable=True)
    real.node("gpu-1")
    real.deployment("shop", 2, cpu="200m")
    wait_placement(control_plane, real, "shop", lambda p: p == {"gpu-1": 2})
    set_unschedulable(real, "node-1", False)
    for i in range(5):
        real.node(f"idle-{i}", unschedulable=True)  # healthy, cordoned: the moves go to node-1
    down = [f"down-{i}" for i in range(3)]
    for n in down:
        real.node(n, unschedulable=True, ready=False)  # 3 of 10 nodes NotReady: 30% > 20%
    before = uids(real, "shop")
    s = start(serves, tmp_path, control_plane, real, healthBrake={"settleSeconds": 5})
    set_taints(real, "gpu-1", [GPU])  # a taint event
    real.node("new-1", unschedulable=True)  # a node joining (still 3 of 11 NotReady)
    set_unschedulable(real, "new-1", False)
    control_plane.wait_for(lambda: any(e["regarding"]["name"] == "gpu-1" for e in why_not(real, "HealthBrake")),
                           30, what="the taint run to be braked (a HealthBrake Event on the node)")
    status, text = s.readyz()
    assert status == 200 and "health brake" in text and "not a failure" in text
    assert s.metric("kdesched_health_brake", reason="share") == 1
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:  # no trigger evicts while the cluster is unhealthy
        assert uids(real, "shop") == before
        time.sleep(0.5)
    for n in down:
        set_ready(real, n, True)
    wait_placement(control_plane, real, "shop", lambda p: sum(p.values()) == 2 and "gpu-1" not in p, timeout=90,
                   what="the pending move once the cluster is healthy again")
    assert not before & uids(real, "shop")
    assert s.metric("kdesched_health_brake", reason="share") == 0

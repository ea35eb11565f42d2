"""Several events at once on a real control plane: the disruption ledger and paced moves that finish.

The stories of issue 21, with ``kdesched serve`` (the shipped policy), the real scheduler and
controller-manager and the kubelet stand-in:

* a maintenance taint on a six-node pool (six taint events back to back, one replica of a
  6-replica Deployment on each, replacements Ready 3 s after they are bound): all six move, never
  more than one down at a time, through six concurrent node runs that share one ledger;
* a node joins where three replicas are piled on one node: both moves happen (the paced second
  eviction of a balance run is repeated, not left to the sweep);
* the leader killed in the middle of a paced move: the next one continues it from the ledger.

Assertions are about cluster state; the time bounds are generous functional bounds ("the move
finishes"), the figures themselves are bench/bench_reaction.py's job.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet
from tests.realk8s.ledger_view import ledger_json
from tests.realk8s.serve_stories import (
    GPU,
    NS,
    UNINITIALIZED,
    ReadySampler,
    Serve,
    app_pods,
    leader,
    maintenance,
    placement,
    policy_text,
    set_taints,
    set_unschedulable,
    uids,
    wait_placement,
    write_file,
)


def start(serves: list[Serve], tmp_path: Path, cp: ControlPlane, identity: str) -> Serve:
    policy = write_file(tmp_path, "policy.yaml", policy_text())
    s = Serve(cp.admin_kubeconfig, policy, identity, workdir=tmp_path).start()
    serves.append(s)
    return s


def wait_leading(cp: ControlPlane, cluster: Cluster, s: Serve, timeout: float = 60) -> None:
    def check() -> bool:
        assert s.alive(), f"serve {s.identity} exited:\n{s.log()[-3000:]}"
        status, why = s.readyz()
        return leader(cluster) == s.identity and status == 200 and "leader, watching" in why
    cp.wait_for(check, timeout, what=f"{s.identity} to lead and watch")


def ledger(cluster: Cluster) -> dict[str, object]:
    return ledger_json(cluster, NS)


def evictions(cluster: Cluster, app: str) -> int:
    """Evictions kdesched reported for ``app``'s pods (one Event each, reason = the strategy)."""
    return sum(1 for e in cluster.events("default") if (e.get("regarding") or {}).get("name", "").startswith(app + "-")
               and e.get("reportingController") == "kdesched.dev/descheduler" and e.get("reason", "").startswith("RemovePods"))


def on_spares(spares: list[str], replicas: int) -> object:
    return lambda p: sum(p.values()) == replicas and set(p) <= set(spares)


def three_on_gpu(cp: ControlPlane, cluster: Cluster) -> set[str]:
    """Deployment ``shop``'s 3 replicas on ``gpu-1``, ``node-1`` empty and schedulable: their uids."""
    cluster.node("node-1", unschedulable=True)
    cluster.node("gpu-1")
    cluster.deployment("shop", 3, cpu="200m")
    wait_placement(cp, cluster, "shop", lambda p: p == {"gpu-1": 3})
    set_unschedulable(cluster, "node-1", False)
    return uids(cluster, "shop")


def test_maintenance_taint_of_six_nodes_moves_all_six_one_at_a_time(control_plane: ControlPlane, real: Cluster,
                                                                    kubelet: Kubelet, serves: list[Serve],
                                                                    tmp_path: Path) -> None:
    pool, spares = maintenance(control_plane, real)
    before = uids(real, "web")
    kubelet.ready_delay = 3.0  # replacements take 3 s to become Ready
    s = start(serves, tmp_path, control_plane, "a")
    wait_leading(control_plane, real, s)
    with ReadySampler(real, "web") as sampler:
        began = time.monotonic()
        for n in pool:  # kubectl taint nodes -l pool=a dedicated=gpu:NoSchedule
            set_taints(real, n, [GPU])
        wait_placement(control_plane, real, "web", on_spares(spares, 6), timeout=150, interval=0.2,
                       what="all six replicas on the spare nodes")
        took = time.monotonic() - began
    assert sampler.samples > 20 and sampler.lowest is not None
    assert sampler.lowest >= 5, f"{6 - sampler.lowest} replicas were down at once (allowance 1); took {took:.1f}s"
    assert not before & uids(real, "web") and len(uids(real, "web")) == 6  # each evicted once, none twice
    assert evictions(real, "web") == 6  # one Event per eviction: nothing evicted twice
    # the move is over: nothing is held any more (the last pod in flight is settled lazily, by the
    # next run that reads every pod, or expires; once its replacement is Ready it holds nothing back)
    assert not any(m.get("h") for m in (ledger(real).get("m") or {}).values()), ledger(real)


def test_a_node_joining_three_piled_replicas_gets_both_moves(control_plane: ControlPlane, real: Cluster,
                                                            serves: list[Serve], tmp_path: Path) -> None:
    real.node("node-1")
    real.node("node-2", unschedulable=True)
    real.deployment("nginx", 3, cpu="500m")
    wait_placement(control_plane, real, "nginx", lambda p: p == {"node-1": 3})
    set_unschedulable(real, "node-2", False)
    before = uids(real, "nginx")
    s = start(serves, tmp_path, control_plane, "a")
    wait_leading(control_plane, real, s)
    real.node("node-3", taints=[UNINITIALIZED])  # a cloud node; initialised a moment later
    time.sleep(0.3)
    set_taints(real, "node-3", [])
    got = wait_placement(control_plane, real, "nginx", lambda p: p == {"node-1": 1, "node-2": 1, "node-3": 1},
                         timeout=60, what="one nginx per node")
    assert got == {"node-1": 1, "node-2": 1, "node-3": 1}
    assert len(before - uids(real, "nginx")) == 2  # exactly the two moves needed
    assert "continuing balance:" in s.log()  # the second move came from the repeat (the sweep is off)
    time.sleep(1)
    assert len(before - uids(real, "nginx")) == 2


def test_a_new_leader_continues_a_paced_move_from_the_ledger(control_plane: ControlPlane, real: Cluster,
                                                           kubelet: Kubelet, serves: list[Serve],
                                                           tmp_path: Path) -> None:
    before = three_on_gpu(control_plane, real)
    kubelet.ready_delay = 4.0
    a = start(serves, tmp_path, control_plane, "a")
    wait_leading(control_plane, real, a)
    set_taints(real, "gpu-1", [GPU])
    # the first replica is evicted and the other two are held in the ledger for the move to continue
    control_plane.wait_for(lambda: len(before - uids(real, "shop")) == 1 and any(
        m.get("h") for m in (ledger(real).get("m") or {}).values()), 30, what="one eviction and held pods")
    a.stop(signal.SIGKILL)  # a crash: no shutdown, no handover
    b = start(serves, tmp_path, control_plane, "b")
    wait_leading(control_plane, real, b, timeout=90)
    wait_placement(control_plane, real, "shop", lambda p: p == {"node-1": 3}, timeout=90,
                   what="the new leader to finish the move")
    assert not before & uids(real, "shop")
    assert "resuming" in b.log() and all(p["spec"].get("nodeName") == "node-1" for p in app_pods(real, "shop"))
    assert placement(real, "shop") == {"node-1": 3}


def test_a_taint_made_while_serve_restarts_is_acted_on_at_start(control_plane: ControlPlane, real: Cluster,
                                                                serves: list[Serve], tmp_path: Path) -> None:
    """Issue 25's start-up reconcile: the new leader compares the nodes with the record the last one
    kept on the leader Lease, and acts on the taint nobody watched being made."""
    real.node("node-1", unschedulable=True)
    real.node("gpu-1")
    real.deployment("shop", 1, cpu="200m")
    wait_placement(control_plane, real, "shop", lambda p: p == {"gpu-1": 1})
    set_unschedulable(real, "node-1", False)
    a = start(serves, tmp_path, control_plane, "a")
    wait_leading(control_plane, real, a)
    assert a.stop() == 0  # SIGTERM: the record of what it saw is written before the Lease is released
    lease = real.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kdesched-leader") or {}
    assert "kdesched.dev/node-record" in ((lease.get("metadata") or {}).get("annotations") or {})
    set_taints(real, "gpu-1", [GPU])  # while no kdesched runs
    b = start(serves, tmp_path, control_plane, "b")
    wait_leading(control_plane, real, b)
    ready = time.monotonic()
    wait_placement(control_plane, real, "shop", lambda p: p == {"node-1": 1}, timeout=30,
                   what="the taint made while serve was down to be acted on")
    took = time.monotonic() - ready
    assert "start-up reconcile: 1 node change(s)" in b.log(), b.log()[-3000:]
    assert took < 30, f"acted on {took:.1f}s after serve was ready"
    print(f"a taint made while serve was down: replacement Ready {took:.2f}s after the new leader was ready")


def test_a_move_that_timed_out_goes_on_when_its_replacement_turns_ready(control_plane: ControlPlane, real: Cluster,
                                                                       kubelet: Kubelet, serves: list[Serve],
                                                                       tmp_path: Path) -> None:
    """A replacement slower than ``replacementTimeoutSeconds``: the move's repeats end ("no progress"),
    the ledger gives the held pods up, and the sweep is off. When the replacement turns Ready at last,
    serve's watch cache sees it and the move goes on: the other two replicas leave the tainted node.
    Before, nothing looked at the node again until another event for it or the sweep (900 s by
    default): the suspected cause of the pool storm's one pod left on a tainted node in CI."""
    before = three_on_gpu(control_plane, real)
    kubelet.ready_delay = 14.0  # longer than the repeats' bound: max(timeout 4 s, longest back-off 10 s)
    policy = write_file(tmp_path, "policy.yaml", policy_text(safety={"replacementTimeoutSeconds": 4}))
    s = Serve(control_plane.admin_kubeconfig, policy, "a", workdir=tmp_path).start()
    serves.append(s)
    wait_leading(control_plane, real, s)
    set_taints(real, "gpu-1", [GPU])
    control_plane.wait_for(lambda: "nothing moved for" in s.log(), 40, what="the first wave's repeats to time out")
    assert len(before - uids(real, "shop")) == 1, s.log()[-3000:]
    wait_placement(control_plane, real, "shop", lambda p: p == {"node-1": 3}, timeout=120,
                   what="the move to go on once each replacement is Ready (sweep off)")
    assert not before & uids(real, "shop") and len(uids(real, "shop")) == 3  # each evicted once
    assert evictions(real, "shop") == 3
    assert "goes on: progress on Deployment/default/shop" in s.log(), s.log()[-3000:]

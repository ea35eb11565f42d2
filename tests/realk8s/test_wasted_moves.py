"""Checked moves on a real control plane (issue 24's target): a scheduler that puts the replacement
back on the node it left makes the move **wasted**, the workload is **backed off**, and there is no
eviction loop.

The set-up: ``web`` (one replica) runs on ``node-a``; ``node-a`` gets a NoSchedule taint ``web``
does not tolerate; ``spare-1`` is free, so kdesched's "somewhere to go" predicts the replacement
lands there. But every pod of ``web`` is pinned to ``node-a`` (``spec.nodeName`` in the template:
the degenerate scheduler that always puts the replacement back; the kubelet stand-in runs it
there). ``kdesched serve`` (the shipped policy, a sweep every 2 s so the taint strategy looks again
and again) evicts, the replacement becomes Ready on ``node-a``, and the next run's settle of the
disruption ledger finds the move wasted.

Time is compressed: the back-off base is ``BASE`` s instead of the 300 s default (the workload
cool-down), so the issue's "at most 2 evictions of that workload in 10 minutes" (2 x the base) is
"at most 2 in 2 x BASE s" here. The control run (back-off off: ``wastedMoveBaseSeconds: 0``) shows
the loop the back-off prevents: the same set-up evicts again at every sweep.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Self

import pytest

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet
from tests.realk8s.ledger_view import ledger_text
from tests.realk8s.serve_stories import (
    GPU,
    NS,
    Serve,
    leader,
    policy_text,
    set_taints,
    wait_placement,
    write_file,
)

BASE = 20.0  # the compressed back-off base (default: cooldown.workloadSeconds, 300 s)
TAINTS = "RemovePodsViolatingNodeTaints"


class Incarnations:
    """Samples, in a thread, every pod uid of ``app`` ever seen and when it was first seen: each
    uid after the first is one eviction's replacement."""

    def __init__(self, cluster: Cluster, app: str) -> None:
        self.cluster, self.app = cluster, app
        self.first_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _sample(self) -> None:
        now = time.monotonic()
        for p in self.cluster.pods("default", f"app={self.app}"):
            self.first_seen.setdefault(p["metadata"]["uid"], now)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._sample()
            except Exception:  # noqa: BLE001, S112 - a failed sample is skipped
                continue

    def replacements(self) -> list[float]:
        """When each replacement was first seen (sorted)."""
        return sorted(self.first_seen.values())[1:]


def events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.events("default") if e.get("reason") == reason
            and e.get("reportingController") == "kdesched.dev/descheduler"]


def story(log: str) -> str:
    """The lines of serve's log that tell the moves' story (for a failure's message)."""
    keep = ("evicted ", "checked move", "not evicting", "pacing ", "lost", "unconfirmed", "WARNING", "ERROR")
    return "\n".join(line[:400] for line in log.splitlines() if any(k in line for k in keep))[-12000:]


def ledger_annotation(cluster: Cluster) -> str:
    return ledger_text(cluster, NS)


@pytest.mark.parametrize("backoff", [True, False], ids=["backoff", "no-backoff"])
def test_a_replacement_put_back_on_its_node_is_wasted_and_backed_off_without_a_loop(
        control_plane: ControlPlane, real: Cluster, kubelet: Kubelet, serves: list[Serve], tmp_path: Path,
        backoff: bool) -> None:
    real.node("node-a")
    real.node("spare-1")
    real.deployment("web", 1, nodeName="node-a")
    wait_placement(control_plane, real, "web", lambda p: p == {"node-a": 1})
    kubelet.ready_delay = 1.0
    cooldown = {"workloadSeconds": 0, "nodeSeconds": 0, "wastedMoveBaseSeconds": BASE if backoff else 0}
    # the story is about evictions' checked moves: a 1-replica Deployment would otherwise be moved
    # surge-first (its wasted surge-first move is tests/evictor/test_surge.py's)
    policy = write_file(tmp_path, "policy.yaml", policy_text(cooldown=cooldown, moves={"surge": False}))
    s = Serve(control_plane.admin_kubeconfig, policy, "a", workdir=tmp_path, sweep_interval=2).start()
    serves.append(s)

    def leading() -> bool:
        assert s.alive(), f"serve exited:\n{s.log()[-3000:]}"
        status, why = s.readyz()
        return leader(real) == "a" and status == 200 and "leader, watching" in why
    control_plane.wait_for(leading, 60, what="serve to lead and watch")

    window = 2 * BASE if backoff else BASE  # the 10 minutes at a 300 s base, compressed
    with Incarnations(real, "web") as seen:
        set_taints(real, "node-a", [GPU])
        control_plane.wait_for(lambda: seen.replacements(), 30, what="the first eviction's replacement")
        first = seen.replacements()[0]
        while time.monotonic() < first + window:
            assert s.alive(), s.log()[-3000:]
            time.sleep(0.5)
        in_window = [t for t in seen.replacements() if t < first + window]
    print(f"[wasted-move figures] backoff={backoff}: {len(in_window)} eviction(s) of web in {window:g}s "
          f"after the first (sweep every 2s)")
    if not backoff:
        # the control run: the same set-up evicts again and again (the loop the back-off prevents)
        assert len(in_window) >= 3, f"only {len(in_window)} evictions without the back-off"
        assert s.metric("kdesched_moves_total", strategy=TAINTS, outcome="wasted") >= 2
        return
    assert len(in_window) <= 2, (f"{len(in_window)} evictions of web in {window:g}s: an eviction loop "
                                 f"(replacements at +{', +'.join(f'{t - first:.1f}' for t in in_window)}s)\n"
                                 + story(s.log()) + "\nledger:\n" + ledger_annotation(real))
    # the move is flagged wasted: metric, a WastedMove Event on the Deployment, the back-off in the ledger
    assert s.metric("kdesched_moves_total", strategy=TAINTS, outcome="wasted") >= 1
    wasted = events(real, "WastedMove")
    assert wasted and wasted[0]["regarding"]["kind"] == "Deployment" and wasted[0]["regarding"]["name"] == "web"
    assert "landed back on node node-a" in wasted[0]["note"] and "predicted spare-1" in wasted[0]["note"]
    assert f"Deployment/default/web|{TAINTS}" in ledger_annotation(real)
    # and held back with its reason, where operators look
    held = events(real, "WastedMoveBackoff")
    assert held and "backed off after" in held[0]["note"] and "landed back on node node-a" in held[0]["note"]
    assert s.metric("kdesched_reactor_gate_refusals_total", reason="wasted-move-backoff") >= 1

"""The cluster-health brake: is the cluster too unhealthy for kdesched to add evictions?

Why: an event-driven descheduler acts when the cluster changes, and it changes most during an
incident. When a zone goes down or the network flaps, nodes turn NotReady, the node lifecycle
controller taints them ``node.kubernetes.io/unreachable``, and every one of those changes is an
event. Rebalancing then adds load (rescheduling, image pulls, cold caches) exactly when the
cluster can least take it, and the pods it moves may be moved back minutes later. Karpenter stops
node repair when more than 20% of a pool is unhealthy for the same reason.

This module only judges one snapshot: :func:`judge` says whether the brake holds and why, from the
nodes the run saw. Whether the brake is still settling after the cluster looked healthy again is
decided with the time the disruption ledger keeps (``Ledger.unhealthy_at``), so every process
agrees (:mod:`kdesched.reactor.controls`). Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kdesched.model.records import Node

ZONE_LABEL = "topology.kubernetes.io/zone"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True, slots=True)
class HealthBrakeSettings:
    """``kdesched.healthBrake`` (docs/policies.md)."""

    enabled: bool = True
    max_unhealthy_share: float = 0.2  # brake when MORE than this share of nodes is unhealthy
    zones: bool = True  # brake when every node of a zone is unhealthy
    settle_seconds: float = 60.0  # healthy for this long before evictions resume


@dataclass(frozen=True, slots=True)
class HealthVerdict:
    """What one snapshot says. ``reason`` is the low-cardinality metric label (``share`` or
    ``zone``; "" when healthy); ``message`` is the sentence the report, Events and /readyz give."""

    unhealthy: bool
    reason: str
    message: str
    nodes: int
    unhealthy_nodes: tuple[str, ...] = ()
    zones_down: tuple[str, ...] = ()


def node_unhealthy(node: Node) -> str:
    """Why ``node`` counts as unhealthy ("" if it does not): its Ready condition is False or
    Unknown, or the node lifecycle controller has tainted it unreachable or not-ready."""
    if not node.ready:
        return "NotReady"
    for t in node.taints:
        if t.key == UNREACHABLE_TAINT:
            return "unreachable"
        if t.key == NOT_READY_TAINT and t.effect in ("NoExecute", "NoSchedule"):
            return "not-ready taint"
    return ""


def judge(nodes: Iterable[Node], settings: HealthBrakeSettings) -> HealthVerdict:
    """The brake's verdict on ``nodes`` (every node of the cluster, as the run's snapshot has them)."""
    all_nodes = list(nodes)
    total = len(all_nodes)
    bad = sorted(n.name for n in all_nodes if node_unhealthy(n))
    if not settings.enabled or total == 0:
        return HealthVerdict(False, "", "", total)
    share = len(bad) / total
    zones: dict[str, list[bool]] = {}
    for n in all_nodes:
        zone = n.labels.get(ZONE_LABEL)
        if zone:
            zones.setdefault(zone, []).append(bool(node_unhealthy(n)))
    down = sorted(z for z, states in zones.items() if states and all(states)) if settings.zones else []
    named = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    if share > settings.max_unhealthy_share:
        return HealthVerdict(True, "share", (
            f"health brake: {len(bad)} of {total} nodes ({share:.0%}) are NotReady or unreachable ({named}), more "
            f"than healthBrake.maxUnhealthyShare {settings.max_unhealthy_share:g}; no eviction is admitted until "
            f"the cluster has been healthy for {settings.settle_seconds:g}s"), total, tuple(bad), tuple(down))
    if down:
        return HealthVerdict(True, "zone", (
            f"health brake: every node of zone(s) {', '.join(down)} is NotReady or unreachable ({named}); no "
            f"eviction is admitted until the cluster has been healthy for {settings.settle_seconds:g}s"),
            total, tuple(bad), tuple(down))
    return HealthVerdict(False, "", "", total, tuple(bad))


def settling(unhealthy_at: float | None, now: float, settings: HealthBrakeSettings) -> float | None:
    """When the brake lifts (epoch seconds) if the cluster, healthy now, was last seen unhealthy at
    ``unhealthy_at`` less than ``settleSeconds`` ago; None when the brake does not hold."""
    if not settings.enabled or unhealthy_at is None:
        return None
    ends = unhealthy_at + settings.settle_seconds
    return ends if ends > now else None

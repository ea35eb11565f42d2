"""The cluster-health brake: is the cluster too unhealthy for kdesched to add evictions?

Why: an event-driven descheduler acts when the cluster changes, and it changes most during an
incident. When a zone goes down or the network flaps, nodes turn NotReady, the node lifecycle
controller taints them ``node.kubernetes.io/unreachable``, and every one of those changes is an
event. Rebalancing then adds load (rescheduling, image pulls, cold caches) exactly when the
cluster can least take it, and the pods it moves may be moved back minutes later. Karpenter stops
node repair when more than 20% of a pool is unhealthy for the same reason.

This module only judges one snapshot: :func:`judge` says whether the brake holds and why, from the
nodes the run saw. Whether the brake is still settling after the cluster looked healthy again is
decided with the time the disruption ledger keeps (``Ledger.unhealthy_at``, the API server's
clock), so every process agrees: :class:`HealthBrake` is the pipeline's control, and ``kdesched
run`` asks the same control before it decides. Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Node

UNHEALTHY_WRITE_SECONDS = 5.0  # the ledger's "last unhealthy" is moved at most this often

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


@dataclass(frozen=True, slots=True)
class BrakeState:
    """The health brake's decision for one run (the report's, /readyz's and the gauge's)."""

    holds: bool
    reason: str = ""  # share | zone | settling (the gauge's label)
    message: str = ""
    until: float | None = None  # when the run should look again
    verdict: HealthVerdict | None = None  # None: the snapshot does not hold every node (not judged)
    record_unhealthy: bool = False  # move the ledger's "last unhealthy" to now


def brake_state(settings: HealthBrakeSettings, ctx: RunContext) -> BrakeState:
    """Judge the run's snapshot (when it holds every node: a node run's pods may be only its node's),
    else go by the ledger's "last unhealthy" alone; then the settle time."""
    s, ledger, now = settings, ctx.ledger, ctx.now
    if not s.enabled:
        return BrakeState(False)
    verdict = judge(ctx.snapshot.nodes.values(), s) if ctx.all_nodes else None
    if verdict is not None and verdict.unhealthy:
        due = ledger.unhealthy_at is None or now - ledger.unhealthy_at >= min(UNHEALTHY_WRITE_SECONDS,
                                                                              s.settle_seconds / 4)
        return BrakeState(True, verdict.reason, verdict.message, now + max(s.settle_seconds, 1.0), verdict,
                          record_unhealthy=due)
    ends = settling(ledger.unhealthy_at, now, s)
    if ends is not None:
        ago = max(0, int(now - (ledger.unhealthy_at or now)))
        return BrakeState(True, "settling", (
            f"health brake: the cluster was last seen unhealthy {ago}s ago; evictions resume once it has been "
            f"healthy for healthBrake.settleSeconds ({s.settle_seconds:g}s), in {max(0.0, ends - now):.0f}s"),
            ends, verdict)
    return BrakeState(False, verdict=verdict)


@dataclass(frozen=True, slots=True)
class HealthBrake:
    """The pipeline's first control: no eviction while the cluster is unhealthy, or settling."""

    settings: HealthBrakeSettings = field(default_factory=HealthBrakeSettings)
    name: str = "health-brake"

    def start(self, ctx: RunContext) -> HealthCheck:
        return HealthCheck(brake_state(self.settings, ctx), ctx)


class HealthCheck(Check):
    def __init__(self, state: BrakeState, ctx: RunContext) -> None:
        self.state, self.ctx = state, ctx

    def run(self) -> Verdict | None:
        return Verdict(Reason.HEALTH_BRAKE, self.state.message, self.state.until) if self.state.holds else None

    @property
    def writes(self) -> bool:
        return self.state.record_unhealthy

    def record(self, ledger: Ledger, admitted: int, stamp: float) -> Ledger:
        return ledger.with_unhealthy(self.ctx.now) if self.state.record_unhealthy else ledger

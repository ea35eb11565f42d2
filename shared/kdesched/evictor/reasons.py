"""Why an eviction did not go (now): one enum for every refusal and hold-back, and the typed verdict.

Why: 0.1 carried refusal reasons as strings and every consumer matched them by prefix, in three
taxonomies (the planner's metrics, the reactor's metrics, the "why not" Events), so rewording a
message silently changed a metric label or dropped an Event. A refusal now carries a
:class:`Reason`; reports, Events, metrics and logs take their names from it, and the message is
for people only.

Here, below the admission pipeline (:mod:`kdesched.admission`), because the planner
(:mod:`kdesched.evictor.planner`) refuses too (a PodDisruptionBudget, nowhere to go) and reports
with the same enum.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Reason(enum.StrEnum):
    """Every reason kdesched holds an eviction back. The value is the metric label."""

    # the admission pipeline, in its order (kdesched.admission.pipeline)
    HEALTH_BRAKE = "health-brake"
    ALERT_BRAKE = "alert-brake"
    IN_FLIGHT = "in-flight-elsewhere"
    OWNER_CHANGED = "owner-changed"  # its owner changed during a surge-first move this run settled
    BACKOFF = "wasted-move-backoff"
    COOLDOWN_WORKLOAD = "cooldown-workload"
    COOLDOWN_NODE = "cooldown-node"
    LEDGER_FULL = "ledger-full"
    WINDOW = "window"
    FRESH_CHANGE = "fresh-node-change"  # the node's taints or labels were written seconds ago
    RATE_LIMIT = "rate-limit"
    BUDGET = "budget"
    # the planner
    NO_UID = "no-uid"
    PDB = "disruption-budget"  # a PodDisruptionBudget (the API server's, planned against)
    MULTIPLE_PDBS = "multiple-pdbs"  # the API server refuses to evict a pod under two PDBs
    NOWHERE_TO_GO = "nowhere-to-go"
    PACED = "paced"
    OTHER = "other"

    @property
    def event(self) -> str | None:
        """The reason of the "why not" Event posted for it (kdesched.reactor.io.whynot), or None when
        none is posted (a rate limit passes in seconds; a pod without uid is a broken object)."""
        return _EVENTS.get(self)

    @property
    def transient(self) -> bool:
        """Does it last only while something else settles (a replacement getting Ready, another
        run's eviction)? A node's run refused for it is repeated like a paced one."""
        return self in (Reason.PDB, Reason.NOWHERE_TO_GO, Reason.IN_FLIGHT, Reason.OWNER_CHANGED)

    @property
    def defers(self) -> bool:
        """Held for the whole run until a time (reported ``deferred``), not refused pod by pod."""
        return self in (Reason.HEALTH_BRAKE, Reason.ALERT_BRAKE, Reason.WINDOW, Reason.FRESH_CHANGE)


_EVENTS = {
    Reason.HEALTH_BRAKE: "HealthBrake", Reason.ALERT_BRAKE: "AlertBrake", Reason.BACKOFF: "WastedMoveBackoff",
    Reason.COOLDOWN_WORKLOAD: "CoolDown", Reason.COOLDOWN_NODE: "CoolDown", Reason.WINDOW: "DisruptionWindow",
    Reason.BUDGET: "DisruptionBudget", Reason.PDB: "PodDisruptionBudget", Reason.MULTIPLE_PDBS: "PodDisruptionBudget",
    Reason.NOWHERE_TO_GO: "NowhereToGo",
    Reason.PACED: "Paced",
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A control's answer for one eviction (or a whole run): not now, for ``reason``. ``until``:
    when asking again may give another answer (epoch seconds, the API server's clock)."""

    reason: Reason
    message: str
    until: float | None = None

    def __str__(self) -> str:
        return self.message

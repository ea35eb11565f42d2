"""In flight elsewhere: a pod another run admitted is that run's eviction.

Why: a second delivery of the same event, or another replica of a function, plans from a snapshot
where the pod is not terminating yet; evicting it again would count it twice (found by the storm
test: the Eviction API answered 200 a second time). Until the admitting run's deadline has passed
the pod is its eviction (:meth:`kdesched.evictor.ledger.InFlight.may_still_land`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod

MESSAGE = "already admitted for eviction by another run (in flight in the disruption ledger)"


@dataclass(frozen=True, slots=True)
class InFlight:
    name: str = "in-flight"

    def start(self, ctx: RunContext) -> Check:
        return _Check(ctx)


class _Check(Check):
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        return Verdict(Reason.IN_FLIGHT, MESSAGE) if self.ctx.ledger.in_flight(pod.uid, self.ctx.now) else None

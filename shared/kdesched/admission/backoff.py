"""Wasted-move back-off: a workload whose moves were wasted is not moved by that strategy again for a while.

Why: checked moves (:mod:`kdesched.evictor.ledger`) find a replacement that landed back on the node
it left, or on another node the same move drains; moving it again would be wasted again. The
back-off doubles per consecutive wasted move (``cooldown.wastedMoveBaseSeconds``, capped by
``wastedMoveMaxSeconds``) and applies to a move's continuation too. A node's run held back by it
is repeated when it ends (``until``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod


@dataclass(frozen=True, slots=True)
class WastedMoveBackoff:
    base_seconds: float = 300.0
    max_seconds: float = 3600.0
    name: str = "wasted-move-backoff"

    def start(self, ctx: RunContext) -> Check:
        return _Check(self, ctx)


class _Check(Check):
    def __init__(self, s: WastedMoveBackoff, ctx: RunContext) -> None:
        self.s, self.ctx = s, ctx

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        ledger, s = self.ctx.ledger, self.s
        why = ledger.backoff_refusal(pod, strategy, self.ctx.now, s.base_seconds, s.max_seconds)
        if why is None:
            return None
        return Verdict(Reason.BACKOFF, why, ledger.backoff_ends(pod, strategy, s.base_seconds, s.max_seconds))

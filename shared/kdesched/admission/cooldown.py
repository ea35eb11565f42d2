"""Cool-downs: leave a workload, and a node, alone for a while after kdesched evicted from them.

Why: the next event must not evict a workload's replacement pods before the scheduler has placed
them (upstream descheduler #1712, #994). The workload cool-down (``cooldown.workloadSeconds``)
holds every pod of a workload that lost one, except those continuing the same strategy's move;
another strategy waits for a move to end. The node cool-down (``cooldown.nodeSeconds``) holds a pod
that came to the node after kdesched evicted from it (a replacement placed back: flapping) and
another strategy taking its turn on the node; the same strategy draining the pods that were there
already is not held, so a maintenance that taints many nodes empties them at pacing speed (0.1 held
each node's run behind its own first eviction: 180 of 200 pods still on their tainted nodes after
300 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod


@dataclass(frozen=True, slots=True)
class Cooldowns:
    workload_seconds: float = 300.0
    node_seconds: float = 300.0
    name: str = "cooldown"

    def start(self, ctx: RunContext) -> Check:
        return _Check(self, ctx)


class _Check(Check):
    def __init__(self, s: Cooldowns, ctx: RunContext) -> None:
        self.s, self.ctx = s, ctx

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        ledger, now, s = self.ctx.ledger, self.ctx.now, self.s
        why = ledger.workload_cooldown(pod, strategy, now, s.workload_seconds)
        reason = Reason.COOLDOWN_WORKLOAD
        if why is None:
            why, reason = ledger.node_cooldown(pod, strategy, now, s.node_seconds), Reason.COOLDOWN_NODE
        if why is None:
            return None
        return Verdict(reason, why, ledger.cooldown_ends(pod, now, s.workload_seconds, s.node_seconds))

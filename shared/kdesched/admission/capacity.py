"""Ledger capacity: one workload's in-flight entries must fit in its ledger record.

Why: the ledger keeps each workload in one small object (:mod:`kdesched.reactor.io.ledger_store`) and
the API server refuses an object's annotations past 256 KiB. A workload with thousands of replicas
evicted at once (safety off, upstream parity) would need more; the pods past
:data:`~kdesched.evictor.ledger.MAX_INFLIGHT_PER_MOVE` or
:data:`~kdesched.evictor.ledger.MAX_INFLIGHT_BYTES` wait for the first ones to be replaced, instead
of every write failing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.ledger import MAX_INFLIGHT_BYTES, MAX_INFLIGHT_PER_MOVE, entry_bytes, workload_key
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod


@dataclass(frozen=True, slots=True)
class RecordCapacity:
    name: str = "ledger-capacity"

    def start(self, ctx: RunContext) -> Check:
        return _Check(ctx)


class _Check(Check):
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.count: dict[str, int] = {}
        self.weight: dict[str, int] = {}

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        if held:
            return None
        key = workload_key(pod)
        mv = self.ctx.ledger.moves.get(key)
        count = self.count.get(key, len(mv.inflight) if mv is not None else 0)
        weight = self.weight.get(key, mv.inflight_bytes() if mv is not None else 0) + entry_bytes(pod)
        if count >= MAX_INFLIGHT_PER_MOVE or weight > MAX_INFLIGHT_BYTES:
            return Verdict(Reason.LEDGER_FULL, f"ledger: workload {key} already has {count} pods in flight, the most "
                                               "one ledger record holds; the rest wait for them")
        return None

    def passed(self, pod: Pod, strategy: str, held: bool) -> None:
        if held:
            return
        key = workload_key(pod)
        mv = self.ctx.ledger.moves.get(key)
        self.count[key] = self.count.get(key, len(mv.inflight) if mv is not None else 0) + 1
        self.weight[key] = self.weight.get(key, mv.inflight_bytes() if mv is not None else 0) + entry_bytes(pod)

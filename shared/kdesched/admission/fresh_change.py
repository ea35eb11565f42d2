"""Fresh node change: a taint or label written seconds ago waits until the scheduler has seen it.

Why: in ``serve`` kdesched evicts about a tenth of a second after a node is tainted. The
kube-scheduler learns of the taint through its own informer, which can be that much behind (on a
busy control plane, more). A replacement it places meanwhile lands back on the tainted node (the
scheduler does not know yet that it must not), and the move is wasted: the real control plane's
story caught it (``tests/realk8s/test_serve.py``, on 2 busy cores), and the wasted-move back-off
then left the pod on the tainted node for 300 s. An eviction by RemovePodsViolatingNodeTaints (or
RemovePodsViolatingNodeAffinity, for a label) of a pod on a node whose taints (labels) were written
less than :data:`CATCH_UP_SECONDS` ago is deferred until then, and the run is repeated at that time.

When: read from the node's ``metadata.managedFields`` (the latest ``time`` of an entry that owns
``spec.taints`` / ``metadata.labels``), which the API server sets, in its clock, compared with the
run's time (the API server's clock as this process measures it: kdesched.kube.clock). The time has
whole seconds, so the change happened within the second after it; 3 s leaves the scheduler two
seconds after the latest moment it could have happened. A node without such an entry (a snapshot
file, a server that does not track fields) is not delayed.

Only node-event runs (``taints``, ``affinity`` and their repeats, whichever scope they run in): they
are the ones that run the moment a node changes. A written time more than 3 s ahead of the run's
clock is ignored (nothing waits for it), a little ahead waits 6 s at most. ``run``, ``simulate`` and the sweep decide as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod

CATCH_UP_SECONDS = 3.0
NODE_EVENT_RUNS = frozenset({"taints", "affinity"})
# strategy -> (the Node record's field, what it is called in the message)
WATCHED = {"RemovePodsViolatingNodeTaints": ("taints_written_at", "taints"),
           "RemovePodsViolatingNodeAffinity": ("labels_written_at", "labels")}


@dataclass(frozen=True, slots=True)
class FreshChange:
    seconds: float = CATCH_UP_SECONDS
    name: str = "fresh-change"

    def start(self, ctx: RunContext) -> Check:
        # a node event's run, or the repeat of one (a label change that runs balance strategies is a
        # balance-scoped run: its repeats are continuations of origin "affinity")
        node_event = ctx.trigger in NODE_EVENT_RUNS or ctx.origin in NODE_EVENT_RUNS
        return _Check(ctx, self.seconds) if node_event and self.seconds > 0 else Check()


class _Check(Check):
    def __init__(self, ctx: RunContext, seconds: float) -> None:
        self.ctx, self.seconds = ctx, seconds

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        # known before the plan: a deferral, so the bucket after it neither refuses nor counts the pod
        return self._verdict(pod, strategy)

    def planned(self, eviction: PlannedEviction, held: bool) -> Verdict | None:
        return self._verdict(eviction.pod, eviction.strategy)

    def _verdict(self, pod: Pod, strategy: str) -> Verdict | None:
        watched = WATCHED.get(strategy)
        node = self.ctx.snapshot.nodes.get(pod.node_name) if watched is not None else None
        written = getattr(node, watched[0]) if node is not None and watched is not None else None
        if written is None or watched is None:
            return None
        # a time further ahead of the run's clock than the catch-up time (API servers whose clocks are
        # apart, managedFields written by a client) says nothing about when the node changed: no
        # wait (waiting for it would hold every repeat; a little ahead waits at most twice as long)
        if written > self.ctx.now + self.seconds:
            return None
        ready = written + self.seconds
        if self.ctx.now >= ready:
            return None
        return Verdict(Reason.FRESH_CHANGE,
                       f"node {pod.node_name}'s {watched[1]} were written {max(0.0, self.ctx.now - written):.1f}s "
                       f"ago: evicting in {ready - self.ctx.now:.1f}s, once the scheduler has seen them (else the "
                       "replacement may land back on the node)", ready)

"""Planning evictions: per-run limits and plan-aware PodDisruptionBudget budgets.

Why: strategies decide; this is where a decision becomes a plan. Limits follow upstream
(total, then per node, then per namespace; shared by all profiles of a run). One deliberate
difference: each PDB's ``status.disruptionsAllowed`` is a budget that planned evictions use up, so
a run never plans more evictions of a PDB's pods than the PDB allows (upstream sends them and
collects 429s). Refusals are recorded so the run report can say why a pod stayed.

The budget follows the Eviction API's own rules (kube-apiserver's pod eviction REST storage,
checked against a real v1.24 API server in tests/realk8s/test_pdb_verdicts.py): a pod that is
Pending, Succeeded, Failed or already terminating is deleted without looking at any PDB; a pod that
is not Ready is evicted without spending the budget while the PDB is healthy
(``currentHealthy >= desiredHealthy > 0``); otherwise more than one PDB is refused and one PDB's
``disruptionsAllowed`` is spent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.pacing import Pacer
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod, PodDisruptionBudget
from kdesched.strategies.framework import (
    ClusterState,
    DeferralsPlanned,
    EvictionBudgetSpent,
    NamespaceLimitReached,
    NodeLimitReached,
    PlannedEviction,
    TotalLimitReached,
)

log = logging.getLogger("kdesched.evictor")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-run limits from the policy; None = unlimited, 0 = no evictions."""

    per_node: int | None = None
    per_namespace: int | None = None
    total: int | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pod a strategy wanted to evict but the planner refused, and why."""

    pod: Pod
    strategy: str
    profile: str
    reason: str  # for people
    kind: Reason = Reason.OTHER  # for metrics, Events and code (kdesched.evictor.reasons)

    def to_json(self) -> dict[str, str]:
        return {"namespace": self.pod.namespace, "pod": self.pod.name, "node": self.pod.node_name,
                "strategy": self.strategy, "profile": self.profile, "reason": self.reason, "code": self.kind.value}


@dataclass
class LimitCounter:
    """Counters shared by every profile and strategy of one run."""

    limits: Limits
    total: int = 0
    per_node: dict[str, int] = field(default_factory=dict)
    per_namespace: dict[str, int] = field(default_factory=dict)
    pdb_used: dict[tuple[str, str], int] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    spent: str = ""  # why the run-wide eviction budget ran out (EvictionBudgetSpent), if it did
    ended: str = ""  # why the strategy in progress stopped planning deferred evictions (DeferralsPlanned)

    def check(self, pod: Pod) -> None:
        lim = self.limits
        if lim.total is not None and self.total + 1 > lim.total:
            raise TotalLimitReached(f"maximum number of pods evicted per run ({lim.total}) reached")
        if lim.per_node is not None and pod.node_name and self.per_node.get(pod.node_name, 0) + 1 > lim.per_node:
            raise NodeLimitReached(f"maximum number of pods evicted per node ({lim.per_node}) reached on {pod.node_name}")
        if lim.per_namespace is not None and self.per_namespace.get(pod.namespace, 0) + 1 > lim.per_namespace:
            raise NamespaceLimitReached(
                f"maximum number of pods evicted per namespace ({lim.per_namespace}) reached in {pod.namespace}")

    def count(self, pod: Pod) -> None:
        self.total += 1
        if pod.node_name:
            self.per_node[pod.node_name] = self.per_node.get(pod.node_name, 0) + 1
        self.per_namespace[pod.namespace] = self.per_namespace.get(pod.namespace, 0) + 1


def api_ignores_pdbs(pod: Pod) -> bool:
    """The Eviction API deletes this pod without consulting any PDB (canIgnorePDB): it is Pending,
    Succeeded or Failed, or already terminating. Its eviction disrupts nothing that is running."""
    return pod.phase in ("Pending", "Succeeded", "Failed") or pod.terminating


def spends_budget(pod: Pod, pdb: PodDisruptionBudget) -> bool:
    """False when the Eviction API lets ``pod`` go without decrementing ``pdb``: the pod is not
    Ready (no Ready=True condition) while the budget is healthy (currentHealthy >= desiredHealthy
    > 0). Unknown health counts (no status) mean the budget is spent, the cautious answer."""
    if any(c.type == "Ready" and c.status == "True" for c in pod.conditions):
        return True
    current, desired = pdb.current_healthy, pdb.desired_healthy
    return not (current is not None and desired is not None and desired > 0 and current >= desired)


_T = TypeVar("_T")


class Gate(Protocol):
    """The admission pipeline's per-pod checks (:mod:`kdesched.admission.pipeline`), asked with the
    pod, the strategy that wants it evicted, and whether pacing holds it for a later wave.

    Two calls, because the planner has refusals of its own after the gate's (PodDisruptionBudgets,
    "somewhere to go"): :meth:`check` answers, :meth:`passed` counts (a bucket's token, a record's
    room, a deferral) once the pod is planned, so a pod the planner refuses costs nothing."""

    def check(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        """The verdict that refuses ``pod``, or None (it may be planned; nothing counted yet)."""

    def passed(self, pod: Pod, strategy: str, held: bool) -> None:
        """``pod``, which :meth:`check` just let through, is planned: count it. May raise
        :class:`~kdesched.strategies.framework.DeferralsPlanned` (the pod is then not planned)."""


class PlanningEvictor:
    """The :class:`~kdesched.strategies.framework.EvictorView` of one profile in one run."""

    def __init__(self, state: ClusterState, evictor: DefaultEvictor, counter: LimitCounter,
                 gate: Gate | None = None, pacer: Pacer | None = None) -> None:
        self.state = state
        self.default_evictor = evictor
        self.counter = counter
        self.gate = gate
        self.pacer = pacer  # safety defaults on: "somewhere to go" and per-workload waves

    def filter(self, pod: Pod) -> bool:
        return not self.state.is_planned(pod) and self.default_evictor.filter(pod)

    def pre_eviction_filter(self, pod: Pod) -> bool:
        return self.default_evictor.pre_eviction_filter(pod)

    def evict(self, pod: Pod, *, strategy: str, profile: str, reason: str) -> bool:
        if self.state.is_planned(pod):
            return False
        if not pod.uid:
            # upstream EvictPod refuses a pod without a UID before checking any limit
            why = "pod has no metadata.uid; the Eviction API call could not be preconditioned on it"
            self.counter.refusals.append(Refusal(pod, strategy, profile, why, Reason.NO_UID))
            log.info("not evicting %s (%s/%s) [%s]: %s", pod.key, profile, strategy, Reason.NO_UID, why)
            return False
        self.counter.check(pod)  # raises the limit errors
        # a paced eviction held for a later wave is not sent in this run: the gate checks its
        # cool-downs (a held pod continues a move only if it could have started it) but it spends
        # no tokens (the run that sends it passes the gate again then)
        held = self.pacer is not None and self.pacer.held(pod)
        if self.gate is not None:
            refused = self._gate(self.gate.check, pod, strategy, held)
            if refused is not None:
                self.counter.refusals.append(Refusal(pod, strategy, profile, refused.message, refused.reason))
                log.info("not evicting %s (%s/%s) [%s]: %s", pod.key, profile, strategy, refused.reason, refused.message)
                return False
        pdbs = [] if api_ignores_pdbs(pod) else self.state.snapshot.eviction_pdbs_for(pod)
        if len(pdbs) > 1:
            names = ", ".join(f"{b.namespace}/{b.name}" for b in pdbs)
            why = f"pod is covered by {len(pdbs)} PodDisruptionBudgets ({names}); the API server refuses to evict it"
            self.counter.refusals.append(Refusal(pod, strategy, profile, why, Reason.MULTIPLE_PDBS))
            log.info("not evicting %s (%s/%s) [%s]: %s", pod.key, profile, strategy, Reason.MULTIPLE_PDBS, why)
            return False
        pdbs = [pdb for pdb in pdbs if spends_budget(pod, pdb)]
        for pdb in pdbs:
            if pdb.stale:
                why = (f"PodDisruptionBudget {pdb.namespace}/{pdb.name} is still being processed (status.observedGeneration "
                       f"{pdb.observed_generation} < metadata.generation {pdb.generation}): the API server refuses "
                       "evictions under it until its status catches up")
                self.counter.refusals.append(Refusal(pod, strategy, profile, why, Reason.PDB))
                log.info("not evicting %s (%s/%s) [%s]: %s", pod.key, profile, strategy, Reason.PDB, why)
                return False
            if pdb.disruptions_allowed is None:
                continue
            used = self.counter.pdb_used.get((pdb.namespace, pdb.name), 0)
            if used + 1 > pdb.disruptions_allowed:
                why = (f"PodDisruptionBudget {pdb.namespace}/{pdb.name} allows {pdb.disruptions_allowed} "
                       f"disruption(s) and {used} are already planned")
                self.counter.refusals.append(Refusal(pod, strategy, profile, why, Reason.PDB))
                log.info("not evicting %s (%s/%s) [%s]: %s", pod.key, profile, strategy, Reason.PDB, why)
                return False
        destination = None
        if self.pacer is not None:
            destination, nowhere = self.pacer.destination(pod)
            if nowhere:
                self.counter.refusals.append(Refusal(pod, strategy, profile, nowhere, Reason.NOWHERE_TO_GO))
                log.info("not evicting %s (%s/%s) [%s]: %s", pod.key, profile, strategy, Reason.NOWHERE_TO_GO, nowhere)
                return False
        if self.gate is not None:
            self._gate(self.gate.passed, pod, strategy, held)  # counted only now: the pod is planned
        for pdb in pdbs:
            key = (pdb.namespace, pdb.name)
            self.counter.pdb_used[key] = self.counter.pdb_used.get(key, 0) + 1
        self.counter.count(pod)
        self.state.mark_planned(PlannedEviction(pod, pod.node_name, strategy, profile, reason))
        if self.pacer is not None:
            self.pacer.admit(pod, destination)
        log.debug("planned eviction of %s from %s (%s/%s): %s", pod.key, pod.node_name, profile, strategy, reason)
        return True

    def _gate(self, call: Callable[[Pod, str, bool], _T], pod: Pod, strategy: str, held: bool) -> _T:
        """Ask the gate; an answer that ends planning is noted on the counter for the engine."""
        try:
            return call(pod, strategy, held)
        except EvictionBudgetSpent as exc:
            self.counter.spent = str(exc)  # the engine runs no further strategy
            raise
        except DeferralsPlanned as exc:
            self.counter.ended = str(exc)  # this strategy returns; the engine notes why
            raise

"""Disruption budgets: at most N, or N%, of pods unavailable through kdesched at once.

Why: the per-workload allowance (``maxUnavailable``) bounds each workload, but a taint on a pool
touches every workload on it at once: fifty workloads each one pod down is fifty pods down.
Operators ask for a cap over a namespace or the whole cluster (upstream
kubernetes-sigs/descheduler#1778, still open; Karpenter's ``nodes: "10%"``; Koordinator's
per-workload percentage). A budget counts the pods *in flight* in the disruption ledger (admitted
for eviction by any run of any process, not yet replaced) plus this run's own admissions, so it
holds across processes like the allowance does.

Three kinds, by which fields are set:

* cluster-wide (neither ``namespaceSelector`` nor ``strategies``);
* per namespace (``namespaceSelector``, ``{}`` = every namespace): each selected namespace on its own;
* per strategy (``strategies``): each listed strategy on its own, over the whole cluster.

``maxUnavailable`` is a count or a percentage of the pods in scope (the non-terminal pods the run's
snapshot holds: the cluster's, the namespace's), rounded up like a PodDisruptionBudget's
``maxUnavailable``. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod
from kdesched.model.selectors import LabelSelector


@dataclass(frozen=True, slots=True)
class Budget:
    """One ``kdesched.disruptionBudgets`` entry."""

    name: str
    count: int | None = None  # maxUnavailable as a number
    percent: float | None = None  # maxUnavailable as a percentage (0-100)
    namespace_selector: LabelSelector | None = None
    strategies: frozenset[str] | None = None

    @property
    def kind(self) -> str:
        if self.namespace_selector is not None:
            return "namespace"
        if self.strategies is not None:
            return "strategy"
        return "cluster"

    def limit(self, base: int) -> int:
        if self.count is not None:
            return self.count
        return math.ceil((self.percent or 0.0) * base / 100.0 - 1e-9)

    def describe(self, scope: str) -> str:
        value = str(self.count) if self.count is not None else f"{self.percent:g}%"
        label = f'"{self.name}" ' if self.name else ""
        return f"disruption budget {label}(maxUnavailable {value}, {scope})"


@dataclass(frozen=True, slots=True)
class Refused:
    """An eviction a budget stopped, and why."""

    index: int  # position in the plan
    reason: str


def _ns_of(pod_ref: str) -> str:
    return pod_ref.partition("/")[0]


class BudgetCheck:
    """The budgets of one run: counts start from the ledger's in-flight pods; :meth:`admit` counts
    each admitted eviction, in plan order, or says which budget stops it."""

    def __init__(self, budgets: Sequence[Budget], ledger: Ledger, pods: Iterable[Pod],
                 namespace_labels: Callable[[str], Mapping[str, str] | None]) -> None:
        self.budgets = tuple(budgets)
        self.namespace_labels = namespace_labels
        self.total = 0
        self.per_ns: dict[str, int] = {}
        for p in pods:
            if p.terminal:
                continue
            self.total += 1
            self.per_ns[p.namespace] = self.per_ns.get(p.namespace, 0) + 1
        self.down = 0
        self.down_ns: dict[str, int] = {}
        self.down_strategy: dict[str, int] = {}
        for mv in ledger.moves.values():
            # in flight, and past the replacement timeout but not replaced yet (lingering): a pod
            # counts until its workload is whole again, whatever the safety switch says
            for f in (*mv.inflight, *mv.lingering):
                self._count(_ns_of(f.pod), mv.strategy)
        self._selected: dict[tuple[int, str], bool] = {}

    def _count(self, namespace: str, strategy: str) -> None:
        self.down += 1
        self.down_ns[namespace] = self.down_ns.get(namespace, 0) + 1
        self.down_strategy[strategy] = self.down_strategy.get(strategy, 0) + 1

    def _selects(self, i: int, b: Budget, namespace: str) -> bool:
        key = (i, namespace)
        if key not in self._selected:
            labels = self.namespace_labels(namespace)
            # a namespace whose labels could not be read is treated as selected: the cautious answer
            self._selected[key] = labels is None or (b.namespace_selector is not None
                                                     and b.namespace_selector.matches(labels))
        return self._selected[key]

    def refusal(self, pod: Pod, strategy: str) -> str | None:
        """Why one more eviction of ``pod`` for ``strategy`` would exceed a budget, or None."""
        for i, b in enumerate(self.budgets):
            kind = b.kind
            if kind == "cluster":
                down, base, scope = self.down, self.total, "cluster-wide"
            elif kind == "namespace":
                if not self._selects(i, b, pod.namespace):
                    continue
                down, base = self.down_ns.get(pod.namespace, 0), self.per_ns.get(pod.namespace, 0)
                scope = f"namespace {pod.namespace}"
            else:
                if strategy not in (b.strategies or ()):
                    continue
                down, base, scope = self.down_strategy.get(strategy, 0), self.total, f"strategy {strategy}"
            limit = b.limit(base)
            if down + 1 > limit:
                of = f" of {base} pods" if b.percent is not None else ""
                return (f"budget: {b.describe(scope)} allows {limit}{of} unavailable through kdesched at once and "
                        f"{down} are in flight")
        return None

    def admit(self, pod: Pod, strategy: str) -> str | None:
        """:meth:`refusal`, counting the eviction when it passes."""
        why = self.refusal(pod, strategy)
        if why is None:
            self._count(pod.namespace, strategy)
        return why


class BudgetControl:
    """The pipeline's control: an eviction that would take a budget past its limit is refused
    (reported ``blocked`` with the budget that stopped it); the run is repeated shortly."""

    name = "budget"

    def __init__(self, budgets: Sequence[Budget]) -> None:
        self.budgets = tuple(budgets)

    def start(self, ctx: RunContext) -> Check:
        return _BudgetCheck(self.budgets, ctx)


BUDGET_RETRY_SECONDS = 5.0  # a run a budget held back looks again this soon (in-flight pods settle)


class _BudgetCheck(Check):
    def __init__(self, budgets: tuple[Budget, ...], ctx: RunContext) -> None:
        self.ctx = ctx
        self.check: BudgetCheck | None = None
        if budgets:
            snapshot = ctx.snapshot

            def labels(namespace: str) -> Mapping[str, str] | None:
                ns = snapshot.namespaces.get(namespace)
                return ns.labels if ns is not None else ctx.namespace_labels(namespace)

            self.check = BudgetCheck(budgets, ctx.ledger, snapshot.pods, labels)

    def planned(self, eviction: PlannedEviction, held: bool) -> Verdict | None:
        if self.check is None or held:  # a pod held for a later wave is counted when its run sends it
            return None
        why = self.check.admit(eviction.pod, eviction.strategy)
        return Verdict(Reason.BUDGET, why, self.ctx.now + BUDGET_RETRY_SECONDS) if why is not None else None

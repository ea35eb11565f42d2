"""Per-workload pacing and "somewhere to go": kdesched's own disruption allowance (pure planning).

Why: upstream relies entirely on PodDisruptionBudgets, and most workloads have none, so a taint
change evicts every replica on the node in the same second. With the safety defaults on
(:mod:`kdesched.policy.safety`), every planned eviction passes two more checks here:

* **somewhere to go**: at least one other Ready, schedulable node fits the pod (NodeFit's checks:
  node selector/affinity, taints, required anti-affinity, requests against what is there; and
  required anti-affinity as the scheduler applies it, over the whole topology domain and both ways:
  :mod:`kdesched.evictor.interpod`), counting
  the pods this run already plans to move there (each planned pod reserves its requests on the
  node it would most likely land on). Otherwise the pod stays and the refusal says why.
* **the allowance**: at most ``maxUnavailable`` pods of one workload (a Deployment through its
  ReplicaSets, a StatefulSet, a ReplicationController, a Job; bare pods are never grouped) may be
  unavailable at once. Pods already not Ready count. Evictions beyond the allowance are not
  refused: they go into later *waves*; wave ``k`` of a workload starts only once the workload is
  back at its Ready count after wave ``k - 1`` (see :mod:`kdesched.evictor.waves`).

Everything is derived from the snapshot, never remembered: a restarted kdesched sees the
replacement pods that are not Ready yet as unavailable and holds further evictions by itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kdesched.evictor.interpod import AntiAffinity
from kdesched.evictor.workloads import Workload, _new_workload, workload_of
from kdesched.model.derived import WorkloadKey, pod_ready, workload_key
from kdesched.model.records import Node, Pod
from kdesched.policy.safety import Safety, parse_max_unavailable
from kdesched.strategies.framework import ClusterState
from kdesched.strategies.nodefit import dynamic_fit_failure, static_fit_failure

if TYPE_CHECKING:  # the ledger imports this module
    from kdesched.evictor.ledger import Ledger

MAX_UNAVAILABLE_ANNOTATION = "kdesched.dev/max-unavailable"
"""Per-workload override, set on the pod template (a count ``"2"`` or a percentage ``"25%"``)."""

MAX_REASONS_SHOWN = 3
RESORT_EVERY = 512  # admissions between re-sorting the destinations by free CPU (an estimate either way)


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    """How many pods a workload should have available now, and how many are Ready."""

    workload: Workload
    expected: int
    ready: int

    @property
    def unavailable(self) -> int:
        return max(0, self.expected - self.ready)

    def to_json(self) -> dict[str, Any]:
        return {"workload": str(self.workload), "expected": self.expected, "ready": self.ready,
                "unavailable": self.unavailable}


def workload_status(workload: Workload, pods: Iterable[Pod], not_ready: frozenset[str] = frozenset()) -> WorkloadStatus:
    """Count a workload's pods. Terminal pods do not count. A terminating pod does not count
    either (its ReplicaSet/Job has already created the replacement, which counts until Ready),
    except for a StatefulSet, whose replacement is created only once the old pod is gone. Pods
    whose uid is in ``not_ready`` (admitted for eviction: the disruption ledger's in-flight pods)
    count as not Ready whatever the snapshot says."""
    expected = ready = 0
    for p in pods:
        if p.terminal:
            continue
        if p.terminating and workload.kind != "StatefulSet":
            continue
        expected += 1
        if pod_ready(p) and p.uid not in not_ready:
            ready += 1
    return WorkloadStatus(workload, expected, ready)


def allowance(setting: int | str, expected: int) -> int:
    """``maxUnavailable`` in pods: a count as is; a percentage of the workload's pods, rounded
    down, at least 1 (so a percentage never forbids every eviction of a small workload)."""
    if isinstance(setting, int):
        return setting
    return max(1, expected * int(setting[:-1]) // 100)


@dataclass(frozen=True, slots=True)
class PacedStep:
    """Where one planned eviction sits in the pacing plan (aligned with ``RunPlan.evictions``)."""

    workload: Workload | None  # None: a bare pod, never paced
    wave: int  # 0 = at once; k = after the workload is back at its Ready count after wave k-1
    allowance: int = 0
    destination: str = ""  # the node the pod most likely lands on (for "somewhere to go")


@dataclass(frozen=True, slots=True)
class WorkloadPacing:
    """One workload's pacing numbers for the report."""

    status: WorkloadStatus  # before the run
    allowance: int
    allowance_source: str  # "kdesched.safety.maxUnavailable" or the annotation

    def to_json(self) -> dict[str, Any]:
        return {**self.status.to_json(), "maxUnavailable": self.allowance, "from": self.allowance_source}


@dataclass(frozen=True, slots=True)
class PacingPlan:
    """The pacing side of a run plan: one step per planned eviction, and the workloads touched."""

    safety: Safety
    steps: tuple[PacedStep, ...]
    workloads: Mapping[Workload, WorkloadPacing] = field(default_factory=dict)

    @property
    def waves(self) -> int:
        return 1 + max((s.wave for s in self.steps), default=0)


class Pacer:
    """The planning side: checks destinations and assigns waves, one instance per run."""

    def __init__(self, safety: Safety, state: ClusterState, ledger: Ledger | None = None) -> None:
        self.safety = safety
        self.state = state
        self.ledger = ledger  # what other runs have in flight (kdesched.evictor.ledger)
        self.notes: list[str] = []
        self._index: dict[Workload, Sequence[Pod]] | None = None
        self._by_key: Mapping[WorkloadKey, Sequence[Pod]] | None = None
        self._workloads: dict[Workload, WorkloadPacing] = {}
        self._planned: dict[Workload, int] = {}
        self._steps: dict[int, PacedStep] = {}  # id(pod) -> step
        self._reserved: dict[str, dict[str, int]] = {}  # node -> requests of pods planned to land there
        self._reserved_pods: dict[str, list[Pod]] = {}
        self._reserved_anti: dict[str, list[Pod]] = {}  # the reserved pods with required anti-affinity
        self._reserved_cpu: dict[str, int] = {}  # node -> _reserved[node]["cpu"], for the sort
        self._anti = AntiAffinity(state)  # required anti-affinity domain-wide and both ways (NodeFit: one node, one way)
        self._nodes: list[Node] | None = None
        self._sort_rows: list[tuple[Node, str, int, Mapping[str, int]]] | None = None
        self._since_sort = RESORT_EVERY
        self._order_version = 0
        # pod template (selector, required node affinity, tolerations) -> (order version, the nodes
        # that pass the static checks in the current order, the static failures)
        self._static: dict[Any, tuple[int, list[Node], list[tuple[str, str]]]] = {}
        if ledger is not None:  # capacity that pods in flight (any run's) will take on their destination
            for node, reserved in ledger.reservations().items():
                self._reserved[node] = dict(reserved)
                self._reserved_cpu[node] = reserved.get("cpu", 0)

    # -- workloads -------------------------------------------------------------------------------
    def pods_of(self, workload: Workload) -> Sequence[Pod]:
        return self._pods_by_key().get((workload.kind, workload.namespace, workload.name), ())

    def _pods_by_key(self) -> Mapping[WorkloadKey, Sequence[Pod]]:
        """Every grouped pod of the snapshot by workload key (the watch cache's, else built once,
        on first use)."""
        if self._by_key is None:
            known = self.state.snapshot.workload_pods
            if known is not None:
                self._by_key = known
                return known
            by_key: dict[WorkloadKey, list[Pod]] = {}
            for p in self.state.snapshot.pods:
                if p.owner_refs:
                    key = workload_key(p)
                    if key is not None:
                        pods = by_key.get(key)
                        if pods is None:
                            by_key[key] = pods = []
                        pods.append(p)
            self._by_key = by_key
        return self._by_key

    def index(self) -> Mapping[Workload, Sequence[Pod]]:
        """Every grouped pod of the snapshot by workload, in snapshot order (built once)."""
        if self._index is None:
            self._index = {_new_workload(*key): pods for key, pods in self._pods_by_key().items()}
        return self._index

    def pacing_of(self, workload: Workload, pod: Pod) -> WorkloadPacing:
        known = self._workloads.get(workload)
        if known is not None:
            return known
        move = self.ledger.move(f"{workload.kind}/{workload.namespace}/{workload.name}") if self.ledger else None
        if move is not None and move.inflight:
            # pods in flight are down whatever the snapshot says, and a workload whose replacement
            # is not created yet is still short of the pods it had when the move began
            status = workload_status(workload, self.pods_of(workload), move.inflight_uids())
            status = WorkloadStatus(workload, max(status.expected, move.expected), status.ready)
        else:
            status = workload_status(workload, self.pods_of(workload))
        setting: int | str = self.safety.max_unavailable
        source = "kdesched.safety.maxUnavailable"
        raw = pod.annotations.get(MAX_UNAVAILABLE_ANNOTATION)
        if raw is not None:
            errors: list[str] = []
            # ASCII digits only: "²" and "٣" pass str.isdigit() and int() fails on the first
            value: Any = int(raw) if raw.strip().isascii() and raw.strip().isdigit() else raw.strip()
            parsed = parse_max_unavailable(value, f"{workload}: annotation {MAX_UNAVAILABLE_ANNOTATION}", errors)
            if parsed is None:
                self.notes.append(f"{errors[0]}; using {setting}")
            else:
                setting, source = parsed, f"annotation {MAX_UNAVAILABLE_ANNOTATION}"
        known = WorkloadPacing(status, allowance(setting, status.expected), source)
        self._workloads[workload] = known
        return known

    # -- somewhere to go ---------------------------------------------------------------------------
    def _destinations(self) -> list[Node]:
        """Ready nodes, most free CPU first (re-sorted every RESORT_EVERY admissions, so the order
        is close to exact while a large run costs a few sorts, not a scan of every node per pod)."""
        if self._nodes is None or self._since_sort >= RESORT_EVERY:
            if self._sort_rows is None:
                usage = self.state.usage  # each node's usage mapping, kept up to date by the state
                self._sort_rows = [(n, n.name, n.allocatable.get("cpu", 0), usage(n.name))
                                   for n in self.state.snapshot.nodes.values() if n.ready]
            # (-free CPU, name) = (usage + reserved - allocatable, name), inlined: this runs over
            # every node each RESORT_EVERY admissions (53 sorts of 5,000 nodes at 150,000 pods)
            reserved = self._reserved_cpu
            keyed = [(u.get("cpu", 0) + reserved.get(name, 0) - alloc, name, n) for n, name, alloc, u in self._sort_rows]
            keyed.sort()  # node names are unique: the node itself is never compared
            self._nodes = [k[2] for k in keyed]
            self._since_sort = 0
            self._order_version += 1
        return self._nodes

    def _candidates(self, pod: Pod) -> tuple[list[Node], list[tuple[str, str]]]:
        """Ready nodes that pass NodeFit's static checks for this pod, most free CPU first, and
        the static failures (cached per pod template: thousands of replicas share one)."""
        order = self._destinations()
        aff = pod.affinity.node_required if pod.affinity is not None else None
        key: Any = (frozenset(pod.node_selector.items()), aff, pod.tolerations)
        try:
            cached = self._static.get(key)
        except TypeError:  # an unhashable spec part: no caching for this pod
            key, cached = None, None
        if cached is not None and cached[0] == self._order_version:
            return cached[1], cached[2]
        if cached is not None:  # same template, new order: re-order the known passing nodes
            passing = {n.name for n in cached[1]}
            result = ([n for n in order if n.name in passing], cached[2])
        else:
            ok: list[Node] = []
            failures: list[tuple[str, str]] = []  # (node, why)
            for node in order:
                why = static_fit_failure(pod, node)
                if why is None:
                    ok.append(node)
                else:
                    failures.append((node.name, why))
            result = (ok, failures)
        if key is not None:
            self._static[key] = (self._order_version, result[0], result[1])
        return result

    def _reservation_failure(self, pod: Pod, node: Node) -> str | None:
        reserved = self._reserved.get(node.name)
        if reserved:
            usage = self.state.usage(node.name)
            alloc = node.allocatable
            if alloc.get("pods", 0) - usage.get("pods", 0) - reserved.get("pods", 0) < 1:
                return f"node {node.name} has no free pod slot once the pods this run moves there land"
            for res, amount in pod.requests.items():
                if amount > alloc.get(res, 0) - usage.get(res, 0) - reserved.get(res, 0):
                    return f"node {node.name} has insufficient {res} once the pods this run moves there land"
        # only a pair where one side has required anti-affinity can conflict: without its own
        # terms the pod need only be checked against the reserved pods that have some (same order)
        own = pod.affinity is not None and bool(pod.affinity.pod_anti_affinity_required)
        for other in (self._reserved_pods if own else self._reserved_anti).get(node.name, ()):
            for a, b in ((pod, other), (other, pod)):
                if a.affinity is None or not a.affinity.pod_anti_affinity_required:
                    continue
                for term in a.affinity.pod_anti_affinity_required:
                    namespaces = term.namespaces or (a.namespace,)
                    if term.label_selector is not None and b.namespace in namespaces \
                            and term.topology_key in node.labels and term.label_selector.matches(b.labels):
                        return (f"required anti-affinity between {pod.key} and {other.key}, which this run "
                                f"also moves to node {node.name}")
        return None

    def destination(self, pod: Pod) -> tuple[Node | None, str]:
        """The node the pod would most likely land on (the first that fits, most free CPU first),
        or None and why no other Ready node fits it. A terminal (Failed/Succeeded) pod is not
        running: removing it takes nothing down, so it needs no destination (None, "")."""
        if pod.terminal:
            return None, ""
        candidates, static_failures = self._candidates(pod)
        reasons: list[str] = []
        for node in candidates:
            if node.name == pod.node_name:
                continue
            why = (dynamic_fit_failure(pod, node, self.state) or self._anti.failure(pod, node)
                   or self._reservation_failure(pod, node))
            if why is None:
                return node, ""
            reasons.append(why)
        reasons += [why for name, why in static_failures if name != pod.node_name]
        if not reasons:
            return None, "nowhere to go: no other Ready node in the cluster"
        shown = "; ".join(reasons[:MAX_REASONS_SHOWN])
        more = f"; and {len(reasons) - MAX_REASONS_SHOWN} more" if len(reasons) > MAX_REASONS_SHOWN else ""
        return None, f"nowhere to go: no other Ready node fits the pod ({shown}{more})"

    # -- waves -------------------------------------------------------------------------------------
    def _wave(self, pod: Pod, workload: Workload) -> tuple[int, int]:
        """(wave, allowance) the pod would get as the workload's next planned eviction."""
        pacing = self.pacing_of(workload, pod)
        n = self._planned.get(workload, 0)
        a = pacing.allowance
        first = max(0, a - pacing.status.unavailable)
        return (0 if n < first else 1 + (n - first) // a), a

    def held(self, pod: Pod) -> bool:
        """Would the pod, planned now, wait for a later wave? (Such an eviction does not happen in
        this run on the event path, so it must not spend the reactor's tokens.)"""
        workload = workload_of(pod)
        return workload is not None and not pod.terminal and self._wave(pod, workload)[0] > 0

    def admit(self, pod: Pod, destination: Node | None) -> PacedStep:
        """Record a planned eviction: reserve its destination and give it its wave."""
        self._since_sort += 1
        if destination is not None:
            reserved = self._reserved.setdefault(destination.name, {"pods": 0})
            for res, amount in pod.requests.items():
                reserved[res] = reserved.get(res, 0) + amount
            reserved["pods"] += 1
            self._reserved_cpu[destination.name] = reserved.get("cpu", 0)
            self._reserved_pods.setdefault(destination.name, []).append(pod)
            if pod.affinity is not None and pod.affinity.pod_anti_affinity_required:
                self._reserved_anti.setdefault(destination.name, []).append(pod)
            self._anti.moved(pod, destination)
        dest = destination.name if destination is not None else ""
        workload = workload_of(pod)
        if workload is None or pod.terminal:  # a terminal pod is unavailable already: nothing to pace
            step = PacedStep(workload, 0, 0, dest)
        else:
            wave, a = self._wave(pod, workload)
            self._planned[workload] = self._planned.get(workload, 0) + 1
            step = PacedStep(workload, wave, a, dest)
        self._steps[id(pod)] = step
        return step

    def plan(self, evictions: Iterable[Pod]) -> PacingPlan:
        steps = tuple(self._steps.get(id(p), PacedStep(None, 0)) for p in evictions)
        touched = {s.workload for s in steps if s.workload is not None}
        # sorted by Workload's own order (kind, namespace, name), through a key: comparing the
        # dataclasses themselves runs Python code per comparison (15,000 workloads at 150,000 pods)
        ordered = sorted(self._workloads.items(), key=lambda kv: (kv[0].kind, kv[0].namespace, kv[0].name))
        return PacingPlan(self.safety, steps, {w: p for w, p in ordered if w in touched})

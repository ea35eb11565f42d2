"""The cluster snapshot: every record of one observation, indexed the ways decisions look it up.

Why: strategies ask "pods on node N", "pods of owner U", "PDBs of namespace X" thousands of times
per run; the indexes are built once, in one pass, and the snapshot is never mutated (plan-aware
state lives in :mod:`kdesched.strategies.framework`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kdesched.model.derived import WorkloadKey
from kdesched.model.errors import ModelError
from kdesched.model.records import (
    Namespace,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
)

if TYPE_CHECKING:  # only a type here: simulate without --usage never needs the usage parsers
    from kdesched.model.usage import Usage

_CLUSTER_SCOPED = ("Node", "PriorityClass", "Namespace")


def _object_name(kind: str, raw: Mapping[str, Any]) -> str:
    """``name in namespace`` (or ``name`` for cluster-scoped kinds) for error messages; ``?``
    where the object does not say. (Name first: callers and operators grep for "Pod NAME".)"""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    name = name if isinstance(name, str) and name else "?"
    if kind in _CLUSTER_SCOPED:
        return name
    namespace = meta.get("namespace")
    return f"{name} in {namespace if isinstance(namespace, str) and namespace else 'default'}"


PdbEntry = tuple[int, PodDisruptionBudget]
PdbIndex = Mapping[str, tuple[Mapping[tuple[str, str], list[PdbEntry]], list[PdbEntry]]]


def _index_pdbs(pdbs_by_namespace: Mapping[str, tuple[PodDisruptionBudget, ...]]) -> PdbIndex:
    index: dict[str, tuple[dict[tuple[str, str], list[PdbEntry]], list[PdbEntry]]] = {}
    for ns, pdbs in pdbs_by_namespace.items():
        by_label: dict[tuple[str, str], list[PdbEntry]] = {}
        unindexed: list[PdbEntry] = []
        for i, b in enumerate(pdbs):
            if b.selector is None:
                continue  # selects nothing
            if b.selector.match_labels:
                by_label.setdefault(b.selector.match_labels[0], []).append((i, b))
            else:
                unindexed.append((i, b))
        index[ns] = (by_label, unindexed)
    return index


@dataclass(frozen=True, slots=True)
class Derived:
    """Pod indexes computed elsewhere (the watch cache) for :meth:`Snapshot.build`."""

    pods_by_node: Mapping[str, tuple[Pod, ...]]
    owner_pod_counts: Mapping[str, int]
    node_usage: Mapping[str, Mapping[str, int]]
    workload_pods: Mapping[WorkloadKey, Sequence[Pod]]


KINDS = ("Node", "Pod", "PodDisruptionBudget", "PriorityClass", "Namespace", "PersistentVolumeClaim")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Immutable records of one cluster observation plus lookup indexes."""

    nodes: Mapping[str, Node]
    pods: Sequence[Pod]
    pdbs: Sequence[PodDisruptionBudget] = ()
    priority_classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    namespaces: Mapping[str, Namespace] = field(default_factory=dict)
    pvcs: Mapping[tuple[str, str], PersistentVolumeClaim] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    pods_by_node: Mapping[str, tuple[Pod, ...]] = field(default_factory=dict)
    owner_pod_counts: Mapping[str, int] = field(default_factory=dict)
    pdbs_by_namespace: Mapping[str, tuple[PodDisruptionBudget, ...]] = field(default_factory=dict)
    pdb_index: PdbIndex = field(default_factory=dict)  # built by build(); see pdbs_for
    taken_at: datetime | None = None
    """When the snapshot was taken, if its file says so (:data:`kdesched.model.files.SNAPSHOT_TIME`)."""
    node_usage: Mapping[str, Mapping[str, int]] | None = None
    """Per node, what its non-terminal pods request (:func:`kdesched.model.derived.add_pod_usage`),
    when the watch cache kept it up to date; None: a run computes it from ``pods_by_node``."""
    workload_pods: Mapping[WorkloadKey, Sequence[Pod]] | None = None
    """The pods of each workload (:func:`kdesched.model.derived.workload_key`) in snapshot order,
    when the watch cache kept them; None: the pacer indexes ``pods`` itself."""
    actual_usage: Usage | None = None
    """Measured usage (metrics.k8s.io or Prometheus, :mod:`kdesched.model.usage`) when the policy
    balances on it and the caller read it; None otherwise."""

    @classmethod
    def build(
        cls,
        nodes: Iterable[Node],
        pods: Iterable[Pod],
        pdbs: Iterable[PodDisruptionBudget] = (),
        priority_classes: Iterable[PriorityClass] = (),
        namespaces: Iterable[Namespace] = (),
        pvcs: Iterable[PersistentVolumeClaim] = (),
        notes: Iterable[str] = (),
        *,
        derived: Derived | None = None,
    ) -> Snapshot:
        """``derived``: the pod indexes, already computed from exactly these ``pods`` (the watch
        cache keeps them up to date); without it they are computed here."""
        node_map: dict[str, Node] = {}
        for n in nodes:
            node_map[n.name] = n
        pod_list = list(pods)
        if derived is not None:
            by_node_t, owners = derived.pods_by_node, derived.owner_pod_counts
        else:
            by_node: dict[str, list[Pod]] = {}
            counts: dict[str, int] = {}
            for p in pod_list:
                if p.node_name:
                    by_node.setdefault(p.node_name, []).append(p)
                for ref in p.owner_refs:  # a pod counts toward every owner it names (upstream minReplicas)
                    counts[ref.uid] = counts.get(ref.uid, 0) + 1
            by_node_t, owners = {k: tuple(v) for k, v in by_node.items()}, counts
        pdb_list = list(pdbs)
        pdb_ns: dict[str, list[PodDisruptionBudget]] = {}
        for b in pdb_list:
            pdb_ns.setdefault(b.namespace, []).append(b)
        pdb_by_ns = {k: tuple(v) for k, v in pdb_ns.items()}
        return cls(
            nodes=node_map,
            pods=pod_list,
            pdbs=pdb_list,
            priority_classes={pc.name: pc for pc in priority_classes},
            namespaces={ns.name: ns for ns in namespaces},
            pvcs={(c.namespace, c.name): c for c in pvcs},
            notes=tuple(notes),
            pods_by_node=by_node_t,
            owner_pod_counts=owners,
            pdbs_by_namespace=pdb_by_ns,
            pdb_index=_index_pdbs(pdb_by_ns),
            node_usage=derived.node_usage if derived is not None else None,
            workload_pods=derived.workload_pods if derived is not None else None,
        )

    @classmethod
    def from_objects(cls, objects: Iterable[tuple[str, Mapping[str, Any] | Pod]],
                     notes: Iterable[str] = (), *,
                     on_error: Callable[[ModelError], None] | None = None) -> Snapshot:
        """Build from ``(where, raw object)`` pairs of any supported kind (or Pod records the
        fast JSON path already built, kept in their place).

        Unknown kinds are skipped with a note; a malformed object raises :class:`ModelError`
        located at ``where`` and the bad field, or, with ``on_error``, is handed to it and left
        out, so that a file's loader can report every problem at once
        (:class:`kdesched.model.validate.SnapshotChecks`).
        """
        buckets: dict[str, list[Any]] = {k: [] for k in KINDS}
        skipped: dict[str, int] = {}
        parsers = {
            "Node": Node.from_api, "Pod": Pod.from_api, "PodDisruptionBudget": PodDisruptionBudget.from_api,
            "PriorityClass": PriorityClass.from_api, "Namespace": Namespace.from_api,
            "PersistentVolumeClaim": PersistentVolumeClaim.from_api,
        }
        for where, raw in objects:
            if type(raw) is Pod:  # already built by the fast JSON path (kdesched.model.fastload)
                buckets["Pod"].append(raw)
                continue
            if not isinstance(raw, Mapping):
                raise ModelError(where, f"expected a Kubernetes object, got {type(raw).__name__}")
            kind = raw.get("kind")
            parser = parsers.get(kind) if isinstance(kind, str) else None
            if parser is None:
                label = kind if isinstance(kind, str) and kind else "(no kind)"
                skipped[label] = skipped.get(label, 0) + 1
                continue
            assert isinstance(kind, str)  # a parser was found for it
            try:
                buckets[kind].append(parser(raw))
            except ModelError as exc:
                located = exc.within(f"{where} ({kind} {_object_name(kind, raw)})")
                if on_error is None:
                    raise located from None
                on_error(located)
            except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
                located = ModelError(f"{where} ({kind} {_object_name(kind, raw)})", f"malformed object: {exc}")
                if on_error is None:
                    raise located from None
                on_error(located)
        all_notes = list(notes)
        for kind, count in sorted(skipped.items()):
            all_notes.append(f"skipped {count} object(s) of kind {kind}: not used by kdesched")
        return cls.build(
            buckets["Node"], buckets["Pod"], buckets["PodDisruptionBudget"], buckets["PriorityClass"],
            buckets["Namespace"], buckets["PersistentVolumeClaim"], all_notes,
        )

    def eviction_pdbs_for(self, pod: Pod) -> list[PodDisruptionBudget]:
        """The PDBs the Eviction API checks for ``pod``: those selecting it, less any with an empty
        selector (the API skips those; :attr:`PodDisruptionBudget.seen_by_eviction_api`)."""
        return [b for b in self.pdbs_for(pod) if b.seen_by_eviction_api]

    def pdbs_for(self, pod: Pod) -> list[PodDisruptionBudget]:
        """The PDBs selecting ``pod``, in snapshot order.

        Indexed: a PDB whose selector has matchLabels is only tried for pods carrying its first
        label pair, so a namespace with a thousand PDBs costs a few dict lookups per pod, not a
        thousand selector matches (most of a large plan before the index: docs/benchmarks.md)."""
        index = self.pdb_index.get(pod.namespace)
        if index is None:
            return []
        by_label, unindexed = index
        found: list[tuple[int, PodDisruptionBudget]] = [x for x in unindexed if x[1].selects(pod)]
        for item in pod.labels.items():
            for x in by_label.get(item, ()):
                if x[1].selects(pod):
                    found.append(x)
        if len(found) > 1:
            found.sort(key=lambda x: x[0])
        return [b for _, b in found]


"""The watch cache's stores: one kind's records by key, in the API server's list order, and for
pods the indexes a run derives from them.

Why a module of its own: the store is what a snapshot is read from, and what must stay exactly
the snapshot a LIST would give (same records, same order: the API server lists in etcd key order,
``namespace/name``; the stores sort by that key). It knows nothing of watching or of the memory
ceiling: the reflectors (:mod:`kdesched.kube.cache`) write to it under the cache's lock, and
:mod:`kdesched.kube.governor` only counts it. The Pod store also keeps what a run would otherwise
derive from every pod again (:mod:`kdesched.model.derived`: each node's usage, the owner counts,
the pods of each workload), updated pod by pod. A malformed object is kept as its error: a
snapshot that includes it raises the same :class:`~kdesched.model.errors.ModelError` a LIST would.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from kdesched.kube.resources import RESOURCES
from kdesched.model.derived import WorkloadKey, add_pod_usage, empty_usage, workload_key
from kdesched.model.errors import ModelError
from kdesched.model.records import Pod
from kdesched.model.snapshot import KINDS, Derived

# the model's parser of each kind a snapshot holds (the resource descriptors': kdesched.kube.resources)
PARSERS: Mapping[str, Callable[[Any], Any]] = {
    kind: parser for kind in KINDS if (parser := RESOURCES[kind].from_api) is not None}
CLUSTER_SCOPED = frozenset(kind for kind in KINDS if not RESOURCES[kind].namespaced)


def record_key(kind: str, namespace: str, name: str) -> str:
    """The store key: ``namespace/name`` (``name`` for cluster-scoped kinds), the order the API
    server lists in (its etcd keys are ``/registry/<resource>/<namespace>/<name>``)."""
    return name if kind in CLUSTER_SCOPED else f"{namespace}/{name}"


def raw_key(kind: str, raw: Mapping[str, Any]) -> str | None:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = meta.get("namespace")
    return record_key(kind, namespace if isinstance(namespace, str) and namespace else "default", name)


def raw_node(raw: Mapping[str, Any]) -> str:
    spec = raw.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""




class KindStore:
    """One kind's records by key, with the sorted view; for pods also the indexes a run derives from
    them (:mod:`kdesched.model.derived`), kept up to date pod by pod so no run recomputes them."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.records: dict[str, Any] = {}
        self.bad: dict[str, tuple[str, ModelError]] = {}  # key -> (pod's node, the parse error)
        self.synced = False
        self._sorted: tuple[Any, ...] | None = None
        self.by_node: dict[str, dict[str, Pod]] = {}
        self._node_sorted: dict[str, tuple[Pod, ...]] = {}
        self.usage: dict[str, dict[str, int]] = {}  # node -> its pods' requests (add_pod_usage)
        self.owner_counts: dict[str, int] = {}  # owner uid -> pods naming it (any node, any phase)
        self.by_workload: dict[WorkloadKey, dict[str, Pod]] = {}
        self._workload_sorted: dict[WorkloadKey, tuple[Pod, ...]] = {}

    def __len__(self) -> int:
        return len(self.records) + len(self.bad)

    def replace(self, records: dict[str, Any], bad: dict[str, tuple[str, ModelError]]) -> None:
        self.records = records
        self.bad = bad
        self._sorted = None
        self._node_sorted, self._workload_sorted = {}, {}
        self.by_node, self.usage, self.owner_counts, self.by_workload = {}, {}, {}, {}
        if self.kind == "Pod":
            for key, pod in records.items():
                self._add_index(key, pod)
            # sort once now, so the first run after a (re)list is not the slow one: later changes
            # re-sort only the nodes and workloads they touch
            for node in self.by_node:
                self.node_pods(node)
            for wkey in self.by_workload:
                self.workload_pods(wkey)
        self.sorted_records()
        self.synced = True

    def clear(self) -> None:
        self.replace({}, {})
        self.synced = False

    def put(self, key: str, record: Any) -> None:
        self._drop_index(key)
        self.bad.pop(key, None)
        self.records[key] = record
        self._sorted = None
        if self.kind == "Pod":
            self._add_index(key, record)

    def put_bad(self, key: str, node: str, error: ModelError) -> None:
        self.remove(key)
        self.bad[key] = (node, error)

    def remove(self, key: str) -> None:
        self._drop_index(key)
        self.bad.pop(key, None)
        if self.records.pop(key, None) is not None:
            self._sorted = None

    def _add_index(self, key: str, pod: Pod) -> None:
        node = pod.node_name
        if node:
            self.by_node.setdefault(node, {})[key] = pod
            self._node_sorted.pop(node, None)
            usage = self.usage.get(node)
            if usage is None:
                usage = self.usage[node] = empty_usage()
            add_pod_usage(usage, pod)
        if pod.owner_refs:
            counts = self.owner_counts
            for ref in pod.owner_refs:
                counts[ref.uid] = counts.get(ref.uid, 0) + 1
            wkey = workload_key(pod)
            if wkey is not None:
                self.by_workload.setdefault(wkey, {})[key] = pod
                self._workload_sorted.pop(wkey, None)

    def _drop_index(self, key: str) -> None:
        if self.kind != "Pod":
            return
        old = self.records.get(key)
        if old is None:
            return
        node = old.node_name
        if node:
            pods = self.by_node.get(node)
            if pods is not None:
                pods.pop(key, None)
                if not pods:
                    del self.by_node[node]
                    self.usage.pop(node, None)
                else:
                    add_pod_usage(self.usage[node], old, -1)
            self._node_sorted.pop(node, None)
        if old.owner_refs:
            counts = self.owner_counts
            for ref in old.owner_refs:
                left = counts.get(ref.uid, 0) - 1
                if left > 0:
                    counts[ref.uid] = left
                else:
                    counts.pop(ref.uid, None)
            wkey = workload_key(old)
            if wkey is not None:
                members = self.by_workload.get(wkey)
                if members is not None:
                    members.pop(key, None)
                    if not members:
                        del self.by_workload[wkey]
                self._workload_sorted.pop(wkey, None)

    def sorted_records(self) -> tuple[Any, ...]:
        if self._sorted is None:
            # the dict is in LIST (key) order plus later additions: timsort is near-linear on that
            self._sorted = tuple(self.records[k] for k in sorted(self.records))
        return self._sorted

    def node_pods(self, node: str) -> tuple[Pod, ...]:
        cached = self._node_sorted.get(node)
        if cached is None:
            pods = self.by_node.get(node) or {}
            cached = self._node_sorted[node] = tuple(pods[k] for k in sorted(pods))
        return cached

    def workload_pods(self, wkey: WorkloadKey) -> tuple[Pod, ...]:
        cached = self._workload_sorted.get(wkey)
        if cached is None:
            pods = self.by_workload.get(wkey) or {}
            cached = self._workload_sorted[wkey] = tuple(pods[k] for k in sorted(pods))
        return cached

    def derived(self) -> Derived:
        """The indexes of every pod, as :meth:`Snapshot.build` would compute them from
        :meth:`sorted_records` (copies: the stores change under the next watch event)."""
        return Derived(
            pods_by_node={n: self.node_pods(n) for n in self.by_node},
            owner_pod_counts=dict(self.owner_counts),
            node_usage={n: dict(u) for n, u in self.usage.items()},
            workload_pods={w: self.workload_pods(w) for w in self.by_workload},
        )

    def first_error(self, nodes: Collection[str] | None) -> ModelError | None:
        for node, error in self.bad.values():
            if nodes is None or node in nodes:
                return error
        return None


def parse_record(kind: str, key: str, raw: Any) -> Any:
    """The record of one raw object (a Pod record from the fast path is kept as it is)."""
    if type(raw) is Pod:
        return raw
    namespace, _, name = key.rpartition("/")
    where = f"API {kind} watch cache ({kind} {name}{' in ' + namespace if namespace else ''})"
    try:
        return PARSERS[kind](raw)
    except ModelError as exc:
        raise exc.within(where) from None
    except (TypeError, ValueError, AttributeError, KeyError, ArithmeticError) as exc:
        raise ModelError(where, f"malformed object: {exc}") from None


__all__ = ["CLUSTER_SCOPED", "PARSERS", "KindStore", "parse_record", "raw_key", "raw_node", "record_key"]

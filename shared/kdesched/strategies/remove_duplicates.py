"""RemoveDuplicates (Balance, upstream v0.36): spread the pods of one owner (same namespace, owner
kind/name and container images) evenly over the nodes they can run on.

Why: when a node joins, the replicas that piled up on the old nodes stay there; evicting the
extra copies lets the scheduler place them on the new node. kdesched runs it on
``dev.kdesched.node.added`` / ``dev.kdesched.node.ready``, right when the imbalance appears.

Algorithm (upstream ``removeduplicates.go``, steps 1-5 of the reference):

1. Per node, the non-terminal pods passing Filter, PreEvictionFilter and ``namespaces``; pods
   without owner references or with an excluded owner kind are skipped.
2. Owner key = (namespace, owner kind, owner name, sorted images joined with ``#``), one per owner
   reference; ``occurrence[key]`` counts every listed pod.
3. On each node, a pod whose sorted ``ns/kind/name/image`` list equals that of an earlier pod on
   the same node is a duplicate (the first one is kept); duplicates go to ``dups[key][node]``.
4. Target nodes of a key: for each distinct (tolerations, required node affinity, nodeSelector)
   shape among its duplicates, the nodes (unschedulable ones too) whose NoSchedule/NoExecute
   taints it tolerates and whose labels it matches; a shape counts only if it matches more than
   one node; the target set is the union. Fewer than 2 target nodes: the key is skipped.
5. ``upperAvg = ceil(occurrence / #targets)``; on each node with ``len(dups) + 1 > upperAvg``,
   evict ``dups[upperAvg-1:]``.

Where upstream iterates Go maps (keys, nodes of a key) kdesched uses a stable order: keys in the
order their first duplicate was found, nodes in snapshot order, pods in snapshot order.
Performance: duplicates are found with one hash-set lookup per pod, and each distinct shape is
matched against the nodes once per run (nodes grouped by identical taints), so the strategy is
linear in pods + shapes × nodes rather than quadratic in pods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kdesched.model.records import Node, NodeSelectorTerm, Pod, Taint, Toleration
from kdesched.model.scheduling import matches_node_selector, tolerates_all
from kdesched.policy.types import RemoveDuplicatesArgs, namespace_allowed
from kdesched.strategies.framework import (
    Handle,
    NamespaceLimitReached,
    NodeLimitReached,
    StrategySpec,
    TotalLimitReached,
)

NAME = "RemoveDuplicates"


@dataclass(frozen=True, slots=True)
class OwnerKey:
    """Upstream ``podOwner``: the pods that are copies of one another."""

    namespace: str
    kind: str
    name: str
    images_hash: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


Shape = tuple[tuple[Toleration, ...], "tuple[NodeSelectorTerm, ...] | None", tuple[tuple[str, str], ...]]


def pod_shape(pod: Pod) -> Shape:
    """What decides where the scheduler may put the pod, as a hashable value."""
    required = pod.affinity.node_required if pod.affinity is not None else None
    return pod.tolerations, required, tuple(sorted(pod.node_selector.items()))


class TargetNodes:
    """Step 4, memoised for the run: shape -> nodes it may land on; shape set -> #targets."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = nodes
        by_taints: dict[tuple[Taint, ...], list[Node]] = {}
        for n in nodes:
            by_taints.setdefault(n.taints, []).append(n)
        self.by_taints = by_taints
        self._shape_nodes: dict[Shape, frozenset[str]] = {}
        self._count: dict[frozenset[Shape], int] = {}

    def nodes_for(self, shape: Shape, pod: Pod) -> frozenset[str]:
        found = self._shape_nodes.get(shape)
        if found is None:
            names: list[str] = []
            plain = not pod.node_selector and shape[1] is None
            for taints, group in self.by_taints.items():
                if not tolerates_all(pod.tolerations, taints):
                    continue
                if plain:
                    names.extend(n.name for n in group)
                else:
                    names.extend(n.name for n in group if matches_node_selector(pod, n))
            found = frozenset(names)
            self._shape_nodes[shape] = found
        return found

    def count(self, pods: Sequence[Pod]) -> int:
        """#target nodes for a key's duplicates (the union of shapes that match > 1 node)."""
        shapes: dict[Shape, Pod] = {}
        for p in pods:
            shapes.setdefault(pod_shape(p), p)
        key = frozenset(shapes)
        cached = self._count.get(key)
        if cached is None:
            sets = [s for s in (self.nodes_for(sh, p) for sh, p in shapes.items()) if len(s) > 1]
            if len(sets) == 1:
                cached = len(sets[0])
            else:
                cached = len(frozenset().union(*sets)) if sets else 0
            self._count[key] = cached
        return cached


@dataclass(slots=True)
class _Identity:
    """What the listed pods of one (namespace, owner refs, images) share."""

    keys: list[OwnerKey]
    signature: tuple[str, ...]
    pods: int = 0
    wanted: bool = False  # one of its keys can have duplicates: its pods need the filters


def run(args: RemoveDuplicatesArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    log = handle.logger
    state = handle.state
    excluded = frozenset(args.exclude_owner_kinds)
    occurrence: dict[OwnerKey, int] = {}
    dups: dict[OwnerKey, dict[str, list[Pod]]] = {}
    # (namespace, id(owner refs), images) -> owner keys, signature and listed pods: a workload's
    # replicas share one entry (occurrences are summed per entry, then per key, below)
    identities: dict[tuple[str, int, tuple[str, ...]], _Identity] = {}

    # Before steps 1-3, an exact shortcut: the pods that pass the cheap, pure checks, and the keys
    # whose signature occurs twice on some node among them. The filters only ever remove pods, so
    # a key with no such repeat can have no duplicate, and the occurrences of its pods are never
    # read: their evictability checks (most of this strategy's time) are skipped. Few pods belong
    # to such a key in a large cluster (docs/benchmarks.md, "Figures behind the code").
    listed: list[tuple[str, list[tuple[Pod, _Identity]]]] = []
    for node in nodes:
        first: dict[tuple[str, ...], _Identity] = {}
        entries: list[tuple[Pod, _Identity]] = []
        for pod in state.pods_on_node(node.name):
            refs = pod.owner_refs
            # Cheap checks first; all of them are pure, so the order does not change the result.
            if not refs or (excluded and any(r.kind in excluded for r in refs)):
                continue
            if not namespace_allowed(args.namespaces, pod.namespace):
                continue
            ns = pod.namespace
            shape = (ns, id(refs), pod.images)  # refs: alive for the run; the loader shares equal ones
            known = identities.get(shape)
            if known is None:
                images = sorted(pod.images)
                images_hash = "#".join(images)
                known = identities[shape] = _Identity(
                    [OwnerKey(ns, r.kind, r.name, images_hash) for r in refs],
                    tuple(sorted(f"{ns}/{r.kind}/{r.name}/{img}" for r in refs for img in images)))
            entries.append((pod, known))
            other = first.get(known.signature)
            if other is None:
                first[known.signature] = known
            else:  # a second pod of this signature on this node: both may be duplicates
                known.wanted = other.wanted = True
        listed.append((node.name, entries))
    wanted = {k for ident in identities.values() if ident.wanted for k in ident.keys}
    for ident in identities.values():
        ident.wanted = ident.wanted or any(k in wanted for k in ident.keys)

    # Steps 1-3.
    for node_name, entries in listed:
        seen: set[tuple[str, ...]] = set()
        found = 0
        for pod, known in entries:
            if not known.wanted:
                continue
            if not handle.filter(pod) or not handle.pre_eviction_filter(pod):
                continue
            known.pods += 1
            keys, signature = known.keys, known.signature
            if signature not in seen:
                seen.add(signature)
                continue
            found += 1
            for k in keys:
                dups.setdefault(k, {}).setdefault(node_name, []).append(pod)
        if found:
            log.debug("node %s: %d duplicate pod(s)", node_name, found)

    for ident in identities.values():
        for k in ident.keys:
            occurrence[k] = occurrence.get(k, 0) + ident.pods

    # Steps 4-5.
    targets = TargetNodes(nodes)
    for key, by_node in dups.items():
        n_targets = targets.count([p for pods in by_node.values() for p in pods])
        if n_targets < 2:
            log.debug("%s: fewer than two feasible nodes for its duplicates, skipped", key)
            continue
        upper = math.ceil(occurrence[key] / n_targets)
        log.debug("%s: %d pod(s) over %d feasible node(s), at most %d per node", key, occurrence[key],
                  n_targets, upper)
        for node_name, pods in by_node.items():
            here = len(pods) + 1
            if here <= upper:
                continue
            reason = (f"{here} pods of {key} on node {node_name}, {here - upper} more than the even share "
                      f"of {upper} ({occurrence[key]} pods over {n_targets} feasible nodes)")
            for pod in pods[upper - 1:]:
                try:
                    handle.evict(pod, reason)
                except NamespaceLimitReached:
                    continue
                except NodeLimitReached:
                    break
                except TotalLimitReached:
                    return


SPEC = StrategySpec(
    name=NAME,
    extension_point="balance",
    args_type=RemoveDuplicatesArgs,
    run=run,
    summary="Evict extra copies of a workload's pods from nodes holding more than their even share.",
)

"""RemovePodsViolatingTopologySpreadConstraint (upstream v0.36): re-balance pods across topology domains.

Why: the scheduler honours ``topologySpreadConstraints`` only when it places a pod. After a zone
outage the replacements crowd the surviving zones and stay there when the zone returns; a node
pool scaled up starts empty. This Balance strategy evicts the minimum number of pods from the
crowded domains so that, rescheduled, they land in the domains below the average.

The algorithm is upstream's (steps 1-4 of the reference):

1. Pods = the non-terminal pods on the strategy's nodes passing Filter, ``namespaces`` and
   ``labelSelector``. Per namespace, the distinct constraints of those pods whose
   ``whenUnsatisfiable`` is in ``constraints``; a constraint's selector is its ``labelSelector``
   ANDed with the pod's values of its ``matchLabelKeys`` (a missing ``labelSelector`` selects no
   pod). ``minDomains`` is not supported (ignored), as upstream.
2. Domains = the ``topologyKey`` values of the nodes that carry the key and pass the inclusion
   policies (``nodeAffinityPolicy`` nil = Honor: the node matches the constraint owner's
   nodeSelector + required node affinity; ``nodeTaintsPolicy`` nil = Ignore; Honor: its
   NoSchedule/NoExecute taints are tolerated). Count per domain the namespace's non-terminating
   listed pods the selector matches (a pod on an excluded node still counts for its node's value,
   as upstream). max − min ≤ maxSkew → balanced, nothing to do.
3. avg = Σ / #domains; domains sorted by size ascending; inside a domain the pods with a
   nodeSelector/node affinity come first, then the others, each group by priority descending (nil
   last), so the tail is the lowest-priority pod without a selector. i=0, j=last; while i<j: if
   size[j] ≤ avg then j−−; skew = size[j]−size[i]; skew ≤ maxSkew → i++; else move =
   min(⌈size[j]−avg⌉, ⌈avg−size[i]⌉, ⌈(skew−maxSkew)/2⌉); move ≤ 0 → i++; otherwise stable-sort
   domain j so the pods that fit (``PodFitsAnyOtherNode``) onto a node of a domain below avg go
   last, take the last ``move`` pods, mark each for eviction only if ``topologyBalanceNodeFit`` is
   false or it fits, and move them (counted) from j to i.
4. Evict the marked pods, re-checking Filter, ``namespaces``, ``labelSelector`` and
   PreEvictionFilter. A node limit skips the rest of that node's pods, the total limit stops.

Deterministic order where upstream iterates Go maps: namespaces in order of first appearance
(node order, then pod order), domains of equal size in node order, pods of equal rank in pod order,
marked pods evicted in the order they were marked.

Deliberate difference: upstream's comparator (``!comparePodsByPriority``) actually orders equal
selector groups by priority *ascending*, contradicting its own comments ("a LOWER priority value
should be evicted FIRST"); kdesched implements the documented intent (lowest priority evicted first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kdesched.model.records import Node, NodeSelectorTerm, Pod, Toleration, TopologySpreadConstraint
from kdesched.model.scheduling import tolerates_all
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import RemovePodsViolatingTopologySpreadConstraintArgs, namespace_allowed
from kdesched.strategies.framework import (
    ClusterState,
    Handle,
    NamespaceLimitReached,
    NodeLimitReached,
    StrategySpec,
    TotalLimitReached,
)
from kdesched.strategies.nodefit import pod_fits_any_other_node

NAME = "RemovePodsViolatingTopologySpreadConstraint"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A pod's constraint as balancing sees it (upstream's internal ``topologySpreadConstraint``).

    Two pods' constraints are the same (deduplicated) when every field is equal; the owner's
    affinity/tolerations are only part of it when the matching inclusion policy is Honor."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None  # None selects no pod
    when_unsatisfiable: str
    honor_affinity: bool
    honor_taints: bool
    node_selector: tuple[tuple[str, str], ...] = ()
    node_required: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    @classmethod
    def of(cls, c: TopologySpreadConstraint, pod: Pod) -> SpreadConstraint:
        selector = c.label_selector
        if selector is not None and c.match_label_keys and pod.labels:
            extra = {k: pod.labels[k] for k in c.match_label_keys if k in pod.labels}
            selector = selector.with_labels(extra)
        honor_affinity = c.node_affinity_policy in (None, "Honor")
        honor_taints = c.node_taints_policy == "Honor"
        return cls(
            max_skew=c.max_skew,
            topology_key=c.topology_key,
            selector=selector,
            when_unsatisfiable=c.when_unsatisfiable,
            honor_affinity=honor_affinity,
            honor_taints=honor_taints,
            node_selector=tuple(sorted(pod.node_selector.items())) if honor_affinity else (),
            node_required=(pod.affinity.node_required if honor_affinity and pod.affinity is not None else None),
            tolerations=pod.tolerations if honor_taints else (),
        )

    @property
    def inclusion_key(self) -> tuple[object, ...]:
        """What decides the domains and their eligible nodes (the selector does not)."""
        return (self.topology_key, self.honor_affinity, self.honor_taints, self.node_selector,
                self.node_required, self.tolerations)

    def selects(self, pod: Pod) -> bool:
        return self.selector is not None and self.selector.matches(pod.labels)

    def includes(self, node: Node) -> bool:
        """The node inclusion policies: may this node's domain take the owner's pods at all?"""
        if self.honor_affinity:
            labels = node.labels
            if any(labels.get(k) != v for k, v in self.node_selector):
                return False
            if self.node_required is not None and not any(t.matches(node.name, labels) for t in self.node_required):
                return False
        return not self.honor_taints or tolerates_all(self.tolerations, node.taints)

    def __str__(self) -> str:
        sel = "<none>" if self.selector is None else (str(self.selector) or "<all>")
        return f"{self.topology_key} maxSkew={self.max_skew} {self.when_unsatisfiable} selector {sel}"


def has_selector_or_affinity(pod: Pod) -> bool:
    """Upstream's ``hasSelectorOrAffinity``: a nodeSelector or any node affinity."""
    aff = pod.affinity
    return bool(pod.node_selector) or (aff is not None and (aff.node_required is not None or bool(aff.node_preferred)))


def _domain_order(pod: Pod) -> tuple[int, int, int]:
    """Sort key inside a domain; the list's tail is evicted first."""
    return (0 if has_selector_or_affinity(pod) else 1,
            0 if pod.priority is not None else 1,
            -(pod.priority or 0))


@dataclass
class _Domain:
    value: str
    pods: list[Pod]


def _label_index(pods: Sequence[Pod]) -> dict[tuple[str, str], list[Pod]]:
    index: dict[tuple[str, str], list[Pod]] = {}
    for p in pods:
        for kv in p.labels.items():
            index.setdefault(kv, []).append(p)
    return index


def _selected(constraint: SpreadConstraint, pods: Sequence[Pod],
              index: Mapping[tuple[str, str], list[Pod]]) -> list[Pod]:
    """The namespace's pods the constraint selects, in pod order, using the label index."""
    sel = constraint.selector
    if sel is None:
        return []
    candidates: Sequence[Pod] = pods
    for kv in sel.match_labels:
        bucket = index.get(kv, [])
        if len(bucket) < len(candidates):
            candidates = bucket
    return [p for p in candidates if sel.matches(p.labels)]


def eligible_nodes(constraint: SpreadConstraint, nodes: Sequence[Node]) -> dict[str, list[Node]]:
    """The nodes carrying the topology key that pass the inclusion policies, by value, in node
    order; the keys, in order, are the constraint's pre-populated domains."""
    key = constraint.topology_key
    by_value: dict[str, list[Node]] = {}
    for n in nodes:
        value = n.labels.get(key)
        if value is not None and constraint.includes(n):
            by_value.setdefault(value, []).append(n)
    return by_value


def balance_domains(constraint: SpreadConstraint, domains: dict[str, list[Pod]], total: int,
                    by_value: Mapping[str, list[Node]], state: ClusterState, node_fit: bool,
                    marked: dict[int, tuple[Pod, str]], namespace: str) -> None:
    """Step 3: decide which pods leave the domains above the average (upstream ``balanceDomains``).

    ``by_value`` holds the eligible nodes per domain value (:func:`eligible_nodes`)."""
    avg = total / len(domains)
    sorted_domains = [_Domain(value, sorted(pods, key=_domain_order)) for value, pods in domains.items()]
    sorted_domains.sort(key=lambda d: len(d.pods))
    key = constraint.topology_key
    below: list[Node] = []
    for d in sorted_domains:
        if len(d.pods) < avg:
            below.extend(by_value.get(d.value, ()))
    fits_cache: dict[int, bool] = {}

    def fits(pod: Pod) -> bool:
        got = fits_cache.get(id(pod))
        if got is None:
            got = fits_cache[id(pod)] = pod_fits_any_other_node(pod, below, state)
        return got

    i, j = 0, len(sorted_domains) - 1
    while i < j:
        if len(sorted_domains[j].pods) <= avg:
            j -= 1
        high, low = sorted_domains[j], sorted_domains[i]
        skew = len(high.pods) - len(low.pods)
        if skew <= constraint.max_skew:
            i += 1
            continue
        move = int(min(math.ceil(len(high.pods) - avg), math.ceil(avg - len(low.pods)),
                       math.ceil((skew - constraint.max_skew) / 2)))
        if move <= 0:
            i += 1
            continue
        high.pods.sort(key=fits)  # stable: the pods that fit a node below average go last
        leaving = high.pods[len(high.pods) - move:]
        reason = (f"{key}={high.value} has {len(high.pods)} pods matching the spread constraint "
                  f"({constraint}) of namespace {namespace}, {key}={low.value} has {len(low.pods)}; "
                  f"average {avg:.3g} over {len(sorted_domains)} domains")
        for pod in leaving:
            if node_fit and not fits(pod):
                continue
            marked.setdefault(id(pod), (pod, reason))
        del high.pods[len(high.pods) - move:]
        low.pods.extend(leaving)


def run(args: RemovePodsViolatingTopologySpreadConstraintArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    state = handle.state
    allowed = frozenset(args.constraints)
    selector = args.label_selector
    node_by_name = {n.name: n for n in nodes}

    def listed(pod: Pod) -> bool:
        return namespace_allowed(args.namespaces, pod.namespace) and (
            selector is None or selector.matches(pod.labels))

    # Step 1. Group the listed pods by namespace; the Filter (the costly part) only runs for the
    # namespaces where some pod has a constraint of an allowed kind (constraints come from
    # Filter-passing pods only, so the result is the same).
    by_ns: dict[str, list[Pod]] = {}
    constrained: set[str] = set()
    for n in nodes:
        for p in state.pods_on_node(n.name):
            if listed(p):
                by_ns.setdefault(p.namespace, []).append(p)
                if p.topology_spread_constraints and p.namespace not in constrained and any(
                        c.when_unsatisfiable in allowed for c in p.topology_spread_constraints):
                    constrained.add(p.namespace)
    marked: dict[int, tuple[Pod, str]] = {}
    # Constraints of many workloads differ only in their selector: their domains are computed once.
    eligible_cache: dict[tuple[object, ...], dict[str, list[Node]]] = {}
    for namespace, all_pods in by_ns.items():
        if namespace not in constrained:
            continue
        pods = [p for p in all_pods if handle.filter(p)]
        constraints: list[SpreadConstraint] = []
        seen: set[SpreadConstraint] = set()
        for p in pods:
            for c in p.topology_spread_constraints:
                if c.when_unsatisfiable not in allowed:
                    continue
                sc = SpreadConstraint.of(c, p)
                if sc not in seen:
                    seen.add(sc)
                    constraints.append(sc)
        if not constraints:
            continue
        index = _label_index(pods)
        for sc in constraints:
            # Step 2. Domains and counts.
            key = sc.topology_key
            by_value = eligible_cache.get(sc.inclusion_key)
            if by_value is None:
                by_value = eligible_cache[sc.inclusion_key] = eligible_nodes(sc, nodes)
            domains: dict[str, list[Pod]] = {value: [] for value in by_value}
            total = 0
            for p in _selected(sc, pods, index):
                if p.terminating:
                    continue
                value = node_by_name[p.node_name].labels.get(key)
                if value is None:
                    continue
                domains.setdefault(value, []).append(p)
                total += 1
            if not domains:
                continue
            sizes = [len(v) for v in domains.values()]
            if max(sizes) - min(sizes) <= sc.max_skew:
                handle.logger.debug("namespace %s: constraint %s is balanced (%s)", namespace, sc, sizes)
                continue
            balance_domains(sc, domains, total, by_value, state, args.topology_balance_node_fit, marked, namespace)

    # Step 4. Evict what was marked.
    node_limited: set[str] = set()
    for pod, reason in marked.values():
        if pod.node_name in node_limited:
            continue
        if not listed(pod) or not handle.filter(pod) or not handle.pre_eviction_filter(pod):
            continue
        try:
            handle.evict(pod, reason)
        except NodeLimitReached:
            node_limited.add(pod.node_name)
        except NamespaceLimitReached as exc:
            handle.logger.debug("%s", exc)
        except TotalLimitReached:
            return


SPEC = StrategySpec(
    name=NAME,
    extension_point="balance",
    args_type=RemovePodsViolatingTopologySpreadConstraintArgs,
    run=run,
    summary="evict the fewest pods needed to bring topology spread constraints back within maxSkew",
)

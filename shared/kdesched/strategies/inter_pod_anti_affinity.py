"""RemovePodsViolatingInterPodAntiAffinity (upstream): evict pods whose required anti-affinity is violated.

Why: required pod anti-affinity is enforced only at scheduling time. Two pods that must not share
a node (or a zone) can end up together after labels change, after a pod without the term was
placed beside one with it, or after a node rejoined. This strategy evicts the pod whose own term
is violated, lowest priority first, until the conflicts are gone.

Upstream behaviour kept: the pods considered are the non-terminal pods passing ``namespaces`` and
``labelSelector`` (Filter is applied only to the pod to evict); per node, in priority order
low→high, a pod P is evicted when one of its **own** required anti-affinity terms matches another
pod Q (Q's namespace in the term's ``namespaces``, defaulting to P's; Q's labels match the term's
selector; Q's name differs from P's) that runs on P's node or on a node with the same value of the
term's ``topologyKey``, and Filter + PreEvictionFilter pass. Once P is evicted it no longer counts
as a Q for later pods. Preferred terms, ``namespaceSelector`` and ``matchLabelKeys`` are ignored,
as upstream does. P iterates the strategy's nodes (the event's node for an event-scoped run); Q is
looked up on every Ready selected node, since a zone-wide conflict may sit on another node.

Performance: only pods with required anti-affinity terms can be evicted, so nothing is built when
the strategy's nodes hold none. Otherwise each distinct (namespaces, selector, topologyKey) term is
resolved once through a per-namespace label index into per-node and per-topology-value counts;
checking a pod is then a dictionary lookup, not a scan of every pod (150,000 pods stay cheap).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kdesched.model.records import Node, Pod, PodAffinityTerm
from kdesched.model.scheduling import sort_by_priority_low_to_high
from kdesched.model.selectors import LabelSelector
from kdesched.policy.types import RemovePodsViolatingInterPodAntiAffinityArgs, namespace_allowed
from kdesched.strategies.framework import (
    Handle,
    StrategySpec,
    evict_node_pods,
)

NAME = "RemovePodsViolatingInterPodAntiAffinity"


@dataclass
class _Domains:
    """The pods one term selects, counted per node and per topology value (with names, for Q≠P)."""

    topology_key: str
    by_node: Counter[str] = field(default_factory=Counter)
    names_by_node: dict[str, Counter[str]] = field(default_factory=dict)
    by_value: Counter[str] = field(default_factory=Counter)
    names_by_value: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, pod: Pod, node: Node, delta: int) -> None:
        self.by_node[node.name] += delta
        self.names_by_node.setdefault(node.name, Counter())[pod.name] += delta
        value = node.labels.get(self.topology_key)
        if value is not None:
            self.by_value[value] += delta
            self.names_by_value.setdefault(value, Counter())[pod.name] += delta

    def other_pod_near(self, pod: Pod, node: Node) -> bool:
        """Is there a selected pod not named like ``pod`` on ``node`` or in its topology domain?

        Upstream's ``hasSameLabelValue``: the same node always matches; another node matches when
        both carry the key with equal values. All pods on ``node`` share its value, so when the
        node has the key the per-value count already includes them."""
        value = node.labels.get(self.topology_key)
        if value is not None:
            total, names = self.by_value[value], self.names_by_value.get(value)
        else:
            total, names = self.by_node[node.name], self.names_by_node.get(node.name)
        same_name = names[pod.name] if names is not None else 0
        return total - same_name > 0


class _Index:
    """Pods that may be a Q, indexed by namespace and by label, with per-term domain counts."""

    def __init__(self, pods: Sequence[tuple[Pod, Node]], keys: Collection[str] | None = None) -> None:
        """``keys``: the label keys the terms to resolve can look up (:func:`_lookup_keys`); None
        indexes every label. Restricting it changes nothing but the work: a bucket of an indexed
        key holds exactly the pods it would hold in the full index, in the same order."""
        self.by_namespace: dict[str, list[tuple[Pod, Node]]] = {}
        self.by_label: dict[tuple[str, str, str], list[tuple[Pod, Node]]] = {}
        by_namespace, by_label = self.by_namespace, self.by_label
        for entry in pods:
            pod = entry[0]
            ns = pod.namespace
            by_namespace.setdefault(ns, []).append(entry)
            if keys is None:
                for k, v in pod.labels.items():
                    by_label.setdefault((ns, k, v), []).append(entry)
                continue
            labels = pod.labels
            for k in keys:
                value = labels.get(k)
                if value is not None:
                    by_label.setdefault((ns, k, value), []).append(entry)
        self.terms: dict[tuple[tuple[str, ...], LabelSelector, str], _Domains] = {}
        self.removed: set[int] = set()  # id() of the pods planned away (alive for the run)

    def _candidates(self, namespace: str, selector: LabelSelector) -> list[tuple[Pod, Node]]:
        """A superset of the namespace's pods ``selector`` matches, as small as the index allows."""
        best: list[tuple[Pod, Node]] | None = None
        for k, v in selector.match_labels:
            bucket = self.by_label.get((namespace, k, v), [])
            if best is None or len(bucket) < len(best):
                best = bucket
        if best is None:
            for req in selector.match_expressions:
                if req.operator == "In":
                    union: list[tuple[Pod, Node]] = []
                    for v in req.values:
                        union.extend(self.by_label.get((namespace, req.key, v), ()))
                    if best is None or len(union) < len(best):
                        best = union
        return best if best is not None else self.by_namespace.get(namespace, [])

    def domains(self, namespaces: tuple[str, ...], term: PodAffinityTerm) -> _Domains:
        selector = term.label_selector
        assert selector is not None
        key = (namespaces, selector, term.topology_key)
        found = self.terms.get(key)
        if found is None:
            found = _Domains(term.topology_key)
            removed = self.removed
            for ns in namespaces:
                for pod, node in self._candidates(ns, selector):
                    if selector.matches(pod.labels) and id(pod) not in removed:
                        found.add(pod, node, 1)
            self.terms[key] = found
        return found

    def remove(self, pod: Pod, node: Node) -> None:
        """``pod`` is evicted: it no longer counts as a Q for any term."""
        for (namespaces, selector, _), domains in self.terms.items():
            if pod.namespace in namespaces and selector.matches(pod.labels):
                domains.add(pod, node, -1)
        # Terms resolved later must not see it either (skipped there: deleting it from every
        # bucket scanned lists of thousands; any bucket is only a superset to match against).
        self.removed.add(id(pod))


def _lookup_keys(pods: Iterable[Pod]) -> set[str]:
    """The label keys :meth:`_Index._candidates` may look up for these pods' required
    anti-affinity terms (``matchLabels`` keys and ``In`` expression keys)."""
    keys: set[str] = set()
    for pod in pods:
        assert pod.affinity is not None
        for term in pod.affinity.pod_anti_affinity_required:
            selector = term.label_selector
            if selector is None:
                continue
            keys.update(k for k, _ in selector.match_labels)
            keys.update(req.key for req in selector.match_expressions if req.operator == "In")
    return keys


def _term_namespaces(pod: Pod, term: PodAffinityTerm) -> tuple[str, ...]:
    return tuple(sorted(set(term.namespaces))) if term.namespaces else (pod.namespace,)


def violated_term(pod: Pod, node: Node, index: _Index) -> PodAffinityTerm | None:
    """The first of ``pod``'s required anti-affinity terms matched by another pod near it."""
    assert pod.affinity is not None
    for term in pod.affinity.pod_anti_affinity_required:
        if term.label_selector is None:  # a nil selector matches no pod
            continue
        if index.domains(_term_namespaces(pod, term), term).other_pod_near(pod, node):
            return term
    return None


def run(args: RemovePodsViolatingInterPodAntiAffinityArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    state = handle.state
    selector = args.label_selector

    def listed(pod: Pod) -> bool:
        return namespace_allowed(args.namespaces, pod.namespace) and (
            selector is None or selector.matches(pod.labels))

    candidates: dict[str, list[Pod]] = {}
    for node in nodes:
        own = [p for p in state.pods_on_node(node.name)
               if p.affinity is not None and p.affinity.pod_anti_affinity_required and listed(p)]
        if own:
            candidates[node.name] = own
    if not candidates:
        handle.logger.debug("no pod with required anti-affinity on the %d node(s)", len(nodes))
        return

    if args.namespaces is None and selector is None:  # every pod is listed: no call per pod
        everyone = [(p, n) for n in state.nodes for p in state.pods_on_node(n.name)]
    else:
        everyone = [(p, n) for n in state.nodes for p in state.pods_on_node(n.name) if listed(p)]
    # only the label keys the candidates' terms look up are indexed (indexing every label of every
    # pod was most of this strategy's time in a large cluster: docs/benchmarks.md)
    index = _Index(everyone, _lookup_keys(p for pods in candidates.values() for p in pods))
    for node in nodes:
        pods = candidates.get(node.name)
        if not pods:
            continue
        handle.logger.debug("processing node %s (%d pod(s) with required anti-affinity)", node.name, len(pods))
        if not evict_node_pods(handle, _violators(handle, node, pods, index),
                               on_evicted=functools.partial(_forget, index, node)):
            return


def _forget(index: _Index, node: Node, pod: Pod) -> None:
    """A planned pod's conflicts disappear: drop it from the index."""
    index.remove(pod, node)


def _violators(handle: Handle, node: Node, pods: list[Pod], index: _Index) -> Iterator[tuple[Pod, str]]:
    """The node's pods (lowest priority first) whose own required anti-affinity is violated now;
    lazy, so a pod whose only conflict was just planned away is no longer a violator."""
    for pod in sort_by_priority_low_to_high(pods):
        term = violated_term(pod, node, index)
        if term is None or not handle.filter(pod) or not handle.pre_eviction_filter(pod):
            continue
        where = (f"node {node.name}" if term.topology_key not in node.labels
                 else f"{term.topology_key}={node.labels[term.topology_key]}")
        yield pod, f"pod's required anti-affinity ({term.label_selector}) matches another pod in {where}"

SPEC = StrategySpec(
    name=NAME,
    extension_point="deschedule",
    args_type=RemovePodsViolatingInterPodAntiAffinityArgs,
    run=run,
    summary="evict pods whose own required pod anti-affinity is violated, lowest priority first",
)

"""Required pod anti-affinity as the scheduler applies it, for the "somewhere to go" check.

Why: with the safety defaults on, a pod is evicted only if another node will take it
(docs/safety.md, "Somewhere to go"). Upstream's NodeFit, which the DefaultEvictor's ``nodeFit``
keeps for parity (:mod:`kdesched.strategies.nodefit`), checks required anti-affinity one way and on
the candidate node only. The scheduler checks it over the whole topology domain (every node with
the same value of ``topologyKey``: a zone, a rack) and both ways (the existing pods' terms against
the incoming pod too). A pod whose anti-affinity names a zone, or that other pods' anti-affinity
keeps out, was evicted with a destination the scheduler then refused, and went Pending.

:class:`AntiAffinity` adds the two missing halves for the Pacer (:mod:`kdesched.evictor.pacing`):

* the pod's own terms against the pods on the *other* nodes of the candidate's domain (the
  candidate's own pods are NodeFit's);
* every existing pod's required terms against the incoming pod, where that pod runs in the
  candidate's domain.

Terms as the scheduler reads them (:meth:`AntiAffinity.selects`): ``namespaces`` and
``namespaceSelector`` (neither: the pod's own namespace), ``matchLabelKeys`` and
``mismatchLabelKeys``; NodeFit reads only the first, so a term with the others is checked here on the
candidate node too. Plan-aware: pods this
run plans to evict no longer count, and pods it moves count where they most likely land
(:meth:`AntiAffinity.moved`; on the same node the Pacer's reservation check does it).

Required pod **affinity** too, which NodeFit does not check at all: the candidate's domain must
hold a pod each term selects (a node without the term's topology key never does), else the
scheduler leaves the replacement Pending. Its special case holds: the first pod of a group with
affinity to itself may go anywhere when no pod in the cluster matches any of its terms. Pods this
run evicts are no pod to run with; pods it moves are not counted where they may land (cautious:
the pod then stays, reported "nowhere to go").
"""

from __future__ import annotations

from kdesched.model.records import Node, Pod, PodAffinityTerm
from kdesched.strategies.framework import ClusterState


class AntiAffinity:
    """The domain-wide and reverse anti-affinity checks for one run (indexes built on first use)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._domains: dict[str, dict[str, list[str]]] = {}  # topology key -> value -> node names
        self._terms: dict[str, dict[str, list[tuple[Pod, PodAffinityTerm]]]] | None = None
        # (selector, key, value) -> the pods of that domain the label selector matches, in any
        # namespace; the plan only ever removes pods, so a list may hold planned ones (skipped)
        self._matches: dict[tuple[object, str, str], list[Pod]] = {}
        # the pods this run moves, by the node they most likely land on, and those with required terms
        self._moved_on: dict[str, list[Pod]] = {}
        # their required terms by topology key and its value on the destination: (pod, term, destination)
        self._moved_terms: dict[str, dict[str, list[tuple[Pod, PodAffinityTerm, str]]]] = {}

    def selects(self, term: PodAffinityTerm, owner: Pod, other: Pod, *, anti: bool) -> bool:
        """Whether ``owner``'s ``term`` selects ``other`` as the scheduler does: its label selector
        with ``matchLabelKeys`` (key = owner's value) and ``mismatchLabelKeys`` (key != owner's
        value) merged in, over ``namespaces`` plus ``namespaceSelector`` (neither: the owner's own
        namespace). A namespace whose labels the snapshot does not hold is counted for an
        anti-affinity term and not for an affinity term (``anti``): the cautious reading both ways."""
        if term.label_selector is None or not term.label_selector.matches(other.labels):
            return False
        for key in term.match_label_keys:
            if key in owner.labels and other.labels.get(key) != owner.labels[key]:
                return False
        for key in term.mismatch_label_keys:
            if key in owner.labels and other.labels.get(key) == owner.labels[key]:
                return False
        if other.namespace in term.namespaces:
            return True
        if term.namespace_selector is None:
            return not term.namespaces and other.namespace == owner.namespace
        if term.namespace_selector.empty:
            return True  # every namespace
        ns = self.state.snapshot.namespaces.get(other.namespace)
        return anti if ns is None else term.namespace_selector.matches(ns.labels)

    def moved(self, pod: Pod, destination: Node) -> None:
        """``pod`` is planned to land on ``destination`` (the Pacer's reservation): the pods planned
        after it are checked against it there, across its domains (the same node is the Pacer's)."""
        self._moved_on.setdefault(destination.name, []).append(pod)
        for term in pod.affinity.pod_anti_affinity_required if pod.affinity is not None else ():
            value = destination.labels.get(term.topology_key)
            if value is not None and term.label_selector is not None:
                self._moved_terms.setdefault(term.topology_key, {}).setdefault(value, []).append(
                    (pod, term, destination.name))

    def failure(self, pod: Pod, node: Node) -> str | None:
        """Why the scheduler would refuse ``pod`` on ``node`` for required anti-affinity that NodeFit
        does not check, or None."""
        if pod.affinity is not None:
            for term in pod.affinity.pod_anti_affinity_required:
                found = self._own_term_match(pod, term, node)
                if found is not None:
                    return (f"pod's required anti-affinity ({term.topology_key}) matches pod {found.key} on node "
                            f"{found.node_name}, in the same {term.topology_key} as node {node.name}")
        for key, by_value in self._existing_terms().items():
            value = node.labels.get(key)
            if value is None:
                continue
            for other, term in by_value.get(value, ()):
                if other is pod or other.uid == pod.uid or self.state.is_planned(other):
                    continue
                if self.selects(term, other, pod, anti=True):
                    return (f"pod {other.key} on node {other.node_name} has required anti-affinity ({key}) against "
                            f"the pod, in the same {key} as node {node.name}")
        return self._moved_failure(pod, node) or self._affinity_failure(pod, node)

    def _affinity_failure(self, pod: Pod, node: Node) -> str | None:
        """Why ``pod``'s required pod affinity finds nothing to run with in ``node``'s domains, or None."""
        terms = pod.affinity.pod_affinity_required if pod.affinity is not None else ()
        missing: PodAffinityTerm | None = None
        for term in terms:
            value = node.labels.get(term.topology_key)
            if value is None:
                return f"node {node.name} has no {term.topology_key} label, which the pod's required pod affinity needs"
            if missing is None and not any(self._counts(pod, other) and self.selects(term, pod, other, anti=False)
                                           for other in self._selected(term, value)):
                missing = term
        if missing is None:
            return None
        # the scheduler's special case: the first pod of a group with affinity to itself (no pod
        # anywhere that a term could select, counted cautiously: as the anti-affinity reading does)
        if all(self.selects(t, pod, pod, anti=False) for t in terms) and not any(
                self._counts(pod, other) and self.selects(t, pod, other, anti=True)
                for t in terms for other in self._selected(t, None)):
            return None
        return (f"pod's required pod affinity ({missing.topology_key}) finds no pod to run with in the "
                f"{missing.topology_key} of node {node.name}")

    def _counts(self, pod: Pod, other: Pod) -> bool:
        return other is not pod and other.uid != pod.uid and not self.state.is_planned(other)

    def _selected(self, term: PodAffinityTerm, value: str | None) -> list[Pod]:
        """The pods ``term``'s label selector matches on the nodes whose ``topology_key`` is
        ``value`` (None: on every node that has the key), in any namespace, planned ones included:
        the callers apply the rest of the term (:meth:`selects`) and skip the planned."""
        if term.label_selector is None:
            return []
        memo = (term.label_selector, term.topology_key, "\0*" if value is None else value)
        matches = self._matches.get(memo)
        if matches is None:
            domains = self._domain(term.topology_key)
            names = [n for names in domains.values() for n in names] if value is None else domains.get(value, [])
            matches = [other for name in names for other in self.state.pods_on_node(name)
                       if term.label_selector.matches(other.labels)]
            self._matches[memo] = matches
        return matches

    def _moved_failure(self, pod: Pod, node: Node) -> str | None:
        """Anti-affinity between ``pod`` and a pod this run moves onto another node of one of
        ``node``'s domains, either way."""
        if pod.affinity is not None:
            for term in pod.affinity.pod_anti_affinity_required:
                value = node.labels.get(term.topology_key)
                if term.label_selector is None or value is None:
                    continue
                for name in self._domain(term.topology_key).get(value, ()):
                    if name == node.name:
                        continue  # the same node: the Pacer's reservation check
                    for other in self._moved_on.get(name, ()):
                        if other is not pod and self.selects(term, pod, other, anti=True):
                            return (f"required anti-affinity ({term.topology_key}) between {pod.key} and {other.key}, "
                                    f"which this run also moves to node {name}")
        for key, by_value in self._moved_terms.items():
            value = node.labels.get(key)
            for other, term, destination in by_value.get(value, ()) if value is not None else ():
                if other is pod or destination == node.name:
                    continue
                if self.selects(term, other, pod, anti=True):
                    return (f"required anti-affinity ({key}) between {other.key}, which this run also moves to node "
                            f"{destination}, and {pod.key}")
        return None

    def _own_term_match(self, pod: Pod, term: PodAffinityTerm, node: Node) -> Pod | None:
        """A pod on another node of ``node``'s domain that ``pod``'s ``term`` keeps it away from."""
        key = term.topology_key
        value = node.labels.get(key)
        if term.label_selector is None or value is None:
            return None
        names = self._domain(key).get(value, ())
        if all(name == node.name for name in names) and not self._beyond_nodefit(term):
            return None  # a domain of one node (kubernetes.io/hostname): NodeFit's check
        for other in self._selected(term, value):
            # the candidate's own pods are NodeFit's (strategies/nodefit.py), unless NodeFit cannot
            # read the term (namespaceSelector, label keys): then they are checked here too
            if other is not pod and (other.node_name != node.name or self._beyond_nodefit(term)) \
                    and not self.state.is_planned(other) and self.selects(term, pod, other, anti=True):
                return other
        return None

    @staticmethod
    def _beyond_nodefit(term: PodAffinityTerm) -> bool:
        return term.namespace_selector is not None or bool(term.match_label_keys or term.mismatch_label_keys)

    def _domain(self, key: str) -> dict[str, list[str]]:
        """Node names by their value of ``key``, over every node of the snapshot (the scheduler counts
        pods on every node, Ready or not)."""
        known = self._domains.get(key)
        if known is None:
            known = {}
            for n in self.state.snapshot.nodes.values():
                value = n.labels.get(key)
                if value is not None:
                    known.setdefault(value, []).append(n.name)
            self._domains[key] = known
        return known

    def _existing_terms(self) -> dict[str, dict[str, list[tuple[Pod, PodAffinityTerm]]]]:
        """Every running pod's required anti-affinity terms, by topology key and the value of that key
        on the pod's node (built once: the pods with such terms are few)."""
        if self._terms is None:
            self._terms = {}
            nodes = self.state.snapshot.nodes
            for p in self.state.snapshot.pods:
                if p.affinity is None or not p.affinity.pod_anti_affinity_required or p.terminal or not p.node_name:
                    continue
                n = nodes.get(p.node_name)
                if n is None:
                    continue
                for term in p.affinity.pod_anti_affinity_required:
                    value = n.labels.get(term.topology_key)
                    if value is not None and term.label_selector is not None:
                        self._terms.setdefault(term.topology_key, {}).setdefault(value, []).append((p, term))
        return self._terms

"""Where a run's snapshot comes from: a LIST per run, the node-local reads of a taint run, or the
watch cache.

Why: the same run reads very different amounts depending on what it decides. A taint decision
needs only its node's pods and whether two Ready nodes exist; a run with the safety defaults and
something to evict needs every pod (somewhere to go, the workload's other pods); ``kdesched serve``
and a function with ``KDESCHED_CACHE=1`` plan from a warm watch cache instead of listing. The
reactor picks one of these per run (:mod:`kdesched.reactor.run.runner`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from kdesched.engine import plan_run
from kdesched.evictor.planner import Refusal
from kdesched.evictor.reasons import Reason
from kdesched.kube.client import KubeClient
from kdesched.kube.snapshot import load_live_snapshot
from kdesched.model.records import Node
from kdesched.model.selectors import parse_selector
from kdesched.model.snapshot import Snapshot
from kdesched.policy.types import Policy
from kdesched.reactor.events.routing import kinds_needed, needs_all_pods

if TYPE_CHECKING:  # the watch cache is imported only by who builds one (serve, $KDESCHED_CACHE=1): cold start
    from kdesched.kube.cache import ClusterCache

SnapshotLoader = Callable[[KubeClient, "Collection[str] | None", Sequence[str]], Snapshot]


def default_loader(client: KubeClient, pod_nodes: Collection[str] | None, include: Sequence[str]) -> Snapshot:
    return load_live_snapshot(client, pod_nodes=pod_nodes, include=include)


CACHE_NOTE = "read from the watch cache"

# Deschedule strategies whose decision for a node reads only that node (its taints) and the run's
# "at least 2 Ready nodes" rule: a node-scoped run of these alone need not LIST every Node.
# (RemovePodsViolatingNodeAffinity is not one: it asks whether the pod fits any other node.)
NODE_LOCAL_STRATEGIES = frozenset({"RemovePodsViolatingNodeTaints"})
# Deschedule strategies that ask whether a pod fits another node (resources, pod slots, inter-pod
# anti-affinity), which the event node's pods alone cannot answer (they make other nodes look empty)
FITS_ANOTHER_NODE = frozenset({"RemovePodsViolatingNodeAffinity"})
WITNESS_PAGE = 4  # nodes per page while looking for a second Ready node


def node_local_snapshot(client: KubeClient, node: str, include: Sequence[str],
                        node_selector: str | None = None) -> Snapshot:
    """What a node-scoped run of :data:`NODE_LOCAL_STRATEGIES` needs, read over the API: the node's
    pods (``spec.nodeName``), the other ``include`` kinds but Nodes, the event node (one GET) and
    just enough other Nodes (small LIST pages) to know whether the run's "at least 2 Ready nodes
    selected by the policy" rule holds. It decides exactly what the full Node list would; when the
    run has something to evict, the safety defaults read everything anyway (somewhere to go)."""
    pods = load_live_snapshot(client, pod_nodes=[node], include=[k for k in include if k != "Node"])
    selector = parse_selector(node_selector, "nodeSelector") if node_selector else None

    def counts(n: Node) -> bool:
        return n.ready and (selector is None or selector.matches(n.labels))

    nodes: list[Node] = []
    raw = client.get_raw("Node", node)
    if raw is not None:
        nodes.append(Node.from_api(raw))
    read = 0
    if sum(map(counts, nodes)) < 2:
        for page in client.list_pages("Node", page_size=WITNESS_PAGE):
            read += len(page)
            nodes.extend(n for n in map(Node.from_api, page) if n.name != node and counts(n))
            if sum(map(counts, nodes)) >= 2:
                break
    note = (f"nodes read: {node} and {read} other(s) ({len(nodes) - (raw is not None)} Ready and selected; "
            "a taint decision needs only its node and whether 2+ Ready nodes exist)")
    return Snapshot.build(nodes, pods.pods, pods.pdbs, pods.priority_classes.values(), pods.namespaces.values(),
                          pods.pvcs.values(), (*pods.notes, note))


class CachedLoader:
    """A :data:`SnapshotLoader` that plans from a warm :class:`~kdesched.kube.cache.ClusterCache`
    once it has listed every kind the run reads (and is under its ceiling), else LISTs like
    :func:`default_loader`. ``kdesched serve`` and a function with ``KDESCHED_CACHE=1`` use it."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.from_cache = 0
        self.listed = 0

    def __call__(self, client: KubeClient, pod_nodes: Collection[str] | None, include: Sequence[str]) -> Snapshot:
        if self.cache.usable(include):
            try:
                snapshot = self.cache.snapshot(pod_nodes, include, notes=(CACHE_NOTE,))
            except LookupError:  # gave up in between: LIST
                pass
            else:
                self.from_cache += 1
                return snapshot
        self.listed += 1
        return load_live_snapshot(client, pod_nodes=pod_nodes, include=include)


@dataclass(frozen=True, slots=True)
class NodeRunRead:
    """What a node-scoped run read: its snapshot, whether it holds every pod, and why; and whether it
    holds every Node (what the health brake judges)."""

    snapshot: Snapshot
    all_pods: bool
    why: str
    all_nodes: bool = True


def with_every_node(client: KubeClient, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` (a node's pods, a few Nodes: :func:`node_local_snapshot`) with every Node instead:
    one LIST of the Nodes, the pods left as they were read."""
    nodes = load_live_snapshot(client, include=("Node",)).nodes.values()
    notes = tuple(n for n in snapshot.notes if not n.startswith("nodes read: "))
    return Snapshot.build(nodes, snapshot.pods, snapshot.pdbs, snapshot.priority_classes.values(),
                          snapshot.namespaces.values(), snapshot.pvcs.values(),
                          (*notes, "nodes read: every Node (the health brake judges them; the pods are the node's)"))


def read_for_node_run(client: KubeClient, loader: SnapshotLoader, policy: Policy, strategies: Sequence[str],
                      node: str, scoped_nodes: Sequence[str] | None, *, safety_on: bool, now: float,
                      health_brake: bool = True, surge_first: bool = True) -> NodeRunRead:
    """The least a node-scoped run needs to decide exactly: the node's pods (and, for a taint run
    without the watch cache, only enough Nodes), unless a strategy reads every pod. With the
    safety defaults on, or RemovePodsViolatingNodeAffinity (which evicts only a pod that fits some
    node), the node's pods are first planned alone (a probe); only when that finds something to
    evict is every pod read and the decision made again. Exact: other nodes' pods only add usage
    and anti-affinity, so they can only turn an eviction planned from the node's pods into none,
    never the reverse. With only enough Nodes read and ``health_brake`` on, the same probe decides
    whether every Node is read (one LIST; the pods stay the node's): the brake judges them before
    the run evicts, or begins a surge-first move (``surge_first``: a pod its PodDisruptionBudget
    keeps may move surge-first, :func:`surge_candidate`). A run with neither keeps the few Nodes;
    if the ledger holds surge-first moves, which every run's settle advances, the settle reads every
    Node itself (:func:`kdesched.reactor.run.admit.decide`, ``every_node``: :func:`with_every_node`)."""
    all_pods, why = needs_all_pods(policy, strategies)
    all_nodes = True
    if not all_pods and loader is default_loader and set(strategies) <= NODE_LOCAL_STRATEGIES:
        snapshot = node_local_snapshot(client, node, kinds_needed(policy), policy.node_selector)
        all_nodes = False
    else:
        snapshot = loader(client, None if all_pods else [node], kinds_needed(policy))
    fits_elsewhere = sorted(set(strategies) & FITS_ANOTHER_NODE)
    few_nodes = health_brake and not all_nodes  # the brake would have only a few Nodes to judge
    if not all_pods and (safety_on or fits_elsewhere or few_nodes):
        probe = plan_run(policy, snapshot, now=datetime.fromtimestamp(now, UTC), strategies=strategies,
                         nodes=scoped_nodes)
        if probe.evictions and (safety_on or fits_elsewhere):
            why = ("safety defaults: somewhere to go and per-workload pacing read every pod" if safety_on else
                   f"{', '.join(fits_elsewhere)} evicts only a pod that fits another node: that needs every "
                   "node's pods")
            return NodeRunRead(loader(client, None, kinds_needed(policy)), True, why)
        # (a surge-first move needs the safety defaults: their pacing finds its candidates)
        surges = surge_first and safety_on and any(map(surge_candidate, probe.refusals))
        if few_nodes and (probe.evictions or surges):
            return NodeRunRead(with_every_node(client, snapshot), False, why)
    return NodeRunRead(snapshot, all_pods, why, all_nodes)


def surge_candidate(refusal: Refusal) -> bool:
    """May a pod the probe refused move surge-first in the run (a scale-up the health brake holds)?
    One its PodDisruptionBudget keeps, of a controller (:func:`kdesched.evictor.surge_moves.candidates`;
    the run's other candidates are pods it plans to evict). Exact as the probe is: the run adds
    checks to the same pods, which only turn an eviction or a PDB refusal into another refusal."""
    return refusal.kind == Reason.PDB and bool(refusal.pod.owner_refs)

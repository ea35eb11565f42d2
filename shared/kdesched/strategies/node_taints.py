"""RemovePodsViolatingNodeTaints (upstream v0.36): evict pods that no longer tolerate their node's taints.

Why: the scheduler checks taints only when it places a pod. A ``NoSchedule`` taint added later
(maintenance, a node problem handler, a dedicated pool) leaves the pods already there running;
this strategy moves the ones that would not be admitted today. kdesched runs it on the node whose
taints changed (``dev.kdesched.node.taints.changed``) instead of waiting for the next cycle.

Upstream behaviour kept: the considered taints are ``NoSchedule`` (plus ``PreferNoSchedule`` with
``includePreferNoSchedule``; ``NoExecute`` never: the kubelet already evicts for it), minus the
``excludedTaints`` and, when ``includedTaints`` is set, only the included ones; an entry of either
list matches a taint by ``key`` or by ``key=value``. A pod is evicted when its tolerations do not
tolerate every considered taint of its node (the scheduler's toleration rules). The pods are the
node's non-terminal pods passing Filter, PreEvictionFilter, ``namespaces`` and ``labelSelector``.
A node limit moves on to the next node, a namespace limit to the next pod, the total limit ends it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from kdesched.model.records import Node, Pod, Taint, Toleration
from kdesched.policy.types import RemovePodsViolatingNodeTaintsArgs, namespace_allowed
from kdesched.strategies.framework import (
    Handle,
    StrategySpec,
    evict_node_pods,
)

NAME = "RemovePodsViolatingNodeTaints"

TaintFilter = Callable[[Taint], bool]


def _listed(taint: Taint, entries: frozenset[str]) -> bool:
    """An entry names a taint by ``key`` or, for a taint with a value, by ``key=value``."""
    return taint.key in entries or (taint.value != "" and f"{taint.key}={taint.value}" in entries)


def taint_filter(args: RemovePodsViolatingNodeTaintsArgs) -> TaintFilter:
    """Which of a node's taints the strategy enforces, built once per run from the arguments."""
    effects = ("NoSchedule", "PreferNoSchedule") if args.include_prefer_no_schedule else ("NoSchedule",)
    excluded = frozenset(args.excluded_taints)
    included = None if args.included_taints is None else frozenset(args.included_taints)

    def considered(taint: Taint) -> bool:
        if taint.effect not in effects or _listed(taint, excluded):
            return False
        return included is None or _listed(taint, included)

    return considered


def untolerated_taint(tolerations: tuple[Toleration, ...], taints: Sequence[Taint],
                      considered: TaintFilter) -> Taint | None:
    """The first considered taint none of ``tolerations`` tolerates, or None if all are tolerated."""
    for taint in taints:
        if considered(taint) and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def run(args: RemovePodsViolatingNodeTaintsArgs, handle: Handle, nodes: Sequence[Node]) -> None:
    considered = taint_filter(args)
    for node in nodes:
        taints = [t for t in node.taints if considered(t)]
        if not taints:
            handle.logger.debug("node %s has no taint this strategy enforces", node.name)
            continue
        handle.logger.debug("processing node %s (enforced taints: %s)", node.name, ", ".join(map(str, taints)))
        if not evict_node_pods(handle, _candidates(args, handle, node, taints)):
            return


def _candidates(args: RemovePodsViolatingNodeTaintsArgs, handle: Handle, node: Node,
                taints: list[Taint]) -> Iterator[tuple[Pod, str]]:
    selector = args.label_selector
    for pod in handle.state.pods_on_node(node.name):
        if not namespace_allowed(args.namespaces, pod.namespace):
            continue
        if selector is not None and not selector.matches(pod.labels):
            continue
        taint = untolerated_taint(pod.tolerations, taints, lambda _t: True)
        if taint is None:
            continue
        if not handle.filter(pod) or not handle.pre_eviction_filter(pod):
            continue
        yield pod, f"pod does not tolerate taint {taint} of node {node.name}"

SPEC = StrategySpec(
    name=NAME,
    extension_point="deschedule",
    args_type=RemovePodsViolatingNodeTaintsArgs,
    run=run,
    summary="evict pods that do not tolerate their node's NoSchedule taints",
)

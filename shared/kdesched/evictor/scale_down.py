"""Which pod a ReplicaSet deletes when its replicas go down by one: whether a surge-first move may
scale back while its extra pod is Ready (a give-up at the timeout), its evicted pod is not seen
going yet (30 s after the eviction), or its evicted pod is going and the pod the ReplicaSet made for
it is already Ready (a late settle).

Why: a scale-back is a deletion by the ReplicaSet controller, not an eviction: no PodDisruptionBudget,
no brake, no window. It is harmless only when the pod it deletes is one the move made (the extra pod)
or the one whose eviction the API server already accepted. The
controller deletes the pod that ranks first (kubernetes pkg/controller/controller_utils.go,
``ActivePodsWithRanks.Less``): unassigned before assigned; Pending before Unknown before Running;
not Ready before Ready; a lower ``controller.kubernetes.io/pod-deletion-cost`` first; more pods of
the workload on the same node first (doubled-up); Ready for less time first, compared in log2
buckets of the time since it became Ready (``LogarithmicScaleDown``, on by default since v1.22),
the lower uid first within a bucket; then restarts and creation time. A Ready extra pod alone on its
node therefore loses to two original pods that share a node: scaling back deletes an original, Ready
pod behind the Eviction API (a move that keeps being refused, a brake or a closed window holding its
eviction; or an evicted pod the runs do not see going yet, when the scale-back would not be removing
a pod the ReplicaSet made for it; or an evicted pod going, the ReplicaSet no longer counting it and
the pod it made for it already Ready, so that it chooses among Ready pods only).
:func:`ranked_before` tells whether any pod might go before the extra one, and
:func:`ranked_before_all` whether any pod but a few (the pods made during the move, the pod whose
eviction was accepted) might go first, or only any Ready one (``ready_only``: a pod that is not Ready
serves nothing, and the controller deletes a Ready pod only when every active pod is Ready); judged
conservatively (a pod whose order is not certain counts as going first), so a scale-back never
deletes a Ready original pod, and at worst keeps the extra replica (capacity, not availability) a
while longer.

Only for a Deployment with one active ReplicaSet: during a rollout, a scale-down of the Deployment
is spread over its ReplicaSets by the Deployment controller (proportional scaling: by their sizes
and the replicas annotated on them, the leftover to the largest; kubernetes
pkg/controller/deployment/sync.go ``scale``), which kdesched neither reads nor models. Which
ReplicaSet loses a pod, and so which pod goes, is not known then (:mod:`kdesched.evictor.surge`
scales nothing back while a rollout is under way).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from kdesched.model.derived import pod_ready
from kdesched.model.records import Pod

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE = {"Pending": 0, "Unknown": 1, "Running": 2}
# the controller ranks at its own clock, a moment after this judgement: the log2 buckets are compared
# as they will be this much later
_MARGIN_SECONDS = 3.0


def ranked_before(extra: Pod, pods: Sequence[Pod], now: float) -> Pod | None:
    """An active pod of ``pods`` (the workload's) that a scale-down by one might delete before
    ``extra``, or None when ``extra`` certainly goes first. ``now``: epoch seconds."""
    return ranked_before_all((extra,), pods, now)


def ranked_before_all(spare: Sequence[Pod], pods: Sequence[Pod], now: float, *,
                      ready_only: bool = False) -> Pod | None:
    """An active pod of ``pods`` (the workload's), not one of ``spare``, that a scale-down by one might
    delete, or None when the pod deleted is certainly one of ``spare``: every other active pod ranks
    certainly after one of them (then none of them is the first). ``spare`` empty: any active pod.
    ``ready_only``: only a Ready pod counts as at risk: one that is not Ready serves nothing (no
    Service endpoint, not healthy for a PodDisruptionBudget), so its deletion lowers neither the
    workload's Ready count nor any budget. A pod that is not Ready (unassigned, Pending or Unknown,
    or Running and not Ready) ranks before every Ready pod (Running and Ready), so while one is active
    no Ready pod is deleted at all."""
    active = [p for p in pods if not p.terminating and not p.terminal]
    if ready_only and not all(pod_ready(p) for p in active):
        return None
    on_node = Counter(p.node_name for p in active if p.node_name)
    uids = {p.uid for p in spare}
    for other in active:
        if other.uid not in uids and not any(_certainly_after(e, other, on_node, now) for e in spare):
            return other
    return None


def _certainly_after(extra: Pod, other: Pod, on_node: Counter[str], now: float) -> bool:
    """Does ``other`` certainly rank after ``extra`` (the controller deletes ``extra`` first)?"""
    if not other.node_name or not extra.node_name:
        return bool(not extra.node_name and other.node_name)
    pe, po = _PHASE.get(extra.phase, 2), _PHASE.get(other.phase, 2)
    if pe != po:
        return pe < po
    if pod_ready(extra) != pod_ready(other):
        return not pod_ready(extra)
    ce, co = _cost(extra), _cost(other)
    if ce is None or co is None:
        return False  # an unreadable cost: the controller's order is not known
    if ce != co:
        return ce < co
    re, ro = on_node[extra.node_name], on_node[other.node_name]
    if re != ro:
        return re > ro
    if pod_ready(extra):
        te, to = _ready_since(extra), _ready_since(other)
        if te != to:
            return _newer_first(te, to, extra.uid, other.uid, now)
    xe, xo = _restarts(extra), _restarts(other)
    if xe != xo:
        return xe > xo
    be = extra.creation_time.timestamp() if extra.creation_time else None
    bo = other.creation_time.timestamp() if other.creation_time else None
    return be != bo and _newer_first(be, bo, extra.uid, other.uid, now)


def _newer_first(te: float | None, to: float | None, extra_uid: str, other_uid: str, now: float) -> bool:
    """Is ``te`` (the extra pod's Ready or creation time) certainly ranked before ``to``, which differs
    from it? A missing time ranks first; else the later one, in log2 buckets of the time since (at
    any moment of the next few seconds, when the controller ranks), the lower uid within a bucket."""
    if te is None or to is None:
        return te is None
    if te < to:
        return False
    return _bucket(now + _MARGIN_SECONDS - te) < _bucket(now - to) or extra_uid < other_uid


def _bucket(seconds: float) -> int:
    return int(math.log2(max(seconds, 1e-9) * 1e9))


def _ready_since(p: Pod) -> float | None:
    return next((c.last_transition_time.timestamp() for c in p.conditions
                 if c.type == "Ready" and c.status == "True" and c.last_transition_time is not None), None)


def _restarts(p: Pod) -> int:
    return max((c.restart_count for c in p.container_statuses), default=0)


def _cost(p: Pod) -> int | None:
    raw = p.annotations.get(DELETION_COST)
    if raw is None:
        return 0
    try:
        return int(raw)
    except ValueError:
        return None

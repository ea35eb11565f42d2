"""Facts derived from pods alone that a run reads per node and per workload: what the node's pods
request, and which pods make up a workload.

Why here: a run from a snapshot file computes them once from the pods (``ClusterState.usage``,
the pacer's workload index), while the watch cache of ``kdesched serve`` keeps them up to date
pod by pod and hands them to every run (:meth:`kdesched.model.snapshot.Snapshot.build`), so a
node event at 150,000 pods does not recompute them (docs/reactor.md). Both must give the same
answer, so the rules live in this one module, below every layer that uses them.
"""

from __future__ import annotations

from kdesched.model.records import OwnerRef, Pod

TEMPLATE_HASH_LABEL = "pod-template-hash"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

WorkloadKey = tuple[str, str, str]
"""(kind, namespace, name) of a workload: a Deployment (through its ReplicaSets) or the owner itself."""


def pod_ready(pod: Pod) -> bool:
    """Running, not terminating, and its Ready condition True (a Running pod whose object carries no
    Ready condition at all, as in hand-written snapshots, counts as Ready)."""
    if pod.terminating or pod.phase != "Running":
        return False
    for c in pod.conditions:
        if c.type == "Ready":
            return c.status == "True"
    return True


def controller_ref(pod: Pod) -> OwnerRef | None:
    """The pod's controller reference (``controller: true``), else its first owner, else None."""
    for ref in pod.owner_refs:
        if ref.controller:
            return ref
    return pod.owner_refs[0] if pod.owner_refs else None


def workload_key(pod: Pod) -> WorkloadKey | None:
    """The workload the pod belongs to, as a plain (kind, namespace, name) tuple; None for a bare pod.

    A ReplicaSet named ``NAME-HASH`` whose pod carries ``pod-template-hash: HASH`` is Deployment
    ``NAME``'s (the Deployment controller's naming rule), so a rollout's old and new ReplicaSets
    are one workload. Other owners are grouped by themselves."""
    ref = controller_ref(pod)
    if ref is None:
        return None
    if ref.kind == "ReplicaSet":
        h = pod.labels.get(TEMPLATE_HASH_LABEL, "")
        if h and ref.name.endswith("-" + h) and len(ref.name) > len(h) + 1:
            return "Deployment", pod.namespace, ref.name[: -len(h) - 1]
    return ref.kind or "Owner", pod.namespace, ref.name


def empty_usage() -> dict[str, int]:
    """The usage of a node without pods (the three entries every usage mapping has)."""
    return {"cpu": 0, "memory": 0, "pods": 0}


def add_pod_usage(usage: dict[str, int], pod: Pod, sign: int = 1) -> None:
    """Add (``sign`` 1) or take away (-1) a pod's requests and its pod slot; a terminal pod
    (Succeeded, Failed) holds nothing. Mappings are read with ``.get(name, 0)``: an entry that
    went back to 0 means the same as a missing one."""
    if pod.phase in TERMINAL_PHASES:
        return
    for name, amount in pod.requests.items():
        usage[name] = usage.get(name, 0) + sign * amount
    usage["pods"] += sign

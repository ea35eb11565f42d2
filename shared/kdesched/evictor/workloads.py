"""Workloads: the unit of kdesched's allowance, and when a pod counts as Ready.

Why its own module: per-workload pacing (:mod:`kdesched.evictor.pacing`) and the disruption ledger
(:mod:`kdesched.evictor.ledger`) both group pods by workload and count Ready pods the same way; the
rule lives once, below both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kdesched.model.derived import workload_key
from kdesched.model.records import Pod, positional_constructor


@dataclass(frozen=True, slots=True, order=True)
class Workload:
    """The unit of the allowance: a controller, named the way an operator knows it."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def workload_of(pod: Pod) -> Workload | None:
    """The workload a pod belongs to; None for a bare pod (never grouped with anything).

    A ReplicaSet named ``NAME-HASH`` whose pod carries ``pod-template-hash: HASH`` is Deployment
    ``NAME``'s (the Deployment controller's naming rule), so the allowance spans a rollout's old
    and new ReplicaSets. Other owners are grouped by themselves."""
    key = workload_key(pod)
    return None if key is None else _new_workload(*key)


_new_workload: Callable[[str, str, str], Workload] = positional_constructor(Workload)  # 150,000 calls per run



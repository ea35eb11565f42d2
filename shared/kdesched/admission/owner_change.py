"""Owner changed: a workload whose Deployment someone else just changed waits for the next run.

Why: a surge-first move ends "overridden" when, during the move, someone else set the Deployment's
replicas (an HPA, a GitOps sync), began a rollout, or deleted it. The run that notices it decides
on a snapshot taken before that change, while the ReplicaSet controller is still adding or deleting
pods. Evicting one of the workload's pods then raced the controller's own deletions: the real
control plane's HPA storm (tests/realk8s/test_surge.py) caught a PodDisruptionBudget of
``minAvailable: 2`` at 1 Ready pod. The API server's check could not stop it, because the budget's
status still counted the pods the scale-down was deleting. So the workload's pods wait until the
next run, which reads a snapshot taken after the change (a node's run is repeated for it like a
paced one, within a second or two).
"""

from __future__ import annotations

from dataclasses import dataclass

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.ledger_records import workload_key
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.records import Pod

MESSAGE = ("its {key} changed during a surge-first move this run ended (replicas, a rollout or its deletion): "
           "decided again at the next run, on a snapshot taken after the change")


@dataclass(frozen=True, slots=True)
class OwnerChanged:
    name: str = "owner-changed"

    def start(self, ctx: RunContext) -> Check:
        return _Check(ctx.owners_changed)


class _Check(Check):
    def __init__(self, changed: frozenset[str]) -> None:
        self.changed = changed

    def pod(self, pod: Pod, strategy: str, held: bool) -> Verdict | None:
        if not self.changed:
            return None
        key = workload_key(pod)
        return Verdict(Reason.OWNER_CHANGED, MESSAGE.format(key=key)) if key in self.changed else None

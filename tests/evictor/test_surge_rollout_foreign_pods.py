"""A surge-first move judges only its own Deployment's pods (kdesched.evictor.surge.advance).

A run whose snapshot lacks the workload's pods reads them with ``workload_pods()``: a LIST by the
Deployment's matchLabels. A second Deployment whose pods match that selector too (a canary,
``app=web, track=canary`` beside the stable ``web`` selecting ``app=web``) puts its pods in that list.
Before, the move took them for its own: two pod-template-hash values were "a rollout", which keeps the
+1 with no time limit (the move whose pod was gone was never scaled back, and the timeout give-up was
suppressed); a canary pod made during the move could be taken for the replacement; and the canary's
pods counted in the scale-back's ranking. Only pods controlled by one of the Deployment's ReplicaSets
(``<deployment>-<pod-template-hash>``) count now."""

from __future__ import annotations

from kdesched.evictor.surge import DONE, GAVE_UP, Action, advance
from kdesched.model.records import Pod

from tests.builders import pod
from tests.evictor.test_surge import READY, RS, T0, dep, surge_of, web


def canary(name: str, node: str, created: float = -3600, ready: bool = True) -> Pod:
    """A pod of Deployment web-canary (ReplicaSet web-canary-zzz) that web's selector app=web matches."""
    return pod(name, node, owner_kind="ReplicaSet", owner_name="web-canary-zzz",
               labels={"app": "web", "track": "canary", "pod-template-hash": "zzz"}, created=created,
               conditions=READY if ready else [{"type": "Ready", "status": "False"}])


def test_a_canary_matching_the_selector_is_not_a_rollout_that_keeps_the_extra_replica_forever() -> None:
    old = web("web-1", "node-a", deleting=True)  # evicted by the move: seen terminating
    extra = web("web-9", "node-b", created=5)  # the surge pod, Ready elsewhere
    s = surge_of(old, evicted=T0 + 40)
    # the Deployment's own status: one ReplicaSet, every pod updated, the controller caught up
    step = advance(s, dep(2, generation=6), RS, [old, extra, canary("web-canary-1", "node-c")], T0 + 3600)
    assert (step.action, step.outcome) == (Action.RESTORE, DONE), step


def test_a_canary_pod_made_during_the_move_is_not_its_replacement() -> None:
    old = web("web-1", "node-a")
    extra = web("web-9", "node-b", created=5, ready=False)  # the surge pod, not Ready yet
    new_canary = canary("web-canary-2", "node-c", created=3)  # a canary pod made since the move began, Ready
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, extra, new_canary], T0 + 20)
    assert step.action == Action.WAIT, step  # before: EVICT, the canary pod taken for the replacement


def test_the_timeout_give_up_is_not_suppressed_by_a_canary() -> None:
    old = web("web-1", "node-a")
    extra = web("web-9", "node-b", created=5, ready=False)  # never Ready
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, extra, canary("web-canary-1", "node-c")],
                   T0 + 121)
    assert (step.action, step.outcome) == (Action.RESTORE, GAVE_UP), step


def test_a_rollout_of_the_deployment_itself_still_holds_the_move() -> None:
    """The control: a pod of another ReplicaSet of web (web-def) is a rollout, and keeps the +1."""
    old = web("web-1", "node-a", deleting=True)
    extra = web("web-9", "node-b", created=5)
    rolled = web("web-2", "node-c", created=6, template="def")
    step = advance(surge_of(old, evicted=T0 + 40), dep(2, generation=6), RS, [old, extra, rolled], T0 + 3600)
    assert step.action == Action.WAIT and "rolling out" in step.why, step


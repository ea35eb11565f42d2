"""Which pod a ReplicaSet deletes on a scale-down by one (kdesched.evictor.scale_down): a surge-first
move may be given up by scaling back only when that removes its extra pod, since the ReplicaSet
deletes pods directly, past every PodDisruptionBudget, brake and window. The order is the ReplicaSet
controller's (controller_utils.go ActivePodsWithRanks); where it is not certain, an original pod
counts as going first."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kdesched.evictor.scale_down import DELETION_COST, ranked_before, ranked_before_all
from kdesched.model.records import Pod

from tests.builders import NOW, pod, ts

T0 = NOW.timestamp()


def member(name: str, node: str, *, ready_at: float | None = -3000, created: float = -3600, phase: str = "Running",
           **kw: Any) -> Pod:
    ready = ready_at is not None
    condition: dict[str, Any] = {"type": "Ready", "status": "True" if ready else "False"}
    if ready_at is not None:
        condition["lastTransitionTime"] = ts(ready_at)
    return pod(name, node, owner_name="web-abc", labels={"app": "web"}, created=created, phase=phase,
               conditions=[condition], **kw)


def test_a_ready_extra_pod_alone_on_its_node_goes_before_lone_originals() -> None:
    """One pod per node: the extra pod, Ready for the shortest time, is the one removed."""
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    assert ranked_before(extra, [member("web-1", "node-a"), member("web-2", "node-c"), extra], T0 + 130) is None


def test_two_originals_on_one_node_go_before_a_ready_extra_pod() -> None:
    """Doubled-up pods rank before the time they have been Ready: scaling back would delete an
    original, Ready pod of the node the move leaves."""
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    first = ranked_before(extra, [member("web-1", "node-a"), member("web-2", "node-a"), extra], T0 + 130)
    assert first is not None and first.node_name == "node-a"


def test_an_extra_pod_not_ready_goes_first_even_against_doubled_up_originals() -> None:
    extra = member("web-9", "spare-1", ready_at=None, created=1)
    assert ranked_before(extra, [member("web-1", "node-a"), member("web-2", "node-a"), extra], T0 + 30) is None


def test_a_lower_deletion_cost_on_an_original_puts_it_first() -> None:
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    cheap = member("web-1", "node-a", annotations={DELETION_COST: "-10"})
    assert ranked_before(extra, [cheap, extra], T0 + 130) == cheap


def test_an_original_pending_or_not_ready_goes_first() -> None:
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    pending = member("web-1", "", ready_at=None, phase="Pending")
    assert ranked_before(extra, [pending, extra], T0 + 130) == pending
    unready = member("web-2", "node-a", ready_at=None)
    assert ranked_before(extra, [unready, extra], T0 + 130) == unready


def test_ready_times_in_the_same_log2_bucket_are_not_taken_for_an_order() -> None:
    """With LogarithmicScaleDown (default since v1.22), Ready times in the same power-of-two bucket fall
    to the uid: unless the extra pod's uid is the lower, an original may go first."""
    extra = replace(member("web-9", "spare-1", ready_at=100, created=90), uid="zzz")
    original = replace(member("web-1", "node-a", ready_at=80, created=70), uid="aaa")
    assert ranked_before(extra, [original, extra], T0 + 140) == original
    lower = replace(extra, uid="000")
    assert ranked_before(lower, [original, lower], T0 + 140) is None


def test_terminating_pods_are_not_ranked() -> None:
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    going = member("web-2", "node-a", deleting=True)
    assert ranked_before(extra, [member("web-1", "node-a"), going, extra], T0 + 130) is None


def test_a_pod_of_several_going_first_is_judged_against_each_of_them() -> None:
    """30 s after an accepted eviction: the scale-back may delete the evicted pod or the extra pod, not
    another. Two pods on node-a: the one Ready for less time goes first, so whether the scale-back is
    safe depends on which of them was evicted."""
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    long_ready, recent = member("web-1", "node-a", ready_at=-3000), member("web-2", "node-a", ready_at=-100)
    pods = [long_ready, recent, extra]
    assert ranked_before_all([recent, extra], pods, T0 + 130) is None
    assert ranked_before_all([long_ready, extra], pods, T0 + 130) == recent
    assert ranked_before_all([], pods, T0 + 130) == long_ready


def test_with_a_pod_not_ready_no_ready_pod_is_at_risk() -> None:
    """``ready_only``: a pod that is not Ready (unassigned, Pending, or Running but not Ready) ranks
    before every Ready pod, so while one is active the scale-down deletes no Ready pod, whichever it
    is: web-3, crash-looping, goes before the doubled-up web-1 and web-2 and before the extra pod."""
    extra = member("web-9", "spare-1", ready_at=5, created=1)
    doubled = [member("web-1", "node-a"), member("web-2", "node-a")]
    crashing = member("web-3", "node-c", ready_at=None, container_statuses=[{"name": "c", "restartCount": 9}])
    assert ranked_before_all([extra], [*doubled, extra], T0 + 130, ready_only=True) in doubled
    assert ranked_before_all([extra], [*doubled, crashing, extra], T0 + 130) == doubled[0]
    assert ranked_before_all([extra], [*doubled, crashing, extra], T0 + 130, ready_only=True) is None

"""Surge-first moves, the pure part (kdesched.evictor.surge): who may be moved so, and what each
observed state of the owner and its pods leads to. The real controllers are exercised by
tests/realk8s/test_surge.py; here every branch is pinned on hand-made states."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kdesched.evictor.ledger import InFlight, Ledger, Move, WorkloadRecord
from kdesched.evictor.scale_down import ranked_before, ranked_before_all
from kdesched.evictor.surge import (
    DONE,
    GAVE_UP,
    OVERRIDDEN,
    SCALE_DOWN_GRACE_SECONDS,
    START_GRACE_SECONDS,
    Action,
    Fallback,
    Surge,
    advance,
    surge_refusal,
)
from kdesched.model.owners import (
    SURGE_MANAGER,
    Condition,
    DeploymentInfo,
    ReplicaSetInfo,
    deployment_from_json,
)
from kdesched.model.records import Pod, PodDisruptionBudget

from tests.builders import NOW, pod, ts

T0 = NOW.timestamp()
READY = [{"type": "Ready", "status": "True"}]


def web(name: str, node: str, *, created: float = -3600, ready: bool = True, deleting: bool = False,
        template: str = "abc", annotations: dict[str, str] | None = None, ready_at: float | None = None) -> Pod:
    """A pod of ``web`` (``created``, ``ready_at``: seconds after T0; ``ready_at`` None: Ready with no
    transition time)."""
    conditions = ([{**READY[0], "lastTransitionTime": ts(ready_at)}] if ready_at is not None else READY) if ready \
        else [{"type": "Ready", "status": "False"}]
    return pod(name, node, owner_kind="ReplicaSet", owner_name=f"web-{template}",
               labels={"app": "web", "pod-template-hash": template}, created=created, deleting=deleting,
               conditions=conditions, annotations=annotations)


def dep(replicas: int = 1, *, generation: int = 5, observed: int | None = None, updated: int | None = None,
        status: int | None = None, strategy: str = "RollingUpdate", max_surge: str = "25%", paused: bool = False,
        annotations: dict[str, str] | None = None, failure: str = "",
        managers: tuple[str, ...] | None = None) -> DeploymentInfo:
    conditions = (Condition("ReplicaFailure", "True", "FailedCreate", failure),) if failure else ()
    return DeploymentInfo("default", "web", "uid-web", "100", generation, generation if observed is None else observed,
                          replicas, replicas if status is None else status, replicas if updated is None else updated,
                          strategy, max_surge, paused, annotations or {}, conditions, "app=web", managers)


RS = ReplicaSetInfo("default", "web-abc", "Deployment", "web", 1)


def surge_of(p: Pod, **kw: object) -> Surge:
    base = Surge(p.uid, p.key, p.node_name, "web", "web-abc", 1, 2, T0, T0 + 120, "RemovePodsViolatingNodeTaints", 6)
    return replace(base, **kw)  # type: ignore[arg-type]


# -- who may be moved surge-first ------------------------------------------------------------------
def test_a_plain_deployment_may_surge() -> None:
    p = web("web-1", "node-a")
    assert surge_refusal(p, "Deployment", dep(), RS, [p]) is None


@pytest.mark.parametrize(("kind", "deployment", "rs", "reason"), [
    ("StatefulSet", None, None, Fallback.NOT_DEPLOYMENT),
    ("Pod", None, None, Fallback.BARE_POD),
    ("Job", None, None, Fallback.NOT_DEPLOYMENT),
    ("Deployment", None, RS, Fallback.OWNER_UNREADABLE),
    ("Deployment", dep(max_surge="0"), RS, Fallback.NO_SURGE),
    ("Deployment", dep(max_surge="0%"), RS, Fallback.NO_SURGE),
    ("Deployment", dep(strategy="Recreate"), RS, Fallback.NO_SURGE),
    ("Deployment", dep(paused=True), RS, Fallback.PAUSED),
    ("Deployment", dep(generation=6, observed=5), RS, Fallback.ROLLOUT),
    ("Deployment", dep(2, updated=1), RS, Fallback.ROLLOUT),
    ("Deployment", dep(annotations={"kdesched.dev/surge": "false"}), RS, Fallback.OPT_OUT),
    ("Deployment", dep(failure='pods "web-x" is forbidden: exceeded quota: q'), RS, Fallback.REPLICA_FAILURE),
    ("Deployment", dep(), ReplicaSetInfo("default", "web-abc", "", "", 1), Fallback.NOT_DEPLOYMENT),
])
def test_where_no_surge_is_possible_it_says_why(kind: str, deployment: DeploymentInfo | None,
                                                rs: ReplicaSetInfo | None, reason: Fallback) -> None:
    p = web("web-1", "node-a")
    refusal = surge_refusal(p, kind, deployment, rs, [p])
    assert refusal is not None and refusal.reason == reason and refusal.message


def test_the_opt_out_on_the_pod_template_counts_too() -> None:
    p = web("web-1", "node-a", annotations={"kdesched.dev/surge": "False"})
    refusal = surge_refusal(p, "Deployment", dep(), RS, [p])
    assert refusal is not None and refusal.reason == Fallback.OPT_OUT


def test_pods_of_two_replicasets_are_a_rollout() -> None:
    a, b = web("web-1", "node-a"), web("web-2", "node-b", template="def")
    refusal = surge_refusal(a, "Deployment", dep(2), RS, [a, b])
    assert refusal is not None and refusal.reason == Fallback.ROLLOUT


@pytest.mark.parametrize(("spec", "ready", "blocks"), [
    ({"minAvailable": 2}, 2, False),  # 3 Ready with the extra pod: one may go
    ({"minAvailable": "100%"}, 2, True),  # keeps up with the extra pod
    ({"maxUnavailable": 0}, 2, True),
    ({"maxUnavailable": "0%"}, 5, True),
    ({"minAvailable": "50%"}, 1, False),
    ({"maxUnavailable": 1}, 1, False),
])
def test_a_pdb_that_scales_with_the_replicas_allows_no_surge(spec: dict[str, object], ready: int, blocks: bool) -> None:
    pdb = PodDisruptionBudget.from_api({"metadata": {"name": "web", "namespace": "default"},
                                        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}})
    pods = [web(f"web-{i}", "node-a") for i in range(ready)]
    refusal = surge_refusal(pods[0], "Deployment", dep(ready), RS, pods, [pdb])
    assert (refusal is not None and refusal.reason == Fallback.PDB_SCALES) == blocks
    if refusal is not None:
        assert "web" in refusal.message
    # the same from the PDB's status, with a snapshot that holds only one of the pods (a node's run)
    observed = PodDisruptionBudget.from_api({"metadata": {"name": "web", "namespace": "default"},
                                             "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
                                             "status": {"currentHealthy": ready, "expectedPods": ready,
                                                        "disruptionsAllowed": 0}})
    refusal = surge_refusal(pods[0], "Deployment", dep(ready), RS, pods[:1], [observed])
    assert (refusal is not None and refusal.reason == Fallback.PDB_SCALES) == blocks


def test_max_surge_and_the_opt_out_are_read_from_the_api_object() -> None:
    d = deployment_from_json({"metadata": {"name": "web", "namespace": "default", "generation": 3,
                                           "annotations": {"kdesched.dev/surge": "false"}},
                              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "tier": "x"}},
                                       "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}}},
                              "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2}})
    assert d.max_surge == "0" and d.replicas == 2 and not d.rolling_out and d.selector == "app=web,tier=x"
    assert d.annotations["kdesched.dev/surge"] == "false"


# -- what each observed state leads to --------------------------------------------------------------
def test_waits_while_the_surge_pod_is_not_ready() -> None:
    old = web("web-1", "node-a")
    new = web("web-2", "spare-1", created=1, ready=False)
    s = surge_of(old)
    assert advance(s, dep(2, generation=6), RS, [old, new], T0 + 2).action == Action.WAIT


def test_evicts_once_the_replacement_is_ready_on_another_node() -> None:
    old = web("web-1", "node-a")
    new = web("web-2", "spare-1", created=1)
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, new], T0 + 4)
    assert step.action == Action.EVICT and step.replacement is not None and step.replacement.name == "web-2"


def test_a_pod_that_existed_before_the_move_is_not_its_replacement() -> None:
    old, sibling = web("web-1", "node-a"), web("web-0", "spare-1", created=-100)
    assert advance(surge_of(old), dep(2, generation=6), RS, [old, sibling], T0 + 4).action == Action.WAIT


def test_a_replacement_ready_on_the_node_it_leaves_gives_up_and_counts_as_wasted() -> None:
    old = web("web-1", "node-a")
    back = web("web-2", "node-a", created=1)
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, back], T0 + 4)
    assert step.action == Action.RESTORE and step.outcome == GAVE_UP and step.wasted and step.block


def test_a_replacement_ready_on_the_node_it_leaves_is_not_scaled_back_over_an_original_pod() -> None:
    """web-2, web-3 and web-4 share node-b; the extra pod web-9 became Ready on node-a, next to web-1.
    The ReplicaSet ranks the three doubled-up pods of node-b before web-9 (two on its node): giving up
    by a scale-back would delete one of them, a Ready original, behind the Eviction API. So the +1 is
    kept and web-9 evicted: the ReplicaSet makes another, placed anew (the move goes on if it is Ready
    elsewhere), which, not Ready yet, is the one a scale-back removes."""
    old = web("web-1", "node-a", ready_at=-3000)
    back = web("web-9", "node-a", created=1, ready_at=4)
    pods = [old, *(web(f"web-{i}", "node-b", ready_at=-3000) for i in (2, 3, 4)), back]
    s = surge_of(old, original=4, surged=5)
    first = ranked_before(back, pods, T0 + 10)
    assert first is not None and first.node_name == "node-b"
    step = advance(s, dep(5, generation=6), RS, pods, T0 + 10)
    assert step.action != Action.RESTORE, f"scaled back over {first.name}: {step.why}"
    assert step.action == Action.EVICT_EXTRA and step.target == back and "node-a" in step.why
    again = [*pods[:4], replace(back, deletion_time=NOW), web("web-10", "", created=11, ready=False)]
    assert advance(s, dep(5, generation=6), RS, again, T0 + 12).action == Action.WAIT  # the move goes on


def test_no_replacement_in_time_restores_and_blocks() -> None:
    old = web("web-1", "node-a")
    pending = web("web-2", "", created=1, ready=False)
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, pending], T0 + 121)
    assert step.action == Action.RESTORE and step.outcome == GAVE_UP and step.block and not step.wasted


def test_a_quota_refusing_the_extra_pod_restores_at_once() -> None:
    old = web("web-1", "node-a")
    step = advance(surge_of(old), dep(2, generation=6, failure="exceeded quota"), RS, [old], T0 + 1)
    assert step.action == Action.RESTORE and "quota" in step.why and step.block


def test_the_pod_gone_with_the_replicas_still_ours_puts_them_back() -> None:
    old = web("web-1", "node-a", deleting=True)
    new = web("web-2", "spare-1", created=1)
    # (not before the ReplicaSet's pod for it is seen: evictor.surge._unseen)
    assert advance(surge_of(old), dep(2, generation=6), RS, [old, new], T0 + 5).action == Action.WAIT
    made_for_it = web("web-3", "spare-2", created=5, ready=False)
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, new, made_for_it], T0 + 6)
    assert step.action == Action.RESTORE and step.outcome == DONE and step.replacement is not None


def test_the_pod_gone_after_the_scale_back_ends_the_move_done() -> None:
    new = web("web-2", "spare-1", created=1)
    old = web("web-1", "node-a")
    s = surge_of(old, evicted=T0 + 5)
    step = advance(s, dep(1, generation=7), RS, [new], T0 + 6)
    assert step.action == Action.END and step.outcome == DONE


def evicted_over_doubled_up(made_for_it: Pod | None) -> tuple[Surge, list[Pod]]:
    """3 replicas, all on node-a, surged to 4: web-1 evicted (terminating), its siblings web-2 and
    web-3 left on node-a, the extra pod web-9 Ready on spare-1; ``made_for_it``: the pod the
    ReplicaSet made for web-1 once it saw it terminating (None: not made, or not in this view)."""
    old = web("web-1", "node-a", deleting=True)
    pods = [old, web("web-2", "node-a", ready_at=-3000), web("web-3", "node-a", ready_at=-3000),
            web("web-9", "spare-1", created=1, ready_at=4)]
    return surge_of(old, original=3, surged=4, evicted=T0 + 5), pods + ([made_for_it] if made_for_it else [])


def test_the_pod_seen_going_is_not_scaled_back_over_an_original_once_the_pod_made_for_it_is_ready() -> None:
    """The ReplicaSet does not count a terminating pod (controller_utils FilterActivePods) and makes one
    for it. Scaled back while that pod is not Ready, the ReplicaSet deletes it; scaled back later (a
    crash, a paused process, a Lease takeover), it chooses among 4 Ready pods, and web-2 and web-3,
    doubled up on node-a, rank before the pods made during the move, alone on their nodes: an original
    Ready pod deleted behind the Eviction API. So no scale-back: the newest pod made during the move is
    evicted instead, and the ReplicaSet's pod for it, not Ready yet, is the one the scale-back removes."""
    made = web("web-10", "spare-2", created=5, ready_at=8)
    s, pods = evicted_over_doubled_up(made)
    now = T0 + 20
    first = ranked_before_all([pods[3], made], pods, now)  # the ReplicaSet's order: an original goes first
    assert first is not None and first.name in ("web-2", "web-3")
    step = advance(s, dep(4, generation=6), RS, pods, now)
    assert step.action != Action.RESTORE, f"scaled back over {first.name}: {step.why}"
    assert step.action == Action.EVICT_EXTRA and step.target == made and "kept at 4" in step.why
    # web-10 evicted: terminating, and the ReplicaSet's pod for it not Ready yet: that one goes first
    going = [*pods[:4], replace(made, deletion_time=NOW), web("web-11", "spare-2", created=21, ready=False)]
    step = advance(s, dep(4, generation=6), RS, going, T0 + 22)
    assert step.action == Action.RESTORE and step.outcome == DONE


@pytest.mark.parametrize("made_for_it", [None, web("web-10", "", created=5, ready=False),
                                         web("web-10", "spare-2", created=5, ready=False)],
                         ids=["not-made-yet", "unscheduled", "not-ready"])
def test_the_pod_seen_going_is_scaled_back_while_the_pod_made_for_it_goes_first(made_for_it: Pod | None) -> None:
    """The usual case, a run after the eviction: the ReplicaSet's pod for the evicted one is not Ready
    (it ranks before every Ready pod). Not made yet, or not in this view: this pinned a scale-back at
    once until review I #4 (the view may be older than that pod's start-up, which hides it Ready, or
    ahead of the ReplicaSet, which still counts web-1 and deletes a doubled-up sibling): the move now
    waits for that pod (proof the ReplicaSet saw web-1 going), at most SCALE_DOWN_GRACE_SECONDS after
    the eviction, then scales back (the reactor reads the pods again first)."""
    s, pods = evicted_over_doubled_up(made_for_it)
    step = advance(s, dep(4, generation=6), RS, pods, T0 + 6)
    if made_for_it is None:
        assert step.action == Action.WAIT
        step = advance(s, dep(4, generation=6), RS, pods, T0 + 5 + SCALE_DOWN_GRACE_SECONDS)
    assert step.action == Action.RESTORE and step.outcome == DONE


def test_the_pod_seen_going_is_scaled_back_when_a_pod_made_during_the_move_ranks_first() -> None:
    """One pod per node: the pod made for the evicted one, Ready for the shortest time, goes first."""
    old = web("web-1", "node-a", deleting=True)
    pods = [old, web("web-2", "node-b", ready_at=-3000), web("web-3", "node-c", ready_at=-3000),
            web("web-9", "spare-1", created=1, ready_at=4),
            web("web-10", "spare-2", created=5, ready_at=8)]
    step = advance(surge_of(old, original=3, surged=4, evicted=T0 + 5), dep(4, generation=6), RS, pods, T0 + 20)
    assert step.action == Action.RESTORE and step.outcome == DONE


def test_an_original_pod_that_is_not_ready_may_go_in_the_scale_back() -> None:
    """web-3 is not Ready (a crash loop): the ReplicaSet deletes it before any Ready pod. It serves
    nothing, so neither the Ready count nor a PDB's healthy count drops: the scale-back goes ahead
    rather than evicting pods made during the move for a deletion that costs nothing."""
    old = web("web-1", "node-a", deleting=True)
    pods = [old, web("web-2", "node-b", ready_at=-3000), web("web-3", "node-c", ready=False),
            web("web-9", "spare-1", created=1, ready_at=4), web("web-10", "spare-2", created=5, ready_at=8)]
    step = advance(surge_of(old, original=3, surged=4, evicted=T0 + 5), dep(4, generation=6), RS, pods, T0 + 20)
    assert step.action == Action.RESTORE and step.outcome == DONE


def doubled_up_move() -> tuple[Surge, Pod, Pod, Pod]:
    """web-1 moving off node-a, where its sibling web-0 also runs (Ready for less time: restarted two
    minutes ago); the extra pod web-2 Ready on spare-1; the eviction of web-1 accepted at T0 + 5."""
    old = web("web-1", "node-a", ready_at=-3000)
    sibling = web("web-0", "node-a", created=-120, ready_at=-100)
    extra = web("web-2", "spare-1", created=1, ready_at=4)
    return surge_of(old, original=2, surged=3, evicted=T0 + 5), old, sibling, extra


def test_a_pod_not_seen_going_after_its_eviction_is_not_scaled_back_over_an_original_pod() -> None:
    """30 s after an accepted eviction the pod still looks alive. A scale-back now is a deletion by the
    ReplicaSet of the pod it ranks first, and that is web-0: doubled up on node-a (before the extra
    pod, alone on its node) and Ready for less time than web-1 (before the evicted pod). So no
    scale-back: the +1 is kept and the eviction tried again (it reads the pod first)."""
    s, old, sibling, extra = doubled_up_move()
    pods = [old, sibling, extra]
    now = T0 + 5 + SCALE_DOWN_GRACE_SECONDS + 1
    # the ReplicaSet's order (evictor.scale_down): web-0 certainly goes before web-1 and web-2
    assert ranked_before(sibling, pods, now) is None
    step = advance(s, dep(3, generation=6), RS, pods, now)
    assert step.action != Action.RESTORE, f"scaled back over {sibling.name}: {step.why}"
    assert step.action == Action.EVICT and "kept at 3" in step.why
    assert advance(s, dep(3, generation=6), RS, pods, T0 + 20).action == Action.WAIT  # within the grace


def test_a_pod_not_seen_going_after_its_eviction_is_scaled_back_when_the_extra_or_evicted_pod_goes_first() -> None:
    """One pod per node: the ReplicaSet ranks the extra pod (Ready for the shortest time) first, so the
    scale-back 30 s after the eviction removes no original pod and goes ahead as before."""
    s, old, _, extra = doubled_up_move()
    alone = web("web-0", "node-c", ready_at=-3000)
    step = advance(s, dep(3, generation=6), RS, [old, alone, extra], T0 + 5 + SCALE_DOWN_GRACE_SECONDS)
    assert step.action == Action.RESTORE and step.outcome == OVERRIDDEN and "still there" in step.why


def test_a_pod_not_seen_going_after_its_eviction_without_its_pods_keeps_the_extra_replica() -> None:
    """Without the workload's pods (a node's run that could not list them) the order is unknown: no
    scale-back, the eviction tried again."""
    s, *_ = doubled_up_move()
    step = advance(s, dep(3, generation=6), RS, None, T0 + 5 + SCALE_DOWN_GRACE_SECONDS)
    assert step.action == Action.EVICT


def test_replicas_changed_by_an_hpa_are_left_as_the_owner_set_them() -> None:
    old = web("web-1", "node-a")
    step = advance(surge_of(old), dep(4, generation=7), RS, [old], T0 + 3)
    assert step.action == Action.END and step.outcome == OVERRIDDEN and "owner" in step.why


def test_the_surged_value_written_by_an_hpa_is_not_taken_for_kdesched() -> None:
    """An HPA that went 2 -> 3 -> 2 owns the replicas' managedFields entry: the value is the HPA's."""
    old = web("web-1", "node-a")
    new = web("web-2", "spare-1", created=1)
    step = advance(surge_of(old), dep(2, generation=8, managers=("kube-controller-manager",)), RS, [old, new], T0 + 4)
    assert step.action == Action.END and step.outcome == OVERRIDDEN


@pytest.mark.parametrize("managers", [(SURGE_MANAGER,), None], ids=["kdesched's-entry", "no-managedFields"])
def test_a_later_generation_alone_does_not_take_the_replicas_from_kdesched(managers: tuple[str, ...] | None) -> None:
    """Generation 7 (an annotation, observed by the controller) with the replicas still written by
    kdesched's scale write, or no managedFields to tell: they are kdesched's, the move goes on."""
    old = web("web-1", "node-a")
    new = web("web-2", "spare-1", created=1)
    step = advance(surge_of(old), dep(2, generation=7, managers=managers), RS, [old, new], T0 + 4)
    assert step.action == Action.EVICT


def test_original_replicas_put_back_by_someone_else_end_the_move_after_the_start_grace() -> None:
    old = web("web-1", "node-a")
    assert advance(surge_of(old), dep(1, generation=7), RS, [old], T0 + 1).action == Action.WAIT
    step = advance(surge_of(old), dep(1, generation=7), RS, [old], T0 + START_GRACE_SECONDS + 1)
    assert step.action == Action.END and step.outcome == OVERRIDDEN


def test_a_rollout_begun_during_the_move_waits_with_the_replicas_kept() -> None:
    """Any sign of a rollout (a pod of another template, pods not updated, a spec write the controller
    has not observed): the move waits at +1; the replicas go back once it is over."""
    old = web("web-1", "node-a")
    rolled = web("web-3", "spare-1", created=2, ready=False, template="def")
    step = advance(surge_of(old), dep(2, generation=7, updated=1, status=2), RS, [old, rolled], T0 + 3)
    assert step.action == Action.WAIT and "rollout" in step.why
    assert advance(surge_of(old), dep(2, generation=7, observed=6), RS, [old], T0 + 3).action == Action.WAIT
    assert advance(surge_of(old), dep(2, generation=7), RS, [old], T0 + 121).action == Action.RESTORE


def rollout_mid_move() -> tuple[Surge, list[Pod], Pod]:
    """web-1 (Ready long) and web-0 (Ready for less time) on node-a, replicas surged 2 -> 3; then
    ``kubectl set image``: the Deployment controller syncs the new template with the replicas at 3, so
    the new ReplicaSet gets the room (maxSurge 1: web-3 and web-4, not Ready yet) and the old one
    (web-abc) keeps the two originals; there is no extra pod in it."""
    old = web("web-1", "node-a", ready_at=-3000)
    sibling = web("web-0", "node-a", created=-120, ready_at=-100)
    new = [web(f"web-{i}", f"node-{i}", created=2, ready=False, template="def") for i in (3, 4)]
    return surge_of(old, original=2, surged=3), [old, sibling, *new], sibling


def test_a_rollout_mid_move_keeps_the_extra_replica_instead_of_scaling_back() -> None:
    """A scale-back now is a scaling event for the Deployment controller: with two active ReplicaSets
    it spreads the -1 over them (pkg/controller/deployment/sync.go ``scale``: allowed 2 + 1 = 3 against
    4, both sizes 2, so the older, web-abc, takes the leftover -1), and web-abc's controller deletes the
    pod it ranks first: web-0, an original Ready pod (the owner's maxUnavailable for 2 replicas is 0).
    kdesched does not read or model that spread, so it scales nothing back while the rollout runs."""
    s, pods, sibling = rollout_mid_move()
    now = T0 + 10
    # in web-abc, the ReplicaSet that proportional scaling shrinks here, web-0 certainly goes first
    assert ranked_before(sibling, [p for p in pods if p.labels["pod-template-hash"] == "abc"], now) is None
    rolling = dep(3, generation=7, updated=2, status=4)
    step = advance(s, rolling, RS, pods, now)
    assert step.action != Action.RESTORE, f"scaled back during the rollout: {step.why}"
    assert step.action == Action.WAIT and "rollout" in step.why and "kept at 3" in step.why
    # nor at the deadline, nor once the pod is gone (the rollout replaced it) while it still runs
    assert advance(s, rolling, RS, pods, T0 + 121).action == Action.WAIT
    gone = [replace(pods[0], deletion_time=NOW), *pods[1:]]
    assert advance(s, rolling, RS, gone, T0 + 30).action == Action.WAIT
    # the pod gone and the Deployment's status caught up for a moment: pods of two templates still run
    assert advance(s, dep(3, generation=7), RS, pods[1:], T0 + 30).action == Action.WAIT


def test_after_the_rollout_the_replicas_go_back() -> None:
    """The rollout over (one template, the controller caught up): web-1 was replaced by it, and the
    scale-back removes one of the pods made during the move (all of them are now)."""
    s, _, _ = rollout_mid_move()
    done = [web(f"web-{i}", f"node-{i}", created=2, ready_at=8, template="def") for i in (3, 4, 5)]
    step = advance(s, dep(3, generation=7), RS, done, T0 + 60)
    assert step.action == Action.RESTORE and step.outcome == DONE


def test_the_deployment_gone_ends_the_move() -> None:
    old = web("web-1", "node-a")
    assert advance(surge_of(old), None, None, [old], T0 + 3).action == Action.END


def test_without_the_pods_the_move_is_not_given_up_by_a_scale_back() -> None:
    """Without the workload's pods (a node's run that could not list them: a selector with
    matchExpressions only) the extra pod may be Ready, and the pod a scale-back deletes is not known:
    past the deadline the +1 is kept until a run that reads the pods (the sweep, serve's watch cache)
    judges the give-up; with them, the pod not Ready yet is the one the scale-back removes."""
    old = web("web-1", "node-a")
    assert advance(surge_of(old), dep(2, generation=6), RS, None, T0 + 3).action == Action.WAIT
    step = advance(surge_of(old), dep(2, generation=6), RS, None, T0 + 121)
    assert step.action == Action.WAIT and "not known" in step.why and "kept at 2" in step.why
    pending = web("web-2", "", created=1, ready=False)
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, pending], T0 + 122)
    assert step.action == Action.RESTORE and step.outcome == GAVE_UP and step.block


# -- in the ledger -----------------------------------------------------------------------------------
def test_the_move_is_kept_in_the_workload_record_and_read_back() -> None:
    old = web("web-1", "node-a")
    s = surge_of(old, evicted=T0 + 4.5)
    rec = WorkloadRecord("Deployment/default/web", surge=s, surge_block=(T0 + 300, "quota"))
    back = WorkloadRecord.from_text(rec.to_text())
    assert back == rec and not back.empty


def test_a_surged_pod_stays_in_flight_until_its_move_ends_whatever_the_snapshot_says() -> None:
    old = web("web-1", "node-a")
    new = web("web-2", "spare-1", created=1)
    key = "Deployment/default/web"
    f = InFlight(old.uid, old.key, "node-a", T0, deadline=T0 + 60, scope="node/node-a/x")
    ledger = Ledger(moves={key: Move("RemovePodsViolatingNodeTaints", T0, T0, 1, 1, (f,))},
                    surges={key: surge_of(old)})
    # the workload is back at its Ready count (the surge pod) and the admission's deadline has passed:
    # a plain eviction's entry would be settled; the surged pod's is not
    settled = ledger.settle({key: [old, new]}, T0 + 200, 120)
    assert settled.ledger.moves[key].inflight == (f,)
    assert settled.ledger.in_flight(old.uid, T0 + 200)
    assert settled.ledger.held_scopes() == {"node/node-a/x": [old.key]}  # a restarted process repeats it
    records, cluster = settled.ledger.split()
    joined, _ = Ledger.join(records.values(), cluster)
    assert joined.surges == ledger.surges


def test_a_run_that_lost_its_commit_drops_the_surge_it_recorded() -> None:
    old = web("web-1", "node-a")
    key = "Deployment/default/web"
    f = InFlight(old.uid, old.key, "node-a", T0, run="r1")
    ledger = Ledger(moves={key: Move("RemovePodsViolatingNodeTaints", T0, T0, 1, 1, (f,))}, surges={key: surge_of(old)})
    assert not ledger.without_run("r1").surges

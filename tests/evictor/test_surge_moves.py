"""Surge-first moves decided for a run, the pure part (kdesched.evictor.surge_moves): which pods of a
plan move surge-first, which owners must be read for that, what a move in the ledger does next, and
the ledger once the steps were carried out. The reactor's I/O around them is pinned by
tests/reactor/test_surge.py, the real controllers by tests/realk8s/test_surge.py."""

from __future__ import annotations

from dataclasses import replace

from kdesched.evictor.ledger import InFlight, Ledger, Move, Settled
from kdesched.evictor.ledger_records import CLOCK_MARGIN_SECONDS
from kdesched.evictor.pacing import PacedStep, PacingPlan, WorkloadPacing, WorkloadStatus
from kdesched.evictor.planner import PlannedEviction, Refusal
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import DONE, GAVE_UP, OVERRIDDEN, Action, Fallback, Step, Surge
from kdesched.evictor.surge_moves import (
    Candidate,
    Carried,
    Choice,
    Observed,
    busy,
    candidates,
    choose,
    next_step,
    owners_to_read,
    settle_moves,
    without,
)
from kdesched.evictor.workloads import Workload
from kdesched.model.owners import DeploymentInfo, ReplicaSetInfo
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot
from kdesched.policy.safety import Safety

from tests.builders import NOW, pdb_obj, pod_obj, snapshot

T0 = NOW.timestamp()
KEY = "Deployment/default/web"
WEB = Workload("Deployment", "default", "web")
READY = [{"type": "Ready", "status": "True"}]
TAINTS = "RemovePodsViolatingNodeTaints"


def web_obj(name: str, node: str, *, created: float = -3600, ready: bool = True) -> dict[str, object]:
    return pod_obj(name, node, owner_name="web-abc", labels={"app": "web", "pod-template-hash": "abc"},
                   created=created, conditions=READY if ready else [{"type": "Ready", "status": "False"}])


def web(name: str, node: str, **kw: object) -> Pod:
    return Pod.from_api(web_obj(name, node, **kw))  # type: ignore[arg-type]


def dep(replicas: int = 1, generation: int = 5) -> DeploymentInfo:
    return DeploymentInfo("default", "web", "uid-web", "100", generation, generation, replicas, replicas, replicas,
                          "RollingUpdate", "25%", False, {}, (), "app=web")


RS = ReplicaSetInfo("default", "web-abc", "Deployment", "web", 1)


def pacing(evictions: list[PlannedEviction], waves: list[int], ready: int) -> PacingPlan:
    return PacingPlan(Safety(True, "test"), tuple(PacedStep(WEB, w, 1) for w in waves),
                      {WEB: WorkloadPacing(WorkloadStatus(WEB, ready, ready), 1, "kdesched.safety.maxUnavailable")})


def evict(p: Pod) -> PlannedEviction:
    return PlannedEviction(p, p.node_name, TAINTS, "p", "untolerated taint")


def pdb_refused(p: Pod) -> Refusal:
    return Refusal(p, TAINTS, "p", "the PodDisruptionBudget web allows no disruption", Reason.PDB)


# -- which pods should move surge-first --------------------------------------------------------------
def test_the_only_ready_pod_of_a_workload_is_a_candidate_already_admitted() -> None:
    only = web("web-1", "node-a")
    plan = [evict(only)]
    wanted = candidates(plan, (), pacing(plan, [0], ready=1))
    assert list(wanted) == [KEY] and wanted[KEY].pod == only and wanted[KEY].admitted
    assert "no Ready pod" in wanted[KEY].why


def test_a_wave_0_eviction_that_leaves_a_ready_pod_is_no_candidate_and_keeps_its_workload_out() -> None:
    a, b = web("web-1", "node-a"), web("web-2", "node-a")
    plan = [evict(a), evict(b)]
    # two Ready, one goes now and one waits: the wave-0 eviction is ordinary, so no surge for the held one
    assert candidates(plan, (), pacing(plan, [0, 1], ready=2)) == {}


def test_a_pod_held_for_a_later_wave_or_kept_by_a_pdb_is_a_candidate_not_yet_admitted() -> None:
    held = web("web-1", "node-a")
    plan = [evict(held)]
    wanted = candidates(plan, (), pacing(plan, [1], ready=1))
    assert not wanted[KEY].admitted and "leaves no room (wave 1)" in wanted[KEY].why
    kept = web("web-2", "node-a")
    wanted = candidates((), [pdb_refused(kept)], PacingPlan(Safety(True, "test"), ()))
    assert wanted[KEY].pod == kept and not wanted[KEY].admitted
    bare = Pod.from_api(pod_obj("bare", "node-a", owner_kind=None))
    assert candidates((), [pdb_refused(bare)], PacingPlan(Safety(True, "test"), ())) == {}


# -- what the ledger alone rules out, and whose owners are read --------------------------------------
def test_a_workload_already_moving_or_recently_given_up_is_busy_and_its_owners_are_not_read() -> None:
    p = web("web-1", "node-a")
    surge = Surge(p.uid, p.key, "node-a", "web", "web-abc", 1, 2, T0, T0 + 120, TAINTS)
    wanted = {KEY: Candidate(p, TAINTS, "p", "r", "why"), "StatefulSet/default/db": Candidate(p, TAINTS, "p", "r", "w")}
    assert busy(KEY, Ledger(), T0) is None
    assert owners_to_read(wanted, Ledger(), T0) == [KEY]  # a StatefulSet has no owner to scale
    moving = Ledger(surges={KEY: surge})
    refusal = busy(KEY, moving, T0)
    assert refusal is not None and refusal.reason == Fallback.BUSY
    assert owners_to_read(wanted, moving, T0) == []
    sending = Ledger(moves={KEY: Move(TAINTS, T0, T0, 1, 1, (InFlight("u", "default/x", "node-a", T0,
                                                                       deadline=T0 + 60),))})
    refusal = busy(KEY, sending, T0 + 10)
    assert refusal is not None and refusal.reason == Fallback.BUSY and "may still be under way" in refusal.message
    # that eviction can no longer land (past its deadline and the margin for clocks that disagree)
    assert busy(KEY, sending, T0 + 60 + CLOCK_MARGIN_SECONDS + 1) is None
    blocked = Ledger(surge_blocks={KEY: (T0 + 300, "no replacement was Ready")})
    refusal = busy(KEY, blocked, T0)
    assert refusal is not None and refusal.reason == Fallback.BLOCKED and "300s" in refusal.message
    assert busy(KEY, blocked, T0 + 301) is None
    assert busy("Pod/default/bare", moving, T0) is None  # surge_refusal names a bare pod


# -- the choice ------------------------------------------------------------------------------------
def test_a_chosen_move_surges_by_one_on_the_version_read_with_its_deadline() -> None:
    p = web("web-1", "node-a")
    snap = snapshot([web_obj("web-1", "node-a")])
    wanted = {KEY: Candidate(p, TAINTS, "p", "r", "why", admitted=True)}
    choice = choose(wanted, {KEY: (dep(1, generation=5), RS)}, Ledger(), snap, T0, 120)
    (surge, version), = choice.surges.values()
    assert (surge.uid, surge.original, surge.surged, surge.generation, surge.deadline) == (p.uid, 1, 2, 6, T0 + 120)
    assert version == "100" and choice.fallbacks == ()


def test_an_unread_owner_or_a_budget_falls_back_to_the_normal_rules_and_says_why() -> None:
    p = web("web-1", "node-a")
    snap = snapshot([web_obj("web-1", "node-a")])
    wanted = {KEY: Candidate(p, TAINTS, "p", "r", "held for wave 1")}
    unread = choose(wanted, {}, Ledger(), snap, T0, 120)
    assert not unread.surges and [why.reason for _, why in unread.fallbacks] == [Fallback.OWNER_UNREADABLE]
    asked: list[PlannedEviction] = []

    def budget(e: PlannedEviction) -> Verdict | None:
        asked.append(e)
        return Verdict(Reason.BUDGET, "the disruption budget of namespace default is spent")

    refused = choose(wanted, {KEY: (dep(), RS)}, Ledger(), snap, T0, 120, budget)
    assert [why.reason for _, why in refused.fallbacks] == [Fallback.CONTROLS] and [e.pod for e in asked] == [p]
    assert "budget" in refused.fallbacks[0][1].message
    # a pod the plan checks already let through is not asked again
    asked.clear()
    choose({KEY: replace(wanted[KEY], admitted=True)}, {KEY: (dep(), RS)}, Ledger(), snap, T0, 120, budget)
    assert asked == []


def test_a_pdb_that_counts_every_replica_is_a_fallback() -> None:
    p = web("web-1", "node-a")
    pdb = pdb_obj("web", {"app": "web"}, disruptions_allowed=0)
    pdb["spec"]["maxUnavailable"] = 0
    snap = snapshot([web_obj("web-1", "node-a"), pdb])
    choice = choose({KEY: Candidate(p, TAINTS, "p", "r", "why", admitted=True)}, {KEY: (dep(), RS)}, Ledger(), snap,
                    T0, 120)
    assert [why.reason for _, why in choice.fallbacks] == [Fallback.PDB_SCALES]


def test_the_plan_without_the_surged_pod_holds_its_pdb_kept_siblings_and_counts_its_workload() -> None:
    a, b, other = web("web-1", "node-a"), web("web-2", "node-a"), Pod.from_api(pod_obj("db-1", "node-a"))
    snap: Snapshot = snapshot([web_obj("web-1", "node-a"), web_obj("web-2", "node-a"),
                               web_obj("web-3", "node-b", ready=False)])
    plan = [evict(other), evict(a)]
    kept_elsewhere = Pod.from_api(pod_obj("cache-1", "node-a", owner_name="cache-9f8"))
    refusals = [pdb_refused(b), Refusal(other, TAINTS, "p", "limit", Reason.OTHER), pdb_refused(kept_elsewhere)]
    steps = PacingPlan(Safety(True, "test"), (PacedStep(None, 0), PacedStep(WEB, 1, 1)))
    wanted = {KEY: Candidate(a, TAINTS, "p", "r", "held")}
    surge = Surge(a.uid, a.key, "node-a", "web", "web-abc", 3, 4, T0, T0 + 120, TAINTS)
    choice = Choice({KEY: (surge, "100")}, (), {KEY: [x for x in snap.pods if x.name.startswith("web")]})
    rest = without(plan, refusals, steps, wanted, choice, lambda p: f"node:{p.node_name}")
    assert [e.pod for e in rest.evictions] == [other] and rest.steps == (PacedStep(None, 0),)
    # the PDB-kept sibling is held by the move now; another workload's PDB refusal stays one
    assert [r.pod for r in rest.refusals] == [other, kept_elsewhere]
    moved, held = rest.admissions
    assert (moved.pod, moved.held, moved.scope, moved.expected, moved.ready) == (a, False, "node:node-a", 3, 2)
    assert (held.pod, held.held) == (b, True)


# -- a move in the ledger, one step on -------------------------------------------------------------
def observed(p: Pod, pods: list[Pod], deployment: DeploymentInfo | None, **kw: object) -> Observed:
    s = Surge(p.uid, p.key, p.node_name, "web", "web-abc", 1, 2, T0, T0 + 120, TAINTS, 6)
    return Observed(KEY, replace(s, **kw), deployment, RS, pods)  # type: ignore[arg-type]


def test_a_move_this_process_could_not_start_ends_instead_of_waiting() -> None:
    old = web("web-1", "node-a")
    o = observed(old, [old], dep(1, generation=5))
    assert next_step(o, T0 + 1, not_started=False).action == Action.WAIT  # another process may be scaling up
    step = next_step(o, T0 + 1, not_started=True)
    assert (step.action, step.outcome) == (Action.END, OVERRIDDEN)


def test_a_move_marked_not_started_whose_replicas_are_kdesched_s_goes_its_way() -> None:
    """The mark says the scale-up failed, but the replicas are at kdesched's value (its write landed,
    the answer was what failed): ending the move would leave them at +1, so it waits as any move."""
    old = web("web-1", "node-a")
    o = observed(old, [old], dep(2, generation=6))
    assert next_step(o, T0 + 1, not_started=True).action == Action.WAIT


def test_a_deferred_eviction_waits_then_restores_at_the_deadline() -> None:
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    o = observed(old, [old, new], dep(2, generation=6))
    assert next_step(o, T0 + 5, not_started=False).action == Action.EVICT
    asked: list[PlannedEviction] = []

    def brake(e: PlannedEviction) -> Verdict | None:
        asked.append(e)
        return Verdict(Reason.HEALTH_BRAKE, "2 nodes NotReady")

    assert next_step(o, T0 + 5, not_started=False, hold=brake).action == Action.WAIT
    assert [e.pod for e in asked] == [old]
    step = next_step(o, T0 + 120, not_started=False, hold=brake)
    assert (step.action, step.outcome) == (Action.RESTORE, OVERRIDDEN) and "2 nodes NotReady" in step.why


# -- the ledger once the steps were carried out ----------------------------------------------------
def moving_ledger(old: Pod, surge: Surge) -> Ledger:
    f = InFlight(old.uid, old.key, old.node_name, T0 + 0.25, scope="node:node-a:" + TAINTS)
    return Ledger(moves={KEY: Move(TAINTS, T0, T0, 1, 1, (f,))}, workloads={KEY: T0 + 0.25},
                  nodes={"node-a": T0 + 0.25}, node_strategies={"node-a": TAINTS}, surges={KEY: surge})


def test_a_step_not_carried_out_changes_nothing() -> None:
    old = web("web-1", "node-a")
    o = observed(old, [old], dep(2, generation=6))
    settled = Settled(moving_ledger(old, o.surge))
    out, ended = settle_moves(settled, [Carried(o, Step(Action.RESTORE, "x", GAVE_UP), None)], T0 + 9)
    assert out is settled and ended == ()
    assert settle_moves(settled, [], T0 + 9) == (settled, ())


def test_an_eviction_carried_out_is_recorded_and_the_move_goes_on() -> None:
    old = web("web-1", "node-a")
    o = observed(old, [old], dep(2, generation=6))
    out, ended = settle_moves(Settled(moving_ledger(old, o.surge)), [Carried(o, Step(Action.EVICT, "ready"), True)],
                              T0 + 9)
    assert out.surges_changed and out.ledger.surges[KEY].evicted == T0 + 9 and ended == ()
    assert out.ledger.moves[KEY].inflight  # in flight until the pod is seen gone


def test_a_move_given_up_takes_its_cool_downs_back_blocks_the_workload_and_is_checked() -> None:
    old = web("web-1", "node-a")
    o = observed(old, [old], dep(2, generation=6))
    step = Step(Action.RESTORE, "no replacement was Ready on another node within 120s", GAVE_UP, block=True)
    out, ended = settle_moves(Settled(moving_ledger(old, o.surge)), [Carried(o, step, False)], T0 + 130)
    assert KEY not in out.ledger.surges and KEY not in out.ledger.moves
    assert KEY not in out.ledger.workloads and "node-a" not in out.ledger.nodes  # nothing was evicted
    assert out.ledger.surge_blocks[KEY][0] == T0 + 130 + 300
    assert [(e.workload, e.outcome) for e in ended] == [(KEY, GAVE_UP)]
    assert [(c.outcome, c.why) for c in out.checked] == [("unknown", step.why)]


def test_a_move_done_keeps_the_cool_downs_of_its_eviction() -> None:
    old, new = web("web-1", "node-a"), web("web-2", "spare-1", created=2)
    o = observed(old, [new], dep(1, generation=7), evicted=T0 + 5)
    out, ended = settle_moves(Settled(moving_ledger(old, o.surge)),
                              [Carried(o, Step(Action.END, "gone", DONE, new), False)], T0 + 9)
    assert out.ledger.workloads[KEY] == T0 + 0.25 and out.ledger.nodes["node-a"] == T0 + 0.25
    assert [e.outcome for e in ended] == [DONE] and [c.landed for c in out.checked] == ["spare-1"]

"""Surge-first moves decided for a run: which pods of a plan move surge-first, what each move in the
ledger does next, and the ledger once those steps were carried out.

Why: a run handles surge-first moves in three phases, and only two of them touch the API server.
The reactor (:mod:`kdesched.reactor.run.surge`) reads the owners, asks this module, then carries out
what it answered (a scale-up, an eviction, a scale-back). Every decision in between is here and
pure, so it is tested on built objects and the reactor holds only I/O and its own memory:

* at the settle, :func:`next_step` (per move, from what was read), :func:`settle_moves` (the ledger
  after the steps, with the checked moves and the moves that ended), :func:`remembered` (the
  evictions this process sent that a lost ledger write did not record) and :func:`refunded` (the
  claimed evictions of pods made during a move that were refused: not counted towards its cap);
* after planning, :func:`candidates` (which pods should move surge-first), :func:`owners_to_read`
  (whose owners the reactor must read), :func:`choose` (which of them may, and why the others may
  not) and :func:`without` (the plan's evictions and refusals without them, and their admissions).

The single-move rules (whether a pod may be surged, what a move does next from what is observed)
are :mod:`kdesched.evictor.surge`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kdesched.evictor.ledger import (
    ACHIEVED,
    UNKNOWN,
    WASTED,
    Admission,
    CheckedMove,
    Ledger,
    Settled,
    wasted_reason,
    workload_key,
)
from kdesched.evictor.pacing import PacedStep, PacingPlan
from kdesched.evictor.planner import PlannedEviction, Refusal
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import (
    BLOCK_SECONDS,
    DONE,
    OVERRIDDEN,
    Action,
    Fallback,
    NoSurge,
    Step,
    Surge,
    advance,
    surge_refusal,
)
from kdesched.model.derived import pod_ready
from kdesched.model.owners import DeploymentInfo, ReplicaSetInfo
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot

log = logging.getLogger("kdesched.reactor.surge")

# a pod's scope key in the ledger: the run's key, or each pod's (kdesched.reactor.run.admit.RunScope.key_for)
ScopeOf = str | Callable[[Pod], str]
Owners = tuple[DeploymentInfo | None, ReplicaSetInfo | None]


# -- the settle: each move in the ledger, one step on ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class Observed:
    """What the reactor read for one move of the ledger: its owners (None: gone) and the workload's
    pods (None: neither the run's snapshot nor a LIST gave them)."""

    key: str  # the workload
    surge: Surge
    deployment: DeploymentInfo | None
    replicaset: ReplicaSetInfo | None
    pods: Sequence[Pod] | None


@dataclass(frozen=True, slots=True)
class Carried:
    """A move's step and what came of it: ``done`` None when it was not carried out (a write lost a
    race: nothing changes in the ledger), True when the move goes on (its pod evicted), False when
    it ended."""

    observed: Observed
    step: Step
    done: bool | None


@dataclass(frozen=True, slots=True)
class Ended:
    """A surge-first move that ended in this run's settle (for the report, metrics and Events)."""

    workload: str
    surge: Surge
    outcome: str  # done | gave-up | overridden
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "pod": self.surge.pod, "node": self.surge.node, "outcome": self.outcome,
                "why": self.why, "replicas": self.surge.original}


def next_step(o: Observed, now: float, *, not_started: bool,
              hold: Callable[[PlannedEviction], Verdict | None] | None = None,
              extra: Callable[[PlannedEviction], Verdict | None] | None = None) -> Step:
    """What the move ``o`` does now. ``not_started``: this process recorded it and could not scale up
    (it ends at once); ``hold``: whether the run's brakes or a closed window defer an eviction now
    (the move's eviction then waits, and the move is given up at its deadline, the replicas restored
    if that removes the extra pod; else the +1 is kept until the eviction is allowed); ``extra``:
    whether the eviction of a pod made during the move may go now, asked as one more eviction (the
    brakes, the windows and the disruption budgets; ``hold`` when not given): refused, it waits,
    neither claimed nor counted towards the move's cap."""
    s = o.surge
    step = advance(s, o.deployment, o.replicaset, o.pods, now)
    if not_started and step.action == Action.WAIT and (o.deployment is None or not s.ours(o.deployment)):
        # (replicas at kdesched's value, written by kdesched: the scale-up did land after all, and the
        # move goes its normal way, given up and put back at worst)
        return Step(Action.END, "its Deployment changed before the scale-up", OVERRIDDEN)
    ask = extra if extra is not None else hold
    if ask is not None and step.action == Action.EVICT_EXTRA and step.target is not None:
        # the extra pod's eviction is an eviction like any other: the brakes, windows and budgets hold it
        verdict = ask(PlannedEviction(step.target, step.target.node_name, s.strategy, "", "surge-first"))
        if verdict is not None:
            return Step(Action.WAIT, f"{step.why} (its eviction waits: {verdict.message})", "", step.replacement,
                        held=step.held, control=verdict.reason)
    late = now >= s.deadline and step.replacement is not None and step.outcome != DONE
    if hold is not None and (step.action == Action.EVICT or (step.action == Action.RESTORE and late)):
        marked = next((p for p in o.pods or () if p.uid == s.uid), None)
        verdict = hold(PlannedEviction(marked, s.node, s.strategy, "", "surge-first")) if marked else None
        if verdict is not None and step.action == Action.RESTORE:
            return Step(Action.RESTORE, f"its eviction was deferred past the timeout ({verdict.message})",
                        OVERRIDDEN, step.replacement)
        if verdict is not None:
            log.info("surge-first move of %s: its eviction waits (%s)", o.key, verdict.message)
            return Step(Action.WAIT, held=step.held)  # (past the deadline: still held, the +1 kept)
    return step


def settle_moves(settled: Settled, carried: Sequence[Carried], now: float) -> tuple[Settled, tuple[Ended, ...]]:
    """The ledger once the moves' steps were carried out: a move whose pod was evicted goes on (its
    eviction time recorded), an ended move leaves the ledger with its in-flight entry, and the
    cool-downs of a move that evicted nothing are taken back (as for an eviction that did not happen,
    so the pod keeps the normal rules at once), and a move that evicts a pod made during it counts
    that eviction (:attr:`~kdesched.evictor.surge.Surge.extra`), sent once this ledger is written.
    Returns the settle and the moves that ended."""
    ledger = settled.ledger
    surges = dict(ledger.surges)
    blocks = dict(ledger.surge_blocks)
    moves = dict(ledger.moves)
    workloads, nodes, node_by = dict(ledger.workloads), dict(ledger.nodes), dict(ledger.node_strategies)
    checked: list[CheckedMove] = []
    ended: list[Ended] = []
    claimed = False
    for c in carried:
        key, s, step = c.observed.key, c.observed.surge, c.step
        if step.action == Action.EVICT_EXTRA:
            # the eviction of a pod made during the move is claimed in the ledger first: the reactor
            # sends it only once this write went through (a process whose write conflicts sends none)
            surges[key] = replace(s, extra=s.extra + 1, extra_at=now)
            claimed = True
            continue
        if c.done is None:
            continue
        if c.done:
            surges[key] = replace(s, evicted=now)
            continue
        del surges[key]
        if step.block:
            blocks[key] = (now + BLOCK_SECONDS, step.why)
        mv = moves.get(key)
        entry = next((f for f in mv.inflight if f.uid == s.uid), None) if mv is not None else None
        if entry is not None and step.outcome != DONE:
            if _same(workloads.get(key), entry.at):
                workloads.pop(key, None)
            if _same(nodes.get(s.node), entry.at):
                nodes.pop(s.node, None)
                node_by.pop(s.node, None)
        if mv is not None:
            mv = replace(mv, inflight=tuple(f for f in mv.inflight if f.uid != s.uid), progress=now)
            if mv.kept:
                moves[key] = mv
            else:
                del moves[key]
        checked.append(checked_move(key, s, step, now))
        ended.append(Ended(key, s, step.outcome, step.why))
    if not claimed and all(c.done is None for c in carried):
        return settled, ()
    new = replace(ledger, surges=surges, surge_blocks=blocks, moves=moves, workloads=workloads, nodes=nodes,
                  node_strategies=node_by)
    return replace(settled, ledger=new, checked=(*settled.checked, *checked), surges_changed=True), tuple(ended)


def remembered(settled: Settled, evicted: Mapping[str, float]) -> Settled:
    """The ledger with the eviction times ``evicted`` (workload -> when) of this process's evictions
    filled into the moves still in it that record none: an eviction whose ledger write then lost its
    race. The attempt that decides again sees the pod evicted a moment ago and waits, which changes
    nothing else; without this it would write nothing, and only this process would know that the pod
    was evicted (another would evict it again, or take it for one never evicted)."""
    ledger = settled.ledger
    filled = {k: replace(s, evicted=evicted[k]) for k, s in ledger.surges.items()
              if not s.evicted and evicted.get(k, 0.0) > 0}
    if not filled:
        return settled
    return replace(settled, ledger=replace(ledger, surges={**ledger.surges, **filled}), surges_changed=True)


def refunded(settled: Settled, refused: Mapping[str, Surge]) -> Settled:
    """The ledger with the claims ``refused`` (workload -> the move's record as claimed) taken back: an
    eviction of a pod made during the move that this process claimed (:attr:`Surge.extra`) and then
    sent without effect (refused by a PDB's 429, a webhook, or not sent at all: the pod already gone,
    the read before it failed). The cap bounds the pods actually evicted, so such a claim does not use
    it up; its time (:attr:`Surge.extra_at`) stays, so the next try waits the spacing like after any
    eviction. Only a record that still holds that very claim is changed: taken back once (a record
    with the count lowered no longer matches), and never a later claim."""
    ledger = settled.ledger
    back = {k: replace(s, extra=s.extra - 1) for k, s in ledger.surges.items()
            if (c := refused.get(k)) is not None and s.extra > 0 and _claim_of(s) == _claim_of(c)}
    if not back:
        return settled
    return replace(settled, ledger=replace(ledger, surges={**ledger.surges, **back}), surges_changed=True)


def _claim_of(s: Surge) -> tuple[str, float, int, float]:
    """The identity of a move's last extra-eviction claim, as the ledger keeps it (to the millisecond)."""
    return s.uid, round(s.started, 3), s.extra, round(s.extra_at, 3)


def checked_move(key: str, s: Surge, step: Step, now: float) -> CheckedMove:
    """The ended surge-first move as a checked move (docs/safety.md, "Checked moves")."""
    r = step.replacement
    if step.outcome == DONE and r is not None:
        ready_at = next((c.last_transition_time.timestamp() for c in r.conditions
                         if c.type == "Ready" and c.status == "True" and c.last_transition_time is not None), now)
        why = wasted_reason(s.strategy, r, s.node, None, {s.node})
        return CheckedMove(key, s.strategy, s.pod, s.node, "", r.node_name, max(0.0, ready_at - s.started),
                           WASTED if why else ACHIEVED, why or "")
    if step.wasted:
        return CheckedMove(key, s.strategy, s.pod, s.node, "", s.node, None, WASTED, f"surge-first: {step.why}")
    # given up (no replacement Ready in time, a quota) or overridden: nothing was evicted, so nothing
    # was wasted; the workload's surge block keeps it from trying again at once
    return CheckedMove(key, s.strategy, s.pod, s.node, "", "", None, UNKNOWN, step.why)


def _same(recorded: float | None, at: float) -> bool:
    """Is ``recorded`` the admission time ``at`` (the record keeps milliseconds)?"""
    return recorded is not None and abs(recorded - at) < 0.002


# -- after planning: which pods move surge-first --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Candidate:
    pod: Pod
    strategy: str
    profile: str
    reason: str  # the strategy's reason for moving it
    why: str  # why surge-first: "single replica", the pacing or PDB refusal
    admitted: bool = False  # the admission pipeline's plan checks (budgets, windows) already let it through


@dataclass(frozen=True, slots=True)
class Choice:
    """Which candidates move surge-first (workload -> (move, the Deployment's resourceVersion it was
    chosen at)), and why the others do not."""

    surges: Mapping[str, tuple[Surge, str]] = field(default_factory=dict)
    fallbacks: tuple[tuple[Candidate, NoSurge], ...] = ()
    index: Mapping[str, Sequence[Pod]] = field(default_factory=dict)  # each candidate workload's pods


@dataclass(frozen=True, slots=True)
class Remaining:
    """A plan without the pods moved surge-first, and the admissions of those moves."""

    evictions: tuple[PlannedEviction, ...]
    refusals: tuple[Refusal, ...]
    steps: tuple[PacedStep, ...]
    admissions: tuple[Admission, ...]


def candidates(evictions: Sequence[PlannedEviction], refusals: Sequence[Refusal],
               pacing: PacingPlan) -> dict[str, Candidate]:
    """One pod per workload that should move surge-first: a wave-0 eviction that would leave its
    workload with no Ready pod; a pod held for a later wave (the allowance leaves no room); a pod a
    PodDisruptionBudget keeps (it allows no disruption). The first such pod of each workload."""
    out: dict[str, Candidate] = {}
    wave0: dict[str, int] = {}
    for e, step in zip(evictions, pacing.steps, strict=True):
        if step.workload is None:
            continue
        key = workload_key(e.pod)
        known = pacing.workloads.get(step.workload)
        ready = known.status.ready if known is not None else 0
        if step.wave == 0:
            wave0[key] = wave0.get(key, 0) + 1
            if pod_ready(e.pod) and ready - wave0[key] <= 0 and key not in out:
                out[key] = Candidate(e.pod, e.strategy, e.profile, e.reason,
                                     f"its eviction would leave {step.workload} with no Ready pod", True)
        elif key not in out and key not in wave0:
            out[key] = Candidate(e.pod, e.strategy, e.profile, e.reason,
                                 f"the allowance of {step.workload} leaves no room (wave {step.wave})")
    for r in refusals:
        if r.kind == Reason.PDB and r.pod.owner_refs:
            key = workload_key(r.pod)
            if key not in out and key not in wave0:
                out[key] = Candidate(r.pod, r.strategy, r.profile, r.reason, r.reason)
    return out


def busy(key: str, ledger: Ledger, now: float) -> NoSurge | None:
    """Why the workload ``key`` cannot begin a surge-first move now, from the ledger alone, or None."""
    if key.startswith("Pod/"):
        return None  # surge_refusal names it
    if key in ledger.surges:
        return NoSurge(Fallback.BUSY, "a surge-first move of the workload is under way")
    mv = ledger.moves.get(key)
    sending = [f for f in mv.inflight if f.may_still_land(now)] if mv is not None else []
    if sending:
        # an eviction of the workload may still be under way: its outcome first. One that has
        # landed (its replacement pending, or the workload scaled down since, so never "back")
        # does not stop a surge-first move: that move takes nothing down before its new pod is
        # Ready, and the API server checks the PDB at its eviction
        return NoSurge(Fallback.BUSY, f"{len(sending)} eviction(s) of the workload may still be under way")
    block = ledger.surge_blocks.get(key)
    if block is not None and block[0] > now:
        return NoSurge(Fallback.BLOCKED, f"its last surge-first move was given up ({block[1]}); none again for "
                       f"{block[0] - now:.0f}s")
    return None


def owners_to_read(wanted: Mapping[str, Candidate], ledger: Ledger, now: float) -> list[str]:
    """The candidate workloads whose Deployment and ReplicaSet the reactor reads before :func:`choose`:
    Deployments the ledger does not already rule out."""
    return [k for k in wanted if k.split("/", 1)[0] == "Deployment" and busy(k, ledger, now) is None]


def choose(wanted: Mapping[str, Candidate], owners: Mapping[str, Owners], ledger: Ledger, snapshot: Snapshot,
           now: float, timeout_seconds: float,
           admit: Callable[[PlannedEviction], Verdict | None] | None = None,
           pods: Mapping[str, Sequence[Pod] | None] | None = None) -> Choice:
    """Which of ``wanted`` move surge-first, given their ``owners`` as read (:func:`owners_to_read`; a
    workload missing there could not be read). ``admit``: the admission pipeline for a pod the
    planner did not plan as an eviction sent now (held for a later wave, kept by a PDB), so that no
    check counted it (:meth:`kdesched.admission.pipeline.RunAdmission.take`): the move is in flight
    like an eviction, so it must pass every check as one and is counted as one (the cluster-wide
    bucket's token, the ledger record's room, the disruption budgets); a refusal keeps the normal
    rules for it (``controls``). ``pods``: the workloads' pods as read for a run whose snapshot does
    not hold them all (one node's pods): a workload's own pods (:func:`~kdesched.evictor.surge.own_pods`
    rules) are its siblings then, and a workload missing there or None (not listed) does not move
    surge-first: its rollout check and Ready counts would be judged on the node's pods alone."""
    index = _pods_by_key(snapshot, wanted) if pods is None else _own(wanted, pods)
    surges: dict[str, tuple[Surge, str]] = {}
    fallbacks: list[tuple[Candidate, NoSurge]] = []
    for key, c in wanted.items():
        kind = key.split("/", 1)[0]
        refusal = busy(key, ledger, now)
        deployment, replicaset = owners.get(key, (None, None))
        if refusal is None and pods is not None and deployment is not None and pods.get(key) is None:
            refusal = NoSurge(Fallback.OWNER_UNREADABLE, "the run read one node's pods, and the workload's could not "
                              "be listed (its selector is not a plain label match, or the LIST failed)")
        if refusal is None:
            refusal = surge_refusal(c.pod, kind, deployment, replicaset, index.get(key, []), snapshot.eviction_pdbs_for(c.pod))
        if refusal is None and not c.admitted and admit is not None:
            verdict = admit(PlannedEviction(c.pod, c.pod.node_name, c.strategy, c.profile, c.reason))
            if verdict is not None:
                refusal = NoSurge(Fallback.CONTROLS, verdict.message, verdict.reason)
        if refusal is not None:
            fallbacks.append((c, refusal))
            continue
        assert deployment is not None and replicaset is not None
        surges[key] = (Surge(c.pod.uid, c.pod.key, c.pod.node_name, deployment.name, replicaset.name,
                             deployment.replicas, deployment.replicas + 1, now, now + timeout_seconds,
                             c.strategy, deployment.generation + 1), deployment.resource_version)
    return Choice(surges, tuple(fallbacks), index)


def without(evictions: Sequence[PlannedEviction], refusals: Sequence[Refusal], pacing: PacingPlan,
            wanted: Mapping[str, Candidate], choice: Choice, scope: ScopeOf) -> Remaining:
    """The plan without the pods moved surge-first, and their admissions: the pod in flight (its
    workload's allowance and every budget count it until the move ends), its workload's other
    PDB-refused pods held, so the move goes on with them after it."""
    scope_of = scope if callable(scope) else (lambda _pod, key=scope: key)  # a run's key, or each pod's
    uids = {s.uid for s, _ in choice.surges.values()}
    keep = [i for i, e in enumerate(evictions) if e.pod.uid not in uids]
    admissions: list[Admission] = []
    for key in choice.surges:
        c = wanted[key]
        live = [p for p in choice.index.get(key, ()) if not p.terminating and not p.terminal]
        admissions.append(Admission(c.pod, c.strategy, False, scope_of(c.pod), "", len(live),
                                    sum(1 for p in live if pod_ready(p))))
    held = [Admission(r.pod, r.strategy, True, scope_of(r.pod)) for r in refusals
            if r.kind == Reason.PDB and r.pod.uid not in uids and workload_key(r.pod) in choice.surges]
    admissions += held
    gone = uids | {a.pod.uid for a in held}
    return Remaining(tuple(evictions[i] for i in keep), tuple(r for r in refusals if r.pod.uid not in gone),
                     tuple(pacing.steps[i] for i in keep), tuple(admissions))


def _own(wanted: Mapping[str, Candidate], listed: Mapping[str, Sequence[Pod] | None]) -> dict[str, list[Pod]]:
    """Each candidate workload's own pods among those listed for it (a LIST by the Deployment's
    matchLabels may return another controller's pods: a canary)."""
    return {k: [p for p in listed.get(k) or () if p.owner_refs and workload_key(p) == k] for k in wanted}


def _pods_by_key(snapshot: Snapshot, wanted: Mapping[str, Candidate]) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = {k: [] for k in wanted}
    for p in snapshot.pods:
        if p.owner_refs:
            k = workload_key(p)
            if k in out:
                out[k].append(p)
    return out

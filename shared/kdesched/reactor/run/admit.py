"""Deciding a run against the disruption ledger and admitting its evictions, atomically.

Why: the allowance ("at most maxUnavailable pods of a workload down because of kdesched") holds only
if every run admits its evictions against what every other run has in flight. This is the one
place that happens, for every kind of run (node-scoped, balance, manual, sweep, a paced repeat):

1. read the ledger (:mod:`kdesched.reactor.io.ledger_store`) and settle it against the run's snapshot
   (moves whose replacements are Ready end; held pods past the replacement timeout are given up);
2. plan with it, asking the admission pipeline (:mod:`kdesched.admission.pipeline`, every control
   in one documented order): the pacer counts in-flight pods as down and their destinations as
   taken; the brakes and closed windows defer evictions (reported ``deferred``, nothing written
   for them), the cool-downs, the bucket and the budgets refuse;
3. write the ledger with this run's admitted (in flight) and held evictions, on the condition that
   nobody wrote it since step 1. If someone did, go back to 1 with the same snapshot: the plan is
   made again against what the other run admitted, so no two runs ever admit on the same state.

Only then does the run evict, and only what was admitted. :func:`record_outcomes` afterwards takes
back the admissions whose eviction did not happen. The admission is written BEFORE any eviction,
so an eviction is never without its ledger entry (its cool-down, its in-flight count): a process
that dies, or a Lease write that fails, after evicting loses nothing that a redelivery needs.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from kdesched.admission.control import RunContext
from kdesched.admission.pipeline import AdmissionSettings, Pipeline, RunAdmission
from kdesched.engine import RunPlan, plan_run
from kdesched.evictor.admissions import admissions_of, pods_by_workload
from kdesched.evictor.execute import UNCONFIRMED, EvictionOutcome
from kdesched.evictor.ledger import Admission, Held, Ledger, Settled, workload_key
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import OVERRIDDEN
from kdesched.kube.errors import ApiError
from kdesched.model.alerts import AlertsReading
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot
from kdesched.policy.safety import Safety
from kdesched.policy.types import Policy
from kdesched.reactor import metrics as m
from kdesched.reactor.io.lease import LockBusy
from kdesched.reactor.io.ledger_store import LedgerRead, LedgerStore
from kdesched.reactor.run.continuation import node_scope
from kdesched.reactor.run.controls import BrakeStatus, Controlled, apply_verdicts, held_flags
from kdesched.reactor.run.surge import Chosen, Ended, Surges

log = logging.getLogger("kdesched.reactor.admit")

MAX_ATTEMPTS = 12  # conditional writes lost in a row before the run gives up (429: try again later)
REFUSED = frozenset({400, 401, 403, 404, 422})  # the API server will not take the write: no retry
# how long after its admission an eviction may still be sent: the executor's retry budget
# (kdesched.evictor.execute.RetrySettings.max_total_seconds), enforced on every attempt
DEFAULT_DEADLINE_SECONDS = 60.0
EVICTED = frozenset({"evicted", "already-gone"})


def waiting_workloads(decided: Decided) -> set[tuple[str, str]]:
    """(node, workload) of the pods the run wanted and could not evict only for a passing reason (a
    PDB that allows no disruption while another pod is replaced, no room until a move settles,
    another run's eviction in flight): the run is repeated for them until they move or the move
    times out."""
    return {(r.pod.node_name, workload_key(r.pod)) for r in decided.plan.refusals if r.kind.transient}


@dataclass(frozen=True, slots=True)
class Retention:
    """How long the ledger keeps what the controls read after a move ends."""

    keep_seconds: float  # a cool-down (the longer of the workload's and the node's)
    backoff_max_seconds: float = 3600.0  # the wasted-move back-off's cap

    @classmethod
    def of(cls, s: AdmissionSettings) -> Retention:
        return cls(max(s.cooldown_workload_seconds, s.cooldown_node_seconds), s.backoff_max_seconds)

    @property
    def backoff_keep_seconds(self) -> float:
        """How long a back-off entry is kept after its last wasted move: the cap twice over (the
        back-off itself, then as long again for the next wasted move to count as consecutive)."""
        return 2 * self.backoff_max_seconds


@dataclass(frozen=True, slots=True)
class RunScope:
    """What a run decides over, and the key a paced repeat of it uses (kdesched.reactor.run.continuation)."""

    key: str
    strategies: tuple[str, ...] | None
    nodes: tuple[str, ...] | None
    complete: bool  # the snapshot holds every pod (a run may settle moves on it)
    # a batch of node-scoped repeats decided as one run (Reactor.continue_batch): each pod it holds
    # or admits belongs to its own node's scope, so that node's repeat (or a restart) continues it
    per_node: bool = False
    all_nodes: bool = True  # the snapshot holds every Node (the health brake judges them)

    def key_for(self, pod: Pod) -> str:
        """The scope the ledger records ``pod``'s admission under (what continues its move)."""
        return node_scope(pod.node_name, self.strategies or ()) if self.per_node else self.key


@dataclass(frozen=True, slots=True)
class Decided:
    """A plan whose evictions are admitted in the ledger (or a dry run, which writes nothing)."""

    plan: RunPlan
    admission: RunAdmission  # what the pipeline answered (refusals for metrics, the cool-down repeat)
    before: Ledger  # the ledger the plan was made with (settled)
    admitted_at: float
    written: bool
    settled: Settled
    attempts: int
    admissions: tuple[Admission, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    controlled: Controlled | None = None  # what the controls deferred (the plan above is what they let through)
    # local monotonic time after which no eviction of this run may be sent or still be under way:
    # the ledger entries say the same in server time, so other runs know when it can no longer land
    deadline: float | None = None
    # surge-first moves (kdesched.reactor.run.surge): chosen at this admission, begun after its write
    # (workload -> "" or why not), and ended by its settle
    chosen: Chosen | None = None
    surges_started: Mapping[str, str] = field(default_factory=dict)
    surges_ended: tuple[Ended, ...] = ()

    @property
    def retry_at(self) -> float | None:
        """When the run should re-decide because the controls held evictions back (a window opens,
        the health brake may lift, a budget may have room), epoch seconds; None: no reason."""
        return self.controlled.retry_at if self.controlled is not None else None

    @property
    def admitted_uids(self) -> frozenset[str]:
        return frozenset(a.pod.uid for a in self.admissions if not a.held)


def decide(store: LedgerStore, policy: Policy, snapshot: Snapshot, scope: RunScope, *, safety: Safety,
           dry_run: bool, now: float, pipeline: Pipeline, retention: Retention, stop_when_spent: bool,
           checkpoint: Callable[[], None] = lambda: None, trigger: str = "", origin: str = "",
           clock: Callable[[], float] | None = None, deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
           namespace_labels: Callable[[str], Mapping[str, str] | None] | None = None,
           alerts: AlertsReading | None = None, brake_status: BrakeStatus | None = None,
           surges: Surges | None = None, every_node: Callable[[Snapshot], Snapshot] | None = None) -> Decided:
    """Plan the run against the ledger and admit it (see the module docstring). The admission
    pipeline (:mod:`kdesched.admission.pipeline`) answers every control; this is the loop that
    writes the ledger conditionally and retries. ``trigger`` is the run's label (taints, affinity,
    rebalance, sweep, manual, continuation) that disruption windows may filter on, ``origin`` the
    label of the run a continuation repeats (windows filter on it too);
    ``deadline_seconds``: how long after its admission an eviction may still be sent (the executor
    enforces it: :attr:`Decided.deadline`); ``alerts``: the alert brake's reading; ``surges``: the
    surge-first moves (kdesched.reactor.run.surge), advanced in the settle and chosen after the plan;
    ``every_node``: for a snapshot that holds only a few Nodes (``scope.all_nodes`` False: a node-local
    taint read), ``snapshot`` with every Node (one LIST, :func:`kdesched.reactor.io.loaders.with_every_node`),
    read before the settle advances a surge-first move: the move's eviction waits while the health
    brake holds, and the brake judges every Node, not the few read. Raises
    :class:`~kdesched.reactor.io.lease.LockBusy` when other runs kept winning the write."""
    attempts = 0
    all_nodes = scope.all_nodes  # (every_node may read the rest, once)
    run = uuid.uuid4().hex[:10]  # tags this run's admissions: a write whose answer was lost is recognised
    while True:
        attempts += 1
        # one admission at a time in this process: planning is CPU work under one interpreter
        # lock anyway, and runs of one process (serve's concurrent node runs) then never lose
        # commits to each other; processes still race, optimistically (docs/design.md)
        with store.admitting:
            read = store.read()
            # a run that lost a commit race plans as if its earlier write had not happened: what it
            # admits now replaces it (kdesched.reactor.io.ledger_store)
            current = read.ledger.without_run(run)
            keys = [k for k, mv in current.moves.items() if mv.kept]
            pods_of = pods_by_workload(snapshot, keys) if scope.complete else None
            settled = current.settle(pods_of, now, safety.replacement_timeout_seconds,
                                     snapshot.nodes if scope.complete else None)
            ended: list[Ended] = []
            if surges is not None and not dry_run and settled.ledger.surges:
                # the recovery step: every surge-first move in the ledger is finished or restored from
                # what the cluster shows now, by whichever process settles (a restart, another
                # replica). Its eviction waits while the run's brakes or a closed window would defer one;
                # the health brake judges every Node for that, whatever the run read (one LIST, kept
                # for the rest of the run: its plan and any later attempt see the same Nodes)
                if not all_nodes and every_node is not None:
                    snapshot, all_nodes = every_node(snapshot), True
                held_ctx = RunContext(settled.ledger, snapshot, now, scope.complete, trigger, False,
                                      namespace_labels or (lambda _ns: None), alerts, origin=origin,
                                      all_nodes=all_nodes)
                # (and the eviction of a pod made during a move is asked as one more eviction: the
                # disruption budgets too)
                settled = surges.advance(settled, pods_of, now, ended, hold=deferral(pipeline.begin(held_ctx)),
                                         extra=extra_admission(pipeline, held_ctx))
            elif surges is not None and not dry_run:
                # no move left (ended here or in another process): its memory and held gauges go too
                settled = surges.advance(settled, pods_of, now, ended)
            ledger = settled.ledger
            m.LEDGER_MOVES.set(sum(1 for mv in ledger.moves.values() if mv.active))
            # a workload whose owner changed during a move this settle ended waits for a snapshot
            # taken after the change (kdesched.admission.owner_change)
            changed = frozenset(e.workload for e in ended if e.outcome == OVERRIDDEN)
            admission = pipeline.begin(RunContext(ledger, snapshot, now, scope.complete, trigger, stop_when_spent,
                                                  namespace_labels or (lambda _ns: None), alerts, changed,
                                                  origin=origin, all_nodes=all_nodes))
            if brake_status is not None:
                brake_status.remember(admission.health, now)
            plan = plan_run(policy, snapshot, now=datetime.fromtimestamp(now, UTC), strategies=scope.strategies,
                            nodes=scope.nodes, gate=admission, safety=safety, ledger=ledger)
            controlled = apply_verdicts(plan, admission.finish(plan.evictions, held_flags(plan)))
            plan = controlled.plan
            chosen = (surges.choose(plan, ledger, snapshot, scope.key_for, now, admission.take,
                                    complete=scope.complete)
                      if surges is not None and not dry_run else None)
            if chosen is not None:
                plan = chosen.plan
            admissions = admissions_of(plan.evictions, plan.pacing, scope.key_for, snapshot) + (chosen.admissions if chosen is not None else ())
            notes = ([read.problem] if read.problem else []) + _settle_notes(settled) + list(controlled.notes)
            own = read.ledger.written_by(run)  # an earlier attempt's records to replace
            if dry_run or (not admissions and not settled.changed and not admission.writes and not own):
                if surges is not None and chosen is not None:
                    surges.events.fallbacks(chosen)
                return Decided(plan, admission, ledger, now, False, settled, attempts, (), tuple(notes), controlled,
                               chosen=chosen)
            checkpoint()  # the run may stop here (Lease lost, shutting down): nothing admitted yet
            stamp = max(now, clock()) if clock is not None else now  # admitted now, not when the run began
            started = time.monotonic()  # the executor's deadline counts from here (Decided.deadline)
            new = ledger.admit(admissions, stamp, run, deadline_seconds).prune(
                stamp, retention.keep_seconds, 0, retention.backoff_keep_seconds)
            new = admission.record(new, sum(1 for a in admissions if not a.held), stamp)
            if chosen is not None:
                new = chosen.record(new)
            if _write(store, read, new, run):
                started_surges: Mapping[str, str] = {}
                if surges is not None:
                    surges.evict_claimed(new)  # only now: its claim is in the ledger (one process of all sends it)
                    surges.events.ended(ended)
                    if chosen is not None:
                        started_surges = surges.start(chosen)  # only now: the move is in the ledger first
                        surges.events.fallbacks(chosen)
                if attempts > 1:
                    notes.append(f"disruption ledger: admitted on attempt {attempts} (other runs admitted evictions "
                                 "meanwhile; this plan was made again against them)")
                return Decided(plan, admission, ledger, stamp, True, settled, attempts, admissions, tuple(notes),
                               controlled, started + deadline_seconds, chosen, started_surges, tuple(ended))
        if attempts >= MAX_ATTEMPTS:
            raise LockBusy(f"the disruption ledger changed {attempts} times while this run decided; nothing was "
                           "evicted, try again")
        log.debug("ledger write lost (attempt %d): deciding again against the new ledger", attempts)
        time.sleep(conflict_backoff(attempts))


def conflict_backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before deciding again after losing the commit ``attempt`` times in a row:
    full jitter over 25 ms x 2^(attempt-1), at most 1 s. Runs that lost to each other otherwise read,
    plan and commit again in lockstep and keep colliding (measured with 8 writers:
    bench/bench_admissions.py, docs/benchmarks.md)."""
    return (rng or random).uniform(0.0, min(1.0, 0.025 * 2 ** (attempt - 1)))


def deferral(admission: RunAdmission) -> Callable[[PlannedEviction], Verdict | None]:
    """Would the run's brakes (health, alerts) or a closed disruption window defer ``eviction`` now?
    Asked as for a held eviction, which the budgets do not count: no side effect on the run."""
    def ask(eviction: PlannedEviction) -> Verdict | None:
        verdict = admission.finish([eviction], [True])[0]
        return verdict if verdict is not None and verdict.reason.defers else None
    return ask


def extra_admission(pipeline: Pipeline, ctx: RunContext) -> Callable[[PlannedEviction], Verdict | None]:
    """May a surge-first move evict a pod made during it now (evictor.surge._kept, ``EVICT_EXTRA``)?
    Asked as one more eviction sent now, so the brakes, a closed window and kdesched's disruption
    budgets answer it like any other: a budget refuses it while it is spent. Counted as the move's own
    pod: that one stays in flight in the ledger until the move ends (every budget counts the move as
    one pod down meanwhile), and the extra eviction is that pod's stand-in going (the workload never
    drops below the Ready count it had before the move), so the budgets judge it on the ledger without
    the move's in-flight entry. Counted twice, a budget of one pod at a time would refuse every extra
    eviction for good, and the move, which only that eviction ends, would keep its +1 forever. The
    bucket and the cool-downs are not asked: the move's admission took them. A fresh check per ask:
    no side effect on the run."""
    def ask(eviction: PlannedEviction) -> Verdict | None:
        ledger = ctx.ledger
        key = workload_key(eviction.pod)
        s, mv = ledger.surges.get(key), ledger.moves.get(key)
        if s is not None and mv is not None:
            mv = replace(mv, inflight=tuple(f for f in mv.inflight if f.uid != s.uid))
            ledger = replace(ledger, moves={**ledger.moves, key: mv})
        verdict = pipeline.begin(replace(ctx, ledger=ledger)).finish([eviction], [False])[0]
        return verdict if verdict is not None and (verdict.reason.defers or verdict.reason is Reason.BUDGET) else None
    return ask


def _write(store: LedgerStore, read: LedgerRead, new: Ledger, run: str) -> bool:
    """The conditional write. A failure that may or may not have been carried out (a 5xx, a dropped
    connection) is settled by reading the commit record back: this run's commit is there (the
    write went through, its answer was lost) or it is not (plan again). Retrying is safe: every
    write is conditional on what was read. Only a refusal (403, 404, 422) raises."""
    try:
        return store.write(read, new, run)
    except ApiError as exc:
        if exc.status in REFUSED:
            raise
        log.info("ledger write: %s; reading it back", exc)
        return store.read().committed_by == run


def record_outcomes(store: LedgerStore, decided: Decided, outcomes: Sequence[EvictionOutcome]) -> str:
    """Take back the admissions whose eviction did not happen. Returns "" or a note for the report:
    a failure here is never raised (the evictions happened; their entries err on the safe side)."""
    if not decided.written:
        return ""
    admitted = decided.admitted_uids
    # an eviction that may have landed (answer lost, pod unreadable) is not taken back: it counts
    # until its deadline, then a run that reads every pod settles it (gone: done; there: held again)
    failed = [o.eviction.pod for o in outcomes if o.eviction.pod.uid in admitted and o.result not in EVICTED
              and o.cause != UNCONFIRMED]
    if not failed:
        return ""
    last: Exception | None = None
    for attempt in range(MAX_ATTEMPTS):
        try:
            with store.admitting:
                read = store.read()
                scopes = {a.pod.uid: a.scope for a in decided.admissions if not a.held}
                if store.write(read, read.ledger.record_outcomes(failed, decided.admitted_at, decided.before, scopes)):
                    return ""
        except ApiError as exc:
            # conditional on the resourceVersion read and idempotent (taking back twice is taking back
            # once): any failure but a refusal is retried, or the pods would stay "in flight" for
            # every other run until the replacement timeout
            if exc.status in REFUSED:
                last = exc
                break
            last = exc
            time.sleep(min(0.1 * 2 ** attempt, 2.0))
        except Exception as exc:  # noqa: BLE001 - boundary: the report says it, the run succeeds
            last = exc
            break
    if last is not None:
        return (f"disruption ledger: could not take back {len(failed)} admission(s) that were not evicted ({last}); "
                "they count as in flight until their workload is back at its Ready count or the replacement "
                "timeout passes")
    return (f"disruption ledger: could not take back {len(failed)} admission(s) that were not evicted (the record kept "
            "changing); they count as in flight until settled or timed out")


def _settle_notes(settled: Settled) -> list[str]:
    notes = []
    if settled.timed_out:
        pods = ", ".join(h.pod for _, h in settled.timed_out[:5])
        more = f" and {len(settled.timed_out) - 5} more" if len(settled.timed_out) > 5 else ""
        notes.append(f"paced: gave up {len(settled.timed_out)} held eviction(s) ({pods}{more}): their workload was not "
                     "back at its Ready count within replacementTimeoutSeconds; the next event or sweep re-decides")
    if settled.abandoned:
        notes.append(f"disruption ledger: {len(settled.abandoned)} admission(s) whose pod is still there past their "
                     "deadline (their run stopped between admitting and evicting, or the eviction's answer was lost "
                     "and it did not land) go back to their move's held pods")
    if settled.expired:
        notes.append(f"disruption ledger: {len(settled.expired)} eviction(s) in flight past replacementTimeoutSeconds "
                     "no longer hold their workload's allowance (a replacement that is still not Ready still counts)")
    return notes


def timed_out_by_workload(settled: Settled) -> Mapping[str, list[Held]]:
    out: dict[str, list[Held]] = {}
    for key, h in settled.timed_out:
        out.setdefault(key, []).append(h)
    return out


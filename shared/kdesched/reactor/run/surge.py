"""Surge-first moves in the event path: choosing them at admission, starting them after the ledger
write, and finishing or restoring them whenever a run settles the ledger.

Why here: a surge-first move (:mod:`kdesched.evictor.surge`, docs/safety.md) spans several runs: the
replacement needs seconds to become Ready and the event path never waits inside a run. So the move
is a record in the workload's ledger entry, and every run that settles the ledger
(:func:`kdesched.reactor.run.admit.decide`) advances every move it finds there, from what the cluster
shows now: a paced repeat of the run that began it, the sweep, a restarted process, another
replica. A crash at any point leaves either nothing (before the ledger write), or a record whose
next step any process takes (scale back, or restore the owner).

Three steps, each read, then decided, then carried out. The reading and the writes go through the
kube layer (:mod:`kdesched.kube.owners`); every decision between them is pure
(:mod:`kdesched.evictor.surge_moves`), and this module keeps only the I/O and the process's memory of
what it did:

* :meth:`Surges.advance` (in the settle): read every moving workload's Deployment, ReplicaSet and
  pods, decide each move's next step, carry the steps out (conditional writes only), and return the
  ledger with the moves updated or ended, and their checked moves;
* :meth:`Surges.choose` (after planning): which pods, refused by the allowance or a PDB or whose
  eviction would leave their workload with no Ready pod, are moved surge-first instead (their
  owners read first); those that cannot be say why (the report, the ``NoSurge`` Event,
  ``kdesched_surge_fallbacks_total``) and keep the normal rules;
* :meth:`Surges.start` (after the ledger write): scale the Deployment up by one, on the version the
  choice was made on.

:class:`SurgeEvents` tells operators (``SurgeMoveStarted``, ``SurgeMoveEnded``, ``SurgeMoveHeld``
while a move keeps its +1 and waits, ``NoSurge`` on the owner); the writes a step carries out (the
eviction, the eviction of a pod made during the move, the scale back) are the module's functions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kdesched.engine import RunPlan
from kdesched.evictor.ledger import Admission, Ledger, Settled, workload_key
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.evictor.surge import (
    EXTRA_SPACING_SECONDS,
    MAX_EXTRA_EVICTIONS,
    Action,
    Fallback,
    NoSurge,
    Step,
    Surge,
)
from kdesched.evictor.surge_moves import (
    Candidate,
    Carried,
    Ended,
    Observed,
    Owners,
    ScopeOf,
    candidates,
    choose,
    next_step,
    owners_to_read,
    refunded,
    remembered,
    settle_moves,
    without,
)
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError, Conflict, NotFound, Unavailable
from kdesched.kube.owners import get_deployment, get_replicaset, scale_deployment, workload_pods
from kdesched.model.derived import controller_ref
from kdesched.model.owners import DeploymentInfo
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot
from kdesched.reactor import metrics as m
from kdesched.reactor.run.surge_held import HeldMoves

__all__ = ["Candidate", "Chosen", "Ended", "SurgeEvents", "Surges"]

log = logging.getLogger("kdesched.reactor.surge")

EVENT_INTERVAL_SECONDS = 60.0
LATE_EVICT_SECONDS = 30.0  # a move kept at +1 (past its timeout, or its evicted pod not seen going): how often its eviction is tried again
# a move kept at +1 and waiting this long past its timeout (a rollout that does not end, an eviction held): its
# log line is a warning
LONG_HELD_SECONDS = 3600.0
MAX_REMEMBERED = 10000  # per-process memory of the moves it evicted for (a few hundred bytes each)
EVICT_TIMEOUT_SECONDS = 5.0  # the eviction inside a settle (the process's admission lock is held): one bounded
# attempt, the next run retries


@dataclass(frozen=True, slots=True)
class Chosen:
    """What :meth:`Surges.choose` made of a plan."""

    plan: RunPlan  # without the pods moved surge-first
    admissions: tuple[Admission, ...] = ()  # their in-flight entries, and their workloads' other pods held
    surges: Mapping[str, tuple[Surge, str]] = field(default_factory=dict)  # workload -> (move, resourceVersion)
    candidates: Mapping[str, Candidate] = field(default_factory=dict)
    fallbacks: tuple[tuple[Candidate, NoSurge], ...] = ()

    def record(self, ledger: Ledger) -> Ledger:
        if not self.surges:
            return ledger
        return replace(ledger, surges={**ledger.surges, **{k: s for k, (s, _) in self.surges.items()}})

    def tell_fallbacks(self) -> None:
        """Count and log the pods that keep the normal path, once per run: from the decision the run
        carried out, not from each attempt (a run whose ledger write lost its race decides again)."""
        for c, why in self.fallbacks:
            m.SURGE_FALLBACKS.labels(why.reason.value).inc()
            # (a workload already moving is the ordinary wait of a paced maintenance, repeated every
            # run for each held pod: not worth a line each time)
            (log.debug if why.reason is Fallback.BUSY else log.info)(
                "no surge-first move for %s (%s) [%s]: %s", c.pod.key, c.why, why.reason.value, why.message)

    def refused(self, plan: RunPlan) -> list[tuple[Candidate, Reason]]:
        """The candidates the admission pipeline refused (not deferred) when asked for their move
        (:meth:`~kdesched.admission.pipeline.RunAdmission.take`), with its reason, for
        ``kdesched_evictions_refused_total``: each once, and none that ``plan`` (the run's final plan)
        reports refused already (a pod its PodDisruptionBudget keeps is counted by that refusal)."""
        counted = {r.pod.uid for r in plan.refusals}
        return [(c, n.control) for c, n in self.fallbacks
                if n.control is not None and not n.control.defers and c.pod.uid not in counted]


class Surges:
    """The event path's surge-first moves for one process (``enabled``: ``kdesched.moves.surge``)."""

    def __init__(self, client: KubeClient, *, enabled: bool, timeout_seconds: float) -> None:
        self.client = client
        self.enabled = enabled
        self.timeout_seconds = timeout_seconds
        self.events = SurgeEvents(client)
        self.held = HeldMoves()  # the moves kept at +1 with no time limit: the gauges
        self._lock = threading.Lock()
        # moves this process recorded and could not scale up (ended at once), by the move (its pod's
        # uid and when it began, :func:`_move_of`): a later move of the same pod is another move
        self._not_started: set[tuple[str, float]] = set()
        # moves whose pod this process evicted (by the move, :func:`_move_of`), with when: a ledger write
        # that lost its race (the run decides again on the same snapshot, which still shows the pod) does
        # not make the next attempt evict it again or take it for alive, and that attempt writes it
        self._evicted: dict[tuple[str, float], float] = {}
        # moves this process put back (scaled back and ended), with the step that did: until the move
        # has left the ledger, a settle tried again ends it the same way (its block, its checked move)
        self._restored: dict[tuple[str, float], Step] = {}
        # moves past their timeout kept at +1 (evictor.surge.advance): when this process last tried
        # the eviction, so that a PDB refusing for hours costs one request every LATE_EVICT_SECONDS,
        # not one a second
        self._late: dict[tuple[str, float], float] = {}
        # moves kept at +1 and waiting saying why (a rollout, an eviction held): why, as a short class
        # (Step.told_as), and when this process last said so; a new class is said at once
        self._told: dict[tuple[str, float], tuple[str, float]] = {}
        # evictions of pods made during a move (evictor.surge._kept) this settle claimed in the ledger
        # (workload -> the move's record as claimed, the step): sent by :meth:`evict_claimed` once the
        # run's ledger write went through; spacing and cap are the record's (evictor.surge)
        self._claimed: dict[str, tuple[Surge, Step]] = {}
        # those claims whose eviction was then refused or not sent (workload -> the record as claimed):
        # taken back in the ledger by the next settle (evictor.surge_moves.refunded), so that only pods
        # actually evicted count towards the cap. Lost with the process: the claim then stays counted
        self._refused: dict[str, Surge] = {}

    # -- settle: finish or restore ----------------------------------------------------------------
    def advance(self, settled: Settled, pods_of: Mapping[str, Sequence[Pod]] | None, now: float,
                ended: list[Ended], hold: Callable[[PlannedEviction], Verdict | None] | None = None,
                extra: Callable[[PlannedEviction], Verdict | None] | None = None) -> Settled:
        """Every surge-first move of the ledger, one step on: read what each move needs, decide each
        step (:func:`~kdesched.evictor.surge_moves.next_step`), carry the steps out, and return the
        ledger as they left it (:func:`~kdesched.evictor.surge_moves.settle_moves`); the moves that
        ended are appended to ``ended``. Runs whatever the switch says: a move begun before the switch
        was turned off is still finished or restored. ``hold``: whether the run's brakes or a closed
        window defer an eviction now; the move's eviction then waits (and the move is given up at its
        timeout, the replicas restored). ``extra``: whether the eviction of a pod made during a move may
        go now, asked as one more eviction (the brakes, windows and disruption budgets,
        :func:`kdesched.reactor.run.admit.extra_admission`); ``hold`` answers it when not given."""
        with self._lock:  # what it remembers of moves the ledger no longer has (ended, here or elsewhere)
            moves = {_move_of(s) for s in settled.ledger.surges.values()}
            self._not_started &= moves
            self._restored = {m: st for m, st in self._restored.items() if m in moves}
            self._late = {m: at for m, at in self._late.items() if m in moves}
            self._told = {m: told for m, told in self._told.items() if m in moves}
            self._evicted = {m: at for m, at in self._evicted.items() if m in moves}
            self._claimed = {}  # (a claim of an earlier attempt whose ledger write was lost: never sent)
            self._refused = {k: c for k, c in self._refused.items()
                             if k in settled.ledger.surges and _move_of(settled.ledger.surges[k]) == _move_of(c)}
            marked, restored, refused = set(self._not_started), dict(self._restored), dict(self._refused)
        # (taken back before the steps are decided: a refused claim neither holds the move at the cap nor,
        # once its spacing is over, delays the next try; kept in memory until the move ends, and harmless
        # when already taken back: the record no longer holds that claim)
        settled = refunded(settled, refused)
        if not settled.ledger.surges:
            self.held.settled(moves, {}, now)  # (none left: ended here or elsewhere)
            return settled
        with self._lock:
            evicted = dict(self._evicted)
        observed = _observe(self.client, settled.ledger, pods_of, evicted)
        # a move this process already put back (a give-up whose ledger write then lost its race, the
        # settle tried again on the ledger as it was): it ends as it was decided, its block and
        # checked move kept, not re-judged as replicas put back by someone else
        def step_of(o: Observed) -> Step:
            return self._spaced(o, next_step(o, now, not_started=_move_of(o.surge) in marked, hold=hold, extra=extra), now)

        steps = [(o, self._spaced(o, replace(restored[_move_of(o.surge)], action=Action.END), now))
                 if _move_of(o.surge) in restored else _rejudged(self.client, o, step_of(o), step_of) for o in observed]
        carried = [Carried(o, step, self._act(o.key, o.surge, step, o.deployment, now)) for o, step in steps]
        with self._lock:
            for c in carried:
                if c.done is True:
                    if len(self._evicted) > MAX_REMEMBERED:  # moves another process ended
                        self._evicted.clear()
                    self._evicted[_move_of(c.observed.surge)] = now
                elif c.done is False:
                    self._evicted.pop(_move_of(c.observed.surge), None)
                    if c.step.action == Action.RESTORE and len(self._restored) < MAX_REMEMBERED:
                        self._restored[_move_of(c.observed.surge)] = c.step
        # held: kept at +1 with no time limit (an eviction that went through, or an end, is not)
        self.held.settled(moves, {_move_of(c.observed.surge): (c.step.held if c.done is None else None,
                                                               c.observed.surge.deadline) for c in carried}, now)
        new, gone = settle_moves(settled, carried, now)
        ended.extend(gone)
        # an eviction this process sent whose ledger write lost its race: the record must say so now,
        # whatever this attempt decided (it waits: the pod was evicted a moment ago)
        return remembered(new, {o.key: o.surge.evicted for o in observed
                                if o.surge.evicted and not settled.ledger.surges[o.key].evicted})

    def _spaced(self, o: Observed, step: Step, now: float) -> Step:
        """A move kept at +1 because a scale-back would delete an original pod (past its timeout, or its
        evicted pod not seen going) tries its eviction again every :data:`LATE_EVICT_SECONDS` in this
        process, not at every run (one that evicts a pod made during the move is spaced by its ledger
        record: evictor.surge._kept). A move that waits saying why (kept at +1 while its Deployment rolls out, an
        eviction held) says so as often (:meth:`_tell`)."""
        if step.action == Action.WAIT and step.why:
            self._tell(o, step, now)
        if step.action != Action.EVICT or (now < o.surge.deadline and not o.surge.evicted):
            return step
        move = _move_of(o.surge)
        with self._lock:
            if now - self._late.get(move, float("-inf")) < LATE_EVICT_SECONDS:
                return Step(Action.WAIT, held=step.held)  # (between two tries: still held)
            if len(self._late) < MAX_REMEMBERED:
                self._late[move] = now
        if o.surge.evicted:
            log.info("surge-first move of %s: %s (every %gs until it is seen going)", o.key, step.why, LATE_EVICT_SECONDS)
            return step
        log.info("surge-first move of %s: past its timeout with %s's replacement Ready, kept at %d replicas until its "
                 "eviction is allowed (tried every %gs): a scale-back now could delete an original pod (the "
                 "ReplicaSet ranks one before the extra pod), not through the Eviction API", o.key, o.surge.pod,
                 o.surge.surged, LATE_EVICT_SECONDS)
        return step

    def _tell(self, o: Observed, step: Step, now: float) -> None:
        """A log line every :data:`LATE_EVICT_SECONDS` at most, and a ``SurgeMoveHeld`` Event on the
        Deployment (at most one a minute), while a move keeps the +1 and waits saying why (a rollout,
        evictor.surge._held; an eviction of a pod made during the move held, evictor.surge._kept). Both
        per reason (:attr:`~kdesched.evictor.surge.Step.told_as`): a move held for a new reason (the
        rollout over, the cap of extra evictions reached; a window open, a budget spent) says so at
        once, only the same reason repeated is kept quiet."""
        move, told_as = _move_of(o.surge), step.told_as
        with self._lock:
            last = self._told.get(move)
            if last is not None and last[0] == told_as and now - last[1] < LATE_EVICT_SECONDS:
                return
            if len(self._told) < MAX_REMEMBERED:
                self._told[move] = (told_as, now)
        self.events.held(o.key, o.surge, step.why, told_as, now)

    def _act(self, key: str, s: Surge, step: Step, deployment: DeploymentInfo | None, now: float) -> bool | None:
        """Carry out ``step``: None when a write lost a race (nothing changes in the ledger), True when
        the move goes on (evicted), False when it ended."""
        namespace, _, name = s.pod.partition("/")
        if step.action == Action.WAIT:
            return None
        if step.action == Action.EVICT:
            if not _evict(self.client, namespace, name, s, step, now):
                return None  # refused (a PDB, another writer): the next run looks again
            return True  # the scale-back is the next settle's, once the pod is seen terminating (evictor.surge)
        if step.action == Action.EVICT_EXTRA:
            # claimed in the ledger by this settle (evictor.surge_moves.settle_moves), sent only once that
            # write went through (:meth:`evict_claimed`): of several processes, the one whose write wins
            with self._lock:
                self._claimed[key] = (replace(s, extra=s.extra + 1, extra_at=now), step)
            return None
        if step.action == Action.RESTORE:
            # (every RESTORE with the replicas at the surged value puts them back: kdesched's own value,
            # evictor.surge.advance; never while a rollout is under way)
            if (deployment is not None and deployment.replicas == s.surged
                    and not _scale(self.client, namespace, s.deployment, s.original, deployment.resource_version)):
                return None
            self._forget(s)
            return False
        self._forget(s)  # END
        return False

    def evict_claimed(self, written: Ledger) -> None:
        """After the run's ledger write went through: send the evictions of pods made during a move
        that its settle claimed (:meth:`_act`), each only if ``written`` (the ledger as written) holds
        that very claim."""
        with self._lock:
            claimed, self._claimed = self._claimed, {}
        for key, (s, step) in claimed.items():
            rec = written.surges.get(key)
            if rec is None or rec.uid != s.uid or rec.extra != s.extra or abs(rec.extra_at - s.extra_at) > 0.002:
                continue
            log.info("surge-first move of %s: %s (extra eviction %d of at most %d, at most one every %gs)", key,
                     step.why, s.extra, MAX_EXTRA_EVICTIONS, EXTRA_SPACING_SECONDS)
            if not _evict_extra(self.client, s, step):
                with self._lock:
                    self._refused[key] = s

    def _forget(self, s: Surge) -> None:
        with self._lock:
            self._not_started.discard(_move_of(s))

    # -- admission: which pods move surge-first ---------------------------------------------------
    def choose(self, plan: RunPlan, ledger: Ledger, snapshot: Snapshot, scope: ScopeOf, now: float,
               admit: Callable[[PlannedEviction], Verdict | None] | None = None, *, complete: bool = True) -> Chosen:
        """The pods of ``plan`` to move surge-first (module docstring), with their ledger admissions:
        the candidates (:func:`~kdesched.evictor.surge_moves.candidates`), their owners read, then the
        choice (:func:`~kdesched.evictor.surge_moves.choose`). ``admit``: the admission pipeline for a
        pod no check counted yet (:meth:`kdesched.admission.pipeline.RunAdmission.take`). ``complete``:
        the snapshot holds every pod; else (a node's run that read its node's pods) each candidate
        Deployment's pods are listed first (one LIST by its selector), so that the rollout check and the
        Ready counts (the PDB's, the move's record) see the whole workload, not the node's share."""
        if not self.enabled or plan.pacing is None:
            return Chosen(plan)
        wanted = candidates(plan.evictions, plan.refusals, plan.pacing)
        if not wanted:
            return Chosen(plan)
        owners = _read_owners(self.client, wanted, owners_to_read(wanted, ledger, now))
        listed = None if complete else _list_pods(self.client, owners)
        choice = choose(wanted, owners, ledger, snapshot, now, self.timeout_seconds, admit, listed)
        if not choice.surges:
            return Chosen(plan, candidates=wanted, fallbacks=choice.fallbacks)
        rest = without(plan.evictions, plan.refusals, plan.pacing, wanted, choice, scope)
        new = replace(plan, evictions=rest.evictions, refusals=rest.refusals,
                      pacing=replace(plan.pacing, steps=rest.steps))
        return Chosen(new, rest.admissions, dict(choice.surges), dict(wanted), choice.fallbacks)

    # -- after the ledger write: begin ------------------------------------------------------------
    def start(self, chosen: Chosen) -> dict[str, str]:
        """Scale each chosen pod's Deployment up by one, on the version the choice was read at. Returns
        workload -> "" (begun) or why it did not begin (this process's next settle ends the move)."""
        out: dict[str, str] = {}
        for key, (s, version) in chosen.surges.items():
            namespace = s.pod.partition("/")[0]
            try:
                scale_deployment(self.client, namespace, s.deployment, s.surged, version)
            except ApiError as exc:
                if not _certainly_unapplied(exc):
                    # the write may have landed (a timeout, a reset, a 5xx after etcd wrote): the move
                    # stays as recorded and the next settle judges it from the replicas it finds (put
                    # back if they are kdesched's, ended after the start grace if not)
                    out[key] = f"the scale-up's answer was lost ({exc}): the next run sees whether it landed"
                    log.warning("surge-first move of %s (%s): %s", key, s.pod, out[key])
                    continue
                why = ("its Deployment changed after it was read (an HPA, a rollout, a GitOps sync)"
                       if isinstance(exc, Conflict) else str(exc))
                out[key] = why
                with self._lock:
                    self._not_started.add(_move_of(s))
                m.SURGE_MOVES.labels("not-started").inc()
                log.info("surge-first move of %s (%s) not begun: %s", key, s.pod, why)
                continue
            out[key] = ""
            self._forget(s)
            m.SURGE_MOVES.labels("started").inc()
            self.events.post(namespace, s.deployment, "SurgeMoveStarted", f"moving {s.pod} off node {s.node} "
                             f"surge-first: replicas {s.original} -> {s.surged} until the new pod is Ready on another "
                             f"node (at most {self.timeout_seconds:g}s), then back to {s.original}", once=False)
            log.info("surge-first move of %s (%s): replicas %d -> %d", key, s.pod, s.original, s.surged)
        return out


class SurgeEvents:
    """The Events of surge-first moves, on the workload's owner: begun, ended, why a move is held and
    why a pod could not move surge-first (those two at most one per object, Event reason and why (the
    ``tag``: the held class, the fallback and its control) a minute per process: a new why is posted
    at once, the same one repeated is not)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._events: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def ended(self, ended: Sequence[Ended]) -> None:
        """Metrics, a ``SurgeMoveEnded`` Event on the Deployment and a log line for each move that
        ended in a settle whose ledger write went through (so each is counted once cluster-wide)."""
        for e in ended:
            s = e.surge
            m.SURGE_MOVES.labels(e.outcome).inc()
            self.post(e.workload.split("/", 2)[1], s.deployment, "SurgeMoveEnded",
                      f"surge-first move of {s.pod} off node {s.node} {e.outcome}: {e.why}", once=False)
            log.info("surge-first move of %s (%s) %s: %s", e.workload, s.pod, e.outcome, e.why)

    def fallbacks(self, chosen: Chosen) -> None:
        """A ``NoSurge`` Event on the workload's owner for each pod that could not move surge-first
        (at most one per workload and reason a minute per process)."""
        for c, why in chosen.fallbacks:
            if why.reason in (Fallback.BUSY, Fallback.BARE_POD):
                continue  # nothing an operator can act on
            ref = controller_ref(c.pod)
            key = workload_key(c.pod)
            kind, namespace, name = key.split("/", 2)
            if kind == "Pod" or ref is None:
                continue
            # (per reason, and for held-by-controls per control: a window closed, then a budget spent, are two)
            tag = why.reason.value + (f"/{why.control.value}" if why.control is not None else "")
            self.post(namespace, name, "NoSurge", f"{c.pod.key} ({c.why}) cannot be moved surge-first: "
                      f"{why.message}; the normal rules apply", kind=kind, tag=tag)

    def held(self, key: str, s: Surge, why: str, tag: str, now: float) -> None:
        """A move kept at +1 says why: a log line (a warning once :data:`LONG_HELD_SECONDS` have passed
        since its timeout: no time limit keeps the +1 of a move held this way, an operator may act) and a
        ``SurgeMoveHeld`` Event on the Deployment, de-duplicated per ``tag`` (why, as a short class)."""
        past = now - s.deadline
        if past >= LONG_HELD_SECONDS:
            log.warning("surge-first move of %s: still kept at %d replicas %.0fs after it began (%.0fs past its "
                        "timeout): %s", key, s.surged, now - s.started, past, why)
        else:
            log.info("surge-first move of %s: %s", key, why)
        self.post(key.split("/", 2)[1], s.deployment, "SurgeMoveHeld",
                  f"surge-first move of {s.pod} off node {s.node}: {why}", tag=tag)

    def post(self, namespace: str, name: str, reason: str, note: str, *, kind: str = "Deployment",
             once: bool = True, tag: str = "") -> None:
        if once:
            k = (f"{kind}/{namespace}/{name}", f"{reason}/{tag}")
            t = time.monotonic()
            with self._lock:
                if t - self._events.get(k, -1e9) < EVENT_INTERVAL_SECONDS:
                    return
                self._events[k] = t
                if len(self._events) > 10000:
                    self._events.clear()
        api = "apps/v1" if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet") else "batch/v1"
        self.client.create_event(namespace=namespace, name=name, reason=reason, note=note, kind=kind, api_version=api)


def _observe(client: KubeClient, ledger: Ledger, pods_of: Mapping[str, Sequence[Pod]] | None,
             evicted: Mapping[tuple[str, float], float]) -> list[Observed]:
    """Each move's owners and pods as the cluster shows them now (a move whose owner cannot be read
    is left for the next run). ``evicted``: the eviction times this process remembers (by the move),
    which fill in a record that a ledger write which lost its race did not keep: the next attempt
    neither evicts the pod again nor takes it for alive, and writes it
    (:func:`~kdesched.evictor.surge_moves.remembered`)."""
    out: list[Observed] = []
    for key, s in ledger.surges.items():
        namespace = key.split("/", 2)[1]
        if not s.evicted and _move_of(s) in evicted:
            s = replace(s, evicted=evicted[_move_of(s)])
        try:
            deployment = get_deployment(client, namespace, s.deployment)
            replicaset = get_replicaset(client, namespace, s.replicaset) if deployment else None
        except ApiError as exc:
            log.warning("surge-first move of %s: cannot read its owner (%s); trying again at the next run", key, exc)
            continue
        pods = pods_of.get(key) if pods_of is not None else None
        if pods is None and deployment is not None:
            # a run that read one node's pods: the move is judged on the workload's own pods
            try:
                pods = workload_pods(client, deployment)
            except ApiError as exc:
                log.info("surge-first move of %s: cannot list its pods (%s)", key, exc)
        out.append(Observed(key, s, deployment, replicaset, pods))
    return out


def _rejudged(client: KubeClient, o: Observed, step: Step, step_of: Callable[[Observed], Step]) -> tuple[Observed, Step]:
    """A scale-back (a RESTORE with the replicas still kdesched's) is decided again on the cluster as it
    is now, before it is carried out: the marked pod read live (:func:`_going`) and the workload's pods
    listed (:func:`~kdesched.kube.owners.workload_pods`). The run's view may lag: the 30 s path
    (evictor.surge._not_seen_going) runs only because it still shows the evicted pod alive, and a view
    older than the ReplicaSet's new pod hides it Ready; scaled back on such a view, the ReplicaSet may
    delete a Ready original, past the PDB, brakes and windows. Unreadable: the move waits."""
    if step.action != Action.RESTORE or o.deployment is None or o.deployment.replicas != o.surge.surged:
        return o, step
    namespace, _, name = o.surge.pod.partition("/")
    try:
        going = _going(client, namespace, name, o.surge.uid)
        pods = workload_pods(client, o.deployment)
    except ApiError as exc:
        log.info("surge-first move of %s: cannot read its pods before the scale-back (%s); trying again at the "
                 "next run", o.key, exc)
        return o, Step(Action.WAIT)
    if pods is None:  # (a selector a LIST cannot express: the run's complete snapshot is all there is)
        return o, step
    # (read gone or terminating: a pod LIST served from a cache may still show it alive)
    fresh = replace(o, pods=[p for p in pods if not (going and p.uid == o.surge.uid)])
    return fresh, step_of(fresh)


def _list_pods(client: KubeClient, owners: Mapping[str, Owners]) -> dict[str, Sequence[Pod] | None]:
    """Each read Deployment's pods (:func:`~kdesched.kube.owners.workload_pods`); None where they
    cannot be listed (a selector that is not a plain label match, a failed LIST)."""
    out: dict[str, Sequence[Pod] | None] = {}
    for key, (deployment, _) in owners.items():
        if deployment is None:
            continue
        try:
            out[key] = workload_pods(client, deployment)
        except ApiError as exc:
            log.info("surge-first move of %s: cannot list its pods: %s", key, exc)
            out[key] = None
    return out


def _read_owners(client: KubeClient, wanted: Mapping[str, Candidate], keys: Sequence[str]) -> dict[str, Owners]:
    """The Deployment and ReplicaSet of each workload of ``keys`` (None where gone); a workload
    whose owners cannot be read is left out (it falls back to the normal rules)."""
    out: dict[str, Owners] = {}
    for key in keys:
        pod = wanted[key].pod
        ref = controller_ref(pod)
        try:
            deployment = get_deployment(client, pod.namespace, key.split("/", 2)[2])
            out[key] = (deployment, get_replicaset(client, pod.namespace, ref.name) if ref else None)
        except ApiError as exc:
            log.info("surge-first move of %s: cannot read its owner: %s", key, exc)
    return out


def _going(client: KubeClient, namespace: str, name: str, uid: str) -> bool:
    """Is the pod gone or already terminating, read now? A run's snapshot (serve's watch cache) may
    not show it yet, and an eviction of a terminating pod is accepted again (the pool storm once saw a
    pod evicted by a taint run, then again by its surge-first move 4 s later)."""
    # a LIST of the one name: the shipped RBAC grants list and watch on pods, never get
    found = client.list_raw("Pod", namespace=namespace, field_selector=f"metadata.name={name}").items
    current = found[0] if found else None
    if current is None or current.get("metadata", {}).get("uid") != uid:
        return True  # gone already (or a new pod of the name)
    if current.get("metadata", {}).get("deletionTimestamp"):
        log.info("surge-first move: %s/%s is already terminating; not evicting it again", namespace, name)
        return True
    return False


def _evict_extra(client: KubeClient, s: Surge, step: Step) -> bool:
    """Evict ``step.target``, a pod made during the move, so that the scale-back removes the pod the
    ReplicaSet makes for it (evictor.surge._kept): the Eviction API (its PDB checked), preconditioned on
    its uid, read first; one attempt, bounded. Claimed in the ledger before (:meth:`Surges.evict_claimed`).
    Returns whether it may have been carried out: False when certainly not (refused: a PDB's 429, a
    webhook, a 403; or not sent: the pod gone or going already, its read failed), and the claim is then
    taken back (not counted towards the move's cap); True when evicted, or when its answer was lost
    (a timeout, a 5xx: it may have landed, and counts)."""
    p = step.target
    if p is None:
        return False
    try:
        if _going(client, p.namespace, p.name, p.uid):
            return False
    except ApiError as exc:
        log.info("surge-first move of %s: cannot read its extra pod %s before evicting it: %s; tried again later",
                 s.pod, p.key, exc)
        return False
    try:
        client.evict_pod(p.namespace, p.name, uid=p.uid, grace_period_seconds=None, annotations={},
                         timeout=EVICT_TIMEOUT_SECONDS)
    except NotFound:
        return False
    except ApiError as exc:
        log.info("surge-first move of %s: evicting its extra pod %s: %s; tried again later", s.pod, p.key, exc)
        return not _certainly_unapplied(exc)
    client.create_event(namespace=p.namespace, name=p.name, uid=p.uid, reason="Descheduled",
                        note=f"surge-first move of {s.pod} ({s.strategy}): this pod, made during the move, evicted so "
                        f"that Deployment {s.deployment} goes back to {s.original} replicas without deleting a pod "
                        "from before the move")
    return True


def _evict(client: KubeClient, namespace: str, name: str, s: Surge, step: Step, now: float) -> bool:
    """The Eviction API (the PDB, now counting the Ready replacement, is checked by the API server),
    preconditioned on the pod's uid; one attempt, bounded (the next run tries again). The pod is
    read first (:func:`_going`): one gone or going is not evicted again."""
    try:
        if _going(client, namespace, name, s.uid):
            return True  # gone or going: the move's purpose is met; the next settle sees it and scales back
        client.evict_pod(namespace, name, uid=s.uid, grace_period_seconds=None, annotations={},
                         timeout=EVICT_TIMEOUT_SECONDS)
    except NotFound:
        return True  # gone already: the move's purpose is met
    except ApiError as exc:
        log.info("surge-first move: evicting %s/%s after its replacement was Ready: %s; trying again at the next "
                 "run", namespace, name, exc)
        return False
    log.info("surge-first move: evicted %s/%s (%s); Deployment %s goes back to %d replicas once it is seen "
             "terminating", namespace, name, step.why, s.deployment, s.original)
    # (an eviction tried again, the pod not seen going after the first was accepted, says so)
    why = (f"evicted again, still not seen going {now - s.evicted:.0f}s after its first eviction was accepted"
           if s.evicted else f"evicted once {step.why}")
    client.create_event(namespace=namespace, name=name, uid=s.uid, reason="Descheduled",
                        note=f"surge-first move ({s.strategy}): {why}; Deployment {s.deployment} goes back to "
                        f"{s.original} replicas once it is seen terminating")
    return True


def _move_of(s: Surge) -> tuple[str, float]:
    """A move's identity: its pod and when it began (as the ledger keeps it, to the millisecond)."""
    return s.uid, round(s.started, 3)


def _certainly_unapplied(exc: ApiError) -> bool:
    """Was a write that failed with ``exc`` certainly not carried out? A 4xx (a 409 conflict, a 403, a
    422) is the API server refusing it; a connection never made sent nothing. A timeout, a reset
    after the request went out, or a 5xx may come after the write landed."""
    if isinstance(exc, Unavailable):
        return not exc.maybe_sent
    return exc.status is not None and 400 <= exc.status < 500


def _scale(client: KubeClient, namespace: str, name: str, replicas: int, version: str) -> bool:
    try:
        scale_deployment(client, namespace, name, replicas, version)
        return True
    except (Conflict, NotFound):
        return False
    except ApiError as exc:
        log.warning("surge-first move: scaling Deployment %s/%s to %d failed (%s); trying again at the next run",
                    namespace, name, replicas, exc)
        return False

"""Surge-first moves in the event path: choosing them at admission, starting them after the ledger
write, and finishing or restoring them whenever a run settles the ledger.

Why here: a surge-first move (:mod:`kdesched.evictor.surge`, docs/safety.md) spans several runs: the
replacement needs seconds to become Ready and the event path never waits inside a run. So the move
is a record in the workload's ledger entry, and every run that settles the ledger
(:func:`kdesched.reactor.run.admit.decide`) advances every move it finds there, from what the cluster
shows now: a paced repeat of the run that began it, the sweep, a restarted process, another
replica. A crash at any point leaves either nothing (before the ledger write), or a record whose
next step any process takes (scale back, or restore the owner).

Three steps, all through the kube layer (:mod:`kdesched.kube.owners`):

* :meth:`Surges.advance` (in the settle): read each moving workload's Deployment and ReplicaSet,
  ask :func:`~kdesched.evictor.surge.advance` what to do, do it (conditional writes only), and
  return the ledger with the move updated or ended, and its checked move;
* :meth:`Surges.choose` (after planning): which pods, refused by the allowance or a PDB or whose
  eviction would leave their workload with no Ready pod, are moved surge-first instead; those that
  cannot be say why (the report, the ``NoSurge`` Event, ``kdesched_surge_fallbacks_total``) and keep
  the normal rules;
* :meth:`Surges.start` (after the ledger write): scale the Deployment up by one, on the version the
  choice was made on.

:class:`SurgeEvents` tells operators (``SurgeMoveStarted``, ``SurgeMoveEnded``, ``NoSurge`` on the
owner); the writes a step carries out (the eviction, the scale back) are the module's functions.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kdesched.engine import RunPlan
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
from kdesched.evictor.pacing import PacingPlan
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
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError, Conflict, NotFound
from kdesched.kube.owners import get_deployment, get_replicaset, scale_deployment, workload_pods
from kdesched.model.derived import controller_ref, pod_ready
from kdesched.model.owners import DeploymentInfo, ReplicaSetInfo
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot
from kdesched.reactor import metrics as m

log = logging.getLogger("kdesched.reactor.surge")

EVENT_INTERVAL_SECONDS = 60.0
MAX_REMEMBERED = 10000  # per-process memory of the moves it evicted for (a few hundred bytes each)
EVICT_TIMEOUT_SECONDS = 5.0  # the eviction inside a settle (the process's admission lock is held): one bounded
# attempt, the next run retries


@dataclass(frozen=True, slots=True)
class Candidate:
    pod: Pod
    strategy: str
    profile: str
    reason: str  # the strategy's reason for moving it
    why: str  # why surge-first: "single replica", the pacing or PDB refusal
    admitted: bool = False  # the admission pipeline's plan checks (budgets, windows) already let it through


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


class Surges:
    """The event path's surge-first moves for one process (``enabled``: ``kdesched.moves.surge``)."""

    def __init__(self, client: KubeClient, *, enabled: bool, timeout_seconds: float) -> None:
        self.client = client
        self.enabled = enabled
        self.timeout_seconds = timeout_seconds
        self.events = SurgeEvents(client)
        self._lock = threading.Lock()
        self._not_started: set[str] = set()  # moves this process recorded and could not scale up: ended at once
        # moves whose pod this process evicted, with when: a ledger write that lost its
        # race (the run decides again on the same snapshot, which still shows the pod) does not make
        # the next attempt evict it again or take it for alive
        self._evicted: dict[str, float] = {}

    # -- settle: finish or restore ----------------------------------------------------------------
    def advance(self, settled: Settled, pods_of: Mapping[str, Sequence[Pod]] | None, now: float,
                ended: list[Ended], hold: Callable[[PlannedEviction], Verdict | None] | None = None) -> Settled:
        """Every surge-first move of the ledger, one step on. Runs whatever the switch says: a move
        begun before the switch was turned off is still finished or restored. ``hold``: whether the
        run's brakes or a closed window defer an eviction now; the move's eviction then waits (and
        the move is given up at its timeout, the replicas restored)."""
        ledger = settled.ledger
        if not ledger.surges:
            return settled
        surges = dict(ledger.surges)
        blocks = dict(ledger.surge_blocks)
        moves = dict(ledger.moves)
        workloads, nodes, node_by = dict(ledger.workloads), dict(ledger.nodes), dict(ledger.node_strategies)
        checked: list[CheckedMove] = []
        changed = False
        for key, s in ledger.surges.items():
            namespace = key.split("/", 2)[1]
            if not s.evicted and s.uid in self._evicted:
                s = replace(s, evicted=self._evicted[s.uid])
            try:
                deployment = get_deployment(self.client, namespace, s.deployment)
                replicaset = get_replicaset(self.client, namespace, s.replicaset) if deployment else None
            except ApiError as exc:
                log.warning("surge-first move of %s: cannot read its owner (%s); trying again at the next run", key, exc)
                continue
            pods = pods_of.get(key) if pods_of is not None else None
            if pods is None and deployment is not None:
                # a run that read one node's pods: the move is judged on the workload's own pods
                try:
                    pods = workload_pods(self.client, deployment)
                except ApiError as exc:
                    log.info("surge-first move of %s: cannot list its pods (%s)", key, exc)
            step = advance(s, deployment, replicaset, pods, now)
            if s.uid in self._not_started and step.action == Action.WAIT:
                step = Step(Action.END, "its Deployment changed before the scale-up", OVERRIDDEN)
            if step.action == Action.EVICT and hold is not None:
                marked = next((p for p in pods or () if p.uid == s.uid), None)
                verdict = hold(PlannedEviction(marked, s.node, s.strategy, "", "surge-first")) if marked else None
                if verdict is not None:
                    log.info("surge-first move of %s: its eviction waits (%s)", key, verdict.message)
                    step = (Step(Action.RESTORE, f"its eviction was deferred past the timeout ({verdict.message})",
                                 OVERRIDDEN) if now >= s.deadline else Step(Action.WAIT))
            done = self._act(key, s, step, deployment)
            if done is None:
                continue  # not carried out (a conflict): the next run decides again
            changed = True
            if done is True:
                surges[key] = replace(s, evicted=now)
                with self._lock:
                    if len(self._evicted) > MAX_REMEMBERED:  # moves another process ended
                        self._evicted.clear()
                    self._evicted[s.uid] = now
                continue
            del surges[key]
            with self._lock:
                self._evicted.pop(s.uid, None)
            if step.block:
                blocks[key] = (now + BLOCK_SECONDS, step.why)
            mv = moves.get(key)
            entry = next((f for f in mv.inflight if f.uid == s.uid), None) if mv is not None else None
            if entry is not None and step.outcome != DONE:
                # nothing was evicted: the cool-downs its admission started are taken back (as for an
                # eviction that did not happen), so the pod keeps the normal rules at once
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
            checked.append(_checked(key, s, step, now))
            ended.append(Ended(key, s, step.outcome, step.why))
        if not changed:
            return settled
        new = replace(ledger, surges=surges, surge_blocks=blocks, moves=moves, workloads=workloads, nodes=nodes,
                      node_strategies=node_by)
        return replace(settled, ledger=new, checked=(*settled.checked, *checked), surges_changed=True)

    def _act(self, key: str, s: Surge, step: Step, deployment: DeploymentInfo | None) -> bool | None:
        """Carry out ``step``: None when a write lost a race (nothing changes in the ledger), True when
        the move goes on (evicted), False when it ended."""
        namespace, _, name = s.pod.partition("/")
        if step.action == Action.WAIT:
            return None
        if step.action == Action.EVICT:
            if not _evict(self.client, namespace, name, s, step):
                return None  # refused (a PDB, another writer): the next run looks again
            return True  # the scale-back is the next settle's, once the pod is seen terminating (evictor.surge)
        if step.action == Action.RESTORE:
            # (every RESTORE with the replicas at the surged value puts them back: kdesched's own value,
            # or a rollout begun on top of it, evicted.advance)
            if (deployment is not None and deployment.replicas == s.surged
                    and not _scale(self.client, namespace, s.deployment, s.original, deployment.resource_version)):
                return None
            self._not_started.discard(s.uid)
            return False
        self._not_started.discard(s.uid)  # END
        return False

    # -- admission: which pods move surge-first ---------------------------------------------------
    def choose(self, plan: RunPlan, ledger: Ledger, snapshot: Snapshot, scope: str | Callable[[Pod], str], now: float,
               admit: Callable[[PlannedEviction], Verdict | None] | None = None) -> Chosen:
        """The pods of ``plan`` to move surge-first (module docstring), with their ledger admissions.
        ``admit``: the admission pipeline's plan checks (disruption budgets, windows) for a pod they
        have not judged yet (held for a later wave, kept by a PDB): the move is in flight like an
        eviction, so it must fit the budgets as one."""
        if not self.enabled or plan.pacing is None:
            return Chosen(plan)
        candidates = _candidates(plan, plan.pacing)
        if not candidates:
            return Chosen(plan)
        index = _pods_by_key(snapshot, candidates)
        surges: dict[str, tuple[Surge, str]] = {}
        fallbacks: list[tuple[Candidate, NoSurge]] = []
        for key, c in candidates.items():
            kind = key.split("/", 1)[0]
            siblings = index.get(key, [])
            refusal = self._busy(key, ledger, now)
            deployment: DeploymentInfo | None = None
            replicaset: ReplicaSetInfo | None = None
            if refusal is None and kind == "Deployment":
                ref = controller_ref(c.pod)
                try:
                    deployment = get_deployment(self.client, c.pod.namespace, key.split("/", 2)[2])
                    replicaset = get_replicaset(self.client, c.pod.namespace, ref.name) if ref else None
                except ApiError as exc:
                    log.info("surge-first move of %s: cannot read its owner: %s", key, exc)
            if refusal is None:
                refusal = surge_refusal(c.pod, kind, deployment, replicaset, siblings, snapshot.pdbs_for(c.pod))
            if refusal is None and not c.admitted and admit is not None:
                verdict = admit(PlannedEviction(c.pod, c.pod.node_name, c.strategy, c.profile, c.reason))
                if verdict is not None:
                    refusal = NoSurge(Fallback.CONTROLS, verdict.message)
            if refusal is not None:
                fallbacks.append((c, refusal))
                continue
            assert deployment is not None and replicaset is not None
            surges[key] = (Surge(c.pod.uid, c.pod.key, c.pod.node_name, deployment.name, replicaset.name,
                                 deployment.replicas, deployment.replicas + 1, now, now + self.timeout_seconds,
                                 c.strategy, deployment.generation + 1), deployment.resource_version)
        for c, why in fallbacks:
            m.SURGE_FALLBACKS.labels(why.reason.value).inc()
            # (a workload already moving is the ordinary wait of a paced maintenance, repeated every
            # run for each held pod: not worth a line each time)
            (log.debug if why.reason is Fallback.BUSY else log.info)(
                "no surge-first move for %s (%s) [%s]: %s", c.pod.key, c.why, why.reason.value, why.message)
        if not surges:
            return Chosen(plan, candidates=candidates, fallbacks=tuple(fallbacks))
        return _without(plan, surges, candidates, scope, tuple(fallbacks), index)

    def _busy(self, key: str, ledger: Ledger, now: float) -> NoSurge | None:
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
                why = ("its Deployment changed after it was read (an HPA, a rollout, a GitOps sync)"
                       if isinstance(exc, Conflict) else str(exc))
                out[key] = why
                self._not_started.add(s.uid)
                m.SURGE_MOVES.labels("not-started").inc()
                log.info("surge-first move of %s (%s) not begun: %s", key, s.pod, why)
                continue
            out[key] = ""
            m.SURGE_MOVES.labels("started").inc()
            self.events.post(namespace, s.deployment, "SurgeMoveStarted", f"moving {s.pod} off node {s.node} "
                             f"surge-first: replicas {s.original} -> {s.surged} until the new pod is Ready on another "
                             f"node (at most {self.timeout_seconds:g}s), then back to {s.original}", once=False)
            log.info("surge-first move of %s (%s): replicas %d -> %d", key, s.pod, s.original, s.surged)
        return out


class SurgeEvents:
    """The Events of surge-first moves, on the workload's owner: begun, ended, and why a pod could
    not move surge-first (those at most one per object and reason a minute per process)."""

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
            self.post(namespace, name, "NoSurge", f"{c.pod.key} ({c.why}) cannot be moved surge-first: "
                      f"{why.message}; the normal rules apply", kind=kind, tag=why.reason.value)

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


def _evict(client: KubeClient, namespace: str, name: str, s: Surge, step: Step) -> bool:
    """The Eviction API (the PDB, now counting the Ready replacement, is checked by the API server),
    preconditioned on the pod's uid; one attempt, bounded (the next run tries again). The pod is
    read first: a run's snapshot (serve's watch cache) may not show yet that it is already going,
    and an eviction of a terminating pod is accepted again (the pool storm once saw a pod evicted by
    a taint run, then again by its surge-first move 4 s later)."""
    try:
        # a LIST of the one name: the shipped RBAC grants list and watch on pods, never get
        found = client.list_raw("Pod", namespace=namespace, field_selector=f"metadata.name={name}").items
        current = found[0] if found else None
        if current is None or current.get("metadata", {}).get("uid") != s.uid:
            return True  # gone already (or a new pod of the name): the move's purpose is met
        if current.get("metadata", {}).get("deletionTimestamp"):
            log.info("surge-first move: %s/%s is already terminating; not evicting it again", namespace, name)
            return True  # going: the next settle sees it terminating and scales back
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
    client.create_event(namespace=namespace, name=name, uid=s.uid, reason="Descheduled",
                        note=f"surge-first move ({s.strategy}): evicted once {step.why}; Deployment "
                        f"{s.deployment} goes back to {s.original} replicas")
    return True


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

def _candidates(plan: RunPlan, pacing: PacingPlan) -> dict[str, Candidate]:
    """One pod per workload that should move surge-first: a wave-0 eviction that would leave its
    workload with no Ready pod; a pod held for a later wave (the allowance leaves no room); a pod a
    PodDisruptionBudget keeps (it allows no disruption). The first such pod of each workload."""
    out: dict[str, Candidate] = {}
    wave0: dict[str, int] = {}
    for e, step in zip(plan.evictions, pacing.steps, strict=True):
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
    for r in plan.refusals:
        if r.kind == Reason.PDB and r.pod.owner_refs:
            key = workload_key(r.pod)
            if key not in out and key not in wave0:
                out[key] = Candidate(r.pod, r.strategy, r.profile, r.reason, r.reason)
    return out


def _pods_by_key(snapshot: Snapshot, candidates: Mapping[str, Candidate]) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = {k: [] for k in candidates}
    for p in snapshot.pods:
        if p.owner_refs:
            k = workload_key(p)
            if k in out:
                out[k].append(p)
    return out


def _without(plan: RunPlan, surges: Mapping[str, tuple[Surge, str]], candidates: Mapping[str, Candidate],
             scope: str | Callable[[Pod], str], fallbacks: tuple[tuple[Candidate, NoSurge], ...],
             index: Mapping[str, Sequence[Pod]]) -> Chosen:
    """The plan without the pods moved surge-first, and their admissions: the pod in flight (its
    workload's allowance and every budget count it until the move ends), its workload's other
    planned or PDB-refused pods held, so the move goes on with them after it."""
    pacing = plan.pacing
    assert pacing is not None
    scope_of = scope if callable(scope) else (lambda _pod, key=scope: key)  # a run's key, or each pod's
    uids = {s.uid for s, _ in surges.values()}
    keep = [i for i, e in enumerate(plan.evictions) if e.pod.uid not in uids]
    admissions: list[Admission] = []
    for key in surges:
        c = candidates[key]
        live = [p for p in index.get(key, ()) if not p.terminating and not p.terminal]
        admissions.append(Admission(c.pod, c.strategy, False, scope_of(c.pod), "", len(live),
                                    sum(1 for p in live if pod_ready(p))))
    held = [Admission(r.pod, r.strategy, True, scope_of(r.pod)) for r in plan.refusals
            if r.kind == Reason.PDB and r.pod.uid not in uids and workload_key(r.pod) in surges]
    admissions += held
    held_uids = {a.pod.uid for a in held}
    refusals: list[Refusal] = []
    for r in plan.refusals:
        if r.pod.uid in uids or r.pod.uid in held_uids:
            continue
        refusals.append(r)
    new_pacing = replace(pacing, steps=tuple(pacing.steps[i] for i in keep))
    new = replace(plan, evictions=tuple(plan.evictions[i] for i in keep), refusals=tuple(refusals), pacing=new_pacing)
    return Chosen(new, tuple(admissions), dict(surges), dict(candidates), fallbacks)


def _same(recorded: float | None, at: float) -> bool:
    """Is ``recorded`` the admission time ``at`` (the record keeps milliseconds)?"""
    return recorded is not None and abs(recorded - at) < 0.002


def _checked(key: str, s: Surge, step: Step, now: float) -> CheckedMove:
    """The surge-first move as a checked move (docs/safety.md, "Checked moves")."""
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

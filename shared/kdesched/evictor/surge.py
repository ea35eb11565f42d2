"""Surge-first moves: the replacement is made before the pod goes, so a move costs no availability.

Why: an eviction is downtime for a workload with one replica (descheduler #1558, #786, #271,
#1805, PR #1841; Karpenter #1674 / PR #1685), and a workload whose PodDisruptionBudget allows no
disruption (``minAvailable`` equal to its replicas) is never moved at all: a maintenance taint
leaves it on the node forever. With the stock controllers a move can cost nothing:

1. the pod's **Deployment** is scaled up by one through its scale subresource (not its ReplicaSet:
   the Deployment controller would scale the ReplicaSet straight back; scaling the Deployment is a
   "scaling event" that only resizes its current ReplicaSet: no new ReplicaSet, template unchanged);
2. once the new pod is Ready on another node, the pod that must go is **evicted** (the Eviction
   API: its PodDisruptionBudget, which now counts the new pod, is checked by the API server);
3. once the evicted pod is seen terminating, the Deployment is scaled back. The ReplicaSet no
   longer counts it (FilterActivePods) and has meanwhile made a pod for it (the replicas were still
   one more); that pod, not Ready yet, is the first the ReplicaSet removes. Not at the moment of the
   eviction: a ReplicaSet that has not seen the eviction yet counts the evicted pod as active and
   removes one of its Ready siblings (seen on the real control plane: 3 pods of a namespace down at
   once where its budget allowed 2). Nor before the ReplicaSet's pod for it is seen (proof that it saw
   the eviction), at most :data:`SCALE_DOWN_GRACE_SECONDS` after it (:func:`_unseen`). Not once the pod made for it is Ready either (a late settle):
   the ReplicaSet then chooses among Ready pods and may delete an original one; the scale-back is
   checked (:func:`_at_risk`), and where it would, the newest pod made during the move is evicted
   first (:func:`_kept`). A pod still not seen going :data:`SCALE_DOWN_GRACE_SECONDS` after
   its eviction was accepted (a lagging snapshot, an eviction that did not take) is scaled back over
   only when the ReplicaSet certainly deletes a pod made during the move
   (:mod:`kdesched.evictor.scale_down`); else the +1 is kept and the eviction tried again.

Why not the ``controller.kubernetes.io/pod-deletion-cost`` way (mark the pod, scale up, scale back
and let the ReplicaSet controller delete the marked pod): the ReplicaSet controller deletes pods
directly, past every PodDisruptionBudget, so kdesched would need ``patch`` on every pod of the
cluster and pods would leave other than through the Eviction API (docs/deploying.md). The eviction
way needs no pod write at all, keeps the API server's PDB check as the last word, and leaves no
annotation to clean up after a crash.

This module is the pure part: whether a pod may be moved so (:func:`surge_refusal`), the move's
state as the disruption ledger keeps it (:class:`Surge`, in the workload's record so a restarted
or another process finishes it), and what to do next given what the cluster shows now
(:func:`advance`). The reactor acts on the answer through the kube layer
(:mod:`kdesched.reactor.run.surge`). Every step is decided from what is observed (the Deployment's
replicas, the workload's pods), never from memory of what kdesched did, so a step taken twice, by
two processes, or after a crash, does no harm.

The owner changing underneath (docs/safety.md, "Surge-first moves"):

* **replicas changed by someone else** (an HPA, a GitOps tool, a person): kdesched scales back only
  while ``spec.replicas`` is still its own surged value, last written by its own scale write (the
  managedFields entry that owns the field, :meth:`Surge.ours`), with a write conditional on the
  version it read. Any other value, or the same value written by someone else, is the owner's
  decision and wins: the move ends there (the pod that had to go stays, and the strategy decides
  again on the next run). Other writes to the Deployment (an annotation, ``paused``) are not;
* **a rollout** (a pod of another ReplicaSet, pods not updated, a spec write not observed yet): no
  scale-back while it runs: the Deployment controller would spread it over the ReplicaSets
  (proportional scaling), which kdesched cannot rank, and it could delete an original Ready pod. The
  +1 is kept until the rollout is over, then the move goes on by the usual rules (:func:`_held`);
* **the surge pod Ready on the node the move leaves**: given up by a scale-back only when that removes
  it (:mod:`kdesched.evictor.scale_down`); else it is evicted and the move goes on with the pod the
  ReplicaSet makes for it (:func:`_kept`);
* **the surge pod is not Ready in time** (unschedulable, a quota refusing it, a crash loop): given
  up and restored at ``replacementTimeoutSeconds`` (the scale-back checked like the others; without
  the workload's pods, not made: the +1 is kept until a run that reads them), at once when the
  ReplicaSet reports ``ReplicaFailure``; the workload is then not surged again for
  :data:`BLOCK_SECONDS` and its pods keep the normal rules;
* **the eviction refused or held until the timeout** (a PDB that allows nothing any more, a brake):
  given up likewise, but only when the scale-back removes the extra pod
  (:mod:`kdesched.evictor.scale_down`); else the +1 is kept and the eviction tried on;
* **the evicted pod not seen going** :data:`SCALE_DOWN_GRACE_SECONDS` after its accepted eviction:
  scaled back (the move ends overridden) only when the ReplicaSet's order puts a pod made during the
  move first (that pod is never counted: the view lags; the reactor decides again on the pods read
  then); else the +1 is kept and the eviction tried again (which reads the pod
  first), ended by the pod seen going (scaled back: done), the order changing, or the owner taking
  the replicas over. No time limit: kept, it costs capacity; scaled back, it could delete an
  original pod behind the Eviction API.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kdesched.evictor.reasons import Reason
from kdesched.evictor.scale_down import ranked_before, ranked_before_all
from kdesched.model.derived import pod_ready, workload_key
from kdesched.model.owners import SURGE_MANAGER, DeploymentInfo, ReplicaSetInfo
from kdesched.model.records import Pod, PodDisruptionBudget

OPT_OUT = "kdesched.dev/surge"  # "false" on the Deployment (or the pod template): never surge it
# after kdesched evicted the pod, how long it may still look alive in a snapshot (taken before the
# eviction) before the move is scaled back anyway (only if the ReplicaSet would delete that pod or
# one made during the move; else the eviction is tried again), or, with the replicas no longer
# kdesched's, called over
SCALE_DOWN_GRACE_SECONDS = 30.0
# a move recorded and not scaled up yet belongs to the process that recorded it this long (it scales
# up right after its ledger write); after that, replicas still at the original value mean the
# scale-up never happened (a conflict, a crash) or was undone, and the move ends
START_GRACE_SECONDS = 30.0
# a workload whose surge was given up (unschedulable, quota, timeout) is not surged again for this
# long: its pods fall back to the normal rules meanwhile (docs/safety.md)
BLOCK_SECONDS = 300.0
# a move kept at +1 that evicts a pod made during it (:func:`_kept`): at most one such eviction per
# EXTRA_SPACING_SECONDS and at most MAX_EXTRA_EVICTIONS per move, both judged on the move's ledger
# record (claimed by a conditional ledger write before the eviction is sent: one process of all
# evicts); past the cap the +1 is kept (capacity, not availability) and the move says why
EXTRA_SPACING_SECONDS = 30.0
# "made during the move" compares a pod's creationTimestamp (the API server's clock, whole seconds)
# with ``Surge.started`` (kdesched's estimate of that clock, reactor.md "One clock"): a pod created up
# to this long before ``started`` still counts, so an estimate a little ahead does not hide the extra
# pod (the move then found no replacement and, kept at +1, nothing to evict instead of a scale-back)
MADE_DURING_TOLERANCE_SECONDS = 3.0
MAX_EXTRA_EVICTIONS = 3


class Fallback(enum.StrEnum):
    """Why a pod that would have been moved surge-first is not: the report, the ``NoSurge`` Event and
    the metric ``kdesched_surge_fallbacks_total{reason}`` name it."""

    DISABLED = "disabled"  # kdesched.moves.surge: false
    OPT_OUT = "opt-out"  # kdesched.dev/surge: "false"
    BARE_POD = "bare-pod"
    NOT_DEPLOYMENT = "not-a-deployment"  # StatefulSet, a ReplicaSet of its own, a Job, ...
    OWNER_UNREADABLE = "owner-unreadable"  # the Deployment/ReplicaSet could not be read (403, gone)
    NO_SURGE = "max-surge-0"  # maxSurge 0 or strategy Recreate
    PAUSED = "paused"
    ROLLOUT = "rollout"
    REPLICA_FAILURE = "replica-failure"  # the ReplicaSet cannot create pods (a quota): ReplicaFailure
    BLOCKED = "recent-failure"  # the last surge of the workload was given up a moment ago
    PDB_SCALES = "pdb-scales-with-replicas"  # maxUnavailable 0 / minAvailable 100%: no eviction even with one more
    BUSY = "move-in-progress"  # the workload already has a pod in flight or a surge under way
    CONTROLS = "held-by-controls"  # a disruption budget or window holds it (as it would its eviction)


@dataclass(frozen=True, slots=True)
class NoSurge:
    reason: Fallback
    message: str
    # CONTROLS: the admission pipeline's reason (kdesched.admission.pipeline.RunAdmission.take), the
    # name a refusal is counted and reported by (kdesched_evictions_refused_total{reason})
    control: Reason | None = None


def surge_refusal(pod: Pod, kind: str, deployment: DeploymentInfo | None, replicaset: ReplicaSetInfo | None,
                  siblings: Sequence[Pod], pdbs: Sequence[PodDisruptionBudget] = ()) -> NoSurge | None:
    """Why ``pod`` (of a workload of ``kind``) cannot be moved surge-first, or None. ``deployment`` and
    ``replicaset``: its owners as read now (None: not read or not found); ``siblings``: the
    workload's pods in the run's snapshot; ``pdbs``: the PodDisruptionBudgets that cover it."""
    if kind == "Pod":
        return NoSurge(Fallback.BARE_POD, "a bare pod has no owner to scale up")
    if kind != "Deployment":
        why = ("a StatefulSet's pods have fixed identities: its replacement is only created once the old pod is gone"
               if kind == "StatefulSet" else f"a {kind}'s pods are moved by eviction only (surge-first moves scale a "
               "Deployment)")
        return NoSurge(Fallback.NOT_DEPLOYMENT, why)
    if pod.annotations.get(OPT_OUT, "").lower() == "false":
        return NoSurge(Fallback.OPT_OUT, f"the pod template says {OPT_OUT}: \"false\"")
    if deployment is None or replicaset is None:
        return NoSurge(Fallback.OWNER_UNREADABLE, "its Deployment or ReplicaSet could not be read")
    if deployment.annotations.get(OPT_OUT, "").lower() == "false":
        return NoSurge(Fallback.OPT_OUT, f"Deployment {deployment.name} says {OPT_OUT}: \"false\"")
    if replicaset.owner_kind != "Deployment" or replicaset.owner_name != deployment.name:
        return NoSurge(Fallback.NOT_DEPLOYMENT, f"ReplicaSet {replicaset.name} is not controlled by Deployment "
                       f"{deployment.name}")
    if deployment.strategy == "Recreate":
        return NoSurge(Fallback.NO_SURGE, f"Deployment {deployment.name} has strategy Recreate: it never runs one "
                       "pod more than its replicas")
    if _zero(deployment.max_surge):
        return NoSurge(Fallback.NO_SURGE, f"Deployment {deployment.name} has maxSurge {deployment.max_surge}: it "
                       "never runs one pod more than its replicas")
    if deployment.paused:
        return NoSurge(Fallback.PAUSED, f"Deployment {deployment.name} is paused")
    hashes = {p.labels.get("pod-template-hash", "") for p in siblings if not p.terminal and not p.terminating}
    if deployment.rolling_out or len(hashes) > 1:
        return NoSurge(Fallback.ROLLOUT, f"Deployment {deployment.name} is rolling out (generation "
                       f"{deployment.generation}, observed {deployment.observed_generation}; "
                       f"{deployment.updated_replicas} of {deployment.status_replicas} updated)")
    failure = replica_failure(deployment, replicaset)
    if failure:
        return NoSurge(Fallback.REPLICA_FAILURE, f"its ReplicaSet cannot create pods: {failure}")
    if deployment.replicas < 1:
        return NoSurge(Fallback.NOT_DEPLOYMENT, f"Deployment {deployment.name} is scaled to 0")
    ready = sum(1 for p in siblings if pod_ready(p))
    for pdb in pdbs:
        refused = pdb_refusal(pdb, ready)
        if refused is not None:
            return refused
    return None


def pdb_refusal(pdb: PodDisruptionBudget, ready: int) -> NoSurge | None:
    """Would ``pdb`` still allow no eviction with one pod more? Its desired healthy count is scaled on
    the controller's replicas, rounded up, as the disruption controller does: ``maxUnavailable: 0``
    or ``minAvailable: 100%`` keep up with the extra pod, so the move could never evict and would only
    churn. Counted from the PDB's status (``currentHealthy``, ``expectedPods``) when it has one: a
    node-scoped run's snapshot may hold only the node's pods; else from ``ready``, the Ready pods
    the run sees."""
    healthy = pdb.current_healthy if pdb.current_healthy is not None else ready
    expected = (pdb.expected_pods if pdb.expected_pods is not None else ready) + 1
    desired: int | None = None
    if pdb.min_available:
        desired = _scaled(pdb.min_available, expected)
    elif pdb.max_unavailable:
        u = _scaled(pdb.max_unavailable, expected)
        desired = None if u is None else expected - u
    if desired is None or healthy + 1 - desired >= 1:
        return None
    spec = (f"minAvailable {pdb.min_available}" if pdb.min_available else f"maxUnavailable {pdb.max_unavailable}")
    return NoSurge(Fallback.PDB_SCALES, f"PodDisruptionBudget {pdb.namespace}/{pdb.name} ({spec}, {healthy} of "
                   f"{expected - 1} healthy) would allow no eviction even with one pod more")


def _scaled(value: str, expected: int) -> int | None:
    try:
        if value.endswith("%"):
            return math.ceil(int(value[:-1]) * expected / 100)
        return int(value)
    except ValueError:
        return None


def _zero(max_surge: str) -> bool:
    s = max_surge.strip()
    return s in ("0", "0%")


def replica_failure(deployment: DeploymentInfo | None, replicaset: ReplicaSetInfo | None) -> str:
    """The ReplicaSet's (or the Deployment's copy of its) ``ReplicaFailure`` message: pods cannot be
    created (a ResourceQuota, a LimitRange, an admission webhook); "" when none."""
    for c in (replicaset.condition("ReplicaFailure") if replicaset else None,
              deployment.condition("ReplicaFailure") if deployment else None):
        if c is not None and c.status == "True":
            return f"{c.reason}: {c.message}".strip(": ")[:300]
    return ""


@dataclass(frozen=True, slots=True)
class Surge:
    """A surge-first move in the disruption ledger (the workload's record): enough for any process to
    finish it or put the owner back."""

    uid: str  # the marked pod (the one that must go)
    pod: str  # namespace/name
    node: str  # where it runs (the replacement must be Ready elsewhere)
    deployment: str
    replicaset: str
    original: int  # spec.replicas when the move began
    surged: int  # original + 1
    started: float  # epoch seconds, API server clock
    deadline: float  # given up and restored at this time (replacementTimeoutSeconds)
    strategy: str
    # the Deployment's metadata.generation once kdesched's scale-up is in: the scale write is
    # conditional on the version the move was chosen at, so it is exactly one more than then. Not
    # who owns the replicas (an annotation moves it too; :meth:`ours`): a later generation the
    # Deployment controller has not observed yet may be a rollout (:func:`_rollout`)
    generation: int = 0
    evicted: float = 0.0  # when kdesched evicted the pod (0: not yet); the scale-back follows once it is seen going
    # pods made during the move evicted so far (:func:`_kept`), and when the last was claimed (the
    # ledger's time): written by the ledger's conditional write before that eviction is sent
    extra: int = 0
    extra_at: float = 0.0

    def to_json(self) -> list[Any]:
        fields = [self.uid, self.pod, self.node, self.deployment, self.replicaset, self.original, self.surged,
                  round(self.started, 3), round(self.deadline, 3), self.strategy, self.generation,
                  round(self.evicted, 3)]
        # the extra evictions only once there is one: a record without them is byte for byte what
        # 0.1 wrote (and what a 0.1 process, reading the first 12 fields, reads)
        return [*fields, self.extra, round(self.extra_at, 3)] if self.extra else fields

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Surge:
        # (a record written before the extra evictions were counted has 12 fields: none yet)
        extra = (int(raw[12]), float(raw[13])) if len(raw) > 13 else (0, 0.0)
        return cls(str(raw[0]), str(raw[1]), str(raw[2]), str(raw[3]), str(raw[4]), int(raw[5]), int(raw[6]),
                   float(raw[7]), float(raw[8]), str(raw[9]), int(raw[10]), float(raw[11]), *extra)

    def ours(self, deployment: DeploymentInfo) -> bool:
        """Are the Deployment's replicas still kdesched's surged value, written by kdesched? Judged by
        who last wrote ``spec.replicas``: the managedFields entry that owns it is kdesched's scale
        write (:data:`~kdesched.model.owners.SURGE_MANAGER`) and no other manager's. An HPA or a
        person writing the replicas takes the entry over, also when they put back the same number
        later (A-B-A); any other write (an annotation, ``paused``, the template) leaves it alone.
        Without managedFields (an API server or a copy that does not keep them) judged on the value
        alone."""
        if deployment.replicas != self.surged:
            return False
        managers = deployment.replicas_managers
        return managers is None or managers == (SURGE_MANAGER,)


class Action(enum.StrEnum):
    WAIT = "wait"  # nothing to do yet
    EVICT = "evict"  # the replacement is Ready: evict the pod (the scale-back once it is seen terminating)
    # a scale-back now could delete an original Ready pod, and only a pod made during the move can change
    # that: evict the newest of them (Step.target); the ReplicaSet's pod for it, not Ready yet, then goes first
    EVICT_EXTRA = "evict-extra"
    RESTORE = "restore"  # over or given up: scale back (only if the replicas are still ours), end
    END = "end"  # over: end (the replicas are not kdesched's to touch)


# how a surge ended, for checked moves and the metric kdesched_surge_moves_total{outcome}
DONE, GAVE_UP, OVERRIDDEN = "done", "gave-up", "overridden"


class Held(enum.StrEnum):
    """Why a move keeps its +1 with no time limit (:attr:`Step.held`): it ends only when what holds it
    changes (the owner acts, the eviction is allowed, a later view). The value is the label of the
    gauge ``kdesched_surge_moves_held{reason}`` (docs/safety.md, "Surge-first moves")."""

    ROLLOUT = "rollout"  # the Deployment rolls out (:func:`_held`)
    EVICTION = "eviction-refused"  # past the timeout, its eviction refused or held, tried every 30 s
    NOT_SEEN_GOING = "not-seen-going"  # evicted, still there 30 s on, tried again (:func:`_not_seen_going`)
    SCALE_BACK = "scale-back-unsafe"  # a scale-back could delete an original pod: a pod made during it goes first (:func:`_kept`)
    EXTRA_SPENT = "extra-evictions-spent"  # past MAX_EXTRA_EVICTIONS of those (:func:`_kept`)
    PODS_UNKNOWN = "pods-unknown"  # past the timeout, the workload's pods not known to this run


@dataclass(frozen=True, slots=True)
class Step:
    action: Action
    why: str = ""
    outcome: str = ""  # for END / RESTORE: done | gave-up | overridden
    replacement: Pod | None = None  # the surge pod, when one is Ready on another node
    block: bool = False  # do not surge this workload again for a while (BLOCK_SECONDS)
    wasted: bool = False  # the move could only have ended where it began (checked moves: wasted)
    target: Pod | None = None  # EVICT_EXTRA: the pod made during the move to evict
    # the move keeps the +1 with no time limit, for this reason (a WAIT, or an eviction tried on); None
    # for a step whose wait ends by itself (a replacement starting, the timeout)
    held: Held | None = None
    # a WAIT because an admission control holds the step's eviction (a brake, a window, a budget):
    # its reason, so that what the move says (SurgeMoveHeld) changes when another control holds it
    control: Reason | None = None

    @property
    def told_as(self) -> str:
        """The short class of why a move waits, for de-duplicating what it says: a new class is told at
        once, the same one repeated is not (reactor.run.surge, SurgeMoveHeld)."""
        return "/".join(v for v in (self.held.value if self.held else "",
                                    self.control.value if self.control else "") if v)


def own_pods(s: Surge, pods: Sequence[Pod]) -> list[Pod]:
    """The pods of ``pods`` that the move's Deployment controls: through one of its ReplicaSets, named
    ``<deployment>-<pod-template-hash>`` (:func:`~kdesched.model.derived.workload_key`), and the marked
    pod. A LIST by the Deployment's matchLabels (a node-local run's read,
    :func:`kdesched.kube.owners.workload_pods`) also returns another controller's pods that carry those
    labels (a canary Deployment ``app=web, track=canary`` beside ``web`` selecting ``app=web``): their
    template hash is no rollout of this Deployment, none of them is its replacement, and its
    ReplicaSet's scale-back never deletes one. Counted, they kept a move at +1 for as long as the
    canary lived (its hash taken for a rollout, :func:`_held`)."""
    want = ("Deployment", s.pod.partition("/")[0], s.deployment)
    return [p for p in pods if p.uid == s.uid or workload_key(p) == want]


def replacement_of(s: Surge, pods: Sequence[Pod]) -> Pod | None:
    """The surge pod: created since the move began (:func:`_since_start`), not the marked pod, Ready,
    on another node; the earliest such pod."""
    found = [p for p in pods if p.uid != s.uid and not p.terminating and not p.terminal and _since_start(s, p)
             and pod_ready(p) and p.node_name and p.node_name != s.node]
    return min(found, key=lambda p: (p.creation_time.timestamp() if p.creation_time else 0.0), default=None)


def advance(s: Surge, deployment: DeploymentInfo | None, replicaset: ReplicaSetInfo | None,
            pods: Sequence[Pod] | None, now: float) -> Step:
    """What to do next with ``s``, from what the cluster shows now: the Deployment and its ReplicaSet
    as read (None: gone), and the workload's pods (None: the run's snapshot does not hold them; only
    the owner and the clock are judged then; only the Deployment's own are counted, :func:`own_pods`)."""
    if deployment is None:
        return Step(Action.END, f"Deployment {s.deployment} is gone", OVERRIDDEN)
    if pods is not None:
        pods = own_pods(s, pods)
    replicas = deployment.replicas
    marked = None if pods is None else next((p for p in pods if p.uid == s.uid), None)
    marked_gone = pods is not None and (marked is None or marked.terminating or marked.terminal)
    replacement = replacement_of(s, pods) if pods is not None else None
    mine = s.ours(deployment)
    # a rollout under way: no scale-back (the Deployment controller would spread it over the
    # ReplicaSets, which kdesched cannot rank); the +1 is kept until the rollout ends (_held)
    rolling = mine and _rollout(s, deployment, pods)
    if marked_gone:
        if mine:
            if rolling:
                return _held(s, f"{s.pod} is gone", replacement)
            # evicted (by kdesched at the last step, or by something else): only now, with the pod seen
            # terminating, do the replicas go back (scaling back at the moment of the eviction let a
            # ReplicaSet that had not seen it yet remove a Ready sibling). The ReplicaSet no longer counts
            # the pod (FilterActivePods) and has made one for it: while that one is not Ready it goes
            # first; once it is Ready (a late settle: a crash, a paused process) the order is the
            # ReplicaSet's among Ready pods, which may put an original first (_at_risk). After a
            # rollout, every pod left was made during the move (by the rollout): one of them goes
            if _unseen(s, pods or (), now):
                # the ReplicaSet's pod for it is not seen yet: neither is proof that the ReplicaSet saw
                # the pod going (_unseen); the scale-back waits
                return Step(Action.WAIT, "", "", replacement)
            first = _at_risk(s, pods or (), now, marked=False)
            done = Step(Action.RESTORE, f"{s.pod} is gone", DONE, replacement)
            if first is None:
                return done
            return _kept(s, pods or (), first, f"{s.pod} is gone", replacement, now, done)
        return Step(Action.END, f"{s.pod} is gone", DONE, replacement)
    if mine:
        if s.evicted:
            # evicted, and not seen terminating yet (a snapshot from before the eviction)
            if now - s.evicted >= SCALE_DOWN_GRACE_SECONDS:
                if rolling:
                    return _held(s, f"{s.pod} was still there {now - s.evicted:.0f}s after its eviction",
                                 replacement)
                return _not_seen_going(s, pods, replacement, now)
            return Step(Action.WAIT)
        if replacement is not None:
            # (a rollout does not stop the eviction: the Eviction API checks its PDB as ever)
            if now >= s.deadline and not rolling and ranked_before(replacement, pods or (), now) is None:
                # the eviction kept being refused (a PDB, a webhook) or held (a brake, a window): give up,
                # but only by a scale-back that removes the extra pod (evictor.scale_down); else the
                # eviction is tried on and the +1 kept (capacity, not availability)
                return Step(Action.RESTORE, f"{s.pod} could not be evicted within {s.deadline - s.started:g}s "
                            f"(replacement {replacement.namespace}/{replacement.name} Ready on node "
                            f"{replacement.node_name})", GAVE_UP, replacement, block=True)
            # (past the deadline: refused or held until now, tried on with no time limit)
            return Step(Action.EVICT, f"replacement {replacement.namespace}/{replacement.name} is Ready on node "
                        f"{replacement.node_name}", "", replacement,
                        held=Held.EVICTION if now >= s.deadline else None)
        if rolling:
            return _held(s, f"Deployment {s.deployment} began a rollout during the move", None)
        back = _landed_back(s, pods)
        if back is not None:
            # given up, by a scale-back only if the ReplicaSet then deletes a pod made during the move (or
            # one not Ready); else the extra pod is evicted, and the one made for it placed anew (_kept)
            why = f"the extra pod {back.namespace}/{back.name} became Ready on node {s.node}, the node the move leaves"
            first = _at_risk(s, pods or (), now, marked=False)
            wasted = Step(Action.RESTORE, why, GAVE_UP, block=True, wasted=True)
            if first is None:
                return wasted
            return _kept(s, pods or (), first, why, None, now, wasted)
        failure = replica_failure(deployment, replicaset)
        if failure:
            return Step(Action.RESTORE, f"the ReplicaSet cannot create the extra pod ({failure})", GAVE_UP, block=True)
        if now >= s.deadline:
            why = f"no replacement was Ready on another node within {s.deadline - s.started:g}s"
            if pods is None:
                # the extra pod may be Ready (the run cannot tell), and so a scale-back may delete an
                # original Ready pod: the +1 is kept until a run that reads the pods judges the give-up
                return Step(Action.WAIT, f"{why}, and the workload's pods are not known, so neither is the pod a "
                            f"scale-back would delete: kept at {s.surged} replicas until a run that reads them",
                            held=Held.PODS_UNKNOWN)
            # the extra pod is not Ready (or not made): it goes first, unless the order says otherwise
            first = _at_risk(s, pods, now, marked=False)
            gave_up = Step(Action.RESTORE, why, GAVE_UP, block=True)
            if first is None:
                return gave_up
            return _kept(s, pods, first, why, None, now, gave_up)
        return Step(Action.WAIT)
    if replicas == s.surged and not s.evicted:
        return Step(Action.END, f"the replicas of Deployment {s.deployment} were set to {replicas} by someone else "
                    "during the move (the value kdesched had set): the owner's value stays", OVERRIDDEN)
    if s.evicted:
        # evicted, the replicas changed by someone else since: the pod is on its way out (a snapshot
        # from before the eviction may not show it terminating yet)
        if now - s.evicted >= SCALE_DOWN_GRACE_SECONDS:
            return Step(Action.END, f"{s.pod} was still there {now - s.evicted:.0f}s after its eviction",
                        OVERRIDDEN)
        return Step(Action.WAIT)
    if replicas == s.original:
        if now - s.started < START_GRACE_SECONDS:
            return Step(Action.WAIT)  # the process that began the move may be scaling up right now
        return Step(Action.END, f"the replicas of Deployment {s.deployment} were put back to {replicas} by someone "
                    "else during the move; the ReplicaSet removes the extra pod", OVERRIDDEN)
    return Step(Action.END, f"the replicas of Deployment {s.deployment} were changed to {replicas} during the move "
                f"(kdesched had set {s.surged}, from {s.original}): the new value is the owner's and stays",
                OVERRIDDEN)


def _not_seen_going(s: Surge, pods: Sequence[Pod] | None, replacement: Pod | None, now: float) -> Step:
    """The marked pod still looks alive :data:`SCALE_DOWN_GRACE_SECONDS` after kdesched's accepted
    eviction (a snapshot or watch cache lagging, an eviction that did not take). The scale-back goes
    ahead only when the ReplicaSet certainly deletes one made during the move
    (:mod:`kdesched.evictor.scale_down`); else the +1 is kept and the eviction tried again (it reads
    the pod first: one already going is not evicted twice), until the pod is seen going (the
    scale-back, done), the order allows it, or the owner takes the replicas over."""
    late = f"{s.pod} was still there {now - s.evicted:.0f}s after its eviction"
    # (the marked pod is never counted as one the ReplicaSet may delete here: this path runs because the
    # view lags, and in the cluster the pod is terminating and not counted; the reactor re-reads the pod
    # and the workload's pods before it carries out this scale-back, reactor.run.surge._rejudged)
    first = _at_risk(s, pods, now, marked=False) if pods is not None else None
    if pods is not None and first is None:
        return Step(Action.RESTORE, late, OVERRIDDEN)
    risk = ("its pods are not known, so neither is the pod a scale-back would delete" if first is None else
            f"a scale-back could delete {first.namespace}/{first.name}, an original pod the ReplicaSet may rank first"
            + (" (in the cluster it may be terminating already, and not counted)" if first.uid == s.uid else ""))
    return Step(Action.EVICT, f"{late}, and {risk}: kept at {s.surged} replicas, its eviction tried again", "",
                replacement, held=Held.NOT_SEEN_GOING)


def _at_risk(s: Surge, pods: Sequence[Pod], now: float, *, marked: bool) -> Pod | None:
    """A Ready pod of the workload that was there before the move (other than the marked one when
    ``marked``: its eviction was accepted) that a scale-back might make the ReplicaSet delete; None
    when it certainly deletes a pod made during the move or that marked pod, or, while any pod is not
    Ready, one that is not Ready (it serves nothing: :func:`~kdesched.evictor.scale_down.ranked_before_all`
    ``ready_only``). None too when the
    ReplicaSet has no pod more than the original replicas (the pod it made for an evicted one not
    there yet, the extra pod never made): a scale-back then deletes nothing, or a pod too new for this
    view, not Ready yet."""
    active = [p for p in pods if not p.terminating and not p.terminal]
    if len(active) <= s.original:
        return None
    spare = [p for p in active if (marked and p.uid == s.uid) or _made_during(s, p)]
    return ranked_before_all(spare, active, now, ready_only=True)


def _unseen(s: Surge, pods: Sequence[Pod], now: float) -> bool:
    """The marked pod is seen going, but not yet that the ReplicaSet saw it: fewer live pods than the
    surged replicas (the ReplicaSet, no longer counting the pod, makes one for it at once). Scaled back
    before then, a view older than that pod's start-up (a node run's LIST, a lagging cache) hides it
    Ready, or a ReplicaSet whose informer lags still counts the marked pod and deletes a Ready sibling.
    (Not "a pod created after the pod's deletion": ``deletionTimestamp`` is the deletion plus its grace
    period, and ``evicted`` is on kdesched's clock.) Bounded: :data:`SCALE_DOWN_GRACE_SECONDS` after
    the eviction (or, not evicted by kdesched, after the move began) the ReplicaSet has surely observed
    the pod, and the scale-back is judged on the view as it is (a pod it cannot make, a quota)."""
    active = [p for p in pods if not p.terminating and not p.terminal]
    return len(active) < s.surged and now - (s.evicted or s.started) < SCALE_DOWN_GRACE_SECONDS


def _made_during(s: Surge, p: Pod) -> bool:
    """Is ``p`` a live pod created since the move began (:func:`_since_start`), other than the marked one?"""
    return p.uid != s.uid and not p.terminating and not p.terminal and _since_start(s, p)


def _since_start(s: Surge, p: Pod) -> bool:
    """Was ``p`` created in or after the second the move began (``creationTimestamp`` has one second
    resolution), give or take :data:`MADE_DURING_TOLERANCE_SECONDS` between kdesched's estimate of the
    API server's clock (``started``) and that clock? A pod made that little before the move counts as
    made during it (docs/safety.md, Limits)."""
    return (p.creation_time is not None
            and p.creation_time.timestamp() >= math.floor(s.started) - MADE_DURING_TOLERANCE_SECONDS)


def _kept(s: Surge, pods: Sequence[Pod], first: Pod, why: str, replacement: Pod | None, now: float,
          restore: Step) -> Step:
    """A scale-back now could delete ``first``, an original Ready pod (:func:`_at_risk`): the +1 is
    kept. When every pod made during the move is Ready, nothing changes that on its own (the order
    among Ready pods is stable: doubled-up pods, a lower deletion cost, Ready for longer): the newest
    of them is evicted (``EVICT_EXTRA``: the Eviction API, its PDB checked, held by the brakes and
    windows like any eviction). The ReplicaSet, still at the surged replicas, makes a pod for it, and
    that one, not Ready yet, ranks first: the next settle scales back. Such evictions are spaced by
    :data:`EXTRA_SPACING_SECONDS` and capped at :data:`MAX_EXTRA_EVICTIONS` per move, both on the
    move's ledger record (:attr:`Surge.extra`, :attr:`Surge.extra_at`: claimed by the ledger's
    conditional write before the eviction is sent, so every process counts the same ones); past the
    cap (the ReplicaSet's new pods kept being Ready before a run saw them) the move keeps the +1 and
    says why: ended by the owner writing the replicas, the Deployment gone, or a later view that
    allows the scale-back. Else (a pod made during the move not Ready yet) the move waits. With no pod
    made during the move at all (none to evict; more pods than the original replicas all judged older
    than the move), it waits until the move's deadline, then ends as ``restore``, the step the caller
    takes when the check passes (the give-up's outcome, as before the check): not at +1 forever."""
    made = [p for p in pods if _made_during(s, p)]
    risk = (f"a scale-back could delete {first.namespace}/{first.name}, a Ready pod from before the move that the "
            "ReplicaSet may rank first")
    if not made and now >= s.deadline:
        return replace(restore, why=f"{restore.why} (no pod made during the move is seen to evict instead, past "
                       f"the move's {s.deadline - s.started:g}s)")
    extra = max(made, key=lambda p: (p.creation_time.timestamp() if p.creation_time else 0.0, p.name), default=None)
    if extra is not None and all(pod_ready(p) for p in made):
        if s.extra >= MAX_EXTRA_EVICTIONS:
            return Step(Action.WAIT, f"{why}, and {risk}: kept at {s.surged} replicas, no pod evicted any more ("
                        f"{s.extra} pods made during the move were evicted already, at most {MAX_EXTRA_EVICTIONS} per "
                        "move: the ReplicaSet's new pods were Ready before a run saw them); the +1 stays until the "
                        "owner writes the replicas, the Deployment is gone, or a run sees a scale-back that "
                        "deletes no original pod", "", replacement, held=Held.EXTRA_SPENT)
        if now - s.extra_at < EXTRA_SPACING_SECONDS:
            # the last one claimed a moment ago (by any process)
            return Step(Action.WAIT, "", "", replacement, held=Held.SCALE_BACK)
        return Step(Action.EVICT_EXTRA, f"{why}, and {risk}: kept at {s.surged} replicas, the extra pod "
                    f"{extra.namespace}/{extra.name} evicted (the ReplicaSet makes another for it, which, not Ready yet, "
                    "is the one a scale-back removes)", "", replacement, target=extra, held=Held.SCALE_BACK)
    return Step(Action.WAIT, f"{why}, and {risk}: kept at {s.surged} replicas", "", replacement, held=Held.SCALE_BACK)


def _held(s: Surge, why: str, replacement: Pod | None) -> Step:
    """A rollout of the Deployment is under way (:func:`_rollout`): the move scales nothing back. A
    scale-down of a Deployment with several active ReplicaSets is spread over them by the Deployment
    controller (proportional scaling, kubernetes pkg/controller/deployment/sync.go ``scale``: by their
    sizes and the replicas annotated on them, the leftover to the largest, the older first among
    equals), and the ReplicaSet that loses a replica deletes the pod it ranks first among its own: an
    original Ready pod of the old ReplicaSet when the extra pod is not in it (the template changed
    before the controller made it), a Ready pod of the new one. kdesched reads neither the other
    ReplicaSets nor their annotations, so it cannot rank that. The +1 is kept instead: the rollout runs
    on original + 1 replicas, whose available floor (replicas - maxUnavailable) is never below the
    owner's own, and replaces the marked pod anyway. Once the rollout is over (one template, the
    controller caught up) the move goes on by the usual rules, each scale-back with its checks; also
    ended by the owner writing the replicas, or the Deployment gone. No time limit: a stalled or paused
    rollout keeps the +1 (capacity) until the owner resumes, fixes or undoes it."""
    return Step(Action.WAIT, f"{why}; Deployment {s.deployment} is rolling out: kept at {s.surged} replicas until "
                "the rollout ends (a scale-back now is spread over its ReplicaSets by the Deployment controller, "
                "and could delete a Ready pod)", "", replacement, held=Held.ROLLOUT)


def _landed_back(s: Surge, pods: Sequence[Pod] | None) -> Pod | None:
    """A pod made by the surge that became Ready on the node the move leaves (a strategy whose node the
    scheduler does not avoid): the move cannot succeed."""
    return next((p for p in pods or () if p.uid != s.uid and p.node_name == s.node and not p.terminating
                 and _since_start(s, p) and pod_ready(p)), None)


def _rollout(s: Surge, deployment: DeploymentInfo, pods: Sequence[Pod] | None) -> bool:
    """Has a rollout (maybe) begun since the move did, and is it not over? Pods of two templates, a
    pod of another ReplicaSet than the marked pod's, the Deployment counting pods it has not updated, or a spec write after kdesched's scale-up
    (``generation`` past the move's) that the Deployment controller has not observed yet: a template
    change looks so before the controller makes its ReplicaSet, and a later settle might not see it
    any more as a rollout. (An annotation or ``paused`` looks the same for a moment: the move then
    waits until the controller has observed it.)"""
    if deployment.updated_replicas != deployment.status_replicas and deployment.status_replicas:
        return True
    if s.generation and deployment.generation > s.generation and deployment.observed_generation < deployment.generation:
        return True
    if pods is None:
        return False
    live = {p.labels.get("pod-template-hash", "") for p in pods if not p.terminating and not p.terminal}
    if len(live) > 1:  # (also once the marked pod is gone: the rollout deleted it)
        return True
    marked = next((p for p in pods if p.uid == s.uid), None)
    mine = marked.labels.get("pod-template-hash", "") if marked is not None else ""
    return bool(mine) and any(h != mine for h in live)


def summary(steps: Mapping[str, Step]) -> dict[str, int]:
    out: dict[str, int] = {}
    for st in steps.values():
        out[st.action.value] = out.get(st.action.value, 0) + 1
    return out

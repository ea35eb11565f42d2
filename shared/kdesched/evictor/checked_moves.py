"""Checked moves: where an evicted pod's replacement went, and whether the move was wasted.

When a move's in-flight pods settle (their workload is back at its Ready count, or the replacement
timeout passed), :func:`check_moves` follows each evicted pod's replacement in the same snapshot
(no extra read): the node it became Ready on, how long that took, and whether the move was
**wasted** (:func:`wasted_reason`: it landed back on the node it left, or on another node the same
move is draining for the same reason, or stayed Pending past the timeout). A wasted move **backs
the workload off for that strategy** (:func:`backoffs_after`: exponentially, reset by a move that
achieved its purpose); the back-offs live in the workload's record beside its cool-downs
(:mod:`kdesched.evictor.ledger_records`), so restarts and every replica share them.

Pure: decided only from what the run already holds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdesched.evictor.ledger_records import MAX_WHY, Backoff, InFlight, Move, backoff_key
from kdesched.model.derived import pod_ready
from kdesched.model.records import Node, Pod
from kdesched.model.scheduling import matches_node_selector

# the strategies whose "would it evict the replacement again?" rule wasted_reason knows
TAINTS = "RemovePodsViolatingNodeTaints"
NODE_AFFINITY = "RemovePodsViolatingNodeAffinity"
# a node's taint or lost label is a drain order: the cool-downs do not hold the same strategy back
# from the pods that were there already (they stop flapping: replacements, other strategies)
DRAINS = frozenset({TAINTS, NODE_AFFINITY})
# their purpose is a fresh pod, wherever it runs: landing on the same node wastes nothing
FRESH_POD = frozenset({"PodLifeTime", "RemoveFailedPods", "RemovePodsHavingTooManyRestarts"})
ACHIEVED, WASTED, PENDING_TIMEOUT, UNKNOWN = "achieved", "wasted", "pending_timeout", "unknown"
# how far before the admission's second a replacement may have been stamped by the API server: the
# admission's time is the server's clock as the admitting process estimated it, within half a second
# of it (plus a round trip) even right after the estimate restarted (kdesched.kube.clock)
CLOCK_SLACK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class CheckedMove:
    """One evicted pod's move, checked against where its replacement went (module docstring)."""

    workload: str  # ledger key
    strategy: str
    pod: str  # the evicted pod, namespace/name
    source: str  # the node it left
    destination: str  # the node the planner reserved for it ("" = none)
    landed: str  # the node its replacement became Ready on ("" = none found)
    seconds: float | None  # eviction admitted -> replacement Ready (None: not Ready)
    outcome: str  # achieved | wasted | pending_timeout | unknown (no replacement to tell by)
    why: str = ""  # why it was wasted ("landed back on node X", ...)

    @property
    def counts_as_wasted(self) -> bool:
        return self.outcome in (WASTED, PENDING_TIMEOUT)

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "strategy": self.strategy, "pod": self.pod, "source": self.source,
                "destination": self.destination or None, "landed": self.landed or None,
                "secondsToReady": None if self.seconds is None else round(self.seconds, 3),
                "outcome": self.outcome, **({"why": self.why} if self.why else {})}



def wasted_reason(strategy: str, replacement: Pod, source: str, landed: Node | None,
                  move_sources: Collection[str]) -> str | None:
    """Why a replacement that became Ready on ``replacement.node_name`` made its move a waste, or
    None. Decided only from what the run already holds (docs/safety.md, "Checked moves"):

    * it landed back on ``source``, the node it left;
    * it landed on another node the same move was taking pods off when the eviction was admitted
      (``move_sources``: the nodes of the move's in-flight and held pods of that time), which for RemovePodsViolatingNodeTaints still has a
      NoSchedule/NoExecute taint the replacement does not tolerate, and for
      RemovePodsViolatingNodeAffinity still fails its nodeSelector / required node affinity (for
      LowNodeUtilization, HighNodeUtilization, RemoveDuplicates and the others: being a node the
      move drains is enough).

    Only nodes the move drains: the scheduler never places a pod on an untolerated taint or a
    failing required affinity, so a violation on any other node appeared after the placement (the
    next node of a rolling maintenance) and is a new reason to move, not a wasted move. And never
    for the strategies whose purpose is a fresh pod, wherever it runs (:data:`FRESH_POD`)."""
    if strategy in FRESH_POD:
        return None
    node = replacement.node_name
    if node == source:
        return f"landed back on node {node}"
    if node not in move_sources:
        return None
    if strategy == TAINTS:
        for taint in landed.taints if landed is not None else ():
            if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in
                                                                      replacement.tolerations):
                shown = f"{taint.key}={taint.value}" if taint.value else taint.key
                return (f"landed on node {node}, which the same move is draining for its taint "
                        f"{shown}:{taint.effect}")
        return None
    if strategy == NODE_AFFINITY:
        if landed is not None and not matches_node_selector(replacement, landed):
            return f"landed on node {node}, which the same move is draining for failing its node affinity"
        return None
    return f"landed on node {node}, which the same move is taking pods off"



def _created(p: Pod) -> float:
    return p.creation_time.timestamp() if p.creation_time is not None else 0.0


def _ready_at(p: Pod) -> float | None:
    for c in p.conditions:
        if c.type == "Ready" and c.status == "True":
            return c.last_transition_time.timestamp() if c.last_transition_time is not None else None
    return None


def _later(p: Pod, q: Pod) -> bool:
    """Whether ``p`` looks made later than ``q``: created in a later second, or in the same one and
    Ready in a later second (or not Ready yet). Of two pods stamped alike, neither."""
    p_ready, q_ready = _ready_at(p), _ready_at(q)
    return (int(_created(p)), float("inf") if p_ready is None else int(p_ready)) > (
        int(_created(q)), float("inf") if q_ready is None else int(q_ready))


def replacements(inflight: Sequence[InFlight], pods: Sequence[Pod], spare: int | None = None) -> dict[str, Pod]:
    """Each evicted pod's replacement (uid -> pod), from the workload's pods as the snapshot has
    them: the pods created after its eviction was admitted, matched in order (earliest eviction,
    earliest replacement). ``creationTimestamp`` and the Ready condition's time have second
    resolution, and the admission's time is the API server's clock as the admitting process
    estimated it (:mod:`kdesched.kube.clock`: within half a second, or a little more, of the
    server's when its estimate has just restarted, so a stamp may be a little ahead). So a pod is:

    * never a replacement if it was created, or became Ready, more than :data:`CLOCK_SLACK_SECONDS`
      before the admission's second (it existed before);
    * a replacement if it was created in the admission's second or later and became Ready in a later
      second, or is not Ready yet;
    * ambiguous otherwise: created or Ready within the slack before the admission, or Ready in the
      admission's own second (a fast replacement, a replacement stamped a little early by the
      server's clock, or one of a Deployment's original pods created a moment before). Such a pod
      is taken only when no other fits, and only up to ``spare`` of them: the pods the workload has
      beyond what it had left after the evictions (None: no limit). A workload back at its count
      with no new pod has none. Of several, the one made last (:func:`_later`) is taken: the pods
      that were there already were made before the replacement (a fast kubelet on a real control
      plane: the originals created a second before the admission, the replacement created and Ready
      in its second; taking the first created reported the move landed back on the node it left).

    A pod created well before is never a replacement: taking one for it would report the move
    landed on that pod's node (found on a real control plane: a Deployment created a second
    before). Missing a replacement costs as much the other way: the move settles ``unknown`` and
    its wasted-move back-off lapses (found on a real control plane: a 1-replica workload pinned
    back on its tainted node, evicted again at once)."""
    gone = {f.uid for f in inflight}
    candidates = sorted((p for p in pods if p.uid not in gone and not p.terminating and not p.terminal
                         and p.creation_time is not None), key=_created)
    out: dict[str, Pod] = {}
    used: set[str] = set()
    ambiguous_left = len(candidates) if spare is None else spare
    for f in sorted(inflight, key=lambda f: f.at):
        second = int(f.at)
        earliest = int(f.at - CLOCK_SLACK_SECONDS)
        clear: Pod | None = None
        ambiguous: Pod | None = None
        for p in candidates:
            if p.uid in used or _created(p) < earliest:
                continue
            ready_at = _ready_at(p)
            if ready_at is not None and int(ready_at) < earliest:
                continue  # Ready well before the eviction was admitted: it was there already
            if _created(p) < second or (ready_at is not None and int(ready_at) <= second):
                if ambiguous is None or _later(p, ambiguous):
                    ambiguous = p
                continue
            clear = p
            break
        chosen = clear
        if chosen is None and ambiguous is not None and ambiguous_left > 0:
            chosen = ambiguous
            ambiguous_left -= 1
        if chosen is not None:
            out[f.uid] = chosen
            used.add(chosen.uid)
    return out


def check_moves(key: str, mv: Move, inflight: Sequence[InFlight], pods: Sequence[Pod], nodes: Mapping[str, Node],
                now: float, timeout_seconds: float, *, timed_out: bool) -> list[CheckedMove]:
    """The checked moves of ``inflight`` (settled because the workload is back at its Ready count,
    or ``timed_out`` at the replacement timeout). A bare pod (no controller) has no replacement to
    follow: not checked."""
    if key.startswith("Pod/"):
        return []
    gone = {f.uid for f in inflight}
    present = sum(1 for p in pods if p.uid not in gone and not p.terminating and not p.terminal)
    # the pods beyond what the workload had left after these evictions (mv.expected: its count when
    # the move began; 0 when unknown, then no limit is derived)
    spare = present - (mv.expected - len(inflight)) if mv.expected else None
    found = replacements(inflight, pods, spare)
    out: list[CheckedMove] = []
    for f in inflight:
        # the nodes the move was draining when this eviction was admitted: a node the move took on
        # later (the next step of a rolling maintenance held in the same move) was fine at placement
        sources = {g.node for g in mv.inflight if g.at <= f.at + 0.002} | {h.node for h in mv.held if h.since <= f.at + 0.002}
        r = found.get(f.uid)
        if r is None or not pod_ready(r) or not r.node_name:
            if not timed_out:
                out.append(CheckedMove(key, mv.strategy, f.pod, f.node, f.destination, "", None, UNKNOWN))
                continue
            state = "no replacement" if r is None else f"replacement {r.namespace}/{r.name} still {r.phase or 'Pending'}"
            out.append(CheckedMove(key, mv.strategy, f.pod, f.node, f.destination, r.node_name if r else "", None,
                                   PENDING_TIMEOUT, f"{state} {int(now - f.at)}s after the eviction "
                                   f"(replacementTimeoutSeconds {timeout_seconds:g})"))
            continue
        ready_at = _ready_at(r)
        seconds = max(0.0, (ready_at if ready_at is not None else now) - f.at)
        why = wasted_reason(mv.strategy, r, f.node, nodes.get(r.node_name), sources)
        out.append(CheckedMove(key, mv.strategy, f.pod, f.node, f.destination, r.node_name, seconds,
                               WASTED if why else ACHIEVED, why or ""))
    return out


def backoffs_after(backoffs: Mapping[str, Backoff], checked: Sequence[CheckedMove], now: float) -> dict[str, Backoff]:
    """The back-offs after a settle's checked moves: one more wasted move per workload and strategy
    whose settled wave had a wasted move (a wave of three wasted pods is one step, not three), and
    the entry dropped when a wave only achieved its purpose (an unknown outcome changes nothing)."""
    out = dict(backoffs)
    waves: dict[str, list[CheckedMove]] = {}
    for c in checked:
        waves.setdefault(backoff_key(c.workload, c.strategy), []).append(c)
    for k, wave in waves.items():
        wasted = [c for c in wave if c.counts_as_wasted]
        if wasted:
            before = out.get(k)
            out[k] = Backoff((before.wasted if before else 0) + 1, now, wasted[0].why[:MAX_WHY])
        elif any(c.outcome == ACHIEVED for c in wave):
            out.pop(k, None)
    return out

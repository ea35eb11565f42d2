""""Why not" Events: an eviction that was due and held back says why, on the object operators look at.

Why: kdesched wrote its reasons to its log and the run report; an operator looking at a node that
keeps its pods after a taint, or at a Deployment that is not being rebalanced, runs
``kubectl describe`` and sees nothing. Karpenter writes ``DisruptionBlocked`` / ``Unconsolidatable``
Events on its objects for the same reason. After every live run, this module posts one Event per
object and reason:

* the object is the **node** for a node event's run (``taints.changed``, ``labels.changed``, their
  repeats), else the **workload's owner** (the Deployment, StatefulSet, ... of the held pod);
* the reasons (the Event's ``reason``; its note carries the report's own reason string):
  ``NowhereToGo``, ``Paced``, ``CoolDown``, ``DisruptionWindow``, ``DisruptionBudget``,
  ``HealthBrake``, ``PodDisruptionBudget``.

  ``WastedMoveBackoff`` (a workload backed off for a strategy after wasted moves: checked moves,
  docs/safety.md), and ``WastedMove`` itself, on the workload's owner, when the disruption ledger
  finds a move wasted (:meth:`WhyNotEvents.wasted`).

A storm of node events must not become a storm of Events: the holds of one run are aggregated per
object and reason ("3 evictions held back: ..."), and at most one Event per object and reason is
posted per :data:`INTERVAL_SECONDS` (60 s) per process, and **at most one per object, reason and
clock minute cluster-wide**: the Event's name is derived from the object, the reason and the
minute (:func:`event_name`), so a second process (a function's other pod, a ``serve`` replica, a
Knative revision) posting the same Event in the same minute gets 409 AlreadyExists and posts
nothing, without any read or shared state (the API server's own Event aggregation does not apply
to events.k8s.io Events with distinct names). What is not posted is counted in
``kdesched_why_not_events_total{outcome="suppressed"}``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import Counter

from kdesched.engine import RunReport
from kdesched.evictor.ledger import CheckedMove
from kdesched.evictor.pacing import workload_of
from kdesched.evictor.reasons import Reason
from kdesched.kube.errors import ApiError, Conflict
from kdesched.model.records import Pod
from kdesched.reactor.metrics import REGISTRY

log = logging.getLogger("kdesched.reactor.whynot")

INTERVAL_SECONDS = 60.0
MAX_KEYS = 10000
NOWHERE, PACED, COOLDOWN, WINDOW, BUDGET, BRAKE, PDB = (
    "NowhereToGo", "Paced", "CoolDown", "DisruptionWindow", "DisruptionBudget", "HealthBrake", "PodDisruptionBudget")
BACKOFF, WASTED = "WastedMoveBackoff", "WastedMove"
HELD_RESULTS = frozenset({"paced", "deferred", "blocked"})  # the outcomes that are a hold-back
MAX_NAME = 253  # an Event's name is a DNS subdomain
API_VERSIONS = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
                "Job": "batch/v1", "CronJob": "batch/v1"}

WHY_NOT = Counter("kdesched_why_not_events_total", "\"Why not\" Events about evictions that were due and held back, "
                  "by reason and outcome: posted, suppressed (one per object and reason per minute per process), "
                  "lost (the API server did not take it).", ["reason", "outcome"], registry=REGISTRY)

Post = Callable[..., "bool | None"]
"""KubeClient.post_event (raises :class:`~kdesched.kube.errors.ApiError`; 409 = the same Event
exists: posted by another process this minute) or a callable like KubeClient.create_event (False = lost)."""


def event_name(kind: str, namespace: str, name: str, reason: str, at: float, interval: float = INTERVAL_SECONDS) -> str:
    """The Event's name for ``(object, reason)`` in the ``interval`` bucket holding wall time ``at``:
    the same in every process, so the API server keeps one Event per object, reason and bucket."""
    bucket = int(at // interval) if interval > 0 else int(at)
    digest = hashlib.sha256(f"{kind}/{namespace}/{name}/{reason}/{bucket}".encode()).hexdigest()[:16]
    return f"{name[:MAX_NAME - 18]}.{digest}"


@dataclass(frozen=True, slots=True)
class Held:
    """One eviction held back: the pod, the Event reason it maps to, and the report's reason string."""

    pod: Pod
    kind: str
    reason: str


def classify(kind: Reason, result: str = "", cause: str = "") -> str | None:
    """The Event reason of a hold-back (a refusal's kind, or an outcome), or None when it is not one
    this module reports (a rate limit, a limit of the policy, an error). From the reason enum
    (kdesched.evictor.reasons), never from the message."""
    if result == "paced":
        return PACED
    if result == "deferred":
        try:
            # (a control whose hold passes in seconds, the fresh node change, posts none: the run is
            # repeated then; a cause this module does not know is a window's)
            return Reason(cause).event
        except ValueError:
            return WINDOW
    if result == "blocked":
        return PDB
    return kind.event


def held_back(report: RunReport) -> list[Held]:
    """Every eviction of the run that was due and held back, with its reason (refusals at planning
    time, then the outcomes ``paced``, ``deferred`` and ``blocked``)."""
    out: list[Held] = []
    for r in report.plan.refusals:
        kind = classify(r.kind)
        if kind is not None:
            out.append(Held(r.pod, kind, r.reason))
    for o in report.outcomes:
        if o.result not in HELD_RESULTS:  # a throttled or failed eviction was not held back (its message
            continue                      # may still name a PodDisruptionBudget: "429, not a PodDisruptionBudget")
        kind = classify(Reason.OTHER, o.result, o.cause)
        if kind is not None:
            out.append(Held(o.eviction.pod, kind, o.message))
    return out


class WhyNotEvents:
    """Posts the "why not" Events of each live run, aggregated and rate-limited (module docstring)."""

    def __init__(self, post: Post, *, interval: float = INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float]) -> None:
        self.post = post
        self.interval = interval
        self.clock = clock
        self.wall = wall  # the cluster-wide bucket of event_name
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str, str], float] = {}  # (kind, namespace, name, reason) -> posted

    def _due(self, key: tuple[str, str, str, str], now: float) -> bool:
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                return False
            if len(self._last) >= MAX_KEYS:
                self._last = {k: t for k, t in self._last.items() if now - t < self.interval}
                if len(self._last) >= MAX_KEYS:
                    return False  # a flood of distinct objects: drop rather than grow
            self._last[key] = now
            return True

    def run_done(self, report: RunReport, node: str | None, *, own_nodes: bool = False) -> int:
        """Post the Events of one run (``node``: the node of a node event's run, else None;
        ``own_nodes``: a batch of node-scoped runs, each pod's Event on its own node). Returns how
        many were posted."""
        groups: dict[tuple[str, str, str, str, str], list[Held]] = {}
        for h in held_back(report):
            if node or (own_nodes and h.pod.node_name):
                target = ("Node", "", node or h.pod.node_name, "v1")
            else:
                w = workload_of(h.pod)
                target = (w.kind, w.namespace, w.name, API_VERSIONS.get(w.kind, "v1")) if w is not None else (
                    "Pod", h.pod.namespace, h.pod.name, "v1")
            groups.setdefault((*target, h.kind), []).append(h)
        return self._post_groups(groups.items())

    def wasted(self, checked: Sequence[CheckedMove], backoffs: Callable[[CheckedMove], str] = lambda c: "") -> int:
        """A ``WastedMove`` Event on the workload's owner for each wasted move the disruption ledger
        found (checked moves), rate-limited like the holds; ``backoffs`` says what back-off it
        started. Returns how many were posted."""
        groups: dict[tuple[str, str, str, str, str], list[CheckedMove]] = {}
        for c in checked:
            if not c.counts_as_wasted:
                continue
            kind, _, rest = c.workload.partition("/")
            namespace, _, name = rest.partition("/")
            groups.setdefault((kind, namespace, name, API_VERSIONS.get(kind, "v1"), WASTED), []).append(c)
        posted = 0
        now = self.clock()
        for (kind, namespace, name, api_version, reason), items in groups.items():
            pods = [c.pod for c in items]
            if not self._due((kind, namespace, name, reason), now):
                WHY_NOT.labels(reason, "suppressed").inc(len(items))
                _log("suppressed", reason, kind, namespace, name, pods)
                continue
            c = items[0]
            predicted = f"; predicted {c.destination}" if c.destination else ""
            note = (f"{c.strategy} moved {c.pod} off node {c.source} for nothing: {c.why}{predicted}"
                    f"{f' ({len(items)} such moves)' if len(items) > 1 else ''}. {backoffs(c)}".strip())
            posted += self._post(namespace, name, kind, api_version, reason, note, "WastedMove", pods)
        return posted

    def _post(self, namespace: str, name: str, kind: str, api_version: str, reason: str, note: str, action: str,
              pods: list[str]) -> int:
        """One Event, named for its object, reason and minute (cluster-wide rate limit): 1 if posted."""
        try:
            ok = self.post(namespace=namespace or "default", name=name, reason=reason, note=note, kind=kind,
                           api_version=api_version, action=action,
                           event_name=event_name(kind, namespace, name, reason, self.wall(), self.interval))
        except Conflict:  # the same Event this minute: another process posted it
            WHY_NOT.labels(reason, "suppressed").inc(len(pods))
            _log("exists", reason, kind, namespace, name, pods)
            return 0
        except ApiError:
            ok = False
        WHY_NOT.labels(reason, "lost" if ok is False else "posted").inc()
        _log("lost" if ok is False else "posted", reason, kind, namespace, name, pods)
        return 0 if ok is False else 1

    def _post_groups(self, groups: Iterable[tuple[tuple[str, str, str, str, str], list[Held]]]) -> int:
        posted = 0
        now = self.clock()
        for (kind, namespace, name, api_version, reason), items in groups:
            keys = [f"{h.pod.namespace}/{h.pod.name}" for h in items]
            if not self._due((kind, namespace, name, reason), now):
                WHY_NOT.labels(reason, "suppressed").inc(len(items))
                _log("suppressed", reason, kind, namespace, name, keys)
                continue
            pods = ", ".join(keys[:5])
            more = f" and {len(items) - 5} more" if len(items) > 5 else ""
            note = (f"{len(items)} eviction(s) held back ({pods}{more}): {items[0].reason}"
                    f" (at most one such Event per object and reason per {self.interval:g}s)")
            posted += self._post(namespace, name, kind, api_version, reason, note, "HoldBack", keys)
        return posted


def _log(outcome: str, reason: str, kind: str, namespace: str, name: str, pods: list[str]) -> None:
    """One line per object and reason: which held-back pods it answers for, and whether its Event
    was posted, suppressed (this process posted it within the interval), exists (another process
    posted it this minute) or lost. tests/realk8s/test_storm.py matches these with the holds."""
    log.info("why-not %s %s on %s %s/%s for %s", outcome, reason, kind, namespace, name, " ".join(pods))


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

A storm of node events must not become a storm of Events: the holds of one run are aggregated per
object and reason ("3 evictions held back: ..."), and at most one Event per object and reason is
posted per :data:`INTERVAL_SECONDS` (60 s) **per process** (each pod of a function and each
``serve`` replica keeps its own tally; the API server's own Event aggregation does not apply to
events.k8s.io Events with distinct names). What is not posted is counted in
``kdesched_why_not_events_total{outcome="suppressed"}``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import Counter

from kdesched.engine import RunReport
from kdesched.evictor.pacing import workload_of
from kdesched.model.records import Pod
from kdesched.reactor.metrics import REGISTRY

INTERVAL_SECONDS = 60.0
MAX_KEYS = 10000
NOWHERE, PACED, COOLDOWN, WINDOW, BUDGET, BRAKE, PDB = (
    "NowhereToGo", "Paced", "CoolDown", "DisruptionWindow", "DisruptionBudget", "HealthBrake", "PodDisruptionBudget")
API_VERSIONS = {"Deployment": "apps/v1", "ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
                "Job": "batch/v1", "CronJob": "batch/v1"}

WHY_NOT = Counter("kdesched_why_not_events_total", "\"Why not\" Events about evictions that were due and held back, "
                  "by reason and outcome: posted, suppressed (one per object and reason per minute per process), "
                  "lost (the API server did not take it).", ["reason", "outcome"], registry=REGISTRY)

Post = Callable[..., bool]  # KubeClient.create_event


@dataclass(frozen=True, slots=True)
class Held:
    """One eviction held back: the pod, the Event reason it maps to, and the report's reason string."""

    pod: Pod
    kind: str
    reason: str


def classify(reason: str, result: str = "", cause: str = "") -> str | None:
    """The Event reason of a hold-back (a report reason string, or an outcome), or None when it is
    not one this module reports (a rate limit, a limit of the policy, an error)."""
    if result == "paced":
        return PACED
    if result == "deferred":
        return BRAKE if cause == "health-brake" else WINDOW
    if result == "blocked":
        return PDB
    if reason.startswith("nowhere to go"):
        return NOWHERE
    if reason.startswith("cool-down"):
        return COOLDOWN
    if reason.startswith("budget:"):
        return BUDGET
    if "PodDisruptionBudget" in reason:
        return PDB
    return None


def held_back(report: RunReport) -> list[Held]:
    """Every eviction of the run that was due and held back, with its reason (refusals at planning
    time, then the outcomes ``paced``, ``deferred`` and ``blocked``)."""
    out: list[Held] = []
    for r in report.plan.refusals:
        kind = classify(r.reason)
        if kind is not None:
            out.append(Held(r.pod, kind, r.reason))
    for o in report.outcomes:
        kind = classify(o.message, o.result, o.cause)
        if kind is not None:
            out.append(Held(o.eviction.pod, kind, o.message))
    return out


class WhyNotEvents:
    """Posts the "why not" Events of each live run, aggregated and rate-limited (module docstring)."""

    def __init__(self, post: Post, *, interval: float = INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.post = post
        self.interval = interval
        self.clock = clock
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

    def run_done(self, report: RunReport, node: str | None) -> int:
        """Post the Events of one run (``node``: the node of a node event's run, else None).
        Returns how many were posted."""
        groups: dict[tuple[str, str, str, str, str], list[Held]] = {}
        for h in held_back(report):
            if node:
                target = ("Node", "", node, "v1")
            else:
                w = workload_of(h.pod)
                target = (w.kind, w.namespace, w.name, API_VERSIONS.get(w.kind, "v1")) if w is not None else (
                    "Pod", h.pod.namespace, h.pod.name, "v1")
            groups.setdefault((*target, h.kind), []).append(h)
        return self._post_groups(groups.items())

    def _post_groups(self, groups: Iterable[tuple[tuple[str, str, str, str, str], list[Held]]]) -> int:
        posted = 0
        now = self.clock()
        for (kind, namespace, name, api_version, reason), items in groups:
            if not self._due((kind, namespace, name, reason), now):
                WHY_NOT.labels(reason, "suppressed").inc(len(items))
                continue
            pods = ", ".join(f"{h.pod.namespace}/{h.pod.name}" for h in items[:5])
            more = f" and {len(items) - 5} more" if len(items) > 5 else ""
            note = (f"{len(items)} eviction(s) held back ({pods}{more}): {items[0].reason}"
                    f" (at most one such Event per {self.interval:g}s per kdesched process)")
            ok = self.post(namespace=namespace or "default", name=name, reason=reason, note=note, kind=kind,
                           api_version=api_version, action="HoldBack")
            WHY_NOT.labels(reason, "posted" if ok else "lost").inc()
            posted += bool(ok)
        return posted

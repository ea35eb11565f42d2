"""The randomized storm (issue 21, item 6): seeded node-event sequences, the processes that receive
them, and an invariant checker that samples the real control plane all the while.

Why: the single-event stories (test_serve.py, test_concurrent_moves.py) prove one promise at a
time. Real clusters send events together, redeliver them and fail half-way; the promises kdesched
makes (at most the allowance down, PDBs kept, each pod evicted once, never without somewhere to
go, every move finished) must hold under any interleaving. This module makes many interleavings
(one per seed), runs them against the shipped commands (``kdesched serve``; two instances of each
evicting function with the test playing the classifier), and checks the promises from outside,
through the admin API, never through kdesched's own reports.

Three parts:

* :func:`generate`: a seed -> a bounded sequence of node events (taint/untaint with a key no
  workload tolerates, cordon/uncordon, the label one workload requires via required node affinity,
  NotReady then Ready, node added), spaced 0-1.5 s. The generator keeps a model of the nodes and
  never makes the cluster unable to hold every workload (at least :data:`MIN_USABLE` usable nodes,
  :data:`MIN_GOLD` of them carrying the label the ``gold`` workload requires), and ends with every
  NotReady node Ready again.
* :func:`apply_event`: the writes kubectl, the kubelet and the node controller would make (this
  control plane runs no node lifecycle controller), returning the Node objects the API server
  stored, so the test can classify them with kdesched's own :class:`Classifier` (the real events).
* :class:`Checker`: a thread sampling pods and nodes every ~0.15 s (see its docstring for exactly
  what it checks), plus :func:`analyse_evictions` and :func:`misplaced` for the checks that need
  the whole run.

The kubelet stand-in keeps a pod Ready on a NotReady node and the storm never deletes a pod, so
every pod that is not Ready (a replacement starting, or Pending for lack of room) exists because
kdesched evicted one: any shortfall the checker sees is kdesched's.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from kdesched.evictor.reasons import Reason
from kdesched.reactor.events.classifier import Classifier, SemanticEvent
from kdesched.reactor.events.routing import LABELS_CHANGED, NODE_ADDED, NODE_READY, TAINTS_CHANGED
from kdesched.reactor.io.whynot import PACED
from kdesched.reactor.io.whynot import classify as why_not_kind

from tests.realk8s.cluster import Cluster, is_ready, node_obj, pdb_obj, workload_obj
from tests.realk8s.controlplane import ControlPlane, RawApi, now_rfc3339
from tests.realk8s.ledger_view import ledger_text
from tests.realk8s.serve_stories import NOT_READY, NS, REPO, UNSCHEDULABLE, free_port, node_path

NAMESPACE = "default"
STORM_TAINT = {"key": "storm.kdesched.dev/maintenance", "value": "true", "effect": "NoSchedule"}
GOLD = "storm.kdesched.dev/tier"  # the label the gold workload requires (required node affinity)
NODE_CPU_MILLI = 2000
INITIAL_NODES = 8
INITIAL_GOLD = 4
MIN_USABLE = 5  # usable nodes (Ready, uncordoned, not storm-tainted) the generator always keeps
MIN_GOLD = 2  # of which carry the gold label
MAX_ADDED = 2
MAX_GAP_SECONDS = 1.5
LEDGER = "the disruption ledger (records + commit Lease)"
REPORTING_CONTROLLER = "kdesched.dev/descheduler"
EVICTION_ACTION = "Descheduled"
NOT_EVICTIONS = frozenset({"EvictionPaced", "EvictionFailed"})  # kdesched Events that are not an eviction
FIRST_VIOLATIONS = 10


# -- the workloads ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One workload of the storm cluster (all in namespace ``default``, labelled ``app=<name>``)."""

    name: str
    kind: str
    replicas: int
    cpu_milli: int
    max_unavailable: str | None = None  # the kdesched.dev/max-unavailable annotation ("2", "50%")
    pdb_min_available: int | None = None
    pdb_max_unavailable: int | None = None
    gold: bool = False  # requires the GOLD label (required node affinity)

    @property
    def allowance(self) -> int:
        """kdesched's allowance for this workload, as kdesched.evictor.pacing computes it from
        spec.replicas (the default kdesched.safety.maxUnavailable is 1)."""
        raw = self.max_unavailable
        if raw is None:
            return 1
        if raw.endswith("%"):
            return max(1, self.replicas * int(raw[:-1]) // 100)
        return int(raw)

    @property
    def pdb_floor(self) -> int | None:
        """The fewest Ready pods the PDB allows (None: no PDB)."""
        if self.pdb_min_available is not None:
            return self.pdb_min_available
        if self.pdb_max_unavailable is not None:
            return self.replicas - self.pdb_max_unavailable
        return None

    def objects(self) -> list[dict[str, Any]]:
        extra: dict[str, Any] = {}
        if self.gold:
            extra["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": GOLD, "operator": "In", "values": ["gold"]}]}]}}}
        annotations = {"kdesched.dev/max-unavailable": self.max_unavailable} if self.max_unavailable else None
        out = [workload_obj(self.kind, self.name, self.replicas, NAMESPACE, annotations=annotations,
                            cpu=f"{self.cpu_milli}m", **extra)]
        if self.pdb_floor is not None:
            out.append(pdb_obj(self.name, {"app": self.name}, NAMESPACE, min_available=self.pdb_min_available,
                               max_unavailable=self.pdb_max_unavailable))
        return out


# 4.85 CPUs requested in all, on nodes of 2 CPUs: MIN_USABLE nodes hold them twice over.
WORKLOADS: tuple[WorkloadSpec, ...] = (
    WorkloadSpec("web", "Deployment", 6, 250, max_unavailable="50%", pdb_min_available=4),
    WorkloadSpec("api", "Deployment", 4, 300, pdb_max_unavailable=1),
    WorkloadSpec("cache", "StatefulSet", 3, 200, max_unavailable="2"),
    WorkloadSpec("gold", "Deployment", 3, 200, pdb_min_available=2, gold=True),
    WorkloadSpec("batch", "Deployment", 5, 150, max_unavailable="2"),
    WorkloadSpec("tiny", "Deployment", 2, 100),
)
BY_NAME: Mapping[str, WorkloadSpec] = {w.name: w for w in WORKLOADS}


def by_name(workloads: Iterable[WorkloadSpec]) -> dict[str, WorkloadSpec]:
    """The workloads of a storm by name: what :class:`Sample`, :func:`take_sample` and the checker
    take (the storm of test_storm.py uses :data:`WORKLOADS`; test_pool_storm.py its own hundred)."""
    return {w.name: w for w in workloads}


def setup_cluster(cp: ControlPlane, cluster: Cluster) -> list[str]:
    """The storm cluster: INITIAL_NODES nodes (the first INITIAL_GOLD labelled gold), the workloads
    and their PDBs, every pod Ready. Returns the node names."""
    names = [f"storm-{i}" for i in range(INITIAL_NODES)]
    for i, name in enumerate(names):
        cluster.create(node_obj(name, cpu=str(NODE_CPU_MILLI // 1000), labels={GOLD: "gold"} if i < INITIAL_GOLD else {}))
    for w in WORKLOADS:
        for obj in w.objects():
            cluster.create(obj)
    cluster.wait_running(NAMESPACE, sum(w.replicas for w in WORKLOADS), timeout=120)
    for w in WORKLOADS:
        if w.pdb_floor is not None:
            cluster.wait_pdb_observed(NAMESPACE, w.name)
    return names


# -- the generator --------------------------------------------------------------------------------
@dataclass
class NodeState:
    name: str
    gold: bool
    tainted: bool = False
    cordoned: bool = False
    ready: bool = True

    @property
    def usable(self) -> bool:
        return self.ready and not self.cordoned and not self.tainted

    def taints(self) -> list[dict[str, str]]:
        out = [dict(STORM_TAINT)] if self.tainted else []
        if self.cordoned:
            out.append(dict(UNSCHEDULABLE))
        if not self.ready:
            out += [dict(t) for t in NOT_READY]
        return out


@dataclass(frozen=True, slots=True)
class StormEvent:
    """One node event: wait ``gap`` seconds, then do ``kind`` to ``node``."""

    gap: float
    kind: str  # taint untaint cordon uncordon label unlabel notready ready add
    node: str
    gold: bool = False  # for "add": the new node carries the gold label

    def __str__(self) -> str:
        return f"+{self.gap:.2f}s {self.kind} {self.node}" + (" (gold)" if self.kind == "add" and self.gold else "")


def initial_model() -> dict[str, NodeState]:
    return {f"storm-{i}": NodeState(f"storm-{i}", gold=i < INITIAL_GOLD) for i in range(INITIAL_NODES)}


def acceptable(nodes: Mapping[str, NodeState]) -> bool:
    usable = [n for n in nodes.values() if n.usable]
    return len(usable) >= MIN_USABLE and sum(1 for n in usable if n.gold) >= MIN_GOLD


def step(nodes: dict[str, NodeState], ev: StormEvent) -> None:
    """Apply ``ev`` to the model."""
    if ev.kind == "add":
        nodes[ev.node] = NodeState(ev.node, gold=ev.gold)
        return
    n = nodes[ev.node]
    match ev.kind:
        case "taint" | "untaint":
            n.tainted = ev.kind == "taint"
        case "cordon" | "uncordon":
            n.cordoned = ev.kind == "cordon"
        case "label" | "unlabel":
            n.gold = ev.kind == "label"
        case "notready" | "ready":
            n.ready = ev.kind == "ready"
        case _:
            raise ValueError(f"unknown storm event kind {ev.kind!r}")


# how likely each kind of event is (per candidate node): taints, the main trigger, most
WEIGHTS = {"taint": 3.0, "untaint": 3.0, "cordon": 1.0, "uncordon": 1.5, "label": 1.0, "unlabel": 1.5,
           "notready": 0.7, "add": 4.0}


def generate(seed: int, count: int) -> tuple[StormEvent, ...]:
    """``count`` random node events for ``seed`` (plus the Ready events that end every NotReady
    spell), never leaving fewer than MIN_USABLE usable nodes or MIN_GOLD usable gold ones; at most
    one node NotReady at a time, recovered 1-4 events later; at most MAX_ADDED nodes added."""
    rng = random.Random(seed)
    nodes = initial_model()
    out: list[StormEvent] = []
    recover_at: dict[str, int] = {}
    added = 0
    while len(out) < count:
        gap = round(rng.uniform(0, MAX_GAP_SECONDS), 2)
        due = [n for n, i in recover_at.items() if i <= len(out)]
        if due:
            ev = StormEvent(gap, "ready", due[0])
            del recover_at[due[0]]
        else:
            options: list[StormEvent] = []
            for n in nodes.values():
                if not n.ready:
                    continue
                options.append(StormEvent(gap, "untaint" if n.tainted else "taint", n.name))
                options.append(StormEvent(gap, "uncordon" if n.cordoned else "cordon", n.name))
                options.append(StormEvent(gap, "unlabel" if n.gold else "label", n.name))
                if not recover_at:
                    options.append(StormEvent(gap, "notready", n.name))
            if added < MAX_ADDED:
                options.append(StormEvent(gap, "add", f"storm-{INITIAL_NODES + added}", gold=rng.random() < 0.5))
            options = [e for e in options if acceptable(_after(nodes, e))]
            ev = rng.choices(options, weights=[WEIGHTS[e.kind] for e in options])[0]
            if ev.kind == "notready":
                recover_at[ev.node] = len(out) + 1 + rng.randint(1, 4)
            if ev.kind == "add":
                added += 1
        step(nodes, ev)
        out.append(ev)
    for name in recover_at:  # every NotReady spell ends within the storm
        ev = StormEvent(round(rng.uniform(0, MAX_GAP_SECONDS), 2), "ready", name)
        step(nodes, ev)
        out.append(ev)
    return tuple(out)


def _after(nodes: Mapping[str, NodeState], ev: StormEvent) -> dict[str, NodeState]:
    copy = {k: NodeState(v.name, v.gold, v.tainted, v.cordoned, v.ready) for k, v in nodes.items()}
    step(copy, ev)
    return copy


def final_model(events: Iterable[StormEvent]) -> dict[str, NodeState]:
    nodes = initial_model()
    for ev in events:
        step(nodes, ev)
    return nodes


# -- applying an event to the cluster ---------------------------------------------------------------
def apply_event(api: RawApi, nodes: dict[str, NodeState], ev: StormEvent) -> list[tuple[str, dict[str, Any]]]:
    """Make the writes of ``ev`` and update the model. Returns (watch action, stored Node) per write,
    what an ApiServerSource would deliver to the classifier."""
    step(nodes, ev)
    n = nodes[ev.node]
    path = node_path(ev.node)
    writes: list[tuple[str, dict[str, Any]]] = []

    def taints() -> None:
        writes.append(("update", api.patch(path, {"spec": {"taints": n.taints() or None}})))

    def ready() -> None:
        stamp = now_rfc3339()
        writes.append(("update", api.patch(path + "/status", {"status": {"conditions": [{
            "type": "Ready", "status": "True" if n.ready else "False",
            "reason": "KubeletReady" if n.ready else "NodeStatusUnknown",
            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}, kind="strategic")))

    match ev.kind:
        case "add":
            writes.append(("add", api.create("/api/v1/nodes", node_obj(
                ev.node, cpu=str(NODE_CPU_MILLI // 1000), labels={GOLD: "gold"} if ev.gold else {}))))
        case "taint" | "untaint":
            taints()
        case "cordon" | "uncordon":  # kubectl, then the node controller's unschedulable taint
            writes.append(("update", api.patch(path, {"spec": {"unschedulable": n.cordoned or None}})))
            taints()
        case "label" | "unlabel":
            writes.append(("update", api.patch(path, {"metadata": {"labels": {GOLD: "gold" if n.gold else None}}})))
        case "notready":  # the kubelet stops posting, the node controller marks it and taints it
            ready()
            taints()
        case "ready":  # the kubelet is back, then the node controller lifts the not-ready taints
            ready()
            taints()
    return writes


# -- the sampled view of the cluster ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PodView:
    uid: str
    name: str
    app: str
    node: str
    ready: bool
    terminating: bool


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    ready: bool
    unschedulable: bool
    taints: tuple[tuple[str, str], ...]  # (key, effect)
    gold: bool
    cpu_milli: int

    def refuses(self, spec: WorkloadSpec) -> str:
        """Why the scheduler would not place a pod of ``spec`` here ("" = it could, room aside)."""
        if not self.ready:
            return "NotReady"
        if self.unschedulable:
            return "cordoned"
        if any(e in ("NoSchedule", "NoExecute") for _, e in self.taints):
            return "tainted"
        if spec.gold and not self.gold:
            return "no gold label"
        return ""


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # wall clock (time.time()), comparable with Event times
    pods: tuple[PodView, ...]
    nodes: Mapping[str, NodeView]
    ledger: str = ""  # the disruption ledger annotation read right after the pods and nodes
    workloads: Mapping[str, WorkloadSpec] = field(default_factory=lambda: BY_NAME)  # the storm's, by name

    def live(self, app: str) -> list[PodView]:
        return [p for p in self.pods if p.app == app and not p.terminating]

    def ready(self, app: str) -> int:
        return sum(1 for p in self.live(app) if p.ready)

    def used_milli(self, node: str) -> int:
        return sum(self.workloads[p.app].cpu_milli for p in self.pods if p.node == node)

    def fits_elsewhere(self, spec: WorkloadSpec, not_on: str) -> list[str]:
        """Nodes other than ``not_on`` where a pod of ``spec`` fits now (what the scheduler would take)."""
        return [n.name for n in self.nodes.values() if n.name != not_on and not n.refuses(spec)
                and n.cpu_milli - self.used_milli(n.name) >= spec.cpu_milli]

    def describe(self) -> str:
        """The cluster at this sample, compact: each workload's Ready/expected and where its pods run,
        and each node's state."""
        lines = []
        for w in self.workloads.values():
            pods = self.live(w.name)
            where = ", ".join(f"{p.name}@{p.node or 'Pending'}{'' if p.ready else '(not Ready)'}" for p in pods)
            lines.append(f"  {w.name}: {self.ready(w.name)}/{w.replicas} Ready (allowance {w.allowance}): {where}")
        for n in self.nodes.values():
            flags = [f for f, on in (("NotReady", not n.ready), ("cordoned", n.unschedulable), ("gold", n.gold)) if on]
            flags += [k for k, _ in n.taints]
            lines.append(f"  node {n.name} [{', '.join(flags)}] cpu {self.used_milli(n.name)}/{n.cpu_milli}m")
        return "\n".join(lines)


def _milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def take_sample(api: RawApi, workloads: Mapping[str, WorkloadSpec] = BY_NAME, *, ledger: bool = True) -> Sample:
    """Pods and nodes now, and (``ledger``) the disruption ledger read right after them."""
    at = time.time()
    pods = []
    for p in api.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
        app = str((p["metadata"].get("labels") or {}).get("app") or "")
        if app not in workloads or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        pods.append(PodView(p["metadata"]["uid"], p["metadata"]["name"], app, p["spec"].get("nodeName") or "",
                            is_ready(p), bool(p["metadata"].get("deletionTimestamp"))))
    nodes = {}
    for n in api.get("/api/v1/nodes")["items"]:
        cond = [c for c in (n.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"]
        nodes[n["metadata"]["name"]] = NodeView(
            n["metadata"]["name"], bool(cond) and cond[0].get("status") == "True", bool(n["spec"].get("unschedulable")),
            tuple((t["key"], t["effect"]) for t in n["spec"].get("taints") or ()),
            (n["metadata"].get("labels") or {}).get(GOLD) == "gold", _milli(n["status"]["allocatable"]["cpu"]))
    return Sample(at, tuple(pods), nodes, read_ledger(api) if ledger else "", workloads)


def read_ledger(api: RawApi) -> str:
    try:
        return ledger_text(api, NS) or "(no ledger)"
    except Exception as exc:  # noqa: BLE001 - a diagnostic only: the sample says why it has none
        return f"(ledger unreadable: {exc})"


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    at: float
    detail: str
    state: str = ""
    ledger: str = ""

    def __str__(self) -> str:
        out = f"[{self.invariant}] at {_clock(self.at)}: {self.detail}"
        if self.state:
            out += "\n" + self.state
        if self.ledger:
            out += f"\n  ledger {LEDGER}: {self.ledger}"
        return out


class Checker:
    """Samples pods and nodes every ``interval`` s in a thread and checks, on each sample:

    * **allowance**: every workload has Ready pods >= spec.replicas - its allowance (the
      ``kdesched.dev/max-unavailable`` annotation, else 1);
    * **PDB**: Ready pods matching each PDB's selector >= minAvailable (or replicas - maxUnavailable).

    Every sample is kept (:meth:`samples`) for the checks that need the whole run. Violations keep
    the sample time, the cluster state and the disruption ledger read at that moment (the first
    :data:`FIRST_VIOLATIONS`; the rest are counted)."""

    def __init__(self, cp: ControlPlane, interval: float = 0.15, workloads: Mapping[str, WorkloadSpec] = BY_NAME, *,
                 ledger: bool = True) -> None:
        self.api = RawApi(cp.url, cp.token, str(cp.ca_file))
        self.interval = interval
        self.workloads = workloads
        self.read_ledger = ledger  # False: the samples carry no ledger text (a big storm reads it apart)
        self.violations: list[Violation] = []
        self.more = 0  # violations beyond the first FIRST_VIOLATIONS
        self._samples: list[Sample] = []
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="storm-checker", daemon=True)

    def start(self) -> Checker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def add(self, v: Violation) -> None:
        with self._lock:
            if len(self.violations) < FIRST_VIOLATIONS:
                self.violations.append(v)
            else:
                self.more += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                sample = take_sample(self.api, self.workloads, ledger=self.read_ledger)
            except Exception:  # noqa: BLE001 - a failed sample is skipped (and counted), not a verdict
                self.errors += 1
                self._stop.wait(self.interval)
                continue
            with self._lock:
                self._samples.append(sample)
            self.check(sample)
            self._stop.wait(self.interval)

    def check(self, s: Sample) -> None:
        for v in sample_violations(s):
            self.add(v)


def sample_violations(s: Sample) -> list[Violation]:
    """The allowance and PDB invariants on one sample."""
    found = []
    for w in s.workloads.values():
        ready = s.ready(w.name)
        if ready < w.replicas - w.allowance:
            found.append(("allowance", (f"{w.kind} {w.name}: {ready} of {w.replicas} Ready, "
                                        f"{w.replicas - ready} unavailable > allowance {w.allowance}")))
        floor = w.pdb_floor
        if floor is not None and ready < floor:
            found.append(("pdb", f"PDB {w.name}: {ready} Ready < minimum {floor}"))
    return [Violation(invariant, s.at, detail, s.describe(), s.ledger) for invariant, detail in found]


# -- the whole-run checks ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Eviction:
    at: float
    uid: str
    pod: str
    app: str
    strategy: str
    node: str
    instance: str


def evictions(api: RawApi, uids: Mapping[str, PodView], since: float) -> list[Eviction]:
    """kdesched's eviction Events (events.k8s.io/v1, reportingController kdesched.dev/descheduler,
    action Descheduled, reason = the strategy) regarding a pod of this run."""
    out = []
    for e in api.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]:
        regarding = e.get("regarding") or {}
        if (e.get("reportingController") != REPORTING_CONTROLLER or e.get("action") != EVICTION_ACTION
                or e.get("reason") in NOT_EVICTIONS or regarding.get("uid") not in uids):
            continue
        at = datetime.fromisoformat(str(e["eventTime"])).timestamp()
        if at < since:
            continue
        pod = uids[regarding["uid"]]
        note = str(e.get("note") or "")
        node = note.split("from ", 1)[1].split(" node", 1)[0] if "from " in note else pod.node
        out.append(Eviction(at, pod.uid, f"{NAMESPACE}/{regarding.get('name')}", pod.app, str(e.get("reason")), node,
                            str(e.get("reportingInstance") or "")))
    return sorted(out, key=lambda e: e.at)


@dataclass(frozen=True, slots=True)
class EvictionFindings:
    violations: tuple[Violation, ...]
    excused: tuple[str, ...]  # replacements late because the storm removed the room after the eviction


def analyse_evictions(evs: Sequence[Eviction], samples: Sequence[Sample], who: Mapping[str, Sequence[str]],
                      bound_seconds: float = 15.0) -> EvictionFindings:
    """* **evicted twice**: two eviction Events for one pod uid.
    * **nowhere to go**: the evicted pod's workload did not have all spec.replicas pods bound to a
      node within ``bound_seconds`` of the eviction AND, in the last sample before the eviction,
      no other node could take the pod (Ready, uncordoned, no NoSchedule/NoExecute taint, the gold
      label if required, enough CPU left by the pods bound there). When the pod did fit then but
      the replacement still was not bound in time, the storm took the room away after the
      eviction: listed as excused, not a violation.

    ``who``: pod (namespace/name) -> the processes whose logs say they evicted it. A violation
    carries the ledger of the last sample before it and of the first one after."""
    found: list[Violation] = []
    excused: list[str] = []
    by_uid: dict[str, list[Eviction]] = {}
    for e in evs:
        by_uid.setdefault(e.uid, []).append(e)
    for uid, group in by_uid.items():
        if len(group) > 1:
            stamps = ", ".join(_clock(e.at) for e in group)
            found.append(Violation("evicted-twice", group[1].at, f"pod {group[0].pod} (uid {uid}) evicted "
                                   f"{len(group)} times ({stamps}, {group[0].strategy}); the logs of "
                                   f"{', '.join(who.get(group[0].pod, ())) or 'no process'} say they evicted it",
                                   ledger=_ledgers_around(samples, group[0].at, group[-1].at)))
    for e in evs:
        before = [s for s in samples if s.at <= e.at]
        after = [s for s in samples if e.at < s.at <= e.at + bound_seconds]
        if not before or not after:
            continue
        spec = before[-1].workloads[e.app]
        replaced = any(sum(1 for p in s.live(e.app) if p.node) >= spec.replicas and
                       all(p.uid != e.uid for p in s.live(e.app)) for s in after)
        if replaced:
            continue
        room = before[-1].fits_elsewhere(spec, e.node)
        if room:
            excused.append(f"{e.pod} evicted from {e.node} at {e.at:.2f}: fitted {', '.join(room)} then, replacement "
                           f"not bound within {bound_seconds:g}s")
        else:
            found.append(Violation("nowhere-to-go", e.at, f"{e.pod} ({e.strategy}) evicted from {e.node}: no other node "
                                   f"could take it in the last sample before, and its replacement was not bound within "
                                   f"{bound_seconds:g}s", before[-1].describe(), _ledgers_around(samples, e.at, e.at)))
    return EvictionFindings(tuple(found), tuple(excused))


# -- "why not" Events: every held-back eviction has one, at most one per object, reason and minute ----------
HOLD_LINE = re.compile(r"kdesched\.evictor: not evicting (\S+) \([^)]*\) \[([\w-]+)\]: (.*)$")  # planner refusals
PACE_LINE = re.compile(r"kdesched\.evictor: pacing (\S+) from \S+ \([^)]*\): (.*)$")  # paced outcomes
FAIL_LINE = re.compile(r"kdesched\.evictor: could not evict (\S+) from \S+ \([^)]*\) \[([\w-]+)\]: (.*)$")  # blocked...
WHY_NOT_LINE = re.compile(r"kdesched\.reactor\.whynot: why-not (\w+) (\w+) on (\w+) (\S*)/(\S+) for (.*)$")
WHY_NOT_ACTIONS = frozenset({"HoldBack", "WastedMove"})
REASONS = frozenset(r.value for r in Reason)


@dataclass(frozen=True, slots=True)
class WhyNotEvent:
    at: float
    kind: str  # of the object it regards
    name: str
    reason: str
    instance: str


def why_not_events(api: RawApi, since: float) -> list[WhyNotEvent]:
    """kdesched's "why not" Events (action HoldBack or WastedMove) posted since ``since``."""
    out = []
    for e in api.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]:
        if e.get("reportingController") != REPORTING_CONTROLLER or e.get("action") not in WHY_NOT_ACTIONS:
            continue
        at = datetime.fromisoformat(str(e["eventTime"])).timestamp()
        if at >= since:
            regarding = e.get("regarding") or {}
            out.append(WhyNotEvent(at, str(regarding.get("kind")), str(regarding.get("name")), str(e.get("reason")),
                                   str(e.get("reportingInstance") or "")))
    return sorted(out, key=lambda e: e.at)


@dataclass(frozen=True, slots=True)
class WhyNotFindings:
    violations: tuple[Violation, ...]
    held: int  # held-back evictions the logs show (pod and reason, per process)
    answered: dict[str, int]  # why-not log lines by outcome (posted, suppressed, exists, lost)
    closest: float | None  # the least time between two Events of one object and reason
    reasoned: int = 0  # held pods whose Event gives the decision's reason, not the one first logged
    gone: int = 0  # held pods another process had evicted just before: held no more, no Event owed


EVICTED_BY_LINE = re.compile(r"kdesched\.evictor: evicted (\S+) from ")
GONE_SECONDS = 2.0
"""How long before a hold line an eviction of the same pod makes the hold moot: a process judged,
on a snapshot read a moment before, a pod another process had just evicted (its run's decision
then finds it terminating or in flight elsewhere, and rightly posts nothing). Short, so that a
StatefulSet pod's namesake made later is still owed its Event."""


def _line_time(line: str) -> float | None:
    """The time at the start of a kdesched log line ("2026-11-30 01:25:27,631 INFO ..."), or None."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def analyse_why_not(logs: Mapping[str, str], events: Sequence[WhyNotEvent], at: float) -> WhyNotFindings:
    """* **why-not-missing**: a process logged an eviction it held back for a reason the "why not"
      Events report (the planner's "not evicting" refusals, the "pacing" of paced outcomes, the
      refusals of the Eviction API) and never logged a "why-not" line for that pod (for that
      reason, or for the reason the run's decision gave in the end: a node run's probe plans
      without the gate and logs its refusals too): the held-back eviction has no Event, posted
      or rate-limited. Not owed: a pod another process had evicted up to :data:`GONE_SECONDS`
      before the hold line (this process judged it on a snapshot read a moment before; its
      decision then finds it gone, and posts nothing);
    * **why-not-lost**: the API server did not take one;
    * **why-not-unposted**: a line says the Event was suppressed (this process posted it within
      the minute) or exists (another process posted it this minute) but there is no such Event;
    * **why-not-rate**: two Events regarding one object for one reason in the same clock minute
      (the cluster-wide limit; processes posting in turn without it would break it).
    ``at``: when the checks ran (the violations' time)."""
    found: list[Violation] = []
    held_total = reasoned = gone_total = 0
    answered: Counter[str] = Counter()
    posted_keys = {(e.kind, e.name, e.reason) for e in events}
    evicted_at: dict[str, list[float]] = {}  # pod -> when a process logged evicting it (any process)
    for text in logs.values():
        for line in text.splitlines():
            if (m := EVICTED_BY_LINE.search(line)) and (t := _line_time(line)) is not None:
                evicted_at.setdefault(m.group(1), []).append(t)
    for process, text in logs.items():
        held: dict[tuple[str, str], str] = {}
        held_at: dict[tuple[str, str], float] = {}
        covered: set[tuple[str, str]] = set()
        answered_pods: set[str] = set()
        for line in text.splitlines():
            if m := HOLD_LINE.search(line):
                kind = Reason(m.group(2)).event if m.group(2) in REASONS else None
                if kind is not None:
                    held.setdefault((m.group(1), kind), m.group(3))
                    held_at.setdefault((m.group(1), kind), _line_time(line) or 0.0)
            elif m := FAIL_LINE.search(line):
                kind = why_not_kind(Reason.OTHER, m.group(2))  # blocked by a PDB: an Event; throttled, failed: none
                if kind is not None:
                    held.setdefault((m.group(1), kind), m.group(3))
            elif m := PACE_LINE.search(line):
                held.setdefault((m.group(1), PACED), m.group(2))
            elif m := WHY_NOT_LINE.search(line):
                outcome, reason, kind, _, name, pods = m.groups()
                answered[outcome] += 1
                covered |= {(pod, reason) for pod in pods.split()}
                answered_pods |= set(pods.split())
                if outcome == "lost":
                    found.append(Violation("why-not-lost", at, f"{process}: the {reason} Event on {kind} {name} was "
                                           "not taken by the API server"))
                elif outcome in ("suppressed", "exists") and (kind, name, reason) not in posted_keys:
                    found.append(Violation("why-not-unposted", at, f"{process}: the {reason} Event on {kind} {name} "
                                           f"was {outcome} but no such Event exists"))
        held_total += len(held)
        # a refusal logged while planning that the run's decision then gave another reason for
        # (a node run's probe plans the node's pods without the gate: "PodDisruptionBudget ... allows
        # 0", then the decision says "cool-down"): the pod's Event carries the decision's reason
        other = {k for k in set(held) - covered if k[0] in answered_pods}
        reasoned += len(other)
        # a pod another process had evicted just before this one judged it (GONE_SECONDS)
        gone = {k for k in set(held) - covered - other if k in held_at and any(
            0.0 <= held_at[k] - t <= GONE_SECONDS for t in evicted_at.get(k[0], ()))}
        gone_total += len(gone)
        missing = sorted(set(held) - covered - other - gone)
        if missing:
            shown = "; ".join(f"{pod} {kind} ({held[(pod, kind)][:100]})" for pod, kind in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            found.append(Violation("why-not-missing", at, f"{process}: {len(missing)} held-back eviction(s) without a "
                                   f"\"why not\" Event: {shown}{more}"))
    by_key: dict[tuple[str, str, str], list[WhyNotEvent]] = {}
    for e in events:
        by_key.setdefault((e.kind, e.name, e.reason), []).append(e)
    closest: float | None = None
    for (kind, name, reason), group in by_key.items():
        for a, b in pairwise(group):
            gap = b.at - a.at
            closest = gap if closest is None else min(closest, gap)
            if int(a.at // 60) == int(b.at // 60):
                found.append(Violation("why-not-rate", b.at, f"two {reason} Events on {kind} {name} in one minute: "
                                       f"{_clock(a.at)} ({a.instance}) and {_clock(b.at)} ({b.instance})"))
    return WhyNotFindings(tuple(found), held_total, dict(answered), closest, reasoned, gone_total)


def _ledgers_around(samples: Sequence[Sample], first: float, last: float) -> str:
    """The ledger of the last sample at or before ``first`` and of the first sample after ``last``."""
    before = [s for s in samples if s.at <= first]
    after = [s for s in samples if s.at > last]
    parts = [f"\n    {what} ({_clock(s.at)}): {s.ledger}" if s else f"\n    {what}: (no sample)"
             for what, s in (("before", before[-1] if before else None), ("after", after[0] if after else None))]
    return "".join(parts)


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3]


def evicted_by(logs: Mapping[str, str], evs: Iterable[Eviction]) -> dict[str, list[str]]:
    """pod -> the processes (label -> log text) that logged evicting it (kdesched.evictor's
    "evicted NAMESPACE/NAME from NODE" line): the Events' reportingInstance is the host name,
    the same for every process here."""
    out: dict[str, list[str]] = {}
    for e in evs:
        needle = f"evicted {e.pod} from "
        out[e.pod] = [label for label, text in logs.items() for _ in range(text.count(needle))]
    return out


def misplaced(s: Sample) -> list[str]:
    """Pods that must move: on a node with a NoSchedule taint they do not tolerate (the storm's), or
    on a node without the label their required node affinity needs, when another node could take them."""
    out = []
    for p in s.pods:
        if p.terminating or not p.node or p.node not in s.nodes:
            continue
        spec, node = s.workloads[p.app], s.nodes[p.node]
        why = ("tainted " + STORM_TAINT["key"] if any(k == STORM_TAINT["key"] for k, _ in node.taints) else
               "no gold label" if spec.gold and not node.gold else "")
        if why and s.fits_elsewhere(spec, p.node):
            out.append(f"{p.name} on {p.node} ({why})")
    return out


def settled(s: Sample) -> bool:
    return not misplaced(s) and all(s.ready(w.name) == w.replicas and len(s.live(w.name)) == w.replicas
                                    for w in s.workloads.values())


# -- the processes -------------------------------------------------------------------------------------
def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBERNETES_SERVICE_HOST", "POD_NAMESPACE", "KDESCHED_LEASE_NAMESPACE", "KUBECONFIG",
                        "KDESCHED_POLICY", "KDESCHED_DRY_RUN", "KDESCHED_CACHE")}
    env.update(extra)
    return env


@dataclass
class FunctionProc:
    """One ``kdesched function NAME`` process, configured as knative/base/services.yaml configures
    the Service's container (KDESCHED_POLICY, KDESCHED_LEASE_NAME/NAMESPACE), with the admin
    kubeconfig in $KUBECONFIG (the function's API client reads it outside a cluster)."""

    name: str
    instance: int
    kubeconfig: Path
    policy: Path
    workdir: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def label(self) -> str:
        return f"{self.name}-{self.instance}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> FunctionProc:
        self.port = self.port or free_port()
        self.starts += 1
        log = open(self.workdir / f"{self.label}.log", "ab")  # noqa: SIM115 - the child keeps it
        env = clean_env(KDESCHED_DRY_RUN="false", KDESCHED_POLICY=str(self.policy), KDESCHED_LEASE_NAME="kdesched",
                        KDESCHED_LEASE_NAMESPACE=NS, KUBECONFIG=str(self.kubeconfig), LOG_FORMAT="text")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kdesched", "function", self.name, "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO), start_new_session=True)
        log.close()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"function {self.label} exited:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"function {self.label} not ready after {timeout}s:\n{self.log()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: a crash half-way (no drain, no reply to the requests in progress)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        path = self.workdir / f"{self.label}.log"
        return path.read_text(errors="replace") if path.exists() else ""


ROUTES = {NODE_ADDED: "rebalance", NODE_READY: "rebalance", TAINTS_CHANGED: "taints", LABELS_CHANGED: "affinity"}


class Deliverer:
    """Plays the broker for the functions: each semantic event goes to BOTH instances of its function
    at once (two runs of one event, concurrently), each delivery retried on 429/5xx/refused
    connection with back-off as a Trigger's delivery.retry would, and some events (``redeliver``
    of them, seeded) are delivered once more, 1-4 s later, to one of the instances."""

    def __init__(self, functions: Mapping[str, Sequence[FunctionProc]], rng: random.Random, *,
                 redeliver: float = 0.35, attempts: int = 8) -> None:
        self.functions = functions
        self.rng = rng
        self.redeliver = redeliver
        self.attempts = attempts
        self.pool = ThreadPoolExecutor(max_workers=24, thread_name_prefix="storm-deliver")
        self.statuses: Counter[str] = Counter()
        self.futures: list[Future[None]] = []
        self.redeliveries = 0
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []

    def dispatch(self, ev: SemanticEvent) -> None:
        targets = self.functions[ROUTES[ev.type]]
        for t in targets:
            self._submit(t, ev)
        if self.rng.random() < self.redeliver:
            again = self.rng.choice(list(targets))
            timer = threading.Timer(self.rng.uniform(1, 4), self._submit, (again, ev))
            timer.daemon = True
            timer.start()
            self._timers.append(timer)
            self.redeliveries += 1

    def _submit(self, target: FunctionProc, ev: SemanticEvent) -> None:
        with self._lock:
            self.futures.append(self.pool.submit(self._deliver, target, ev))

    def _deliver(self, target: FunctionProc, ev: SemanticEvent) -> None:
        body = json.dumps(dict(ev.data)).encode()
        headers = {"ce-specversion": "1.0", "ce-id": ev.id, "ce-source": "/storm/classifier", "ce-type": ev.type,
                   "ce-subject": ev.node, "content-type": "application/json"}
        delay = 0.5
        for _ in range(self.attempts):
            status = "refused"
            try:
                req = urllib.request.Request(target.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=120) as resp:
                    status = str(resp.status)
            except urllib.error.HTTPError as err:
                status = str(err.code)
            except OSError:
                status = "refused"
            with self._lock:
                self.statuses[f"{target.name} {status}"] += 1
            if status in ("200", "202", "400"):
                return
            time.sleep(delay)
            delay = min(4.0, delay * 2)

    def drain(self, timeout: float) -> bool:
        """Wait for every delivery (redeliveries included); False if some were still going."""
        deadline = time.monotonic() + timeout
        for t in list(self._timers):
            t.join(max(0.0, deadline - time.monotonic()))
        while True:
            with self._lock:
                pending = [f for f in self.futures if not f.done()]
            if not pending:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)


# -- one seed ------------------------------------------------------------------------------------------
@dataclass
class SeedResult:
    seed: int
    mode: str
    events: tuple[StormEvent, ...]
    semantic: Counter[str] = field(default_factory=Counter)
    faults: list[str] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    more_violations: int = 0
    excused: tuple[str, ...] = ()
    samples: int = 0
    settled_after: float | None = None  # seconds after the last storm write
    bound: float = 0.0
    deliveries: Mapping[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        by_strategy = Counter(e.strategy for e in self.evictions)
        lines = [f"storm seed {self.seed} ({self.mode}): {len(self.events)} events, {sum(self.semantic.values())} "
                 f"semantic ({dict(self.semantic)}), {len(self.evictions)} evictions {dict(by_strategy)}, "
                 f"{self.samples} samples, settled "
                 + (f"{self.settled_after:.1f}s after the last event" if self.settled_after is not None else "NEVER")
                 + f" (bound {self.bound:g}s), {len(self.violations) + self.more_violations} violation(s)",
                 "  events: " + "; ".join(str(e) for e in self.events)]
        if self.faults:
            lines.append("  faults: " + "; ".join(self.faults))
        if self.deliveries:
            lines.append("  deliveries: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.deliveries.items())))
        lines.append("  evictions: " + "; ".join(f"{e.pod}@{e.node} {e.strategy}" for e in self.evictions))
        lines += [f"  excused (room removed after the eviction): {x}" for x in self.excused]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [str(v) for v in self.violations]
        if self.more_violations:
            lines.append(f"  ... and {self.more_violations} more violation(s)")
        return "\n".join(lines)


def report(result: SeedResult, workdir: Path) -> str:
    """Print the seed's summary; with KDESCHED_STORM_REPORT=FILE also append it to FILE and keep the
    processes' logs in FILE.logs/MODE-SEED/ (pytest's own temporary directories are rotated away)."""
    text = result.summary()
    print("\n" + text)
    path = os.environ.get("KDESCHED_STORM_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n\n")
        keep = Path(f"{path}.logs") / f"{result.mode.split()[0]}-{result.seed}"
        keep.mkdir(parents=True, exist_ok=True)
        for log in workdir.glob("*.log"):
            shutil.copy(log, keep / log.name)
    return text


def run_storm(api: RawApi, events: Sequence[StormEvent], *,
              on_writes: Callable[[int, list[tuple[str, dict[str, Any]]]], None],
              fault_at: int | None, fault: Callable[[], str] | None, result: SeedResult) -> float:
    """Apply ``events`` (with their gaps), hand each write to ``on_writes``, inject ``fault`` before
    event ``fault_at``. Returns the wall time of the last write."""
    nodes = initial_model()
    last = time.time()
    for i, ev in enumerate(events):
        time.sleep(ev.gap)
        if fault is not None and i == fault_at:
            result.faults.append(fault())
        writes = apply_event(api, nodes, ev)
        last = time.time()
        on_writes(i, writes)
    return last


def wait_settled(checker: Checker, since: float, bound: float) -> float | None:
    """Seconds after ``since`` when a sample first showed nothing left to move and every workload
    whole (every pod Ready), or None when that did not happen within ``bound``."""
    deadline = since + bound
    while time.time() < deadline:
        s = checker.latest()
        if s is not None and s.at > since and settled(s):
            return s.at - since
        time.sleep(0.3)
    return None


def classify(classifier: Classifier, writes: Iterable[tuple[str, dict[str, Any]]]) -> list[SemanticEvent]:
    out: list[SemanticEvent] = []
    for action, obj in writes:
        out += classifier.observe(action, obj)
    return out


def seeds_from_env(default: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """KDESCHED_STORM_SEEDS="serve=1,2,3;functions=4,5" (either part may be left out), else
    KDESCHED_STORM=long (10 seeds: 6 against serve, 4 against the functions), else ``default``."""
    raw = os.environ.get("KDESCHED_STORM_SEEDS", "").strip()
    if raw:
        out: dict[str, list[int]] = {"serve": [], "functions": []}
        for part in raw.split(";"):
            mode, _, seeds = part.partition("=")
            mode = mode.strip()
            if mode not in out:
                raise ValueError(f"KDESCHED_STORM_SEEDS: unknown mode {mode!r} (serve or functions): {raw!r}")
            out[mode] = [int(s) for s in seeds.split(",") if s.strip()]
        return out
    if os.environ.get("KDESCHED_STORM", "").strip().lower() == "long":
        return {"serve": list(range(1, 7)), "functions": list(range(101, 105))}
    return {k: list(v) for k, v in default.items()}


def event_count() -> int:
    return 32 if os.environ.get("KDESCHED_STORM", "").strip().lower() == "long" else 20


def pods_by_uid(samples: Iterable[Sample]) -> dict[str, PodView]:
    out: dict[str, PodView] = {}
    for s in samples:
        for p in s.pods:
            out.setdefault(p.uid, p)
    return out

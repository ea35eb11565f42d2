"""The randomized storm at cluster scale (issue 28, item 7): node pools tainted and lifted under a
hundred workloads, on the real control plane.

Why: test_storm.py throws many kinds of node events at 8 nodes and 6 workloads; what 0.1 got wrong
only showed on a cluster of real size (a pool maintenance crawled behind per-namespace buckets and
node cool-downs; the ledger, one annotation, passed the API server's 256 KiB limit). This module
makes the maintenances an operator makes: whole pools of nodes tainted at once (each write of a
pool's nodes concurrent), several pools over a run and sometimes two at once, lifted again, plus a
few single-node taints; the checker of storm.py (generalised to any set of workloads) watches the
promises from outside.

* :func:`pool_workloads`: the hundred workloads (fixed, not per seed): Deployments of 2-5 replicas
  with varied ``kdesched.dev/max-unavailable`` annotations and PDBs, every twelfth a StatefulSet;
  50m or 100m each, about 25 CPUs in all, so that one pool of 10 nodes of 4 CPUs holds them all:
  the cluster has room for every workload with two pools tainted;
* :func:`generate`: a seed -> pool and node events, spaced so that each pool maintenance is under
  way when the next event comes; never all three pools tainted, never less usable CPU than
  :data:`ROOM_FACTOR` times what the workloads request;
* :func:`apply_event`: the writes (a pool's ten node patches at once, from a thread pool);
* :class:`LedgerWatch`: the ledger's objects (records and commit Lease) listed every second: the
  largest object in bytes and the most records at once.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tests.realk8s.cluster import Cluster, node_obj
from tests.realk8s.controlplane import ControlPlane, RawApi
from tests.realk8s.serve_stories import NS, node_path
from tests.realk8s.storm import NAMESPACE, STORM_TAINT, WorkloadSpec

POOLS = ("a", "b", "c")
NODES_PER_POOL = 10
NODE_CPU_MILLI = 4000
POOL_LABEL = "pool"
WORKLOAD_COUNT = 100
WORKLOAD_SEED = 28  # the workloads are one fixed set: a storm seed changes the events only
ROOM_FACTOR = 1.3  # usable CPU (untainted nodes) always >= this times the CPU the workloads request
MAX_SINGLE = 2  # single nodes tainted (outside the tainted pools) at once
LEDGER_LABEL = "kdesched.dev/ledger"
RECORD_LIMIT_BYTES = 192 * 1024  # the documented bound of one ledger object (docs/design.md)


def pool_nodes(pool: str) -> list[str]:
    return [f"pool{pool}-{i}" for i in range(NODES_PER_POOL)]


ALL_NODES = [n for p in POOLS for n in pool_nodes(p)]
POOL_OF = {n: p for p in POOLS for n in pool_nodes(p)}


def pool_workloads(count: int = WORKLOAD_COUNT, seed: int = WORKLOAD_SEED) -> tuple[WorkloadSpec, ...]:
    """``count`` workloads named ``w000``..: Deployments of 2-5 replicas (every twelfth a
    StatefulSet of 2-4), the allowance by annotation (none: 1; "1", "2", "50%", "25%") and a PDB
    on about half (minAvailable replicas-1, or maxUnavailable 1)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        sts = i % 12 == 11
        replicas = rng.randint(2, 4) if sts else rng.randint(2, 5)
        annotation = rng.choice((None, None, None, "1", "2", "50%", "25%"))
        pdb = rng.choice(("none", "none", "min", "max"))
        out.append(WorkloadSpec(
            f"w{i:03d}", "StatefulSet" if sts else "Deployment", replicas, rng.choice((50, 100)),
            max_unavailable=annotation,
            pdb_min_available=replicas - 1 if pdb == "min" else None,
            pdb_max_unavailable=1 if pdb == "max" else None))
    return tuple(out)


def requested_milli(workloads: Iterable[WorkloadSpec]) -> int:
    return sum(w.replicas * w.cpu_milli for w in workloads)


def setup_cluster(cp: ControlPlane, cluster: Cluster, workloads: Iterable[WorkloadSpec], *,
                  timeout: float = 300) -> None:
    """Three pools of nodes (label ``pool=a|b|c``), the workloads and their PDBs (created from four
    threads), every pod Ready and every PDB's status computed."""
    workloads = list(workloads)
    for n in ALL_NODES:
        cluster.create(node_obj(n, cpu=str(NODE_CPU_MILLI // 1000), labels={POOL_LABEL: POOL_OF[n]}))
    objects = [o for w in workloads for o in w.objects()]
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(cluster.create, objects))
    cluster.wait_running(NAMESPACE, sum(w.replicas for w in workloads), timeout=timeout)
    for w in workloads:
        if w.pdb_floor is not None:
            cluster.wait_pdb_observed(NAMESPACE, w.name, timeout=60)


# -- the generator ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PoolEvent:
    """Wait ``gap`` seconds, then ``kind`` (taint-pool, lift-pool, taint-node, lift-node) ``target``
    (a pool's letter or a node's name)."""

    gap: float
    kind: str
    target: str

    def __str__(self) -> str:
        return f"+{self.gap:.1f}s {self.kind} {self.target}"


@dataclass
class Model:
    pools: set[str] = field(default_factory=set)  # tainted pools
    nodes: set[str] = field(default_factory=set)  # single nodes tainted on their own

    def tainted(self, node: str) -> bool:
        return POOL_OF[node] in self.pools or node in self.nodes

    def usable_milli(self) -> int:
        return sum(NODE_CPU_MILLI for n in ALL_NODES if not self.tainted(n))

    def copy(self) -> Model:
        return Model(set(self.pools), set(self.nodes))

    def step(self, ev: PoolEvent) -> None:
        match ev.kind:
            case "taint-pool":
                self.pools.add(ev.target)
            case "lift-pool":
                self.pools.discard(ev.target)
            case "taint-node":
                self.nodes.add(ev.target)
            case "lift-node":
                self.nodes.discard(ev.target)
            case _:
                raise ValueError(f"unknown pool storm event {ev.kind!r}")

    def nodes_of(self, ev: PoolEvent) -> list[str]:
        """The nodes an event writes."""
        return pool_nodes(ev.target) if ev.kind.endswith("-pool") else [ev.target]


WEIGHTS = {"taint-pool": 4.0, "lift-pool": 3.0, "taint-node": 1.0, "lift-node": 1.5}


def generate(seed: int, count: int, requested: int) -> tuple[PoolEvent, ...]:
    """``count`` events for ``seed``: the first taints a pool; after a pool event the next comes
    6-18 s later (the maintenance under way: sometimes a second pool is tainted before the first is
    drained, or lifted half-way), after a node event 0.5-4 s. Never all pools tainted, never fewer
    usable millicores than ROOM_FACTOR x ``requested``, at most MAX_SINGLE single nodes tainted."""
    rng = random.Random(seed)
    model = Model()
    out: list[PoolEvent] = []
    gap = round(rng.uniform(0.5, 2.0), 1)
    while len(out) < count:
        options: list[PoolEvent] = []
        for p in POOLS:
            options.append(PoolEvent(gap, "lift-pool" if p in model.pools else "taint-pool", p))
        if len(model.nodes) < MAX_SINGLE:
            options += [PoolEvent(gap, "taint-node", n) for n in ALL_NODES
                        if not model.tainted(n)]
        options += [PoolEvent(gap, "lift-node", n) for n in sorted(model.nodes)]
        if not out:
            options = [e for e in options if e.kind == "taint-pool"]
        options = [e for e in options if _acceptable(model, e, requested)]
        weights = [WEIGHTS[e.kind] / (NODES_PER_POOL if e.kind.endswith("-node") else 1) for e in options]
        ev = rng.choices(options, weights=weights)[0]
        model.step(ev)
        out.append(ev)
        gap = round(rng.uniform(6, 18), 1) if ev.kind.endswith("-pool") else round(rng.uniform(0.5, 4), 1)
    return tuple(out)


def _acceptable(model: Model, ev: PoolEvent, requested: int) -> bool:
    after = model.copy()
    after.step(ev)
    return len(after.pools) < len(POOLS) and after.usable_milli() >= ROOM_FACTOR * requested


def final_model(events: Iterable[PoolEvent]) -> Model:
    model = Model()
    for ev in events:
        model.step(ev)
    return model


def apply_event(api: RawApi, model: Model, ev: PoolEvent) -> list[tuple[str, dict[str, Any]]]:
    """Make ``ev``'s writes (a pool's nodes patched at once, from a thread pool) and update the model.
    Returns (watch action, stored Node) per write: what an ApiServerSource would deliver."""
    model.step(ev)
    nodes = model.nodes_of(ev)

    def write(node: str) -> tuple[str, dict[str, Any]]:
        stored: dict[str, Any] = api.patch(node_path(node), {"spec": {
            "taints": [dict(STORM_TAINT)] if model.tainted(node) else None}})
        return "update", stored

    with ThreadPoolExecutor(min(8, len(nodes))) as ex:
        return list(ex.map(write, nodes))


# -- the ledger's objects ----------------------------------------------------------------------------------
class LedgerWatch:
    """Lists kdesched's Leases every ``interval`` s in a thread: the largest ledger object (a workload
    record or the commit Lease) as JSON bytes, which one, and the most workload records at once."""

    def __init__(self, cp: ControlPlane, interval: float = 1.0, lease: str = "kdesched") -> None:
        self.api = RawApi(cp.url, cp.token, str(cp.ca_file))
        self.interval = interval
        self.lease = lease
        self.largest = 0
        self.largest_name = ""
        self.most_records = 0
        self.reads = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pool-storm-ledger", daemon=True)

    def start(self) -> LedgerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
        while not self._stop.is_set():
            try:
                items = self.api.get(path)["items"]
            except Exception:  # noqa: BLE001 - a failed read is counted, not a verdict
                self.errors += 1
                self._stop.wait(self.interval)
                continue
            self.observe(items)
            self._stop.wait(self.interval)

    def observe(self, items: Iterable[Mapping[str, object]]) -> None:
        """One listing of the Leases of kdesched's namespace (public for the checker's own test)."""
        self.reads += 1
        records = 0
        for o in items:
            meta = o.get("metadata") or {}
            assert isinstance(meta, Mapping)
            labels = meta.get("labels") or {}
            name = str(meta.get("name"))
            is_record = isinstance(labels, Mapping) and labels.get(LEDGER_LABEL) == self.lease
            if not is_record and name != f"{self.lease}-ledger":
                continue
            records += is_record
            size = len(json.dumps(o, separators=(",", ":")))
            if size > self.largest:
                self.largest, self.largest_name = size, name
        self.most_records = max(self.most_records, records)


def wait_until(check: object, timeout: float) -> bool:
    """Poll ``check`` (a callable) every 0.3 s until truthy or ``timeout``."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return False

"""Where the disruption ledger lives: one small Lease per workload being moved, committed through one
small Lease, with optimistic concurrency.

Why: every evicting run of every process (several pods of the ``taints`` function, ``rebalance``
and ``affinity`` beside it, a revision rollout, ``serve`` replicas around a leader change) must
admit its evictions against the same state, atomically. Until 0.1 that state was one annotation
of the run Lease, and the API server refuses an object's annotations over 256 KiB (422): 50
Deployments under 20 tainted nodes already needed about 262 kB, and past it every run failed. Now
no object grows with the cluster or the maintenance:

* a **workload record** per workload kdesched is moving or has just moved (a Lease named
  ``<lease>-w-<hash of the workload key>``, labelled ``kdesched.dev/ledger=<lease>``): its move (in
  flight, held, lingering), its cool-down, the node cool-downs its evictions started, its wasted-move
  back-offs (:class:`~kdesched.evictor.ledger.WorkloadRecord`, bounded by the workload). A record
  whose move has ended and whose cool-downs have run out is deleted by the next write;
* the **commit record** (the Lease ``<lease>-ledger``): the health brake's last unhealthy time and
  the cluster-wide eviction bucket, a few hundred bytes, and the point every admission commits at.

A run reads the commit record, then LISTs the workload records (so it sees every record a
committed run wrote), and plans on their union (:meth:`Ledger.join`). It writes each workload
record it changes on the ``resourceVersion`` it read (409: someone changed that workload; re-plan),
and last replaces the commit record on the version it read. Only then does it evict. Two runs that
admit at once both write their records, and only one commit wins: the other re-reads, sees the
winner's admissions, and plans again, so admissions are serialised exactly as with one record,
budgets and reservations included. A loser's records stay visible meanwhile as in flight (the
cautious reading); it replaces them when it plans again (:meth:`Ledger.without_run`), and a
process that dies there leaves entries that lapse at their deadline like any abandoned admission.

Why Leases and not a CRD: Leases are built in (nothing to install before kdesched can evict, no
cluster-scoped object to upgrade), small, and the RBAC stays in kdesched's own namespace;
``kubectl get leases -n kdesched -l kdesched.dev/ledger`` lists the moves, each record's holder
field summarising it ("RemovePodsViolatingNodeTaints: 1 in flight, 2 held").
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kdesched.evictor.ledger import ClusterRecord, Ledger, WorkloadRecord
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError, Conflict, NotFound
from kdesched.kube.lease import get_lease
from kdesched.reactor import metrics as m

log = logging.getLogger("kdesched.reactor.ledger")

LEDGER_LABEL = "kdesched.dev/ledger"  # on every workload record; its value is the run Lease's name
RECORD_ANNOTATION = "kdesched.dev/ledger-record"  # a workload record's JSON
WORKLOAD_ANNOTATION = "kdesched.dev/workload"  # its workload key, readable (the name is a hash)
CLUSTER_ANNOTATION = "kdesched.dev/ledger-cluster"  # the commit record's JSON
COMMIT_SUFFIX = "-ledger"
LEDGER_ANNOTATION = "kdesched.dev/disruption-ledger"  # 0.1: the whole ledger on the run Lease (read, then split)
OLD_HISTORY_ANNOTATION = "kdesched.dev/eviction-history"  # before 0.1: cool-downs only; dropped
RECORD_WRITERS = 8  # record writes of one ledger write in flight at once
MAX_DELETES_PER_WRITE = 100
T = TypeVar("T")  # ended records removed by one write; the rest by the next (reads skip nothing)
REFUSED = frozenset({400, 401, 403, 404, 422})  # the API server will not take the write: no retry


def record_name(lease_name: str, key: str) -> str:
    """The workload record's Lease name: a hash of the key (DNS-safe, fixed length, no collision in practice)."""
    return f"{lease_name}-w-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


@dataclass(frozen=True, slots=True)
class Stored:
    """A workload record as read: its object's name and version, and its text (to know what changed)."""

    name: str
    version: str
    text: str


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """The ledger as read, with what a conditional write needs."""

    ledger: Ledger
    lease: dict[str, Any] | None  # the commit record's Lease (None: not created yet)
    records: Mapping[str, Stored] = field(default_factory=dict)  # workload key -> as stored
    owners: Mapping[str, str] = field(default_factory=dict)  # node -> the workload record holding its cool-down
    parsed: Mapping[str, WorkloadRecord] = field(default_factory=dict)  # workload key -> its record as read
    problem: str = ""  # a record could not be parsed: the run says so in its report
    legacy: dict[str, Any] | None = None  # the run Lease still carrying a 0.1 ledger annotation

    @property
    def version(self) -> str:
        return str(((self.lease or {}).get("metadata") or {}).get("resourceVersion") or "")

    @property
    def committed_by(self) -> str:
        """The run that made the last commit (a write whose answer was lost is recognised by it)."""
        text = (((self.lease or {}).get("metadata") or {}).get("annotations") or {}).get(CLUSTER_ANNOTATION) or ""
        try:
            raw = json.loads(text) if text else {}
        except ValueError:
            return ""
        return str(raw.get("w") or "") if isinstance(raw, Mapping) else ""


@dataclass
class WriteStats:
    """API writes of one :meth:`LedgerStore.write` (for the benchmark and the design figures)."""

    records: int = 0
    deletes: int = 0


class LedgerStore:
    """Read and conditionally write the ledger kept beside the run Lease ``namespace/name``."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.commit_name = f"{name}{COMMIT_SUFFIX}"
        self.last_write = WriteStats()
        self._legacy_gone = False  # the run Lease was seen without a 0.1 ledger: not looked at again
        self.admitting = threading.RLock()  # one run of this process reads, plans and commits at a time
        # the records as this process last read or wrote them, at a commit generation: the next read
        # fetches only what the commits since then wrote (their log in the commit record)
        self._cache: _Cache | None = None
        self.last_read = ""  # "full" or "incremental: N record(s) changed" (tests, the benchmark)

    # -- reading -------------------------------------------------------------------------------------
    def read(self) -> LedgerRead:
        """The commit record first, then every workload record: a commit that happened before the
        first read was preceded by its records, so the LIST holds them."""
        lease = get_lease(self.client, self.namespace, self.commit_name)
        problems: list[str] = []
        cluster = ClusterRecord()
        text = ((lease or {}).get("metadata") or {}).get("annotations", {}).get(CLUSTER_ANNOTATION)
        if text:
            try:
                cluster = ClusterRecord.from_json(json.loads(text))
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                problems.append(f"the ledger's commit record {self.namespace}/{self.commit_name} is malformed "
                                f"({exc}); the health brake's settle time and the eviction bucket start afresh")
        generation, changed = _log_of(text)
        cached = self._cache
        fresh = cached is not None and time.monotonic() - cached.listed < FULL_READ_SECONDS
        if cached is not None and fresh and generation is not None and cached.generation is not None and \
                (names := _changed_since(cached.generation, generation, changed)) is not None:
            entries = dict(cached.entries)
            self.last_read = f"incremental: {len(names)} record(s) changed"
            for suffix in sorted(names):  # the records the commits since our last read wrote or deleted
                name = f"{self.name}-w-{suffix}"
                obj = self.client.get_raw("Lease", name, self.namespace)
                for key in [k for k, (st, _) in entries.items() if st.name == name]:
                    del entries[key]
                if obj is not None:
                    entry = self._entry(obj, problems)
                    entries[entry[0]] = (entry[1], entry[2])
        else:
            self.last_read = "full"
            entries = {}
            for obj in self.client.list_raw("Lease", namespace=self.namespace,
                                            label_selector=f"{LEDGER_LABEL}={self.name}").items:
                entry = self._entry(obj, problems)
                entries[entry[0]] = (entry[1], entry[2])
        listed = cached.listed if self.last_read != "full" and cached is not None else time.monotonic()
        self._cache = _Cache(generation, entries, listed)
        stored = {k: st for k, (st, _) in entries.items()}
        records = {k: rec for k, (_, rec) in entries.items() if rec is not None}
        legacy = self._legacy(records, problems)
        ledger, owners = Ledger.join(records.values(), cluster)
        if legacy is not None:
            old, _ = Ledger.from_annotation(((legacy.get("metadata") or {}).get("annotations") or {})
                                            .get(LEDGER_ANNOTATION))
            ledger, owners = _merge_legacy(ledger, owners, old)
        for p in problems:
            log.warning("%s", p)
        m.LEDGER_RECORDS.set(len(stored))
        return LedgerRead(ledger, lease, stored, owners, records, "; ".join(problems), legacy)

    def _entry(self, obj: Mapping[str, Any], problems: list[str]) -> tuple[str, Stored, WorkloadRecord | None]:
        """One record object as (workload key, as stored, parsed or None when malformed)."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        raw = str(annotations.get(RECORD_ANNOTATION) or "")
        stored = Stored(str(meta.get("name") or ""), str(meta.get("resourceVersion") or ""), raw)
        try:
            rec = WorkloadRecord.from_text(raw)
        except ValueError as exc:
            problems.append(f"the ledger record {self.namespace}/{meta.get('name')} is malformed ({exc}); "
                            "it is replaced at the next write")
            return str(annotations.get(WORKLOAD_ANNOTATION) or meta.get("name") or ""), stored, None
        return rec.key, stored, rec

    def _legacy(self, records: Mapping[str, WorkloadRecord], problems: list[str]) -> dict[str, Any] | None:
        """The run Lease, when it still carries the ledger of 0.1 (one annotation): read once, written
        out as records by the next commit, then removed from the run Lease."""
        if self._legacy_gone:
            return None
        lease = get_lease(self.client, self.namespace, self.name)
        annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        if LEDGER_ANNOTATION not in annotations and OLD_HISTORY_ANNOTATION not in annotations:
            self._legacy_gone = True
            return None
        _, problem = Ledger.from_annotation(annotations.get(LEDGER_ANNOTATION))
        if problem:
            problems.append(f"Lease {self.namespace}/{self.name}: {problem}")
        return lease

    # -- writing -------------------------------------------------------------------------------------
    def write(self, read: LedgerRead, ledger: Ledger, run: str = "") -> bool:
        """Write ``ledger`` if nothing was committed since ``read``: the workload records that
        changed, then the commit record. False when another run changed a record this write touches
        or committed meanwhile (the caller re-reads and decides again). A refusal (403, 422...)
        raises; a failure that may have been carried out (5xx, a lost answer) is settled by
        reading the commit record back."""
        records, cluster = ledger.split(read.owners, read.parsed)
        stats = WriteStats()
        ops: list[tuple[str, WorkloadRecord | None, str | None, Stored | None]] = []
        touched: list[str] = []
        for key in sorted(set(records) | set(read.records)):
            rec = records.get(key)
            rec = rec.fitted() if rec is not None else None
            old = read.records.get(key)
            text = None if rec is None or rec.empty else rec.to_text()
            if text is None and (old is None or stats.deletes >= MAX_DELETES_PER_WRITE):
                continue
            if old is not None and old.text == text:
                continue
            if text is None and old is not None:
                stats.deletes += 1
                touched.append(old.name)
            elif rec is not None and text is not None:
                stats.records += 1
                touched.append(old.name if old is not None else record_name(self.name, rec.key))
            else:
                continue
            ops.append((key, rec, text, old))
        failure = _each_at_once(ops, self._apply)  # the records are independent: the commit orders them
        if isinstance(failure, Conflict):
            m.LEDGER_WRITES.labels("conflict").inc()
            self.last_write = stats
            self._cache = None  # another run changed a record we hold: read them all again
            return False
        if failure is not None:
            if failure.status in REFUSED:
                raise failure
            # a record write that may or may not have happened: this run re-plans; its own entries,
            # if they were written, are replaced then (Ledger.without_run)
            log.info("ledger record write: %s; deciding again", failure)
            self.last_write = stats
            self._cache = None
            return False
        self.last_write = stats
        return self._commit(read, cluster, run, touched)

    def _apply(self, op: tuple[str, WorkloadRecord | None, str | None, Stored | None]) -> None:
        key, rec, text, old = op
        if text is None and old is not None:
            self._delete(old)
            self._cached(key, None)
        elif rec is not None and text is not None:
            self._cached(key, self._put(rec, text, old))

    def _cached(self, key: str, obj: Mapping[str, Any] | None) -> None:
        """Keep this process's copy of a record it just wrote (None: deleted) in step."""
        if self._cache is None:
            return
        if obj is None:
            self._cache.entries.pop(key, None)
        else:
            _, stored, rec = self._entry(obj, [])
            self._cache.entries[key] = (stored, rec)

    def _put(self, rec: WorkloadRecord, text: str, old: Stored | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": old.name if old is not None else record_name(self.name, rec.key),
                                "namespace": self.namespace, "labels": {LEDGER_LABEL: self.name},
                                "annotations": {RECORD_ANNOTATION: text, WORKLOAD_ANNOTATION: rec.key}}
        obj = {"metadata": meta, "spec": {"holderIdentity": _summary(rec)}}
        if old is None:
            return self.client.create_raw("Lease", obj)  # 409 AlreadyExists: another run created it (Conflict)
        meta["resourceVersion"] = old.version
        try:
            return self.client.replace_raw("Lease", obj)
        except NotFound:
            raise Conflict(409, "Conflict", f"ledger record {old.name} was deleted meanwhile") from None

    def _delete(self, old: Stored) -> None:
        try:
            self.client.delete_raw("Lease", old.name, self.namespace, resource_version=old.version)
        except NotFound:
            pass  # another run removed it already

    def _commit(self, read: LedgerRead, cluster: ClusterRecord, run: str, touched: Sequence[str] = ()) -> bool:
        generation, changes = _log_of(_cluster_text(read.lease))
        nxt = (generation or 0) + 1
        prefix = f"{self.name}-w-"
        names = [n.removeprefix(prefix) for n in touched]
        listed = len(names) <= LOG_NAMES and all(n != t for n, t in zip(names, touched, strict=True))
        entry: list[Any] = [nxt, sorted(names) if listed else None]
        log_entries = [[g, sorted(v) if v is not None else None]
                       for g, v in sorted(changes.items())][-(LOG_COMMITS - 1):]
        text = json.dumps({**cluster.to_json(), **({"w": run} if run else {}), "g": nxt, "c": [*log_entries, entry]},
                          separators=(",", ":"))
        try:
            if read.lease is None:
                self.client.create_raw("Lease", {"metadata": {"name": self.commit_name, "namespace": self.namespace,
                                                              "annotations": {CLUSTER_ANNOTATION: text}},
                                                 "spec": {}})
            else:
                meta = dict(read.lease.get("metadata") or {})
                meta["annotations"] = {**(meta.get("annotations") or {}), CLUSTER_ANNOTATION: text}
                self.client.replace_raw("Lease", {**read.lease, "metadata": meta})
        except Conflict:
            m.LEDGER_WRITES.labels("conflict").inc()
            return False
        except ApiError as exc:
            if exc.status in REFUSED or not run:
                raise
            log.info("ledger commit: %s; reading it back", exc)
            again = get_lease(self.client, self.namespace, self.commit_name)
            if LedgerRead(Ledger(), again).committed_by != run:
                m.LEDGER_WRITES.labels("conflict").inc()
                return False
        m.LEDGER_WRITES.labels("written").inc()
        if self._cache is not None and self._cache.generation == generation:
            self._cache.generation = nxt  # our records are in the cache already; nobody committed between
        else:
            self._cache = None
        if read.legacy is not None:
            self._drop_legacy(read.legacy)
        return True

    def _drop_legacy(self, lease: dict[str, Any]) -> None:
        """Remove the 0.1 annotation from the run Lease once its content is in the records (a
        conflict is fine: the next commit tries again; the records already hold it)."""
        meta = dict(lease.get("metadata") or {})
        meta["annotations"] = {k: v for k, v in (meta.get("annotations") or {}).items()
                               if k not in (LEDGER_ANNOTATION, OLD_HISTORY_ANNOTATION)}
        try:
            self.client.replace_raw("Lease", {**lease, "metadata": meta})
        except ApiError as exc:
            log.info("could not remove the 0.1 ledger annotation from Lease %s/%s yet: %s", self.namespace,
                     self.name, exc)


LOG_COMMITS = 16  # commits the commit record lists the changed records of
# a full LIST at least this often, whatever the log says: a record someone edited by hand (kubectl),
# or one a run wrote and never committed, is seen within this time even without a conflict
FULL_READ_SECONDS = 30.0
LOG_NAMES = 32  # record names one commit lists; a commit that wrote more says "many" (a full read)


@dataclass
class _Cache:
    generation: int | None
    entries: dict[str, tuple[Stored, WorkloadRecord | None]]
    listed: float  # when the records were last LISTed (local monotonic): a full read at least this often


def _cluster_text(lease: Mapping[str, Any] | None) -> str:
    return str((((lease or {}).get("metadata") or {}).get("annotations") or {}).get(CLUSTER_ANNOTATION) or "")


def _log_of(text: str | None) -> tuple[int | None, dict[int, list[str] | None]]:
    """(the commit generation, generation -> the record names that commit wrote, None: too many)."""
    try:
        raw = json.loads(text) if text else {}
        generation = raw.get("g")
        out: dict[int, list[str] | None] = {}
        for g, names in raw.get("c") or ():
            out[int(g)] = [str(n) for n in names] if names is not None else None
        return (int(generation) if generation is not None else None), out
    except (TypeError, ValueError, AttributeError):
        return None, {}


def _changed_since(since: int, now: int, log: Mapping[int, list[str] | None]) -> set[str] | None:
    """The record names the commits after ``since`` up to ``now`` wrote; None when the log does not
    cover them all (a full read is needed)."""
    if now < since:
        return None
    out: set[str] = set()
    for g in range(since + 1, now + 1):
        names = log.get(g)
        if names is None:
            return None
        out.update(names)
    return out


def _summary(rec: WorkloadRecord) -> str:
    """What ``kubectl get leases`` shows in the HOLDER column for a workload record."""
    mv = rec.move
    if mv is None or not mv.kept:
        return "ended (cool-down)"
    parts = [f"{len(mv.inflight)} in flight"] + ([f"{len(mv.held)} held"] if mv.held else []) + (
        [f"{len(mv.lingering)} not replaced"] if mv.lingering else [])
    return f"{mv.strategy}: {', '.join(parts)}"[:128]


def _merge_legacy(ledger: Ledger, owners: Mapping[str, str], old: Ledger) -> tuple[Ledger, dict[str, str]]:
    """The records' ledger plus a 0.1 single-annotation ledger (records win for a workload they hold)."""
    records, cluster = ledger.split(owners)
    old_records, old_cluster = old.split({})
    for key, rec in old_records.items():
        records.setdefault(key, rec)
    nodes = {**old_cluster.nodes, **cluster.nodes}
    unhealthy = max((t for t in (cluster.unhealthy_at, old_cluster.unhealthy_at) if t is not None), default=None)
    return Ledger.join(records.values(), ClusterRecord(unhealthy, cluster.bucket, nodes))


def _each_at_once(ops: Sequence[T], apply: Callable[[T], None]) -> ApiError | None:
    """``apply`` every op, up to :data:`RECORD_WRITERS` at once (a maintenance's wave writes one
    record per workload it moves: 50 round trips one after another were half of a run's wall
    time). Every op is tried; the first :class:`Conflict` is returned before any other error (the
    caller re-reads), else the first other :class:`ApiError`, else None. Anything else raises."""
    if len(ops) <= 1:
        try:
            for op in ops:
                apply(op)
        except ApiError as first:
            return first
        return None
    errors: list[ApiError] = []
    with ThreadPoolExecutor(max_workers=min(RECORD_WRITERS, len(ops)), thread_name_prefix="kdesched-ledger") as pool:
        for future in [pool.submit(apply, op) for op in ops]:
            failed = future.exception()
            if isinstance(failed, ApiError):
                errors.append(failed)
            elif failed is not None:
                raise failed
    return next((e for e in errors if isinstance(e, Conflict)), errors[0] if errors else None)

"""The disruption ledger as stored: one small Lease per workload plus a commit record (reactor/io/ledger_store.py).

The fake API server refuses annotations over 256 KiB with 422, as the real one does: the ledger of
0.1 (one annotation) passed that at about 50 Deployments under 20 tainted nodes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kdesched.admission.control import RunContext
from kdesched.admission.pipeline import AdmissionSettings, Pipeline
from kdesched.evictor.ledger import (
    MAX_HELD_PER_MOVE,
    RECORD_MAX_BYTES,
    Admission,
    Backoff,
    Ledger,
    WorkloadRecord,
)
from kdesched.kube.client import KubeClient
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot
from kdesched.reactor.io.ledger_store import (
    CLUSTER_ANNOTATION,
    LEDGER_ANNOTATION,
    LEDGER_LABEL,
    RECORD_ANNOTATION,
    LedgerStore,
)

from tests.builders import pod_obj
from tests.fakeapi import FakeApiServer

T0 = 1_790_000_000.0
TAINTS = "RemovePodsViolatingNodeTaints"
LIMIT = 256 * 1024


def wpod(workload: int, replica: int, node: str, *, long: bool = False, ready: bool = False) -> Pod:
    pad = "x" * (40 if long else 0)
    obj = pod_obj(f"app{workload}{pad}-7d9f8-{replica}", node, namespace=f"team-{workload % 37}{pad}",
                  owner_name=f"app{workload}{pad}-7d9f8", labels={"pod-template-hash": "7d9f8"},
                  **({"conditions": [{"type": "Ready", "status": "True"}]} if ready else {}))
    return Pod.from_api(obj)


def store(fake: FakeApiServer) -> tuple[KubeClient, LedgerStore]:
    client = KubeClient.for_host(fake.url)
    return client, LedgerStore(client, "kdesched", "kdesched")


def annotation_bytes(obj: dict[str, Any]) -> int:
    return sum(len(k) + len(v) for k, v in ((obj.get("metadata") or {}).get("annotations") or {}).items())


def maintenance(workloads: int, nodes: int, *, long: bool = False) -> list[Admission]:
    """Every workload has one pod in flight and three held, spread over ``nodes`` tainted nodes."""
    out = []
    for w in range(workloads):
        for r in range(4):
            node = f"pool-{(w * 4 + r) % nodes}{'y' * (60 if long else 0)}"
            out.append(Admission(wpod(w, r, node, long=long), TAINTS, r > 0, f"node:{node}:{TAINTS}",
                                 "spare-0" if r == 0 else "", 4, 4))
    return out


@pytest.mark.parametrize("workloads,nodes", [(50, 20), (2000, 500)])
def test_a_maintenance_of_any_size_is_stored_without_a_422(fake_api: FakeApiServer, workloads: int,
                                                           nodes: int) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    client, s = store(fake_api)
    ledger = Ledger().admit(maintenance(workloads, nodes), T0, "run-1", 60)
    if workloads >= 2000:  # what 0.1 wrote, one annotation, is far past the API server's limit
        assert len(ledger.to_annotation()) > 4 * LIMIT
    read = s.read()
    assert s.write(read, ledger, "run-1")
    leases = fake_api.list("Lease")
    records = [o for o in leases if (o["metadata"].get("labels") or {}).get(LEDGER_LABEL) == "kdesched"]
    assert len(records) == workloads  # one record per workload, nothing per node or pod
    assert max(annotation_bytes(o) for o in records) < 2048
    commit = fake_api.get("Lease", "kdesched-ledger", "kdesched")
    assert commit is not None and annotation_bytes(commit) < 512
    again = s.read()
    assert again.problem == "" and again.ledger.moves == ledger.moves
    assert again.ledger.nodes == ledger.nodes and again.committed_by == "run-1"
    client.close()


def test_a_record_at_its_worst_stays_under_the_limit() -> None:
    """One workload at every cap with long names: the gate bounds its in-flight bytes, and the
    record is trimmed (oldest node cool-downs, last held pods) to RECORD_MAX_BYTES."""
    pods = [wpod(1, r, f"node-{r}{'n' * 200}", long=True) for r in range(2000)]
    run = Pipeline.build(AdmissionSettings(bucket=None)).begin(RunContext(Ledger(), Snapshot.build([], []), T0))
    admitted = []
    for p in pods:
        if run.check(p, TAINTS, False) is None:  # the planner plans it: counted
            run.passed(p, TAINTS, False)
            admitted.append(p)
    assert 0 < len(admitted) < len(pods)  # the gate stops at the record's in-flight bytes
    ledger = Ledger().admit([Admission(p, TAINTS, False, "node:" + p.node_name + ":" + TAINTS, "spare", 9, 9)
                             for p in admitted], T0, "r", 60)
    ledger = ledger.admit([Admission(p, TAINTS, True, "s", "", 9, 9) for p in pods[300:300 + MAX_HELD_PER_MOVE]], T0)
    records, _ = ledger.split()
    rec = records["Deployment/team-1" + "x" * 40 + "/app1" + "x" * 40]
    rec = WorkloadRecord(rec.key, rec.move, rec.last, rec.nodes, {f"S{i}": Backoff(3, T0, "w" * 120) for i in range(10)})
    fitted = rec.fitted()
    assert len(fitted.to_text()) <= RECORD_MAX_BYTES < LIMIT
    assert fitted.move is not None and fitted.move.inflight == rec.move.inflight  # type: ignore[union-attr]


def test_ended_moves_leave_no_record_once_their_cool_downs_ran_out(fake_api: FakeApiServer) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    client, s = store(fake_api)
    ledger = Ledger().admit(maintenance(10, 5), T0, "run-1", 60)
    assert s.write(s.read(), ledger, "run-1")
    # every workload back at its Ready count: the moves end; the cool-downs remain (300 s)
    read = s.read()
    pods_of = {f"Deployment/team-{w % 37}/app{w}": [wpod(w, 10 + r, "spare-0", ready=True) for r in range(4)]
               for w in range(10)}
    settled = read.ledger.settle(pods_of, T0 + 10, 120).ledger
    assert not any(mv.active for mv in settled.moves.values())
    assert s.write(read, settled.prune(T0 + 10, 300, 0), "run-2")
    assert len([o for o in fake_api.list("Lease") if LEDGER_LABEL in (o["metadata"].get("labels") or {})]) == 10
    read = s.read()
    assert s.write(read, read.ledger.prune(T0 + 400, 300, 0), "run-3")
    assert [o["metadata"]["name"] for o in fake_api.list("Lease")] == ["kdesched-ledger"]
    client.close()


def test_a_record_changed_by_another_run_fails_the_write(fake_api: FakeApiServer) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    client, s = store(fake_api)
    first = s.read()
    assert s.write(first, Ledger().admit(maintenance(1, 1)[:1], T0, "a", 60), "a")
    # a second run that read before the first committed loses, whatever it touches
    assert not s.write(first, Ledger().admit(maintenance(2, 1)[4:5], T0, "b", 60), "b")
    latest = s.read()
    assert s.write(latest, latest.ledger.admit(maintenance(2, 1)[4:5], T0, "b", 60), "b")
    assert sorted(s.read().ledger.moves) == ["Deployment/team-0/app0", "Deployment/team-1/app1"]
    client.close()


def test_the_ledger_of_0_1_is_read_then_moved_into_records(fake_api: FakeApiServer) -> None:
    old = Ledger().admit(maintenance(3, 2), T0, "old", 0).with_unhealthy(T0 - 5)
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}},
                 {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                  "metadata": {"name": "kdesched", "namespace": "kdesched",
                               "annotations": {LEDGER_ANNOTATION: old.to_annotation()}}, "spec": {}})
    client, s = store(fake_api)
    read = s.read()
    assert read.ledger.moves == old.moves and read.ledger.unhealthy_at == T0 - 5
    assert s.write(read, read.ledger, "run-1")
    lease = fake_api.get("Lease", "kdesched", "kdesched")
    assert lease is not None and LEDGER_ANNOTATION not in (lease["metadata"].get("annotations") or {})
    again = s.read()
    assert again.ledger.moves == old.moves and again.ledger.unhealthy_at == T0 - 5
    commit = fake_api.get("Lease", "kdesched-ledger", "kdesched")
    assert commit is not None and json.loads(commit["metadata"]["annotations"][CLUSTER_ANNOTATION])["u"] == T0 - 5
    client.close()


def test_a_malformed_record_is_reported_and_replaced(fake_api: FakeApiServer) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    client, s = store(fake_api)
    assert s.write(s.read(), Ledger().admit(maintenance(1, 1)[:1], T0, "a", 60), "a")
    rec = next(o for o in fake_api.list("Lease") if o["metadata"]["name"] != "kdesched-ledger")
    rec["metadata"]["annotations"][RECORD_ANNOTATION] = "{not json"
    fake_api.update(rec)  # by hand: another process (or this one after FULL_READ_SECONDS) LISTs it
    s = LedgerStore(client, "kdesched", "kdesched")
    read = s.read()
    assert "malformed" in read.problem and not read.ledger.moves
    assert s.write(read, read.ledger.admit(maintenance(1, 1)[:1], T0 + 1, "b", 60), "b")
    assert s.read().problem == ""
    client.close()


def test_a_process_reads_only_the_records_committed_since_its_last_read(fake_api: FakeApiServer) -> None:
    """The commit record lists the records each of its last commits wrote: a process that read at
    generation G fetches only those (one GET each) instead of LISTing every record; a commit that
    wrote more than LOG_NAMES, or more than LOG_COMMITS commits since, means a full read."""
    from kdesched.reactor.io.ledger_store import LOG_COMMITS

    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    a_client, a = store(fake_api)
    b_client, b = store(fake_api)
    assert a.write(a.read(), Ledger().admit(maintenance(40, 5), T0, "a1", 60), "a1")  # 40 records: "many"
    assert b.read() and b.last_read == "full"
    first = b.read()
    assert b.last_read == "incremental: 0 record(s) changed" and len(first.records) == 40
    read = a.read()
    assert a.last_read == "incremental: 0 record(s) changed"  # a's own commit is in its cache
    # one more workload, on a node another workload's eviction holds the cool-down of: one record written
    assert a.write(read, read.ledger.admit(maintenance(42, 5)[160:164], T0 + 1, "a2", 60), "a2")
    assert a.last_write.records == 1
    fake_api.clear_journal()
    seen = b.read()
    assert b.last_read == "incremental: 1 record(s) changed"
    assert [r.method for r in fake_api.requests()] == ["GET"] * 2  # the commit record and that record
    full = LedgerStore(b_client, "kdesched", "kdesched").read()
    assert seen.ledger == full.ledger and set(seen.records) == set(full.records)
    for i in range(LOG_COMMITS + 1):  # more commits than the log keeps: b reads everything again
        r = a.read()
        assert a.write(r, r.ledger.admit(maintenance(1, 1)[:1], T0 + 2 + i, f"x{i}", 60), f"x{i}")
    assert b.read() and b.last_read == "full"
    a_client.close()
    b_client.close()


def test_a_record_changed_by_an_uncommitted_write_is_read_again_after_the_conflict(fake_api: FakeApiServer) -> None:
    """A run that lost its commit left its record written: another process's cached copy of that
    record is stale (no commit lists it), its conditional write fails, and it reads everything again."""
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
    a_client, a = store(fake_api)
    b_client, b = store(fake_api)
    c_client, c = store(fake_api)
    assert a.write(a.read(), Ledger().admit(maintenance(1, 1)[:1], T0, "a1", 60), "a1")
    b.read()
    first = a.read()
    other = c.read()  # c commits a workload on another node meanwhile
    assert c.write(other, other.ledger.admit(maintenance(3, 2)[9:10], T0 + 1, "c1", 60), "c1")
    # a writes app0's record, then its commit loses to c's
    assert not a.write(first, first.ledger.admit(maintenance(1, 1)[1:2], T0 + 2, "a2", 60), "a2")
    assert a.last_write.records == 1
    again = b.read()
    assert again.ledger.moves.keys() == {"Deployment/team-0/app0", "Deployment/team-2/app2"}
    assert b.last_read == "incremental: 1 record(s) changed"  # c's commit; a's uncommitted record is not listed
    assert not b.write(again, again.ledger.admit(maintenance(1, 1)[2:3], T0 + 3, "b1", 60), "b1")  # 409 on app0
    fresh = b.read()
    assert b.last_read == "full"
    assert "a2" in {h.run for mv in fresh.ledger.moves.values() for h in mv.held} | {
        f.run for mv in fresh.ledger.moves.values() for f in mv.inflight}
    for client in (a_client, b_client, c_client):
        client.close()

"""The disruption ledger's encoding, pinned byte for byte: the 0.1 annotation, the per-workload
records and the cluster record kdesched writes into Leases, and a checked move's report entry.

Why: records written by one version are read by the next (and by a second replica running the
other version during a rollout), so a change of the encoding is a change of the on-cluster format,
never a side effect of moving code. Each text in ledger_encoding.golden.json was produced by the encoding as it stood when
the ledger was split into modules (issue 31); a round trip of each is checked too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kdesched.evictor.ledger import (
    Backoff,
    CheckedMove,
    ClusterRecord,
    Held,
    InFlight,
    Ledger,
    Move,
    WorkloadRecord,
)
from kdesched.evictor.surge import Surge

T = 1_780_000_000.123456  # a time whose digits beyond the millisecond every encoding rounds away



def rich_ledger() -> Ledger:
    f1 = InFlight("u1", "default/web-a", "n1", T + 0.0004, "n3", {"cpu": 250, "memory": 1 << 20}, "run-1",
                  "node:n1:RemovePodsViolatingNodeTaints", T + 60.00049)
    f2 = InFlight("u2", "default/web-b", "n2", T + 1.5)  # an older entry: defaults
    lg = InFlight("u9", "default/web-z", "n4", T - 900.1239, "", {}, "run-0", "", 0.0)
    h1 = Held("u3", "default/web-c", "n1", "node:n1:RemovePodsViolatingNodeTaints", T + 2.0001, "run-1")
    h2 = Held("u4", "default/web-d", "n5", "balance", T + 3.0)
    web = Move("RemovePodsViolatingNodeTaints", T, T + 2.0001, 4, 4, (f1, f2), (h1, h2), (lg,))
    db = Move("LowNodeUtilization", T - 10, T - 5, 2, 1, (), (Held("u5", "db/db-0", "n6", "balance", T - 5),))
    surge = Surge("u7", "api/api-1", "n7", "api", "api-5f7", 3, 4, T - 20.5555, T + 99.9999,
                  "RemovePodsViolatingNodeTaints", 8, T - 1.0)
    return Ledger(
        moves={"Deployment/default/web": web, "StatefulSet/db/db": db},
        workloads={"Deployment/default/web": T + 1.5, "StatefulSet/db/db": T - 5, "Deployment/x/old": T - 500},
        nodes={"n1": T + 0.0004, "n2": T + 1.5, "n9": T - 3000.4444},
        unhealthy_at=T - 42.98765,
        backoffs={"Deployment/default/web|LowNodeUtilization": Backoff(2, T - 30.3333, "landed back on node n1"),
                  "StatefulSet/db/db|RemovePodsViolatingNodeTaints": Backoff(1, T - 1, "replacement x still Pending")},
        node_strategies={"n1": "RemovePodsViolatingNodeTaints", "n2": "RemovePodsViolatingNodeTaints"},
        bucket=(3.14159, T - 0.0006),
        surges={"Deployment/api/api": surge},
        surge_blocks={"Deployment/api/other": (T + 300.3, "the last surge was given up")},
    )


def encodings() -> dict[str, Any]:
    ledger = rich_ledger()
    records, cluster = ledger.split()
    checked = CheckedMove("Deployment/default/web", "RemovePodsViolatingNodeTaints", "default/web-a", "n1", "n3",
                          "n1", 12.34567, "wasted", "landed back on node n1")
    unchecked = CheckedMove("Deployment/default/web", "RemovePodsViolatingNodeTaints", "default/web-b", "n2", "",
                            "", None, "unknown")
    return {"annotation": ledger.to_annotation(),
            "records": {k: r.to_text() for k, r in sorted(records.items())},
            "cluster": cluster.to_json(), "checked": [checked.to_json(), unchecked.to_json()]}


# written once by the encoding before the split; never regenerate it to make a test pass
GOLDEN: dict[str, Any] = json.loads((Path(__file__).parent / "ledger_encoding.golden.json").read_text())


def test_every_encoding_is_byte_for_byte_what_it_was() -> None:
    assert encodings() == GOLDEN


def test_the_annotation_round_trips_a_ledger_with_every_table() -> None:
    ledger = rich_ledger()
    again, problem = Ledger.from_annotation(ledger.to_annotation())
    assert problem == ""
    assert again.to_annotation() == ledger.to_annotation()
    # the annotation of 0.1 never held the bucket or surges: those come back empty
    assert again == Ledger(again.moves, again.workloads, again.nodes, again.unhealthy_at, again.backoffs,
                           again.node_strategies)


def test_the_records_round_trip_and_join_back_into_the_ledger() -> None:
    # times come back at the millisecond the records keep: compared as the texts they encode to
    ledger = rich_ledger()
    records, cluster = ledger.split()
    read = [WorkloadRecord.from_text(r.to_text()) for r in records.values()]
    assert {r.key: r.to_text() for r in read} == GOLDEN["records"]
    assert ClusterRecord.from_json(cluster.to_json()).to_json() == GOLDEN["cluster"]
    joined, owners = Ledger.join(read, ClusterRecord.from_json(cluster.to_json()))
    assert joined.to_annotation() == GOLDEN["annotation"]
    assert set(joined.surges) == set(ledger.surges) and set(joined.surge_blocks) == set(ledger.surge_blocks)
    again, again_cluster = joined.split(owners, {r.key: r for r in read})
    assert {k: r.to_text() for k, r in again.items()} == GOLDEN["records"]
    assert again_cluster.to_json() == GOLDEN["cluster"]

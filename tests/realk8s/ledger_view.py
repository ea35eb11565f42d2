"""The disruption ledger as a test reads it from a real API server: the workload records and the
commit Lease joined (kdesched.reactor.io.ledger_store), as one Ledger or in 0.1's one-record JSON shape."""

from __future__ import annotations

import json
from typing import Any

from kdesched.evictor.ledger import ClusterRecord, Ledger, WorkloadRecord
from kdesched.reactor.io.ledger_store import CLUSTER_ANNOTATION, LEDGER_LABEL, RECORD_ANNOTATION


def read_ledger(cluster: Any, namespace: str = "kdesched", name: str = "kdesched") -> Ledger:
    api = getattr(cluster, "api", cluster)  # a tests.realk8s.cluster.Cluster, or its RawApi
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    items = (api.get(base, labelSelector=f"{LEDGER_LABEL}={name}") or {}).get("items") or []
    records = [WorkloadRecord.from_text(((o.get("metadata") or {}).get("annotations") or {})[RECORD_ANNOTATION])
               for o in items]
    commit = api.get_or_none(f"{base}/{name}-ledger") or {}
    text = ((commit.get("metadata") or {}).get("annotations") or {}).get(CLUSTER_ANNOTATION)
    ledger, _ = Ledger.join(records, ClusterRecord.from_json(json.loads(text)) if text else ClusterRecord())
    return ledger


def ledger_json(cluster: Any, namespace: str = "kdesched", name: str = "kdesched") -> dict[str, Any]:
    """The ledger in 0.1's single-record shape (``m`` moves with ``f``/``h``, ``b`` back-offs)."""
    raw: dict[str, Any] = json.loads(read_ledger(cluster, namespace, name).to_annotation())
    return raw


def ledger_text(cluster: Any, namespace: str = "kdesched", name: str = "kdesched") -> str:
    return read_ledger(cluster, namespace, name).to_annotation()

"""Where the disruption ledger lives: an annotation of the run Lease, written with optimistic concurrency.

Why: every evicting run of every process (several pods of the ``taints`` function, ``rebalance``
and ``affinity`` beside it, a revision rollout, ``serve`` replicas around a leader change) must
admit its evictions against the same record, atomically. The API server gives that for free: a
replace carrying the ``resourceVersion`` that was read fails with 409 Conflict if anyone wrote the
object in between, so a run whose write fails re-reads and decides again; no run holds a lock
while it plans. The record sits on the run Lease (``kdesched`` in the Lease namespace) because the
RBAC of every deployment already grants get/update/create on it, and it is small (pruned to the
moves in progress and the cool-downs still running).

A write never takes the Lease's holder: it replaces the object as read, spec included, so a
concurrent renewal by the holder makes one of the two writes fail with 409 and retry, and neither
is lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kdesched.evictor.ledger import Ledger
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Conflict
from kdesched.kube.lease import get_lease
from kdesched.reactor import metrics as m

log = logging.getLogger("kdesched.reactor.ledger")

LEDGER_ANNOTATION = "kdesched.dev/disruption-ledger"
OLD_HISTORY_ANNOTATION = "kdesched.dev/eviction-history"  # before 0.2: cool-downs only; dropped on write


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """The ledger as read, with what a conditional write needs (the Lease object, None if absent)."""

    ledger: Ledger
    lease: dict[str, Any] | None
    problem: str = ""  # the record could not be parsed: the run says so in its report

    @property
    def version(self) -> str:
        return str(((self.lease or {}).get("metadata") or {}).get("resourceVersion") or "")


class LedgerStore:
    """Read and conditionally write the ledger on ``namespace/name`` (the run Lease)."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name

    def read(self) -> LedgerRead:
        lease = get_lease(self.client, self.namespace, self.name)
        annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
        ledger, problem = Ledger.from_annotation(annotations.get(LEDGER_ANNOTATION))
        if problem:
            log.warning("Lease %s/%s: %s", self.namespace, self.name, problem)
        return LedgerRead(ledger, lease, problem)

    def write(self, read: LedgerRead, ledger: Ledger) -> bool:
        """Write ``ledger`` if the record is still as ``read`` saw it; False if someone wrote it
        meanwhile (the caller re-reads and decides again). Other API errors propagate."""
        text = ledger.to_annotation()
        try:
            if read.lease is None:
                self.client.create_raw("Lease", {"metadata": {"name": self.name, "namespace": self.namespace,
                                                              "annotations": {LEDGER_ANNOTATION: text}},
                                                 "spec": {}})
            else:
                meta = dict(read.lease.get("metadata") or {})
                annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != OLD_HISTORY_ANNOTATION}
                annotations[LEDGER_ANNOTATION] = text
                meta["annotations"] = annotations
                self.client.replace_raw("Lease", {**read.lease, "metadata": meta})
        except Conflict:
            m.LEDGER_WRITES.labels("conflict").inc()
            return False
        m.LEDGER_WRITES.labels("written").inc()
        return True

"""A plan's evictions as the disruption ledger records them, and the workloads' pods a settle needs.

Why: what a run asks the ledger to admit (wave 0 in flight, later waves held, each with its
workload's expected and Ready counts) is decided from the plan and the snapshot alone. It is pure,
so it lives beside the ledger's records, and the reactor's admission
(:mod:`kdesched.reactor.run.admit`) keeps only the loop that writes the ledger conditionally and
retries.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from kdesched.evictor.ledger_accounting import Admission
from kdesched.evictor.ledger_records import workload_key
from kdesched.evictor.pacing import PacingPlan
from kdesched.model.derived import pod_ready
from kdesched.model.derived import workload_key as workload_key_tuple
from kdesched.model.records import Pod
from kdesched.model.snapshot import Snapshot
from kdesched.strategies.framework import PlannedEviction


def pods_by_workload(snapshot: Snapshot, keys: Collection[str]) -> dict[str, list[Pod]]:
    """Every pod of the workloads ``keys`` (ledger keys), from the snapshot (its index when it has one)."""
    out: dict[str, list[Pod]] = {k: [] for k in keys}
    if not keys:
        return out
    index = snapshot.workload_pods
    if index is not None:
        for (kind, ns, name), pods in index.items():
            key = f"{kind}/{ns}/{name}"
            if key in out:
                out[key].extend(pods)
        return out
    for p in snapshot.pods:
        if p.owner_refs:
            k = workload_key_tuple(p)
            if k is not None:
                key = f"{k[0]}/{k[1]}/{k[2]}"
                if key in out:
                    out[key].append(p)
    return out


def admissions_of(evictions: Sequence[PlannedEviction], pacing: PacingPlan | None, scope: str | Callable[[Pod], str],
                  snapshot: Snapshot | None = None) -> tuple[Admission, ...]:
    """A plan's evictions as the ledger records them: wave 0 in flight, later waves held. Each
    carries its workload's expected and Ready counts (the count its move settles back to), also
    when the plan is not paced (``kdesched.safety.enabled: false``): a budget then still counts the
    pod until its replacement is Ready, not until the next settle. ``scope``: the run scope key, or
    the key of each pod (``RunScope.key_for`` in :mod:`kdesched.reactor.run.admit`)."""
    scope_of = scope if callable(scope) else (lambda _pod, key=scope: key)
    out: list[Admission] = []
    counts: dict[str, tuple[int, int]] = {}
    for i, e in enumerate(evictions):
        if pacing is None:
            expected, ready = _counts(e.pod, snapshot, counts)
            out.append(Admission(e.pod, e.strategy, False, scope_of(e.pod), "", expected, ready))
            continue
        step = pacing.steps[i]
        known = pacing.workloads.get(step.workload) if step.workload is not None else None
        status = known.status if known is not None else None
        expected, ready = (status.expected, status.ready) if status else _counts(e.pod, snapshot, counts)
        out.append(Admission(e.pod, e.strategy, step.wave > 0, scope_of(e.pod), step.destination, expected, ready))
    return tuple(out)


def _counts(pod: Pod, snapshot: Snapshot | None, memo: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """(pods, Ready pods) of ``pod``'s workload in the snapshot: what its move waits to get back to."""
    if snapshot is None:
        return 0, 0
    key = workload_key(pod)
    if key not in memo:
        pods = pods_by_workload(snapshot, [key]).get(key, []) if not key.startswith("Pod/") else [pod]
        live = [p for p in pods if not p.terminating and not p.terminal]
        memo[key] = (len(live), sum(1 for p in live if pod_ready(p)))
    return memo[key]

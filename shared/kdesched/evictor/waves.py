"""Carrying a paced plan out in waves: evict, wait for the replacements, evict the next.

Why: the allowance (:mod:`kdesched.evictor.pacing`) puts a workload's evictions beyond its
``maxUnavailable`` into later waves. Here wave 0 is evicted at once; each later batch of a workload
is evicted only when the workload is back at its Ready count (the replacements scheduled and
Ready, read fresh through the kube layer), each workload on its own, so one slow workload never
holds another back. A batch that waits longer than ``replacementTimeoutSeconds`` since the
workload's previous batch, or past the run's waiting budget, is reported ``paced`` (not
``failed``): nothing was wrong, the next run re-decides from fresh state.

Who waits (docs/safety.md): ``kdesched run`` waits (budget: none beyond the per-wave timeout). The
event path (serve, the functions) never waits inside a request (budget 0): it evicts wave 0 and
reports the rest ``paced`` at once, so a Knative request (300 s ``timeoutSeconds``, one request at
a time per function) and the node and balance locks are never held for a replacement. A dry run
reports every wave as it would happen, without waiting.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kdesched.evictor.execute import EvictionOutcome, Executor, KeepGoing, ask_keep_going
from kdesched.evictor.metrics import mark_workload_below
from kdesched.evictor.pacing import PacingPlan, Workload, WorkloadStatus, workload_of, workload_status
from kdesched.model.errors import ModelError
from kdesched.model.records import Pod
from kdesched.strategies.framework import PlannedEviction

if TYPE_CHECKING:  # only a type here: simulate never loads the kubernetes client
    from kdesched.kube.client import KubeClient

log = logging.getLogger("kdesched.evictor")


class WorkloadReader(Protocol):
    """Reads a workload's current status (fresh from the API server, in a live run)."""

    def status(self, workload: Workload) -> WorkloadStatus: ...


class LiveWorkloads:
    """:class:`WorkloadReader` through the kube layer: one LIST of a namespace's pods per poll,
    shared by the workloads of that namespace read within ``fresh_seconds`` of it."""

    def __init__(self, client: KubeClient, fresh_seconds: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.fresh_seconds = fresh_seconds
        self.clock = clock
        self._lists: dict[str, tuple[float, dict[Workload, list[Pod]]]] = {}

    def status(self, workload: Workload) -> WorkloadStatus:
        now = self.clock()
        cached = self._lists.get(workload.namespace)
        if cached is None or now - cached[0] > self.fresh_seconds:
            grouped: dict[Workload, list[Pod]] = {}
            for raw in self.client.list_raw("Pod", namespace=workload.namespace).items:
                try:
                    pod = Pod.from_api(raw)
                except ModelError as exc:  # one odd pod must not stop the wait; it cannot be ours anyway
                    log.debug("skipping a pod that does not parse: %s", exc)
                    continue
                w = workload_of(pod)
                if w is not None:
                    grouped.setdefault(w, []).append(pod)
            cached = (now, grouped)
            self._lists[workload.namespace] = cached
        return workload_status(workload, cached[1].get(workload, []))


@dataclass(frozen=True, slots=True)
class WaveSettings:
    """How long held evictions may wait."""

    timeout_seconds: float
    """Per batch: how long after the workload's previous batch (replacementTimeoutSeconds)."""
    budget_seconds: float | None = 0.0
    """The whole run's waiting: None = only the per-batch timeout, 0 = never wait (event path)."""
    poll_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.timeout_seconds < 0 or self.poll_seconds <= 0 or (self.budget_seconds or 0) < 0:
            raise ValueError(f"invalid wave settings: {self}")


def _held_message(e: PlannedEviction, wave: int, pacing: PacingPlan, workload: Workload) -> str:
    p = pacing.workloads[workload]
    return (f"held by the per-workload allowance (wave {wave}): {workload} may have {p.allowance} pod(s) "
            f"unavailable ({p.allowance_source}) and {p.status.unavailable} of {p.status.expected} already were "
            f"or this run evicts them; the next run evicts it once the workload is back at its Ready count")


def _constant(message: str) -> Callable[[int], str]:
    return lambda _i: message


def execute_waves(evictions: Sequence[PlannedEviction], pacing: PacingPlan, executor: Executor, *, dry_run: bool,
                  reader: WorkloadReader | None, settings: WaveSettings, grace_period_seconds: int | None = None,
                  failure_events: bool = False, sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic,
                  keep_going: KeepGoing | None = None, deadline: float | None = None) -> list[EvictionOutcome]:
    """Evict ``evictions`` wave by wave; outcomes come back in the plan's order. ``keep_going`` is
    handed to each batch's ``execute`` (asked before each eviction is started) and asked before
    each poll: once it names a reason (or raises: the run stops, as it does in the executor), every
    held batch is ``abandoned`` at once, without waiting."""
    steps = pacing.steps
    if len(steps) != len(evictions):
        raise ValueError(f"pacing plan has {len(steps)} steps for {len(evictions)} evictions")
    out: list[EvictionOutcome | None] = [None] * len(evictions)

    def run(batch: Sequence[int]) -> None:
        if not batch:
            return
        results = executor.execute([evictions[i] for i in batch], grace_period_seconds=grace_period_seconds,
                                   failure_events=failure_events, keep_going=keep_going,
                                   **({"deadline": deadline} if deadline is not None else {}))
        for i, o in zip(batch, results, strict=True):
            out[i] = o
            w = steps[i].workload
            if o.result == "evicted" and w is not None:
                mark_workload_below(str(w), True)

    def pace(batch: Sequence[int], why: Callable[[int], str]) -> None:
        for i, o in zip(batch, executor.pace([(evictions[i], why(i)) for i in batch]), strict=True):
            out[i] = o

    by_wave: list[list[int]] = [[] for _ in range(pacing.waves)]
    for i, s in enumerate(steps):
        by_wave[s.wave].append(i)
    if dry_run:
        for batch in by_wave:
            run(batch)
        return [o for o in out if o is not None]

    run(by_wave[0])
    batches: dict[Workload, dict[int, list[int]]] = {}
    for i, s in enumerate(steps):
        if s.wave > 0 and s.workload is not None:
            batches.setdefault(s.workload, {}).setdefault(s.wave, []).append(i)
    held = {w: [b[k] for k in sorted(b)] for w, b in sorted(batches.items())}

    def held_why(i: int) -> str:
        w = steps[i].workload
        assert w is not None
        return _held_message(evictions[i], steps[i].wave, pacing, w)

    waiting = reader is not None and settings.budget_seconds != 0 and settings.timeout_seconds > 0
    if not waiting:
        for waiting_batches in held.values():
            pace([i for b in waiting_batches for i in b], held_why)
        return [o for o in out if o is not None]
    assert reader is not None
    start = clock()
    since = {w: start for w in held}
    last: dict[Workload, WorkloadStatus] = {}
    while held:
        stop = ask_keep_going(keep_going)  # guarded: a hook that raises stops, keeping the outcomes so far
        if stop is not None:  # the caller stopped the run: nothing more is sent, nothing waits
            stopped: KeepGoing = functools.partial(str, stop)  # the same reason, whatever the hook says next
            for w in list(held):
                batch = [i for b in held.pop(w) for i in b]
                for i, o in zip(batch, executor.execute([evictions[i] for i in batch], keep_going=stopped),
                                strict=True):
                    out[i] = o
            break
        budget_spent = settings.budget_seconds is not None and clock() - start >= settings.budget_seconds
        for w in list(held):
            p = pacing.workloads[w]
            try:
                status = reader.status(w)
            except Exception as exc:  # noqa: BLE001 - a failed read waits for the next poll (or times out)
                log.warning("could not read the pods of %s: %s", w, exc)
            else:
                last[w] = status
                # the Ready count to get back to: the workload's pods before the run
                unavailable = max(0, p.status.expected - status.ready)
                if unavailable == 0:
                    mark_workload_below(str(w), False)
                batch = held[w][0]
                if unavailable + len(batch) <= p.allowance:
                    log.info("%s is back at %d Ready pod(s): evicting the next %d", w, status.ready, len(batch))
                    run(batch)
                    since[w] = clock()
                    held[w].pop(0)
                    if not held[w]:
                        del held[w]
                    continue
            waited = clock() - since[w]
            if budget_spent or waited >= settings.timeout_seconds:
                seen = last.get(w)
                state = f"{seen.ready}/{p.status.expected} Ready" if seen is not None else "its pods could not be read"
                if budget_spent:
                    why = f"the run's waiting budget ({settings.budget_seconds:g}s) is spent"
                else:
                    why = f"replacementTimeoutSeconds ({settings.timeout_seconds:g}s) passed"
                msg = (f"paced: {w} was not back at its Ready count ({state}) and {why}; "
                       "the next run re-decides from fresh state")
                pace([i for b in held.pop(w) for i in b], _constant(msg))
        if held:
            sleep(settings.poll_seconds)
    return [o for o in out if o is not None]

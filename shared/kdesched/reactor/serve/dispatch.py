"""Semantic events and sweeps handed to the reactor on worker threads, retried while busy.

Why: the watch thread must never wait for a run, and a burst must coalesce exactly as with a
Knative function at containerConcurrency > 1: each event is a task of a bounded pool that calls the
same reactor code the functions call. A run that found a lock busy or the API server failing for a
moment (what Knative's redelivery does for a function's 429/503) is tried again; nothing was
evicted then (a run raises only before evicting). Whatever is lost, the sweep catches.

An event not acted on (still queued or running at shutdown, ended by ``ShuttingDown``, or given up
after its retries) is remembered with the mark its node had in the node record when it was
dispatched (:meth:`Dispatcher.not_acted_on`): the stopping leader holds those nodes at those marks
in its last record, so the next leader's start-up reconcile sends the change again.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdesched.kube.errors import ApiError, is_transient
from kdesched.reactor import metrics as m
from kdesched.reactor.events.classifier import SemanticEvent
from kdesched.reactor.events.requests import RunRequest, Trigger, parse_node_event
from kdesched.reactor.events.routing import PING
from kdesched.reactor.io.lease import LockBusy, ShuttingDown
from kdesched.reactor.io.reconcile import NodeMark
from kdesched.reactor.run.runner import Reactor

log = logging.getLogger("kdesched.reactor.serve")

SOURCE = "/kdesched/serve"


def outcome_counts(report: Mapping[str, Any]) -> str:
    """``N eviction(s)`` for the pods a run evicted (or would evict, dry), then the other outcomes
    by result: ``1 eviction(s), 2 paced``. Paced, failed or abandoned pods are no evictions."""
    counts = Counter(str(o.get("result", "")) for o in report.get("evictions", []) if isinstance(o, Mapping))
    done = counts.pop("evicted", 0) + counts.pop("dry-run", 0)
    return ", ".join([f"{done} eviction(s)", *(f"{n} {result}" for result, n in sorted(counts.items()))])


class Dispatcher:
    """Runs events and sweeps for one ``serve`` process, and keeps their recent reports."""

    def __init__(self, reactor: Reactor, stop: threading.Event, *, workers: int, retry_delay_seconds: float,
                 recorded_mark: Callable[[str], NodeMark | None] = lambda node: None) -> None:
        """``recorded_mark``: a node's mark in the node record now (NodeRecorder.recorded_mark)."""
        self.reactor = reactor
        self.stop = stop
        self.retry_delay_seconds = retry_delay_seconds
        self.recorded_mark = recorded_mark
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kdesched-event")
        self.reports: list[dict[str, Any]] = []  # recent reports (bounded), for tests and debugging
        self._reports_lock = threading.Lock()
        self._open: dict[str, tuple[str, NodeMark | None]] = {}  # event id -> its node and mark, until acted on
        self._missed: dict[str, NodeMark | None] = {}  # nodes of events given up: their marks then
        self._open_lock = threading.Lock()

    def dispatch(self, events: list[SemanticEvent]) -> None:
        """Hand semantic events to worker threads (the same reactor code the functions call)."""
        for e in events:
            m.EMITTED.labels(e.type).inc()
            mark = self.recorded_mark(e.node)  # (outside our lock: the recorder takes its own)
            with self._open_lock:
                self._open.setdefault(e.id, (e.node, mark))
            if not self.stop.is_set():
                self.pool.submit(self._run_open, e)

    def not_acted_on(self) -> dict[str, NodeMark | None]:
        """The nodes of the events not acted on, each with its oldest mark: given up, ended by
        ``ShuttingDown``, still queued (cancelled at shutdown) or still running."""
        with self._open_lock:
            out = dict(self._missed)
            for node, mark in self._open.values():
                out.setdefault(node, mark)
            return out

    def _run_open(self, e: SemanticEvent) -> None:
        acted = False
        try:
            acted = self.run_event(e)
        finally:
            with self._open_lock:
                node, mark = self._open.pop(e.id, (e.node, None))
                if not acted:
                    self._missed.setdefault(node, mark)

    def run_event(self, e: SemanticEvent, attempts: int = 3) -> bool:
        """Run one event; whether it was acted on (a report), False when it was given up."""
        trigger = Trigger(e.type, e.id, SOURCE, e.node)
        for attempt in range(1, attempts + 1):
            try:
                # wait=False: a balance event joining a queued run frees this worker at once (a burst
                # of nodes must not hold one thread per node)
                report = self.reactor.node_event(trigger, parse_node_event(e.data), wait=False)
                self.keep(report)
                if report.get("joined"):
                    log.info("%s on %s: joined the queued balance run", e.type, e.node)
                else:
                    log.info("%s on %s: %s, %d blocked%s", e.type, e.node, outcome_counts(report),
                             len(report.get("blocked", [])),
                             f" (one run for {report['coalesced']} events)" if report.get("coalesced", 1) > 1 else "")
                return True
            except ShuttingDown:
                return False
            except (LockBusy, ApiError) as exc:
                # busy, or the API server failing for a moment (what Knative's redelivery does for a
                # function's 429/503): try again; nothing was evicted (a run raises only before)
                if isinstance(exc, ApiError) and not is_transient(exc, read=False):
                    log.error("%s on %s failed (the sweep will catch it): %s", e.type, e.node, exc)
                    return False
                if attempt == attempts:
                    log.warning("%s on %s skipped after %d attempts (the sweep will catch it): %s", e.type, e.node,
                                attempts, exc)
                    return False
                log.info("%s on %s: %s; trying again in %gs", e.type, e.node, exc, self.retry_delay_seconds)
                self.stop.wait(self.retry_delay_seconds)
            except Exception:
                log.exception("%s on %s failed (the sweep will catch it)", e.type, e.node)
                return False
        return False  # pragma: no cover - the last attempt returns

    def keep(self, report: dict[str, Any]) -> None:
        with self._reports_lock:
            self.reports.append(report)
            del self.reports[:-100]

    def sweep_once(self) -> dict[str, Any] | None:
        """One whole-policy run. It acts on every node: the events given up before it began are
        no longer missed (the next leader need not send them again)."""
        with self._open_lock:
            missed_before = dict(self._missed)
        try:
            report = self.reactor.run_requested(Trigger(PING, f"sweep-{uuid.uuid4().hex[:12]}", f"{SOURCE}/sweep"),
                                                RunRequest())
        except (LockBusy, ShuttingDown) as exc:
            log.info("sweep skipped: %s", exc)
            return None
        except Exception:
            log.exception("sweep failed")
            return None
        self.keep(report)
        with self._open_lock:
            for node, mark in missed_before.items():
                if node in self._missed and self._missed[node] == mark:
                    del self._missed[node]
        return report

    def sweep_loop(self, interval: float, leading: threading.Event) -> None:
        """The periodic sweep: a whole-policy run every ``interval`` while ``leading``, until stop."""
        while not self.stop.wait(interval):
            if leading.is_set():
                self.sweep_once()

"""Semantic events and sweeps handed to the reactor on worker threads, retried while busy.

Why: the watch thread must never wait for a run, and a burst must coalesce exactly as with a
Knative function at containerConcurrency > 1: each event is a task of a bounded pool that calls the
same reactor code the functions call. A run that found a lock busy or the API server failing for a
moment (what Knative's redelivery does for a function's 429/503) is tried again; nothing was
evicted then (a run raises only before evicting). Whatever is lost, the sweep catches.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdesched.kube.errors import ApiError, is_transient
from kdesched.reactor import metrics as m
from kdesched.reactor.events.classifier import SemanticEvent
from kdesched.reactor.events.requests import RunRequest, Trigger, parse_node_event
from kdesched.reactor.events.routing import PING
from kdesched.reactor.io.lease import LockBusy, ShuttingDown
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

    def __init__(self, reactor: Reactor, stop: threading.Event, *, workers: int, retry_delay_seconds: float) -> None:
        self.reactor = reactor
        self.stop = stop
        self.retry_delay_seconds = retry_delay_seconds
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kdesched-event")
        self.reports: list[dict[str, Any]] = []  # recent reports (bounded), for tests and debugging
        self._reports_lock = threading.Lock()

    def dispatch(self, events: list[SemanticEvent]) -> None:
        """Hand semantic events to worker threads (the same reactor code the functions call)."""
        for e in events:
            m.EMITTED.labels(e.type).inc()
            if not self.stop.is_set():
                self.pool.submit(self.run_event, e)

    def run_event(self, e: SemanticEvent, attempts: int = 3) -> None:
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
                return
            except ShuttingDown:
                return
            except (LockBusy, ApiError) as exc:
                # busy, or the API server failing for a moment (what Knative's redelivery does for a
                # function's 429/503): try again; nothing was evicted (a run raises only before)
                if isinstance(exc, ApiError) and not is_transient(exc, read=False):
                    log.error("%s on %s failed (the sweep will catch it): %s", e.type, e.node, exc)
                    return
                if attempt == attempts:
                    log.warning("%s on %s skipped after %d attempts (the sweep will catch it): %s", e.type, e.node,
                                attempts, exc)
                    return
                log.info("%s on %s: %s; trying again in %gs", e.type, e.node, exc, self.retry_delay_seconds)
                self.stop.wait(self.retry_delay_seconds)
            except Exception:
                log.exception("%s on %s failed (the sweep will catch it)", e.type, e.node)
                return

    def keep(self, report: dict[str, Any]) -> None:
        with self._reports_lock:
            self.reports.append(report)
            del self.reports[:-100]

    def sweep_once(self) -> dict[str, Any] | None:
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
        return report

    def sweep_loop(self, interval: float, leading: threading.Event) -> None:
        """The periodic sweep: a whole-policy run every ``interval`` while ``leading``, until stop."""
        while not self.stop.wait(interval):
            if leading.is_set():
                self.sweep_once()

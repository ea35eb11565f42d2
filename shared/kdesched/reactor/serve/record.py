"""The start-up reconcile and the node record a leader keeps for the next one.

Why: a watch announces only what changes after its first LIST, so a taint put on a node while
``serve`` restarted would wait for the sweep. The leader compares the nodes it lists at start
with the record the previous leader kept on the leader Lease (:mod:`kdesched.reactor.io.reconcile`),
dispatches the differences as the events a watch would have sent, then keeps the record current.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kdesched.reactor import metrics as m
from kdesched.reactor.events.classifier import Classifier, SemanticEvent
from kdesched.reactor.io.reconcile import NodeMark, NodeRecordStore, differences, mark_of

log = logging.getLogger("kdesched.reactor.serve")

RECORD_SECONDS = 10.0  # how often the leader writes the node record when it changed


class NodeRecorder:
    """The node record of one leader: read once at start (the reconcile), written while it leads."""

    def __init__(self, store: NodeRecordStore, classifier: Classifier, listed: threading.Event,
                 dispatch: Callable[[list[SemanticEvent]], None], stop: threading.Event) -> None:
        self.store = store
        self.classifier = classifier
        self.listed = listed  # the first node LIST is in the classifier
        self.dispatch = dispatch
        self.stop = stop
        self._recorded: dict[str, NodeMark] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.reconcile_and_record, name="kdesched-node-record", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:  # it logs: let it end before the process (or a test) does
            self._thread.join(timeout=timeout)

    def reconcile_and_record(self) -> None:
        """The start-up reconcile (:mod:`kdesched.reactor.io.reconcile`): once the first node LIST is in,
        dispatch what changed since the node record the previous leader kept; then keep the record
        up to date (every ``RECORD_SECONDS`` when something changed, and once at shutdown)."""
        while not self.listed.wait(0.1):
            if self.stop.is_set():
                return
        if self.stop.is_set():
            return
        try:
            recorded = self.store.read()
        except Exception as exc:  # noqa: BLE001 - the sweep remains the safety net
            log.warning("reading the node record failed: no start-up reconcile (%s)", exc)
            recorded = None
        if recorded is None:
            log.info("no node record on the leader Lease (first start, or unreadable): no start-up reconcile")
        else:
            events = differences(recorded, self.classifier.digests())
            m.RECONCILED.inc(len(events))
            log.info("start-up reconcile: %d node change(s) since the last record%s", len(events),
                     ": " + ", ".join(f"{e.type.removeprefix('dev.kdesched.')} {e.node}" for e in events[:10])
                     if events else "")
            self.dispatch(events)
        while not self.stop.wait(RECORD_SECONDS):
            self.write()

    def write(self) -> None:
        """Write the node record if it changed since the last write (best effort, logged)."""
        marks = {d.name: mark_of(d) for d in self.classifier.digests()}
        if not self.classifier.seeded or marks == self._recorded:
            return
        try:
            why = self.store.write(marks)
        except Exception as exc:  # noqa: BLE001 - the next tick tries again
            why = str(exc)
        if why:
            log.debug("node record not written: %s", why)
        else:
            self._recorded = marks

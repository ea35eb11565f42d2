"""What a live run tells people after it evicted: the report's checked moves and surge-first moves,
their metrics, and the Events on the objects operators look at.

Why: a run's decision and evictions are one job; telling about them is another, with its own rule
that an Event or a metric never fails a run whose evictions happened. The Events themselves are
posted by :mod:`kdesched.reactor.io.whynot` and the API client; this module decides what to say
after each run (docs/safety.md, checked moves; docs/reactor.md, "why not" Events).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from kdesched.admission.pipeline import AdmissionSettings
from kdesched.engine import RunReport
from kdesched.evictor.ledger import (
    ACHIEVED,
    PENDING_TIMEOUT,
    UNKNOWN,
    WASTED,
    CheckedMove,
    backoff_key,
    workload_key,
)
from kdesched.kube.client import KubeClient
from kdesched.reactor import metrics as m
from kdesched.reactor.io.whynot import WhyNotEvents
from kdesched.reactor.run.admit import Decided, RunScope
from kdesched.reactor.run.continuation import parse_scope

log = logging.getLogger("kdesched.reactor")
MAX_CHECKED_LISTED = 20  # checked moves listed one by one in a report (the counts cover them all)


class RunNotices:
    """The notices of one process's live runs."""

    def __init__(self, client: KubeClient, why_not: WhyNotEvents, admission: AdmissionSettings,
                 replacement_timeout_seconds: float) -> None:
        self.client = client
        self.why_not = why_not
        self.admission = admission
        self.replacement_timeout_seconds = replacement_timeout_seconds

    def live_run_done(self, scope: RunScope, decided: Decided, report: RunReport) -> RunReport:
        """After a live run recorded its outcomes: the held pods the ledger gave up, the checked
        moves (``summary.moves``) and surge-first moves (``summary.surge``) in the report, then the
        "why not" Events of what it held back. Returns the report with its summary."""
        if decided.written:
            self.timed_out(decided)
        report = replace(report, extra={**report.extra, "moves": self.checked_moves(decided, report),
                                        **surge_summary(decided)})
        self.why_not_events(scope, report)
        return report

    def why_not_events(self, scope: RunScope, report: RunReport) -> None:
        """The "why not" Events of the run (reactor.io.whynot): on the node for a node event's run (on
        each pod's own node for a batch of node scopes)."""
        try:
            node = parse_scope(scope.key).node or None
        except ValueError:
            node = None
        try:
            self.why_not.run_done(report, node, own_nodes=scope.per_node)
        except Exception:  # an Event must never fail a run whose evictions happened
            log.exception("could not post the run's \"why not\" Events")

    def checked_moves(self, decided: Decided, report: RunReport) -> dict[str, Any]:
        """Checked moves (docs/safety.md): the moves this run made, and the outcome of those its
        settle of the ledger ended (counted once cluster-wide: only by the run whose write of the
        settled ledger went through), as metrics, ``WastedMove`` Events and the report's
        ``summary.moves``."""
        admitted = decided.admitted_uids
        made = [o for o in report.outcomes if o.result in ("evicted", "already-gone") and o.eviction.pod.uid in admitted]
        for o in made:
            m.MOVES_MADE.labels(o.eviction.strategy).inc()
        checked = decided.settled.checked if decided.written else ()
        for c in checked:
            m.MOVES.labels(c.strategy, c.outcome).inc()
            if c.seconds is not None:
                m.MOVE_READY.labels(c.strategy).observe(c.seconds)
            landed = f", replacement Ready on node {c.landed}" if c.landed and c.seconds is not None else ""
            log.info("checked move of %s off node %s (%s, %s): %s%s%s", c.pod, c.source, c.strategy, c.workload,
                     c.outcome, landed, f" ({c.why})" if c.why else "")
        backoffs = decided.settled.ledger.backoffs
        cd = self.admission

        def backoff_note(c: CheckedMove) -> str:
            b = backoffs.get(backoff_key(c.workload, c.strategy))
            if b is None:
                return ""
            until = datetime.fromtimestamp(b.ends(cd.backoff_base_seconds, cd.backoff_max_seconds), UTC)
            return (f"{c.workload} is backed off for {c.strategy} after {b.wasted} wasted move(s) until "
                    f"{until:%Y-%m-%dT%H:%M:%SZ}")

        if checked:
            try:
                self.why_not.wasted(checked, backoff_note)
            except Exception:  # an Event must never fail a run whose evictions happened
                log.exception("could not post the run's WastedMove Events")
        outcomes = [c.outcome for c in checked]
        return {"made": len(made), "checked": len(checked), "achieved": outcomes.count(ACHIEVED),
                "wasted": outcomes.count(WASTED), "pendingTimeout": outcomes.count(PENDING_TIMEOUT),
                "unknown": outcomes.count(UNKNOWN), "outcomes": [c.to_json() for c in checked[:MAX_CHECKED_LISTED]]}

    def timed_out(self, decided: Decided) -> None:
        """An Event on each held pod the ledger gave up at the replacement timeout (the move ends paced)."""
        m.REPLACEMENT_TIMEOUTS.inc(len({key for key, _ in decided.settled.timed_out}))
        for key, h in decided.settled.timed_out:
            namespace, _, name = h.pod.partition("/")
            self.client.create_event(namespace=namespace, name=name, uid=h.uid, reason="EvictionPaced",
                                     note=(f"kdesched held this pod's eviction ({h.scope}) until {key} was back at its "
                                           f"Ready count, which did not happen within replacementTimeoutSeconds "
                                           f"({self.replacement_timeout_seconds:g}s); the next event or sweep "
                                           "re-decides"))


def surge_summary(decided: Decided) -> dict[str, Any]:
    """``summary.surge`` of a run report: the surge-first moves begun, those that ended in its settle,
    and the pods that could not move surge-first and kept the normal rules (with why)."""
    chosen = decided.chosen
    if chosen is None and not decided.surges_ended:
        return {}
    started = []
    for key, (s, _) in (chosen.surges.items() if chosen is not None else ()):
        why = decided.surges_started.get(key)
        started.append({"workload": key, "pod": s.pod, "node": s.node, "replicas": s.original, "surged": s.surged,
                        "why": chosen.candidates[key].why if chosen else "",
                        "result": "begun" if why == "" else ("not written" if why is None else "not begun"),
                        **({"message": why} if why else {})})
    fallbacks = [{"workload": workload_key(c.pod), "pod": c.pod.key, "node": c.pod.node_name, "reason": n.reason.value,
                  "message": n.message, "why": c.why, **({"control": n.control.value} if n.control else {})}
                 for c, n in (chosen.fallbacks if chosen is not None else ())]
    return {"surge": {"started": started, "ended": [e.to_json() for e in decided.surges_ended],
                      "fallbacks": fallbacks}}

"""The "why not" Event reasons of docs/safety.md ("Why not" Events) against what the code posts: every
reason posted is in the table, and a hold that passes in seconds (a node change the scheduler has not
seen yet) posts none, rather than falling back to ``DisruptionWindow``."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from kdesched.engine import RunPlan, RunReport
from kdesched.evictor.execute import EvictionOutcome
from kdesched.evictor.reasons import Reason
from kdesched.model.records import Pod
from kdesched.reactor.io.whynot import WhyNotEvents
from kdesched.strategies.framework import PlannedEviction

from tests.builders import pod_obj
from tests.deploy import REPO


def documented_why_not_reasons() -> dict[str, str]:
    """docs/safety.md's table 'Event reason | held back by' -> {reason: meaning}."""
    text = (REPO / "docs" / "safety.md").read_text(encoding="utf-8")
    section = text.split('### "Why not" Events', 1)[1].split("\n### ", 1)[0]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|$", section, re.MULTILINE)}


def report_with(result: str, cause: str, message: str) -> RunReport:
    pod = Pod.from_api(pod_obj("web-7d9f8-0", "node-a", owner_name="web-7d9f8",
                               labels={"app": "web", "pod-template-hash": "7d9f8"}))
    eviction = PlannedEviction(pod, "node-a", "RemovePodsViolatingNodeTaints", "p", "does not tolerate the taint")
    plan = RunPlan((eviction,), (), (), (), (), ("node-a",), {"node-a": 1}, datetime.now(UTC))
    return RunReport(plan, (EvictionOutcome(eviction, result, message, 0, cause),), False)


def posted_reasons(report: RunReport) -> list[str]:
    posted: list[dict[str, Any]] = []
    events = WhyNotEvents(lambda **kw: posted.append(kw) or True, clock=lambda: 0.0, wall=lambda: 0.0)
    events.run_done(report, "node-a")
    return [p["reason"] for p in posted]


def test_a_fresh_node_change_posts_no_why_not_event() -> None:
    """An operator taints node-a; the taint run defers its eviction for ~3 s (docs/safety.md, "A node
    change the scheduler has not seen yet": reported `deferred`, cause `fresh-node-change`). The
    "why not" Event on node-a then says reason `DisruptionWindow`, which docs/safety.md's table
    defines as "a closed disruption window": `kubectl describe node node-a` sends the operator looking
    for a window the policy does not have (kdesched_why_not_events_total{reason="DisruptionWindow"}
    counts it too)."""
    message = ("deferred: node node-a's taints were written 0.4s ago: evicting in 2.6s, once the scheduler "
               "has seen them")
    reasons = posted_reasons(report_with("deferred", Reason.FRESH_CHANGE.value, message))
    documented = documented_why_not_reasons()
    assert documented.get("DisruptionWindow") == "a closed disruption window"
    # it passes in seconds and the run is repeated then (as a rate limit: no Event)
    assert reasons == [], (
        f"a fresh-node-change deferral is posted as {reasons}; docs/safety.md: DisruptionWindow = "
        f"{documented['DisruptionWindow']!r}")


def test_a_closed_window_and_an_unknown_deferral_cause_still_post_disruption_window() -> None:
    assert posted_reasons(report_with("deferred", Reason.WINDOW.value, "deferred: window closed")) == ["DisruptionWindow"]
    assert posted_reasons(report_with("deferred", "", "deferred: window closed")) == ["DisruptionWindow"]


def test_every_why_not_event_reason_the_code_posts_is_in_the_docs_table() -> None:
    """An operator filtering `kubectl get events --field-selector reason=...` by the documented table
    (docs/safety.md, "Why not" Events) misses the alert brake's Events: the code posts reason
    `AlertBrake` for evictions the alert brake deferred (kdesched.evictor.reasons._EVENTS), and the
    table does not list it."""
    documented = set(documented_why_not_reasons())
    posted = {r.event for r in Reason if r.event is not None}
    # and the one an alert-brake deferral really posts, end to end
    posted.update(posted_reasons(report_with("deferred", Reason.ALERT_BRAKE.value,
                                             "deferred: alert brake: 1 alert(s) firing ...")))
    assert posted - documented == set(), f"posted but not in docs/safety.md's table: {sorted(posted - documented)}"

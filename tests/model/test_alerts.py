"""``parse_alerts`` reads Prometheus' alerts entry by entry: one entry it cannot read is skipped
and named, not the whole answer. Before, one malformed entry made the whole answer unreadable, so
with ``alertBrake.failClosed: false`` a firing alert in the same answer, matching the filter, was
dropped and evictions went on (docs/safety.md, "Fail closed")."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.model.alerts import parse_alerts
from kdesched.model.errors import ModelError

W = "GET /api/v1/alerts: "


def answer(*alerts: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"alerts": list(alerts)}}


def test_one_malformed_entry_does_not_hide_a_readable_firing_alert() -> None:
    entries = parse_alerts(answer(
        {"labels": "EtcdMembersDown", "state": "firing"},  # labels not an object
        {"labels": {"alertname": "EtcdMembersDown", "job": "etcd"}, "state": "firing",
         "annotations": {"summary": "members down"}, "activeAt": "2026-11-28T02:00:00Z"},
        {"labels": {"job": "x"}, "state": "firing"},  # no alertname
        {"labels": {"alertname": "X"}, "state": 1},  # state not a string
        "not an object",
        {"labels": {"alertname": "Y", "replica": 1}, "state": "pending"},  # a label that is not a string
        {"labels": {"alertname": "Z"}, "state": "firing", "annotations": {"summary": 3}},
    ), W)
    assert [(a.name, a.state, a.summary) for a in entries.alerts] == [
        ("EtcdMembersDown", "firing", "members down"), ("Z", "firing", "")]
    assert entries.skipped == (
        f"{W}data.alerts[0].labels: must be a map of strings",
        f"{W}data.alerts[2].labels.alertname: is missing",
        f"{W}data.alerts[3].state: must be firing or pending, got 1",
        f"{W}data.alerts[4]: must be an object",
        f"{W}data.alerts[5].labels: must be a map of strings",
    )


def test_annotations_only_feed_messages_so_bad_ones_keep_the_alert() -> None:
    entries = parse_alerts(answer({"labels": {"alertname": "A"}, "state": "firing", "annotations": ["x"]},
                                  {"labels": {"alertname": "B"}, "state": "firing",
                                   "annotations": {"summary": 1, "description": "why"}}))
    assert [(a.name, a.summary) for a in entries.alerts] == [("A", ""), ("B", "why")] and entries.skipped == ()


def test_a_clean_answer_skips_nothing() -> None:
    entries = parse_alerts(answer({"labels": {"alertname": "A"}, "state": "pending"}))
    assert [(a.name, a.state) for a in entries.alerts] == [("A", "pending")] and entries.skipped == ()


@pytest.mark.parametrize("doc, message", [
    ({"status": "error", "error": "nope"}, "status: the request did not succeed"),
    ({"status": "success", "data": []}, "data: must be an object"),
    ({"status": "success", "data": {"alerts": {}}}, "data.alerts: must be a list"),
])
def test_an_answer_that_is_not_the_alerts_api_is_still_an_error(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        parse_alerts(doc, W)

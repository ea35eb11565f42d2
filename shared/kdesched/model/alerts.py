"""Prometheus alerts as records: what the alert brake (:mod:`kdesched.admission.alerts`) judges.

Why in the model layer: the records are built from the raw answer of Prometheus' HTTP API by
:mod:`kdesched.kube.prometheus` (the I/O) and judged by :mod:`kdesched.admission.alerts` (the
decision, above kube); a record both can import has to live below both. Pure: no I/O.

Shapes (Prometheus HTTP API, ``GET /api/v1/alerts``)::

    {"status": "success", "data": {"alerts": [
        {"labels": {"alertname": "X", ...}, "annotations": {...}, "state": "firing" | "pending",
         "activeAt": "2026-11-28T02:00:00Z", "value": "1e+00"}]}}

and, for the settle time, an instant query whose vector has one sample per ``alertname`` and
``alertstate``, valued the seconds since Prometheus last saw that alert active (by Prometheus'
own clock: no process's wall clock is compared with another's).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdesched.model.errors import ModelError

FIRING = "firing"
PENDING = "pending"
ALERT_STATES = (FIRING, PENDING)


@dataclass(frozen=True, slots=True)
class Alert:
    """One active alert (an alerting rule's output for one label set)."""

    name: str  # the ``alertname`` label
    state: str  # firing | pending
    labels: Mapping[str, str] = field(default_factory=dict)
    active_at: str = ""  # RFC 3339, as Prometheus gives it (when it became pending)
    summary: str = ""  # the ``summary`` (else ``description``) annotation, for messages


@dataclass(frozen=True, slots=True)
class AlertsReading:
    """What one read of Prometheus' alerts gave: the active alerts that could be read, and
    ``error`` when the read failed (the alerts then hold what was read before it failed, often
    nothing: the brake fails closed by default). ``recent``: (alertname, state) -> seconds since
    Prometheus last saw it active, for the alerts active within the settle time (empty when no
    settle time was asked for). ``skipped``: why each entry of the answer that could not be read was
    left out (``alerts`` holds the others): the answer is incomplete, as with ``error``."""

    alerts: tuple[Alert, ...] = ()
    error: str = ""
    source: str = ""  # the Prometheus base URL
    recent: Mapping[tuple[str, str], float] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AlertEntries:
    """The entries of a ``/api/v1/alerts`` answer: the alerts read, and why each other one was not."""

    alerts: tuple[Alert, ...] = ()
    skipped: tuple[str, ...] = ()  # "<where>data.alerts[i].<field>: <problem>", in the answer's order


def _labels(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ModelError(where, "must be a map of strings")
    return dict(raw)


def _success_data(doc: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    status = doc.get("status")
    if status != "success":
        detail = doc.get("error") or doc.get("errorType") or "no error given"
        raise ModelError(f"{where}status", f"the request did not succeed (status {status!r}: {detail})")
    data = doc.get("data")
    if not isinstance(data, Mapping):
        raise ModelError(f"{where}data", "must be an object")
    return data


def _alert(raw: Any, at: str) -> Alert:
    """One entry; ModelError when its name or its state cannot be read (what the brake judges).
    ``annotations`` and ``activeAt`` only feed messages: when they cannot be read the alert keeps
    its name and state and loses its summary."""
    if not isinstance(raw, Mapping):
        raise ModelError(at, "must be an object")
    labels = _labels(raw.get("labels"), f"{at}.labels")
    name = labels.get("alertname", "")
    if not name:
        raise ModelError(f"{at}.labels.alertname", "is missing")
    state = raw.get("state")
    if state not in ALERT_STATES:
        raise ModelError(f"{at}.state", f"must be firing or pending, got {state!r}")
    notes = raw.get("annotations")
    notes = notes if isinstance(notes, Mapping) else {}
    summary = next((v for v in (notes.get("summary"), notes.get("description")) if isinstance(v, str) and v), "")
    active_at = raw.get("activeAt")
    return Alert(name, str(state), labels, active_at if isinstance(active_at, str) else "", summary)


def parse_alerts(doc: Mapping[str, Any], where: str = "") -> AlertEntries:
    """The alerts of a ``/api/v1/alerts`` answer, entry by entry. An answer that is not that API's
    (not a success, no ``data.alerts`` list) is a ModelError. An entry without a name, with a state
    other than firing/pending or labels that are not strings is skipped and named in
    ``AlertEntries.skipped``, never dropped silently: a brake that ignored what it cannot read would
    fail open; one that dropped every readable alert for one bad entry would too (with
    ``failClosed: false``), even while a readable entry says an alert that holds is firing."""
    data = _success_data(doc, where)
    items = data.get("alerts")
    if not isinstance(items, list):
        raise ModelError(f"{where}data.alerts", "must be a list")
    alerts: list[Alert] = []
    skipped: list[str] = []
    for i, raw in enumerate(items):
        try:
            alerts.append(_alert(raw, f"{where}data.alerts[{i}]"))
        except ModelError as exc:
            skipped.append(str(exc))
    return AlertEntries(tuple(alerts), tuple(skipped))


def parse_recent(doc: Mapping[str, Any], where: str = "") -> dict[tuple[str, str], float]:
    """(alertname, alertstate) -> seconds ago, from the settle query's instant vector."""
    data = _success_data(doc, where)
    if data.get("resultType") != "vector":
        raise ModelError(f"{where}data.resultType", f"must be \"vector\", got {data.get('resultType')!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise ModelError(f"{where}data.result", "must be a list")
    out: dict[tuple[str, str], float] = {}
    for i, raw in enumerate(result):
        at = f"{where}data.result[{i}]"
        if not isinstance(raw, Mapping):
            raise ModelError(at, "must be an object")
        metric = _labels(raw.get("metric"), f"{at}.metric")
        name, state = metric.get("alertname", ""), metric.get("alertstate", "")
        pair = raw.get("value")
        try:
            ago = float(pair[1]) if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str) \
                else math.nan
        except ValueError:
            ago = math.nan
        if not name or state not in ALERT_STATES or not math.isfinite(ago):
            raise ModelError(at, f"must name an alertname and alertstate and hold a number, got {dict(raw)!r}")
        key = (name, state)
        out[key] = min(max(ago, 0.0), out.get(key, math.inf))
    return out

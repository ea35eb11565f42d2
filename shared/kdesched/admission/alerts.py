"""The alert brake: no eviction while Prometheus alerts the operator named are firing.

Why: the health brake (:mod:`kdesched.admission.health`) watches the nodes; what runs on them can be
unwell while every node is Ready: a database resyncing a replica, an etcd member down, a storage
pool degraded, an SLO burning. Moving pods then adds restarts and cold caches exactly where there
is no slack, and the workload's own alerts are the best signal of that. kured holds node reboots
on Prometheus alerts for the same reason (``--alert-filter-regexp``, ``--alert-firing-only``,
``--alert-filter-match-only``); this is its semantics, applied to evictions:

* the filter is a regular expression **searched** in the ``alertname`` label (unanchored, as Go's
  ``regexp.MatchString`` in kured's ``pkg/blockers/prometheus.go``: anchor with ``^...$`` to name
  whole alerts);
* ``alertFilterMatchOnly: true`` (kdesched's default): only alerts the filter matches hold
  evictions. ``false``: kured's default, the filter names alerts to *ignore* and every other
  active alert holds;
* ``alertFiringOnly: true`` (kdesched's default): pending alerts (their ``for:`` not yet elapsed)
  do not hold. kured defaults both to false; kdesched defaults them to true because a cluster of
  real size always has some alert active (kube-prometheus' ``Watchdog`` fires forever by design)
  and the brake must hold on what the operator named, not on everything;
* Prometheus unreachable, or an answer that cannot be read: the brake holds (fail closed, as kured:
  "Reboot blocked: prometheus query error"), saying why; ``failClosed: false`` lets evictions go on.
  An answer read entry by entry: an entry that cannot be read is skipped and counted, the others are
  judged. A counted alert among those that were read holds whatever ``failClosed`` says (a clear
  reason to hold is never dropped for another entry's sake); without one, skipped entries are an
  incomplete answer, held like an unreadable one unless ``failClosed: false`` (:func:`judge`).

Pure: the reading comes from :func:`kdesched.kube.usage.read_brake_alerts` (the token as
``metricsProviders`` takes it, then :func:`kdesched.kube.prometheus.read_alerts`); :func:`judge`
decides. Wiring (one line in the admission pipeline, ``s = settings.alert_brake``)::

    verdict = judge(read_brake_alerts(client, s.url, secret_namespace=s.token_secret_namespace,
                                      secret_name=s.token_secret_name, token_file=s.token_file,
                                      ca_file=s.ca_file, timeout=s.timeout_seconds,
                                      settle_seconds=s.settle_seconds), s) if s.enabled else None

A held verdict defers every eviction of the run (like the health brake) and asks to re-decide in
``retry_after`` seconds.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from kdesched.admission.control import Check, RunContext
from kdesched.evictor.reasons import Reason, Verdict
from kdesched.model.alerts import FIRING, Alert, AlertsReading
from kdesched.policy.errors import PolicyError
from kdesched.policy.errors import show_value as _show

__all__ = ["Alert", "AlertBrake", "AlertBrakeSettings", "AlertReason", "AlertVerdict", "AlertsReading", "judge",
           "parse_alert_brake"]

KNOWN_KEYS = ("enabled", "url", "authToken", "tokenFile", "caFile", "timeoutSeconds", "alertFilterRegexp",
              "alertFilterMatchOnly", "alertFiringOnly", "settleSeconds", "recheckSeconds", "failClosed")
NAMED = 5  # alerts named in a message; the rest are counted


class AlertReason(enum.StrEnum):
    """Why the alert brake holds (a low-cardinality label for metrics, Events and reports)."""

    FIRING = "alerts-firing"
    SETTLING = "alerts-settling"
    UNREADABLE = "alerts-unreadable"


@dataclass(frozen=True, slots=True)
class AlertBrakeSettings:
    """``kdesched.alertBrake`` (docs/safety.md, "Alert brake")."""

    enabled: bool = False
    url: str = ""  # Prometheus base URL (http or https, may carry a path prefix)
    token_secret_namespace: str = ""  # authToken.secretReference (key prometheusAuthToken, as metricsProviders)
    token_secret_name: str = ""
    token_file: str = ""  # a bearer token file, read on every request (rotated tokens are picked up)
    ca_file: str = ""  # PEM CA for https; unset: the service account CA(s), else the system's
    timeout_seconds: float = 5.0  # one request: connect + answer
    alert_filter: re.Pattern[str] | None = None  # searched in alertname (kured's --alert-filter-regexp)
    alert_filter_match_only: bool = True  # True: matching alerts hold; False: matching alerts are ignored
    alert_firing_only: bool = True  # pending alerts do not hold
    settle_seconds: float = 0.0  # hold this long after the last counted alert stopped being active
    recheck_seconds: float = 30.0  # a held run re-decides this soon
    fail_closed: bool = True  # alerts that cannot be read hold every eviction

    @property
    def filter_source(self) -> str:
        return self.alert_filter.pattern if self.alert_filter is not None else ""


@dataclass(frozen=True, slots=True)
class AlertVerdict:
    """The brake's decision on one reading. ``message`` is the sentence the report, Events, logs
    and /readyz give; ``retry_after``: seconds until the run should decide again (None: not held)."""

    holds: bool
    reason: AlertReason | None = None
    message: str = ""
    retry_after: float | None = None
    alerts: tuple[str, ...] = ()  # the names of the alerts that hold (sorted, unique)


# --- parsing -------------------------------------------------------------------------------------




class _Fields:
    def __init__(self, raw: Mapping[str, Any], where: str, errors: list[str]) -> None:
        self.raw, self.where, self.errors = raw, where, errors

    def error(self, key: str, message: str) -> None:
        self.errors.append(f"{self.where}.{key}: {message}")

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"must be true or false, got {_show(value)}")
            return default
        return value

    def number(self, key: str, default: float, *, positive: bool) -> float:
        value = self.raw.get(key)
        if value is None:
            return default
        # a string is refused, digits or not: "10" and "１０" (Unicode digits) are not numbers here
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (positive and value == 0):
            self.error(key, f"must be a number {'> 0' if positive else '>= 0'} (seconds), got {_show(value)}")
            return default
        return float(value)

    def string(self, key: str, what: str) -> str:
        value = self.raw.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.error(key, f"must be {what}, got {_show(value)}")
            return ""
        return value


def _mapping(raw: Any, where: str, known: tuple[str, ...], errors: list[str]) -> Mapping[str, Any] | None:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping, got {_show(raw)}")
        return None
    for key in raw:
        if key not in known:
            errors.append(f"{where}.{key}: unknown field (known: {', '.join(known)})")
    return raw


def _url_problem(url: str) -> str:
    if not url or url != url.strip() or any(c.isspace() for c in url):
        return "must be an http(s) URL without spaces"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL such as http://prometheus.monitoring.svc:9090"
    if parts.query or parts.fragment or "?" in url or "#" in url:
        return "must be Prometheus' base URL, without a query or fragment (/api/v1/alerts is added to it)"
    return ""


def parse_alert_brake(raw: Any, path: str = "kdesched.alertBrake") -> AlertBrakeSettings:
    """Validate a raw ``kdesched.alertBrake`` block; raises PolicyError naming every bad field.

    Every field is checked even while ``enabled`` is false (a typo shows before it matters); the
    URL and the filter are required only when it is enabled."""
    errors: list[str] = []
    block = _mapping(raw, path, KNOWN_KEYS, errors)
    if block is None:
        raise PolicyError(errors)
    f = _Fields(block, path, errors)
    d = AlertBrakeSettings()
    enabled = f.boolean("enabled", d.enabled)

    before = len(errors)
    url = f.string("url", "an http(s) URL")
    if url:
        problem = _url_problem(url)
        if problem:
            f.error("url", f"{problem}, got {_show(url)}")
    elif enabled and len(errors) == before:
        f.error("url", "is required when the alert brake is enabled (Prometheus' base URL)")

    namespace = name = ""
    token = _mapping(block.get("authToken"), f"{path}.authToken", ("secretReference",), errors)
    if token:
        ref = _mapping(token.get("secretReference"), f"{path}.authToken.secretReference", ("namespace", "name"),
                       errors)
        if ref is not None:
            rf = _Fields(ref, f"{path}.authToken.secretReference", errors)
            namespace, name = rf.string("namespace", "a namespace name"), rf.string("name", "a Secret name")
            if not namespace or not name:
                errors.append(f"{path}.authToken.secretReference: needs both namespace and name")
    token_file = f.string("tokenFile", "a file path")
    if token_file and name:
        f.error("tokenFile", "set authToken.secretReference or tokenFile, not both")
    ca_file = f.string("caFile", "a file path")

    pattern: re.Pattern[str] | None = None
    source = block.get("alertFilterRegexp")
    if source is not None:
        if not isinstance(source, str) or not source:
            f.error("alertFilterRegexp", f"must be a non-empty regular expression, got {_show(source)}")
        else:
            try:
                pattern = re.compile(source)
            except re.error as exc:
                f.error("alertFilterRegexp", f"is not a valid regular expression ({exc}), got {_show(source)}")
    elif enabled:
        f.error("alertFilterRegexp", "is required when the alert brake is enabled: the alerts that hold evictions "
                "(searched in alertname; \"^(EtcdMembersDown|CephHealthError)$\"), or with alertFilterMatchOnly: "
                "false the alerts to ignore (\"^(Watchdog|InfoInhibitor)$\")")

    settings = AlertBrakeSettings(
        enabled=enabled, url=url, token_secret_namespace=namespace, token_secret_name=name, token_file=token_file,
        ca_file=ca_file, timeout_seconds=f.number("timeoutSeconds", d.timeout_seconds, positive=True),
        alert_filter=pattern, alert_filter_match_only=f.boolean("alertFilterMatchOnly", d.alert_filter_match_only),
        alert_firing_only=f.boolean("alertFiringOnly", d.alert_firing_only),
        settle_seconds=f.number("settleSeconds", d.settle_seconds, positive=False),
        recheck_seconds=f.number("recheckSeconds", d.recheck_seconds, positive=True),
        fail_closed=f.boolean("failClosed", d.fail_closed),
    )
    if errors:
        raise PolicyError(errors)
    return settings


# --- the verdict ---------------------------------------------------------------------------------


def counts(name: str, state: str, settings: AlertBrakeSettings) -> bool:
    """Does an active alert ``name`` in ``state`` hold evictions under ``settings``? (kured's
    ``matchesRegex(filter, name, filterMatchOnly) && (!firingOnly || state == "firing")``)"""
    if settings.alert_firing_only and state != FIRING:
        return False
    if settings.alert_filter is None:
        return True
    return bool(settings.alert_filter.search(name)) == settings.alert_filter_match_only


def _named(names: Mapping[str, int]) -> str:
    shown = [f"{n} (x{c})" if c > 1 else n for n, c in sorted(names.items())[:NAMED]]
    more = len(names) - NAMED
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _filter_words(settings: AlertBrakeSettings) -> str:
    if settings.alert_filter is None:
        return "active"
    verb = "matching" if settings.alert_filter_match_only else "not ignored by"
    return f"{verb} alertBrake.alertFilterRegexp {_show(settings.filter_source)}"


def _skipped_words(reading: AlertsReading, where: str) -> str:
    """How many entries of the answer could not be read, of how many, and why the first ("" if none)."""
    if not reading.skipped:
        return ""
    total = len(reading.skipped) + len(reading.alerts)
    return (f"{len(reading.skipped)} of {total} alert entries answered by Prometheus at {where} cannot be read "
            f"(skipped; the first: {reading.skipped[0]})")


def _holding(reading: AlertsReading, settings: AlertBrakeSettings, where: str) -> AlertVerdict | None:
    """Held on what was read: a counted alert active now, or within the settle time (None: neither)."""
    holding: dict[str, int] = {}
    for alert in reading.alerts:
        if counts(alert.name, alert.state, settings):
            holding[alert.name] = holding.get(alert.name, 0) + 1
    what = "firing" if settings.alert_firing_only else "active"
    if holding:
        total = sum(holding.values())
        return AlertVerdict(True, AlertReason.FIRING, (
            f"alert brake: {total} alert(s) {what} in Prometheus at {where} {_filter_words(settings)}: "
            f"{_named(holding)}; no eviction is admitted while they are {what}"
            + (f" nor for alertBrake.settleSeconds ({settings.settle_seconds:g}s) after" if settings.settle_seconds
               else "") + f"; re-checked every {settings.recheck_seconds:g}s"),
            settings.recheck_seconds, tuple(sorted(holding)))
    if settings.settle_seconds > 0:
        left: dict[str, float] = {}
        for (name, state), ago in reading.recent.items():
            remaining = settings.settle_seconds - ago
            if remaining > 0 and counts(name, state, settings):
                left[name] = max(left.get(name, 0.0), remaining)
        if left:
            wait = max(left.values())
            return AlertVerdict(True, AlertReason.SETTLING, (
                f"alert brake: alert(s) {_filter_words(settings)} were {what} in Prometheus at {where} within "
                f"alertBrake.settleSeconds ({settings.settle_seconds:g}s): {_named(dict.fromkeys(left, 1))}; "
                f"evictions resume in {math.ceil(wait)}s if they stay resolved"),
                max(wait, 1.0), tuple(sorted(left)))
    return None


def judge(reading: AlertsReading, settings: AlertBrakeSettings) -> AlertVerdict:
    """The brake's verdict on one reading of Prometheus' alerts.

    In this order: a counted alert that was read, firing (or, with ``alertFiringOnly: false``,
    pending), holds, whatever else the answer held and whatever ``failClosed`` says. Then an
    incomplete reading (the read failed: ``error``; or entries of the answer could not be read:
    ``skipped``) holds when ``failClosed`` is true. Then a counted alert active within
    ``settleSeconds`` holds. Then, with ``failClosed: false``, an incomplete reading lets evictions go
    on, saying so. A held message names the entries that were skipped, if any."""
    if not settings.enabled:
        return AlertVerdict(False)
    where = reading.source or settings.url
    skipped = _skipped_words(reading, where)
    verdict = _holding(reading, settings, where)
    if verdict is not None and verdict.reason is AlertReason.FIRING:
        return _with_skipped(verdict, skipped)
    if reading.error or skipped:
        what = "the alerts" if reading.error else "every alert"
        problem = "; ".join(p for p in (reading.error, skipped) if p)
        if settings.fail_closed:
            until = (f"until Prometheus at {where} answers" if reading.error
                     else "while one of them might be an alert that holds")
            return AlertVerdict(True, AlertReason.UNREADABLE, (
                f"alert brake: cannot read {what} ({problem}); no eviction is admitted {until} "
                f"(alertBrake.failClosed); re-checked every {settings.recheck_seconds:g}s"),
                settings.recheck_seconds)
        if verdict is None:
            return AlertVerdict(False, message=(
                f"alert brake: cannot read {what} ({problem}); alertBrake.failClosed is false: evictions go on"))
    return AlertVerdict(False) if verdict is None else _with_skipped(verdict, skipped)


def _with_skipped(verdict: AlertVerdict, skipped: str) -> AlertVerdict:
    return replace(verdict, message=f"{verdict.message}; {skipped}") if skipped else verdict


def fail_open_note(reading: AlertsReading | None, settings: AlertBrakeSettings) -> str:
    """What a run reports and logs when it could not read the alerts, or some entries of the answer,
    and went on because ``alertBrake.failClosed`` is false (docs/safety.md, "Fail closed"); ""
    otherwise. Without it an outage of Prometheus let evictions run with no trace of the unread brake."""
    if reading is None or not settings.enabled or settings.fail_closed or not (reading.error or reading.skipped):
        return ""
    verdict = judge(reading, settings)
    return "" if verdict.holds else verdict.message


# --- the pipeline's control ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AlertBrake:
    """The pipeline's second control: no eviction while the alerts the operator named are firing.
    The reading is taken by the reactor before the run decides (``RunContext.alerts``)."""

    settings: AlertBrakeSettings = field(default_factory=AlertBrakeSettings)
    name: str = "alert-brake"

    def start(self, ctx: RunContext) -> Check:
        return _AlertCheck(self.settings, ctx)


class _AlertCheck(Check):
    def __init__(self, settings: AlertBrakeSettings, ctx: RunContext) -> None:
        self.verdict: AlertVerdict | None = None
        if settings.enabled:
            reading = ctx.alerts if ctx.alerts is not None else AlertsReading(
                source=settings.url, error="the alerts were not read for this run")
            self.verdict = judge(reading, settings)
        self.now = ctx.now

    def run(self) -> Verdict | None:
        v = self.verdict
        if v is None or not v.holds:
            return None
        return Verdict(Reason.ALERT_BRAKE, v.message, self.now + (v.retry_after or 30.0))

"""A small Prometheus HTTP API client: an instant query, answered as
:class:`~kdesched.model.usage.PrometheusReadings`; and the active alerts, answered as
:class:`~kdesched.model.alerts.AlertsReading` (the alert brake, :mod:`kdesched.admission.alerts`).

Why not a library: kdesched needs two calls (``GET /api/v1/query``, ``GET /api/v1/alerts``), a
bearer token and a CA; the standard library does that with a bounded timeout and no new
dependency. Why here: it is I/O, and only :mod:`kdesched.kube` does I/O against the cluster's
services.

Every failure (refused connection, timeout, TLS, a non-2xx answer, a body that is not what was
asked for, a body over the size bound) comes back as ``PrometheusReadings.error`` /
``AlertsReading.error`` naming the URL and what failed, never as an exception: the strategy that
asked then fails with that message (:mod:`kdesched.strategies.low_node_utilization`) and the run's
other strategies go on; the alert brake holds (fail closed).
"""

from __future__ import annotations

import functools
import http.client
import json
import math
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from kdesched.bounded_http import open_by
from kdesched.model.alerts import AlertsReading, parse_alerts, parse_recent
from kdesched.model.errors import ModelError
from kdesched.model.usage import PrometheusReadings, parse_prometheus_vector
from kdesched.policy.usage import SERVICE_ACCOUNT_CA, SERVICE_CA

MAX_ANSWER_BYTES = 64 << 20
MAX_ALERTS_BYTES = 32 << 20  # ~30,000 alerts with their labels and annotations; more is an error (held)
TIMEOUT_KEYS = {"kdesched.usage": "prometheusTimeoutSeconds"}
CA_KEYS = {"kdesched.usage": "prometheusCAFile"}
BODY_SNIPPET = 200
READ_CHUNK = 1 << 16


def tls_context(ca_file: str) -> ssl.SSLContext:
    """The CA to trust: ``ca_file`` if given; else the in-cluster service account CA when it exists
    (what upstream's Prometheus client uses), plus OpenShift's service CA beside it when present
    (``service-ca.crt``: it signs the in-cluster monitoring Services); else the system's trust store."""
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    context = ssl.create_default_context()
    for path in (SERVICE_ACCOUNT_CA, SERVICE_CA):
        if os.path.exists(path):
            context.load_verify_locations(cafile=path)
    return context


def _error(base: str, query: str, message: str) -> PrometheusReadings:
    return PrometheusReadings(query=query, source=base, error=message)


def _get_json(url: str, base: str, *, token: str, ca_file: str, timeout: float, opener: Any, max_bytes: int,
              what: str, settings: str) -> tuple[Mapping[str, Any] | None, str]:
    """GET ``url`` and parse its JSON object: (doc, "") or (None, the error naming ``base``).
    ``what`` names the request in messages, ``settings`` the policy block that configures it."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers, method="GET")
    where = f"Prometheus at {base}"
    late = f"{where} did not answer within {timeout:g}s ({settings}.{TIMEOUT_KEYS.get(settings, 'timeoutSeconds')})"
    try:
        context = tls_context(ca_file) if base.startswith("https:") else None
    except (OSError, ssl.SSLError) as exc:
        return None, (f"cannot load the CA for {where} ({settings}.{CA_KEYS.get(settings, 'caFile')} "
                      f"{ca_file!r}): {exc}")
    # one deadline for the whole request: the socket timeout bounds each read, not the answer, and a
    # server (or proxy) that trickles header lines or body bytes would hold the run as long as it liked
    deadline = time.monotonic() + timeout
    try:
        if opener is not None:
            response = opener(request, timeout=timeout)
        else:
            response = open_by(request, deadline, context)  # connect, headers and body by the deadline
        with response:
            read = getattr(response, "read1", response.read)  # read1: what has arrived, not a full chunk
            chunks: list[bytes] = []
            size = 0
            while size <= max_bytes:
                chunk = read(min(READ_CHUNK, max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    return None, late
            body = b"".join(chunks)
            status = response.status
    except urllib.error.HTTPError as exc:
        return None, f"{where} answered HTTP {exc.code} to {what}{_error_detail(exc)}"
    except TimeoutError:
        return None, late
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return None, late
        return None, f"cannot reach {where}: {exc.reason}"
    except (OSError, ssl.SSLError) as exc:
        return None, f"cannot reach {where}: {exc}"
    except http.client.HTTPException as exc:
        # not an OSError: something on the port that does not speak HTTP (BadStatusLine), an answer cut
        # off mid-chunk (IncompleteRead), a header line too long: an error like any other, never raised
        return None, f"cannot read the answer of {where} to {what}: {type(exc).__name__}: {exc!s:.200}"
    if len(body) > max_bytes:
        return None, f"{where} answered more than {max_bytes >> 20} MiB to {what}"
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or JSON no parser should take (4,300-digit numbers, deep nesting)
        snippet = body[:BODY_SNIPPET].decode("utf-8", "replace")
        return None, f"{where} answered HTTP {status} with something that is not JSON: {snippet!r}"
    if not isinstance(doc, Mapping):
        return None, f"{where} answered a JSON {type(doc).__name__}, not an object"
    return doc, ""


def query_instant(base_url: str, query: str, *, token: str = "", ca_file: str = "", timeout: float = 10.0,
                  opener: Any = None) -> PrometheusReadings:
    """Run ``query`` at the server's current time (upstream ``promv1.API.Query(ctx, q, time.Now())``)."""
    base = base_url.rstrip("/")
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    doc, error = _get_json(url, base, token=token, ca_file=ca_file, timeout=timeout, opener=opener,
                           max_bytes=MAX_ANSWER_BYTES, what="the query", settings="kdesched.usage")
    if doc is None:
        return _error(base, query, error)
    try:
        return parse_prometheus_vector(doc, "answer: ", query=query, source=base)
    except ModelError as exc:
        return _error(base, query, f"Prometheus at {base}: {exc}")


def settle_query(settle_seconds: float) -> str:
    """PromQL: (alertname, alertstate) -> seconds since Prometheus last saw the alert active, for
    the alerts active within ``settle_seconds``. ``ALERTS`` is the series the rule manager writes
    at each evaluation; ``timestamp()`` of a selector is the sample's time, so the answer is in
    Prometheus' own clock (one clock: no process compares its wall clock with another's)."""
    window = max(1, math.ceil(settle_seconds))
    step = max(1, math.ceil(window / 120))
    return (f"time() - max by (alertname, alertstate) "
            f"(max_over_time(timestamp(ALERTS)[{window}s:{step}s]))")


def read_alerts(base_url: str, *, token: str = "", token_file: str = "", ca_file: str = "", timeout: float = 5.0,
                settle_seconds: float = 0.0, opener: Any = None,
                max_bytes: int = MAX_ALERTS_BYTES) -> AlertsReading:
    """Prometheus' active alerts (``GET /api/v1/alerts``), and with ``settle_seconds`` the alerts
    active within that time (:func:`settle_query`, one instant query). Every failure is
    ``AlertsReading.error`` naming the URL, never an exception; an entry of the answer that cannot be
    read is left out and named in ``AlertsReading.skipped``. ``token`` wins over ``token_file``
    (read on each call, so a rotated service account token is picked up)."""
    base = base_url.rstrip("/")
    if not token and token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                token = fh.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            return AlertsReading(source=base, error=f"cannot read the token file {token_file!r} "
                                                    f"(kdesched.alertBrake.tokenFile) for Prometheus at {base}: {exc}")
    get = functools.partial(_get_json, base=base, token=token, ca_file=ca_file, timeout=timeout, opener=opener,
                            max_bytes=max_bytes, settings="kdesched.alertBrake")
    doc, error = get(f"{base}/api/v1/alerts", what="GET /api/v1/alerts")
    if doc is None:
        return AlertsReading(source=base, error=error)
    try:
        entries = parse_alerts(doc, "GET /api/v1/alerts: ")
    except ModelError as exc:
        return AlertsReading(source=base, error=f"Prometheus at {base} answered something unexpected: {exc}")
    # entries that cannot be read are skipped and named (the brake judges the rest, and holds on them
    # unless failClosed is false); the settle query still runs: a settling alert is a reason to hold too
    alerts, skipped = entries.alerts, entries.skipped
    if settle_seconds <= 0:
        return AlertsReading(alerts, source=base, skipped=skipped)
    query = settle_query(settle_seconds)
    doc, error = get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}",
                     what="the settle query (alertBrake.settleSeconds)")
    if doc is None:
        return AlertsReading(alerts, source=base, error=error, skipped=skipped)
    try:
        recent = parse_recent(doc, "the settle query: ")
    except ModelError as exc:
        return AlertsReading(alerts, source=base, skipped=skipped,
                             error=f"Prometheus at {base} answered something unexpected: {exc}")
    return AlertsReading(alerts, source=base, recent=recent, skipped=skipped)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read(4096)
    except OSError:
        return ""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        text = body[:BODY_SNIPPET].decode("utf-8", "replace").strip()
        return f": {text}" if text else ""
    if isinstance(doc, Mapping) and doc.get("error"):
        return f": {doc.get('errorType', 'error')}: {doc['error']}"
    return ""

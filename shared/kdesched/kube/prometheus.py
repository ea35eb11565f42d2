"""A small Prometheus HTTP API client: one instant query, answered as
:class:`~kdesched.model.usage.PrometheusReadings`.

Why not a library: kdesched needs exactly one call (``GET /api/v1/query``), a bearer token and a
CA; the standard library does that with a bounded timeout and no new dependency. Why here: it is
I/O, and only :mod:`kdesched.kube` does I/O against the cluster's services.

Every failure (refused connection, timeout, TLS, a non-2xx answer, a body that is not a vector)
comes back as ``PrometheusReadings.error`` naming the URL and what failed, never as an exception:
the strategy that asked then fails with that message (:mod:`kdesched.strategies.low_node_utilization`),
and the run's other strategies go on.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from kdesched.model.errors import ModelError
from kdesched.model.usage import PrometheusReadings, parse_prometheus_vector
from kdesched.policy.usage import SERVICE_ACCOUNT_CA, SERVICE_CA

MAX_ANSWER_BYTES = 64 << 20
BODY_SNIPPET = 200


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


def query_instant(base_url: str, query: str, *, token: str = "", ca_file: str = "", timeout: float = 10.0,
                  opener: Any = None) -> PrometheusReadings:
    """Run ``query`` at the server's current time (upstream ``promv1.API.Query(ctx, q, time.Now())``)."""
    base = base_url.rstrip("/")
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, headers=headers, method="GET")
    where = f"Prometheus at {base}"
    try:
        context = tls_context(ca_file) if base.startswith("https:") else None
    except (OSError, ssl.SSLError) as exc:
        return _error(base, query, f"cannot load the CA for {where} (kdesched.usage.prometheusCAFile "
                                   f"{ca_file!r}): {exc}")
    try:
        if opener is not None:
            response = opener(request, timeout=timeout)
        else:
            response = urllib.request.urlopen(request, timeout=timeout, context=context)
        with response:
            body = response.read(MAX_ANSWER_BYTES + 1)
            status = response.status
    except urllib.error.HTTPError as exc:
        detail = _error_detail(exc)
        return _error(base, query, f"{where} answered HTTP {exc.code} to the query{detail}")
    except TimeoutError:
        return _error(base, query, f"{where} did not answer within {timeout:g}s (kdesched.usage."
                                   "prometheusTimeoutSeconds)")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return _error(base, query, f"{where} did not answer within {timeout:g}s (kdesched.usage."
                                       "prometheusTimeoutSeconds)")
        return _error(base, query, f"cannot reach {where}: {reason}")
    except (OSError, ssl.SSLError) as exc:
        return _error(base, query, f"cannot reach {where}: {exc}")
    if len(body) > MAX_ANSWER_BYTES:
        return _error(base, query, f"{where} answered more than {MAX_ANSWER_BYTES >> 20} MiB")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        snippet = body[:BODY_SNIPPET].decode("utf-8", "replace")
        return _error(base, query, f"{where} answered HTTP {status} with something that is not JSON: {snippet!r}")
    if not isinstance(doc, Mapping):
        return _error(base, query, f"{where} answered a JSON {type(doc).__name__}, not an object")
    try:
        return parse_prometheus_vector(doc, "answer: ", query=query, source=base)
    except ModelError as exc:
        return _error(base, query, f"{where}: {exc}")


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

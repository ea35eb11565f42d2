"""Read the measured usage a policy asks for, live: ``metrics.k8s.io`` and Prometheus queries.

Why here: the strategy decides on :class:`~kdesched.model.usage.Usage` and never does I/O; the
commands that read the cluster live (``run``, ``serve``, the functions) call :func:`read_usage`
beside their snapshot, and only when an enabled LowNodeUtilization balances on usage
(:func:`kdesched.policy.usage.needs_usage`), so a policy on requests costs no extra request.

* KubernetesMetrics: one LIST of ``NodeMetrics`` and one of ``PodMetrics`` (upstream's collector
  GETs each node every 5 s and each evicted pod's ``PodMetrics``; two LISTs per run give the same
  numbers for a one-shot decision with two requests); in ``serve``, node usage is the moving
  average :class:`MetricsCollector` keeps, as upstream's long-running collector. Not served (404:
  no metrics-server), 503 (the aggregated API is down) or any other failure:
  ``MetricsReadings.error`` says so.
* Prometheus: the ``metricsProviders`` Prometheus entry's URL; its token from the Secret
  ``authToken.secretReference`` (key ``prometheusAuthToken``, as upstream), else the in-cluster
  service account token when there is one (upstream's in-cluster client); the CA from
  ``kdesched.usage.prometheusCAFile`` (:mod:`kdesched.kube.prometheus`).

The alert brake's alerts are read here too (:func:`read_brake_alerts`), because their token is
taken as the Prometheus entry's is.

Nothing here raises for a failed reading: the strategy that needs it fails with the message, the
others run (docs/strategies.md, "Faults"); the alert brake holds.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kdesched.kube.client import KubeClient, ReadRetry
from kdesched.kube.errors import ApiError, NotFound
from kdesched.kube.prometheus import query_instant, read_alerts
from kdesched.model.alerts import AlertsReading
from kdesched.model.errors import ModelError
from kdesched.model.usage import (
    MetricsReadings,
    NodeReading,
    PrometheusReadings,
    Usage,
    ewma,
    parse_node_metrics_list,
    parse_pod_metrics_list,
    smoothed_usage,
)
from kdesched.policy.types import Policy
from kdesched.policy.usage import UsageSettings, needs_usage

log = logging.getLogger("kdesched.kube.usage")

NODE_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/nodes"
POD_METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/pods"
TOKEN_KEY = "prometheusAuthToken"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# a down metrics-server answers 503 at once; a few quick retries, not the reads' minute
METRICS_RETRY = ReadRetry(max_attempts=3, initial_backoff_seconds=0.2, max_backoff_seconds=1.0,
                          max_retry_after_seconds=2.0, max_total_seconds=5.0)

QueryFn = Callable[..., PrometheusReadings]


def read_metrics(client: KubeClient, *, retry: ReadRetry = METRICS_RETRY) -> MetricsReadings:
    """Every NodeMetrics and PodMetrics the API server serves (metrics-server)."""
    host = client.host
    source = f"metrics.k8s.io at {host}"
    try:
        nodes_doc = client.get_path(NODE_METRICS_PATH, retry=retry)
        pods_doc = client.get_path(POD_METRICS_PATH, retry=retry)
    except NotFound:
        return MetricsReadings(source=source, error=f"metrics.k8s.io is not served by the API server at {host} "
                                                    "(404: is metrics-server installed?)")
    except ApiError as exc:
        status = f"HTTP {exc.status}" if exc.status is not None else "no answer"
        return MetricsReadings(source=source, error=f"reading metrics.k8s.io from {host} failed ({status}): "
                                                    f"{exc.message}")
    try:
        nodes = parse_node_metrics_list(nodes_doc, f"GET {NODE_METRICS_PATH}: ")
        pods = parse_pod_metrics_list(pods_doc, f"GET {POD_METRICS_PATH}: ")
    except ModelError as exc:
        return MetricsReadings(source=source, error=f"metrics.k8s.io at {host} answered something unexpected: {exc}")
    return MetricsReadings(nodes=nodes, pods=pods, pods_read=True, source=source)


class MetricsCollector:
    """``kdesched serve``'s counterpart of upstream's metrics collector: every ``interval`` seconds
    one LIST of NodeMetrics, folded into an exponentially weighted moving average per node (β = 0.9;
    a node's first reading is taken as it is; a node missing from one reading keeps its value), so
    a long-running process does not balance on one noisy reading. Runs of ``serve`` then decide on
    the smoothed node values (:func:`read_usage`); the functions and ``run``, which keep no state
    between runs, read fresh values as upstream's first collection does."""

    def __init__(self, client: KubeClient, *, interval: float = 5.0) -> None:
        self.client = client
        self.interval = interval
        self._lock = threading.Lock()
        self._milli: dict[str, dict[str, int]] = {}
        self.collections = 0
        self.last_error = ""

    def collect(self) -> bool:
        """One reading; False (and ``last_error``) when it could not be taken."""
        readings = read_metrics_nodes(self.client)
        if isinstance(readings, str):
            self.last_error = readings
            log.warning("metrics collector: %s", readings)
            return False
        with self._lock:
            for node, reading in readings.items():
                milli = {name: value if name == "cpu" else value * 1000 for name, value in reading.usage.items()}
                known = self._milli.get(node)
                if known is None:
                    self._milli[node] = milli
                else:
                    for name, value in milli.items():
                        known[name] = ewma(known.get(name, value), value)
            self.collections += 1
            self.last_error = ""
        return True

    def smoothed(self) -> dict[str, dict[str, int]]:
        """node -> smoothed ``{"cpu": millicores, "memory": bytes}`` (empty before the first collection)."""
        with self._lock:
            return {node: smoothed_usage(milli) for node, milli in self._milli.items()}

    def run(self, stop: threading.Event) -> None:
        """Collect every ``interval`` seconds until ``stop`` is set (a thread of ``serve``)."""
        while not stop.is_set():
            try:
                self.collect()
            except Exception:  # a broken answer must not end the thread; the next run reports it
                log.exception("metrics collector: collection failed")
            stop.wait(self.interval)


def read_metrics_nodes(client: KubeClient, *, retry: ReadRetry = METRICS_RETRY) -> dict[str, NodeReading] | str:
    """Every NodeMetrics, or the error message."""
    try:
        doc = client.get_path(NODE_METRICS_PATH, retry=retry)
        return parse_node_metrics_list(doc, f"GET {NODE_METRICS_PATH}: ")
    except NotFound:
        return f"metrics.k8s.io is not served by the API server at {client.host} (404: is metrics-server installed?)"
    except ApiError as exc:
        status = f"HTTP {exc.status}" if exc.status is not None else "no answer"
        return f"reading metrics.k8s.io from {client.host} failed ({status}): {exc.message}"
    except ModelError as exc:
        return f"metrics.k8s.io at {client.host} answered something unexpected: {exc}"


def _smooth(metrics: MetricsReadings, collector: MetricsCollector | None) -> MetricsReadings:
    """Fresh readings with each node's usage replaced by the collector's moving average, when the
    collector has one for it (serve); unchanged otherwise."""
    if collector is None or metrics.error:
        return metrics
    averages = collector.smoothed()
    if not averages:
        return metrics
    nodes = {name: replace(reading, usage={**reading.usage, **averages[name]}) if name in averages else reading
             for name, reading in metrics.nodes.items()}
    return replace(metrics, nodes=nodes, source=f"{metrics.source} (node usage: moving average, "
                                               f"{collector.collections} collection(s))")


def prometheus_token(client: KubeClient, namespace: str, name: str) -> tuple[str, str]:
    """(token, error): the token in the Secret, or the service account's when no Secret is named."""
    if not name:
        try:
            with open(SERVICE_ACCOUNT_TOKEN, encoding="utf-8") as fh:
                return fh.read().strip(), ""
        except OSError:
            return "", ""
    try:
        secret = client.get_raw("Secret", name, namespace, retry=METRICS_RETRY)
    except ApiError as exc:
        return "", f"cannot read the Prometheus token Secret {namespace}/{name}: {exc.message}"
    if secret is None:
        return "", f"the Prometheus token Secret {namespace}/{name} does not exist"
    raw: Any = (secret.get("data") or {}).get(TOKEN_KEY)
    if not isinstance(raw, str) or not raw:
        return "", f"the Secret {namespace}/{name} has no {TOKEN_KEY!r} key (the token upstream reads)"
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8").strip(), ""
    except (ValueError, UnicodeDecodeError):
        return "", f"the Secret {namespace}/{name}'s {TOKEN_KEY!r} is not base64 UTF-8 text"


def read_usage(client: KubeClient, policy: Policy, settings: UsageSettings, *, event_path: bool,
               query: QueryFn = query_instant, collector: MetricsCollector | None = None) -> Usage | None:
    """What the policy balances on, read now; None when no enabled strategy reads usage.
    ``collector``: serve's moving averages of node usage, used instead of the fresh node values."""
    metrics_wanted, queries = needs_usage(policy)
    if not metrics_wanted and not queries:
        return None
    metrics = _smooth(read_metrics(client), collector) if metrics_wanted else None
    if metrics is not None and metrics.error:
        log.error("%s", metrics.error)
    results: list[PrometheusReadings] = []
    if queries:
        provider = next((p for p in policy.metrics_providers if p.source == "Prometheus"), None)
        if provider is None:  # the policy loader refuses this; kept for a hand-built Policy
            results = [PrometheusReadings(query=q, error="no metricsProviders entry with source: Prometheus")
                       for q in sorted(queries)]
        else:
            token, problem = prometheus_token(client, provider.secret_namespace, provider.secret_name)
            for q in sorted(queries):
                if problem:
                    results.append(PrometheusReadings(query=q, source=provider.prometheus_url, error=problem))
                    continue
                r = query(provider.prometheus_url, q, token=token, ca_file=settings.prometheus_ca_file,
                          timeout=settings.prometheus_timeout_seconds)
                if r.error:
                    log.error("Prometheus query %r: %s", q, r.error)
                results.append(r)
    young = settings.young_node_seconds if event_path and settings.young_node_seconds > 0 else None
    return Usage(metrics=metrics, prometheus=tuple(results), young_node_seconds=young)



def read_brake_alerts(client: KubeClient, url: str, *, secret_namespace: str = "", secret_name: str = "",
                      token_file: str = "", ca_file: str = "", timeout: float = 5.0, settle_seconds: float = 0.0,
                      read: Callable[..., AlertsReading] = read_alerts) -> AlertsReading:
    """The alert brake's reading (:func:`kdesched.kube.prometheus.read_alerts`) with its token taken
    as a ``metricsProviders`` Prometheus entry takes it: the Secret's ``prometheusAuthToken`` when
    ``authToken.secretReference`` names one, else ``tokenFile``, else the in-cluster service account
    token when there is one. A Secret that cannot be read is the reading's error (the brake holds)."""
    token = ""
    if secret_name or not token_file:
        token, problem = prometheus_token(client, secret_namespace, secret_name)
        if problem:
            return AlertsReading(source=url.rstrip("/"), error=f"{problem} (kdesched.alertBrake.authToken)")
    return read(url, token=token, token_file=token_file, ca_file=ca_file, timeout=timeout,
                settle_seconds=settle_seconds)

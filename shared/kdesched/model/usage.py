"""Actual usage: what nodes and pods really consume, as LowNodeUtilization's metrics modes read it.

Why a pure input of its own: ``metricsUtilization`` (upstream v0.33+) decides on measured usage
instead of requests. The measurements come from three places — files given to ``kdesched
simulate --usage``, ``metrics.k8s.io`` read by :mod:`kdesched.kube`, and a Prometheus instant
query run by :mod:`kdesched.kube.prometheus` — and the strategy must decide the same from each.
So they all end up as the frozen records of this module, attached to the run's
:class:`~kdesched.model.snapshot.Snapshot` (``snapshot.usage``); the strategy never does I/O.

Shapes (upstream ``pkg/framework/plugins/nodeutilization/usageclients.go``):

* ``KubernetesMetrics`` (:class:`MetricsReadings`): per node ``cpu`` (millicores) and ``memory``
  (bytes) from a ``NodeMetrics``; per pod the sum of its containers' usage from a
  ``PodMetrics`` (upstream ``actualUsageClient.podUsage``), which is what an eviction frees.
* ``Prometheus`` (:class:`PrometheusReadings`): one sample per node, a fraction in [0, 1], the
  node named by the sample's ``instance`` label (upstream ``prometheusUsageClient.sync``). There
  is no per-pod value.

A reading that could not be taken (metrics.k8s.io not served, Prometheus down) is recorded as
``error`` rather than raised, so only the strategy that needs it fails, naming what failed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kdesched.model.errors import ModelError
from kdesched.model.quantity import QuantityError, to_resource_int
from kdesched.model.records import parse_time

KUBERNETES_METRICS = "KubernetesMetrics"
PROMETHEUS = "Prometheus"
NODE_LABEL = "instance"
"""The sample label that names the node (upstream ``prometheusUsageClient.sync``)."""
MAX_USAGE_FILE_BYTES = 256 << 20
METRICS_RESOURCES = ("cpu", "memory")

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""


@dataclass(frozen=True, slots=True)
class NodeReading:
    """One NodeMetrics: usage and when / over how long it was measured (for messages)."""

    usage: Mapping[str, int]  # {"cpu": millicores, "memory": bytes}
    timestamp: datetime | None = None
    window_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class MetricsReadings:
    """``metrics.k8s.io`` readings (source KubernetesMetrics)."""

    nodes: Mapping[str, NodeReading] = field(default_factory=dict)
    pods: Mapping[PodKey, Mapping[str, int]] = field(default_factory=dict)
    pods_read: bool = False  # were PodMetrics read at all (a file may give only the nodes)
    source: str = ""  # file name(s) or the API server's address, for messages
    error: str = ""  # set when the readings could not be taken: the strategy fails with it


@dataclass(frozen=True, slots=True)
class PrometheusReadings:
    """One instant query's result (source Prometheus): node -> sample value (a fraction)."""

    values: Mapping[str, float] = field(default_factory=dict)
    duplicates: tuple[str, ...] = ()  # nodes named by more than one sample
    query: str = ""  # "" when read from a file: it answers whatever query the policy has
    source: str = ""  # file name or server URL
    error: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """Every reading a run has, plus the event path's rule for young nodes."""

    metrics: MetricsReadings | None = None
    prometheus: tuple[PrometheusReadings, ...] = ()
    young_node_seconds: float | None = None
    """Event path only (serve, functions, ``simulate --event``): a node created less than this
    long before the run counts at no less than its pods' requests (docs/strategies.md). None on
    the parity path (``run``, ``simulate``), which uses the readings as upstream does."""

    def for_query(self, query: str) -> PrometheusReadings | None:
        """The readings of ``query``: the live result of that query, else a file's result."""
        for r in self.prometheus:
            if r.query == query:
                return r
        for r in self.prometheus:
            if not r.query:
                return r
        return None

    def notes(self) -> tuple[str, ...]:
        """One line per source for the run report: where the readings came from and how many."""
        out: list[str] = []
        m = self.metrics
        if m is not None:
            out.append(f"measured usage (KubernetesMetrics): {m.error}" if m.error else
                       f"measured usage (KubernetesMetrics): {len(m.nodes)} node(s), {len(m.pods)} pod(s) "
                       f"from {m.source or '?'}")
        for r in self.prometheus:
            what = f"query {r.query!r}" if r.query else "a query result"
            out.append(f"measured usage (Prometheus, {what}): {r.error}" if r.error else
                       f"measured usage (Prometheus, {what}): {len(r.values)} node(s) from {r.source or '?'}")
        if self.young_node_seconds:
            out.append(f"measured usage: nodes younger than {self.young_node_seconds:g}s count at no less than "
                       "their requests (event path)")
        return tuple(out)

    def merged(self, other: Usage) -> Usage:
        """Both sets of readings (files given together to ``simulate --usage``)."""
        metrics = self.metrics
        if other.metrics is not None:
            if metrics is None:
                metrics = other.metrics
            else:
                metrics = MetricsReadings(
                    nodes={**metrics.nodes, **other.metrics.nodes},
                    pods={**metrics.pods, **other.metrics.pods},
                    pods_read=metrics.pods_read or other.metrics.pods_read,
                    source=", ".join(s for s in (metrics.source, other.metrics.source) if s),
                    error=metrics.error or other.metrics.error,
                )
        return Usage(metrics, self.prometheus + other.prometheus,
                     self.young_node_seconds if self.young_node_seconds is not None else other.young_node_seconds)


# --------------------------------------------------------------------------- smoothing

EWMA_BETA = 0.9
"""Upstream's metrics collector weight (``pkg/descheduler/metricscollector/metricscollector.go``)."""


def ewma(previous_milli: int, value_milli: int) -> int:
    """One step of upstream's exponentially weighted moving average, in milli-units (upstream keeps
    cpu and memory as ``MilliValue`` to lose less precision): ``floor(β·prev + (1−β)·value)``."""
    return math.floor(EWMA_BETA * float(previous_milli) + (1 - EWMA_BETA) * float(value_milli))


def smoothed_usage(milli: Mapping[str, int]) -> dict[str, int]:
    """The usage kdesched decides on from collector state kept in milli-units: cpu stays in
    millicores, memory goes back to bytes rounded up (``Quantity.Value()``)."""
    out: dict[str, int] = {}
    for name, value in milli.items():
        out[name] = value if name == "cpu" else -(-value // 1000)
    return out


# --------------------------------------------------------------------------- parsing


def _obj(value: Any, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ModelError(where, f"must be {what}, got {type(value).__name__}")
    return value


def _usage(raw: Any, where: str) -> dict[str, int]:
    usage = _obj(raw, where, "a map of resource quantities")
    out: dict[str, int] = {}
    for name in METRICS_RESOURCES:
        value = usage.get(name)
        if value is None:
            continue
        try:
            out[name] = to_resource_int(name, value)
        except QuantityError as exc:
            raise ModelError(f"{where}.{name}", str(exc)) from None
    return out


def _window(raw: Any, where: str) -> float | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.endswith("s"):
        raise ModelError(where, f"must be a duration such as 30s, got {raw!r}")
    text = raw[:-1]
    # metrics-server writes Go durations; the usual forms are "30s", "1m0s", "20.5s"
    minutes = 0.0
    if "m" in text:
        head, text = text.split("m", 1)
        try:
            minutes = float(head)
        except ValueError:
            raise ModelError(where, f"must be a duration such as 30s, got {raw!r}") from None
    try:
        return minutes * 60 + float(text or 0)
    except ValueError:
        raise ModelError(where, f"must be a duration such as 30s, got {raw!r}") from None


def _meta(item: Mapping[str, Any], where: str) -> tuple[str, str]:
    meta = _obj(item.get("metadata"), f"{where}.metadata", "an object")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ModelError(f"{where}.metadata.name", "must be a non-empty string")
    namespace = meta.get("namespace", "")
    if not isinstance(namespace, str):
        raise ModelError(f"{where}.metadata.namespace", "must be a string")
    return namespace, name


def _items(doc: Mapping[str, Any], where: str) -> list[Any]:
    items = doc.get("items")
    if not isinstance(items, list):
        raise ModelError(f"{where}items", "must be a list")
    return items


def parse_node_metrics_list(doc: Mapping[str, Any], where: str = "") -> dict[str, NodeReading]:
    """A ``NodeMetricsList`` (``kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes``)."""
    out: dict[str, NodeReading] = {}
    for i, raw in enumerate(_items(doc, where)):
        at = f"{where}items[{i}]"
        item = _obj(raw, at, "a NodeMetrics object")
        _, name = _meta(item, at)
        when = parse_time(item.get("timestamp"), f"{at}.timestamp")
        out[name] = NodeReading(_usage(item.get("usage"), f"{at}.usage"), when,
                                _window(item.get("window"), f"{at}.window"))
    return out


def parse_pod_metrics_list(doc: Mapping[str, Any], where: str = "") -> dict[PodKey, dict[str, int]]:
    """A ``PodMetricsList`` (``.../pods``): per pod, the sum of its containers' usage."""
    out: dict[PodKey, dict[str, int]] = {}
    for i, raw in enumerate(_items(doc, where)):
        at = f"{where}items[{i}]"
        item = _obj(raw, at, "a PodMetrics object")
        namespace, name = _meta(item, at)
        if not namespace:
            raise ModelError(f"{at}.metadata.namespace", "must be a non-empty string (a PodMetrics is namespaced)")
        containers = item.get("containers")
        if not isinstance(containers, list):
            raise ModelError(f"{at}.containers", "must be a list")
        total: dict[str, int] = {}
        for j, c in enumerate(containers):
            container = _obj(c, f"{at}.containers[{j}]", "an object")
            for resource, amount in _usage(container.get("usage"), f"{at}.containers[{j}].usage").items():
                total[resource] = total.get(resource, 0) + amount
        out[(namespace, name)] = total
    return out


def parse_prometheus_vector(doc: Mapping[str, Any], where: str = "", *, query: str = "",
                            source: str = "") -> PrometheusReadings:
    """A Prometheus ``/api/v1/query`` answer whose result is an instant vector.

    A failed query, another result type, a sample without the ``instance`` label or a value that
    is not a number are errors here (upstream fails the plugin on each); a value outside [0, 1]
    is kept, and refused by the strategy naming the node (upstream does it when classifying)."""
    status = doc.get("status")
    if status != "success":
        detail = doc.get("error") or doc.get("errorType") or "no error given"
        raise ModelError(f"{where}status", f"the query did not succeed (status {status!r}: {detail})")
    data = _obj(doc.get("data"), f"{where}data", "an object")
    kind = data.get("resultType")
    if kind != "vector":
        raise ModelError(f"{where}data.resultType",
                         f"must be \"vector\" (one sample per node, an instant query), got {kind!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise ModelError(f"{where}data.result", "must be a list")
    values: dict[str, float] = {}
    dupes: list[str] = []
    for i, raw in enumerate(result):
        at = f"{where}data.result[{i}]"
        sample = _obj(raw, at, "a sample object")
        metric = _obj(sample.get("metric", {}), f"{at}.metric", "a map of labels")
        node = metric.get(NODE_LABEL)
        if not isinstance(node, str) or not node:
            raise ModelError(f"{at}.metric.{NODE_LABEL}",
                             f"is missing: every sample must name its node in the {NODE_LABEL!r} label")
        pair = sample.get("value")
        if not isinstance(pair, list) or len(pair) != 2:
            raise ModelError(f"{at}.value", "must be [timestamp, \"value\"]")
        try:
            value = float(pair[1])
        except (TypeError, ValueError):
            raise ModelError(f"{at}.value[1]", f"must be a number as a string, got {pair[1]!r}") from None
        if math.isnan(value):
            raise ModelError(f"{at}.value[1]", f"must be a number, got {pair[1]!r} for node {node}")
        if node in values:
            dupes.append(node)
        values[node] = value
    return PrometheusReadings(values, tuple(dupes), query, source)


# --------------------------------------------------------------------------- files


def usage_from_document(doc: Any, name: str) -> Usage:
    """Tell the file's format by its content: a NodeMetricsList, a PodMetricsList (or a List of
    either), or a Prometheus query answer."""
    if not isinstance(doc, Mapping):
        raise ModelError(name, "must be a JSON object: a NodeMetricsList, a PodMetricsList or a Prometheus "
                               "query answer")
    if "status" in doc and "data" in doc or doc.get("status") == "error":
        return Usage(prometheus=(parse_prometheus_vector(doc, f"{name}: ", source=name),))
    kind = doc.get("kind")
    if kind in ("NodeMetricsList", "PodMetricsList", "List") or "items" in doc:
        items = _items(doc, f"{name}: ")
        kinds = {item.get("kind") for item in items if isinstance(item, Mapping)}
        pods = kind == "PodMetricsList" or (kind != "NodeMetricsList" and kinds == {"PodMetrics"})
        if kind not in ("NodeMetricsList", "PodMetricsList") and kinds - {"NodeMetrics", "PodMetrics"}:
            raise ModelError(f"{name}: kind", f"expected NodeMetricsList or PodMetricsList, got {kind!r}")
        if not pods and kind != "NodeMetricsList" and "containers" in (items[0] if items and isinstance(
                items[0], Mapping) else {}):
            pods = True
        if pods:
            return Usage(metrics=MetricsReadings(pods=parse_pod_metrics_list(doc, f"{name}: "), pods_read=True,
                                                 source=name))
        return Usage(metrics=MetricsReadings(nodes=parse_node_metrics_list(doc, f"{name}: "), source=name))
    raise ModelError(name, f"is neither a NodeMetricsList, a PodMetricsList nor a Prometheus query answer "
                           f"(kind {kind!r}, keys {', '.join(sorted(map(str, doc))[:5]) or 'none'})")

"""Prometheus metrics for evictions and runs, in kdesched's own registry.

Why: operators compare kdesched with the upstream descheduler by its metrics (upstream:
``descheduler_pods_evicted_total{result,strategy,profile,namespace,node}``, loop and strategy
duration histograms, build info), so ours mirror them under the ``kdesched_`` prefix. The
registry is module-level but not the process-wide default: tests read exact values from it, and
an embedding process can expose it next to its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from kdesched.evictor.reasons import Reason
from kdesched.kube.traffic import TRAFFIC

REGISTRY = CollectorRegistry(auto_describe=True)

# Eviction results: "success" (upstream's word), "dry-run", "already-gone", "blocked" (a PDB refused),
# "throttled" (429 without a PDB cause), "failed", "paced", "abandoned" (docs/cli.md).
PODS_EVICTED = Counter(
    "kdesched_pods_evicted_total",
    "Pods evicted (or attempted), by result, strategy, profile, namespace and node.",
    ["result", "strategy", "profile", "namespace", "node"],
    registry=REGISTRY,
)
RUN_DURATION = Histogram(
    "kdesched_run_duration_seconds",
    "Duration of one descheduling run (snapshot, decisions and evictions), by trigger.",
    ["trigger"],
    registry=REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
STRATEGY_DURATION = Histogram(
    "kdesched_strategy_duration_seconds",
    "Duration of one strategy's decisions in a run.",
    ["strategy", "profile"],
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RUNS = Counter(
    "kdesched_runs_total",
    "Descheduling runs, by trigger and outcome.",
    ["trigger", "outcome"],
    registry=REGISTRY,
)
EVICTIONS_PACED = Counter(
    "kdesched_evictions_paced_total",
    "Evictions held back by the per-workload allowance (reported as paced), by strategy, profile and namespace.",
    ["strategy", "profile", "namespace"],
    registry=REGISTRY,
)
WORKLOADS_BELOW_READY = Gauge(
    "kdesched_workloads_below_ready",
    "Workloads kdesched evicted from that are not yet back at their Ready count.",
    registry=REGISTRY,
)
EVICTION_CAUSES = Counter(
    "kdesched_eviction_outcomes_total",
    "Eviction outcomes by result and cause (accepted, confirmed, not-found, replaced, disruption-budget, "
    "throttled, server-error, connection, rejected, unexpected, allowance, stopped).",
    ["result", "cause"],
    registry=REGISTRY,
)
EVICTIONS_REFUSED = Counter(
    "kdesched_evictions_refused_total",
    "Evictions a strategy wanted that kdesched did not attempt, counted each time a run decides so, by reason "
    "(disruption-budget, cooldown, rate-limit, in-flight-elsewhere, owner-changed, nowhere-to-go, no-uid, other), "
    "strategy and namespace.",
    ["reason", "strategy", "namespace"],
    registry=REGISTRY,
)
EVENTS_LOST = Counter(
    "kdesched_events_lost_total",
    "Events about evictions that could not be posted within their retry budget, by event reason.",
    ["reason"],
    registry=REGISTRY,
)
BUILD_INFO = Info("kdesched_build", "kdesched build information.", registry=REGISTRY)


class _ApiTrafficCollector(Collector):
    """``kdesched_api_*`` on /metrics, read at scrape time from the kube layer's process-wide counts
    (:mod:`kdesched.kube.traffic`: the kube layer holds numbers, this layer publishes them)."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        snap = TRAFFIC.snapshot()
        requests = CounterMetricFamily(
            "kdesched_api_requests", "Requests sent to the API server, by HTTP method and answer (the status "
            "code, or error when none came: refused, reset or timed-out connection).", labels=["method", "code"])
        for (method, code), count in sorted(snap.requests.items()):
            requests.add_metric([method, code], count)
        waits = CounterMetricFamily("kdesched_api_rate_limiter_waits",
                                    "Requests that waited for a token of the client-side rate limit "
                                    "(KDESCHED_KUBE_API_QPS / _BURST).", value=snap.limiter_waits)
        wait_seconds = CounterMetricFamily("kdesched_api_rate_limiter_wait_seconds",
                                           "Seconds requests spent waiting for the client-side rate limit.",
                                           value=snap.limiter_wait_seconds)
        yield requests
        yield waits
        yield wait_seconds


REGISTRY.register(_ApiTrafficCollector())


def _version() -> str:
    try:
        return metadata.version("kdesched")
    except metadata.PackageNotFoundError:
        return "unknown"


def set_build_info(version: str | None = None) -> None:
    """Publish ``kdesched_build_info{version=...} 1`` (done once at import with the package version)."""
    BUILD_INFO.info({"version": version or _version()})


set_build_info()


def record_eviction(result: str, *, strategy: str, profile: str, namespace: str, node: str) -> None:
    PODS_EVICTED.labels(result=result, strategy=strategy, profile=profile, namespace=namespace, node=node).inc()


def record_cause(result: str, cause: str) -> None:
    EVICTION_CAUSES.labels(result=result, cause=cause or "-").inc()


def record_refused(kind: Reason, *, strategy: str, namespace: str) -> None:
    """One planner refusal, labelled by its reason (kdesched.evictor.reasons: never the message)."""
    EVICTIONS_REFUSED.labels(reason=kind.value, strategy=strategy, namespace=namespace).inc()


def record_event_lost(reason: str) -> None:
    EVENTS_LOST.labels(reason=reason).inc()


def cause_count(result: str, cause: str) -> float:
    """The current value of one ``kdesched_eviction_outcomes_total`` series."""
    return REGISTRY.get_sample_value("kdesched_eviction_outcomes_total", {"result": result, "cause": cause}) or 0.0


def events_lost_count(reason: str) -> float:
    return REGISTRY.get_sample_value("kdesched_events_lost_total", {"reason": reason}) or 0.0


def observe_run(trigger: str, outcome: str, seconds: float) -> None:
    """One finished run: count it by outcome and record its duration."""
    RUNS.labels(trigger=trigger, outcome=outcome).inc()
    RUN_DURATION.labels(trigger=trigger).observe(seconds)


def observe_strategy(strategy: str, profile: str, seconds: float) -> None:
    STRATEGY_DURATION.labels(strategy=strategy, profile=profile).observe(seconds)


@contextmanager
def time_strategy(strategy: str, profile: str) -> Iterator[None]:
    """``with time_strategy("RemoveDuplicates", "default"): ...`` records the block's duration."""
    start = time.perf_counter()
    try:
        yield
    finally:
        observe_strategy(strategy, profile, time.perf_counter() - start)


def evicted_count(result: str, *, strategy: str, profile: str, namespace: str, node: str) -> float:
    """The current value of one ``kdesched_pods_evicted_total`` series (0 when never incremented)."""
    value = REGISTRY.get_sample_value("kdesched_pods_evicted_total", {
        "result": result, "strategy": strategy, "profile": profile, "namespace": namespace, "node": node})
    return value or 0.0


# Workloads (their names) kdesched evicted from and has not yet seen back at their Ready count.
_below: set[str] = set()
_below_lock = threading.Lock()


def record_paced(*, strategy: str, profile: str, namespace: str) -> None:
    EVICTIONS_PACED.labels(strategy=strategy, profile=profile, namespace=namespace).inc()


def mark_workload_below(workload: str, below: bool) -> None:
    """Track one workload for ``kdesched_workloads_below_ready``: below its Ready count because
    kdesched evicted from it (True), or back (False). Only workloads kdesched evicted from are
    ever added, so a workload that is down for its own reasons never counts."""
    with _below_lock:
        if below:
            _below.add(workload)
        else:
            _below.discard(workload)
        WORKLOADS_BELOW_READY.set(len(_below))


def workloads_below() -> frozenset[str]:
    with _below_lock:
        return frozenset(_below)

"""Process-wide counts of the requests kdesched sends to the API server, by method and answer, and
of the time spent waiting for the client-side rate limit.

Why: an operator whose API server is busy needs to see kdesched's share of it (how many requests,
how many answered 429 or 5xx) and whether kdesched is holding itself back (the token bucket's
waits), on /metrics. ``KubeClient.stats()`` counts per client for run reports; this module counts
for the whole process, across every client it builds. It holds plain numbers, not Prometheus
objects: the kube layer exports nothing itself, :mod:`kdesched.evictor.metrics` publishes these as
``kdesched_api_requests_total`` and ``kdesched_api_rate_limiter_wait_seconds_total``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class TrafficSnapshot:
    """Counts so far: ``requests[(method, code)]`` (``code`` is the HTTP status, or ``error`` when no
    answer came: a refused, reset or timed-out connection), and the rate limiter's waits."""

    requests: dict[tuple[str, str], int]
    limiter_waits: int
    limiter_wait_seconds: float


class ApiTraffic:
    """Thread-safe counters; one instance per process (:data:`TRAFFIC`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = {}
        self._waits = 0
        self._wait_seconds = 0.0

    def request(self, method: str, code: int | str) -> None:
        """One request answered with ``code`` (or ``"error"``: no answer)."""
        key = (method.upper(), str(code))
        with self._lock:
            self._requests[key] = self._requests.get(key, 0) + 1

    def waited(self, seconds: float) -> None:
        """One request waited ``seconds`` for a rate-limit token (only waits > 0 are recorded)."""
        if seconds > 0:
            with self._lock:
                self._waits += 1
                self._wait_seconds += seconds

    def snapshot(self) -> TrafficSnapshot:
        with self._lock:
            return TrafficSnapshot(dict(self._requests), self._waits, self._wait_seconds)


TRAFFIC = ApiTraffic()

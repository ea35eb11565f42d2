"""Deadline: an absolute time a write must not outlive, passed down to the transport.

Why: an eviction's admission has a deadline, after which other processes stop counting it (they
take it for abandoned a few seconds later), so the eviction must never land after it. The API
server abandons a request at its ``?timeout=``, counted from when it receives the request; that
timeout has to be what is left when the request actually goes out, less what its connection may
still take (:meth:`Deadline.write_bounds`). The client-side rate limit (:class:`~kdesched.kube.transport.TokenBucket`) may
hold a request for seconds first, so the executor cannot compute it: the transport does, after the
wait, from this deadline, and refuses to send (:class:`DeadlinePassed`) when less than an attempt's
minimum is left. No import of the API client here: the evictor uses these without loading it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

MIN_ATTEMPT_SECONDS = 1.0  # an attempt needs at least this long before the deadline to be sent
# a bounded write's connection (TCP connect, then TLS handshake) may take this long at most, taken
# out of what is left before its ?timeout= is fixed (a dead endpoint leaves time to retry)
DEADLINE_CONNECT_SECONDS = 3.0


class DeadlinePassed(Exception):
    """A write's deadline came (or too little of it was left) before it could be sent: nothing was
    sent (never retried)."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """``at`` on ``clock`` (the caller's: local monotonic by default); a request is sent only while
    at least ``min_attempt_seconds`` are left."""

    at: float
    clock: Callable[[], float] = time.monotonic
    min_attempt_seconds: float = MIN_ATTEMPT_SECONDS

    def remaining(self) -> float:
        return self.at - self.clock()

    def server_timeout(self) -> int:
        """The ``?timeout=`` (whole seconds, never past the deadline) for a request going out now;
        :class:`DeadlinePassed` when less than ``min_attempt_seconds`` (or a whole second) is left."""
        left = self.remaining()
        if left < max(self.min_attempt_seconds, 1.0):
            raise DeadlinePassed(f"{max(left, 0.0):.1f}s left before the deadline, too little to send")
        return math.floor(left)

    def write_bounds(self, connect_seconds: float = DEADLINE_CONNECT_SECONDS) -> tuple[int, float]:
        """A write going out now: its ``?timeout=`` (whole seconds) and how long its connection may
        take, together never past the deadline. The API server starts the ``?timeout=`` when it
        receives the request, after the connection is made: a ``?timeout=`` of everything left would
        let it act up to the connect's time after the deadline. So the connect gets up to
        ``connect_seconds`` of what is left and the ``?timeout=`` the rest, but at least a second
        (then the connect gets what is left beyond it). :class:`DeadlinePassed` as
        :meth:`server_timeout`."""
        left = self.remaining()
        if left < max(self.min_attempt_seconds, 1.0):
            raise DeadlinePassed(f"{max(left, 0.0):.1f}s left before the deadline, too little to send")
        seconds = max(1, math.floor(left - connect_seconds))
        return seconds, min(connect_seconds, left - seconds)


__all__ = ["DEADLINE_CONNECT_SECONDS", "MIN_ATTEMPT_SECONDS", "Deadline", "DeadlinePassed"]

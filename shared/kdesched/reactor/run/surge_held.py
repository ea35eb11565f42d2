"""The gauges of surge-first moves kept at +1 with no time limit: ``kdesched_surge_moves_held{reason}``
and ``kdesched_surge_held_past_timeout_seconds``.

Why: such a move (a rollout that does not end, an eviction refused for hours, the extra evictions
spent: :class:`kdesched.evictor.surge.Held`) costs a replica's capacity until someone acts, and an
operator alerts on metrics, not on log lines. The gauges are set at each settle from the moves the
ledger holds as that settle judged them, so every process that settles (they share one ledger)
serves the same numbers, and a move that ended, here or in another process, is not counted from the
next settle on (the ledger no longer holds it). A move the settle could not judge (its owner
unreadable) keeps what the last settle saw, as long as the ledger holds it. The gauges are read at
scrape time, and what a settle saw is reported for :data:`HELD_FRESH_SECONDS` only: a process that
settles no more (a function pod kept warm with no event for it, while another process ended the
move) would otherwise keep the alert, which takes the max over processes, firing for ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping

from kdesched.evictor.surge import Held
from kdesched.reactor import metrics as m

Move = tuple[str, float]  # a move's identity: its pod's uid and when it began (reactor.run.surge._move_of)

HELD_FRESH_SECONDS = 1200.0
"""How long a settle's view is reported: more than the 900 s sweep, which settles in some process."""


class HeldMoves:
    """One process's view of the held moves, as its last settle judged them, published as the gauges
    (the last instance made serves them: one per process, the reactor's)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._held: dict[Move, tuple[Held, float]] = {}  # move -> (why, its deadline)
        self._longest = 0.0  # seconds past its timeout, of the move furthest past it, at the last settle
        self._settled_at = float("-inf")  # clock() of the last settle
        for r in Held:
            m.SURGE_HELD.labels(r.value).set_function(lambda r=r: self._count(r))  # type: ignore[misc]
        m.SURGE_HELD_PAST_TIMEOUT.set_function(self._past_timeout)

    def settled(self, moves: Collection[Move], judged: Mapping[Move, tuple[Held | None, float]], now: float) -> None:
        """A settle saw the ledger's ``moves`` and judged ``judged`` (move -> why it is held, or None,
        and its deadline); ``now`` on the ledger's clock."""
        with self._lock:
            held = {mv: h for mv, h in self._held.items() if mv in moves and mv not in judged}
            held.update({mv: (why, deadline) for mv, (why, deadline) in judged.items() if why is not None and mv in moves})
            self._held = held
            self._longest = max(0.0, max((now - deadline for _, deadline in held.values()), default=0.0))
            self._settled_at = self.clock()

    def _fresh(self) -> bool:
        return self.clock() - self._settled_at <= HELD_FRESH_SECONDS

    def _count(self, reason: Held) -> float:
        with self._lock:  # (every reason is served, 0 when none: no series left stale)
            return float(sum(1 for why, _ in self._held.values() if why is reason)) if self._fresh() else 0.0

    def _past_timeout(self) -> float:
        with self._lock:
            return self._longest if self._fresh() else 0.0

    def held(self) -> dict[Move, Held]:
        with self._lock:
            return {mv: why for mv, (why, _) in self._held.items()}

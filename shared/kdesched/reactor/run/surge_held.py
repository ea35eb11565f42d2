"""The gauges of surge-first moves kept at +1 with no time limit: ``kdesched_surge_moves_held{reason}``
and ``kdesched_surge_held_past_timeout_seconds``.

Why: such a move (a rollout that does not end, an eviction refused for hours, the extra evictions
spent: :class:`kdesched.evictor.surge.Held`) costs a replica's capacity until someone acts, and an
operator alerts on metrics, not on log lines. The gauges are set at each settle from the moves the
ledger holds as that settle judged them, so every process that settles (they share one ledger)
serves the same numbers, and a move that ended, here or in another process, is not counted from the
next settle on (the ledger no longer holds it). A move the settle could not judge (its owner
unreadable) keeps what the last settle saw, as long as the ledger holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping

from kdesched.evictor.surge import Held
from kdesched.reactor import metrics as m

Move = tuple[str, float]  # a move's identity: its pod's uid and when it began (reactor.run.surge._move_of)


class HeldMoves:
    """One process's view of the held moves, as its last settle judged them, published as the gauges."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Move, tuple[Held, float]] = {}  # move -> (why, its deadline)

    def settled(self, moves: Collection[Move], judged: Mapping[Move, tuple[Held | None, float]], now: float) -> None:
        """A settle saw the ledger's ``moves`` and judged ``judged`` (move -> why it is held, or None,
        and its deadline); ``now`` on the ledger's clock."""
        with self._lock:
            held = {mv: h for mv, h in self._held.items() if mv in moves and mv not in judged}
            held.update({mv: (why, deadline) for mv, (why, deadline) in judged.items() if why is not None and mv in moves})
            self._held = held
            counts = {r: 0 for r in Held}
            for why, _ in held.values():
                counts[why] += 1
            longest = max((now - deadline for _, deadline in held.values()), default=0.0)
            for r, n in counts.items():  # (every reason, 0 when none: no series left stale)
                m.SURGE_HELD.labels(r.value).set(n)
            m.SURGE_HELD_PAST_TIMEOUT.set(max(0.0, longest))

    def held(self) -> dict[Move, Held]:
        with self._lock:
            return {mv: why for mv, (why, _) in self._held.items()}

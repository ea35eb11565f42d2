"""Surge-first moves judged across two clocks: ``Surge.started`` is kdesched's estimate of the API
server's time, a pod's ``creationTimestamp`` the API server's own (one second resolution). Adapted
from the review of af8a868..a50aa1c (/tmp/review11.md, finding 5)."""

from __future__ import annotations

import pytest
from kdesched.evictor.surge import GAVE_UP, MADE_DURING_TOLERANCE_SECONDS, Action, advance

from tests.evictor.test_surge import RS, T0, dep, surge_of, web


@pytest.mark.parametrize("skew", [1.0, 2.0, MADE_DURING_TOLERANCE_SECONDS])
def test_the_extra_pod_is_the_replacement_with_kdesched_s_clock_a_little_ahead(skew: float) -> None:
    """kdesched's estimate ahead of the API server by ``skew``: the extra pod, made right after the
    scale-up, carries a creationTimestamp before ``started``. It is still the move's replacement."""
    old = web("web-1", "node-a", ready_at=-3000)
    extra = web("web-9", "spare-1", created=-skew, ready_at=1)
    step = advance(surge_of(old), dep(2, generation=6), RS, [old, extra], T0 + 5)
    assert step.action == Action.EVICT and step.replacement == extra, step.why


def test_a_move_whose_extra_pod_predates_started_by_skew_is_not_kept_at_plus_one_forever() -> None:
    """The review's case: the extra pod Ready on node-a (the node being left) 2 s "before" the move by
    kdesched's clock. Before, no pod counted as made during the move: WAIT at every timeout, forever."""
    old = web("web-1", "node-a", ready_at=-3000)
    extra = web("web-9", "spare-1", created=-2, ready_at=1)
    s = surge_of(old)
    for now in (T0 + 121, T0 + 3600, T0 + 86400):
        step = advance(s, dep(2, generation=6), RS, [old, extra], now)
        assert step.action != Action.WAIT, f"at T0+{now - T0:.0f}: {step.why}"


def test_no_pod_made_during_the_move_gives_up_at_the_timeout_instead_of_waiting_forever() -> None:
    """More pods than the original replicas, none of them made during the move as kdesched judges it
    (a skew beyond the tolerance): nothing to evict instead of the scale-back. Before the timeout the
    move waits; at the timeout it gives up as the table says (a scale-back, blocked)."""
    old = web("web-1", "node-a", ready_at=-3000)
    extra = web("web-9", "node-a", created=-30, ready_at=-25, template="abc")
    s = surge_of(old)
    assert advance(s, dep(2, generation=6), RS, [old, extra], T0 + 60).action == Action.WAIT
    step = advance(s, dep(2, generation=6), RS, [old, extra], T0 + 121)
    assert step.action == Action.RESTORE and step.outcome == GAVE_UP and step.block, step.why

"""``kdesched serve``'s leader judges its tenure by the clock, not by the answer of a renew.

Why: a standby takes the leader Lease once its record has not changed for ``leaseDurationSeconds``
by the standby's own clock. A renew request that hangs (a half-open connection, a read retried on
429/5xx) must therefore not keep the old leader leading past its renew deadline, or two replicas
act on the same Node change at once. Node-local runs (taints, affinity) take no run Lease, so the
leader's tenure is their only guard besides SIGTERM.

The renew deadline is judged by a fake clock the test moves (the leader loop runs for real).
"""

from __future__ import annotations

import threading
import time

from tests.fakeapi import FakeApiServer, Fault
from tests.reactor.test_serve import TAINT, wait_for
from tests.reactor.test_serve_failures import LEADER, FakeClock, Running, clock, leader  # noqa: F401

EVICT = "/eviction"
HANG = 3.0  # seconds the renew's read hangs: past the renew deadline by the fake clock


def test_the_leader_stops_evicting_at_its_renew_deadline_while_a_renew_hangs(
        leader: Running, fake_api: FakeApiServer, clock: FakeClock) -> None:  # noqa: F811
    """Past the renew deadline the leader steps down and evicts nothing more, though its renew has
    not answered yet; by then a standby may hold the Lease and act on the same taint."""
    srv = leader.srv
    fake_api.script("GET", LEADER, [Fault(delay=HANG)])  # the next renew's read hangs
    hung_until = time.monotonic() + HANG
    threading.Event().wait(0.8)  # renews come every 0.5 s: one is in flight now, hanging
    clock.t += 10  # past the deadline (1 s) and the duration (5 s): a standby takes the Lease
    lease = fake_api.get("Lease", "kdesched-leader", "kdesched")
    assert lease is not None
    lease["spec"]["holderIdentity"] = "new-leader"
    fake_api.update(lease)
    node = fake_api.get("Node", "n1")
    assert node is not None
    node["spec"]["taints"] = [TAINT]  # only the new leader may act on this
    fake_api.update(node)
    wait_for(srv.stop.is_set, timeout=2.0)
    assert "not renewed for" in srv.leadership.stepped_down
    assert not srv.leadership.is_leader.is_set()
    threading.Event().wait(1.0)
    evictions = [r.path for r in fake_api.requests("POST") if r.path.endswith(EVICT)]
    assert evictions == []
    # the hung renew answers before the fake API server goes (its thread would log a refused
    # connection into another test's output)
    threading.Event().wait(max(0.0, hung_until - time.monotonic() + 0.3))


def test_a_node_local_run_stops_at_the_leader_renew_deadline(leader: Running, clock: FakeClock) -> None:  # noqa: F811
    """A taint run's keep-going check asks the leader's tenure between evictions, so it stops at
    the deadline itself, not only once the step-down has set the stop event."""
    srv = leader.srv
    assert srv.reactor.execution.still_leading() is None
    clock.t += 10
    assert "not renewed for" in (srv.reactor.execution.still_leading() or "")

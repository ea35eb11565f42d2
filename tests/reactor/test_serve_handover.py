"""``kdesched serve`` hands the leader Lease over quickly: a stopping replica releases it whenever
it won it, and a standby notices a released Lease within a retry period.

Why: while no replica leads, no one watches Nodes; a taint made then waits for the next leader's
start-up reconcile. A Lease left held by a dead process makes every standby wait a full
``leaseDurationSeconds`` by its own clock; a standby that polls rarely adds its poll interval on
every rolling update.
"""

from __future__ import annotations

import threading
import time

from kdesched.kube.client import KubeClient
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import ReactorServer

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer, Fault
from tests.reactor.policies import default_like_policy
from tests.reactor.test_serve import wait_for

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kdesched/leases"


def holder(fake_api: FakeApiServer) -> str:
    lease = fake_api.get("Lease", "kdesched-leader", "kdesched")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def test_sigterm_during_the_first_election_releases_the_leader_lease(fake_api: FakeApiServer,
                                                                     kube: KubeClient) -> None:
    """SIGTERM while the first election attempt is taking the Lease: the attempt wins, the
    process never leads, and still the Lease is released (a pod deleted right after it starts)."""
    fake_api.add(node_obj("n1"))
    settings = parse_settings({}, env={"KDESCHED_LEASE_NAMESPACE": "kdesched"})
    srv = ReactorServer(default_like_policy(), settings, kube, port=0, sweep_interval_seconds=0, identity="me")
    fake_api.script("POST", LEASES, [201, Fault(delay=1.0)])  # the run Lease at once; the leader Lease in 1 s
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(srv.run()), daemon=True)
    t.start()
    wait_for(lambda: len(fake_api.requests("POST", LEASES)) >= 2)
    srv.shutdown()  # while the leader Lease is being created
    t.join(30)
    assert result == [0]
    assert fake_api.get("Lease", "kdesched-leader", "kdesched") is not None  # the attempt did win it
    assert holder(fake_api) == ""


def make(kube: KubeClient, identity: str) -> ReactorServer:
    block = {"settleSeconds": 0.05, "leaseDurationSeconds": 30}  # retry period: 2 s
    policy = default_like_policy(kdesched=block)
    return ReactorServer(policy, parse_settings(block, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                         sweep_interval_seconds=0, identity=identity, watch_timeout_seconds=2, drain_seconds=0.2)


def test_a_standby_takes_over_within_a_retry_period_of_the_release(fake_api: FakeApiServer,
                                                                   kube: KubeClient) -> None:
    """A standby campaigns every retry period (client-go's RetryPeriod, 2 s), not every third of
    the duration: a released Lease is taken at its next attempt. A live holder is still judged by
    its record staying unchanged for a whole duration, however often the standby looks."""
    fake_api.add(node_obj("n1"))
    old, new = make(kube, "old"), make(kube, "new")
    t1 = threading.Thread(target=old.run, daemon=True)
    t1.start()
    wait_for(old.leadership.is_leader.is_set)
    t2 = threading.Thread(target=new.run, daemon=True)
    t2.start()
    try:
        wait_for(lambda: new.ready() == (True, "standby (not the leader)"))
        threading.Event().wait(0.5)
        old.shutdown()  # SIGTERM: drains, releases the leader Lease
        t1.join(30)
        released = time.monotonic()
        wait_for(new.leadership.is_leader.is_set, timeout=20)
        assert time.monotonic() - released <= 3.0
    finally:
        new.shutdown()
        t2.join(30)

"""A surge-first move is counted by the cluster-wide bucket and the ledger capacity like the eviction it is.

The planner counts a pod (a bucket token, its record's room) only once it has planned it
(kdesched.admission.pipeline.RunAdmission.check/passed), so a pod it refuses for its
PodDisruptionBudget, or holds for a later wave, spends nothing. Those are exactly the pods that move
surge-first (kdesched.evictor.surge_moves.candidates). Before, ``Surges.choose`` let them through after
the plan checks alone (budgets, windows): with one token left a run both began the surge-first move and
sent another pod's eviction, and the bucket went into debt (-1). Now the move goes through
:meth:`RunAdmission.take`: the pod checks and the plan checks, then it is counted. Against the fake API
server (the run, the ledger) and the surge stub client (the Deployment, the scale)."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.admission.bucket import ClusterBucket
from kdesched.admission.control import RunContext
from kdesched.admission.pipeline import AdmissionSettings, Pipeline
from kdesched.evictor.ledger import InFlight, Ledger, Move
from kdesched.evictor.ledger_records import MAX_INFLIGHT_PER_MOVE
from kdesched.evictor.planner import PlannedEviction
from kdesched.evictor.reasons import Reason
from kdesched.kube.client import KubeClient
from kdesched.model.records import Node, Pod
from kdesched.model.snapshot import Snapshot
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import NOW, node_obj, pdb_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.test_surge import READY, StubClient, surges

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
WEB = {"app": "web", "pod-template-hash": "abc"}
ZED = {"app": "zed", "pod-template-hash": "xyz"}
TAINTS = "RemovePodsViolatingNodeTaints"


def run_with_tokens(fake_api: FakeApiServer, kube: KubeClient, burst: int,
                    zed: bool = True) -> tuple[dict[str, Any], StubClient, Any]:
    """node-a is tainted: web-1 (its PDB allows no disruption: a surge-first candidate) and, unless
    ``zed`` is False, z-zed-1 (another workload with a replica elsewhere: a plain eviction, planned after
    web-1 in name order). The bucket holds ``burst`` tokens."""
    fake_api.add(node_obj("node-a", taints=[TAINT]), node_obj("spare-1"), node_obj("spare-2"),
                 pod_obj("a-web-1", "node-a", owner_name="web-abc", labels=WEB, conditions=READY),
                 pod_obj("a-web-2", "spare-1", owner_name="web-abc", labels=WEB, conditions=READY),
                 pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    if zed:
        fake_api.add(pod_obj("z-zed-1", "node-a", owner_name="zed-xyz", labels=ZED, conditions=READY),
                     pod_obj("z-zed-2", "spare-2", owner_name="zed-xyz", labels=ZED, conditions=READY))
    block: dict[str, Any] = {"settleSeconds": 0.05, "leaseWaitSeconds": 2,
                             "rateLimits": {"global": {"perMinute": 1, "burst": burst}}}
    policy = default_like_policy(kdesched=block)
    reactor = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="test")
    try:
        client = StubClient(2, generation=6)
        reactor.execution.surges = surges(client)
        out = reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-1"), parse_node_event({"node": "node-a"}))
        return out, client, reactor.execution.store.read().ledger
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()


def evicted(out: dict[str, Any]) -> list[str]:
    return [e["pod"] for e in out["evictions"] if e.get("result") == "evicted"]


def scaled(client: StubClient) -> list[Any]:
    return [c for c in client.calls if c[0] == "scale"]


def test_one_token_admits_one_eviction_or_one_surge_move_not_both(fake_api: FakeApiServer, kube: KubeClient) -> None:
    out, client, ledger = run_with_tokens(fake_api, kube, burst=1)
    # the plan's eviction took the token (the planner counted it); the surge-first move finds the bucket empty
    assert evicted(out) == ["z-zed-1"]
    assert scaled(client) == [], "1 token, but the surge-first move was begun as well as z-zed-1's eviction"
    assert ledger.bucket is not None and ledger.bucket[0] >= 0, f"the bucket went into debt: {ledger.bucket}"
    assert not ledger.surges
    fallbacks = out["summary"]["surge"]["fallbacks"]
    assert [(f["pod"], f["reason"]) for f in fallbacks] == [("default/a-web-1", "held-by-controls")]
    assert "rate limit" in fallbacks[0]["message"]


def test_two_tokens_admit_the_eviction_and_the_surge_move(fake_api: FakeApiServer, kube: KubeClient) -> None:
    out, client, ledger = run_with_tokens(fake_api, kube, burst=2)
    assert evicted(out) == ["z-zed-1"]
    assert [c[1][0] for c in scaled(client)] == [3]  # begun: 2 -> 3
    assert list(ledger.surges) == ["Deployment/default/web"]
    assert ledger.bucket is not None and ledger.bucket[0] == pytest.approx(0.0, abs=0.05)  # both drew


def test_the_surge_move_alone_draws_its_token(fake_api: FakeApiServer, kube: KubeClient) -> None:
    out, client, ledger = run_with_tokens(fake_api, kube, burst=1, zed=False)
    assert evicted(out) == []
    assert [c[1][0] for c in scaled(client)] == [3]
    assert ledger.bucket is not None and ledger.bucket[0] == pytest.approx(0.0, abs=0.05)


# -- the pipeline's side: RunAdmission.take, on built objects ------------------------------------------
T = NOW.timestamp()


def admission(burst: int, ledger: Ledger | None = None, **ctx: Any) -> Any:
    snap = Snapshot.build([Node.from_api(node_obj("node-a"))], [])
    pipeline = Pipeline.build(AdmissionSettings(bucket=ClusterBucket(1, burst)))
    return pipeline.begin(RunContext(ledger or Ledger(), snap, T, **ctx))


def eviction(name: str, owner: str = "web-abc") -> PlannedEviction:
    p = Pod.from_api(pod_obj(name, "node-a", owner_name=owner, labels=WEB, conditions=READY))
    return PlannedEviction(p, "node-a", TAINTS, "", "surge-first")


def test_take_counts_what_it_lets_through_and_refuses_past_the_bucket() -> None:
    a = admission(burst=1)
    assert a.take(eviction("web-1")) is None
    refused = a.take(eviction("web-2", owner="other-abc"))
    assert refused is not None and refused.reason == Reason.RATE_LIMIT
    ledger = a.record(Ledger(), 1, T)
    assert ledger.bucket is not None and ledger.bucket[0] == pytest.approx(0.0)


def test_take_in_a_balance_run_refuses_the_one_pod_rather_than_ending_the_run() -> None:
    a = admission(burst=0, stop_when_spent=True)
    refused = a.take(eviction("web-1"))
    assert refused is not None and refused.reason == Reason.RATE_LIMIT


def test_take_asks_the_record_capacity() -> None:
    key = "Deployment/default/web"
    full = tuple(InFlight(f"u{i}", f"default/w{i}", "node-b", T - 1) for i in range(MAX_INFLIGHT_PER_MOVE))
    a = admission(burst=1000, ledger=Ledger(moves={key: Move(TAINTS, T - 1, T - 1, 1, 1, full)}))
    refused = a.take(eviction("web-1"))
    assert refused is not None and refused.reason == Reason.LEDGER_FULL

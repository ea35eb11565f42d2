"""A surge-first candidate that the admission pipeline refuses (:meth:`RunAdmission.take`: the bucket
empty, its ledger record full, a budget spent) is a refusal like any other: counted once in
``kdesched_evictions_refused_total`` and ``kdesched_reactor_gate_refusals_total`` with the admission
reason's name, and named so in the report's ``summary.surge.fallbacks``. A pod the ordinary path
already reports refused (its PodDisruptionBudget) is not counted twice. Against the fake API server
(the run, the ledger) and the surge stub client (the Deployment, the scale)."""

from __future__ import annotations

from typing import Any

from kdesched.evictor.metrics import REGISTRY
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import node_obj, pdb_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.test_surge import READY, StubClient, surges

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
WEB = {"app": "web", "pod-template-hash": "abc"}
ZED = {"app": "zed", "pod-template-hash": "xyz"}
TAINTS = "RemovePodsViolatingNodeTaints"
NOT_READY = [{"type": "Ready", "status": "False"}]


def refused(reason: str) -> float:
    return REGISTRY.get_sample_value("kdesched_evictions_refused_total",
                                     {"reason": reason, "strategy": TAINTS, "namespace": "default"}) or 0.0


def gate(reason: str) -> float:
    return REGISTRY.get_sample_value("kdesched_reactor_gate_refusals_total", {"reason": reason}) or 0.0


def counts() -> dict[str, float]:
    return {"refused/rate-limit": refused("rate-limit"), "refused/disruption-budget": refused("disruption-budget"),
            "gate/rate-limit": gate("rate-limit"), "fallbacks/held-by-controls": fallbacks("held-by-controls")}


def fallbacks(reason: str) -> float:
    return REGISTRY.get_sample_value("kdesched_surge_fallbacks_total", {"reason": reason}) or 0.0


def run_node_a(fake_api: FakeApiServer, kube: KubeClient, *, pdb: bool,
               lose_first_write: bool = False) -> tuple[dict[str, Any], dict[str, float]]:
    """node-a is tainted, the bucket holds 1 token. web-1 is a surge-first candidate: its PDB allows no
    disruption (``pdb``), or, without one, its sibling web-2 is not Ready, so the allowance holds web-1
    for a later wave. z-zed-1, another workload's pod on node-a with a Ready sibling elsewhere, is a
    plain eviction: it takes the token, and the surge-first move of web-1 finds the bucket empty.
    Returns the report and how much each counter went up."""
    fake_api.add(node_obj("node-a", taints=[TAINT]), node_obj("spare-1"), node_obj("spare-2"),
                 pod_obj("a-web-1", "node-a", owner_name="web-abc", labels=WEB, conditions=READY),
                 pod_obj("a-web-2", "spare-1", owner_name="web-abc", labels=WEB,
                         conditions=READY if pdb else NOT_READY),
                 pod_obj("z-zed-1", "node-a", owner_name="zed-xyz", labels=ZED, conditions=READY),
                 pod_obj("z-zed-2", "spare-2", owner_name="zed-xyz", labels=ZED, conditions=READY))
    if pdb:
        fake_api.add(pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    block: dict[str, Any] = {"settleSeconds": 0.05, "leaseWaitSeconds": 2,
                             "rateLimits": {"global": {"perMinute": 1, "burst": 1}}}
    policy = default_like_policy(kdesched=block)
    reactor = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="test")
    if lose_first_write:  # another run created a ledger record first: this run decides again
        fake_api.script("POST", f"/apis/coordination.k8s.io/v1/namespaces/{reactor.execution.store.namespace}/leases",
                        [409])
    try:
        reactor.execution.surges = surges(StubClient(2, generation=6))
        before = counts()
        out = reactor.node_event(Trigger(ev.TAINTS_CHANGED, "e-1"), parse_node_event({"node": "node-a"}))
        after = counts()
        return out, {k: after[k] - before[k] for k in before}
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()


def test_a_held_pod_whose_surge_move_the_bucket_refuses_is_counted_once_as_rate_limit(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    out, up = run_node_a(fake_api, kube, pdb=False)
    assert [e["pod"] for e in out["evictions"] if e.get("result") == "evicted"] == ["z-zed-1"]
    assert [e["result"] for e in out["evictions"] if e["pod"] == "a-web-1"] == ["paced"]
    assert up == {"refused/rate-limit": 1.0, "refused/disruption-budget": 0.0, "gate/rate-limit": 1.0,
                  "fallbacks/held-by-controls": 1.0}
    (fallback,) = out["summary"]["surge"]["fallbacks"]
    assert (fallback["pod"], fallback["reason"], fallback.get("control")) == (
        "default/a-web-1", "held-by-controls", "rate-limit")


def test_a_run_that_decides_again_after_losing_its_ledger_write_counts_its_fallback_once(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The run's first ledger write loses its race (a 409) and it decides again: the fallback of the
    decision it carried out is counted, not one per attempt (before: 2)."""
    out, up = run_node_a(fake_api, kube, pdb=False, lose_first_write=True)
    assert not any(fake_api.scripts.values()), "the 409 was not played"
    assert [e["pod"] for e in out["evictions"] if e.get("result") == "evicted"] == ["z-zed-1"]
    assert up == {"refused/rate-limit": 1.0, "refused/disruption-budget": 0.0, "gate/rate-limit": 1.0,
                  "fallbacks/held-by-controls": 1.0}


def test_a_pdb_refused_pod_whose_surge_move_the_bucket_refuses_is_not_counted_twice(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The run reports web-1 refused for its PodDisruptionBudget (``blocked``) and counts it so; the
    surge-first move's refusal adds the gate's count and the report's reason, not a second refusal."""
    out, up = run_node_a(fake_api, kube, pdb=True)
    assert [b["pod"] for b in out["blocked"]] == ["a-web-1"]
    assert up == {"refused/rate-limit": 0.0, "refused/disruption-budget": 1.0, "gate/rate-limit": 1.0,
                  "fallbacks/held-by-controls": 1.0}
    (fallback,) = out["summary"]["surge"]["fallbacks"]
    assert fallback.get("control") == "rate-limit"

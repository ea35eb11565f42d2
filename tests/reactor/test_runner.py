"""The reactor's runs against the fake API server: evictions happen through the eviction endpoint,
node-scoped runs read only their node's pods, parallel deliveries never over-evict, the Lease and
cool-downs hold."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.lease import LeaseLock
from kdesched.policy.errors import PolicyError
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import (
    RequestError,
    Trigger,
    parse_node_event,
    parse_run_request,
    parse_sweep_data,
)
from kdesched.reactor.io.lease import LockBusy
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.reactors import STARTED

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}




def reactor(kube: KubeClient, block: dict[str, Any] | None = None, **kw: Any) -> Reactor:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.1, **(block or {})}
    policy = default_like_policy(kdesched=block, **kw)
    settings = parse_settings(block, policy=policy, env={})
    r = Reactor(policy, settings, kube, identity="test-instance")
    STARTED.append(r)
    return r


def evicted(fake: FakeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in fake.requests("POST") if r.path.endswith("/eviction")]


def taint_cluster(fake: FakeApiServer) -> None:
    fake.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))
    fake.add(pod_obj("intolerant", "n1", owner_name="web"),
             pod_obj("tolerant", "n1", owner_name="api",
                     tolerations=[{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]),
             pod_obj("elsewhere", "n2", owner_name="db"))


def test_taints_changed_evicts_only_the_intolerant_pod_reading_only_that_node(fake_api: FakeApiServer,
                                                                             kube: KubeClient) -> None:
    taint_cluster(fake_api)
    # reading only the node's pods is the rule without the safety defaults (which need every pod:
    # see test_safety_defaults_read_every_pod_to_find_somewhere_to_go)
    r = reactor(kube, {"safety": {"enabled": False}})
    fake_api.clear_journal()
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1", "/test"), parse_node_event({"node": "n1", "before": {"taints": []},
                                                                   "after": {"taints": [TAINT]}}))
    assert evicted(fake_api) == ["intolerant"]
    assert [e["pod"] for e in out["evictions"]] == ["intolerant"] and out["evictions"][0]["result"] == "evicted"
    assert out["trigger"] == {"type": ev.TAINTS_CHANGED, "id": "e1", "node": "n1", "source": "/test"}
    assert out["strategies"] == ["RemovePodsViolatingNodeTaints"] and out["coalesced"] == 1
    pod_lists = [r for r in fake_api.requests("GET") if r.path.endswith("/pods")]
    assert pod_lists and all("spec.nodeName=n1" in str(r.query) for r in pod_lists)
    # a redelivery finds nothing more to do
    again = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1", "/test"), parse_node_event({"node": "n1"}))
    assert again["evictions"] == [] and evicted(fake_api) == ["intolerant"]


def test_dry_run_evicts_nothing(fake_api: FakeApiServer, kube: KubeClient) -> None:
    taint_cluster(fake_api)
    r = reactor(kube, {"dryRun": True})
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    assert out["dryRun"] is True and [e["result"] for e in out["evictions"]] == ["dry-run"]
    assert evicted(fake_api) == []


def test_a_second_taint_joins_the_workloads_move_and_waits_its_wave(fake_api: FakeApiServer,
                                                                    kube: KubeClient) -> None:
    """Two nodes of one maintenance: the second run finds the workload's move in progress (its pod
    existed when the move began), so the cool-down does not hold it; the allowance does (paced)."""
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2", taints=[TAINT]), node_obj("n3"))
    fake_api.add(pod_obj("web-1", "n1", owner_name="web"), pod_obj("web-2", "n2", owner_name="web"))
    r = reactor(kube)
    first = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    assert [e["pod"] for e in first["evictions"]] == ["web-1"]
    second = r.node_event(Trigger(ev.TAINTS_CHANGED, "e2"), parse_node_event({"node": "n2"}))
    assert [(e["pod"], e["result"]) for e in second["evictions"]] == [("web-2", "paced")]
    assert "allowance" in second["evictions"][0]["message"] and second["blocked"] == []
    assert evicted(fake_api) == ["web-1"]


def test_the_ledger_is_shared_by_instances(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2", taints=[TAINT]), node_obj("n3"))
    fake_api.add(pod_obj("web-1", "n1", owner_name="web"), pod_obj("web-2", "n2", owner_name="web"))
    reactor(kube).node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    # another instance (fresh process state) sees web-1 in flight through the ledger on the Lease
    second = reactor(kube)
    out = second.node_event(Trigger(ev.TAINTS_CHANGED, "e2"), parse_node_event({"node": "n2"}))
    assert [(e["pod"], e["result"]) for e in out["evictions"]] == [("web-2", "paced")]
    assert evicted(fake_api) == ["web-1"]


def test_a_maintenance_reaching_the_workloads_next_node_is_not_held_by_its_cool_down(fake_api: FakeApiServer,
                                                                                      kube: KubeClient) -> None:
    """0.1 held web-2 for cooldown.workloadSeconds (300 s) because web-1 had moved for another node's
    taint: a pool maintenance stalled per workload. A drain strategy's own pods that existed before
    the last eviction are paced by the allowance, not by the cool-down; a replacement still is."""
    ready = [{"type": "Ready", "status": "True"}]
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"), node_obj("n4"))
    fake_api.add(pod_obj("web-1", "n1", owner_name="web", conditions=ready),
                 pod_obj("web-2", "n2", owner_name="web", conditions=ready))
    r = reactor(kube)
    first = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    assert [e["pod"] for e in first["evictions"]] == ["web-1"]
    # the replacement is Ready: the move ends (settled by the next run that reads every pod)
    fake_api.add(pod_obj("web-3", "n3", owner_name="web", conditions=ready))
    node = fake_api.get("Node", "n2")
    assert node is not None
    node["spec"]["taints"] = [TAINT]
    fake_api.update(node)
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e2"), parse_node_event({"node": "n2"}))
    assert [e["pod"] for e in out["evictions"]] == ["web-2"] and evicted(fake_api) == ["web-1", "web-2"]
    # (the replacement's own case, a pod created after the eviction: tests/evictor/test_ledger.py)


def test_the_removed_per_node_bucket_is_refused_naming_it(fake_api: FakeApiServer, kube: KubeClient) -> None:
    with pytest.raises(PolicyError) as err:
        reactor(kube, {"rateLimits": {"perNode": {"perMinute": 1, "burst": 2}}})
    assert "kdesched.rateLimits.perNode: removed in 0.2" in str(err.value)
    reactor(kube, {"rateLimits": {"perNode": None, "perNamespace": None}})  # null: accepted, as before


def test_the_bucket_is_cluster_wide_two_processes_share_it(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """0.1's buckets were per process: N function instances allowed N times the rate. The bucket's
    state is in the ledger, so a second process finds it drawn."""
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2", taints=[TAINT]), node_obj("n3"), node_obj("n4"))
    fake_api.add(*[pod_obj(f"p{i}", "n1", owner_name=f"o{i}") for i in range(3)])
    fake_api.add(*[pod_obj(f"q{i}", "n2", owner_name=f"r{i}") for i in range(3)])
    limits = {"rateLimits": {"global": {"perMinute": 1, "burst": 4}}}
    first = reactor(kube, limits).node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    with KubeClient.for_host(fake_api.url) as other:
        second = reactor(other, limits).node_event(Trigger(ev.TAINTS_CHANGED, "e2"), parse_node_event({"node": "n2"}))
    assert len(first["evictions"]) == 3 and len(second["evictions"]) == 1 and len(second["blocked"]) == 2
    assert all("cluster-wide eviction bucket" in b["reason"] for b in second["blocked"])


def test_a_node_run_refuses_pod_by_pod_when_the_global_bucket_is_empty(fake_api: FakeApiServer,
                                                                        kube: KubeClient) -> None:
    """Node-scoped runs keep every refusal (their paced outcomes schedule their repeat)."""
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))
    fake_api.add(*[pod_obj(f"p{i}", "n1", owner_name=f"o{i}") for i in range(4)])
    r = reactor(kube, {"rateLimits": {"global": {"perMinute": 1, "burst": 2}, "perNode": None}})
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    assert len(out["evictions"]) == 2 and len(out["blocked"]) == 2
    assert all("cluster-wide eviction bucket" in b["reason"] for b in out["blocked"])
    # nothing else holds the node's run: it is repeated when the bucket has its next token (60 s at
    # 1/min), not left to the sweep
    due = r.continuations.scheduled().get("node:n1:RemovePodsViolatingNodeTaints")
    assert due is not None and 30 < due <= 61
    assert any("repeated in" in n for n in out["notes"])


def test_a_leased_run_stops_planning_once_the_global_bucket_is_empty(fake_api: FakeApiServer,
                                                                     kube: KubeClient) -> None:
    """A sweep that finds more candidates than the global bucket lets go evicts the burst, then plans
    nothing more: no refusal per remaining candidate, and the strategies after it do not run."""
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))
    fake_api.add(*[pod_obj(f"t{i}", "n1", cpu="100m", owner_name=f"t{i}") for i in range(5)])
    r = reactor(kube, {"rateLimits": {"global": {"perMinute": 1, "burst": 2}, "perNode": None,
                                      "perNamespace": None}})
    out = r.run_requested(Trigger(ev.PING, "p1"), parse_sweep_data(None))
    assert len(evicted(fake_api)) == 2 == len(out["evictions"])
    assert out["blocked"] == []  # the three other intolerant pods were not planned to be refused
    notes = " | ".join(out["notes"])
    assert "RemovePodsViolatingNodeTaints: rate limit: the cluster-wide eviction bucket" in notes
    assert "LowNodeUtilization: not run: rate limit: the cluster-wide eviction bucket" in notes


def lnu_cluster(fake: FakeApiServer) -> None:
    """n1 is overloaded (cpu 90%), n2 and n3 are empty: LowNodeUtilization moves pods off n1."""
    fake.add(node_obj("n1"), node_obj("n2"), node_obj("n3"))
    fake.add(*[pod_obj(f"w{i}", "n1", cpu="900m", owner_name=f"app{i}") for i in range(4)])


def test_twenty_parallel_ready_deliveries_one_or_two_runs_no_double_eviction(fake_api: FakeApiServer,
                                                                            kube: KubeClient) -> None:
    lnu_cluster(fake_api)
    r = reactor(kube, {"cooldown": {"nodeSeconds": 0}})
    barrier = threading.Barrier(20)
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def deliver(i: int) -> None:
        barrier.wait()
        try:
            results.append(r.node_event(Trigger(ev.NODE_READY, f"e{i}"), parse_node_event({"node": "n2"})))
        except BaseException as exc:  # noqa: BLE001 - pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 20
    assert 1 <= r.balance_events.runs <= 2 and r.execution.max_active_runs == 1
    pods = evicted(fake_api)
    assert pods and len(pods) == len(set(pods))
    assert sum(x["coalesced"] for x in results if x["evictions"]) >= 10
    assert {x["trigger"]["id"] for x in results} == {f"e{i}" for i in range(20)}


def test_balance_run_while_lease_held_elsewhere_is_busy(fake_api: FakeApiServer, kube: KubeClient) -> None:
    lnu_cluster(fake_api)
    assert LeaseLock(kube, "kdesched", "kdesched", "another-instance", 60).try_acquire()
    r = reactor(kube)
    with pytest.raises(LockBusy):
        r.node_event(Trigger(ev.NODE_READY, "e1"), parse_node_event({"node": "n2"}))
    with pytest.raises(LockBusy):
        r.run_requested(Trigger(ev.RUN_REQUESTED, "m1"), parse_run_request({"strategies": ["LowNodeUtilization"]}))
    assert evicted(fake_api) == []


def test_node_added_not_ready_waits(fake_api: FakeApiServer, kube: KubeClient) -> None:
    lnu_cluster(fake_api)
    fake_api.add(node_obj("fresh", ready=False))
    out = reactor(kube).node_event(Trigger(ev.NODE_ADDED, "a1"), parse_node_event({"node": "fresh"}))
    assert "waiting for node.ready" in out["notes"][0] and out["evictions"] == []
    assert evicted(fake_api) == [] and not fake_api.requests("PUT")


def test_manual_run_with_strategies_and_dry_run(fake_api: FakeApiServer, kube: KubeClient) -> None:
    lnu_cluster(fake_api)
    out = reactor(kube).run_requested(Trigger(ev.RUN_REQUESTED, "m1"),
                                      parse_run_request({"strategies": ["LowNodeUtilization"], "dryRun": True}))
    assert out["dryRun"] and out["evictions"] and evicted(fake_api) == []
    assert {e["strategy"] for e in out["evictions"]} == {"LowNodeUtilization"}


def test_every_report_says_why_it_is_or_is_not_a_dry_run(fake_api: FakeApiServer, kube: KubeClient) -> None:
    lnu_cluster(fake_api)
    live = reactor(kube)
    out = live.run_requested(Trigger(ev.RUN_REQUESTED, "m1"), parse_run_request({"strategies": ["LowNodeUtilization"], "dryRun": True}))
    assert out["dryRun"] and out["dryRunWhy"] == "the event asked for one (data.dryRun: true)"
    out = live.node_event(Trigger(ev.TAINTS_CHANGED, "e1"), parse_node_event({"node": "n1"}))
    assert not out["dryRun"] and out["dryRunWhy"].startswith("live: ")
    policy_dry = reactor(kube, {"dryRun": True})
    out = policy_dry.run_requested(Trigger(ev.RUN_REQUESTED, "m2"), parse_run_request({"dryRun": False}))
    assert out["dryRun"] and out["dryRunWhy"] == "kdesched.dryRun: true in the policy"
    settings = parse_settings({"settleSeconds": 0.05, "leaseWaitSeconds": 0.1}, policy=default_like_policy(),
                              env={"KDESCHED_DRY_RUN": "true"})
    env_dry = Reactor(default_like_policy(), settings, kube, identity="test-instance")
    out = env_dry.run_requested(Trigger(ev.PING, "p1"), parse_sweep_data(None))
    assert out["dryRun"] and out["dryRunWhy"] == "$KDESCHED_DRY_RUN=true" and evicted(fake_api) == []


def test_sweep_runs_whole_policy(fake_api: FakeApiServer, kube: KubeClient) -> None:
    taint_cluster(fake_api)
    out = reactor(kube).run_requested(Trigger(ev.PING, "p1"), parse_sweep_data(None))
    assert "intolerant" in evicted(fake_api)
    assert "RemovePodsViolatingNodeTaints" in out["strategies"]


@pytest.mark.parametrize("data,field", [
    ("x", "data"), ({"strategies": "LowNodeUtilization"}, "data.strategies"),
    ({"strategies": ["Nope"]}, "data.strategies"), ({"dryRun": "yes"}, "data.dryRun"),
    ({"nodes": ["Bad Node"]}, "data.nodes"), ({"nodes": "n1"}, "data.nodes"), ({"extra": 1}, "data.extra"),
    # an empty list is refused, not read as "all" (issue 25); a name must be all of the field
    ({"strategies": []}, "data.strategies"), ({"nodes": []}, "data.nodes"), ({"nodes": ["src-0\n"]}, "data.nodes"),
    ({"nodes": ["a..b"]}, "data.nodes"), ({"nodes": ["-a"]}, "data.nodes"),
])
def test_bad_run_requests(data: Any, field: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_run_request(data)
    assert err.value.field == field


def test_unknown_strategy_is_named() -> None:
    with pytest.raises(RequestError) as err:
        parse_run_request({"strategies": ["LowNodeUtilization", "Typo"]})
    assert "'Typo'" in str(err.value)


def test_safety_defaults_read_every_pod_to_find_somewhere_to_go(fake_api: FakeApiServer, kube: KubeClient) -> None:
    # the event path's safety defaults judge other nodes' usage and the workload's other pods
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2", cpu="1"))
    fake_api.add(pod_obj("intolerant", "n1", cpu="500m", owner_name="web"),
                 pod_obj("hog", "n2", cpu="800m", owner_name="db"))
    r = reactor(kube)
    fake_api.clear_journal()
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1", "/test"), parse_node_event({"node": "n1"}))
    pod_lists = [str(q.query) for q in fake_api.requests("GET") if q.path.endswith("/pods")]
    # the node's pods first (something to evict there?), then every pod
    assert len(pod_lists) == 2 and "spec.nodeName=n1" in pod_lists[0] and "spec.nodeName" not in pod_lists[1]
    assert evicted(fake_api) == [] and out["evictions"] == []
    assert [b["pod"] for b in out["blocked"]] == ["intolerant"]
    assert "nowhere to go" in out["blocked"][0]["reason"] and "insufficient cpu" in out["blocked"][0]["reason"]
    assert any("safety defaults" in n for n in out["notes"])


def test_node_affinity_reads_every_pod_before_evicting_when_safety_is_off(fake_api: FakeApiServer,
                                                                          kube: KubeClient) -> None:
    """RemovePodsViolatingNodeAffinity evicts only a pod that fits another node. From the event
    node's pods alone every other node looks empty: the run must read every pod before it evicts."""
    required = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}]}}}
    fake_api.add(node_obj("n1"), node_obj("n2", cpu="1", labels={"tier": "gold"}), node_obj("n3"))
    fake_api.add(pod_obj("picky", "n1", cpu="500m", owner_name="web", affinity=required),
                 pod_obj("hog", "n2", cpu="800m", owner_name="db"))
    r = reactor(kube, {"safety": {"enabled": False}})
    out = r.node_event(Trigger(ev.LABELS_CHANGED, "e1", "/test"), parse_node_event({"node": "n1", "before": {"tier": "gold"}}))
    assert evicted(fake_api) == [] and out["evictions"] == []  # n2, the only gold node, is full
    assert any("fits another node" in n for n in out["notes"])
    # with room on n2 it goes, decided on every pod as well
    fake_api.delete("Pod", "hog", "default")
    out = r.node_event(Trigger(ev.LABELS_CHANGED, "e2", "/test"), parse_node_event({"node": "n1", "before": {"tier": "gold"}}))
    assert evicted(fake_api) == ["picky"]


def test_paced_evictions_of_a_node_run_are_repeated_until_the_workload_is_done(fake_api: FakeApiServer,
                                                                              kube: KubeClient) -> None:
    import time as _time

    ready = [{"type": "Ready", "status": "True"}]

    def web(name: str, node: str, **kw: Any) -> dict[str, Any]:
        return pod_obj(name, node, owner_name="web-7d9f8", labels={"app": "web", "pod-template-hash": "7d9f8"}, **kw)

    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"))
    fake_api.add(web("web-7d9f8-a", "n1", conditions=ready), web("web-7d9f8-b", "n1", conditions=ready))
    r = reactor(kube)  # default cool-downs (300 s): the chain's own evictions do not hold its repeats
    assert (r.continuations.first, r.continuations.longest) == (1.0, 10.0)
    r.continuations.first, r.continuations.longest = 0.05, 0.2
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1", "/test"), parse_node_event({"node": "n1"}))
    assert [(e["pod"], e["result"]) for e in out["evictions"]] == [("web-7d9f8-a", "evicted"),
                                                                   ("web-7d9f8-b", "paced")]
    assert any("repeated in 0.05s" in n for n in out["notes"])
    # the ReplicaSet's replacement exists but is not Ready: repeats keep pacing, evict nothing, and
    # back off (0.05 -> 0.1 -> 0.2 s, no further)
    fake_api.add(web("web-7d9f8-c", "n2", phase="Pending"))
    _time.sleep(1.2)
    assert evicted(fake_api) == ["web-7d9f8-a"]
    assert r.continuations.delay("node:n1:RemovePodsViolatingNodeTaints") == 0.2
    replacement = fake_api.get("Pod", "web-7d9f8-c", "default")
    assert replacement is not None
    replacement["status"].update(phase="Running", conditions=ready)
    fake_api.update(replacement)
    deadline = _time.monotonic() + 20
    while evicted(fake_api) != ["web-7d9f8-a", "web-7d9f8-b"] and _time.monotonic() < deadline:
        _time.sleep(0.05)
    assert evicted(fake_api) == ["web-7d9f8-a", "web-7d9f8-b"]
    r.stop.set()


def test_safety_defaults_keep_the_node_only_read_when_the_node_has_nothing_to_evict(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"),
                 pod_obj("tolerant", "n1", owner_name="api",
                         tolerations=[{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]),
                 pod_obj("elsewhere", "n2", owner_name="db"))
    r = reactor(kube)
    fake_api.clear_journal()
    out = r.node_event(Trigger(ev.TAINTS_CHANGED, "e1", "/test"), parse_node_event({"node": "n1"}))
    pod_lists = [str(q.query) for q in fake_api.requests("GET") if q.path.endswith("/pods")]
    assert out["evictions"] == [] and len(pod_lists) == 1 and "spec.nodeName=n1" in pod_lists[0]


@pytest.mark.parametrize("node", ["src-0\n", "src-0\nother", "n1 ", "a..b", "a.-b", "", "x" * 254])
def test_node_event_names_must_be_whole_dns_subdomains(node: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_node_event({"node": node})
    assert err.value.field == "data.node"


def test_node_event_names_that_are_valid() -> None:
    for node in ("n1", "ip-10-0-0-1.ec2.internal", "a", "x" * 253):
        assert parse_node_event({"node": node}).node == node


def test_node_repeats_due_together_are_one_run_and_each_scope_goes_on(fake_api: FakeApiServer,
                                                                      kube: KubeClient) -> None:
    """A pool maintenance: the repeats of three tainted nodes' runs are decided as one (one read,
    one plan, one ledger commit). The workload's allowance still holds across them (one pod of web
    at a time), the pod held for later keeps its own node's scope in the ledger (a restart
    continues it there), and each scope's chain goes on or ends on its own."""
    ready = [{"type": "Ready", "status": "True"}]

    def web(name: str, node: str, **kw: Any) -> dict[str, Any]:
        return pod_obj(name, node, owner_name="web-7d9f8", labels={"app": "web", "pod-template-hash": "7d9f8"}, **kw)

    fake_api.add(*(node_obj(n, taints=[TAINT]) for n in ("n1", "n2", "n3")), node_obj("n4"))
    fake_api.add(web("web-7d9f8-a", "n1", conditions=ready), web("web-7d9f8-b", "n2", conditions=ready),
                 web("web-7d9f8-c", "n3", conditions=ready), pod_obj("db-1", "n2", owner_name="db", conditions=ready))
    r = reactor(kube)
    r.continuations.first = r.continuations.longest = 30.0  # the test repeats by hand
    for i, n in enumerate(("n1", "n2", "n3")):
        r.node_event(Trigger(ev.TAINTS_CHANGED, f"e{i}", "/test"), parse_node_event({"node": n}))
    assert sorted(evicted(fake_api)) == ["db-1", "web-7d9f8-a"]  # one pod of each workload
    scopes = [f"node:{n}:RemovePodsViolatingNodeTaints" for n in ("n1", "n2", "n3")]
    assert set(r.continuations.scheduled()) == set(scopes[1:])  # n1 holds nothing more
    # web's replacement is Ready on n4: the next wave may go
    fake_api.add(web("web-7d9f8-d", "n4", conditions=ready))  # (the fake removed the evicted pods)
    commits = len([q for q in fake_api.requests("PUT") if q.path.endswith("/leases/kdesched-ledger")])
    r._continue_batch(scopes[1:])
    assert len([q for q in fake_api.requests("PUT") if q.path.endswith("/leases/kdesched-ledger")]) == commits + 1
    moved = evicted(fake_api)
    assert len(moved) == 3 and moved[-1] in ("web-7d9f8-b", "web-7d9f8-c")  # web's allowance: one more
    left = "web-7d9f8-c" if moved[-1] == "web-7d9f8-b" else "web-7d9f8-b"
    left_node = "n3" if left == "web-7d9f8-c" else "n2"
    held = r.execution.store.read().ledger.held_scopes()
    assert held == {f"node:{left_node}:RemovePodsViolatingNodeTaints": [f"default/{left}"]}
    assert set(r.continuations.scheduled()) == {f"node:{left_node}:RemovePodsViolatingNodeTaints"}
    r.stop.set()


def test_only_node_repeats_of_the_same_strategies_due_together_are_batched() -> None:
    import time as _time

    from kdesched.reactor.run.continuation import Continuations, batch_group

    assert batch_group("node:n1:A+B") == batch_group("node:n2:A+B") == "A+B"
    assert batch_group("node:n1:A") != batch_group("node:n1:A+B")
    assert batch_group("balance:*") is None and batch_group("balance:A@n1") is None
    stop = threading.Event()
    singles: list[str] = []
    batches: list[list[str]] = []
    c = Continuations(singles.append, stop=stop, timeout_seconds=60, first=0.05, longest=5,
                      run_batch=lambda keys: batches.append(sorted(keys)), batch_window=0.5)
    for key in ("node:n1:A", "node:n2:A", "node:n3:B", "balance:A"):
        c.after_run(key, held={"Deployment/default/web"}, evicted=set())
    deadline = _time.monotonic() + 5
    while (len(singles) < 2 or not batches) and _time.monotonic() < deadline:
        _time.sleep(0.01)
    assert batches == [["node:n1:A", "node:n2:A"]] and sorted(singles) == ["balance:A", "node:n3:B"]
    # the batch reported back on neither scope: both are repeated again, not lost
    _time.sleep(0.3)
    assert len(batches) >= 2
    stop.set()
    c.cancel_all()


def test_taint_events_of_several_nodes_queued_behind_a_run_are_decided_as_one(fake_api: FakeApiServer,
                                                                              kube: KubeClient) -> None:
    """A maintenance taints six nodes at once: the first event's run starts alone, the others queue
    behind it and are decided as one run (not five). One pod per workload goes (the allowance), the
    rest are held under their own node's scope, and every delivery gets a report."""
    from concurrent.futures import ThreadPoolExecutor

    ready = [{"type": "Ready", "status": "True"}]
    nodes = [f"n{i}" for i in range(6)]
    fake_api.add(*(node_obj(n, taints=[TAINT]) for n in nodes), node_obj("spare"))
    for i, n in enumerate(nodes):
        fake_api.add(pod_obj(f"web-{i}", n, owner_name="web", conditions=ready),
                     pod_obj(f"api-{i}", n, owner_name="api", conditions=ready))
    r = reactor(kube)
    r.continuations.first = r.continuations.longest = 30.0
    import time as _time

    with ThreadPoolExecutor(6) as pool:
        with r.taint_events.run_lock:  # a run in progress: the six events queue behind it
            futures = [pool.submit(r.node_event, Trigger(ev.TAINTS_CHANGED, f"e-{n}", "/test"),
                                   parse_node_event({"node": n})) for n in nodes]
            _time.sleep(0.5)
        replies = [f.result() for f in futures]
    assert r.taint_events.runs == 1
    assert all(rep["coalesced"] == 6 and "decided as one run" in " ".join(rep["notes"]) for rep in replies)
    moved = evicted(fake_api)
    assert sorted(p.split("-")[0] for p in moved) == ["api", "web"]  # one pod of each workload
    held = r.execution.store.read().ledger.held_scopes()
    assert sum(len(v) for v in held.values()) == 10
    for scope, pods in held.items():
        node = scope.split(":")[1]
        assert all(fake_api.get("Pod", p.split("/")[1], "default")["spec"]["nodeName"] == node for p in pods)
    assert set(r.continuations.scheduled()) == set(held)
    r.stop.set()


def test_a_replacement_turning_ready_brings_its_workloads_repeats_forward() -> None:
    from kdesched.reactor.run.continuation import Continuations

    stop = threading.Event()
    c = Continuations(lambda _k: None, stop=stop, timeout_seconds=60, first=5.0, longest=10)
    c.after_run("node:n1:A", held={"Deployment/default/web"}, evicted=set())
    c.after_run("node:n2:A", held={"Deployment/default/db"}, evicted=set())
    assert c.scheduled()["node:n1:A"] > 4
    assert c.wake({"Deployment/default/web"}, within=0.2) == 1  # serve's cache saw web's pod turn Ready
    due = c.scheduled()
    assert due["node:n1:A"] <= 0.2 and due["node:n2:A"] > 4
    stop.set()
    c.cancel_all()

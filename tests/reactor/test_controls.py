"""The operator's controls in the reactor, against the fake API server: the cluster-health brake,
disruption windows and budgets at admission (reactor/run/controls.py, reactor/run/admit.py), with the
reactor's wall clock under the test's control.

On the real control plane: tests/realk8s/test_controls.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kdesched.evictor.ledger import Ledger
from kdesched.evictor.reasons import Reason
from kdesched.kube.client import KubeClient
from kdesched.model.snapshot import Snapshot
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event, parse_sweep_data
from kdesched.reactor.io.ledger_store import LedgerStore
from kdesched.reactor.io.loaders import SnapshotLoader, default_loader
from kdesched.reactor.run.continuation import node_scope
from kdesched.reactor.run.controls import HEALTH_BRAKE
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.reactors import STARTED

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
READY = [{"type": "Ready", "status": "True"}]
TAINTS = "RemovePodsViolatingNodeTaints"
THU_10 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC).timestamp()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def reactor(kube: KubeClient, clock: Clock, *, loader: SnapshotLoader = default_loader, **block: Any) -> Reactor:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2, **block}
    policy = default_like_policy(kdesched=block)
    r = Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="test", wall_clock=clock,
                loader=loader)
    STARTED.append(r)
    return r


def web(name: str, node: str, namespace: str = "default", app: str = "web") -> dict[str, Any]:
    return pod_obj(name, node, namespace=namespace, owner_name=f"{app}-7d9f8",
                   labels={"app": app, "pod-template-hash": "7d9f8"}, conditions=READY)


def pool(fake: FakeApiServer, nodes: int, spares: int = 2, down: int = 0) -> None:
    fake.add(*[node_obj(f"p{i}", taints=[TAINT]) for i in range(nodes)], *[node_obj(f"s{i}") for i in range(spares)],
             *[node_obj(f"d{i}", ready=False) for i in range(down)])
    fake.add(*[web(f"web-7d9f8-{i}", f"p{i}") for i in range(nodes)])


def evicted(fake: FakeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in fake.requests("POST") if r.path.endswith("/eviction")]


def ledger_of(fake: FakeApiServer) -> Ledger:
    with KubeClient.for_host(fake.url) as client:
        read = LedgerStore(client, "kdesched", "kdesched").read()
    assert read.problem == ""
    return read.ledger


def taint_event(r: Reactor, node: str, i: int = 0) -> dict[str, Any]:
    return r.node_event(Trigger(ev.TAINTS_CHANGED, f"e-{node}-{i}"), parse_node_event({"node": node}))


def results(out: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["pod"], e["result"]) for e in out["evictions"]]


# -- the health brake ------------------------------------------------------------------------------------
def test_the_brake_defers_every_eviction_until_healthy_for_the_settle_time(fake_api: FakeApiServer,
                                                                          kube: KubeClient) -> None:
    pool(fake_api, 1, spares=6, down=3)  # 3 of 10 nodes NotReady: 30% > 20%
    clock = Clock(THU_10)
    r = reactor(kube, clock, healthBrake={"settleSeconds": 60})
    out = taint_event(r, "p0")
    assert results(out) == [("web-7d9f8-0", "deferred")] and evicted(fake_api) == []
    row = out["evictions"][0]
    assert row["cause"] == "health-brake" and "3 of 10 nodes (30%)" in row["message"]
    assert any("held by the health brake: this run is repeated in 60s" in n for n in out["notes"])
    assert node_scope("p0", (TAINTS,)) in r.continuations.scheduled()
    assert ledger_of(fake_api).unhealthy_at == pytest.approx(THU_10, abs=0.01)
    assert ledger_of(fake_api).moves == {}  # nothing admitted, nothing held
    assert HEALTH_BRAKE.labels("share")._value.get() == 1  # type: ignore[attr-defined]
    assert "health brake" in r.brake_status.status() and "not a failure" in r.brake_status.status()

    for i in range(3):  # the nodes come back
        fake_api.update(node_obj(f"d{i}"))
    clock.t += 30  # healthy, but within the settle time: still deferred, repeated when it ends
    out = taint_event(r, "p0", 1)
    assert results(out) == [("web-7d9f8-0", "deferred")] and "last seen unhealthy 30s ago" in out["evictions"][0][
        "message"]
    assert any("repeated in 30s" in n for n in out["notes"]) and evicted(fake_api) == []
    assert HEALTH_BRAKE.labels("settling")._value.get() == 1  # type: ignore[attr-defined]

    clock.t += 31  # settled: the move happens
    out = taint_event(r, "p0", 2)
    assert results(out) == [("web-7d9f8-0", "evicted")] and evicted(fake_api) == ["web-7d9f8-0"]
    assert r.brake_status.status() == "" and HEALTH_BRAKE.labels("settling")._value.get() == 0  # type: ignore[attr-defined]


def test_another_process_honours_the_settle_time_through_the_ledger(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 1, spares=6, down=3)
    clock = Clock(THU_10)
    taint_event(reactor(kube, clock), "p0")  # process A sees the outage
    for i in range(3):
        fake_api.update(node_obj(f"d{i}"))
    clock.t += 10
    other = reactor(KubeClient.for_host(fake_api.url), clock)  # process B never saw it
    out = taint_event(other, "p0", 1)
    assert results(out) == [("web-7d9f8-0", "deferred")] and "settleSeconds" in out["evictions"][0]["message"]


def test_a_zone_down_brakes_and_disabling_the_brake_lets_evictions_through(fake_api: FakeApiServer,
                                                                           kube: KubeClient) -> None:
    pool(fake_api, 1, spares=8)
    zone = {"topology.kubernetes.io/zone": "z9"}
    fake_api.add(node_obj("z", labels=zone, ready=False))  # 1 of 11: below 20%, but its whole zone
    clock = Clock(THU_10)
    out = taint_event(reactor(kube, clock), "p0")
    assert results(out) == [("web-7d9f8-0", "deferred")] and "zone(s) z9" in out["evictions"][0]["message"]
    out = taint_event(reactor(kube, clock, healthBrake={"enabled": False}), "p0", 1)
    assert results(out) == [("web-7d9f8-0", "evicted")]


def listing_loader(client: KubeClient, pod_nodes: Any, include: Any) -> Snapshot:
    """Reads as the watch cache serves a node run: every Node, the node's pods (not the node-local read)."""
    return default_loader(client, pod_nodes, include)


@pytest.mark.parametrize("loader", [default_loader, listing_loader], ids=["node-local", "cache-like"])
def test_a_node_event_with_safety_off_is_braked_by_every_nodes_health(fake_api: FakeApiServer, kube: KubeClient,
                                                                       loader: SnapshotLoader) -> None:
    """With the safety defaults off a taint run reads only its node's pods and, without the watch
    cache, only a few Nodes: the brake did not judge (it went by the pods' completeness), and half the
    cluster NotReady evicted anyway. A run with something to evict now judges every Node (node-local:
    one LIST of them more); the pods stay the node's."""
    pool(fake_api, 1, spares=2, down=3)  # 3 of 6 nodes NotReady: 50% > 20%
    fake_api.add(web("web-7d9f8-9", "s0"))  # another node's pod: not read
    r = reactor(kube, Clock(THU_10), loader=loader, safety={"enabled": False})
    fake_api.clear_journal()
    out = taint_event(r, "p0")
    assert results(out) == [("web-7d9f8-0", "deferred")] and evicted(fake_api) == []
    row = out["evictions"][0]
    assert row["cause"] == "health-brake" and "3 of 6 nodes (50%)" in row["message"]
    assert ledger_of(fake_api).unhealthy_at == pytest.approx(THU_10, abs=0.01)
    assert any(n.startswith("pods read: node p0") for n in out["notes"]), out["notes"]
    pod_lists = [r.query.get("fieldSelector") for r in fake_api.requests("GET", "/api/v1/pods")]
    assert pod_lists and set(pod_lists) == {"spec.nodeName=p0"}  # the pods stay the node's
    assert any(r.query.get("limit") != "4" for r in fake_api.requests("GET", "/api/v1/nodes"))  # every Node

    healthy = reactor(kube, Clock(THU_10 + 120), loader=loader, safety={"enabled": False})  # the nodes come back
    for i in range(3):
        fake_api.update(node_obj(f"d{i}"))
    out = taint_event(healthy, "p0", 1)
    assert results(out) == [("web-7d9f8-0", "evicted")]


def test_the_sweep_is_braked_too(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 2, spares=6, down=3)
    r = reactor(kube, Clock(THU_10))
    from kdesched.reactor.events.requests import RunRequest

    out = r.run_requested(Trigger(ev.PING, "sweep-1"), RunRequest())
    assert {e["result"] for e in out["evictions"]} == {"deferred"} and evicted(fake_api) == []


# -- disruption windows ----------------------------------------------------------------------------------
def test_a_closed_window_defers_writes_nothing_and_repeats_at_the_opening(fake_api: FakeApiServer,
                                                                        kube: KubeClient) -> None:
    pool(fake_api, 3)
    clock = Clock(THU_10)
    r = reactor(kube, clock, disruptionWindows=[{"name": "business-hours", "schedule": "0 9 * * 1-5",
                                                 "duration": "8h", "action": "forbid"}])
    out = taint_event(r, "p0")
    assert results(out) == [("web-7d9f8-0", "deferred")] and evicted(fake_api) == []
    msg = out["evictions"][0]["message"]
    assert out["evictions"][0]["cause"] == "window" and '"business-hours"' in msg and "until 2026-11-26 17:00" in msg
    assert fake_api.get("Lease", "kdesched", "kdesched") is None or ledger_of(fake_api).moves == {}
    due = r.continuations.scheduled()[node_scope("p0", (TAINTS,))]
    assert due == pytest.approx(7 * 3600 + 0.5, abs=2)  # re-decided at 17:00
    clock.t = datetime(2026, 11, 26, 17, 0, 1, tzinfo=UTC).timestamp()
    out = taint_event(r, "p0", 1)  # what the repeat does at the opening: decide again
    assert results(out) == [("web-7d9f8-0", "evicted")]


def test_a_window_for_other_strategies_or_triggers_does_not_apply(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 1)
    r = reactor(kube, Clock(THU_10), disruptionWindows=[
        {"schedule": "* * * * *", "duration": "1h", "strategies": ["LowNodeUtilization"]},
        {"schedule": "* * * * *", "duration": "1h", "triggers": ["sweep"]}])
    assert results(taint_event(r, "p0")) == [("web-7d9f8-0", "evicted")]


def test_a_window_on_the_sweep_covers_the_paced_repeats_of_a_sweep_too(fake_api: FakeApiServer,
                                                                       kube: KubeClient) -> None:
    """docs/safety.md's "balance runs only 01:00-03:00": a sweep at 02:59 that paces its move must
    not go on evicting at 03:00 because its repeats are labelled ``continuation``."""
    from kdesched.reactor.events.requests import RunRequest

    pool(fake_api, 2)  # one workload of 2 pods, both on tainted nodes: pacing evicts one per wave
    clock = Clock(datetime(2026, 11, 26, 2, 59, tzinfo=UTC).timestamp())
    r = reactor(kube, clock, disruptionWindows=[{"name": "nightly", "schedule": "0 1 * * *", "duration": "2h",
                                                 "action": "allow", "triggers": ["rebalance", "sweep"]}])
    out = r.run_requested(Trigger(ev.PING, "sweep-1"), RunRequest())
    assert sorted(e["result"] for e in out["evictions"]) == ["evicted", "paced"]
    (scope,) = r.continuations.scheduled()
    assert scope.endswith("#sweep")  # the repeat knows which run it continues
    r.continuations.cancel_all()  # the test fires the repeat itself
    fake_api.add(web("web-7d9f8-new", "s0"))  # the replacement is Ready: the next wave may go
    clock.t = datetime(2026, 11, 26, 3, 0, 30, tzinfo=UTC).timestamp()  # the window has closed
    before = evicted(fake_api)
    r._continue(scope)
    assert evicted(fake_api) == before  # deferred by the window, not evicted as a "continuation"
    assert any(abs(d - (22 * 3600 - 30)) < 60 for d in r.continuations.scheduled().values())  # re-decided at 01:00
    clock.t = datetime(2026, 11, 27, 1, 0, 30, tzinfo=UTC).timestamp()
    r.continuations.cancel_all()
    r._continue(scope)
    assert len(evicted(fake_api)) == len(before) + 1  # the window is open again: the move goes on


def test_a_manual_run_over_thousands_of_nodes_keeps_its_ledger_entries_small(fake_api: FakeApiServer,
                                                                             kube: KubeClient) -> None:
    """Every ledger entry stores the scope its run repeats; a run.requested naming 8,000 nodes once
    made each entry ~240 kB and every write a 422 (a 500 to the caller, nothing moved)."""
    from kdesched.reactor.events.requests import RunRequest

    pool(fake_api, 2)
    names = ("p0", "p1", *[f"node-{i:05d}.pool-a.example.internal" for i in range(8000)])
    r = reactor(kube, Clock(THU_10))
    out = r.run_requested(Trigger(ev.RUN_REQUESTED, "by-hand"), RunRequest(strategies=(TAINTS,), nodes=names))
    assert sorted(e["result"] for e in out["evictions"]) == ["evicted", "paced"]
    record = max((len(o["metadata"].get("annotations", {}).get("kdesched.dev/ledger-record", ""))
                  for o in fake_api.list("Lease")), default=0)
    assert 0 < record < 2048
    (scope,) = r.continuations.scheduled()
    r.continuations.cancel_all()
    fake_api.add(web("web-7d9f8-new", "s0"))
    r._continue(scope)  # this process kept what the digest stands for: the move goes on, scoped as asked
    assert evicted(fake_api) == ["web-7d9f8-0", "web-7d9f8-1"]
    # a process that did not start the run (a restart) cannot resume it, and says so instead of guessing
    other = reactor(KubeClient.for_host(fake_api.url), Clock(THU_10))
    other._continue(scope)
    assert other.continuations.scheduled() == {}


def test_a_taint_written_a_moment_ago_is_evicted_for_once_the_scheduler_has_seen_it(fake_api: FakeApiServer,
                                                                                   kube: KubeClient) -> None:
    """kdesched.admission.fresh_change through the reactor: the node's managedFields say the taint
    was written 0.5 s ago, so the run defers and repeats itself at the 3 s mark, then evicts."""
    pool(fake_api, 1)
    clock = Clock(THU_10 + 0.5)
    node = node_obj("p0", taints=[TAINT])
    node["metadata"]["managedFields"] = [{"manager": "kubectl-taint", "operation": "Update", "apiVersion": "v1",
                                          "time": "2026-11-26T10:00:00Z", "fieldsType": "FieldsV1",
                                          "fieldsV1": {"f:spec": {"f:taints": {}}}}]
    fake_api.update(node)
    r = reactor(kube, clock)
    out = taint_event(r, "p0")
    assert results(out) == [("web-7d9f8-0", "deferred")] and evicted(fake_api) == []
    assert out["evictions"][0]["cause"] == "fresh-node-change"
    assert any("held by the fresh node change: this run is repeated in 3s" in n for n in out["notes"]), out["notes"]
    assert r.continuations.scheduled()[node_scope("p0", (TAINTS,))] == pytest.approx(3.0, abs=0.5)
    r.continuations.cancel_all()
    clock.t = THU_10 + 3.1  # what the repeat sees
    assert results(taint_event(r, "p0", 1)) == [("web-7d9f8-0", "evicted")]


# -- disruption budgets ------------------------------------------------------------------------------------
def test_a_namespace_budget_caps_pods_in_flight_across_workloads(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"tier": "web"}}})
    fake_api.add(node_obj("p0", taints=[TAINT]), *[node_obj(f"s{i}") for i in range(3)])
    # 10 pods in namespace shop, 5 workloads of 2; the taint on p0 hits one pod of each workload
    fake_api.add(*[web(f"app{w}-7d9f8-a", "p0", "shop", f"app{w}") for w in range(5)],
                 *[web(f"app{w}-7d9f8-b", "s0", "shop", f"app{w}") for w in range(5)])
    r = reactor(kube, Clock(THU_10), disruptionBudgets=[
        {"name": "shop", "maxUnavailable": "20%", "namespaceSelector": {"matchLabels": {"tier": "web"}}}])
    out = taint_event(r, "p0")
    assert len(evicted(fake_api)) == 2
    blocked = [b for b in out["blocked"] if b["reason"].startswith("budget:")]
    assert len(blocked) == 3 and 'disruption budget "shop" (maxUnavailable 20%, namespace shop) allows 2 of 10' in \
        blocked[0]["reason"]
    inflight = sum(len(mv.inflight) for mv in ledger_of(fake_api).moves.values())
    assert inflight == 2
    assert any("repeated in" in n for n in out["notes"])  # looked at again shortly
    out = taint_event(r, "p0", 1)  # nothing replaced yet: still 2 in flight, no more evictions
    assert len(evicted(fake_api)) == 2


# -- "why not" Events ------------------------------------------------------------------------------------
def why_not(fake: FakeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.list("Event") if e["reason"] == reason]


def test_held_back_evictions_post_one_event_per_object_and_reason_a_minute(fake_api: FakeApiServer,
                                                                           kube: KubeClient) -> None:
    pool(fake_api, 1, spares=6, down=3)
    r = reactor(kube, Clock(THU_10))
    out = taint_event(r, "p0")
    (event,) = why_not(fake_api, "HealthBrake")
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "p0"}
    assert event["metadata"]["namespace"] == "default"
    assert out["evictions"][0]["message"].removeprefix("deferred: ") in event["note"]  # the report's reason
    assert "1 eviction(s) held back (default/web-7d9f8-0)" in event["note"]
    for i in range(1, 4):  # a storm of events on the node: no storm of Events
        taint_event(r, "p0", i)
    assert len(why_not(fake_api, "HealthBrake")) == 1


def test_a_balance_run_posts_on_the_workloads_owner(fake_api: FakeApiServer, kube: KubeClient) -> None:
    pool(fake_api, 2, spares=6, down=3)
    from kdesched.reactor.events.requests import RunRequest

    reactor(kube, Clock(THU_10)).run_requested(Trigger(ev.PING, "sweep-1"), RunRequest())
    events = why_not(fake_api, "HealthBrake")
    assert [(e["regarding"]["kind"], e["regarding"]["name"]) for e in events] == [("Deployment", "web")]
    assert events[0]["regarding"]["apiVersion"] == "apps/v1" and "2 eviction(s) held back" in events[0]["note"]


def test_why_not_aggregates_and_rate_limits_per_object_and_reason() -> None:
    from kdesched.engine import RunPlan, RunReport
    from kdesched.evictor.planner import Refusal
    from kdesched.model.records import Pod
    from kdesched.reactor.io.whynot import WhyNotEvents

    posted: list[dict[str, Any]] = []
    clock = Clock(0.0)
    events = WhyNotEvents(lambda **kw: posted.append(kw) or True, clock=clock, wall=clock)
    pods = [Pod.from_api(web(f"web-7d9f8-{i}", "p0")) for i in range(7)]
    reasons = ["cool-down: workload Deployment/default/web lost a pod 3s ago", "nowhere to go: no other Ready node",
               "budget: disruption budget (maxUnavailable 1, cluster-wide) allows 1", "rate limit: global"]
    kinds = [Reason.COOLDOWN_WORKLOAD, Reason.NOWHERE_TO_GO, Reason.BUDGET, Reason.RATE_LIMIT]
    refusals = tuple(Refusal(p, TAINTS, "default", reasons[0], kinds[0]) for p in pods[:6]) + tuple(
        Refusal(pods[6], TAINTS, "default", r, k) for r, k in zip(reasons[1:], kinds[1:], strict=True))
    plan = RunPlan((), refusals, (), (), (), (), {}, datetime.now(UTC))
    report = RunReport(plan, (), False)
    assert events.run_done(report, "p0") == 3  # cool-down (6 pods in one Event), nowhere to go, budget
    assert sorted(p["reason"] for p in posted) == ["CoolDown", "DisruptionBudget", "NowhereToGo"]
    cool = next(p for p in posted if p["reason"] == "CoolDown")
    assert "6 eviction(s) held back" in cool["note"] and "and 1 more" in cool["note"] and reasons[0] in cool["note"]
    clock.t = 59.0
    assert events.run_done(report, "p0") == 0
    assert events.run_done(report, "p1") == 3  # another object
    clock.t = 61.0
    assert events.run_done(report, "p0") == 3


def test_namespace_labels_come_from_one_list_kept_a_minute() -> None:
    from kdesched.reactor.run.controls import NamespaceLabels

    calls: list[int] = []
    clock = Clock(0.0)

    def list_all() -> list[dict[str, Any]]:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("403 forbidden")
        return [{"metadata": {"name": "shop", "labels": {"tier": "web"}}}, {"metadata": {"name": "bare"}}]

    labels = NamespaceLabels(list_all, clock=clock)
    assert labels("shop") == {"tier": "web"} and labels("bare") == {} and labels("gone") == {}
    assert len(calls) == 1
    clock.t = 61.0
    assert labels("shop") == {"tier": "web"} and len(calls) == 2
    clock.t = 122.0
    assert labels("shop") is None  # unreadable: the budget applies (the cautious answer)


def test_a_paced_moves_repeats_post_eviction_paced_once_a_minute_per_pod(fake_api: FakeApiServer,
                                                                         kube: KubeClient) -> None:
    """The six-node maintenance taint: five pods held, and the held runs repeated; without the
    limit each repeat posted EvictionPaced on each held pod again."""
    pool(fake_api, 6)
    r = reactor(kube, Clock(THU_10))
    for i in range(3):
        for n in range(6):
            taint_event(r, f"p{n}", i)
    paced = [e for e in fake_api.list("Event") if e["reason"] == "EvictionPaced"]
    names = [e["regarding"]["name"] for e in paced]
    assert len(names) == len(set(names)) == 5  # one per held pod, however many runs held it
    nodes = [e["regarding"]["name"] for e in why_not(fake_api, "Paced")]
    assert len(nodes) == len(set(nodes)) == 5  # and one "why not" Event per node


def test_readyz_text_says_when_the_brake_may_have_lifted() -> None:
    from kdesched.admission.control import RunContext
    from kdesched.admission.health import HealthBrakeSettings, brake_state
    from kdesched.model.records import Node
    from kdesched.model.snapshot import Snapshot
    from kdesched.reactor.run.controls import BrakeStatus

    clock = Clock(1000.0)
    status = BrakeStatus(clock=clock)
    nodes = [Node.from_api(node_obj(f"n{i}", ready=i >= 3)) for i in range(10)]
    state = brake_state(HealthBrakeSettings(), RunContext(Ledger(), Snapshot.build(nodes, []), clock.t))
    status.remember(state, clock.t)
    assert status.status().startswith("health brake: 3 of 10 nodes (30%)") and "may have lifted" not in status.status()
    clock.t += 61
    assert "as of 61s ago; it may have lifted since" in status.status()
    healthy = [Node.from_api(node_obj(f"n{i}")) for i in range(10)]
    state = brake_state(HealthBrakeSettings(), RunContext(Ledger().with_unhealthy(900.0), Snapshot.build(healthy, []),
                                                          clock.t))
    assert not state.holds
    status.remember(state, clock.t)
    assert status.status() == ""


def test_a_run_that_judged_no_node_does_not_clear_the_brake_a_judged_run_reported() -> None:
    """A taint run with nothing to evict reads a few Nodes and judges nothing: once settleSeconds
    have passed since the last unhealthy record, its brake state is "clear" for want of knowing.
    It must not reset the gauge and /readyz while the outage a run that judged every Node saw may
    still be going on; the next run that judges every Node does."""
    from kdesched.admission.control import RunContext
    from kdesched.admission.health import HealthBrakeSettings, brake_state
    from kdesched.model.records import Node
    from kdesched.model.snapshot import Snapshot
    from kdesched.reactor.run.controls import HEALTH_BRAKE, BrakeStatus

    clock = Clock(1000.0)
    status = BrakeStatus(clock=clock)
    down = [Node.from_api(node_obj(f"n{i}", ready=i >= 4)) for i in range(10)]
    status.remember(brake_state(HealthBrakeSettings(), RunContext(Ledger(), Snapshot.build(down, []), clock.t)), clock.t)
    clock.t += 400  # past settleSeconds (300) since the unhealthy record
    few = [Node.from_api(node_obj("n9"))]
    unjudged = brake_state(HealthBrakeSettings(), RunContext(Ledger().with_unhealthy(1000.0), Snapshot.build(few, []),
                                                             clock.t, all_nodes=False))
    assert not unjudged.holds and unjudged.verdict is None
    status.remember(unjudged, clock.t)
    assert status.status().startswith("health brake: 4 of 10 nodes (40%)") and "may have lifted since" in status.status()
    assert HEALTH_BRAKE.labels("share")._value.get() == 1
    healthy = [Node.from_api(node_obj(f"n{i}")) for i in range(10)]
    status.remember(brake_state(HealthBrakeSettings(), RunContext(Ledger().with_unhealthy(1000.0),
                                                                  Snapshot.build(healthy, []), clock.t)), clock.t)
    assert status.status() == "" and HEALTH_BRAKE.labels("share")._value.get() == 0

@pytest.mark.parametrize("safety_on", [True, False])
def test_a_budget_counts_a_pod_until_its_replacement_is_ready(fake_api: FakeApiServer, kube: KubeClient,
                                                             safety_on: bool) -> None:
    """0.1 counted ledger entries, which expired at replacementTimeoutSeconds while the replacement
    was still Pending, and with ``safety.enabled: false`` the next settle ended the move at once
    (its admission carried expected = ready = 0). A pod now counts until its workload is whole."""
    fake_api.add(node_obj("p0", taints=[TAINT]), node_obj("p1", taints=[TAINT]), *[node_obj(f"s{i}") for i in range(3)])
    fake_api.add(web("a-7d9f8-0", "p0", app="a"), web("a-7d9f8-1", "s0", app="a"),
                 web("b-7d9f8-0", "p1", app="b"), web("b-7d9f8-1", "s0", app="b"))
    clock = Clock(THU_10)
    block: dict[str, Any] = {"disruptionBudgets": [{"name": "one", "maxUnavailable": 1}],
                             "safety": {"replacementTimeoutSeconds": 60, **({} if safety_on else {"enabled": False})}}
    r = reactor(kube, clock, **block)
    taint_event(r, "p0")
    assert evicted(fake_api) == ["a-7d9f8-0"]
    replacement = web("a-7d9f8-2", "s1", app="a")
    replacement["status"]["conditions"] = [{"type": "Ready", "status": "False"}]  # Pending, not Ready
    fake_api.add(replacement)
    for step in (5, 30, 65, 200):  # within, then well past, the replacement timeout
        clock.t = THU_10 + step
        out = taint_event(r, "p1", step)
        assert evicted(fake_api) == ["a-7d9f8-0"], f"at +{step}s: {out['evictions']}"
        assert any(b["reason"].startswith("budget:") for b in out["blocked"]), (step, out["blocked"])
    # the workload is whole again: the next run that reads every pod (the sweep, a balance run)
    # sees it and frees the budget; a node's run alone cannot tell (docs/safety.md)
    replacement["status"]["conditions"] = READY
    fake_api.update(replacement)
    clock.t = THU_10 + 210
    out = r.run_requested(Trigger(ev.PING, "sweep"), parse_sweep_data(None))
    assert evicted(fake_api) == ["a-7d9f8-0", "b-7d9f8-0"], [b["reason"] for b in out["blocked"]]

"""Real node lifecycles, write by write, through the real pipeline: the Node objects as the API server
stores them (fake API) -> the classifier -> the reactor's runs (reads state, plans, evicts through the
eviction endpoint). Each story asserts which runs happen, when, and what is evicted.

Stories: cloud bring-up (the uninitialized taint lifted 0.3 s or 20 s after Ready, and before Ready),
NotReady -> Ready recovery with the node controller's taints, cordon, uncordon, disk-pressure on/off,
and a burst of 20 nodes. Time between writes runs on a fake clock (the reactor's clocks are
injected), so "20 s later" costs nothing and no assertion depends on the machine's speed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.classifier import Classifier
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import DEFAULT_PLUGINS, LNU, make_policy

UNINITIALIZED = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
NOT_READY_NS = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
NOT_READY_NE = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
DISK_PRESSURE = {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}


class Clock:
    """Real time plus a manual offset: ``advance(20)`` makes 20 s pass for the reactor at once."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds

    def mono(self) -> float:
        with self._lock:
            return time.monotonic() + self.offset

    def wall(self) -> float:
        with self._lock:
            return time.time() + self.offset


@dataclass
class Delivery:
    type: str
    node: str
    report: dict[str, Any]

    @property
    def ran(self) -> bool:
        return bool(self.report.get("strategies"))

    @property
    def evicted(self) -> list[str]:
        return sorted(e["pod"] for e in self.report["evictions"] if e["result"] == "evicted")


@dataclass
class Story:
    """A cluster in the fake API, a seeded classifier and a reactor, driven write by write."""

    fake: FakeApiServer
    kube: KubeClient
    block: dict[str, Any] = field(default_factory=dict)
    plugins: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_PLUGINS))  # the policy's strategies
    clock: Clock = field(default_factory=Clock)
    log: list[Delivery] = field(default_factory=list)

    def __post_init__(self) -> None:
        block = {"balanceDelaySeconds": 0.02, "settleSeconds": 10, "leaseWaitSeconds": 1, **self.block}
        policy = make_policy(self.plugins, kdesched=block)
        settings = parse_settings(block, policy=policy, env={})
        self.reactor = Reactor(policy, settings, self.kube, identity="story", wall_clock=self.clock.wall,
                               mono_clock=self.clock.mono)
        self.classifier = Classifier()
        self.classifier.seed(self.fake.list("Node"))

    @property
    def balance_runs(self) -> int:
        return self.reactor.balance_events.runs

    def deliver(self, events: list[Any]) -> list[Delivery]:
        out = []
        for e in events:
            report = self.reactor.node_event(Trigger(e.type, e.id, "/story", e.node), parse_node_event(dict(e.data)))
            out.append(Delivery(e.type, e.node, report))
        self.log.extend(out)
        return out

    def add(self, obj: dict[str, Any], after: float = 0.0) -> list[Delivery]:
        self.clock.advance(after)
        self.fake.add(obj)
        stored = self.fake.get("Node", obj["metadata"]["name"])
        assert stored is not None
        return self.deliver(self.classifier.observe("add", stored))

    def write(self, name: str, *, after: float = 30.0, ready: bool | None = None, unschedulable: bool | None = None,
              taints: list[dict[str, str]] | None = None) -> list[Delivery]:
        """One write to Node ``name`` ``after`` (fake) seconds after the previous one, as the kubelet,
        the node controller or kubectl makes it; the stored object goes to the classifier as a watch
        would deliver it."""
        self.clock.advance(after)
        obj = self.fake.get("Node", name)
        assert obj is not None
        if ready is not None:
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        if unschedulable is not None:
            obj["spec"]["unschedulable"] = unschedulable
        if taints is not None:
            obj["spec"]["taints"] = taints
        self.fake.update(obj)
        stored = self.fake.get("Node", name)
        assert stored is not None
        return self.deliver(self.classifier.observe("update", stored))

    def pods_on(self, node: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.fake.list("Pod") if p["spec"].get("nodeName") == node)


def cluster(fake: FakeApiServer, *, extra: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
    """n1 overloaded (cpu 90%), n2 and n3 in between (35%): LowNodeUtilization has nothing to do
    until an empty node becomes usable."""
    fake.add(node_obj("n1"), node_obj("n2"), node_obj("n3"), *extra)
    fake.add(*[pod_obj(f"w{i}", "n1", cpu="900m", owner_name=f"app{i}") for i in range(4)])
    fake.add(pod_obj("mid2", "n2", cpu="1400m", owner_name="mid2"), pod_obj("mid3", "n3", cpu="1400m", owner_name="mid3"))


def test_the_cluster_is_balanced_until_a_node_becomes_usable(fake_api: FakeApiServer, kube: KubeClient) -> None:
    # the stories' baseline: a rebalance on this cluster evicts nothing (no underutilised node)
    cluster(fake_api)
    story = Story(fake_api, kube)
    out = story.reactor.node_event(Trigger(ev.NODE_READY, "baseline"), parse_node_event({"node": "n3"}))
    assert out["strategies"] and out["evictions"] == []


# --- cloud bring-up --------------------------------------------------------------------------------


@pytest.mark.parametrize("lift_after", [0.3, 20.0])
def test_cloud_bring_up_runs_once_when_the_uninitialized_taint_is_lifted(fake_api: FakeApiServer, kube: KubeClient,
                                                                        lift_after: float) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube)
    # the kubelet registers the node: NotReady, with the cloud provider's and the node controller's taints
    (added,) = story.add(node_obj("n4", ready=False, taints=[UNINITIALIZED, NOT_READY_NS, NOT_READY_NE]))
    assert added.type == ev.NODE_ADDED and not added.ran and added.evicted == []
    note = added.report["notes"][0]
    assert "not usable for ordinary pods yet" in note and "NotReady" in note and "uninitialized" in note
    # Ready, still tainted: no rebalance (it would find no room on n4)
    assert story.write("n4", after=5, ready=True) == []
    # the node controller lifts not-ready: a taint change (node-scoped, nothing to evict), still not usable
    lifted = story.write("n4", after=0.1, taints=[UNINITIALIZED])
    assert [d.type for d in lifted] == [ev.TAINTS_CHANGED] and lifted[0].evicted == []
    assert story.balance_runs == 0
    # the cloud controller initialises the node: now it is usable -> exactly one rebalance
    usable = story.write("n4", after=lift_after, taints=[])
    assert [d.type for d in usable] == [ev.NODE_READY, ev.TAINTS_CHANGED]
    ready = usable[0]
    assert ready.ran and ready.report["strategies"] == ["LowNodeUtilization", "RemoveDuplicates"]
    assert ready.evicted and set(ready.evicted) <= {"w0", "w1", "w2", "w3"}  # off the overloaded node only
    assert story.balance_runs == 1
    assert usable[1].evicted == []
    # nothing more happens on heartbeats or a redelivery of the last write
    stored = fake_api.get("Node", "n4")
    assert stored is not None and story.classifier.observe("update", stored) == []
    assert story.balance_runs == 1


def test_cloud_bring_up_initialised_before_ready_runs_at_ready(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube)
    story.add(node_obj("n4", ready=False, taints=[UNINITIALIZED, NOT_READY_NS]))
    assert [d.type for d in story.write("n4", after=1, taints=[NOT_READY_NS])] == [ev.TAINTS_CHANGED]
    assert story.write("n4", after=1, ready=True) == []  # Ready, but the not-ready taint is still there
    last = story.write("n4", after=0.2, taints=[])  # whichever change comes last
    assert [d.type for d in last] == [ev.NODE_READY, ev.TAINTS_CHANGED] and last[0].evicted
    assert story.balance_runs == 1


def test_a_node_added_usable_runs_on_the_added_event_and_never_again(fake_api: FakeApiServer,
                                                                     kube: KubeClient) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube)
    (added,) = story.add(node_obj("n4"))
    assert added.ran and added.evicted and story.balance_runs == 1
    story.write("n4", after=30, taints=[])  # an unrelated write
    assert story.balance_runs == 1


def test_a_late_node_added_still_decides_on_its_own_data(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The node.added of a tainted node is delivered after the node became usable: it must not run
    (node.ready is the one trigger), so the node is rebalanced exactly once."""
    cluster(fake_api)
    story = Story(fake_api, kube)
    fake_api.add(node_obj("n4", ready=False, taints=[UNINITIALIZED]))
    stored = fake_api.get("Node", "n4")
    assert stored is not None
    added_events = story.classifier.observe("add", stored)
    ready_events = story.write("n4", ready=True, taints=[])  # delivered first
    assert [d.type for d in ready_events] == [ev.NODE_READY, ev.TAINTS_CHANGED] and ready_events[0].ran
    (late,) = story.deliver(added_events)
    assert not late.ran and story.balance_runs == 1


# --- recovery, cordon, pressure --------------------------------------------------------------------


def test_not_ready_then_ready_recovery_with_the_node_controllers_taints(fake_api: FakeApiServer,
                                                                       kube: KubeClient) -> None:
    cluster(fake_api, extra=[node_obj("n4")])
    story = Story(fake_api, kube)
    # n4 (empty) goes NotReady: the node controller taints it; not a drain, and no rebalance
    assert story.write("n4", ready=False) == []
    tainted = story.write("n4", after=0.5, taints=[NOT_READY_NS, NOT_READY_NE])
    assert [d.type for d in tainted] == [ev.TAINTS_CHANGED] and tainted[0].evicted == []
    # back: Ready first (taints still on), then the controller lifts them -> one rebalance
    assert story.write("n4", after=120, ready=True) == []
    assert story.balance_runs == 0
    back = story.write("n4", after=0.4, taints=[])
    assert [d.type for d in back] == [ev.NODE_READY, ev.TAINTS_CHANGED]
    assert back[0].evicted and set(back[0].evicted) <= {"w0", "w1", "w2", "w3"}
    assert story.balance_runs == 1


def test_not_ready_taints_on_a_node_with_pods_evict_nothing(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube)
    story.write("n2", ready=False)
    (changed,) = story.write("n2", after=0.5, taints=[NOT_READY_NS, NOT_READY_NE])
    assert changed.type == ev.TAINTS_CHANGED and changed.ran and changed.evicted == []
    assert any("control-plane taints" in n for n in changed.report["notes"])
    assert story.pods_on("n2") == ["mid2"]


# the policy's own RemovePodsViolatingNodeTaints, and none: the event map then runs it on default args,
# which must get the event path's control-plane taint rule too (they once did not: a cordon drained)
ONLY_BALANCE = {"LowNodeUtilization": LNU, "RemoveDuplicates": None}


@pytest.mark.parametrize("plugins", [DEFAULT_PLUGINS, ONLY_BALANCE], ids=["configured", "default-args"])
def test_cordon_is_not_a_drain_and_uncordon_rebalances_once(fake_api: FakeApiServer, kube: KubeClient,
                                                            plugins: dict[str, Any]) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube, plugins=dict(plugins))
    # kubectl cordon, then the node controller's taint
    assert story.write("n3", unschedulable=True) == []
    (cordon,) = story.write("n3", after=0.1, taints=[UNSCHEDULABLE])
    assert cordon.type == ev.TAINTS_CHANGED and cordon.ran and cordon.report["strategies"] == [
        "RemovePodsViolatingNodeTaints"]
    assert cordon.evicted == [] and story.pods_on("n3") == ["mid3"]
    assert any("control-plane taints" in n for n in cordon.report["notes"])  # says why nothing moved
    # kubectl uncordon, then the taint goes: usable again on the last of the two writes
    assert story.write("n3", after=600, unschedulable=False) == []
    uncordon = story.write("n3", after=0.1, taints=[])
    assert [d.type for d in uncordon] == [ev.NODE_READY, ev.TAINTS_CHANGED]
    assert uncordon[0].ran and story.balance_runs == 1
    assert uncordon[0].evicted == []  # n3 at 35% is no destination for LowNodeUtilization: nothing moves
    assert sum(len(d.evicted) for d in story.log) == 0


@pytest.mark.parametrize("plugins", [DEFAULT_PLUGINS, ONLY_BALANCE], ids=["configured", "default-args"])
def test_cordon_drains_when_the_policy_opts_in(fake_api: FakeApiServer, kube: KubeClient,
                                               plugins: dict[str, Any]) -> None:
    """``kdesched.safety.controlPlaneTaints: true``: upstream semantics, the cordon taint evicts."""
    cluster(fake_api)
    story = Story(fake_api, kube, block={"safety": {"controlPlaneTaints": True}}, plugins=dict(plugins))
    story.write("n3", unschedulable=True)
    (cordon,) = story.write("n3", after=0.1, taints=[UNSCHEDULABLE])
    assert cordon.evicted == ["mid3"]


def test_cordon_drains_when_safety_is_off(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube, block={"safety": {"enabled": False}})
    (cordon,) = story.write("n3", unschedulable=True, taints=[UNSCHEDULABLE])
    assert cordon.evicted == ["mid3"]


def test_disk_pressure_on_and_off(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api, extra=[node_obj("n4")])
    story = Story(fake_api, kube)
    fake_api.add(pod_obj("small", "n4", cpu="100m", owner_name="small"))
    (on,) = story.write("n4", taints=[DISK_PRESSURE])
    assert on.type == ev.TAINTS_CHANGED and on.ran and on.evicted == [] and story.pods_on("n4") == ["small"]
    assert story.balance_runs == 0
    off = story.write("n4", after=90, taints=[])
    assert [d.type for d in off] == [ev.NODE_READY, ev.TAINTS_CHANGED]
    assert off[0].evicted and set(off[0].evicted) <= {"w0", "w1", "w2", "w3"}  # n4 is a destination again
    assert story.balance_runs == 1


def test_excluding_the_cordon_taint_by_hand_keeps_the_rest_of_the_rule(fake_api: FakeApiServer,
                                                                       kube: KubeClient) -> None:
    """Upstream's #1114 workaround, excludedTaints: [node.kubernetes.io/unschedulable], names one
    control-plane taint: the others stay excluded (the whole rule was once off for such a config,
    and a disk-pressure taint drained the node)."""
    cluster(fake_api)
    plugins = {**DEFAULT_PLUGINS, "RemovePodsViolatingNodeTaints": {"excludedTaints": [UNSCHEDULABLE["key"]]}}
    story = Story(fake_api, kube, plugins=plugins)
    (pressure,) = story.write("n3", taints=[DISK_PRESSURE])
    assert pressure.ran and pressure.evicted == [] and story.pods_on("n3") == ["mid3"]
    assert any("node.kubernetes.io/disk-pressure" in n for n in pressure.report["notes"])


def test_a_user_taint_still_evicts_what_does_not_tolerate_it(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube)
    (changed,) = story.write("n3", taints=[UNSCHEDULABLE, {"key": "maintenance", "effect": "NoSchedule"}])
    assert changed.evicted == ["mid3"]


# --- a burst -----------------------------------------------------------------------------------------


def quiesce(story: Story, delivered: Any) -> None:
    """Wait (real time, bounded) until ``delivered()`` and no balance batch that is due at the fake
    time now is waiting or running: everything the clock allows has happened."""
    core = story.reactor.balance_events.core
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with story.reactor.balance_events._lock:
            due = core.open is not None and core.start_time(core.open) <= story.clock.mono()
            busy = core.running is not None
        if delivered() and not due and not busy:
            return
        time.sleep(0.005)
    raise AssertionError("the reactor did not settle")


def test_a_burst_of_20_nodes_over_10s_gives_at_most_two_balance_runs(fake_api: FakeApiServer,
                                                                       kube: KubeClient) -> None:
    cluster(fake_api)
    story = Story(fake_api, kube, block={"cooldown": {"nodeSeconds": 0, "workloadSeconds": 0}})
    offered = [0]
    core = story.reactor.balance_events.core
    real_offer = core.offer

    def counting_offer(request: Any, now: float) -> Any:
        out = real_offer(request, now)
        offered[0] += 1
        return out

    core.offer = counting_offer  # type: ignore[method-assign]
    results: list[Delivery] = []
    errors: list[BaseException] = []

    def deliver(events: list[Any]) -> None:
        try:
            results.extend(story.deliver(events))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = []
    for i in range(20):
        # 20 nodes, one every 10/19 s (fake), each Ready and untainted when it registers
        if i:
            story.clock.advance(10 / 19)
        fake_api.add(node_obj(f"new{i}"))
        stored = fake_api.get("Node", f"new{i}")
        assert stored is not None
        t = threading.Thread(target=deliver, args=(story.classifier.observe("add", stored),))
        t.start()
        threads.append(t)
        quiesce(story, lambda i=i: offered[0] > i)  # delivered, and whatever was due by now has run
    story.clock.advance(11)
    for t in threads:
        t.join(timeout=30)
    assert not errors and len(results) == 20
    assert 1 <= story.balance_runs <= 2
    assert all(d.type == ev.NODE_ADDED and d.ran for d in results)
    # every delivery was served by one of those runs: the coalesced counts add up to one per run
    assert round(sum(1 / d.report["coalesced"] for d in results)) == story.balance_runs
    evictions = [r.path.split("/")[-2] for r in fake_api.requests("POST") if r.path.endswith("/eviction")]
    assert evictions and len(evictions) == len(set(evictions))  # no pod evicted twice
    assert set(evictions) <= {"w0", "w1", "w2", "w3"}
    reported = {e["pod"] for d in results for e in d.report["evictions"] if e["result"] == "evicted"}
    assert reported == set(evictions)


# --- the same rule in the functions and in simulate --event ---------------------------------------


def test_rebalance_function_answers_a_not_usable_node_added_without_a_run(fake_api: FakeApiServer,
                                                                         kube: KubeClient) -> None:
    from kdesched_functions import FUNCTIONS

    from tests.functions.helpers import ce_request, post, reply_event

    cluster(fake_api)
    story = Story(fake_api, kube)
    fake_api.add(node_obj("n4", ready=True, taints=[UNINITIALIZED]))
    stored = fake_api.get("Node", "n4")
    assert stored is not None
    (added,) = story.classifier.observe("add", stored)
    c = FUNCTIONS["rebalance"].create_app(reactor=story.reactor).test_client()
    resp = post(c, *ce_request(ev.NODE_ADDED, dict(added.data)))
    data = reply_event(resp).get_data()
    assert resp.status_code == 200 and data["strategies"] == [] and data["evictions"] == []
    assert "uninitialized" in data["notes"][0] and "waiting for node.ready" in data["notes"][0]
    # a node.added without the classifier's fields (an older sender): decided on the node as it is now;
    # a node.ready posted by hand the same (it once ran a cluster rebalance for a node not usable)
    for etype in (ev.NODE_ADDED, ev.NODE_READY):
        resp = post(c, *ce_request(etype, {"node": "n4"}))
        assert "not usable for ordinary pods yet" in reply_event(resp).get_data()["notes"][0]
    assert story.balance_runs == 0 and not [r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]


def test_simulate_event_on_a_node_not_usable_runs_nothing_and_says_why(tmp_path: Any,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kdesched.cli.main import main

    nodes = [node_obj("n1"), node_obj("n2", cpu="4"), node_obj("n3", taints=[UNINITIALIZED])]
    pods = [pod_obj(f"w{i}", "n1", cpu="900m", owner_name=f"app{i}") for i in range(4)]
    pods.append(pod_obj("mid2", "n2", cpu="1400m", owner_name="mid2"))
    snap = tmp_path / "cluster.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, *pods]}))
    for etype in (ev.NODE_ADDED, ev.NODE_READY):
        assert main(["simulate", str(snap), "--event", f"{etype}:n3", "-o", "json"]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["evictions"] == []
        # says why (the log line of simulate --event)
        assert "runs nothing" in captured.err and "not usable for ordinary pods yet" in captured.err
        assert "uninitialized" in captured.err
    # once the taint is gone, the same event rebalances onto n3
    nodes[2] = node_obj("n3")
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*nodes, *pods]}))
    assert main(["simulate", str(snap), "--event", f"{ev.NODE_READY}:n3", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["evictions"] and {e["pod"] for e in report["evictions"]} <= {"w0", "w1", "w2", "w3"}


def test_simulate_event_taints_changed_ignores_a_cordon_unless_opted_in(tmp_path: Any,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kdesched.cli.main import main

    items = [node_obj("n1"), node_obj("n2"), node_obj("n3", unschedulable=True, taints=[UNSCHEDULABLE]),
             pod_obj("mid3", "n3", owner_name="mid3")]
    snap = tmp_path / "cluster.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    base = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n  plugins:\n" \
           "    deschedule:\n      enabled: [RemovePodsViolatingNodeTaints]\n"
    plain = tmp_path / "plain.yaml"
    plain.write_text(base)
    opted = tmp_path / "opted.yaml"
    opted.write_text(base + "kdesched:\n  safety:\n    controlPlaneTaints: true\n")
    # no RemovePodsViolatingNodeTaints at all: the event map runs it on default args, under the same rule
    balance = tmp_path / "balance.yaml"
    balance.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n  plugins:\n"
                       "    balance:\n      enabled: [RemoveDuplicates]\n")
    results = {}
    for name, policy in (("plain", plain), ("opted", opted), ("balance", balance)):
        for args in (["--event", f"{ev.TAINTS_CHANGED}:n3"], []):
            assert main(["simulate", str(snap), "--policy", str(policy), "-o", "json", *args]) == 0
            results[(name, bool(args))] = [e["pod"] for e in json.loads(capsys.readouterr().out)["evictions"]]
    # the event path: safe by default; a plain upstream policy in simulate keeps upstream semantics
    assert results == {("plain", True): [], ("plain", False): ["mid3"],
                       ("opted", True): ["mid3"], ("opted", False): ["mid3"],
                       ("balance", True): [], ("balance", False): []}


def test_an_event_strategy_on_default_args_never_borrows_another_profiles_opt_outs(
        tmp_path: Any, capsys: pytest.CaptureFixture[str], fake_api: FakeApiServer, kube: KubeClient) -> None:
    """A cleanup profile listed first opts out of the system-critical and local-storage protections
    for its own RemoveFailedPods. A taint event runs RemovePodsViolatingNodeTaints, which no profile
    configures, on default args: it must not evict the system-critical pod or the emptyDir pod (it
    did, in serve, the functions and simulate --event, while the same policy with its profiles in
    the other order did not)."""
    import json

    from kdesched.cli.main import main

    gpu = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    items = [node_obj("n1", taints=[gpu]), node_obj("n2"), node_obj("n3"),
             pod_obj("critical-0", "n1", owner_name="critical-rs", priority=2000001000),
             pod_obj("cache-0", "n1", owner_name="cache-rs", volumes=[{"name": "scratch", "emptyDir": {}}]),
             pod_obj("web-0", "n1", owner_name="web-rs", labels={"app": "web"}),
             pod_obj("web-1", "n2", owner_name="web-rs", labels={"app": "web"})]
    snap = tmp_path / "cluster.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    policy = tmp_path / "policy.yaml"
    policy.write_text("""apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: cleanup
  pluginConfig:
  - name: DefaultEvictor
    args: {evictSystemCriticalPods: true, evictLocalStoragePods: true}
  - name: RemoveFailedPods
    args: {}
  plugins:
    deschedule:
      enabled: [RemoveFailedPods]
- name: balance
  pluginConfig:
  - name: LowNodeUtilization
    args:
      thresholds: {cpu: 20, memory: 20, pods: 20}
      targetThresholds: {cpu: 50, memory: 50, pods: 50}
  plugins:
    balance:
      enabled: [LowNodeUtilization]
""")
    assert main(["simulate", str(snap), "--policy", str(policy), "-o", "json", "--event", f"{ev.TAINTS_CHANGED}:n1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(e["pod"], e["profile"]) for e in report["evictions"]] == [("web-0", "kdesched-events")]
    # the same through the reactor (serve, the functions), evicting for real
    from kdesched.policy.load import load_policy

    loaded = load_policy(str(policy))
    fake_api.add(*items)
    settings = parse_settings({}, policy=loaded, env={})
    reactor = Reactor(loaded, settings, kube, identity="profiles")
    try:
        out = reactor.node_event(Trigger(ev.TAINTS_CHANGED, "t-1"), parse_node_event({"node": "n1"}))
        assert [e["pod"] for e in out["evictions"]] == ["web-0"]
        assert sorted(p["metadata"]["name"] for p in fake_api.list("Pod")
                      if p["spec"].get("nodeName") == "n1") == ["cache-0", "critical-0"]
    finally:
        reactor.stop.set()
        reactor.continuations.cancel_all()

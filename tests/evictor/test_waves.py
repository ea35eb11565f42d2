"""Carrying a paced plan out against the fake API server, with a controller stand-in.

The stand-in plays ReplicaSet controller and kubelet between polls: a pod that was evicted gets a
replacement (Pending, not Ready) at the next poll, which becomes Ready ``ready_after`` polls later
(never, for a slow starter). The workload's Ready count is sampled at every poll and right before
every eviction request, so "never two unavailable at once" is checked at each moment kdesched acts.
Time is a fake clock advanced by the injected sleep: no test waits for real.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from kdesched.engine import execute_plan, plan_run
from kdesched.evictor.execute import LiveExecutor, RecordingExecutor, RetrySettings
from kdesched.evictor.metrics import REGISTRY
from kdesched.evictor.waves import LiveWorkloads, WaveSettings, execute_waves
from kdesched.kube.client import KubeClient
from kdesched.policy.safety import Safety

from tests.builders import NOW, node_obj, pod_obj, snapshot
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import make_policy

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
READY = [{"type": "Ready", "status": "True"}]
POLICY = make_policy({"RemovePodsViolatingNodeTaints": None})
NO_RETRY = RetrySettings(max_attempts=1)


def member(app: str, name: str, node: str, *, ready: bool = True) -> dict[str, Any]:
    """A pod of Deployment ``app`` (ReplicaSet ``app-7d9f8``)."""
    raw = pod_obj(name, node, owner_name=f"{app}-7d9f8", labels={"app": app, "pod-template-hash": "7d9f8"},
                  conditions=READY if ready else [{"type": "Ready", "status": "False"}])
    if not ready:
        raw["status"]["phase"] = "Pending"
    return raw


@dataclass
class Cluster:
    """The fake API server plus a controller/kubelet stand-in driven by the injected sleep."""

    fake: FakeApiServer
    replicas: dict[str, int]  # app -> desired replicas
    ready_after: dict[str, int | None]  # app -> polls until a replacement is Ready (None: never)
    now: float = 0.0
    polls: int = 0
    pending: dict[str, int] = field(default_factory=dict)  # replacement name -> poll it was created
    samples: dict[str, list[int]] = field(default_factory=dict)  # app -> unavailable at each sample
    evicted_at: list[tuple[float, str]] = field(default_factory=list)
    made: int = 0

    def pods(self, app: str) -> list[dict[str, Any]]:
        return [p for p in self.fake.list("Pod") if (p["metadata"].get("labels") or {}).get("app") == app]

    def sample(self) -> None:
        for app, want in self.replicas.items():
            ready = sum(1 for p in self.pods(app) if p["status"].get("phase") == "Running"
                        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or ()))
            self.samples.setdefault(app, []).append(want - ready)

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.polls += 1
        for app, want in self.replicas.items():
            have = self.pods(app)
            for _ in range(want - len(have)):  # the ReplicaSet controller replaces what is gone
                self.made += 1
                name = f"{app}-7d9f8-r{self.made}"
                self.fake.add(member(app, name, "n2", ready=False))
                self.pending[name] = self.polls
        for name, since in list(self.pending.items()):  # the kubelet makes them Ready, some slowly
            app = name.rsplit("-", 2)[0]
            after = self.ready_after[app]
            if after is not None and self.polls - since >= after:
                raw = self.fake.get("Pod", name, "default")
                assert raw is not None
                raw["status"].update(phase="Running", conditions=READY)
                self.fake.update(raw)
                del self.pending[name]
        self.sample()

    def clock(self) -> float:
        return self.now

    def watch_evictions(self, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
        real = kube.evict_pod

        def evict(namespace: str, name: str, **kw: Any) -> None:
            real(namespace, name, **kw)
            self.evicted_at.append((self.now, name))
            self.sample()  # right after the API accepted it: the moment unavailability is highest

        monkeypatch.setattr(kube, "evict_pod", evict)


def setup(fake: FakeApiServer, apps: dict[str, int], ready_after: dict[str, int | None]) -> tuple[Cluster, Any]:
    objs = [node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3")]
    for app, n in apps.items():
        objs += [member(app, f"{app}-7d9f8-{i}", "n1") for i in range(n)]
    fake.add(*objs)
    plan = plan_run(POLICY, snapshot(objs), now=NOW, safety=Safety(True, "test", 1, 30.0))
    return Cluster(fake, dict(apps), ready_after), plan


def run(cluster: Cluster, plan: Any, kube: KubeClient, settings: WaveSettings, *, reader: bool = True) -> list[Any]:
    return execute_waves(plan.evictions, plan.pacing, LiveExecutor(kube, NO_RETRY, sleep=cluster.sleep),
                         dry_run=False, reader=LiveWorkloads(kube, clock=cluster.clock) if reader else None,
                         settings=settings,
                         sleep=cluster.sleep, clock=cluster.clock)


def paced_total() -> float:
    return sum(s.value for m in REGISTRY.collect() if m.name == "kdesched_evictions_paced"
               for s in m.samples if s.name.endswith("_total"))


def test_three_replicas_one_at_a_time_each_after_the_replacement_is_ready(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, plan = setup(fake_api, {"web": 3}, {"web": 3})
    cluster.watch_evictions(kube, monkeypatch)
    outcomes = run(cluster, plan, kube, WaveSettings(30.0, budget_seconds=None, poll_seconds=2.0))
    assert [o.result for o in outcomes] == ["evicted"] * 3
    assert [name for _, name in cluster.evicted_at] == ["web-7d9f8-0", "web-7d9f8-1", "web-7d9f8-2"]
    # one at a time, and never two unavailable at any sampled moment
    assert max(cluster.samples["web"]) == 1
    times = [t for t, _ in cluster.evicted_at]
    # the replacement takes 1 poll to appear and 3 more to be Ready: each next eviction waits for it
    assert times[1] - times[0] >= 3 * 2.0 and times[2] - times[1] >= 3 * 2.0
    assert len([r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]) == 3


def test_a_slow_starting_replacement_ends_in_paced_not_failed(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, plan = setup(fake_api, {"web": 3}, {"web": None})
    cluster.watch_evictions(kube, monkeypatch)
    before = paced_total()
    outcomes = run(cluster, plan, kube, WaveSettings(30.0, budget_seconds=None, poll_seconds=2.0))
    assert [o.result for o in outcomes] == ["evicted", "paced", "paced"]
    assert "replacementTimeoutSeconds (30s) passed" in outcomes[1].message
    assert "2/3 Ready" in outcomes[1].message and "next run re-decides" in outcomes[1].message
    assert cluster.now >= 30.0 and max(cluster.samples["web"]) == 1
    assert paced_total() - before == 2
    events = [r.body for r in fake_api.requests("POST") if r.path.endswith("/events")]
    assert sorted(e["regarding"]["name"] for e in events if e["reason"] == "EvictionPaced") == [
        "web-7d9f8-1", "web-7d9f8-2"]


def test_one_slow_workload_does_not_hold_another_back(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, plan = setup(fake_api, {"web": 2, "api": 2}, {"web": None, "api": 1})
    cluster.watch_evictions(kube, monkeypatch)
    outcomes = {o.eviction.pod.name: o.result for o in run(cluster, plan, kube, WaveSettings(20.0, None, 2.0))}
    assert outcomes == {"web-7d9f8-0": "evicted", "web-7d9f8-1": "paced",
                        "api-7d9f8-0": "evicted", "api-7d9f8-1": "evicted"}
    api_second = next(t for t, n in cluster.evicted_at if n == "api-7d9f8-1")
    assert api_second < 20.0  # long before web's timeout
    assert max(cluster.samples["web"]) == 1 and max(cluster.samples["api"]) == 1


def test_workloads_of_one_namespace_share_one_list_per_poll(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, plan = setup(fake_api, {"web": 2, "api": 2}, {"web": 1, "api": 1})
    fake_api.clear_journal()
    outcomes = execute_waves(plan.evictions, plan.pacing, LiveExecutor(kube, NO_RETRY, sleep=cluster.sleep),
                             dry_run=False, reader=LiveWorkloads(kube, clock=cluster.clock),
                             settings=WaveSettings(30.0, None, 2.0), sleep=cluster.sleep, clock=cluster.clock)
    assert [o.result for o in outcomes] == ["evicted"] * 4
    lists = [r for r in fake_api.requests("GET") if r.path == "/api/v1/namespaces/default/pods"]
    assert 0 < len(lists) <= cluster.polls + 1  # one per poll round, not one per workload


def test_the_run_budget_bounds_all_waiting(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster, plan = setup(fake_api, {"web": 3}, {"web": None})
    outcomes = run(cluster, plan, kube, WaveSettings(600.0, budget_seconds=6.0, poll_seconds=2.0))
    assert [o.result for o in outcomes] == ["evicted", "paced", "paced"]
    assert "waiting budget (6s) is spent" in outcomes[1].message and cluster.now < 20


def test_the_event_path_never_waits(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster, plan = setup(fake_api, {"web": 3}, {"web": 1})
    outcomes = run(cluster, plan, kube, WaveSettings(30.0, budget_seconds=0), reader=False)
    assert [o.result for o in outcomes] == ["evicted", "paced", "paced"]
    assert cluster.polls == 0
    assert "held by the per-workload allowance (wave 1)" in outcomes[1].message
    assert "(wave 2)" in outcomes[2].message and "Deployment default/web may have 1 pod(s)" in outcomes[2].message


def test_a_dry_run_reports_every_wave_and_sends_nothing(fake_api: FakeApiServer, kube: KubeClient) -> None:
    cluster, plan = setup(fake_api, {"web": 3}, {"web": 1})
    fake_api.clear_journal()
    report = execute_plan(plan, RecordingExecutor(record_metrics=False), dry_run=True)
    assert [o.result for o in report.outcomes] == ["dry-run"] * 3
    assert fake_api.requests() == [] and cluster.polls == 0
    j = report.to_json()
    assert [(e["pod"], e["wave"], e.get("waitsFor")) for e in j["evictions"]] == [
        ("web-7d9f8-0", 0, None), ("web-7d9f8-1", 1, ["default/web-7d9f8-0"]), ("web-7d9f8-2", 2, ["default/web-7d9f8-1"])]
    assert [w["evictions"] for w in j["summary"]["pacing"]["waves"]] == [
        ["default/web-7d9f8-0"], ["default/web-7d9f8-1"], ["default/web-7d9f8-2"]]
    assert j["summary"]["safety"] == {"enabled": True, "why": "test"}
    assert j["summary"]["pacing"]["workloads"] == [{"workload": "Deployment default/web", "expected": 3, "ready": 3,
                                                    "unavailable": 0, "maxUnavailable": 1,
                                                    "from": "kdesched.safety.maxUnavailable"}]


def test_the_gauge_counts_workloads_below_their_ready_count_until_a_run_sees_them_back(
        fake_api: FakeApiServer, kube: KubeClient) -> None:
    def gauge() -> float | None:
        return REGISTRY.get_sample_value("kdesched_workloads_below_ready")

    cluster, plan = setup(fake_api, {"gauge": 2}, {"gauge": 1})
    base = gauge() or 0.0
    run(cluster, plan, kube, WaveSettings(30.0, budget_seconds=0), reader=False)
    assert gauge() == base + 1
    cluster.sleep(1)
    cluster.sleep(1)  # the replacement appears, then is Ready
    from kdesched.kube.snapshot import load_live_snapshot

    plan_run(POLICY, load_live_snapshot(kube), now=NOW, safety=Safety(True, "test", 1, 30.0))
    assert gauge() == base


def test_keep_going_stops_the_waiting_and_abandons_the_held_batches(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook names a reason after wave 0 (a Lease past its renew deadline): the held batches are
    ``abandoned`` at once, no replacement is waited for and no further eviction is sent, even if
    the hook would say go on again."""
    cluster, plan = setup(fake_api, {"web": 3}, {"web": None})  # a replacement that never gets Ready
    cluster.watch_evictions(kube, monkeypatch)
    answers = iter([None, "the Lease's renew deadline passed"])
    outcomes = execute_waves(plan.evictions, plan.pacing, LiveExecutor(kube, NO_RETRY, sleep=cluster.sleep),
                             dry_run=False, reader=LiveWorkloads(kube, clock=cluster.clock),
                             settings=WaveSettings(30.0, budget_seconds=None, poll_seconds=2.0),
                             sleep=cluster.sleep, clock=cluster.clock, keep_going=lambda: next(answers, None))
    assert [(o.result, o.cause) for o in outcomes] == [("evicted", "accepted"), ("abandoned", "stopped"),
                                                       ("abandoned", "stopped")]
    assert outcomes[1].message == "not started: the Lease's renew deadline passed"
    assert cluster.now == 0.0  # no poll was waited for
    assert len([r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]) == 1


def test_a_keep_going_hook_that_raises_between_waves_stops_them_and_keeps_the_outcomes(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook raises when asked between waves (review J, note on execute_waves): the run stops as
    it does when the executor's check fails (evicting on is the unsafe side), the held batches are
    ``abandoned`` with the failure, and wave 0's outcome is kept. It raised out of execute_waves
    before, losing the outcomes of the batches already evicted."""
    cluster, plan = setup(fake_api, {"web": 3}, {"web": None})
    cluster.watch_evictions(kube, monkeypatch)
    asked = iter([None])

    def keep_going() -> str | None:
        answer = next(asked, "raise")
        if answer == "raise":
            raise RuntimeError("lease store unreachable")
        return answer

    outcomes = execute_waves(plan.evictions, plan.pacing, LiveExecutor(kube, NO_RETRY, sleep=cluster.sleep),
                             dry_run=False, reader=LiveWorkloads(kube, clock=cluster.clock),
                             settings=WaveSettings(30.0, budget_seconds=None, poll_seconds=2.0),
                             sleep=cluster.sleep, clock=cluster.clock, keep_going=keep_going)
    assert [(o.result, o.cause) for o in outcomes] == [("evicted", "accepted"), ("abandoned", "stopped"),
                                                       ("abandoned", "stopped")]
    assert outcomes[1].message == ("not started: the keep-going check failed: RuntimeError: lease store "
                                   "unreachable")
    assert cluster.now == 0.0
    assert len([r for r in fake_api.requests("POST") if r.path.endswith("/eviction")]) == 1

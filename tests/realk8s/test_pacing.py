"""Pacing on a real control plane: the seed stories, retold with real workloads, settle with the
minimal evictions, and no workload is ever more than maxUnavailable (1) below its Ready count.

Each story builds its starting placement with the real scheduler (cordoning nodes while the
workloads start), then makes the story's change and runs ``kdesched run`` with the shipped default
policy (safety defaults on) until a run evicts nothing. The kubelet stand-in makes pods Ready only
after a delay and lets deleted pods linger, so replacements really take time. A watch on the pods
samples every change: at each event, every workload's desired replicas minus its Ready pods (not
terminating) must be <= 1.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import Gone

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc

PLAIN_POLICY = str(Path(__file__).resolve().parents[2] / "examples" / "policies" / "default-v1alpha1.yaml")

READY_DELAY = 1.5  # seconds from bound to Ready (every pod, replacements included)
TERMINATE_DELAY = 1.0  # a deleted pod lingers (terminating) this long
MAX_RUNS = 6


class Sampler(threading.Thread):
    """Watches the namespace's pods; after every change, records each workload's shortfall."""

    def __init__(self, client: KubeClient, namespace: str, desired: dict[str, int]) -> None:
        super().__init__(name="pacing-sampler", daemon=True)
        self.client, self.namespace, self.desired = client, namespace, desired
        self.pods: dict[str, dict[str, Any]] = {}
        self.worst: dict[str, int] = dict.fromkeys(desired, 0)
        self.samples = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.started_watching = threading.Event()

    def sample(self) -> None:
        for app, want in self.desired.items():
            ready = sum(1 for p in self.pods.values() if (p["metadata"].get("labels") or {}).get("app") == app
                        and not p["metadata"].get("deletionTimestamp") and is_ready(p))
            self.worst[app] = max(self.worst[app], want - ready)
        self.samples += 1

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                listed = self.client.list_raw("Pod", namespace=self.namespace)
                self.pods = {p["metadata"]["uid"]: p for p in listed.items}
                self.sample()
                rv = listed.resource_version
                try:
                    while not self.stop.is_set():
                        self.started_watching.set()
                        for etype, obj in self.client.watch_raw("Pod", resource_version=rv, timeout_seconds=1,
                                                                namespace=self.namespace):
                            rv = obj["metadata"].get("resourceVersion") or rv
                            if etype == "BOOKMARK":
                                continue
                            if etype == "DELETED":
                                self.pods.pop(obj["metadata"]["uid"], None)
                            else:
                                self.pods[obj["metadata"]["uid"]] = obj
                            self.sample()
                except Gone:
                    continue
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
            self.started_watching.set()


def patch_node(cluster: Cluster, name: str, patch: dict[str, Any]) -> None:
    cluster.api.patch(f"/api/v1/nodes/{name}", patch)


def cordoned(cluster: Cluster, names: list[str], build: Callable[[], None]) -> None:
    """Start workloads while ``names`` are cordoned, so the scheduler places them elsewhere."""
    for n in names:
        patch_node(cluster, n, {"spec": {"unschedulable": True}})
    build()
    for n in names:
        patch_node(cluster, n, {"spec": {"unschedulable": None}})


def settle(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], ns: str,
           desired: dict[str, int], policy: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """``kdesched run`` until a run evicts nothing; the evictions of every run, and the run count."""
    kc = str(cluster.kubeconfig(tmp_path / "kubeconfig"))
    evicted: list[dict[str, Any]] = []
    for n in range(1, MAX_RUNS + 1):
        code = main(["run", "--kubeconfig", kc, "-o", "json", "-q", *(["--policy", policy] if policy else [])])
        report = json.loads(capsys.readouterr().out)
        assert code == 0, report["summary"]
        assert report["summary"]["safety"]["enabled"] is (policy is None)
        done = [e for e in report["evictions"] if e["result"] == "evicted"]
        assert all(e["result"] in ("evicted", "already-gone") for e in report["evictions"]), report["evictions"]
        evicted += done
        for app, want in desired.items():  # the next run starts from a settled cluster
            cluster.wait_running(ns, want, f"app={app}", timeout=90)
        if not done:
            return evicted, n
    raise AssertionError(f"not settled after {MAX_RUNS} runs: {[e['pod'] for e in evicted]}")


def story(cluster: Cluster, control_plane: ControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str],
          ns: str, desired: dict[str, int], change: Callable[[], None],
          policy: str | None = None) -> tuple[list[dict[str, Any]], Sampler]:
    for app, want in desired.items():
        cluster.wait_running(ns, want, f"app={app}", timeout=90)
    client = KubeClient.from_config(str(cluster.kubeconfig(tmp_path / "sampler-kubeconfig")))
    sampler = Sampler(client, ns, desired)
    sampler.start()
    try:
        assert sampler.started_watching.wait(30)
        change()
        started = time.monotonic()
        evicted, runs = settle(cluster, tmp_path, capsys, ns, desired, policy)
        seconds = time.monotonic() - started
    finally:
        sampler.stop.set()
        sampler.join(15)
        client.close()
    assert not sampler.errors, sampler.errors
    mode = "upstream parity" if policy else "safety defaults"
    print(f"\n[pacing figures] {ns} ({mode}): {len(evicted)} eviction(s) in {runs} run(s), {seconds:.1f}s to settle, "
          f"{sampler.samples} watch samples, worst shortfall per workload {sampler.worst}")
    if policy is None:
        assert all(v <= 1 for v in sampler.worst.values()), sampler.worst  # maxUnavailable 1, at every moment
    assert sampler.samples > 2 * len(evicted)
    return evicted, sampler


@pytest.fixture
def slow_kubelet(kubelet: Kubelet) -> Kubelet:
    kubelet.ready_delay = READY_DELAY
    kubelet.terminate_delay = TERMINATE_DELAY
    return kubelet


@pytest.mark.parametrize("policy", [None, PLAIN_POLICY], ids=["safety-defaults", "upstream-parity"])
def test_seed_taint_moves_the_replicas_one_at_a_time(
        cluster: Cluster, control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc,
        slow_kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str | None) -> None:
    cluster.node("node-1")
    cluster.node("node-2")
    cluster.node("gpu-1", cpu="16", memory="64Gi", labels={"nvidia.com/gpu.present": "true"})
    cluster.namespace("taint")
    gpu = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]

    def build() -> None:  # every shop replica starts on gpu-1, the trainer tolerates the taint
        cluster.deployment("shop", 3, "taint", cpu="500m", memory="256Mi")
        cluster.statefulset("trainer", 1, "taint", cpu="4", memory="16Gi", tolerations=gpu,
                            nodeSelector={"nvidia.com/gpu.present": "true"})
        cluster.wait_running("taint", 4, timeout=90)

    cordoned(cluster, ["node-1", "node-2"], build)
    evicted, sampler = story(cluster, control_plane, tmp_path, capsys, "taint", {"shop": 3, "trainer": 1},
                             lambda: patch_node(cluster, "gpu-1", {"spec": {"taints": [
                                 {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}), policy)
    if policy is not None:  # the control: upstream takes all three down at once, and the sampler sees it
        assert sampler.worst["shop"] == 3
    assert sorted(e["strategy"] for e in evicted) == ["RemovePodsViolatingNodeTaints"] * 3
    assert all(e["node"] == "gpu-1" and e["pod"].startswith("shop-") for e in evicted)
    shop = cluster.pods("taint", "app=shop")
    assert len(shop) == 3 and all(p["spec"]["nodeName"] in ("node-1", "node-2") for p in shop)


def test_seed_new_node_moves_one_replica(
        cluster: Cluster, control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc,
        slow_kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.node("node-1")
    cluster.node("node-2")
    cluster.namespace("newnode")
    cluster.deployment("nginx", 3, "newnode", cpu="500m", memory="256Mi")
    evicted, _ = story(cluster, control_plane, tmp_path, capsys, "newnode", {"nginx": 3},
                       lambda: cluster.node("node-3"))
    assert [e["strategy"] for e in evicted] == ["RemoveDuplicates"]
    assert sorted(p["spec"]["nodeName"] for p in cluster.pods("newnode", "app=nginx")) == ["node-1", "node-2", "node-3"]


def test_seed_lost_label_moves_the_pod_that_no_longer_fits(
        cluster: Cluster, control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc,
        slow_kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for n in ("node-1", "node-2", "node-3"):
        cluster.node(n, labels={"disktype": "ssd"})
    cluster.namespace("label")
    ssd = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]}]}}}

    def build() -> None:
        cluster.deployment("cache", 2, "label", cpu="1", memory="2Gi", affinity=ssd)
        cluster.deployment("web", 1, "label", cpu="250m", memory="128Mi")
        cluster.wait_running("label", 3, timeout=90)

    cordoned(cluster, ["node-3"], build)
    on_node_2 = [p["metadata"]["name"] for p in cluster.pods("label", "app=cache") if p["spec"]["nodeName"] == "node-2"]
    evicted, _ = story(cluster, control_plane, tmp_path, capsys, "label", {"cache": 2, "web": 1},
                       lambda: patch_node(cluster, "node-2", {"metadata": {"labels": {"disktype": None}}}))
    assert [(e["pod"], e["strategy"]) for e in evicted] == [(p, "RemovePodsViolatingNodeAffinity") for p in on_node_2]
    assert all(p["spec"]["nodeName"] != "node-2" for p in cluster.pods("label", "app=cache"))


def test_seed_zone_recovery_moves_one_replica_under_its_pdb(
        cluster: Cluster, control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc,
        slow_kubelet: Kubelet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for n in ("node-a", "node-b", "node-c"):
        cluster.node(n)
    cluster.namespace("zone")

    def build() -> None:
        cluster.deployment("api", 3, "zone", cpu="250m", memory="512Mi")
        cluster.wait_running("zone", 3, timeout=90)

    cordoned(cluster, ["node-c"], build)
    cluster.pdb("api", {"app": "api"}, "zone", min_available=2)
    cluster.wait_pdb_observed("zone", "api")
    evicted, _ = story(cluster, control_plane, tmp_path, capsys, "zone", {"api": 3}, lambda: None)
    assert [e["strategy"] for e in evicted] == ["RemoveDuplicates"]
    assert sorted(p["spec"]["nodeName"] for p in cluster.pods("zone", "app=api")) == ["node-a", "node-b", "node-c"]

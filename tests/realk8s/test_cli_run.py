"""``kdesched run`` against a real, loaded control plane, through the CLI entry point.

What only the real server shows: LISTs really paginated with the server's continue tokens (the page
size made small), evictions through the real Eviction API with a real disruption controller keeping
PDB status, events.k8s.io Events accepted by the server's validation, the ReplicaSet controller
and the scheduler placing replacements, and the exit codes (0 ok, 1 cluster unreachable or
forbidden, 2 bad policy - then not one request that changes anything).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main
from kdesched.kube import snapshot as kube_snapshot
from kdesched.kube.client import KubeClient

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc, free_port

POLICY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: spread
  pluginConfig:
  - name: DefaultEvictor
    args: {}
  - name: RemoveDuplicates
    args: {}
  plugins:
    balance:
      enabled: [RemoveDuplicates]
"""
NAMESPACES = ("team-a", "team-b", "team-c")
WORKLOADS = {"web": 6, "api": 5, "worker": 4}  # replicas per namespace: 45 pods in all
PAGE = 7


@pytest.fixture
def loaded(cluster: Cluster, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet) -> dict[str, str]:
    """45 ReplicaSet pods all on node-0 (the only node when they were scheduled), then two empty
    nodes join; team-a/web has a PDB allowing one disruption. Returns pod uid -> namespace/name."""
    cluster.node("node-0", cpu="16", memory="32Gi")
    for ns in NAMESPACES:
        cluster.namespace(ns)
        for name, replicas in WORKLOADS.items():
            cluster.replicaset(name, replicas, ns, cpu="50m", memory="32Mi")
    for ns in NAMESPACES:
        cluster.wait_running(ns, sum(WORKLOADS.values()))
    cluster.pdb("web", {"app": "web"}, "team-a", min_available=WORKLOADS["web"] - 1)
    cluster.cp.wait_for(lambda: (cluster.wait_pdb_observed("team-a", "web")["status"].get("disruptionsAllowed") == 1),
                        30, what="PDB team-a/web to allow 1 disruption")
    cluster.node("node-1", cpu="16", memory="32Gi")
    cluster.node("node-2", cpu="16", memory="32Gi")
    return {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for ns in NAMESPACES for p in cluster.pods(ns)}


def test_run_on_a_loaded_cluster(loaded: dict[str, str], control_plane: ControlPlane, cluster: Cluster,
                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    lists: list[tuple[str, dict[str, str], int, str]] = []
    real_page = KubeClient._list_page

    def spy(self: KubeClient, path: str, query: list[tuple[str, str]], kind: str, api_version: str,
            fast: bool) -> tuple[list[Any], dict[str, Any]]:
        items, meta = real_page(self, path, query, kind, api_version, fast)
        lists.append((path, dict(query), len(items), str(meta.get("continue") or "")))
        return items, meta

    monkeypatch.setattr(kube_snapshot, "DEFAULT_PAGE_SIZE", PAGE)
    monkeypatch.setattr(KubeClient, "_list_page", spy)
    code = main(["run", "--kubeconfig", str(control_plane.admin_kubeconfig), "--policy", str(policy),
                 "-o", "json", "-q", "--consistent-read"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["summary"]["errors"]

    # --consistent-read: paginated: the pod LIST came in pages of PAGE, each continued with the server's token
    pod_pages = [entry for entry in lists if entry[0] == "/api/v1/pods"]
    assert len(pod_pages) == -(-len(loaded) // PAGE)
    assert all(n == PAGE for _, _, n, _ in pod_pages[:-1]) and sum(n for _, _, n, _ in pod_pages) == len(loaded)
    assert [q.get("continue", "") for _, q, _, _ in pod_pages[1:]] == [c for _, _, _, c in pod_pages[:-1]]
    assert report["summary"]["podsPerNode"]["node-0"]["before"] == len(loaded)

    evicted = [e for e in report["evictions"] if e["result"] == "evicted"]
    assert evicted and all(e["result"] == "evicted" for e in report["evictions"])
    assert all(e["node"] == "node-0" and e["strategy"] == "RemoveDuplicates" for e in evicted)
    # the PDB: the planner spent team-a/web's one disruption and refused the rest, the API agreed
    web_a = [e for e in evicted if e["namespace"] == "team-a" and e["pod"].startswith("web-")]
    assert len(web_a) == 1
    assert any("PodDisruptionBudget team-a/web" in b["reason"] for b in report["blocked"])

    # exactly the reported pods were deleted (the kubelet stand-in finished their deletions)
    gone = {f"{e['namespace']}/{e['pod']}" for e in evicted}
    cluster.cp.wait_for(lambda: not gone & _live(cluster), 30, what="evicted pods to be deleted")
    still = {uid: key for uid, key in loaded.items() if key not in gone}
    live_uids = {p["metadata"]["uid"] for ns in NAMESPACES for p in cluster.pods(ns)}
    assert set(still) <= live_uids

    # one events.k8s.io Event per eviction, about that pod, from kdesched
    for e in evicted:
        events = [ev for ev in cluster.events(e["namespace"]) if ev["regarding"].get("name") == e["pod"]
                  and ev.get("reportingController") == "kdesched.dev/descheduler"]
        assert [(ev["reason"], ev["action"], ev["regarding"]["kind"]) for ev in events] == [
            ("RemoveDuplicates", "Descheduled", "Pod")], e

    # the ReplicaSet controller recreated every evicted pod and the scheduler put them on the new nodes
    for ns in NAMESPACES:
        pods = cluster.wait_running(ns, sum(WORKLOADS.values()))
        placed = Counter(p["spec"]["nodeName"] for p in pods if p["metadata"]["uid"] not in loaded)
        assert sum(placed.values()) == sum(1 for e in evicted if e["namespace"] == ns)
    new_nodes = Counter(p["spec"]["nodeName"] for ns in NAMESPACES for p in cluster.pods(ns))
    assert new_nodes["node-1"] + new_nodes["node-2"] > 0


def _live(cluster: Cluster) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for ns in NAMESPACES for p in cluster.pods(ns)}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdesched", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_dry_run_changes_nothing(loaded: dict[str, str], control_plane: ControlPlane, cluster: Cluster,
                                 tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    done = _cli("run", "--dry-run", "--kubeconfig", str(control_plane.admin_kubeconfig), "--policy", str(policy),
                "-o", "json", "-q")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["evictions"] and {e["result"] for e in report["evictions"]} == {"dry-run"}
    assert {p["metadata"]["uid"] for ns in NAMESPACES for p in cluster.pods(ns)} == set(loaded)
    assert not [ev for ns in NAMESPACES for ev in cluster.events(ns)
                if ev.get("reportingController") == "kdesched.dev/descheduler"]


def test_exit_1_when_the_api_server_is_unreachable(control_plane: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = control_plane.kubeconfig(tmp_path / "kc")
    dead = f"https://127.0.0.1:{free_port()}"
    kubeconfig.write_text(kubeconfig.read_text().replace(control_plane.url, dead))
    done = _cli("run", "--kubeconfig", str(kubeconfig), "-q")
    assert done.returncode == 1
    assert dead in done.stderr and "Traceback" not in done.stderr


def test_exit_1_when_rbac_forbids_reading(control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    cluster.node("node-0")
    kubeconfig = control_plane.kubeconfig(tmp_path / "kc", as_user="system:serviceaccount:default:nobody")
    done = _cli("run", "--kubeconfig", str(kubeconfig), "-q")
    assert done.returncode == 1
    assert "forbidden" in done.stderr.lower() and "system:serviceaccount:default:nobody" in done.stderr
    assert "Traceback" not in done.stderr


def test_exit_2_on_a_bad_policy_and_nothing_touched(control_plane: ControlPlane, cluster: Cluster,
                                                    tmp_path: Path) -> None:
    cluster.node("node-0")
    cluster.pod("p", node="node-0")
    policy = tmp_path / "bad.yaml"
    policy.write_text(POLICY.replace("    args: {}\n  plugins", "    args: {nope: 1}\n  plugins"))
    before = cluster.get("/api/v1/namespaces/default/pods/p")
    done = _cli("run", "--kubeconfig", str(control_plane.admin_kubeconfig), "--policy", str(policy), "-q")
    assert done.returncode == 2
    assert str(policy) in done.stderr and "nope" in done.stderr and "Traceback" not in done.stderr
    after = cluster.get("/api/v1/namespaces/default/pods/p")
    assert before is not None and after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

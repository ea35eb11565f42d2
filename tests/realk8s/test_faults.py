"""``kdesched run`` at 30% API faults on a real control plane, through its real CLI entry.

Why: issue 25 found that one 429, 500 or 503 on a LIST ended a run without a report, that a
quarter of the Events were lost unsaid, that a 429 nobody's PDB sent was reported as a PDB
refusal, and that evictions whose answer was lost were reported ``already-gone``. Here a proxy of
our own (tests/faultproxy.py) stands between ``kdesched run`` and kube-apiserver and answers a
seeded 30% of all requests with 429 (Retry-After 1), 500, 503, a dropped connection, a 2 s delay,
or carries the request out and drops the answer. The checks, per pass:

- the run completes with a report (exit 0, or 1 only for evictions that failed with a cause);
- the plan (every planned eviction, in order) equals the fault-free plan;
- evicted == gone: every pod reported ``evicted`` is gone or terminating, and every pod that went
  is reported ``evicted``;
- no pod appears twice, and none has two ``Descheduled`` Events;
- no PodDisruptionBudget loses more pods than it allowed before the run;
- every outcome has its cause, and a ``failed`` one only a cause the faults can produce;
- every evicted pod without its Event is counted in ``summary.eventsLost``.

Profiles: the short one (CI) runs the seeds below; ``KDESCHED_FAULT_PASSES=N`` runs N live passes
and N dry-run passes with other seeds (docs/testing.md has the command).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kdesched.model.selectors import LabelSelector

from tests.faultproxy import FaultProxy
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc

SHARE = 0.3
PASSES = int(os.environ.get("KDESCHED_FAULT_PASSES") or 0)
LIVE_SEEDS = list(range(100, 100 + PASSES)) if PASSES else [11, 12]
DRY_SEEDS = list(range(1, 1 + PASSES)) if PASSES else [1, 2, 3]

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
NAMESPACES = ("fault-a", "fault-b")
WORKLOADS = {"web": 6, "api": 5, "worker": 4}  # per namespace: 30 pods in all
# (namespace, workload, minAvailable): web allows 1 disruption in each namespace, api 2 in fault-b
PDBS = (("fault-a", "web", 5), ("fault-b", "web", 5), ("fault-b", "api", 3))
CAUSES = {"evicted": {"accepted", "confirmed"}, "already-gone": {"not-found", "replaced"},
          "blocked": {"disruption-budget"}, "throttled": {"throttled"},
          "failed": {"server-error", "connection", "unconfirmed"}}


@pytest.fixture
def loaded(cluster: Cluster, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet) -> dict[str, str]:
    """30 ReplicaSet pods on node-0 (the only node when they were scheduled), three PDBs, then two
    empty nodes join. Returns pod uid -> namespace/name."""
    cluster.node("node-0", cpu="16", memory="32Gi")
    for ns in NAMESPACES:
        cluster.namespace(ns)
        for name, replicas in WORKLOADS.items():
            cluster.replicaset(name, replicas, ns, cpu="50m", memory="32Mi")
    for ns in NAMESPACES:
        cluster.wait_running(ns, sum(WORKLOADS.values()))
    for ns, name, min_available in PDBS:
        cluster.pdb(name, {"app": name}, ns, min_available=min_available)
    for ns, name, min_available in PDBS:
        allowed = WORKLOADS[name] - min_available
        cluster.cp.wait_for(lambda ns=ns, name=name, allowed=allowed: (  # type: ignore[misc]
            cluster.wait_pdb_observed(ns, name)["status"].get("disruptionsAllowed") == allowed),
            30, what=f"PDB {ns}/{name} to allow {allowed}")
    cluster.node("node-1", cpu="16", memory="32Gi")
    cluster.node("node-2", cpu="16", memory="32Gi")
    return {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for ns in NAMESPACES for p in cluster.pods(ns)}


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy(control_plane.url, control_plane.token, control_plane.ca_file, share=0.0) as p:
        yield p


def _run(proxy: FaultProxy, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    kubeconfig = proxy.kubeconfig(tmp_path / "faulty-kubeconfig")
    done = subprocess.run([sys.executable, "-m", "kdesched", "run", "--kubeconfig", str(kubeconfig),
                           "--policy", str(policy), "-o", "json", *extra],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.stdout.strip(), f"no report (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return done.returncode, json.loads(done.stdout), done.stderr


def _plan(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(e["namespace"], e["pod"], e["node"], e["strategy"]) for e in report["evictions"]]


def test_reads_under_faults_give_the_fault_free_plan(loaded: dict[str, str], proxy: FaultProxy,
                                                     tmp_path: Path) -> None:
    """Dry runs at 30% faults on every request (the six LISTs): each completes, exit 0, with the
    plan of the fault-free dry run (issue 25: 6 of 9 runs ended at a single fault)."""
    code, clean, err = _run(proxy, tmp_path, "--dry-run")
    assert code == 0, err[-2000:]
    assert clean["evictions"], "the cluster gives RemoveDuplicates something to do"
    for seed in DRY_SEEDS:
        faulty = FaultProxy(proxy.upstream, proxy.token, proxy.pool.connection_pool_kw["ca_certs"],
                            share=SHARE, seed=seed).start()
        try:
            code, report, err = _run(faulty, tmp_path, "--dry-run")
            counts = faulty.counts()
        finally:
            faulty.stop()
        assert code == 0, f"seed {seed}: {report['summary']['errors']} {err[-2000:]}"
        assert _plan(report) == _plan(clean), f"seed {seed}"
        assert report["summary"]["errors"] == []
        print(f"dry-run seed {seed}: {faulty.requests} requests, faults {dict(counts)}")


def _live_pass(proxy: FaultProxy, cluster: Cluster, loaded: dict[str, str], tmp_path: Path,
               seed: int, share: float = SHARE) -> dict[str, Any]:
    """One live run through ``proxy`` (its faults set by the caller), checked as the module says."""
    code, clean, err = _run(proxy, tmp_path, "--dry-run")
    assert code == 0, err[-2000:]
    allowed = {(ns, name): (cluster.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}")
                            or {})["status"]["disruptionsAllowed"] for ns, name, _ in PDBS}
    before = {p["metadata"]["uid"]: p for ns in NAMESPACES for p in cluster.pods(ns)}

    proxy.rng.seed(seed)
    proxy.set_share(share)
    code, report, err = _run(proxy, tmp_path)
    proxy.set_share(0.0)
    print(f"live seed {seed}: {proxy.requests} requests, faults {dict(proxy.counts())}, "
          f"results {report['summary']['results']}, eventsLost {report['summary'].get('eventsLost')}")

    # the run completed with a report, its reads all succeeded, and the plan is the fault-free one
    assert report["summary"]["errors"] == [], err[-2000:]
    assert _plan(report) == _plan(clean)
    outcomes = report["evictions"]
    results = Counter(e["result"] for e in outcomes)
    assert code == (1 if results["failed"] or results["throttled"] else 0), err[-2000:]

    # every outcome has a cause the faults can explain; no pod twice
    for e in outcomes:
        assert e.get("cause") in CAUSES.get(e["result"], set()), e
    keys = [f"{e['namespace']}/{e['pod']}" for e in outcomes]
    assert len(keys) == len(set(keys))

    # evicted == gone (the kubelet stand-in finishes deletions at once; terminating counts as gone)
    evicted = {f"{e['namespace']}/{e['pod']}" for e in outcomes if e["result"] == "evicted"}

    def went() -> set[str]:
        now = {p["metadata"]["uid"]: p for ns in NAMESPACES for p in cluster.pods(ns)}
        return {loaded[uid] for uid in before
                if uid not in now or now[uid]["metadata"].get("deletionTimestamp")}

    cluster.cp.wait_for(lambda: evicted <= went(), 30, what="evicted pods to be gone")
    assert went() == evicted

    # no PDB lost more than it allowed before the run
    for (ns, name), budget in allowed.items():
        selector = LabelSelector.from_api({"matchLabels": {"app": name}})
        hit = [uid for uid, p in before.items() if loaded[uid] in evicted and p["metadata"]["namespace"] == ns
               and selector.matches(p["metadata"].get("labels") or {})]
        assert len(hit) <= budget, f"PDB {ns}/{name} allowed {budget}, lost {len(hit)}"

    # one Descheduled Event per evicted pod, none twice; each missing one counted in eventsLost
    missing = 0
    for key in evicted:
        ns, name = key.split("/", 1)
        events = [ev for ev in cluster.events(ns) if ev["regarding"].get("name") == name
                  and ev.get("reportingController") == "kdesched.dev/descheduler"]
        assert len(events) <= 1, (key, events)
        missing += not events
    assert missing <= report["summary"]["eventsLost"]
    return report


@pytest.mark.parametrize("seed", LIVE_SEEDS)
def test_run_under_faults(loaded: dict[str, str], proxy: FaultProxy, cluster: Cluster, tmp_path: Path,
                          seed: int) -> None:
    """30% of all requests faulted, every kind of fault."""
    _live_pass(proxy, cluster, loaded, tmp_path, seed)


@pytest.mark.parametrize("seed", LIVE_SEEDS[:1])
def test_lost_eviction_answers_are_confirmed(loaded: dict[str, str], control_plane: ControlPlane,
                                             cluster: Cluster, tmp_path: Path, seed: int) -> None:
    """Eviction answers lost after the API server acted (issue 25: at 30%, 10 of 32 were reported
    ``already-gone``): every one is ``evicted`` (``confirmed``) with its Event, none already-gone.
    Half of the eviction requests here (more than the issue's 30%), so that some answers are lost
    whatever order the concurrent evictions draw their faults in."""
    with FaultProxy(control_plane.url, control_plane.token, control_plane.ca_file, share=0.0,
                    faults=("act-drop",), match=lambda method, path: path.endswith("/eviction")) as proxy:
        report = _live_pass(proxy, cluster, loaded, tmp_path, seed, share=0.5)
        lost = proxy.counts()["act-drop"]
    results = Counter(e["result"] for e in report["evictions"])
    assert set(results) == {"evicted"} and results["evicted"] == len(report["evictions"])
    confirmed = sum(e["cause"] == "confirmed" for e in report["evictions"])
    assert lost and 0 < confirmed <= lost
    assert report["summary"]["eventsLost"] == 0

"""PodDisruptionBudget verdicts: the real Eviction API (v1.24) and kdesched's planner, case by case.

Why: the planner spends each PDB's budget before any request is sent, so it must refuse exactly
what the API server refuses and plan exactly what it allows, including where the API ignores a
PDB: a Pending, Succeeded or Failed pod, a pod already terminating, and a pod that is not Ready
while the budget is healthy (registry/core/pod/storage/eviction.go). Each case is loaded into the
real API server with the real disruption controller computing PDB status; then the planner
decides on a snapshot of that cluster, and kdesched's client sends the same evictions, in the same
order, through the Eviction API (and through the fake API server loaded with the same objects, so
the fast tier's fake keeps to the real rules). The expected verdicts document what this API server does; the
planner must match them one for one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from kdesched.evictor.defaultevictor import DefaultEvictor
from kdesched.evictor.planner import LimitCounter, Limits, PlanningEvictor
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError
from kdesched.policy.types import DefaultEvictorArgs
from kdesched.strategies.framework import ClusterState

from tests.builders import NOW, snapshot
from tests.fakeapi import FakeApiServer
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Proc, now_rfc3339

NS = "pdb"
STATES = ("ready", "not-ready", "pending", "unbound", "terminating", "failed", "succeeded")


@dataclass(frozen=True)
class Case:
    id: str
    pods: dict[str, str]                 # name -> state (STATES); every pod is labelled app=x
    pdbs: tuple[tuple[str, int], ...]    # (name, minAvailable), each selecting app=x
    order: tuple[str, ...]               # evictions, in order
    verdicts: tuple[bool, ...]           # True = the API server evicts (deletes) the pod


CASES = [
    Case("0-budget refuses a Ready pod", {"a": "ready", "b": "ready"}, (("x", 2),), ("a",), (False,)),
    Case("budget 1 allows one eviction, then refuses", {"a": "ready", "b": "ready", "c": "ready"}, (("x", 2),),
         ("a", "b"), (True, False)),
    Case("Pending pod (bound, not started) evicted under a 0-budget", {"a": "ready", "p": "pending"}, (("x", 2),),
         ("p", "a"), (True, False)),
    Case("unscheduled Pending pod evicted under a 0-budget", {"a": "ready", "p": "unbound"}, (("x", 2),),
         ("p",), (True,)),
    Case("terminating pod evicted under a 0-budget", {"a": "ready", "b": "ready", "t": "terminating"}, (("x", 2),),
         ("t", "a"), (True, False)),
    Case("Failed and Succeeded pods evicted under a 0-budget", {"a": "ready", "f": "failed", "s": "succeeded"},
         (("x", 1),), ("f", "s", "a"), (True, True, False)),
    Case("not-Ready pod evicted while the budget is healthy (and uses none of it)",
         {"a": "ready", "b": "ready", "n": "not-ready", "c": "ready"}, (("x", 2),),
         ("n", "a", "b"), (True, True, False)),
    Case("not-Ready pod refused while the budget is unhealthy",
         {"a": "ready", "n": "not-ready", "m": "not-ready"}, (("x", 2),), ("n",), (False,)),
    Case("two PDBs: a Running pod is refused", {"a": "ready", "b": "ready"}, (("x", 0), ("y", 0)),
         ("a",), (False,)),
    Case("two PDBs: a Pending pod is still evicted", {"a": "ready", "p": "pending"}, (("x", 0), ("y", 0)),
         ("p",), (True,)),
]


def _status(state: str) -> dict[str, Any] | None:
    stamp = now_rfc3339()
    if state in ("pending", "unbound"):
        return None
    if state in ("failed", "succeeded"):
        return {"phase": state.capitalize(), "conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": stamp}]}
    ready = "False" if state == "not-ready" else "True"
    return {"phase": "Running", "podIP": "10.244.0.9", "startTime": stamp, "conditions": [
        {"type": "Ready", "status": ready, "lastTransitionTime": stamp},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": stamp}]}


def _load(cluster: Cluster, case: Case) -> None:
    cluster.namespace(NS)
    cluster.node("n1")
    for name, state in case.pods.items():
        # a long grace period: without a kubelet, an evicted bound pod stays terminating (observable)
        cluster.pod(name, NS, labels={"app": "x"}, node=None if state == "unbound" else "n1",
                    terminationGracePeriodSeconds=300)
        status = _status(state)
        if status is not None:
            cluster.set_pod_status(NS, name, status)
        if state == "terminating":
            cluster.api.delete(f"/api/v1/namespaces/{NS}/pods/{name}")
    for pdb_name, min_available in case.pdbs:
        cluster.pdb(pdb_name, {"app": "x"}, NS, min_available=min_available)
    healthy = sum(1 for s in case.pods.values() if s == "ready")
    for pdb_name, _ in case.pdbs:
        cluster.cp.wait_for(lambda n=pdb_name: _settled(cluster, n, healthy), 30,
                            what=f"the disruption controller to settle PDB {pdb_name}")


def _settled(cluster: Cluster, name: str, healthy: int) -> bool:
    pdb = cluster.wait_pdb_observed(NS, name)
    return (pdb.get("status") or {}).get("currentHealthy") == healthy


def _objects(cluster: Cluster) -> list[dict[str, Any]]:
    objects = [dict(o, kind="Node", apiVersion="v1") for o in cluster.api.get("/api/v1/nodes")["items"]]
    objects += [dict(o, kind="Pod", apiVersion="v1") for o in cluster.pods(NS)]
    objects += [dict(o, kind="PodDisruptionBudget", apiVersion="policy/v1")
                for o in cluster.api.get(f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets")["items"]]
    return objects


def _planner_verdicts(objects: list[dict[str, Any]], case: Case) -> list[bool]:
    state = ClusterState(snapshot(objects), NOW)
    evictor = PlanningEvictor(state, DefaultEvictor(DefaultEvictorArgs(), state), LimitCounter(Limits()))
    pods = {p.name: p for p in state.snapshot.pods}
    return [evictor.evict(pods[name], strategy="S", profile="p", reason="table") for name in case.order]


def _fake_verdicts(objects: list[dict[str, Any]], case: Case) -> list[bool]:
    """The same evictions against tests/fakeapi.py loaded with the real objects (PDB status as the
    real disruption controller computed it): the fake must not promise what the real server does not."""
    fake = FakeApiServer().start()
    try:
        fake.add(*copy.deepcopy(objects))
        with KubeClient.for_host(fake.url) as client:
            return _evict_all(client, {o["metadata"]["name"]: o["metadata"]["uid"] for o in objects
                                       if o["kind"] == "Pod"}, case)
    finally:
        fake.stop()


def _evict_all(client: KubeClient, uids: dict[str, str], case: Case) -> list[bool]:
    verdicts = []
    for name in case.order:
        try:
            client.evict_pod(NS, name, uid=uids[name], grace_period_seconds=None, annotations={})
        except ApiError as exc:
            assert exc.status in (429, 500), exc  # 429: budget; 500: more than one PDB (v1.24)
            verdicts.append(False)
            continue
        verdicts.append(True)
    return verdicts


def _api_verdicts(control_plane: ControlPlane, cluster: Cluster, case: Case) -> list[bool]:
    verdicts = []
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as client:
        for name in case.order:
            pod = cluster.get(f"/api/v1/namespaces/{NS}/pods/{name}")
            assert pod is not None
            try:
                client.evict_pod(NS, name, uid=pod["metadata"]["uid"], grace_period_seconds=None, annotations={})
            except ApiError as exc:
                assert exc.status in (429, 500), exc  # 429: budget; 500: more than one PDB (v1.24)
                verdicts.append(False)
                continue
            verdicts.append(True)
    return verdicts


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_planner_agrees_with_the_eviction_api(case: Case, control_plane: ControlPlane, cluster: Cluster,
                                              controller_manager: Proc) -> None:
    _load(cluster, case)
    objects = _objects(cluster)
    planned = _planner_verdicts(objects, case)
    faked = _fake_verdicts(objects, case)
    evicted = _api_verdicts(control_plane, cluster, case)
    assert evicted == list(case.verdicts), "the API server decided otherwise than documented here"
    assert planned == evicted
    assert faked == evicted, "tests/fakeapi.py decides PDBs otherwise than the real API server"

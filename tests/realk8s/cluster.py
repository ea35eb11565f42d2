"""Objects for the real control-plane tier: Ready nodes with capacity, namespaces, pods, workloads,
PDBs, priority classes, created through the admin's raw client, and waits on what the control
plane does with them.

Why a module of its own: the pytest fixtures (conftest.py) and bench/ scripts build the same
clusters. Builders return plain dicts (the API's JSON), so a test can tweak any field before
``create``; the ``Cluster`` methods create and return what the API server stored (defaults filled in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.realk8s.controlplane import ApiError, ControlPlane, RawApi, now_rfc3339, path_for


def node_obj(name: str, cpu: str = "4", memory: str = "8Gi", pods: str | int = 110, *,
             labels: Mapping[str, str] | None = None, taints: Iterable[Mapping[str, str]] = (),
             unschedulable: bool = False, ready: bool = True) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    stamp = now_rfc3339()
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": resources, "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
        },
    }


def container(cpu: str | None = "100m", memory: str | None = "64Mi", name: str = "app",
              image: str = "registry.example/app:1") -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "image": image, **({"resources": {"requests": requests}} if requests else {})}


def pod_spec(cpu: str | None = "100m", memory: str | None = "64Mi", *, node: str | None = None,
             **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container(cpu, memory)], **extra}
    if node:
        spec["nodeName"] = node
    return spec


def pod_obj(name: str, namespace: str = "default", *, labels: Mapping[str, str] | None = None,
            annotations: Mapping[str, str] | None = None, node: str | None = None, cpu: str | None = "100m",
            memory: str | None = "64Mi", owner: Mapping[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec(cpu, memory, node=node, **spec)}


def workload_obj(kind: str, name: str, replicas: int, namespace: str = "default", *,
                 labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
                 cpu: str | None = "100m", memory: str | None = "64Mi", **spec: Any) -> dict[str, Any]:
    """A Deployment, ReplicaSet or StatefulSet of ``replicas`` pods labelled ``app=<name>``."""
    match = {"app": name, **(labels or {})}
    template_meta: dict[str, Any] = {"labels": match}
    if annotations:
        template_meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": match},
                            "template": {"metadata": template_meta, "spec": pod_spec(cpu, memory, **spec)}}
    if kind == "StatefulSet":
        body["serviceName"] = name
        body["podManagementPolicy"] = "Parallel"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": body}


def pdb_obj(name: str, match_labels: Mapping[str, str], namespace: str = "default", *,
            min_available: int | str | None = None, max_unavailable: int | str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


class Cluster:
    """Create objects and wait for the control plane to act on them (admin identity)."""

    def __init__(self, cp: ControlPlane) -> None:
        assert cp.api is not None, "the control plane is not started"
        self.cp = cp
        self.api: RawApi = cp.api

    # creation ----------------------------------------------------------------------------------
    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """POST any object (its path from apiVersion/kind/namespace); the stored object back."""
        created: dict[str, Any] = self.api.create(path_for(obj, name=False), obj)
        return created

    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Create the namespace; one that exists already (kept across tests by the Knative tier, whose
        objects carry the keep label) is returned as it is."""
        existing = self.get(f"/api/v1/namespaces/{quote(name)}")
        if existing is not None and not (existing.get("metadata") or {}).get("deletionTimestamp"):
            return existing
        return self.create({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": name, "labels": dict(labels or {})}})

    def node(self, name: str, cpu: str = "4", memory: str = "8Gi", pods: str | int = 110,
             **kwargs: Any) -> dict[str, Any]:
        """A Node with capacity = allocatable and a Ready condition (create keeps the status)."""
        return self.create(node_obj(name, cpu, memory, pods, **kwargs))

    def nodes(self, count: int, prefix: str = "node-", **kwargs: Any) -> list[dict[str, Any]]:
        return [self.node(f"{prefix}{i}", **kwargs) for i in range(count)]

    def pod(self, name: str, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
        return self.create(pod_obj(name, namespace, **kwargs))

    def deployment(self, name: str, replicas: int, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
        return self.create(workload_obj("Deployment", name, replicas, namespace, **kwargs))

    def replicaset(self, name: str, replicas: int, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
        return self.create(workload_obj("ReplicaSet", name, replicas, namespace, **kwargs))

    def statefulset(self, name: str, replicas: int, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
        return self.create(workload_obj("StatefulSet", name, replicas, namespace, **kwargs))

    def pdb(self, name: str, match_labels: Mapping[str, str], namespace: str = "default",
            **kwargs: Any) -> dict[str, Any]:
        return self.create(pdb_obj(name, match_labels, namespace, **kwargs))

    def priority_class(self, name: str, value: int) -> dict[str, Any]:
        return self.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": name}, "value": value})

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch a pod's status directly (what the kubelet stand-in does, for one-off states)."""
        patched: dict[str, Any] = self.api.patch(
            f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/status", {"status": dict(status)})
        return patched

    def kubeconfig(self, path: str | Path, as_user: str | None = None) -> Path:
        return self.cp.kubeconfig(path, as_user=as_user)

    # reading -----------------------------------------------------------------------------------
    def pods(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods" if namespace else "/api/v1/pods"
        query = {"labelSelector": label_selector} if label_selector else {}
        items: list[dict[str, Any]] = self.api.get(path, **query)["items"]
        return items

    def get(self, path: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.api.get_or_none(path)
        return found

    def events(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(f"/apis/events.k8s.io/v1/namespaces/{quote(namespace)}/events")["items"]
        return items

    # waiting -----------------------------------------------------------------------------------
    def wait_running(self, namespace: str, count: int, label_selector: str | None = None,
                     timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until exactly ``count`` pods (not terminating) are Running and Ready; return them."""
        def check() -> list[dict[str, Any]] | None:
            pods = [p for p in self.pods(namespace, label_selector) if not p["metadata"].get("deletionTimestamp")]
            ready = [p for p in pods if is_ready(p)]
            return ready if len(pods) == count and len(ready) == count else None
        result: list[dict[str, Any]] = self.cp.wait_for(
            check, timeout, what=f"{count} Ready pods in {namespace} ({label_selector or 'all'})")
        return result

    def wait_pdb_observed(self, namespace: str, name: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the disruption controller has computed the PDB's status for its generation."""
        def check() -> dict[str, Any] | None:
            pdb = self.get(f"/apis/policy/v1/namespaces/{quote(namespace)}/poddisruptionbudgets/{quote(name)}")
            if pdb is None:
                return None
            status = pdb.get("status") or {}
            if status.get("observedGeneration") == pdb["metadata"].get("generation"):
                return pdb
            return None
        result: dict[str, Any] = self.cp.wait_for(check, timeout, what=f"PDB {namespace}/{name} status")
        return result

    def wait_gone(self, path: str, timeout: float = 30.0) -> None:
        self.cp.wait_for(lambda: self.get(path) is None, timeout, what=f"{path} to be deleted")


def is_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


__all__ = ["ApiError", "Cluster", "container", "is_ready", "node_obj", "pdb_obj", "pod_obj", "pod_spec",
           "workload_obj"]

"""Small builders for API-shaped objects and records, shared by every test module.

Each ``*_obj`` returns raw API JSON (what a cluster file or the API server holds); ``node``/``pod``
turn it into records through the real parser, so tests exercise the same path as production.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from kdesched.model.records import Node, Pod
from kdesched.model.snapshot import Snapshot
from kdesched.strategies.framework import ClusterState

NOW = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
_uid = itertools.count(1)


def ts(delta_seconds: float = 0) -> str:
    """RFC 3339 time ``delta_seconds`` relative to NOW (negative = in the past)."""
    return (NOW + timedelta(seconds=delta_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_obj(name: str, cpu: str = "4", memory: str = "16Gi", pods: int = 110, *, labels: dict[str, str] | None = None,
             taints: list[dict[str, str]] | None = None, unschedulable: bool = False, ready: bool = True,
             extra_allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra_allocatable or {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"node-{name}",
                     "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {**({"taints": taints} if taints else {}), **({"unschedulable": True} if unschedulable else {})},
        "status": {"allocatable": alloc, "capacity": alloc,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def owner(kind: str = "ReplicaSet", name: str = "rs", uid: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid or f"{kind}-{name}", "controller": True}


def pod_obj(name: str, node: str = "", cpu: str | None = "100m", memory: str | None = None, *,
            namespace: str = "default", owner_kind: str | None = "ReplicaSet", owner_name: str = "rs",
            labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
            priority: int | None = None, phase: str = "Running", image: str = "nginx:1.27",
            tolerations: list[dict[str, Any]] | None = None, node_selector: dict[str, str] | None = None,
            affinity: dict[str, Any] | None = None, spread: list[dict[str, Any]] | None = None,
            volumes: list[dict[str, Any]] | None = None, started: float | None = -3600,
            created: float | None = -3600, deleting: bool = False, limits: dict[str, str] | None = None,
            container_statuses: list[dict[str, Any]] | None = None,
            init_container_statuses: list[dict[str, Any]] | None = None,
            status_reason: str | None = None, conditions: list[dict[str, Any]] | None = None,
            spec_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}-{next(_uid)}",
                            "labels": labels or {"app": owner_name}}
    if owner_kind:
        meta["ownerReferences"] = [owner(owner_kind, owner_name)]
    if annotations:
        meta["annotations"] = annotations
    if created is not None:
        meta["creationTimestamp"] = ts(created)
    if deleting:
        meta["deletionTimestamp"] = ts(0)
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": image, "resources": resources}]}
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    if spread:
        spec["topologySpreadConstraints"] = spread
    if volumes:
        spec["volumes"] = volumes
    spec.update(spec_extra or {})
    status: dict[str, Any] = {"phase": phase}
    if started is not None:
        status["startTime"] = ts(started)
    if container_statuses is not None:
        status["containerStatuses"] = container_statuses
    if init_container_statuses is not None:
        status["initContainerStatuses"] = init_container_statuses
    if status_reason:
        status["reason"] = status_reason
    if conditions:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pdb_obj(name: str, match_labels: dict[str, str], namespace: str = "default",
            disruptions_allowed: int | None = 1) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": namespace},
                           "spec": {"selector": {"matchLabels": match_labels}}}
    if disruptions_allowed is not None:
        obj["status"] = {"disruptionsAllowed": disruptions_allowed}
    return obj


def node(name: str, *args: Any, **kwargs: Any) -> Node:
    return Node.from_api(node_obj(name, *args, **kwargs))


def pod(name: str, *args: Any, **kwargs: Any) -> Pod:
    return Pod.from_api(pod_obj(name, *args, **kwargs))


def snapshot(objects: list[dict[str, Any]]) -> Snapshot:
    return Snapshot.from_objects((f"objects[{i}]", o) for i, o in enumerate(objects))


def state(objects: list[dict[str, Any]], now: datetime = NOW) -> ClusterState:
    return ClusterState(snapshot(objects), now)


POD_LIFETIME_POLICY_YAML = """apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  pluginConfig:
  - name: DefaultEvictor
    args: {EVICTOR}
  - name: PodLifeTime
    args: {states: [Running]}
  plugins:
    deschedule: {enabled: [PodLifeTime]}
"""
"""A v1alpha2 policy as a person writes it (flow style, unquoted scalars), ``{EVICTOR}`` the
DefaultEvictor's args: how YAML reads a scalar is part of what is tested."""

"""The API calls of a surge-first move: read a pod's Deployment and ReplicaSet, scale the Deployment
through its scale subresource, and set or remove one pod's deletion cost.

Why here: only kdesched.kube talks to the API server. Every write is conditional, so a step taken
twice (a retry, a second process, a restart) does no harm: the scale write carries the
resourceVersion the decision was made on (409 when an HPA or a GitOps tool changed the Deployment
meanwhile) and the pod patch carries the pod's uid (409 when it is another pod of the same name).
The RBAC this needs is the least there is (docs/deploying.md): ``get`` on deployments and
replicasets, ``get`` and ``update`` on ``deployments/scale``, ``patch`` on pods.
"""

from __future__ import annotations

from kdesched.kube.client import KubeClient
from kdesched.model.owners import (
    DELETION_COST,
    DeploymentInfo,
    ReplicaSetInfo,
    deployment_from_json,
    replicaset_from_json,
)


def get_deployment(client: KubeClient, namespace: str, name: str) -> DeploymentInfo | None:
    obj = client.get_raw("Deployment", name, namespace)
    return None if obj is None else deployment_from_json(obj)


def get_replicaset(client: KubeClient, namespace: str, name: str) -> ReplicaSetInfo | None:
    obj = client.get_raw("ReplicaSet", name, namespace)
    return None if obj is None else replicaset_from_json(obj)


def scale_deployment(client: KubeClient, namespace: str, name: str, replicas: int, resource_version: str) -> None:
    """Set the Deployment's replicas through ``deployments/scale``, if it is still at
    ``resource_version`` (Conflict otherwise). The Deployment's template is never written."""
    client.replace_subresource("Deployment", name, namespace, "scale", {
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
        "spec": {"replicas": replicas}})


def set_deletion_cost(client: KubeClient, namespace: str, name: str, uid: str, cost: int | None) -> None:
    """Mark the pod with ``controller.kubernetes.io/pod-deletion-cost: cost``, or remove the
    annotation (None). Conflict if the pod of that name is no longer ``uid``; NotFound if it is gone."""
    client.merge_patch("Pod", name, namespace, {"metadata": {
        "uid": uid, "annotations": {DELETION_COST: None if cost is None else str(cost)}}})

"""The API calls of a surge-first move: read a pod's Deployment and ReplicaSet, and scale the
Deployment through its scale subresource.

Why here: only kdesched.kube talks to the API server. Every write is conditional, so a step taken
twice (a retry, a second process, a restart) does no harm: the scale write carries the
resourceVersion the decision was made on (409 when an HPA or a GitOps tool changed the Deployment
meanwhile). The pod itself leaves through the Eviction API (:meth:`KubeClient.evict_pod`). The RBAC
this needs is the least there is (docs/deploying.md): ``get`` on deployments and replicasets,
``update`` on ``deployments/scale``; no pod write.
"""

from __future__ import annotations

from kdesched.kube.client import KubeClient
from kdesched.model.owners import (
    SURGE_MANAGER,
    DeploymentInfo,
    ReplicaSetInfo,
    deployment_from_json,
    replicaset_from_json,
)
from kdesched.model.records import Pod


def get_deployment(client: KubeClient, namespace: str, name: str) -> DeploymentInfo | None:
    obj = client.get_raw("Deployment", name, namespace)
    return None if obj is None else deployment_from_json(obj)


def get_replicaset(client: KubeClient, namespace: str, name: str) -> ReplicaSetInfo | None:
    obj = client.get_raw("ReplicaSet", name, namespace)
    return None if obj is None else replicaset_from_json(obj)


def workload_pods(client: KubeClient, deployment: DeploymentInfo) -> list[Pod] | None:
    """The Deployment's pods (one LIST of its namespace by its matchLabels), for a run whose
    snapshot does not hold them; None when the selector is not a plain label match. Another
    controller's pods that carry the same labels (a canary) are listed too: the move judges only its
    own Deployment's (:func:`kdesched.evictor.surge.own_pods`)."""
    if not deployment.selector:
        return None
    return client.list_pods(deployment.namespace, deployment.selector)


def scale_deployment(client: KubeClient, namespace: str, name: str, replicas: int, resource_version: str) -> None:
    """Set the Deployment's replicas through ``deployments/scale``, if it is still at
    ``resource_version`` (Conflict otherwise). The Deployment's template is never written. Sent as
    field manager :data:`SURGE_MANAGER`: while the managedFields entry owning ``spec.replicas`` is
    that one, nobody else has written the replicas since (kdesched.evictor.surge.Surge.ours)."""
    client.replace_subresource("Deployment", name, namespace, "scale", {
        "apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
        "spec": {"replicas": replicas}}, field_manager=SURGE_MANAGER)

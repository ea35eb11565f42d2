"""kdesched's own client against the real API server's authentication and RBAC: a kubeconfig that
impersonates a service account really acts as it (denied what it is not granted), groups included.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane


def test_admin_kubeconfig_verifies_tls_and_lists(control_plane: ControlPlane, cluster: Cluster) -> None:
    cluster.node("n1")
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as client:
        assert [n["metadata"]["name"] for n in client.list_raw("Node").items] == ["n1"]


def test_impersonated_service_account_is_held_to_its_rbac(control_plane: ControlPlane, cluster: Cluster,
                                                          tmp_path: Path) -> None:
    cluster.node("n1")
    path = control_plane.kubeconfig(tmp_path / "sa.kubeconfig", as_user="system:serviceaccount:default:nobody")
    with KubeClient.from_config(str(path)) as client, pytest.raises(ApiError) as denied:
        client.list_raw("Node")
    assert denied.value.status == 403 and "system:serviceaccount:default:nobody" in str(denied.value)


@pytest.mark.parametrize("groups", [["others", "listers"], ["listers", "others"]])
def test_every_impersonated_group_is_sent(control_plane: ControlPlane, cluster: Cluster, tmp_path: Path,
                                          groups: list[str]) -> None:
    # only "listers" is granted anything; it passes first and last, so every header line arrives
    cluster.node("n1")
    cluster.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "realk8s-node-lister"},
                    "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]})
    cluster.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "realk8s-node-lister"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "realk8s-node-lister"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "listers"}]})
    path = control_plane.kubeconfig(tmp_path / "g.kubeconfig", as_user="jane", as_groups=groups)
    with KubeClient.from_config(str(path)) as client:
        nodes = control_plane.wait_for(lambda: _try_list(client), 10, what="the binding to take effect")
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]


def _try_list(client: KubeClient) -> list[dict[str, object]] | None:
    try:
        return client.list_raw("Node").items
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise

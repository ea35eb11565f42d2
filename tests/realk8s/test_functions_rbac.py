"""The Knative functions against a real API server with the knative/ RBAC applied, each calling
as its own service account (a kubeconfig impersonating it, read by kdesched's own client).

Both directions: every request a function makes is allowed (no 403), and every permission its
service account holds is used by some function - except the few listed in UNUSED_BY_FUNCTIONS,
each with the component that does use it. A new grant nobody uses, or a new call the RBAC does not
allow, fails here (tests/deploy/test_rbac.py pins the grants themselves, offline).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError, Forbidden
from kdesched.policy.load import load_policy
from kdesched.policy.types import Policy
from kdesched.reactor.events import routing as ev
from kdesched.reactor.run.settings import parse_settings
from kdesched_functions import FUNCTIONS

from tests.deploy import KNATIVE, NAMESPACE, install
from tests.functions.helpers import ce_request, post, reply_event
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet

Grant = tuple[str, str, str, str | None]  # apiGroup, resource[/subresource], verb, resourceName
RBAC_KINDS = {"Namespace", "ServiceAccount", "ConfigMap", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
SERVICE_ACCOUNT = {"classifier": "kdesched-classifier", "rebalance": "kdesched", "taints": "kdesched",
                   "affinity": "kdesched", "manual": "kdesched", "deadletter": "kdesched-deadletter"}
# Granted to a function's service account but used by another component sharing the role:
UNUSED_BY_FUNCTIONS: dict[str, dict[Grant, str]] = {
    "kdesched": {
        # the standalone Deployment (`kdesched serve`, knative/standalone) runs as the same service
        # account with the same ClusterRole and keeps its snapshot current with watches
        (g, r, "watch", None): "kdesched serve (standalone) watches"
        for g, r in (("", "pods"), ("", "nodes"), ("", "namespaces"), ("scheduling.k8s.io", "priorityclasses"),
                     ("policy", "poddisruptionbudgets"), ("", "persistentvolumeclaims"))
    } | {
        # only `kdesched serve` elects a leader (tests/realk8s/test_serve.py runs it with this RBAC)
        ("coordination.k8s.io", "leases", "get", "kdesched-leader"): "kdesched serve's leader election",
        # the ledger deletes a workload's record once its move ended and its cool-downs ran out (300 s
        # after the last eviction by default; this test's functions answer within seconds).
        # tests/realk8s/test_ledger_records.py makes those deletes as this service account
        ("coordination.k8s.io", "leases", "delete", None): "the ledger's clean-up of ended records",
    } | {
        # surge-first moves: this test's stories evict pods of workloads that have room (no move would
        # cost availability); tests/realk8s/test_surge.py makes these calls as this service account
        grant: "surge-first moves (tests/realk8s/test_surge.py)"
        for grant in (("apps", "deployments", "get", None), ("apps", "replicasets", "get", None),
                      ("apps", "deployments/scale", "update", None))
    },
    "kdesched-classifier": {
        # kdesched-node-reader is shared with the ApiServerSource adapter (kdesched-node-source),
        # which gets and watches nodes
        ("", "nodes", "get", None): "the ApiServerSource adapter (shared ClusterRole kdesched-node-reader)",
        ("", "nodes", "watch", None): "the ApiServerSource adapter (shared ClusterRole kdesched-node-reader)",
    },
}
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)"
                  r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$")


def request_grant(method: str, path: str, query: dict[str, str]) -> Grant:
    """What RBAC checks for one request: (apiGroup, resource[/subresource], verb, name)."""
    m = PATH.match(path)
    assert m, f"unexpected API path {path}"
    if m["res"] == "namespaces" and m["name"] is None and m["ns"]:
        raise AssertionError(path)
    resource = m["res"] + (f"/{m['sub']}" if m["sub"] else "")
    name = m["name"]
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "watch" if query.get("watch") == "true" else ("get" if name else "list")
    if method == "POST" and m["sub"]:
        name = m["name"]
    return (m["group"] or "", resource, verb, name)


def granted(sa: str) -> set[Grant]:
    docs = install("knative")
    roles = {(d.kind, d.namespace if d.kind == "Role" else None, d.name): d.obj for d in docs
             if d.kind in ("Role", "ClusterRole")}
    out: set[Grant] = set()
    for d in docs:
        if d.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace") == NAMESPACE
                   for s in d.obj.get("subjects", [])):
            continue
        ref = d.obj["roleRef"]
        role = roles[(ref["kind"], d.namespace if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role.get("rules", []):
            for group in rule.get("apiGroups", []):
                for res in rule.get("resources", []):
                    for verb in rule.get("verbs", []):
                        for name in rule.get("resourceNames") or [None]:
                            out.add((group, res, verb, name))
    return out


def allowed_by(grants: set[Grant], call: Grant) -> bool:
    group, res, verb, name = call
    return (group, res, verb, None) in grants or (name is not None and (group, res, verb, name) in grants)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Grant, int]]]:
    """Every request kdesched's client sends: (impersonated user, grant, HTTP status or 0 for ok)."""
    seen: list[tuple[str, Grant, int]] = []
    real_send = KubeClient._send

    def spy(self: KubeClient, method: str, path: str, **kwargs: Any) -> Any:
        user = self.impersonation.user if self.impersonation else "admin"
        grant = request_grant(method, path, dict(kwargs.get("query") or []))
        try:
            resp = real_send(self, method, path, **kwargs)
        except ApiError as exc:
            seen.append((user, grant, exc.status))
            raise
        seen.append((user, grant, 0))
        return resp

    monkeypatch.setattr(KubeClient, "_send", spy)
    yield seen


def apply_rbac(cluster: Cluster) -> None:
    order = ["Namespace", "ServiceAccount", "ConfigMap", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"]
    docs = sorted((d for d in install("knative") if d.kind in RBAC_KINDS), key=lambda d: order.index(d.kind))
    for d in docs:
        cluster.create(d.obj)


def load_workloads(cluster: Cluster) -> None:
    """Nodes and owned pods giving every function something to evict (no controllers run: the
    ReplicaSets only own the pods)."""
    cluster.node("n1", taints=[TAINT], labels={"team": "a"})
    cluster.node("n2", labels={"team": "b"})
    cluster.node("n3", labels={"team": "a"})
    cluster.namespace("apps")
    owners = {}
    for rs in ("web", "api", "dup"):
        obj = cluster.replicaset(rs, 0, "apps")
        owners[rs] = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": obj["metadata"]["uid"],
                      "controller": True}
    cluster.pod("intolerant", "apps", node="n1", labels={"app": "web"}, owner=owners["web"])
    cluster.pod("picky", "apps", node="n2", labels={"app": "api"}, owner=owners["api"], affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}]}}})
    for i in range(3):
        cluster.pod(f"dup-{i}", "apps", node="n3", labels={"app": "dup"}, owner=owners["dup"])
    cluster.priority_class("high", 1000)
    cluster.pdb("dup", {"app": "dup"}, "apps", min_available=1)
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "apps"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
    cluster.wait_running("apps", 5)


def wide_policy(path: Path) -> Policy:
    """The shipped policy plus a profile whose evictor needs every optional kind."""
    configmap = yaml.safe_load((KNATIVE / "common" / "policy.yaml").read_text())
    doc = yaml.safe_load(configmap["data"]["policy.yaml"])
    doc["profiles"].append({
        "name": "wide", "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
        "pluginConfig": [{"name": "DefaultEvictor", "args": {
            "priorityThreshold": {"name": "high"}, "namespaceLabelSelector": {},
            "podProtections": {"extraEnabled": ["PodsWithPVC"],
                               "config": {"PodsWithPVC": {"protectedStorageClasses": [{"name": "local-path"}]}}}}},
            {"name": "RemovePodsViolatingNodeTaints"}]})
    path.write_text(yaml.safe_dump(doc))
    return load_policy(str(path))


def test_functions_use_exactly_their_rbac(control_plane: ControlPlane, cluster: Cluster, kubelet: Kubelet,
                                          calls: list[tuple[str, Grant, int]], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    apply_rbac(cluster)
    load_workloads(cluster)
    policy = load_policy(str(KNATIVE / "common" / "policy.yaml"))
    env = {"KDESCHED_LEASE_NAME": "kdesched", "KDESCHED_LEASE_NAMESPACE": NAMESPACE, "KDESCHED_DRY_RUN": "false"}
    settings = parse_settings({"settleSeconds": 0.05, "leaseWaitSeconds": 5}, policy=policy, env=env)

    def app(name: str, **inject: Any) -> Any:
        sa = SERVICE_ACCOUNT[name]
        kubeconfig = control_plane.kubeconfig(tmp_path / f"{name}.kubeconfig",
                                              as_user=f"system:serviceaccount:{NAMESPACE}:{sa}")
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # the functions' own client construction
        if FUNCTIONS[name].needs_policy:
            inject.update(policy=policy, settings=settings)
        return FUNCTIONS[name].create_app(**inject).test_client()

    # classifier: seeds from a LIST of nodes, then turns an ApiServerSource update into node.taints.changed
    posted: list[Any] = []
    classifier = app("classifier", broker_url="http://broker.local", post=lambda *a, **k: posted.append(a))
    assert classifier.get("/readyz").status_code == 200
    node = cluster.api.patch("/api/v1/nodes/n2", {"spec": {"taints": [TAINT]}})  # what the source would send
    resp = post(classifier, *ce_request(ev.APISERVER_UPDATE, node, source="https://10.96.0.1:443"))
    assert resp.status_code == 200 and reply_event(resp).get_type() == ev.TAINTS_CHANGED
    # a restarted classifier reads the node record the first one kept on its Lease (get) and writes
    # its own (update), after posting what changed since (the start-up reconcile)
    restarted = app("classifier", broker_url="http://broker.local", post=lambda *a, **k: posted.append(a))
    assert restarted.get("/readyz").status_code == 200
    fn = restarted.application.config["KDESCHED_CLASSIFIER"]  # its reconcile runs beside its first answers
    control_plane.wait_for(lambda: fn.recorder.recorded is not None, 30, what="the restarted classifier's node record")
    # the first reply was lost: the restarted classifier answers the redelivery from the answers the
    # first one wrote to that Lease before replying (issue 31): the same reply, same id, not 202
    again = post(restarted, *ce_request(ev.APISERVER_UPDATE, node, source="https://10.96.0.1:443"))
    assert again.status_code == 200 and reply_event(again).get_id() == reply_event(resp).get_id()

    def run(name: str, etype: str, data: Any) -> dict[str, Any]:
        resp = post(app(name), *ce_request(etype, data, id=f"{name}-1"))
        assert resp.status_code == 200, resp.get_data(as_text=True)
        reply = reply_event(resp).get_data()
        assert isinstance(reply, dict)
        return reply

    # the nodes were tainted and labelled seconds ago: a node event's eviction waits until 3 s after
    # that, for the scheduler to see it (kdesched.admission.fresh_change, its own story in
    # tests/reactor/test_controls.py); this test is about RBAC, so it posts once that has passed
    from kdesched.model.records import Node

    written = [t for n in ("n1", "n2") for rec in [Node.from_api(cluster.get(f"/api/v1/nodes/{n}"))]
               for t in (rec.taints_written_at, rec.labels_written_at) if t is not None]
    time.sleep(max(0.0, max(written, default=0.0) + 3.2 - time.time()))
    taints = run("taints", ev.TAINTS_CHANGED, {"node": "n1", "before": {"taints": []}, "after": {"taints": [TAINT]}})
    assert [e["pod"] for e in taints["evictions"] if e["result"] == "evicted"] == ["intolerant"]
    affinity = run("affinity", ev.LABELS_CHANGED, {"node": "n2", "before": {"team": "a", "topology.kubernetes.io/zone": "x"},
                                                   "after": {"team": "b", "topology.kubernetes.io/zone": "y"}})
    assert [e["pod"] for e in affinity["evictions"] if e["result"] == "evicted"] == ["picky"]
    run("rebalance", ev.NODE_ADDED, {"node": "n2"})  # reads that one node first
    run("rebalance", ev.NODE_READY, {"node": "n2"})
    run("manual", ev.RUN_REQUESTED, {})
    # the kinds a run lists only when the policy needs them: namespaces, priority classes, PVCs
    policy = wide_policy(tmp_path / "wide.yaml")
    run("manual", ev.RUN_REQUESTED, {})
    dead = app("deadletter")
    assert post(dead, *ce_request(ev.RUN_COMPLETED, {"trigger": {"type": "x"}, "evictions": []})).status_code in (200, 202)

    by_sa: dict[str, set[Grant]] = {}
    for user, grant, status in calls:
        assert user.startswith(f"system:serviceaccount:{NAMESPACE}:"), f"a call not made as a service account: {grant}"
        assert status != 403, f"{user} was forbidden {grant}"
        by_sa.setdefault(user.rsplit(":", 1)[1], set()).add(grant)
    assert "kdesched-deadletter" not in by_sa  # the dead-letter logger reads nothing: its SA holds nothing

    for sa in sorted(set(SERVICE_ACCOUNT.values())):
        grants, used = granted(sa), by_sa.get(sa, set())
        assert {g for g in used if not allowed_by(grants, g)} == set(), sa
        used_grants = {g for g in grants if any(allowed_by({g}, u) for u in used)}
        unused = grants - used_grants
        assert unused == set(UNUSED_BY_FUNCTIONS.get(sa, {})), (
            f"{sa}: permissions no function used (grant them to the component that needs them, or list it "
            f"in UNUSED_BY_FUNCTIONS): {sorted(unused, key=str)}")


def test_an_impersonated_function_is_refused_what_its_role_lacks(control_plane: ControlPlane, cluster: Cluster,
                                                                  tmp_path: Path) -> None:
    # the converse, on the real server: the classifier's service account may read nodes, not pods
    apply_rbac(cluster)
    cluster.node("n1")
    kubeconfig = control_plane.kubeconfig(tmp_path / "c.kubeconfig",
                                          as_user=f"system:serviceaccount:{NAMESPACE}:kdesched-classifier")
    with KubeClient.from_config(str(kubeconfig)) as client:
        assert [n["metadata"]["name"] for n in client.list_raw("Node").items] == ["n1"]
        with pytest.raises(Forbidden):
            client.list_raw("Pod")
        with pytest.raises(Forbidden):
            client.evict_pod("default", "x", uid=None, grace_period_seconds=None, annotations={})

"""The RBAC of kdesched is exactly the documented least-privilege set.

Why: permissions only ever grow by accident. These tests pin every (apiGroup, resource, verb,
resourceName) granted by every Role and ClusterRole, so adding a verb, a resource or a wildcard
fails here and must be argued for in the review that changes EXPECTED (and in the comment above
the rule in the manifest, which is also checked). They also check that every ServiceAccount a
workload runs as exists and is bound, that the identity without permissions really has none, and
that the Knative install and the standalone Deployment use the same evictor RBAC.
"""

from __future__ import annotations

import re

import pytest

from tests.deploy import KNATIVE, NAMESPACE, Doc, by_kind, find, install, main_container

Grant = tuple[str, str, str, str | None]  # apiGroup, resource, verb, resourceName (None = any)

EVICTOR: frozenset[Grant] = frozenset({
    ("", "pods", "list", None), ("", "pods", "watch", None),
    ("", "pods/eviction", "create", None),
    ("", "nodes", "get", None), ("", "nodes", "list", None), ("", "nodes", "watch", None),
    ("", "namespaces", "list", None), ("", "namespaces", "watch", None),
    ("scheduling.k8s.io", "priorityclasses", "list", None), ("scheduling.k8s.io", "priorityclasses", "watch", None),
    ("policy", "poddisruptionbudgets", "list", None), ("policy", "poddisruptionbudgets", "watch", None),
    ("", "persistentvolumeclaims", "list", None), ("", "persistentvolumeclaims", "watch", None),
    ("events.k8s.io", "events", "create", None),
    # surge-first moves (issue 29): the pod's Deployment and ReplicaSet read by name, replicas +1
    # and back through the scale subresource only (the pod itself still leaves by eviction)
    ("apps", "deployments", "get", None), ("apps", "replicasets", "get", None),
    ("apps", "deployments/scale", "update", None),
})
# measured usage (LowNodeUtilization metricsUtilization, source KubernetesMetrics): LIST of the two
# collections (kdesched.kube.usage), added to the evictor role only when the policy's metricsProviders
# name KubernetesMetrics, as the upstream chart decides. The chart renders it then; knative/ ships the
# default policy, which does not (docs/deploying.md, "Permissions").
METRICS_READER: frozenset[Grant] = frozenset({
    ("metrics.k8s.io", "nodes", "list", None), ("metrics.k8s.io", "pods", "list", None),
})
LEASE: frozenset[Grant] = frozenset({
    ("coordination.k8s.io", "leases", "get", "kdesched"),
    ("coordination.k8s.io", "leases", "get", "kdesched-leader"),  # kdesched serve's leader election
    ("coordination.k8s.io", "leases", "get", "kdesched-ledger"),  # the disruption ledger's commit record
    # the ledger's workload records are named by a hash of the workload: list, update and delete
    # cannot be limited by name (bounded by the Role's namespace); create never can
    ("coordination.k8s.io", "leases", "list", None),
    ("coordination.k8s.io", "leases", "update", None),
    ("coordination.k8s.io", "leases", "delete", None),
    ("coordination.k8s.io", "leases", "create", None),
})
CLASSIFIER_RECORD: frozenset[Grant] = frozenset({
    ("coordination.k8s.io", "leases", "get", "kdesched-classifier"),  # the classifier's node record
    ("coordination.k8s.io", "leases", "update", "kdesched-classifier"),
    ("coordination.k8s.io", "leases", "create", None),  # create cannot be limited by name
})
NODE_READER: frozenset[Grant] = frozenset({
    ("", "nodes", "get", None), ("", "nodes", "list", None), ("", "nodes", "watch", None),
})

EXPECTED: dict[tuple[str, str], frozenset[Grant]] = {
    ("ClusterRole", "kdesched-evictor"): EVICTOR,
    ("Role", "kdesched-lease"): LEASE,
    ("ClusterRole", "kdesched-node-reader"): NODE_READER,
    ("Role", "kdesched-classifier-record"): CLASSIFIER_RECORD,
}
# ServiceAccount -> the roles bound to it
EXPECTED_BINDINGS: dict[str, set[tuple[str, str]]] = {
    "kdesched": {("ClusterRole", "kdesched-evictor"), ("Role", "kdesched-lease")},
    "kdesched-classifier": {("ClusterRole", "kdesched-node-reader"), ("Role", "kdesched-classifier-record")},
    "kdesched-node-source": {("ClusterRole", "kdesched-node-reader")},
    "kdesched-deadletter": set(),
}

# both installs together; the objects they share (../common) once
ALL = tuple({(d.group, d.kind, d.namespace, d.name): d for d in install("knative") + install("standalone")}.values())
ROLES = [d for d in ALL if d.kind in ("Role", "ClusterRole")]
BINDINGS = [d for d in ALL if d.kind in ("RoleBinding", "ClusterRoleBinding")]


def grants(role: Doc) -> set[Grant]:
    out: set[Grant] = set()
    for rule in role.obj["rules"]:
        assert "nonResourceURLs" not in rule, f"{role.label}: no non-resource URLs"
        names = rule.get("resourceNames") or [None]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in names:
                        out.add((group, resource, verb, name))
    return out


def bound_roles(sa: str) -> set[tuple[str, str]]:
    out = set()
    for b in BINDINGS:
        if any(s["kind"] == "ServiceAccount" and s["name"] == sa and s["namespace"] == NAMESPACE
               for s in b.obj["subjects"]):
            out.add((b.obj["roleRef"]["kind"], b.obj["roleRef"]["name"]))
    return out


def test_roles_are_exactly_the_documented_set() -> None:
    assert {(r.kind, r.name) for r in ROLES} == set(EXPECTED)


@pytest.mark.parametrize("role", ROLES, ids=lambda d: f"{d.kind}/{d.name}")
def test_role_grants_exactly_the_documented_permissions(role: Doc) -> None:
    got, want = grants(role), EXPECTED[(role.kind, role.name)]
    assert got == want, f"{role.label}: added {sorted(got - want, key=str)}, missing {sorted(want - got, key=str)}"


@pytest.mark.parametrize("role", ROLES, ids=lambda d: f"{d.kind}/{d.name}")
def test_no_wildcards_secrets_or_pod_deletion(role: Doc) -> None:
    for group, resource, verb, _ in grants(role):
        assert "*" not in (group, resource, verb), f"{role.label}: wildcard"
        assert resource not in ("secrets", "configmaps"), f"{role.label}: {resource}"
        assert not (resource.startswith("pods") and verb in ("delete", "deletecollection", "update", "patch")), (
            f"{role.label}: pods leave only through the Eviction API")
        assert verb not in ("escalate", "bind", "impersonate"), role.label


def test_every_rule_has_a_justifying_comment() -> None:
    """Each `- apiGroups:` item under `rules:` is directly preceded by a comment line."""
    files = {role.path for role in ROLES}
    assert files
    for path in sorted(files):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^- apiGroups:", line):
                assert lines[i - 1].lstrip().startswith("#"), f"{path.name}:{i + 1}: rule without a comment above it"


def test_grants_are_checked_not_vacuously() -> None:
    """Adding one verb to the evictor role changes what grants() sees (so the equality test fails)."""
    role = find(ROLES, "ClusterRole", "kdesched-evictor")
    widened = {**role.obj, "rules": [*role.obj["rules"], {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]}
    assert grants(Doc(role.path, role.index, widened)) != EVICTOR


def workload_service_accounts() -> dict[str, str]:
    """workload label -> ServiceAccount it runs as (Knative Services, the Deployment, the source)."""
    out = {}
    for doc in ALL:
        if doc.kind == "Service" and doc.group == "serving.knative.dev" or doc.kind == "Deployment":
            out[doc.label] = doc.obj["spec"]["template"]["spec"]["serviceAccountName"]
        elif doc.kind == "ApiServerSource":
            out[doc.label] = doc.obj["spec"]["serviceAccountName"]
    return out


@pytest.mark.parametrize(("workload", "sa"), sorted(workload_service_accounts().items()))
def test_workload_service_account_exists_and_is_bound_as_documented(workload: str, sa: str) -> None:
    find(ALL, "ServiceAccount", sa)
    assert bound_roles(sa) == EXPECTED_BINDINGS[sa], f"{workload}: {sa} bound to {bound_roles(sa)}"


def test_identity_without_permissions_mounts_no_token() -> None:
    for sa, roles in EXPECTED_BINDINGS.items():
        account = find(ALL, "ServiceAccount", sa)
        if not roles:
            assert account.obj.get("automountServiceAccountToken") is False, account.label
            users = [d for d in ALL if d.kind == "Service" and d.group == "serving.knative.dev"
                     and d.obj["spec"]["template"]["spec"]["serviceAccountName"] == sa]
            assert users and all(u.obj["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
                                 for u in users)


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda d: f"{d.kind}/{d.name}")
def test_binding_points_at_existing_role_and_accounts(binding: Doc) -> None:
    ref = binding.obj["roleRef"]
    assert ref["apiGroup"] == "rbac.authorization.k8s.io"
    find(ROLES, ref["kind"], ref["name"])
    if binding.kind == "RoleBinding":
        assert ref["kind"] == "Role", "a RoleBinding of a ClusterRole would grant it in one namespace only"
    for subject in binding.obj["subjects"]:
        assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE
        find(ALL, "ServiceAccount", subject["name"])


def test_evicting_functions_and_standalone_share_the_same_identity() -> None:
    evicting = {"rebalance", "taints", "affinity", "manual"}
    for doc in by_kind(install("knative"), "Service", "serving.knative.dev"):
        if doc.name in evicting:
            assert doc.obj["spec"]["template"]["spec"]["serviceAccountName"] == "kdesched", doc.label
    deployment = find(install("standalone"), "Deployment", "kdesched")
    assert deployment.obj["spec"]["template"]["spec"]["serviceAccountName"] == "kdesched"
    # both installs take the evictor RBAC from the very same file
    common = KNATIVE / "common" / "rbac-evictor.yaml"
    for name in ("knative", "standalone"):
        roles = [d for d in install(name) if d.kind in ("ClusterRole", "Role") and d.name.startswith("kdesched-")
                 and d.name not in ("kdesched-node-reader", "kdesched-classifier-record")]
        assert {d.path for d in roles} == {common}


def test_lease_name_matches_the_role() -> None:
    from kdesched.reactor.io.ledger_store import COMMIT_SUFFIX
    from kdesched.reactor.run.settings import parse_settings
    from kdesched.reactor.serve.leader import LEADER_SUFFIX

    lease_rule_names = {name for (_, _, _, name) in LEASE if name}
    # exactly the Leases the code uses by default: the run Lease, serve's leader Lease, the ledger's commit
    default = parse_settings({}, env={}).lease_name
    assert lease_rule_names == {default, f"{default}{LEADER_SUFFIX}", f"{default}{COMMIT_SUFFIX}"} == {
        "kdesched", "kdesched-leader", "kdesched-ledger"}
    for doc in by_kind(install("knative"), "Service", "serving.knative.dev"):
        env = {e["name"]: e.get("value") for e in main_container(doc)["env"]}
        assert env["KDESCHED_LEASE_NAME"] in lease_rule_names
    deployment = find(install("standalone"), "Deployment", "kdesched")
    env = {e["name"]: e.get("value") for e in main_container(deployment)["env"]}
    assert env["KDESCHED_LEASE_NAME"] in lease_rule_names
    assert "KDESCHED_LEASE_NAMESPACE" not in env, "defaults to POD_NAMESPACE (downward API)"
    assert env["POD_NAMESPACE"] is None  # valueFrom, not a literal


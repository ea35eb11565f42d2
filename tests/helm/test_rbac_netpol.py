"""The chart's permissions and network rules: least privilege as knative/ has it, and the
NetworkPolicies admit exactly who they say.

Why: a chart is a second place where RBAC can grow by accident. The rendered Roles, ClusterRoles
and bindings are put through the very checks tests/deploy/test_rbac.py applies to the kustomize
manifests (the same EXPECTED grants, the same bindings, no wildcards, secrets or pod deletion), in
every mode. The NetworkPolicies are evaluated as the API defines them (a pod selected by a policy
admits only what one of its rules matches) for every kdesched pod and a list of source namespaces:
the data plane reaches the functions, the named namespaces reach `manual` (and serve), nothing else
does. Whether a CNI enforces them is the cluster's business (there is none on the test control plane).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.policy.load import load_policy_text
from kdesched.policy.usage import needs_usage
from kdesched.reactor.run.settings import ReactorSettings
from kdesched_functions import FUNCTIONS

from tests.deploy import KNATIVE, Doc
from tests.deploy import test_rbac as kustomize_rbac
from tests.helm import CHART, REPO, find_obj, rendered_policy, run_helm, template, template_raw

MODES = ("knative", "standalone", "cronjob")
ROLES_BY_MODE = {
    "knative": set(kustomize_rbac.EXPECTED),
    "standalone": {("ClusterRole", "kdesched-evictor"), ("Role", "kdesched-lease")},
    "cronjob": {("ClusterRole", "kdesched-evictor"), ("Role", "kdesched-lease")},
}
RENDERED = KNATIVE / "(helm template)"  # a label for Doc: these objects come from the chart, not a file


def docs(objs: list[dict[str, Any]]) -> list[Doc]:
    return [Doc(RENDERED, i, o) for i, o in enumerate(objs)]


@pytest.mark.parametrize("mode", MODES)
def test_rendered_rbac_is_the_documented_least_privilege(helm: Path, mode: str) -> None:
    rendered = docs(template(helm, {"mode": mode}))
    roles = [d for d in rendered if d.kind in ("Role", "ClusterRole")]
    assert {(r.kind, r.name) for r in roles} == ROLES_BY_MODE[mode]
    for role in roles:
        got, want = kustomize_rbac.grants(role), kustomize_rbac.EXPECTED[(role.kind, role.name)]
        assert got == want, f"{role.kind}/{role.name}: added {sorted(got - want, key=str)}, missing {sorted(want - got, key=str)}"
        kustomize_rbac.test_no_wildcards_secrets_or_pod_deletion(role)
    bindings = [d for d in rendered if d.kind in ("RoleBinding", "ClusterRoleBinding")]
    accounts = {d.name for d in rendered if d.kind == "ServiceAccount"}
    for sa in accounts:
        bound = {(b.obj["roleRef"]["kind"], b.obj["roleRef"]["name"]) for b in bindings
                 if any(s["name"] == sa and s["namespace"] == "kdesched" for s in b.obj["subjects"])}
        assert bound == kustomize_rbac.EXPECTED_BINDINGS[sa], f"{sa}: bound to {bound}"
    for b in bindings:
        if b.kind == "RoleBinding":
            assert b.obj["roleRef"]["kind"] == "Role"
        for s in b.obj["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["name"] in accounts


METRICS_POLICY = yaml.safe_load((REPO / "examples/low-node-utilization/metrics/policy-kubernetes-metrics.yaml")
                                .read_text())
POLICY_FILES = sorted([*REPO.glob("examples/*/policy.yaml"), *REPO.glob("examples/policies/*.yaml"),
                       *REPO.glob("examples/*/metrics/policy-*.yaml")])


def _wrapped(policy: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "policy"},
                           "data": {"policy.yaml": yaml.safe_dump(policy)}})


def _collector(policy: dict[str, Any]) -> dict[str, Any]:
    """The same policy with upstream's deprecated form: metricsCollector.enabled and metricsServer."""
    doc = {**{k: v for k, v in policy.items() if k != "metricsProviders"}, "metricsCollector": {"enabled": True}}
    text = yaml.safe_dump(doc).replace("source: KubernetesMetrics", "metricsServer: true")
    return dict(yaml.safe_load(text))


POLICIES: dict[str, dict[str, Any]] = {
    **{str(p.relative_to(REPO)): {"policy": p.read_text()} for p in POLICY_FILES},
    "default": {},
    "configmap-wrapped-metrics": {"policy": _wrapped(METRICS_POLICY)},
    "metrics-collector": {"policy": _collector(METRICS_POLICY)},
    "upstream-values": {"kind": "Deployment", "deschedulerPolicy": {
        k: v for k, v in METRICS_POLICY.items() if k not in ("apiVersion", "kind")}},
}


@pytest.mark.parametrize("binary", ["helm3", "helm"])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_policy_on_kubernetes_metrics_gets_the_metrics_grant(helm: Path, binary: str, name: str) -> None:
    """LowNodeUtilization on measured usage (metricsUtilization source KubernetesMetrics) LISTs
    metrics.k8s.io nodes and pods; without the grant every run fails with a 403 and evicts nothing on
    usage. The upstream chart grants it when deschedulerPolicy.metricsProviders names KubernetesMetrics;
    the chart does the same for the policy it mounts, in whatever format it comes (kdesched's loader
    refuses a policy that balances on KubernetesMetrics without such a provider), and only then."""
    objs = template(helm, POLICIES[name], binary=binary)
    policy = load_policy_text(rendered_policy(objs), name)
    declared = any(p.source == "KubernetesMetrics" for p in policy.metrics_providers)
    role = next(d for d in docs(objs) if (d.kind, d.name) == ("ClusterRole", "kdesched-evictor"))
    want = kustomize_rbac.EVICTOR | (kustomize_rbac.METRICS_READER if declared else frozenset())
    got = kustomize_rbac.grants(role)
    assert got == want, f"{name}: added {sorted(got - want, key=str)}, missing {sorted(want - got, key=str)}"
    assert declared >= needs_usage(policy)[0], "the policy reads metrics.k8s.io without a grant"
    kustomize_rbac.test_no_wildcards_secrets_or_pod_deletion(role)


def test_the_metrics_grant_follows_the_policy_in_every_format(helm: Path) -> None:
    """Not vacuous: the policies above include ones that read metrics.k8s.io, in three forms."""
    readers = [n for n in POLICIES if needs_usage(load_policy_text(rendered_policy(template(helm, POLICIES[n])), n))[0]]
    assert {"configmap-wrapped-metrics", "metrics-collector", "upstream-values"} <= set(readers)
    assert "default" not in readers


PROMETHEUS_POLICY = yaml.safe_load((REPO / "examples/low-node-utilization/metrics/policy-prometheus.yaml").read_text())
TOKEN_ROLE = "kdesched-prometheus-token"


def _brake(namespace: str, name: str, enabled: bool = True) -> dict[str, Any]:
    return {"alertBrake": {"enabled": enabled, "url": "https://prometheus-k8s.monitoring.svc:9091",
                           "alertFilterRegexp": "^(EtcdMembersDown)$",
                           "authToken": {"secretReference": {"namespace": namespace, "name": name}}}}


def _provider_in(namespace: str, name: str) -> dict[str, Any]:
    doc = copy.deepcopy(PROMETHEUS_POLICY)
    doc["metricsProviders"][0]["prometheus"]["authToken"]["secretReference"] = {"namespace": namespace, "name": name}
    return doc


SECRET_POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "kubernetes-metrics": {"policy": METRICS_POLICY},
    "provider": {"policy": PROMETHEUS_POLICY},
    "provider-configmap-wrapped": {"policy": _wrapped(PROMETHEUS_POLICY)},
    "provider-upstream-values": {"deschedulerPolicy": {
        k: v for k, v in PROMETHEUS_POLICY.items() if k not in ("apiVersion", "kind")}},
    "brake": {"kdesched": _brake("monitoring", "prometheus-token")},
    "brake-disabled": {"kdesched": _brake("monitoring", "prometheus-token", enabled=False)},
    "brake-in-policy-block": {"policy": {**METRICS_POLICY,
                                         "kdesched": _brake("openshift-monitoring", "thanos-token")}},
    "provider-and-brake": {"policy": _provider_in("monitoring", "prom-usage"),
                           "kdesched": _brake("monitoring", "prom-alerts")},
    "provider-and-brake-apart": {"policy": PROMETHEUS_POLICY, "kdesched": _brake("monitoring", "prometheus-token")},
    "provider-and-brake-same-secret": {"policy": _provider_in("monitoring", "prometheus-token"),
                                       "kdesched": _brake("monitoring", "prometheus-token")},
}


def secrets_read(objs: list[dict[str, Any]], name: str) -> dict[str, set[str]]:
    """Namespace -> the Secrets kdesched's own code reads for the mounted policy: the metricsProviders'
    authToken.secretReference (kdesched.kube.usage.read_usage) and the enabled alert brake's
    (read_brake_alerts), as the loader and the reactor settings parse them."""
    policy = load_policy_text(rendered_policy(objs), name)
    refs = [(p.secret_namespace, p.secret_name) for p in policy.metrics_providers if p.secret_name]
    brake = ReactorSettings.from_policy(policy, env={}).alert_brake
    if brake.enabled and brake.token_secret_name:
        refs.append((brake.token_secret_namespace, brake.token_secret_name))
    out: dict[str, set[str]] = {}
    for namespace, secret in refs:
        out.setdefault(namespace, set()).add(secret)
    return out


def policy_reader_accounts(objs: list[dict[str, Any]]) -> set[str]:
    """The service accounts of the pods whose code reads the policy: serve, run, the evicting functions."""
    out: set[str] = set()
    for o in objs:
        spec = o.get("spec") or {}
        function = FUNCTIONS.get(o["metadata"]["name"]) if o["kind"] == "Service" and "template" in spec else None
        if o["kind"] in ("Deployment", "Job") or function is not None and function.needs_policy:
            out.add(spec["template"]["spec"]["serviceAccountName"])
        elif o["kind"] == "CronJob":
            out.add(spec["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"])
    return out


@pytest.mark.parametrize("binary", ["helm3", "helm"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SECRET_POLICIES))
def test_the_prometheus_token_secret_is_granted_by_name_to_its_readers(helm: Path, binary: str, mode: str,
                                                                       name: str) -> None:
    """metricsProviders[].prometheus.authToken.secretReference and the alert brake's authToken.secretReference
    name a Secret {namespace, name} whose key prometheusAuthToken kdesched GETs through the API server
    (kdesched.kube.usage.prometheus_token). The chart grants exactly that: in each such namespace a Role
    with get on those Secrets by resourceNames, bound to the identity of the pods that read the policy;
    nothing when the policy names none (or only a disabled brake does, whose Secret is never read)."""
    objs = template(helm, {**SECRET_POLICIES[name], "mode": mode,
                           "serviceAccount": {"name": OWN_ACCOUNT}}, binary=binary)
    want = secrets_read(objs, name)
    readers = policy_reader_accounts(objs)
    assert readers == {OWN_ACCOUNT}, readers
    rendered = docs(objs)
    secret_roles = [d for d in rendered if d.kind in ("Role", "ClusterRole")
                    and any(resource == "secrets" for _, resource, _, _ in kustomize_rbac.grants(d))]
    got = {d.obj["metadata"]["namespace"]: kustomize_rbac.grants(d) for d in secret_roles}
    assert len(got) == len(secret_roles), "one Role per namespace"
    assert got == {ns: {("", "secrets", "get", s) for s in secrets} for ns, secrets in want.items()}, name
    for role in secret_roles:
        assert role.kind == "Role" and role.name == TOKEN_ROLE, role.label
        ns = role.obj["metadata"]["namespace"]
        bindings = [d.obj for d in rendered if d.kind in ("RoleBinding", "ClusterRoleBinding")
                    and d.obj["roleRef"]["name"] == TOKEN_ROLE]
        binding = next(b for b in bindings if b["metadata"]["namespace"] == ns)
        assert binding["kind"] == "RoleBinding" and binding["roleRef"]["kind"] == "Role", binding
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": acct, "namespace": "kdesched"}
                                       for acct in sorted(readers)], binding
    assert len([d for d in rendered if d.kind == "RoleBinding" and d.obj["roleRef"]["name"] == TOKEN_ROLE]) == len(want)
    off = template(helm, {**SECRET_POLICIES[name], "mode": mode, "rbac": {"create": False}}, binary=binary)
    assert not [o for o in off if o["kind"] in ("Role", "RoleBinding")], "rbac.create: false creates no RBAC"


def test_the_prometheus_token_grant_is_not_vacuous(helm: Path) -> None:
    """The cases above read Secrets in each form: a provider (also wrapped, also upstream's values), the
    brake from the values and from the policy's block, two namespaces, two Secrets in one, and none."""
    read = {n: secrets_read(template(helm, v), n) for n, v in SECRET_POLICIES.items()}
    assert {n for n, r in read.items() if not r} == {"default", "kubernetes-metrics", "brake-disabled"}
    assert read["provider-and-brake"] == {"monitoring": {"prom-usage", "prom-alerts"}}
    assert read["provider-and-brake-apart"] == {"kdesched": {"prometheus-token"}, "monitoring": {"prometheus-token"}}
    assert read["brake-in-policy-block"] == {"openshift-monitoring": {"thanos-token"}}
    assert read["provider-configmap-wrapped"] == read["provider-upstream-values"] == read["provider"]


def test_the_rbac_checks_catch_a_widened_chart_role(helm: Path) -> None:
    role = next(d for d in docs(template(helm)) if d.name == "kdesched-evictor")
    widened = Doc(role.path, role.index, {**role.obj, "rules": [*role.obj["rules"], {
        "apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]})
    assert kustomize_rbac.grants(widened) != kustomize_rbac.EXPECTED[("ClusterRole", "kdesched-evictor")]
    with pytest.raises(AssertionError):
        kustomize_rbac.test_no_wildcards_secrets_or_pod_deletion(widened)


def test_rbac_and_accounts_can_be_left_to_the_operator(helm: Path) -> None:
    objs = template(helm, {"mode": "standalone", "rbac": {"create": False},
                           "serviceAccount": {"create": False, "name": "descheduler"}})
    assert not [o for o in objs if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding",
                                                 "ServiceAccount")]
    assert find_obj(objs, "Deployment", "kdesched")["spec"]["template"]["spec"]["serviceAccountName"] == "descheduler"


KNATIVE_ACCOUNTS = {"kdesched-classifier", "kdesched-deadletter", "kdesched-node-source"}  # fixed names
OWN_ACCOUNT = "platform-descheduler"


def referenced_accounts(objs: list[dict[str, Any]]) -> set[str]:
    """The ServiceAccounts the rendered objects run as or bind."""
    out: set[str] = set()
    for o in objs:
        spec = o.get("spec") or {}
        if o["kind"] in ("Deployment", "Job") or o["kind"] == "Service" and "template" in spec:
            out.add(spec["template"]["spec"]["serviceAccountName"])
        elif o["kind"] == "CronJob":
            out.add(spec["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"])
        elif o["kind"] == "ApiServerSource":
            out.add(spec["serviceAccountName"])
        elif o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            out.update(s["name"] for s in o["subjects"])
    return out


@pytest.mark.parametrize("binary", ["helm3", "helm"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("accounts", "rbac"), [(True, True), (False, True), (True, False), (False, False)],
                         ids=["create-all", "own-account", "own-rbac", "own-all"])
def test_every_account_referenced_is_created_or_left_to_the_operator_as_documented(
        helm: Path, binary: str, mode: str, accounts: bool, rbac: bool) -> None:
    """serviceAccount.create=false brings one's own *evicting* identity (serviceAccount.name), as in the
    upstream chart. The Knative helper identities (classifier, deadletter, ApiServerSource adapter), whose
    names are fixed, are created whenever the chart creates accounts or the RBAC that binds them; only an
    operator who manages both (serviceAccount.create=false, rbac.create=false) provides them, as
    docs/deploying.md and the install notes say."""
    values = {"mode": mode, "serviceAccount": {"create": accounts, "name": OWN_ACCOUNT}, "rbac": {"create": rbac}}
    objs = template(helm, values, binary=binary)
    created = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    operators = set() if accounts else {OWN_ACCOUNT}
    if mode == "knative" and not accounts and not rbac:
        operators |= KNATIVE_ACCOUNTS
    referenced = referenced_accounts(objs)
    assert referenced - created <= operators, f"referenced, neither created nor the operator's: {referenced - created - operators}"
    assert not created & operators, f"created although the operator's: {created & operators}"
    assert created <= referenced, f"created and unused: {created - referenced}"


def test_accounts_left_to_the_operator_are_named_in_the_notes_and_the_docs(helm: Path) -> None:
    done = run_helm(helm, "helm", "install", "kdesched", str(CHART), "--dry-run=client", "-n", "kdesched",
                    "--set", "serviceAccount.create=false", "--set", "rbac.create=false")
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert all(name in notes for name in KNATIVE_ACCOUNTS), notes
    for values in (["--set", "serviceAccount.create=false"], ["--set", "mode=standalone", "--set", "rbac.create=false",
                                                               "--set", "serviceAccount.create=false"]):
        done = run_helm(helm, "helm", "install", "kdesched", str(CHART), "--dry-run=client", "-n", "kdesched", *values)
        assert not any(name in done.stdout.split("NOTES:", 1)[1] for name in KNATIVE_ACCOUNTS), values
    docs = (REPO / "docs" / "deploying.md").read_text()
    assert all(f"`{name}`" in docs for name in KNATIVE_ACCOUNTS)


# -- NetworkPolicies ---------------------------------------------------------------------------------

def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        present = expr["key"] in labels
        op = expr["operator"]
        if op == "In" and not (present and labels[expr["key"]] in expr["values"]):
            return False
        if op == "NotIn" and present and labels[expr["key"]] in expr["values"]:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def admitted(policies: list[dict[str, Any]], pod: dict[str, str], source_namespace: str, port: int,
             pod_namespace: str = "kdesched") -> bool:
    """Does the set of NetworkPolicies let a pod in ``source_namespace`` reach ``pod`` (its labels) on
    ``port``? Namespaces carry kubernetes.io/metadata.name; a pod no policy selects admits everything."""
    ns_labels = {"kubernetes.io/metadata.name": source_namespace}
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod_namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"]) and _matches(p["spec"]["podSelector"], pod)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or ():
            peers = rule.get("from")
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port for p in ports):
                continue
            if not peers:
                return True
            for peer in peers:
                assert "ipBlock" not in peer, "the chart admits namespaces, never address ranges"
                ns_ok = "namespaceSelector" not in peer or _matches(peer["namespaceSelector"], ns_labels)
                same_ns_only = "namespaceSelector" not in peer and source_namespace != pod_namespace
                pod_ok = "podSelector" not in peer  # the chart never selects source pods
                if ns_ok and pod_ok and not same_ns_only:
                    return True
    return False


def pods(objs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """name -> pod labels of every kdesched workload the chart renders."""
    out = {}
    for o in objs:
        if o["kind"] == "Service" and "template" in o.get("spec", {}) or o["kind"] == "Deployment":
            out[o["metadata"]["name"]] = o["spec"]["template"]["metadata"]["labels"]
        elif o["kind"] == "CronJob":
            out[o["metadata"]["name"]] = o["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return out


DATA_PLANE = ["knative-eventing", "knative-serving", "kourier-system"]
OTHERS = ["default", "kube-system", "kdesched", "monitoring", "ci", "tenant-a"]
PORTS = (8080, 8012, 9091)


@pytest.mark.parametrize("named", [[], ["ops"], ["ops", "platform"]], ids=["none", "ops", "two"])
def test_knative_functions_admit_the_data_plane_and_manual_the_named_namespaces(helm: Path, named: list[str]) -> None:
    objs = template(helm, {"manual": {"allowedNamespaces": named}})
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    functions = pods(objs)
    assert sorted(functions) == ["affinity", "classifier", "deadletter", "manual", "rebalance", "taints"]
    for name, labels in functions.items():
        for port in PORTS:
            for ns in DATA_PLANE:
                assert admitted(policies, labels, ns, port), f"{name}: the data plane ({ns}) must reach it"
            for ns in [*OTHERS, "ops", "platform"]:
                want = name == "manual" and ns in named
                assert admitted(policies, labels, ns, port) is want, f"{name} from {ns}:{port}"


def test_knative_metrics_namespaces_reach_only_the_metrics_port(helm: Path) -> None:
    objs = template(helm, {"networkPolicy": {"metricsNamespaces": ["monitoring"]}})
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    for labels in pods(objs).values():
        assert admitted(policies, labels, "monitoring", 8080)
        assert not admitted(policies, labels, "monitoring", 8012)


@pytest.mark.parametrize("named", [[], ["ops"]], ids=["none", "ops"])
def test_standalone_serve_admits_only_the_named_namespaces(helm: Path, named: list[str]) -> None:
    objs = template(helm, {"mode": "standalone", "manual": {"allowedNamespaces": named},
                           "networkPolicy": {"metricsNamespaces": ["monitoring"]}})
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    (serve,) = pods(objs).values()
    for ns in [*DATA_PLANE, *OTHERS, "ops"]:
        assert admitted(policies, serve, ns, 8080) is (ns in named or ns == "monitoring"), ns
        assert not admitted(policies, serve, ns, 9000), ns


def test_cronjob_run_pod_admits_nothing(helm: Path) -> None:
    objs = template(helm, {"mode": "cronjob", "manual": {"allowedNamespaces": ["ops"]}})
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    (run,) = pods(objs).values()
    for ns in [*DATA_PLANE, *OTHERS, "ops"]:
        assert not admitted(policies, run, ns, 8080)


@pytest.mark.parametrize("binary", ["helm3", "helm"])
@pytest.mark.parametrize("mode", ["standalone", "knative"])
def test_a_scrape_the_network_policy_would_refuse_is_refused_at_install(helm: Path, binary: str, mode: str) -> None:
    """monitoring.serviceMonitor renders a ServiceMonitor (standalone) or a PodMonitor (knative) on 8080.
    With the NetworkPolicies on and no networkPolicy.metricsNamespaces, no scraper is admitted there:
    every target down, every panel empty, no alert ever fires. The chart refuses that, naming the value;
    with the scraper's namespace named, it reaches every pod the scrape selects."""
    scrape = {"mode": mode, "monitoring": {"serviceMonitor": {"enabled": True}}}
    done = template_raw(helm, scrape, binary=binary)
    assert done.returncode != 0, "a scrape is rendered that the NetworkPolicy refuses"
    assert "networkPolicy.metricsNamespaces" in done.stderr and "monitoring.serviceMonitor" in done.stderr, done.stderr
    objs = template(helm, {**scrape, "networkPolicy": {"metricsNamespaces": ["monitoring"]}}, binary=binary)
    monitor = next(o for o in objs if o["kind"] in ("ServiceMonitor", "PodMonitor"))
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    scraped = [labels for labels in pods(objs).values() if _matches(monitor["spec"]["selector"], labels)]
    assert scraped and all(admitted(policies, labels, "monitoring", 8080) for labels in scraped)
    template(helm, {**scrape, "networkPolicy": {"enabled": False}}, binary=binary)  # no policy: nothing refused
    template(helm, {**scrape, "mode": "cronjob"}, binary=binary)  # a run is not scraped: nothing to refuse


def test_the_evaluator_is_not_vacuous(helm: Path) -> None:
    """Without the chart's policies every source is admitted: the checks above are about them."""
    objs = template(helm, {"networkPolicy": {"enabled": False}})
    assert not [o for o in objs if o["kind"] == "NetworkPolicy"]
    for labels in pods(objs).values():
        assert admitted([], labels, "tenant-a", 8080)


def test_event_policy_names_the_sources_the_release_and_the_named_namespaces(helm: Path) -> None:
    objs = template(helm, {"eventPolicy": {"enabled": True}, "manual": {"allowedNamespaces": ["ops"]}})
    policy = find_obj(objs, "EventPolicy", "kdesched-broker")
    assert policy["spec"]["to"] == [{"ref": {"apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "kdesched"}}]
    senders = [f.get("sub") or f"{f['ref']['kind']}/{f['ref']['name']}" for f in policy["spec"]["from"]]
    assert senders == ["ApiServerSource/kdesched-nodes", "PingSource/kdesched-sweep",
                       "system:serviceaccount:kdesched:*", "system:serviceaccount:ops:*"]
    assert not [o for o in template(helm) if o["kind"] == "EventPolicy"]
    assert not [o for o in template(helm, {"mode": "standalone", "eventPolicy": {"enabled": True}})
                if o["kind"] == "EventPolicy"]

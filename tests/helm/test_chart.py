"""The chart with the real Helm 3 and 4, offline: lint, template in every mode, the values schema,
and the one source of truth: the chart renders the objects of knative/ (kustomize) exactly.

Why: the chart and knative/ describe the same install twice; a change to one that the other does
not follow would make "helm install" and "kubectl apply -k" install different things. Rather than
generate one from the other (the chart's templating and kustomize's overlays do not map onto each
other), these tests render both with the real tools and compare every object, field by field:
`helm template` in the knative mode == `kubectl kustomize knative/`, dryRun == knative/dry-run/,
standalone == knative/standalone/, the monitoring objects == knative/monitoring/. The only
differences allowed are listed here (Helm's own labels, the Namespace Helm leaves to
--create-namespace, the chart's NetworkPolicies, the policy checksum that rolls serve on upgrade).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.reactor.serve.server import DEFAULT_DRAIN_SECONDS, SHUTDOWN_MARGIN_SECONDS
from kdesched_functions import FUNCTIONS

from tests.helm import (
    CHART,
    HELPER_LABELS,
    REPO,
    VERSIONS,
    by_identity,
    find_obj,
    identity,
    rendered_policy,
    run_helm,
    template,
    template_raw,
)

KNATIVE = REPO / "knative"
BINARIES = sorted(VERSIONS)
MODES = ("knative", "standalone", "cronjob")
# kinds only one side renders, and why
KUSTOMIZE_ONLY = {"Namespace"}       # Helm installs into a namespace (--create-namespace); it is not a release object
CHART_ONLY = {"NetworkPolicy"}       # who may reach the pods: the chart's default (docs/deploying.md)
CHECKSUM = "checksum/policy"         # on the pod/revision templates of what reads the policy: `helm upgrade` with a new policy rolls them

# non-default values touching every group of values.yaml
NON_DEFAULT: dict[str, Any] = {
    "image": {"repository": "my.registry.example/kdesched", "digest": "sha256:" + "a" * 64, "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "policy": {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", "profiles": [
        {"name": "taints", "pluginConfig": [{"name": "DefaultEvictor"}, {"name": "RemovePodsViolatingNodeTaints"}],
         "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}]},
    "kdesched": {"sweepIntervalSeconds": 600, "safety": {"enabled": True, "maxUnavailable": 1}},
    "dryRun": True,
    "replicas": 2,
    "drainSeconds": 45,
    "resources": {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
    "priorityClassName": "kdesched-critical",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}]}}},
    "podAnnotations": {"example.com/team": "platform"},
    "extraEnv": [{"name": "KDESCHED_KUBE_API_QPS", "value": "20"}],
    "deschedulingInterval": "5m",
    "schedule": "*/10 * * * *", "timeZone": "Europe/Paris", "successfulJobsHistoryLimit": 1,
    "knative": {"brokerClass": "Kafka", "brokerURL": "http://kafka-broker-ingress.knative-eventing.svc.cluster.local/kdesched/kdesched",
                "sweepSchedule": "7 * * * *"},
    "functions": {"rebalance": {"minScale": 1, "maxScale": 1, "cache": True,
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "3Gi"}}}},
    "serviceAccount": {"annotations": {"example.com/owner": "platform"}},
    "manual": {"allowedNamespaces": ["ops", "ci"]},
    "networkPolicy": {"metricsNamespaces": ["monitoring"]},
    "monitoring": {"serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "prom"}},
                   "prometheusRule": {"enabled": True}, "dashboard": {"enabled": True, "namespace": "grafana"}},
}


# -- lint --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("binary", BINARIES)
def test_helm_lint_is_clean(helm: Path, binary: str) -> None:
    done = run_helm(helm, binary, "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    # no [INFO], [WARNING] or [ERROR] line at all
    assert not [line for line in done.stdout.splitlines() if line.startswith("[")], done.stdout


@pytest.mark.parametrize("binary", BINARIES)
def test_helm_is_the_kits_version(helm: Path, binary: str) -> None:
    done = run_helm(helm, binary, "version", "--short")
    assert done.stdout.startswith(VERSIONS[binary]), done.stdout


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize("mode", MODES)
def test_helm_lint_every_mode_with_non_default_values(helm: Path, binary: str, mode: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({**NON_DEFAULT, "mode": mode}))
    done = run_helm(helm, binary, "lint", "--strict", str(CHART), "-f", str(values))
    assert done.returncode == 0, done.stdout + done.stderr


# -- template: every mode, default and non-default values -------------------------------------------

def kinds(objs: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in objs:
        out[o["kind"]] = out.get(o["kind"], 0) + 1
    return out


EXPECTED_KINDS = {
    "knative": {"ServiceAccount": 4, "ClusterRole": 2, "ClusterRoleBinding": 3, "Role": 2, "RoleBinding": 2,
                "ConfigMap": 1, "Broker": 1, "ApiServerSource": 1, "PingSource": 1, "Trigger": 7, "Service": 6,
                "NetworkPolicy": 1},
    "standalone": {"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
                   "ConfigMap": 1, "Deployment": 1, "NetworkPolicy": 1},
    "cronjob": {"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
                "ConfigMap": 1, "CronJob": 1, "NetworkPolicy": 1},
}


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize("mode", MODES)
def test_template_default_values(helm: Path, binary: str, mode: str) -> None:
    objs = template(helm, {"mode": mode}, binary=binary, namespace="descheduling", release="kd")
    assert kinds(objs) == EXPECTED_KINDS[mode]
    for obj in objs:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "descheduling", identity(obj)
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "kd", identity(obj)
    assert yaml.safe_load(rendered_policy(objs)) == yaml.safe_load((CHART / "files" / "default-policy.yaml").read_text())


def workload_pod(objs: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    if mode == "knative":
        return [o["spec"]["template"]["spec"] for o in objs if o["kind"] == "Service" and "template" in o["spec"]]
    kind = "Deployment" if mode == "standalone" else "CronJob"
    obj = find_obj(objs, kind, "kdesched")
    return [obj["spec"]["template"]["spec"] if kind == "Deployment" else obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]]


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize("mode", MODES)
def test_template_non_default_values_reach_the_objects(helm: Path, binary: str, mode: str) -> None:
    objs = template(helm, {**NON_DEFAULT, "mode": mode}, binary=binary)
    image = "my.registry.example/kdesched@sha256:" + "a" * 64
    pods = workload_pod(objs, mode)
    assert pods
    for pod in pods:
        (container,) = pod["containers"]
        assert container["image"] == image and container["imagePullPolicy"] == "Always"
        assert pod["nodeSelector"] == NON_DEFAULT["nodeSelector"]
        assert pod["tolerations"] == NON_DEFAULT["tolerations"]
        assert pod["affinity"] == NON_DEFAULT["affinity"]
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["KDESCHED_KUBE_API_QPS"] == "20"
    policy = yaml.safe_load(rendered_policy(objs))
    assert policy["profiles"] == NON_DEFAULT["policy"]["profiles"]
    assert policy["kdesched"] == NON_DEFAULT["kdesched"]
    sa = find_obj(objs, "ServiceAccount", "kdesched")
    assert sa["metadata"]["annotations"] == {"example.com/owner": "platform"}
    assert find_obj(objs, "PrometheusRule", "kdesched")["metadata"]["namespace"] == "kdesched"
    assert find_obj(objs, "ConfigMap", "kdesched-dashboard")["metadata"]["namespace"] == "grafana"
    if mode == "knative":
        env = {s["metadata"]["name"]: {e["name"]: e.get("value") for e in s["spec"]["template"]["spec"]["containers"][0]["env"]}
               for s in objs if s["kind"] == "Service" and "template" in s["spec"]}
        assert {v["KDESCHED_DRY_RUN"] for v in env.values()} == {"true"}
        assert env["rebalance"]["KDESCHED_CACHE"] == "1"
        assert env["classifier"]["KDESCHED_BROKER_URL"] == NON_DEFAULT["knative"]["brokerURL"]
        rebalance = find_obj(objs, "Service", "rebalance")["spec"]["template"]
        assert rebalance["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] == "1"
        assert rebalance["spec"]["containers"][0]["resources"] == NON_DEFAULT["functions"]["rebalance"]["resources"]
        assert find_obj(objs, "Broker", "kdesched")["metadata"]["annotations"] == {
            "eventing.knative.dev/broker.class": "Kafka"}
        assert find_obj(objs, "PingSource", "kdesched-sweep")["spec"]["schedule"] == "7 * * * *"
        assert find_obj(objs, "PodMonitor", "kdesched")["metadata"]["labels"]["release"] == "prom"
    elif mode == "standalone":
        deployment = find_obj(objs, "Deployment", "kdesched")
        assert deployment["spec"]["replicas"] == 2
        pod = deployment["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "kdesched-critical"
        args = pod["containers"][0]["args"]
        assert "--dry-run" in args and args[args.index("--sweep-interval") + 1] == "300"
        assert pod["containers"][0]["resources"] == NON_DEFAULT["resources"]
        assert find_obj(objs, "ServiceMonitor", "kdesched")["spec"]["endpoints"][0]["interval"] == "30s"
        find_obj(objs, "Service", "kdesched-metrics")
    else:
        cron = find_obj(objs, "CronJob", "kdesched")
        assert cron["spec"]["schedule"] == "*/10 * * * *" and cron["spec"]["timeZone"] == "Europe/Paris"
        assert cron["spec"]["successfulJobsHistoryLimit"] == 1 and cron["spec"]["concurrencyPolicy"] == "Forbid"
        assert "--dry-run" in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert not [o for o in objs if o["kind"] in ("ServiceMonitor", "PodMonitor")]


POLICY_READERS = sorted(name for name, f in FUNCTIONS.items() if f.needs_policy)


def revision_checksums(objs: list[dict[str, Any]]) -> dict[str, str | None]:
    """Knative Service -> the policy checksum on its revision template (None: none)."""
    return {o["metadata"]["name"]: (o["spec"]["template"]["metadata"].get("annotations") or {}).get(CHECKSUM)
            for o in objs if o["kind"] == "Service" and "template" in o["spec"]}


@pytest.mark.parametrize("binary", BINARIES)
def test_a_policy_change_rolls_the_functions_that_read_it_and_only_then(helm: Path, binary: str) -> None:
    """The evicting functions read the mounted policy once, at start (build_function_app). A new policy
    must make a new Revision of each (Knative rolls it without downtime), as the checksum rolls the
    standalone Deployment: else a warm function (minScale 1, the cached rebalance, one kept busy by
    events) goes on with the old policy, an emergency kdesched.dryRun: true included. The classifier
    and deadletter never read it (needs_policy=False): the singleton is not restarted for nothing."""
    assert POLICY_READERS == ["affinity", "manual", "rebalance", "taints"]
    before = template(helm, {}, binary=binary)
    policy_changed = template(helm, {"kdesched": {"dryRun": True}}, binary=binary)
    assert rendered_policy(before) != rendered_policy(policy_changed)
    other_changed = template(helm, {"extraEnv": [{"name": "KDESCHED_KUBE_API_QPS", "value": "20"}],
                                    "functions": {"rebalance": {"minScale": 1, "maxScale": 1, "cache": True,
                                                                "resources": {"requests": {"cpu": "1"}}}}},
                             binary=binary)
    sums = {name: revision_checksums(objs) for name, objs in
            (("before", before), ("policy", policy_changed), ("other", other_changed))}
    standalone = find_obj(template(helm, {"mode": "standalone"}, binary=binary), "Deployment", "kdesched")
    for name in FUNCTIONS:
        if name in POLICY_READERS:
            assert sums["before"][name] == standalone["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
            assert sums["policy"][name] != sums["before"][name], f"{name}: the policy changed, its revision did not"
            assert sums["other"][name] == sums["before"][name], f"{name}: the checksum changed with the policy unchanged"
        else:
            assert sums["before"][name] is sums["policy"][name] is None, f"{name} does not read the policy"
            assert (find_obj(before, "Service", name)["spec"]["template"]
                    == find_obj(policy_changed, "Service", name)["spec"]["template"]), name


EXTRA_VOLUMES: dict[str, Any] = {
    "extraVolumes": [{"name": "prometheus", "secret": {"secretName": "prometheus-token"}},
                     {"name": "prometheus-ca", "configMap": {"name": "prometheus-ca"}}],
    "extraVolumeMounts": [{"name": "prometheus", "mountPath": "/etc/kdesched-extra/token", "readOnly": True},
                          {"name": "prometheus-ca", "mountPath": "/etc/kdesched-extra/ca", "readOnly": True}],
    "kdesched": {"alertBrake": {"enabled": True, "url": "https://prometheus-k8s.monitoring.svc:9091",
                                "alertFilterRegexp": "^(EtcdMembersDown)$",
                                "tokenFile": "/etc/kdesched-extra/token/token", "caFile": "/etc/kdesched-extra/ca/ca.crt"}},
}


POLICY_VOLUME = {"name": "policy", "configMap": {"name": "kdesched-policy"}}
POLICY_MOUNT = {"name": "policy", "mountPath": "/etc/kdesched", "readOnly": True}


def pods_by_component(objs: list[dict[str, Any]], mode: str) -> dict[str, dict[str, Any]]:
    """The pod spec of each kdesched workload: the Knative function's name, or serve / run."""
    if mode == "knative":
        return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objs
                if o["kind"] == "Service" and "template" in o["spec"]}
    if mode == "one-off":
        return {"run": find_obj(objs, "Job", "kdesched-run-1")["spec"]["template"]["spec"]}
    return {"serve" if mode == "standalone" else "run": workload_pod(objs, mode)[0]}


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize("mode", [*MODES, "one-off"])
def test_extra_volumes_reach_the_containers_that_read_the_policy_and_only_them(helm: Path, binary: str,
                                                                               mode: str) -> None:
    """kdesched.alertBrake.tokenFile / caFile and kdesched.usage.prometheusCAFile name files: the chart
    mounts what extraVolumes and extraVolumeMounts give, beside the policy, in every pod whose code
    reads the policy (serve, run, the functions with needs_policy: rebalance, taints, affinity,
    manual). The classifier and deadletter never read the policy (kdesched_functions.FUNCTIONS) and
    get only the policy volume as knative/ has it: a token Secret has no business in the deadletter
    pod, which runs without even its service account token."""
    values = {**EXTRA_VOLUMES, "mode": mode} if mode != "one-off" else {
        **EXTRA_VOLUMES, "mode": "cronjob", "cronjob": {"oneOff": True}}
    objs = template(helm, values, binary=binary)
    assert yaml.safe_load(rendered_policy(objs))["kdesched"]["alertBrake"] == EXTRA_VOLUMES["kdesched"]["alertBrake"]
    pods = pods_by_component(objs, mode)
    assert set(pods) == (set(FUNCTIONS) if mode == "knative" else {"serve" if mode == "standalone" else "run"})
    for component, pod in pods.items():
        reads = component not in FUNCTIONS or FUNCTIONS[component].needs_policy
        extra_volumes, extra_mounts = (EXTRA_VOLUMES["extraVolumes"], EXTRA_VOLUMES["extraVolumeMounts"]) if reads else ([], [])
        assert pod["volumes"] == [POLICY_VOLUME, *extra_volumes], component
        for container in pod["containers"]:
            assert container["volumeMounts"] == [POLICY_MOUNT, *extra_mounts], component
    if mode == "knative":
        assert {c for c in pods if len(pods[c]["volumes"]) > 1} == set(POLICY_READERS)
    clash = template_raw(helm, {"mode": mode if mode != "one-off" else "cronjob",
                                "extraVolumes": [{"name": "policy", "emptyDir": {}}]}, binary=binary)
    assert clash.returncode != 0 and "extraVolumes" in clash.stderr and '"policy"' in clash.stderr, clash.stderr


@pytest.mark.parametrize("binary", BINARIES)
def test_cronjob_one_off_is_a_job_per_revision(helm: Path, binary: str) -> None:
    objs = template(helm, {"mode": "cronjob", "cronjob": {"oneOff": True}}, binary=binary)
    job = find_obj(objs, "Job", "kdesched-run-1")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["run", "--policy", "/etc/kdesched/policy.yaml"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert not [o for o in objs if o["kind"] == "CronJob"]


def test_policy_given_as_text_is_mounted_as_it_is(helm: Path) -> None:
    text = (REPO / "examples" / "policies" / "openshift-presets.yaml").read_text()
    assert rendered_policy(template(helm, {"policy": text})).strip() == text.strip()


# -- the values schema ------------------------------------------------------------------------------

WRONG = [
    ({"mode": "daemonset"}, "mode"),
    ({"replicas": "two"}, "replicas"),
    ({"replicaz": 2}, "replicaz"),
    ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"dryRun": "yes"}, "dryRun"),
    ({"kind": "DaemonSet"}, "kind"),
    ({"functions": {"manual": {"maxScale": 0}}}, "maxScale"),
    # the classifier is a singleton: its node digests live in its process (docs/reactor.md)
    ({"functions": {"classifier": {"maxScale": 3}}}, "classifier/maxScale|classifier.maxScale"),
    ({"functions": {"classifier": {"minScale": 0}}}, "classifier/minScale|classifier.minScale"),
    ({"manual": {"allowedNamespaces": ["Not A Namespace"]}}, "allowedNamespaces"),
    ({"kdesched": {"sweepIntervalSeconds": "often"}}, "sweepIntervalSeconds"),
    ({"kdesched": {"settleSecondz": 1}}, "settleSecondz"),
    ({"deschedulingInterval": "five minutes"}, "deschedulingInterval"),
    ({"resources": {"limits": {"memory": "lots"}}}, "memory"),
    ({"monitoring": {"prometheusRule": {"enabled": "true"}}}, "enabled"),
]


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize(("values", "named"), WRONG, ids=[n.split("|")[0] for _, n in WRONG])
def test_a_wrong_value_is_refused_naming_it(helm: Path, binary: str, values: dict[str, Any], named: str) -> None:
    done = template_raw(helm, values, binary=binary)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert any(name in done.stderr for name in named.split("|")), done.stderr  # Helm 4's path|Helm 3's


def test_every_value_is_typed_in_the_schema() -> None:
    """Every key of values.yaml (at every level) has a schema entry with a type, and the schema
    closes every object it describes (a misspelt key is refused)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        assert "type" in node or "oneOf" in node or "anyOf" in node, f"{path}: untyped"
        if isinstance(value, dict) and "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or 'the top level'}: open object"
            for key, sub in value.items():
                assert key in node["properties"], f"{path}.{key}: not in values.schema.json"
                walk(sub, node["properties"][key], f"{path}.{key}")

    assert schema.get("additionalProperties") is False
    walk(values, schema, "")


@pytest.mark.parametrize("binary", BINARIES)
def test_contradictions_fail_with_a_message(helm: Path, binary: str) -> None:
    both = template_raw(helm, {"policy": "kind: DeschedulerPolicy", "deschedulerPolicy": {"profiles": []}}, binary=binary)
    assert both.returncode != 0 and "policy and deschedulerPolicy are both set" in both.stderr
    kind = template_raw(helm, {"kind": "CronJob", "mode": "standalone"}, binary=binary)
    assert kind.returncode != 0 and 'kind: "CronJob"' in kind.stderr
    upstream_image = template_raw(helm, {"image": {"repository": "registry.k8s.io/descheduler/descheduler"}}, binary=binary)
    assert upstream_image.returncode != 0 and "image.repository" in upstream_image.stderr
    deckhouse = template_raw(helm, {"policy": (REPO / "examples/policies/deckhouse-values.yaml").read_text(),
                                    "kdesched": {"dryRun": True}}, binary=binary)
    assert deckhouse.returncode != 0 and "kdesched: the policy is a" in deckhouse.stderr
    for text in ("- a list", "foo: ["):
        broken = template_raw(helm, {"policy": text}, binary=binary)
        assert broken.returncode != 0 and "policy: not a YAML mapping" in broken.stderr, broken.stderr
    empty = template(helm, {"policy": {}}, binary=binary)  # an empty mapping, like "", is the default policy
    assert rendered_policy(empty) == (CHART / "files" / "default-policy.yaml").read_text()


MT_INGRESS = "http://broker-ingress.knative-eventing.svc.cluster.local/kdesched/kdesched"


def classifier_broker_url(objs: list[dict[str, Any]]) -> str:
    env = find_obj(objs, "Service", "classifier")["spec"]["template"]["spec"]["containers"][0]["env"]
    return str(next(e["value"] for e in env if e["name"] == "KDESCHED_BROKER_URL"))


@pytest.mark.parametrize("binary", BINARIES)
def test_a_broker_class_needs_its_broker_url(helm: Path, binary: str) -> None:
    """The classifier posts its extra events (a delete plus an add, several changes in one write, the
    re-sync's catch-up) to KDESCHED_BROKER_URL, which defaults to the multi-tenant channel broker's
    ingress. A Broker of another class (Kafka, RabbitMQ) is not served there: every such event would
    fail its hand-over and end in the dead-letter sink. So another class needs its URL, or no install."""
    done = template_raw(helm, {"knative": {"brokerClass": "Kafka"}}, binary=binary)
    assert done.returncode != 0, "a Kafka Broker, and the classifier posting to the MT broker's ingress"
    assert "knative.brokerClass" in done.stderr and "knative.brokerURL" in done.stderr, done.stderr
    url = "http://kafka-broker-ingress.knative-eventing.svc.cluster.local/kdesched/kdesched"
    assert classifier_broker_url(template(helm, {"knative": {"brokerClass": "Kafka", "brokerURL": url}},
                                          binary=binary)) == url
    for values in ({}, {"knative": {"brokerClass": "MTChannelBasedBroker"}}):
        assert classifier_broker_url(template(helm, values, binary=binary)) == MT_INGRESS
    template(helm, {"mode": "standalone", "knative": {"brokerClass": "Kafka"}}, binary=binary)  # no Broker there


def rebalance_scale_and_cache(objs: list[dict[str, Any]]) -> tuple[str, str]:
    template_ = find_obj(objs, "Service", "rebalance")["spec"]["template"]
    env = template_["spec"]["containers"][0]["env"]
    cache = next(e["value"] for e in env if e["name"] == "KDESCHED_CACHE")
    return str(template_["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"]), str(cache)


@pytest.mark.parametrize("binary", BINARIES)
def test_a_rebalance_cache_scaled_to_zero_is_refused(helm: Path, binary: str) -> None:
    """functions.rebalance.cache keeps a warm watch cache in the rebalance function; scaled to zero
    (minScale 0, the default) it is never warm: every cold start LISTs and watches every kind again,
    and its first runs LIST anyway, so the cache adds a start-up's work and saves nothing. The chart
    cannot tell a minScale the operator chose from the default, so it neither guesses nor raises it
    silently (an always-on pod the values do not show): it refuses, naming both values and the fix."""
    for values in ({"cache": True}, {"cache": True, "minScale": 0}):
        done = template_raw(helm, {"functions": {"rebalance": values}}, binary=binary)
        assert done.returncode != 0, f"{values}: a warm cache that is never warm"
        assert "functions.rebalance.cache" in done.stderr and "functions.rebalance.minScale" in done.stderr, done.stderr
        assert "minScale: 1" in done.stderr and "cache: false" in done.stderr, done.stderr
    warm = template(helm, {"functions": {"rebalance": {"cache": True, "minScale": 1}}}, binary=binary)
    assert rebalance_scale_and_cache(warm) == ("1", "1")
    assert rebalance_scale_and_cache(template(helm, binary=binary)) == ("0", "0")
    assert rebalance_scale_and_cache(template(helm, {"functions": {"rebalance": {"minScale": 1}}},
                                              binary=binary)) == ("1", "0")
    # no function runs outside the knative mode: its values mean nothing there
    template(helm, {"mode": "standalone", "functions": {"rebalance": {"cache": True}}}, binary=binary)


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize(("drain", "grace"), [(None, 30), (60, 75), (7.5, 23)])
def test_the_grace_period_follows_the_drain(helm: Path, binary: str, drain: float | None, grace: int) -> None:
    """``drainSeconds`` is serve's ``--drain-seconds`` and sets the pod's grace period to the drain
    plus 15 s: after the drain serve stops HTTP and releases the leader Lease
    (SHUTDOWN_MARGIN_SECONDS), which must happen before the kubelet's SIGKILL or every standby
    waits a whole Lease duration."""
    values: dict[str, Any] = {"mode": "standalone", **({"drainSeconds": drain} if drain is not None else {})}
    spec = find_obj(template(helm, values, binary=binary), "Deployment", "kdesched")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert args[args.index("--drain-seconds") + 1] == f"{drain if drain is not None else DEFAULT_DRAIN_SECONDS:g}"
    assert spec["terminationGracePeriodSeconds"] == grace
    assert grace > (drain or DEFAULT_DRAIN_SECONDS) + SHUTDOWN_MARGIN_SECONDS


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize("extra", [["--drain-seconds", "60"], ["--drain-seconds=60"]])
def test_a_drain_in_extra_args_is_refused_naming_the_value(helm: Path, binary: str, extra: list[str]) -> None:
    """A drain given in extraArgs would not reach the grace period: rendering fails, naming drainSeconds."""
    done = template_raw(helm, {"mode": "standalone", "extraArgs": extra}, binary=binary)
    assert done.returncode != 0 and "drainSeconds" in done.stderr, done.stderr


# -- one source of truth: the chart renders knative/ --------------------------------------------------

def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed: the chart is not compared with knative/")
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what Helm alone adds: its labels and the policy checksum annotation."""
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].get("labels") or {}
    for key in HELPER_LABELS:
        labels.pop(key, None)
    template_meta = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    annotations = template_meta.get("annotations") or {}
    annotations.pop(CHECKSUM, None)
    if "annotations" in template_meta and not annotations:
        del template_meta["annotations"]
    return obj


def assert_same_objects(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> None:
    ours = {k: comparable(v) for k, v in by_identity(chart).items() if v["kind"] not in CHART_ONLY}
    theirs = {k: v for k, v in by_identity(kustomized).items() if v["kind"] not in KUSTOMIZE_ONLY}
    assert sorted(ours) == sorted(theirs), (
        f"only in the chart: {sorted(set(ours) - set(theirs))}; only in knative/: {sorted(set(theirs) - set(ours))}")
    for key, obj in theirs.items():
        assert ours[key] == obj, f"{key} differs:\nchart:     {json.dumps(ours[key], sort_keys=True)}\n" \
                                 f"knative/:  {json.dumps(obj, sort_keys=True)}"


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize(("values", "directory"), [
    ({}, KNATIVE),
    ({"dryRun": True}, KNATIVE / "dry-run"),
    ({"mode": "standalone"}, KNATIVE / "standalone"),
], ids=["knative", "dry-run", "standalone"])
def test_chart_renders_the_objects_of_knative(helm: Path, binary: str, values: dict[str, Any], directory: Path) -> None:
    assert_same_objects(template(helm, values, binary=binary), kustomize(directory))


def test_chart_monitoring_renders_knative_monitoring(helm: Path) -> None:
    objs = template(helm, {"networkPolicy": {"enabled": False},
                           "monitoring": {"prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}})
    monitoring = [o for o in objs if o["kind"] == "PrometheusRule" or o["metadata"]["name"] == "kdesched-dashboard"]
    assert_same_objects(monitoring, kustomize(KNATIVE / "monitoring"))
    dashboard = find_obj(objs, "ConfigMap", "kdesched-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # what the Grafana sidecar loads


def test_chart_only_objects_are_the_network_policies(helm: Path) -> None:
    """What the comparison leaves out is exactly the NetworkPolicies, and only in the chart; and the
    Namespace, which knative/ creates and a Helm release does not own."""
    objs = template(helm)
    assert {o["kind"] for o in objs} - {o["kind"] for o in kustomize(KNATIVE)} == CHART_ONLY
    assert not [o for o in template(helm, {"networkPolicy": {"enabled": False}}) if o["kind"] in CHART_ONLY]


@pytest.mark.parametrize("name", ["alerts.yaml", "kdesched-dashboard.json"])
def test_chart_files_are_knative_monitoring_files(name: str) -> None:
    """The chart carries copies (a chart cannot read outside its directory): byte for byte the same."""
    chart_copy = CHART / "files" / name
    assert chart_copy.read_bytes() == (KNATIVE / "monitoring" / name).read_bytes(), (
        f"charts/kdesched/files/{name} differs from knative/monitoring/{name}: copy it over")


def test_chart_default_policy_is_knative_policy() -> None:
    shipped = yaml.safe_load((KNATIVE / "common" / "policy.yaml").read_text())["data"]["policy.yaml"]
    assert (CHART / "files" / "default-policy.yaml").read_text() == shipped, (
        "charts/kdesched/files/default-policy.yaml differs from knative/common/policy.yaml's policy.yaml")

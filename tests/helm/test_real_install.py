"""The chart installed with the real Helm 3 and 4 on the real control plane (etcd + kube-apiserver
v1.24 with RBAC, the scheduler, the controller-manager and the kubelet stand-in of tests/realk8s).

What runs, and what cannot: there is no container runtime here, so the image the chart names never
runs. Where a test needs kdesched working it runs **the command line the chart rendered** as a local
process against the real API server: the container's args and env as the API server stored them
(read back from the Deployment / CronJob Helm created), the policy file as the chart's ConfigMap holds
it, and the identity of the service account the chart created (a TokenRequest token for it, what a
pod's projected token is). Only what a pod gets from its surroundings is swapped: the in-cluster
config becomes that kubeconfig, the mounted policy path a local copy, the HTTP port a free one, and
the downward-API env (POD_NAME, POD_NAMESPACE) the name of the pod the ReplicaSet created and its
namespace. So "serve leads and acts on a taint" and "the Job evicts what `kdesched run` would" are
shown for exactly what the chart deploys, with exactly its permissions.

Also here: the knative mode applied with a server-side dry run against the Knative CRDs (and, with
Helm 4's server-side apply, installed and uninstalled for real: nothing reconciles the Knative
objects, the API server only stores them); `helm upgrade` with changed values, `helm rollback`,
`helm uninstall` leaving no object of the release.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from tests.helm import CHART, REPO, run_helm, values_file
from tests.realk8s import fixtures as shared
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc, free_port
from tests.realk8s.serve_stories import (
    leader,
    placement,
    service_account_kubeconfig,
    taint,
    uids,
    wait_placement,
)

NS = "kdesched"
SCHEMAS = REPO / "tests" / "deploy" / "schemas"
POLICY_PATH = "/etc/kdesched/policy.yaml"
READY_TARGET = 30.0  # seconds from `helm install` to serve Ready and leading (the target)

_fresh = pytest.fixture(autouse=True)(shared.fresh_cluster)


@pytest.fixture(autouse=True)
def _uninstall(helm: Path, control_plane: ControlPlane, _fresh: None) -> Iterator[None]:
    """Whatever a test installed is uninstalled before the cluster reset (which does not know every
    kind the chart creates: CronJobs, NetworkPolicies, the Knative objects)."""
    yield
    run_helm(helm, "helm3", "uninstall", "kdesched", "-n", NS, "--ignore-not-found", "--wait",
             kubeconfig=control_plane.admin_kubeconfig)


@pytest.fixture
def real(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet,
         cluster: Cluster) -> Cluster:
    return cluster


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)


def helm_ok(helm: Path, binary: str, cp: ControlPlane, *args: str) -> str:
    done = run_helm(helm, binary, *args, kubeconfig=cp.admin_kubeconfig)
    assert done.returncode == 0, f"{binary} {' '.join(args[:2])}: {done.stderr}\n{done.stdout}"
    return done.stdout


def get(cluster: Cluster, path: str) -> dict[str, Any]:
    obj = cluster.get(path)
    assert obj is not None, f"{path}: not found"
    return obj


# -- running what the chart rendered ------------------------------------------------------------------

class Rendered:
    """The chart's container command line, as stored in the API server, run as a local process."""

    def __init__(self, cp: ControlPlane, cluster: Cluster, pod_spec: dict[str, Any], workdir: Path,
                 pod_name: str = "") -> None:
        self.cp, self.cluster, self.workdir = cp, cluster, workdir
        (container,) = pod_spec["containers"]
        self.container = container
        assert container["command"] == ["kdesched"], container["command"]
        self.sa = pod_spec["serviceAccountName"]
        self.kubeconfig = service_account_kubeconfig(cp, cluster, workdir / f"{self.sa}.kubeconfig", NS, self.sa)
        configmap = get(cluster, f"/api/v1/namespaces/{NS}/configmaps/kdesched-policy")
        self.policy = workdir / "policy.yaml"
        self.policy.write_text(configmap["data"]["policy.yaml"])
        self.port = free_port()
        self.pod_name = pod_name
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "kdesched.log"

    def argv(self, extra: tuple[str, ...] = ()) -> list[str]:
        args = [str(self.policy) if a == POLICY_PATH else a for a in self.container["args"]]
        if "--port" in args:
            args[args.index("--port") + 1] = str(self.port)
            args += ["--host", "127.0.0.1"]
        return [sys.executable, "-m", "kdesched", *args, "--kubeconfig", str(self.kubeconfig), *extra]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBERNETES_SERVICE_HOST", "POD_NAMESPACE", "POD_NAME", "KUBECONFIG")
               and not k.startswith("KDESCHED_")}
        for item in self.container.get("env") or ():
            if "value" in item:
                env[item["name"]] = str(self.policy) if item["value"] == POLICY_PATH else item["value"]
            else:
                field = item["valueFrom"]["fieldRef"]["fieldPath"]
                env[item["name"]] = {"metadata.namespace": NS, "metadata.name": self.pod_name}[field]
        return env

    def start(self) -> Rendered:
        out = open(self.log, "wb")  # noqa: SIM115 - closed by the process' end
        self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT, env=self.env(), cwd=str(REPO),
                                     start_new_session=True)
        out.close()
        return self

    def run(self, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(extra), capture_output=True, text=True, env=self.env(), cwd=str(REPO),
                              timeout=timeout, check=False)

    def readyz(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def processes() -> Iterator[list[Rendered]]:
    started: list[Rendered] = []
    yield started
    for p in started:
        p.stop()


def release_objects(cp: ControlPlane, release: str, namespace: str = NS) -> list[str]:
    """Every object in the cluster labelled as the release's, across all listable kinds (one kubectl call)."""
    kinds = kubectl(cp.admin_kubeconfig, "api-resources", "--verbs=list", "-o", "name")
    assert kinds.returncode == 0, kinds.stderr
    names = ",".join(k for k in kinds.stdout.split() if k not in ("events", "events.events.k8s.io"))
    done = kubectl(cp.admin_kubeconfig, "get", names, "-A", "-l", f"app.kubernetes.io/instance={release}",
                   "-o", "name", "--ignore-not-found")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def manifest_objects(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def assert_gone(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    still = []
    for obj in objects:
        done = kubectl(cp.admin_kubeconfig, "get", f"{obj['kind']}.{obj['apiVersion'].split('/')[0] if '/' in obj['apiVersion'] else ''}".rstrip("."),
                       obj["metadata"]["name"], "-n", obj["metadata"].get("namespace") or NS, "--ignore-not-found", "-o", "name")
        assert done.returncode == 0, done.stderr
        still += done.stdout.split()
    assert not still, f"left behind after helm uninstall: {still}"


# -- the knative mode on the API server with the Knative CRDs -----------------------------------------

@pytest.fixture(scope="module")
def knative_crds(control_plane: ControlPlane) -> list[str]:
    """The Knative CRDs (tests/deploy/schemas, plus EventPolicy from the Knative kit when it is there),
    installed once (reset() leaves CRDs alone). Returns the kinds served."""
    from tests.realknative.dataplane import find_knative

    files = sorted(SCHEMAS.glob("*.yaml"))
    try:
        kit = find_knative()
    except RuntimeError:
        kit = None
    if kit is not None and (kit / "crds" / "eventpolicy.yaml").is_file():
        files.append(kit / "crds" / "eventpolicy.yaml")
    kc = control_plane.admin_kubeconfig
    done = kubectl(kc, "apply", "--server-side", *[a for f in files for a in ("-f", str(f))])
    assert done.returncode == 0, done.stderr
    crds = [line.split()[0] for line in done.stdout.splitlines()]
    done = kubectl(kc, "wait", "--for", "condition=Established", "--timeout=60s", *crds)
    assert done.returncode == 0, done.stderr
    return crds


@pytest.mark.parametrize("binary", ["helm3", "helm"])
def test_knative_mode_passes_a_server_side_dry_run(helm: Path, binary: str, control_plane: ControlPlane,
                                                   cluster: Cluster, knative_crds: list[str], tmp_path: Path) -> None:
    cluster.namespace(NS)
    event_policy = any(c.startswith("customresourcedefinition.apiextensions.k8s.io/eventpolicies.") for c in knative_crds)
    values = {"eventPolicy": {"enabled": event_policy}, "manual": {"allowedNamespaces": ["ops"]},
              "networkPolicy": {"metricsNamespaces": ["monitoring"]}}
    rendered = run_helm(helm, binary, "template", "kdesched", str(CHART), "-n", NS, "-f", str(values_file(tmp_path, values)))
    assert rendered.returncode == 0, rendered.stderr
    objs = manifest_objects(rendered.stdout)
    done = kubectl(control_plane.admin_kubeconfig, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                   "-f", "-", stdin=rendered.stdout)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == len(objs) and "(server dry run)" in done.stdout
    kinds = {o["kind"] for o in objs}
    assert {"Service", "Broker", "Trigger", "ApiServerSource", "PingSource", "NetworkPolicy"} <= kinds
    assert ("EventPolicy" in kinds) is event_policy
    # and the check can fail: a misspelt field in one Knative Service is refused by the CRD's schema
    broken = rendered.stdout.replace("containerConcurrency:", "containerConcurency:", 1)
    refused = kubectl(control_plane.admin_kubeconfig, "apply", "--server-side", "--dry-run=server", "--validate=strict",
                      "-f", "-", stdin=broken)
    assert refused.returncode != 0 and "containerConcurency" in refused.stderr


def test_knative_mode_installs_and_uninstalls_with_helm_4(helm: Path, control_plane: ControlPlane, cluster: Cluster,
                                                          knative_crds: list[str]) -> None:
    """Helm 4 applies server-side by default: the Knative objects are stored as rendered (no Knative
    controller runs, so nothing becomes Ready: --wait is not used), and uninstall removes them all."""
    out = helm_ok(helm, "helm", control_plane, "install", "kdesched", str(CHART), "-n", NS, "--create-namespace")
    assert "mode knative" in out
    manifest = manifest_objects(helm_ok(helm, "helm", control_plane, "get", "manifest", "kdesched", "-n", NS))
    assert len(release_objects(control_plane, "kdesched")) == len(manifest)
    trigger = get(cluster, f"/apis/eventing.knative.dev/v1/namespaces/{NS}/triggers/taints")
    assert trigger["spec"]["subscriber"]["ref"]["name"] == "taints"
    assert trigger["metadata"]["managedFields"][0]["operation"] == "Apply"  # Helm 4: server-side apply
    helm_ok(helm, "helm", control_plane, "uninstall", "kdesched", "-n", NS, "--wait")
    assert release_objects(control_plane, "kdesched") == []
    assert_gone(control_plane, manifest)


# -- standalone: installed with Helm 3, serve leads and acts on a taint --------------------------------

@pytest.mark.parametrize("binary", ["helm3", "helm"])
def test_standalone_install_serve_leads_within_30s_and_acts_on_a_taint(
        helm: Path, binary: str, control_plane: ControlPlane, real: Cluster, processes: list[Rendered],
        tmp_path: Path) -> None:
    """helm install (mode standalone; Helm 3 as the issue asks, and Helm 4), then the Deployment's command line run locally as the chart's
    service account: Ready (/readyz 200) and holding the Lease kdesched-leader within 30 s of the
    start of `helm install`; a taint on gpu-1 moves both shop pods to node-1."""
    story = taint(control_plane, real)  # nodes node-1, gpu-1; shop x2 on gpu-1 (the seed taint story)
    before = uids(real, "shop")
    started = time.monotonic()
    out = helm_ok(helm, binary, control_plane, "install", "kdesched", str(CHART), "-n", NS, "--create-namespace",
                  "--set", "mode=standalone")
    installed = time.monotonic() - started
    assert "mode standalone" in out
    deployment = get(real, f"/apis/apps/v1/namespaces/{NS}/deployments/kdesched")
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["containers"][0]["args"][:3] == ["serve", "--policy", POLICY_PATH]
    # the controllers and the kubelet stand-in act on the Deployment as on any: its pod gets a name to use
    pod = control_plane.wait_for(lambda: next(iter(real.pods(NS, "app.kubernetes.io/component=serve")), None), 30,
                                 what="the Deployment's pod")
    serve = Rendered(control_plane, real, pod_spec, tmp_path, pod_name=pod["metadata"]["name"]).start()
    processes.append(serve)

    def leading() -> bool:
        assert serve.alive(), f"serve exited {serve.proc.returncode if serve.proc else '?'}:\n{serve.log.read_text()[-3000:]}"
        holder = leader(real) or ""
        # serve's identity is $POD_NAME plus a random suffix (a restarted pod is a new candidate)
        return serve.readyz() == 200 and holder.startswith(serve.pod_name + "-")
    try:
        control_plane.wait_for(leading, READY_TARGET, interval=0.1, what="serve Ready and leading")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: /readyz {serve.readyz()}, leader {leader(real)!r}, log:\n"
                             f"{serve.log.read_text()[-3000:]}") from exc
    ready = time.monotonic() - started
    print(f"\n{binary} install {installed:.2f} s; serve Ready and leading {ready:.2f} s after the install started")
    assert ready <= READY_TARGET
    lease = get(real, f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kdesched-leader")
    assert lease["spec"]["holderIdentity"].startswith(pod["metadata"]["name"])
    assert placement(real, "shop") == {"gpu-1": 2}  # nothing moved before the change
    story.change()
    wait_placement(control_plane, real, "shop", story.done, timeout=60, what="shop moved off the tainted gpu-1")
    assert len(before - uids(real, "shop")) == 2
    assert "dev.kdesched.node.taints.changed" in serve.log.read_text()
    # one Descheduled Event per eviction, written under the chart's service account (its RBAC allows
    # events.k8s.io create, nothing more)
    control_plane.wait_for(lambda: len([e for e in real.events("default") if e.get("action") == "Descheduled"
                                        and e.get("reason") == "RemovePodsViolatingNodeTaints"]) == 2, 10,
                           what="two Descheduled Events")


# -- cronjob: the Job's command evicts what `kdesched run` would -------------------------------------------

@pytest.mark.parametrize("one_off", [False, True], ids=["cronjob", "one-off-job"])
def test_cronjob_run_evicts_what_kdesched_run_would(helm: Path, control_plane: ControlPlane, real: Cluster,
                                                    tmp_path: Path, one_off: bool) -> None:
    """helm3 install (mode cronjob, as a CronJob or a one-off Job). No Job controller runs here, so the
    job's pod command is run locally as the chart's service account. First the same command with
    --dry-run says what `kdesched run` would evict; then the real run evicts exactly those pods."""
    story = taint(control_plane, real)
    story.change()  # gpu-1 is tainted before the run: both shop pods violate it
    helm_ok(helm, "helm3", control_plane, "install", "kdesched", str(CHART), "-n", NS, "--create-namespace",
            "--set", "mode=cronjob", "--set", "schedule=*/5 * * * *", "--set", f"cronjob.oneOff={str(one_off).lower()}")
    if one_off:
        pod_spec = get(real, f"/apis/batch/v1/namespaces/{NS}/jobs/kdesched-run-1")["spec"]["template"]["spec"]
    else:
        cron = get(real, f"/apis/batch/v1/namespaces/{NS}/cronjobs/kdesched")
        assert cron["spec"]["schedule"] == "*/5 * * * *"
        pod_spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    job = Rendered(control_plane, real, pod_spec, tmp_path)
    assert job.container["args"][:3] == ["run", "--policy", POLICY_PATH]
    planned = job.run("--dry-run", "--output", "json")
    assert planned.returncode == 0, planned.stderr
    would = {(e["namespace"], e["pod"]) for e in json.loads(planned.stdout)["evictions"]}
    assert len(would) == 2 and {ns for ns, _ in would} == {"default"}
    done = job.run("--output", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {(e["namespace"], e["pod"]) for e in report["evictions"]} == would
    wait_placement(control_plane, real, "shop", story.done, timeout=60, what="shop replaced on node-1")
    # the evicted pods are gone once the stand-in kubelet has ended them (a loaded machine: a few seconds)
    control_plane.wait_for(lambda: not would & {("default", p["metadata"]["name"])
                                                for p in real.pods("default", "app=shop")}, 30,
                           what="the evicted shop pods gone")


# -- upgrade, rollback, uninstall ---------------------------------------------------------------------

def serve_args(cluster: Cluster) -> list[str]:
    deployment = get(cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/kdesched")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("binary", ["helm3", "helm"])
def test_upgrade_rollback_uninstall(helm: Path, binary: str, control_plane: ControlPlane, cluster: Cluster,
                                    tmp_path: Path) -> None:
    base = {"mode": "standalone"}
    helm_ok(helm, binary, control_plane, "install", "kdesched", str(CHART), "-n", NS, "--create-namespace",
            "-f", str(values_file(tmp_path, base, "v1.yaml")))
    first = manifest_objects(helm_ok(helm, binary, control_plane, "get", "manifest", "kdesched", "-n", NS))
    assert "--dry-run" not in serve_args(cluster)
    policy_v1 = get(cluster, f"/api/v1/namespaces/{NS}/configmaps/kdesched-policy")["data"]["policy.yaml"]

    changed = {**base, "dryRun": True, "replicas": 2, "kdesched": {"sweepIntervalSeconds": 600},
               "monitoring": {"dashboard": {"enabled": True}}, "manual": {"allowedNamespaces": ["ops"]}}
    helm_ok(helm, binary, control_plane, "upgrade", "kdesched", str(CHART), "-n", NS, "-f", str(values_file(tmp_path, changed, "v2.yaml")))
    second = manifest_objects(helm_ok(helm, binary, control_plane, "get", "manifest", "kdesched", "-n", NS))
    assert "--dry-run" in serve_args(cluster)
    assert get(cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/kdesched")["spec"]["replicas"] == 2
    policy_v2 = get(cluster, f"/api/v1/namespaces/{NS}/configmaps/kdesched-policy")["data"]["policy.yaml"]
    assert yaml.safe_load(policy_v2)["kdesched"]["sweepIntervalSeconds"] == 600
    get(cluster, f"/api/v1/namespaces/{NS}/configmaps/kdesched-dashboard")
    netpol = get(cluster, f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/kdesched-serve")
    assert netpol["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["ops"]

    helm_ok(helm, binary, control_plane, "rollback", "kdesched", "1", "-n", NS)
    assert "--dry-run" not in serve_args(cluster)
    assert get(cluster, f"/apis/apps/v1/namespaces/{NS}/deployments/kdesched")["spec"]["replicas"] == 1
    assert get(cluster, f"/api/v1/namespaces/{NS}/configmaps/kdesched-policy")["data"]["policy.yaml"] == policy_v1
    assert cluster.get(f"/api/v1/namespaces/{NS}/configmaps/kdesched-dashboard") is None
    history = helm_ok(helm, binary, control_plane, "history", "kdesched", "-n", NS, "-o", "json")
    assert [r["revision"] for r in json.loads(history)] == [1, 2, 3]

    helm_ok(helm, binary, control_plane, "uninstall", "kdesched", "-n", NS, "--wait")
    assert release_objects(control_plane, "kdesched") == []
    assert_gone(control_plane, first + second)
    # Helm's own release records go too (the namespace stays: --create-namespace does not own it)
    secrets = cluster.api.get(f"/api/v1/namespaces/{quote(NS)}/secrets", labelSelector="owner=helm")["items"]
    assert secrets == []

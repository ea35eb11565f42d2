"""``kdesched serve`` on the real control plane: the process, its policy, RBAC and the seed stories.

Why: tests/realk8s/test_serve.py and bench/bench_reaction.py drive the same stories (scale-out,
recovery, taint: examples/seed-*) with the real API server, the real scheduler placing the
replacements and the kubelet stand-in marking them Ready; this module sets them up and runs
``kdesched serve`` as a real subprocess (its own interpreter, signals, exit codes), so what is
measured and asserted is the shipped command. The fixture (controlplane.py, cluster.py) belongs to
the real-control-plane tier; these helpers only use it.

There is no node lifecycle controller here (the kit's README), so the writes it would make are made
by the stories themselves: the ``not-ready`` taints of a NotReady node, the ``unschedulable`` taint of a
cordon, the taint manager's eviction of a NotReady node's pods.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

import yaml

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import ControlPlane, now_rfc3339

REPO = Path(__file__).resolve().parents[2]
NS = "kdesched"
GPU = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}  # a maintenance taint the test pods do not tolerate
SERVE_SA = f"system:serviceaccount:{NS}:kdesched"
UNINITIALIZED = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
NOT_READY = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
             {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

# kdesched's default policy in v1alpha2 (knative/common/policy.yaml holds the same), plus a kdesched
# block tuned for tests: short Leases so a killed leader is replaced within seconds.
DEFAULT_PROFILES = yaml.safe_load((REPO / "knative/common/policy.yaml").read_text())["data"]["policy.yaml"]


def policy_text(**kdesched: Any) -> str:
    doc = yaml.safe_load(DEFAULT_PROFILES)
    doc["kdesched"] = {**doc.get("kdesched", {}), "leaseDurationSeconds": 5, "leaseWaitSeconds": 5, **kdesched}
    return yaml.safe_dump(doc, sort_keys=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Serve:
    """One ``kdesched serve`` subprocess (``python -m kdesched serve``) and its log file."""

    kubeconfig: Path
    policy: Path
    identity: str
    namespace: str = NS
    sweep_interval: float = 0
    extra: tuple[str, ...] = ()
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kdesched-serve-")))
    pythonpath: str = ""  # another checkout's shared/ and functions/ first (bench baselines)
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self, *, append: bool = False) -> Serve:
        """Start it (``append``: its log goes on after an earlier run's, as :meth:`restart` does)."""
        self.port = free_port()
        self.log_path = self.workdir / f"{self.identity}.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBERNETES_SERVICE_HOST", "POD_NAMESPACE", "KDESCHED_LEASE_NAMESPACE", "KUBECONFIG")}
        env["KDESCHED_LEASE_NAMESPACE"] = self.namespace  # for a baseline without --lease-namespace
        namespace_flag: tuple[str, ...] = ("--lease-namespace", self.namespace)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
            namespace_flag = ()
        self._log = open(self.log_path, "ab" if append else "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kdesched", "serve", "--kubeconfig", str(self.kubeconfig), "--policy",
             str(self.policy), *namespace_flag, "--identity", self.identity, "--host", "127.0.0.1",
             "--port", str(self.port), "--sweep-interval", str(self.sweep_interval), *self.extra],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO), start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> Serve:
        """Start it again after it exited, as its Deployment's restart policy would (same identity and
        kubeconfig; the log goes on)."""
        assert self.proc is not None and self.proc.poll() is not None, "restart() after it exited"
        if not self._log.closed:
            self._log.close()
        return self.start(append=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if hasattr(self, "log_path") else ""

    def wait_exit(self, timeout: float = 60) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        self._log.close()
        return code

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40) -> int | None:
        """Send ``sig`` (SIGKILL = a crash) and wait; None if it was not running."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not self._log.closed:
            self._log.close()
        return self.proc.returncode

    def readyz(self) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of serve's /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for line in text.splitlines():
            if line.startswith(name + ("{" + want + "}" if want else " ")) or (
                    want and line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items())):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def evictions_logged(self) -> int:
        """Evictions this process reported (its per-event and sweep log lines)."""
        total = 0
        for line in self.log().splitlines():
            if " eviction(s), " in line:
                try:
                    total += int(line.rsplit(": ", 1)[1].split(" eviction(s)")[0])
                except (IndexError, ValueError):
                    continue
        return total


def leader(cluster: Cluster, namespace: str = NS) -> str | None:
    lease = cluster.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/kdesched-leader")
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    return str(holder) if holder else None


def wait_leading(cp: ControlPlane, cluster: Cluster, s: Serve, timeout: float = 60) -> None:
    """Until ``s`` holds the leader Lease and its readiness says it is watching (fails early if it exited)."""
    def check() -> bool:
        assert s.alive(), f"serve {s.identity} exited:\n{s.log()[-3000:]}"
        status, why = s.readyz()
        return leader(cluster) == s.identity and status == 200 and "leader, watching" in why
    cp.wait_for(check, timeout, what=f"{s.identity} to lead and watch")


def install_standalone_rbac(cluster: Cluster) -> None:
    """The namespace, ServiceAccount, ClusterRole/Role and bindings of knative/common, exactly as shipped."""
    for path in ("knative/common/namespace.yaml", "knative/common/rbac-evictor.yaml"):
        for doc in yaml.safe_load_all((REPO / path).read_text()):
            if doc:
                cluster.create(doc)


def service_account_kubeconfig(cp: ControlPlane, cluster: Cluster, path: Path, namespace: str = NS,
                               name: str = "kdesched", seconds: int = 3600) -> Path:
    """A kubeconfig that authenticates AS the service account, with a real token from the TokenRequest
    API (what a pod's projected token is), rather than the admin impersonating it: the path a
    deployed ``serve`` takes, independent of the client's support for ``as`` / ``as-groups``
    (which the Python ``kubernetes`` client alone ignores; ``whoami`` checks who the server sees)."""
    import base64

    review = cluster.api.create(f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(name)}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}})
    token = review["status"]["token"]
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "realk8s", "cluster": {"server": cp.url, "certificate-authority-data": ca}}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "realk8s", "user": "sa", "namespace": namespace}}]}
    path.write_text(yaml.safe_dump(doc))
    return path


def whoami(kubeconfig: Path) -> str:
    """The user the API server sees for ``kubeconfig`` through kdesched's own client (a
    SelfSubjectAccessReview-free check: the 403 message of a request the identity may not make names it)."""
    from kdesched.kube.client import KubeClient
    from kdesched.kube.errors import Forbidden

    with KubeClient.from_config(str(kubeconfig)) as client:
        try:
            client.get_raw("PriorityClass", "kdesched-whoami-probe")
        except Forbidden as exc:
            return str(exc)
    return "allowed (admin?)"


# -- node writes (what the kubelet, the node controller and kubectl do) -----------------------------
def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


def set_taints(cluster: Cluster, node: str, taints: Iterable[Mapping[str, str]]) -> None:
    cluster.api.patch(node_path(node), {"spec": {"taints": [dict(t) for t in taints] or None}})


def set_unschedulable(cluster: Cluster, node: str, value: bool) -> None:
    cluster.api.patch(node_path(node), {"spec": {"unschedulable": value or None}})


def set_ready(cluster: Cluster, node: str, ready: bool) -> None:
    stamp = now_rfc3339()
    cluster.api.patch(node_path(node) + "/status", {"status": {"conditions": [{
        "type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}, kind="strategic")


def set_labels(cluster: Cluster, node: str, labels: Mapping[str, str | None]) -> None:
    cluster.api.patch(node_path(node), {"metadata": {"labels": dict(labels)}})


# -- pods ----------------------------------------------------------------------------------------------
def app_pods(cluster: Cluster, app: str, namespace: str = "default") -> list[dict[str, Any]]:
    return [p for p in cluster.pods(namespace, f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def placement(cluster: Cluster, app: str, namespace: str = "default") -> dict[str, int]:
    """Ready pods of ``app`` per node."""
    out: dict[str, int] = {}
    for p in app_pods(cluster, app, namespace):
        if is_ready(p):
            node = p["spec"].get("nodeName") or ""
            out[node] = out.get(node, 0) + 1
    return out


def wait_placement(cp: ControlPlane, cluster: Cluster, app: str, want: Callable[[dict[str, int]], bool],
                   timeout: float = 60, interval: float = 0.05, what: str = "") -> dict[str, int]:
    def check() -> dict[str, int] | None:
        got = placement(cluster, app)
        return got if want(got) else None
    result: dict[str, int] = cp.wait_for(check, timeout, interval=interval, what=what or f"placement of {app}")
    return result


def uids(cluster: Cluster, app: str) -> set[str]:
    return {p["metadata"]["uid"] for p in app_pods(cluster, app)}


def write_file(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


# -- the seed stories (examples/seed-*) -------------------------------------------------------------
@dataclass
class Story:
    """A cluster set up before ``serve`` starts; ``change()`` makes the change and returns the
    ``time.monotonic()`` of its decisive write (for scale-out: the one that makes the new node
    usable); ``done(placement)`` says when the replacements run where they should; ``evictions`` is
    the number expected."""

    name: str
    app: str
    change: Callable[[], float]
    done: Callable[[dict[str, int]], bool]
    evictions: int
    source: str
    ready_delay: float | None = None  # the kubelet stand-in's bound -> Ready delay this story needs
    replicas: int = 0  # for the "fewest Ready while it moved" figure (0: not sampled)


def scale_out(cp: ControlPlane, cluster: Cluster, *, lift_after: float = 0.3) -> Story:
    """Seed story 1: nginx (3 x 500m) runs 2 + 1 on node-1 / node-2; node-3 registers as a cloud node
    (Ready, still uninitialized) and is initialised ``lift_after`` s later. Expected: one nginx pod
    leaves node-1 (RemoveDuplicates) and its replacement runs on node-3."""
    cluster.node("node-1")
    cluster.node("node-2", unschedulable=True)
    cluster.deployment("nginx", 2, cpu="500m")
    wait_placement(cp, cluster, "nginx", lambda p: p == {"node-1": 2})
    set_unschedulable(cluster, "node-2", False)
    cluster.api.patch("/apis/apps/v1/namespaces/default/deployments/nginx", {"spec": {"replicas": 3}})
    wait_placement(cp, cluster, "nginx", lambda p: p == {"node-1": 2, "node-2": 1})

    def change() -> float:
        cluster.node("node-3", taints=[UNINITIALIZED])
        time.sleep(lift_after)  # the cloud controller initialises the node
        at = time.monotonic()
        set_taints(cluster, "node-3", [])
        return at

    return Story("scale-out", "nginx", change, lambda p: p == {"node-1": 1, "node-2": 1, "node-3": 1}, 1, "node-1")


def recovery(cp: ControlPlane, cluster: Cluster) -> Story:
    """Seed story 2: api (3 x 500m, PDB minAvailable 2) one per zone; node-c went NotReady, its pod was
    evicted by the taint manager and recreated on node-a. Expected when node-c is back (Ready, then
    the node controller lifts its taints): the extra pod on node-a is evicted once (RemoveDuplicates)
    and its replacement runs on node-c."""
    for zone in "abc":
        cluster.node(f"node-{zone}", labels={"topology.kubernetes.io/zone": f"zone-{zone}"})
    cluster.deployment("api", 3, cpu="500m")
    cluster.pdb("api", {"app": "api"}, min_available=2)
    wait_placement(cp, cluster, "api", lambda p: p == {"node-a": 1, "node-b": 1, "node-c": 1})
    cluster.wait_pdb_observed("default", "api")
    # node-c fails: NotReady, tainted by the node controller, its pod evicted (taint manager)
    set_ready(cluster, "node-c", False)
    set_taints(cluster, "node-c", NOT_READY)
    set_unschedulable(cluster, "node-b", True)  # so the recreated pod lands on node-a, as in the story
    (victim,) = [p for p in app_pods(cluster, "api") if p["spec"].get("nodeName") == "node-c"]
    cluster.api.delete(f"/api/v1/namespaces/default/pods/{victim['metadata']['name']}", grace=0)
    wait_placement(cp, cluster, "api", lambda p: p == {"node-a": 2, "node-b": 1})
    set_unschedulable(cluster, "node-b", False)
    set_ready(cluster, "node-c", True)  # back; the taints are still on until the controller lifts them

    def change() -> float:
        at = time.monotonic()
        set_taints(cluster, "node-c", [])
        return at

    return Story("recovery", "api", change, lambda p: p == {"node-a": 1, "node-b": 1, "node-c": 1}, 1, "node-a")


def taint(cp: ControlPlane, cluster: Cluster) -> Story:
    """Seed story 3: shop (2 x 200m) runs on gpu-1, which is tainted dedicated=gpu:NoSchedule.
    Expected: both shop pods are evicted and their replacements run on node-1."""
    cluster.node("node-1", unschedulable=True)
    cluster.node("gpu-1")
    cluster.deployment("shop", 2, cpu="200m")
    wait_placement(cp, cluster, "shop", lambda p: p == {"gpu-1": 2})
    set_unschedulable(cluster, "node-1", False)

    def change() -> float:
        at = time.monotonic()
        set_taints(cluster, "gpu-1", [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        return at

    return Story("taint", "shop", change, lambda p: p == {"node-1": 2}, 2, "gpu-1")





# -- several events at once (the disruption ledger, issue 21) ----------------------------------------
def place_one_per_node(cp: ControlPlane, cluster: Cluster, app: str, nodes: list[str], *, cpu: str = "200m",
                       **kw: Any) -> None:
    """A Deployment of ``len(nodes)`` replicas with exactly one on each of ``nodes``: the nodes are
    uncordoned one at a time while the Deployment is scaled up by one (the scheduler has no choice)."""
    for n in nodes[1:]:
        set_unschedulable(cluster, n, True)
    cluster.deployment(app, 1, cpu=cpu, **kw)
    wait_placement(cp, cluster, app, lambda p: p == {nodes[0]: 1})
    for i, n in enumerate(nodes[1:], start=1):
        set_unschedulable(cluster, nodes[i - 1], True)
        set_unschedulable(cluster, n, False)
        cluster.api.patch(f"/apis/apps/v1/namespaces/default/deployments/{app}", {"spec": {"replicas": i + 1}})
        wait_placement(cp, cluster, app, lambda p, i=i, n=n: sum(p.values()) == i + 1 and p.get(n) == 1)
    for n in nodes:
        set_unschedulable(cluster, n, False)


def maintenance(cp: ControlPlane, cluster: Cluster, *, pool: int = 6, spares: int = 2) -> tuple[list[str], list[str]]:
    """A pool of ``pool`` nodes (label pool=a) running one replica of ``web`` each, and ``spares``
    cordoned spare nodes with room (uncordoned at the end): the maintenance-taint story."""
    pool_nodes = [f"pool-{i}" for i in range(pool)]
    spare_nodes = [f"spare-{i}" for i in range(spares)]
    for n in pool_nodes:
        cluster.node(n, labels={"pool": "a"})
    for n in spare_nodes:
        cluster.node(n, unschedulable=True)
    place_one_per_node(cp, cluster, "web", pool_nodes)
    for n in spare_nodes:
        set_unschedulable(cluster, n, False)
    return pool_nodes, spare_nodes


class ReadySampler:
    """Samples how many pods of ``app`` are Ready (not terminating) every ``interval`` seconds, in a
    thread, and keeps the lowest count seen: the "never fewer than N Ready" invariant."""

    def __init__(self, cluster: Cluster, app: str, interval: float = 0.1) -> None:
        import threading

        self.cluster, self.app, self.interval = cluster, app, interval
        self.lowest: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"ready-sampler-{app}", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                ready = sum(placement(self.cluster, self.app).values())
            except Exception:  # noqa: BLE001, S112 - a failed sample is skipped, not counted
                continue
            self.samples += 1
            self.lowest = ready if self.lowest is None else min(self.lowest, ready)


def piled(cp: ControlPlane, cluster: Cluster, *, lift_after: float = 0.3) -> Story:
    """Issue 21: nginx (3 x 500m) all on node-1, node-2 empty; node-3 registers as a cloud node and is
    initialised ``lift_after`` s later. Expected: two moves (RemoveDuplicates, one at a time: the
    second once the first replacement is Ready), one nginx per node."""
    cluster.node("node-1")
    cluster.node("node-2", unschedulable=True)
    cluster.deployment("nginx", 3, cpu="500m")
    wait_placement(cp, cluster, "nginx", lambda p: p == {"node-1": 3})
    set_unschedulable(cluster, "node-2", False)

    def change() -> float:
        cluster.node("node-3", taints=[UNINITIALIZED])
        time.sleep(lift_after)
        at = time.monotonic()
        set_taints(cluster, "node-3", [])
        return at

    return Story("piled", "nginx", change, lambda p: p == {"node-1": 1, "node-2": 1, "node-3": 1}, 2, "node-1",
                 ready_delay=0.0, replicas=3)


def maintenance_taint(cp: ControlPlane, cluster: Cluster) -> Story:
    """Issue 21: a maintenance taint on a six-node pool (one web replica on each, two spare nodes),
    the six nodes patched back to back; replacements Ready 3 s after they are bound. Expected: six
    evictions, never more than one replica down."""
    pool_nodes, spares = maintenance(cp, cluster)

    def change() -> float:
        at = time.monotonic()
        for n in pool_nodes:
            set_taints(cluster, n, [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        return at

    return Story("maintenance", "web", change, lambda p: sum(p.values()) == 6 and set(p) <= set(spares), 6,
                 "pool-*", ready_delay=3.0, replicas=6)


STORIES: dict[str, Callable[[ControlPlane, Cluster], Story]] = {
    "scale-out": scale_out, "recovery": recovery, "taint": taint, "piled": piled, "maintenance": maintenance_taint}


def strip_times(log: str) -> str:
    """The log without its timestamps (``07:16:58,403`` holds a 403 that is not a status)."""
    return re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", log, flags=re.MULTILINE)

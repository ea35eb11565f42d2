"""A real Kubernetes control plane for tests and benchmarks: etcd + kube-apiserver, on demand the
scheduler and controller-manager, and a kubelet stand-in of our own.

Why: tests/fakeapi.py cannot show what the real API server does (admission defaults, RBAC, the
Eviction API's own PDB rules, watch bookmarks and 410s, Lease conflicts, the scheduler placing a
replacement). This module runs the real binaries (v1.24, from the k8s kit, see docs/testing.md) on free
loopback ports with their data in a temporary directory, the way controller-runtime's envtest does,
and stops them cleanly (terminate, wait, kill) even when a test fails: ``stop()`` is idempotent and
also registered with ``atexit``.

Usable from pytest (tests/realk8s/conftest.py) and from scripts::

    from tests.realk8s.controlplane import ControlPlane, find_binaries
    with ControlPlane(find_binaries()) as cp:
        cp.kubeconfig("/tmp/admin.kubeconfig")
        cp.start_scheduler(); cp.start_controller_manager(); cp.start_kubelet()

Nothing is downloaded: the binaries come from ``$KDESCHED_K8S_BIN`` (a directory holding them),
else the kit directory ``shared/k8s`` next to the repository checkout (unpacked by its
``unpack.sh``, which verifies checksums, into a cache directory). :func:`find_binaries` returns None when neither is there.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote, urlencode

import urllib3
import yaml

from tests.realk8s import faketime

BIN_ENV = "KDESCHED_K8S_BIN"
REQUIRE_ENV = "KDESCHED_REQUIRE_REAL_K8S"
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_KIT = REPO_ROOT.parent / "shared" / "k8s"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
SKIP_REASON = "real control-plane tier skipped: set KDESCHED_K8S_BIN or put the k8s kit at ../shared/k8s"

# Controllers the controller-manager may run here (the kit's README: nodelifecycle,
# serviceaccount-token, nodeipam, route, cloud-node-lifecycle and service are to be skipped).
DEFAULT_CONTROLLERS = ("deployment", "replicaset", "statefulset", "disruption", "namespace", "garbagecollector")
UNSUPPORTED_CONTROLLERS = frozenset({"nodelifecycle", "serviceaccount-token", "nodeipam", "route",
                                     "cloud-node-lifecycle", "service"})

# Per-pod knobs for the kubelet stand-in (annotations on the pod).
ANNOTATION_PREFIX = "realk8s.kdesched.dev/"
READY_AFTER = ANNOTATION_PREFIX + "ready-after"          # seconds (float) or "never" (stays Pending)
NOT_READY = ANNOTATION_PREFIX + "not-ready"              # "true": Running, but Ready=False
PHASE = ANNOTATION_PREFIX + "phase"                      # "Failed" / "Succeeded" instead of Running
RESTARTS = ANNOTATION_PREFIX + "restarts"                # restartCount of every container
TERMINATE_AFTER = ANNOTATION_PREFIX + "terminate-after"  # seconds or "never": how long a deleted pod lingers
# A label: reset() leaves a namespace (and everything in it) or a cluster-scoped object carrying it
# alone (the Knative tier's Broker, Triggers, ConfigMaps and RBAC live across its tests).
KEEP = ANNOTATION_PREFIX + "keep"

SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


# -- finding the binaries ------------------------------------------------------------------------
def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in BINARIES)


def find_binaries(env: Mapping[str, str] | None = None) -> Path | None:
    """The directory holding the binaries, or None (the caller skips, or fails when required).

    ``$KDESCHED_K8S_BIN`` wins (a directory with the binaries, or a kit with ``unpack.sh``); then
    the kit ``shared/k8s`` next to the repository root: used in place if it holds unpacked binaries,
    else its ``unpack.sh`` unpacks the archive (checksums verified) into the cache directory.
    """
    env = os.environ if env is None else env
    candidates = [Path(env[BIN_ENV]).expanduser()] if env.get(BIN_ENV) else []
    candidates.append(SHARED_KIT)
    for candidate in candidates:
        if _complete(candidate):
            return candidate
        unpack = candidate / "unpack.sh"
        if unpack.is_file():
            # idempotent: reuses an unpacked cache whose checksums still match (~2 s), else unpacks
            cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdesched-k8s"
            done = subprocess.run(["bash", str(unpack), str(cache)], capture_output=True, text=True, timeout=300,
                                  check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{unpack} failed: {done.stderr.strip() or done.stdout.strip()}")
            out = Path(done.stdout.strip().splitlines()[-1])
            if _complete(out):
                return out
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, backdate: bool = False) -> None:
    """``backdate``: as if run an hour ago, where Debian's faketime is installed (``openssl req`` of
    OpenSSL 3.0 has no -not_before), so that a process whose clock is behind (the clock-skew tests
    run one 3 minutes behind under faketime) does not find the serving certificate not yet valid."""
    env = {**os.environ, **faketime.env("-1h", multithreaded=False)} if backdate and faketime.available() else None
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, env=env)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- a tiny admin client -------------------------------------------------------------------------
class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str) -> None:
        self.status = status
        self.body = body
        reason = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {reason}")

    @property
    def reason(self) -> str:
        return str(self.body.get("reason") or "") if isinstance(self.body, dict) else ""


class RawApi:
    """Raw JSON requests as one identity (the admin by default); for fixtures and test setup only.

    kdesched's own code talks through kdesched.kube.KubeClient with a kubeconfig; this client exists
    so the fixture does not depend on the code under test.
    """

    def __init__(self, url: str, token: str, ca_file: str, *, impersonate: str | None = None,
                 groups: Iterable[str] = ()) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if impersonate:
            self.headers["Impersonate-User"] = impersonate
        self._groups = list(groups)
        self.pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=ca_file, maxsize=4,
                                        retries=urllib3.Retry(total=2, connect=2, read=0, status=0, redirect=0))

    def as_user(self, user: str, groups: Iterable[str] = ()) -> RawApi:
        token = self.headers["Authorization"].split(" ", 1)[1]
        return RawApi(self.url, token, self.pool.connection_pool_kw["ca_certs"], impersonate=user, groups=groups)

    def request(self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
                content_type: str = "application/json", timeout: float = 30.0) -> Any:
        url = self.url + path + (("?" + urlencode(query)) if query else "")
        headers = urllib3.HTTPHeaderDict(self.headers)
        for group in self._groups:  # one header line per group (the API server reads them all)
            headers.add("Impersonate-Group", group)
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        resp = self.pool.request(method, url, body=data, headers=headers, timeout=timeout)
        try:
            parsed: Any = json.loads(resp.data) if resp.data else {}
        except ValueError:
            parsed = resp.data.decode("utf-8", "replace")
        if resp.status >= 300:
            raise ApiError(resp.status, parsed, method, path)
        return parsed

    # conveniences --------------------------------------------------------------------------------
    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, obj: Mapping[str, Any]) -> Any:
        return self.request("POST", path, dict(obj))

    def delete(self, path: str, *, grace: int | None = None, propagation: str | None = "Background",
               missing_ok: bool = True) -> Any:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        if propagation:
            body["propagationPolicy"] = propagation
        try:
            return self.request("DELETE", path, body)
        except ApiError as exc:
            if missing_ok and exc.status == 404:
                return None
            raise

    def patch(self, path: str, patch: Mapping[str, Any], *, kind: str = "merge") -> Any:
        ctype = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json"}[kind]
        return self.request("PATCH", path, patch, content_type=ctype)

    def close(self) -> None:
        self.pool.clear()


def path_for(obj: Mapping[str, Any], *, plural: str | None = None, name: bool = True) -> str:
    """The REST path of an object (a small table of the kinds tests create)."""
    api_version = str(obj.get("apiVersion") or "v1")
    kind = str(obj["kind"])
    meta = obj.get("metadata") or {}
    plural = plural or PLURALS.get(kind) or kind.lower() + "s"
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    ns = meta.get("namespace") or ("default" if kind not in CLUSTER_SCOPED else None)
    path = base + (f"/namespaces/{quote(ns)}" if ns and kind not in CLUSTER_SCOPED else "") + f"/{plural}"
    if name and meta.get("name"):
        path += "/" + quote(str(meta["name"]))
    return path


PLURALS = {"PodDisruptionBudget": "poddisruptionbudgets", "PriorityClass": "priorityclasses",
           "Policy": "policies", "Endpoints": "endpoints", "CustomResourceDefinition": "customresourcedefinitions",
           "Ingress": "ingresses", "NetworkPolicy": "networkpolicies", "StorageClass": "storageclasses"}
CLUSTER_SCOPED = frozenset({"Node", "Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding",
                            "CustomResourceDefinition", "PersistentVolume", "StorageClass",
                            "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"})

# Namespaced collections reset() clears, workloads first so no controller recreates what follows.
RESET_NAMESPACED = (
    ("apps/v1", "deployments"), ("apps/v1", "statefulsets"), ("apps/v1", "daemonsets"), ("apps/v1", "replicasets"),
    ("batch/v1", "jobs"), ("v1", "replicationcontrollers"), ("policy/v1", "poddisruptionbudgets"),
    ("v1", "pods"), ("v1", "persistentvolumeclaims"), ("v1", "configmaps"), ("v1", "secrets"),
    ("v1", "services"), ("events.k8s.io/v1", "events"), ("coordination.k8s.io/v1", "leases"),
    ("rbac.authorization.k8s.io/v1", "rolebindings"), ("rbac.authorization.k8s.io/v1", "roles"),
    ("v1", "serviceaccounts"),
)
# Cluster-scoped collections: reset() deletes what was not there when the API server came up.
RESET_CLUSTER = (
    ("v1", "nodes"), ("scheduling.k8s.io/v1", "priorityclasses"),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"), ("rbac.authorization.k8s.io/v1", "clusterroles"),
    ("v1", "persistentvolumes"),
)


def _collection(group_version: str, plural: str, namespace: str | None = None) -> str:
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    return base + (f"/namespaces/{quote(namespace)}" if namespace else "") + f"/{plural}"


# -- processes -----------------------------------------------------------------------------------
@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(5)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies, so even a
    test run killed with SIGKILL (no atexit, no finalizer) leaves no etcd or apiserver behind."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


_LIVE: weakref.WeakSet[ControlPlane] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for cp in list(_LIVE):
        cp.stop()


class ControlPlane:
    """etcd + kube-apiserver (RBAC on, a static admin token, service-account keys, TLS), on free
    loopback ports, data in a temp dir. ``start()`` / ``stop()``, or use it as a context manager."""

    ADMIN_USER = "admin"

    def __init__(self, bin_dir: Path | str, *, workdir: str | Path | None = None, keep_logs: bool = False,
                 apiserver_args: Iterable[str] = ()) -> None:
        self.bin_dir = Path(bin_dir)
        self._own_workdir = workdir is None
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # etcd fsyncs: tmpfs is much faster
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kdesched-k8s-", dir=base))
        self.keep_logs = keep_logs
        self.extra_apiserver_args = list(apiserver_args)
        self.token = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        self.etcd: Proc | None = None
        self.apiserver: Proc | None = None
        self.scheduler: Proc | None = None
        self.controller_manager: Proc | None = None
        self.kubelet: Kubelet | None = None
        self.port = 0
        self.api: RawApi | None = None
        self._initial: dict[str, set[str]] = {}
        self._admin_kubeconfig: Path | None = None
        self._probe: urllib3.PoolManager | None = None

    # lifecycle ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "serving.crt"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 90.0) -> ControlPlane:
        _LIVE.add(self)
        try:
            self._pki()
            self._start_etcd(timeout)
            self._start_apiserver(timeout)
            self.api = RawApi(self.url, self.token, str(self.ca_file))
            self._admin_kubeconfig = self.kubeconfig(self.workdir / "admin.kubeconfig")
            self._initial = {plural: {o["metadata"]["name"] for o in self.api.get(_collection(gv, plural))["items"]}
                             for gv, plural in RESET_CLUSTER}
            self._initial["namespaces"] = {o["metadata"]["name"] for o in self.api.get("/api/v1/namespaces")["items"]}
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop everything this object started (kubelet, scheduler, controller-manager, apiserver, etcd)."""
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        for attr in ("scheduler", "controller_manager", "apiserver", "etcd"):
            proc: Proc | None = getattr(self, attr)
            if proc is not None:
                # the scheduler lingers ~10 s on SIGTERM and keeps no state: a short grace for it
                proc.stop(timeout=2.0 if attr == "scheduler" else 10.0)
                setattr(self, attr, None)
        if self.api is not None:
            self.api.close()
            self.api = None
        if self._own_workdir and not self.keep_logs and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)
        _LIVE.discard(self)

    def _spawn(self, name: str, args: list[str]) -> Proc:
        log = self.workdir / f"{name}.log"
        with open(log, "ab") as out:
            popen = subprocess.Popen([str(self.bin_dir / name), *args], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True,
                                     preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only, no locks
        return Proc(name, popen, log)

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                 "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                 "-keyout", str(pki / "serving.key"), "-out", str(pki / "serving.crt"), backdate=True)
        _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        (pki / "tokens.csv").write_text(f'{self.token},{self.ADMIN_USER},{self.ADMIN_USER},"system:masters"\n')

    def _start_etcd(self, timeout: float) -> None:
        for _attempt in range(3):
            client, peer = free_port(), free_port()
            self.etcd_url = f"http://127.0.0.1:{client}"
            self.etcd = self._spawn("etcd", [
                "--name", "default", "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"default=http://127.0.0.1:{peer}",
                "--log-level", "warn", "--logger", "zap",
            ])
            if self._wait(lambda: self._http_ok(self.etcd_url + "/health"), self.etcd, timeout):
                return
            self.etcd.stop()
        raise RuntimeError(f"etcd did not start:\n{self.etcd.tail() if self.etcd else ''}")

    def _start_apiserver(self, timeout: float) -> None:
        pki = self.workdir / "pki"
        for _attempt in range(3):
            self.port = free_port()
            self.apiserver = self._spawn("kube-apiserver", [
                "--etcd-servers", self.etcd_url,
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(self.port),
                "--tls-cert-file", str(pki / "serving.crt"), "--tls-private-key-file", str(pki / "serving.key"),
                "--cert-dir", str(pki),
                "--authorization-mode", "RBAC",
                "--token-auth-file", str(pki / "tokens.csv"),
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--api-audiences", "https://kubernetes.default.svc",
                "--service-cluster-ip-range", "10.96.0.0/16",
                # No serviceaccount controller runs, so pods must not need a ServiceAccount object;
                # no nodelifecycle controller runs, so nothing would lift the not-ready taint that
                # TaintNodesByCondition puts on every new Node (tests add taints they want themselves).
                "--disable-admission-plugins", "ServiceAccount,TaintNodesByCondition",
                "--v", "1",
                *self.extra_apiserver_args,
            ])
            if self._wait(self._apiserver_ready, self.apiserver, timeout):
                return
            self.apiserver.stop()
        raise RuntimeError(f"kube-apiserver did not start:\n{self.apiserver.tail() if self.apiserver else ''}")

    def _apiserver_ready(self) -> bool:
        # /readyz passes once the RBAC bootstrap roles and priority classes are in place
        return self._http_ok(self.url + "/readyz", token=self.token)

    def _http_ok(self, url: str, token: str | None = None) -> bool:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if self._probe is None:
            self._probe = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(self.ca_file))
        try:
            resp = self._probe.request("GET", url, headers=headers, timeout=2.0, retries=False)
        except (urllib3.exceptions.HTTPError, OSError):
            return False
        return resp.status == 200

    @staticmethod
    def _wait(check: Callable[[], bool], proc: Proc | None, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and not proc.alive():
                return False
            if check():
                return True
            time.sleep(0.2)
        return False

    def check_alive(self) -> None:
        """Raise (with the log tail) if a process this object started has died."""
        for proc in (self.etcd, self.apiserver, self.scheduler, self.controller_manager):
            if proc is not None and not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")

    # kubeconfig ------------------------------------------------------------------------------
    def kubeconfig(self, path: str | Path, as_user: str | None = None, as_groups: Iterable[str] | None = None) -> Path:
        """Write a kubeconfig for the admin, or for the admin impersonating ``as_user`` (e.g.
        ``system:serviceaccount:NS:NAME``) through the kubeconfig's ``as`` / ``as-groups`` fields.

        For a service account the groups default to what the API server gives its tokens
        (``system:serviceaccounts``, ``system:serviceaccounts:NS``, ``system:authenticated``).
        """
        user: dict[str, Any] = {"token": self.token}
        if as_user:
            user["as"] = as_user
            if as_groups is None and as_user.startswith("system:serviceaccount:"):
                ns = as_user.split(":")[2]
                as_groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
            if as_groups:
                user["as-groups"] = list(as_groups)
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "realk8s", "preferences": {},
            "clusters": [{"name": "realk8s", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "realk8s-user", "user": user}],
            "contexts": [{"name": "realk8s", "context": {"cluster": "realk8s", "user": "realk8s-user"}}],
        }
        path = Path(path)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    @property
    def admin_kubeconfig(self) -> Path:
        assert self._admin_kubeconfig is not None, "start() first"
        return self._admin_kubeconfig

    # optional components ---------------------------------------------------------------------
    def start_scheduler(self, timeout: float = 60.0) -> Proc:
        """kube-scheduler with the admin kubeconfig, no leader election, no serving port. Idempotent."""
        if self.scheduler is not None and self.scheduler.alive():
            return self.scheduler
        kc = str(self.admin_kubeconfig)
        self.scheduler = self._spawn("kube-scheduler", [
            "--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--leader-elect=false", "--secure-port", "0", "--v", "1",
        ])
        self._wait_log(self.scheduler, timeout)
        return self.scheduler

    def start_controller_manager(self, controllers: Iterable[str] = DEFAULT_CONTROLLERS,
                                 timeout: float = 60.0, *, api_qps: int | None = None) -> Proc:
        """kube-controller-manager running only ``controllers``. Idempotent (a running one is reused
        when it runs the same set; otherwise it is restarted). ``api_qps``: its client's
        ``--kube-api-qps`` (burst 1.5 times it, as its defaults 20/30); None: its defaults."""
        wanted = sorted(set(controllers))
        bad = UNSUPPORTED_CONTROLLERS.intersection(wanted)
        if bad:
            raise ValueError(f"controllers not runnable here (../shared/k8s/README.md): {sorted(bad)}")
        if self.controller_manager is not None and self.controller_manager.alive():
            if getattr(self, "_controllers", None) == (wanted, api_qps):
                return self.controller_manager
            self.controller_manager.stop()
        kc = str(self.admin_kubeconfig)
        self._controllers = (wanted, api_qps)
        qps = [] if api_qps is None else ["--kube-api-qps", str(api_qps), "--kube-api-burst", str(api_qps * 3 // 2)]
        self.controller_manager = self._spawn("kube-controller-manager", [
            "--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--controllers", ",".join(wanted), "--leader-elect=false", "--secure-port", "0",
            "--use-service-account-credentials=false", "--v", "1",
            # the ReplicaSet controller waits this long between bursts of creations after a failure
            "--concurrent-replicaset-syncs", "5", "--concurrent-deployment-syncs", "5", *qps,
        ])
        self._wait_log(self.controller_manager, timeout)
        return self.controller_manager

    def _wait_log(self, proc: Proc, timeout: float) -> None:
        # The components serve no port here: wait until they have run a moment without exiting.
        deadline = time.monotonic() + min(timeout, 1.5)
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            time.sleep(0.1)

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop(timeout=2.0)  # it lingers ~10 s on SIGTERM; it keeps no state
            self.scheduler = None

    def stop_controller_manager(self) -> None:
        if self.controller_manager is not None:
            self.controller_manager.stop()
            self.controller_manager = None

    def start_kubelet(self, ready_delay: float = 0.0, terminate_delay: float = 0.0) -> Kubelet:
        """The kubelet stand-in (a thread). Idempotent; a running one gets the new delays."""
        if self.kubelet is None or not self.kubelet.alive():
            assert self.api is not None, "start() first"
            self.kubelet = Kubelet(RawApi(self.url, self.token, str(self.ca_file)))
            self.kubelet.start()
        self.kubelet.ready_delay = ready_delay
        self.kubelet.terminate_delay = terminate_delay
        return self.kubelet

    def stop_kubelet(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None

    # between tests ---------------------------------------------------------------------------
    def reset(self, *, timeout: float = 30.0) -> None:
        """Delete every object tests created: namespaces (finalised here, so no namespace controller
        is needed), everything in the system namespaces' test-visible collections, and the
        cluster-scoped objects that were not there when the API server came up. CRDs stay, and so
        does whatever carries the label :data:`KEEP` (a namespace with all it holds)."""
        api = self.api
        assert api is not None, "start() first"
        namespaces = [o["metadata"]["name"] for o in api.get("/api/v1/namespaces")["items"]
                      if KEEP not in (o["metadata"].get("labels") or {})]
        for ns in namespaces:
            if ns in ("kube-system", "kube-public", "kube-node-lease"):
                continue
            for gv, plural in RESET_NAMESPACED:
                if ns == "default" and plural in ("services", "serviceaccounts", "secrets", "configmaps"):
                    continue  # the "kubernetes" Service, default token objects
                try:
                    api.request("DELETE", _collection(gv, plural, ns),
                                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                 "propagationPolicy": "Background"})
                except ApiError as exc:
                    if exc.status not in (404, 405):
                        raise
        for ns in namespaces:
            if ns in self._initial.get("namespaces", ()) or ns in SYSTEM_NAMESPACES:
                continue
            api.delete(f"/api/v1/namespaces/{quote(ns)}")
        for gv, plural in RESET_CLUSTER:
            for obj in api.get(_collection(gv, plural))["items"]:
                name = obj["metadata"]["name"]
                if name not in self._initial.get(plural, ()) and KEEP not in (obj["metadata"].get("labels") or {}):
                    api.delete(_collection(gv, plural) + "/" + quote(name), grace=0)
        # pods held by finalizers, and namespaces nobody finalises without the namespace controller
        deadline = time.monotonic() + timeout
        while True:
            leftovers = self._leftovers(api)
            if not leftovers:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"reset(): objects still present after {timeout}s: {leftovers[:10]}")
            time.sleep(0.2)
        if self.kubelet is not None:
            self.kubelet.forget()

    def _leftovers(self, api: RawApi) -> list[str]:
        left: list[str] = []
        for pod in api.get("/api/v1/pods")["items"]:
            meta = pod["metadata"]
            if meta["namespace"] in ("kube-system",):
                continue
            left.append(f"pod {meta['namespace']}/{meta['name']}")
            path = f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}"
            if meta.get("finalizers"):
                try:
                    api.patch(path, {"metadata": {"finalizers": None}})
                except ApiError as exc:
                    if exc.status != 404:
                        raise
            api.delete(path, grace=0)
        for ns in api.get("/api/v1/namespaces")["items"]:
            name = ns["metadata"]["name"]
            if (name in self._initial.get("namespaces", ()) or name in SYSTEM_NAMESPACES
                    or KEEP in (ns["metadata"].get("labels") or {})):
                continue
            left.append(f"namespace {name}")
            if ns["metadata"].get("deletionTimestamp") and not self._namespace_busy(api, name):
                ns["spec"] = {"finalizers": []}
                try:
                    api.request("PUT", f"/api/v1/namespaces/{quote(name)}/finalize", ns)
                except ApiError as exc:
                    if exc.status not in (404, 409):
                        raise
        return left

    @staticmethod
    def _namespace_busy(api: RawApi, ns: str) -> bool:
        return bool(api.get(f"/api/v1/namespaces/{quote(ns)}/pods")["items"])

    # waiting ---------------------------------------------------------------------------------
    def wait_for(self, check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2,
                 what: str = "condition") -> Any:
        """Poll ``check`` until it returns something truthy (returned); raise TimeoutError naming
        ``what`` otherwise. Also fails early if a control-plane process died."""
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)


# -- the kubelet stand-in ------------------------------------------------------------------------
class Kubelet:
    """Marks bound pods Running + Ready after a delay and finishes deletions; nothing else.

    Polling (every ``interval`` s) instead of a watch keeps it simple and robust across API server
    restarts; it lists only pods bound to a node (``spec.nodeName!=``). Per-pod knobs are the
    ``realk8s.kdesched.dev/*`` annotations of this module (READY_AFTER, NOT_READY, PHASE, RESTARTS,
    TERMINATE_AFTER).
    """

    def __init__(self, api: RawApi, *, ready_delay: float = 0.0, terminate_delay: float = 0.0,
                 interval: float = 0.1) -> None:
        self.api = api
        self.ready_delay = ready_delay
        self.terminate_delay = terminate_delay
        self.interval = interval
        self._seen: dict[str, float] = {}        # uid -> when first seen bound
        self._deleting: dict[str, float] = {}    # uid -> when first seen with a deletionTimestamp
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self._ip = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="realk8s-kubelet", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.api.close()

    def forget(self) -> None:
        self._seen.clear()
        self._deleting.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - keep running; tests see errors via .errors
                if len(self.errors) < 100:
                    self.errors.append(repr(exc))
            self._stop.wait(self.interval)

    def sync(self) -> None:
        """One pass over the bound pods (public so a test can drive it synchronously)."""
        now = time.monotonic()
        pods = self.api.get("/api/v1/pods", fieldSelector="spec.nodeName!=")["items"]
        live = set()
        for pod in pods:
            meta = pod["metadata"]
            uid = meta["uid"]
            live.add(uid)
            annotations = meta.get("annotations") or {}
            path = f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}"
            if meta.get("deletionTimestamp"):
                delay = _seconds(annotations.get(TERMINATE_AFTER), self.terminate_delay)
                first = self._deleting.setdefault(uid, now)
                if delay is not None and now - first >= delay:
                    try:
                        self.api.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1",
                                                          "gracePeriodSeconds": 0,
                                                          "preconditions": {"uid": uid}})
                    except ApiError as exc:
                        if exc.status not in (404, 409):
                            raise
                continue
            if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
                continue
            delay = _seconds(annotations.get(READY_AFTER), self.ready_delay)
            first = self._seen.setdefault(uid, now)
            if delay is None or now - first < delay:
                continue
            try:
                self.api.patch(path + "/status", {"status": self._status(pod, annotations)}, kind="strategic")
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
        for gone in set(self._seen) - live:
            del self._seen[gone]
        for gone in set(self._deleting) - live:
            del self._deleting[gone]

    def _status(self, pod: Mapping[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
        self._ip += 1
        ip = f"10.244.{(self._ip // 250) % 250}.{self._ip % 250 + 1}"
        stamp = now_rfc3339()
        phase = annotations.get(PHASE, "Running")
        ready = phase == "Running" and annotations.get(NOT_READY, "").lower() != "true"
        restarts = int(annotations.get(RESTARTS, "0"))
        state: dict[str, Any]
        if phase == "Running":
            state = {"running": {"startedAt": stamp}}
        else:
            state = {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "reason":
                                    "Completed" if phase == "Succeeded" else "Error",
                                    "startedAt": stamp, "finishedAt": stamp}}
        statuses = [{"name": c["name"], "image": c.get("image", ""), "imageID": f"docker-pullable://{c.get('image', '')}",
                     "containerID": f"containerd://{os.urandom(16).hex()}", "ready": ready,
                     "started": phase == "Running", "restartCount": restarts, "state": state}
                    for c in (pod.get("spec") or {}).get("containers") or ()]
        flag = "True" if ready else "False"
        conditions = [{"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
                      {"type": "Ready", "status": flag, "lastTransitionTime": stamp},
                      {"type": "ContainersReady", "status": flag, "lastTransitionTime": stamp},
                      {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}]
        return {"phase": phase, "conditions": conditions, "hostIP": "10.0.0.1", "podIP": ip,
                "podIPs": [{"ip": ip}], "startTime": stamp, "containerStatuses": statuses}


def _seconds(value: str | None, default: float) -> float | None:
    if value is None or value == "":
        return default
    if value.strip().lower() == "never":
        return None
    return float(value)

"""Knative Eventing's real data plane in front of kdesched's six functions, on a real control plane.

Why: kdesched's first deployment is Knative, and until this tier its suite had never run a Knative
component: the functions were only ever fed events written by hand. Here the programs a cluster
runs (built from knative/eventing, the kit ``shared/knative``) run as plain processes on loopback:
the ApiServerSource receive adapter, the channel-based Broker's ingress and filter, the in-memory
channel dispatcher and the PingSource adapter (mtping). The functions run as ``kdesched function
NAME`` processes in place of the Knative Services (no Serving here: no scale-to-zero, revisions or
activator). What the absent Knative controllers would do is done by :meth:`KnativeDataPlane.install`:
the Broker, Triggers, ApiServerSource and PingSource of ``knative/base`` are applied as they are, and
the status a controller would write is written (Broker address and channel annotation, the
InMemoryChannel with one subscriber per Trigger, Trigger subscriber and dead-letter URIs, PingSource
sink). The adapter's settings (``K_SOURCE_CONFIG``, ``K_CE_OVERRIDES``, ``NAME``, ``NAMESPACE``, its
service account) are derived from ``knative/base/apiserversource.yaml``; the functions' environment
from ``knative/base/services.yaml``; each function and the adapter authenticate as the service
account their manifest names (a real TokenRequest token, under the RBAC of ``knative/``). The
Knative programs themselves use the admin kubeconfig (their own RBAC is Knative's, not kdesched's).

Usable from pytest (tests/realknative/conftest.py) and from scripts (bench/)::

    with ControlPlane(find_binaries()) as cp:
        dp = KnativeDataPlane(cp, find_knative()).start()
        ...
        dp.stop()

The in-memory channel dispatcher (and the adapter's health server) bind the fixed port 8080, so one
instance runs at a time on a machine; :meth:`KnativeDataPlane.start` fails naming the port if taken.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from tests.realk8s.controlplane import (
    KEEP,
    REPO_ROOT,
    ApiError,
    ControlPlane,
    Proc,
    _die_with_parent,
    free_port,
    path_for,
)
from tests.realk8s.serve_stories import policy_text, service_account_kubeconfig

KNATIVE_BIN_ENV = "KDESCHED_KNATIVE_BIN"
SHARED_KNATIVE = REPO_ROOT.parent / "shared" / "knative"
PROGRAMS = ("apiserver_receive_adapter", "broker_ingress", "broker_filter", "in_memory_channel_dispatcher", "mtping")
KNATIVE_SKIP_REASON = ("real Knative tier skipped: set KDESCHED_KNATIVE_BIN or put the Knative kit at "
                       "../shared/knative (and the k8s kit: KDESCHED_K8S_BIN or ../shared/k8s)")
KNATIVE_DIR = REPO_ROOT / "knative"
NS = "kdesched"
SYSTEM_NS = "knative-eventing"
BROKER = "kdesched"
CHANNEL = f"{BROKER}-kne-trigger"
DISPATCHER_PORT = 8080  # fixed in the dispatcher (and the adapter's health server)
APISERVER_ADD = "dev.knative.apiserver.resource.add"
APISERVER_DELETE = "dev.knative.apiserver.resource.delete"
FUNCTIONS = ("classifier", "rebalance", "taints", "affinity", "manual", "deadletter")
KEEP_LABEL = KEEP  # ControlPlane.reset() leaves objects with it alone


# -- finding the kit -------------------------------------------------------------------------------
def _complete(directory: Path) -> bool:
    return all(os.access(directory / "bin" / p, os.X_OK) for p in PROGRAMS) and (directory / "crds").is_dir()


def find_knative(env: Mapping[str, str] | None = None) -> Path | None:
    """The unpacked kit directory (``bin/``, ``crds/``, ``configmaps/``), or None.

    ``$KDESCHED_KNATIVE_BIN`` wins (an unpacked kit, or a kit with ``unpack.sh``); then the kit
    ``shared/knative`` next to the repository root, unpacked by its ``unpack.sh`` (checksums
    verified) into ``$XDG_CACHE_HOME/kdesched-knative``. RuntimeError if unpacking fails."""
    env = os.environ if env is None else env
    candidates = [Path(env[KNATIVE_BIN_ENV]).expanduser()] if env.get(KNATIVE_BIN_ENV) else []
    candidates.append(SHARED_KNATIVE)
    for candidate in candidates:
        if _complete(candidate):
            return candidate
        unpack = candidate / "unpack.sh"
        if unpack.is_file():
            cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdesched-knative"
            done = subprocess.run(["bash", str(unpack), str(cache)], capture_output=True, text=True, timeout=300,
                                  check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{unpack} failed: {done.stderr.strip() or done.stdout.strip()}")
            out = Path(done.stdout.strip().splitlines()[-1])
            if _complete(out):
                return out
    return None


def port_free(port: int) -> bool:
    """Nothing listens on ``port`` (any address): the fixed-port programs can bind it."""
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


# -- manifests -------------------------------------------------------------------------------------
def manifests(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def guess_resource(kind: str) -> str:
    """Knative's (client-go's) guess of a kind's resource name: lower case, plural."""
    low = kind.lower()
    if low.endswith("s"):
        return low + "es"
    if low.endswith("y"):
        return low[:-1] + "ies"
    return low + "s"


def selector_string(selector: Mapping[str, Any]) -> str:
    """A LabelSelector as the string the adapter passes to LIST/WATCH."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or ())
        parts.append({"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                      "DoesNotExist": f"!{key}"}[op])
    return ",".join(parts)


def adapter_settings(source: Mapping[str, Any]) -> dict[str, str]:
    """The receive adapter's environment that the ApiServerSource controller derives from the source
    (knative/eventing pkg/reconciler/apiserversource/resources/receive_adapter.go), minus K_SINK."""
    spec = source["spec"]
    meta = source["metadata"]
    resources = []
    for res in spec["resources"]:
        group, _, version = res["apiVersion"].rpartition("/")
        watch: dict[str, Any] = {"gvr": {"Group": group, "Version": version, "Resource": guess_resource(res["kind"])}}
        if res.get("selector"):
            watch["selector"] = selector_string(res["selector"])
        resources.append(watch)
    selector = spec.get("namespaceSelector")
    config = {
        "namespaces": [] if selector is not None else [meta["namespace"]],
        "allNamespaces": selector is not None and not (selector.get("matchLabels") or selector.get("matchExpressions")),
        "resources": resources,
        "mode": spec.get("mode") or "Reference",
        "failFast": (meta.get("annotations") or {}).get(
            "features.knative.dev/apiserversource-skip-permissions-check") == "true",
    }
    env = {"NAME": meta["name"], "NAMESPACE": meta["namespace"], "K_SOURCE_CONFIG": json.dumps(config)}
    if spec.get("ceOverrides"):
        env["K_CE_OVERRIDES"] = json.dumps(spec["ceOverrides"])
    return env


def container_env(service: Mapping[str, Any]) -> dict[str, str]:
    """The literal env of a Knative Service's container (valueFrom is refused: not supported here)."""
    env = {}
    for item in service["spec"]["template"]["spec"]["containers"][0].get("env") or ():
        if "value" not in item:
            raise ValueError(f"services.yaml {service['metadata']['name']}: env {item['name']} has no literal value")
        env[item["name"]] = str(item["value"])
    return env


def _ready(generation: int = 1, *types: str) -> list[dict[str, str]]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [{"type": t, "status": "True", "lastTransitionTime": stamp} for t in ("Ready", *types)]


# -- processes -------------------------------------------------------------------------------------
@dataclass
class FunctionProc:
    """One ``kdesched function NAME`` process standing in for a Knative Service."""

    name: str
    port: int
    env: dict[str, str]
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"function-{self.name}-{self.port}.log"

    def start(self, timeout: float = 60.0) -> FunctionProc:
        return self.spawn().wait_healthy(timeout)

    def spawn(self) -> FunctionProc:
        """Start the process (from the thread that will outlive it: the kernel kills it with the
        thread that spawned it, so that a killed test run leaves nothing behind)."""
        if self.alive():
            return self
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kdesched", "function", self.name, "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, cwd=str(REPO_ROOT),
            start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only
        self.starts += 1
        return self

    def wait_healthy(self, timeout: float = 60.0) -> FunctionProc:
        deadline = time.monotonic() + timeout
        while self.get("/healthz")[0] != 200:
            if not self.alive():
                code = self.proc.returncode if self.proc is not None else None
                raise RuntimeError(f"function {self.name} exited {code}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"function {self.name} did not answer /healthz within {timeout}s")
            time.sleep(0.05)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._log is not None and not self._log.closed:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def messages(self) -> list[str]:
        """The log's messages (JSON lines under LOG_FORMAT=json, else the raw lines)."""
        out = []
        for line in self.log().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            out.append(str(doc.get("message") or doc.get("msg") or line) if isinstance(doc, dict) else line)
        return out

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def events(self, ce_type: str | None = None, status: str | None = None) -> float:
        """Deliveries this process answered (``kdesched_reactor_events_total``), 0 when down."""
        code, text = self.get("/metrics")
        if code != 200:
            return 0.0
        total = 0.0
        for line in text.splitlines():
            if not line.startswith("kdesched_reactor_events_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            if labels.get("function") != self.name:
                continue
            if (ce_type is None or labels.get("type") == ce_type) and (status is None or labels.get("status") == status):
                total += float(line.rsplit(" ", 1)[1])
        return total


@dataclass
class KnativeDataPlane:
    """The Knative programs + the six functions, wired through the Broker and Triggers of knative/base."""

    cp: ControlPlane
    kit: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kdesched-knative-")))
    resync_seconds: float = 300.0  # the classifier function's KDESCHED_CLASSIFIER_RESYNC_SECONDS
    procs: dict[str, Proc] = field(default_factory=dict)
    functions: dict[str, FunctionProc] = field(default_factory=dict)
    ingress_port: int = 0
    filter_port: int = 0
    extra_functions: dict[str, list[FunctionProc]] = field(default_factory=dict)
    subscriber_overrides: dict[str, str] = field(default_factory=dict)  # Trigger name -> URL
    keep_logs: bool = False  # keep the workdir (logs) after stop()
    ping_ready: bool = False
    proxies: list[Proxy] = field(default_factory=list)  # closed by restore()

    # addresses --------------------------------------------------------------------------------------
    @property
    def broker_url(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}/{NS}/{BROKER}"

    @property
    def channel_url(self) -> str:
        return f"http://127.0.0.1:{DISPATCHER_PORT}/{NS}/{CHANNEL}"

    def filter_url(self, trigger: Mapping[str, Any]) -> str:
        meta = trigger["metadata"]
        return f"http://127.0.0.1:{self.filter_port}/triggers/{NS}/{meta['name']}/{meta['uid']}"

    def resolve(self, dest: Mapping[str, Any]) -> str:
        """A Destination (``ref`` or ``uri``) to a URL: a Service is its function's process."""
        if dest.get("uri"):
            return str(dest["uri"])
        ref = dest["ref"]
        if ref["kind"] == "Service" and ref["apiVersion"].startswith("serving.knative.dev/"):
            return self.functions[ref["name"]].url
        if ref["kind"] == "Broker" and ref["name"] == BROKER:
            return self.broker_url
        raise ValueError(f"cannot resolve {ref}")

    # lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> KnativeDataPlane:
        if not port_free(DISPATCHER_PORT):
            raise RuntimeError(f"port {DISPATCHER_PORT} is taken: the in-memory channel dispatcher binds it (fixed), "
                               "so only one Knative tier runs at a time on a machine; is another one running?")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ingress_port, self.filter_port = free_port(), free_port()
        try:
            self._install_platform()
            self._install_kdesched()
            self._start_functions()
            self._write_status()
            self._start_programs()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for group in self.extra_functions.values():
            for fn in group:
                fn.stop()
        for fn in self.functions.values():
            fn.stop()
        for proc in reversed(list(self.procs.values())):
            proc.stop(timeout=5.0)
        self.procs.clear()
        self._uninstall()
        if not self.keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restore(self) -> None:
        """Back to the state :meth:`start` left (between tests): extra function processes stopped,
        every Trigger at its function, every function and the adapter running, PingSource idle."""
        for group in self.extra_functions.values():
            for fn in group:
                fn.stop()
        self.extra_functions.clear()
        for trigger in list(self.subscriber_overrides):
            self.set_subscriber(trigger, None)
        for proxy in self.proxies:
            proxy.close()
        self.proxies.clear()
        down = [fn.spawn() for fn in self.functions.values() if not fn.alive()]
        for fn in down:
            fn.wait_healthy()
        self.start_adapter()
        if self.ping_ready:
            self.set_ping(None)

    # installing -----------------------------------------------------------------------------------
    def _apply(self, doc: Mapping[str, Any], keep: bool = False) -> dict[str, Any]:
        """Create ``doc`` (or replace what is there), marked to survive ControlPlane.reset()."""
        api = self.cp.api
        assert api is not None
        doc = json.loads(json.dumps(doc))
        if keep:
            doc["metadata"].setdefault("labels", {})[KEEP_LABEL] = "true"
        path = path_for(doc)
        try:
            return dict(api.create(path_for(doc, name=False), doc))
        except ApiError as exc:
            if exc.status != 409:
                raise
        live = api.get(path)
        doc["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
        return dict(api.request("PUT", path, doc))

    def _install_platform(self) -> None:
        """The kit's CRDs and the config-* ConfigMaps in knative-eventing (what installing Knative does)."""
        api = self.cp.api
        assert api is not None
        names = []
        for f in sorted((self.kit / "crds").glob("*.yaml")):
            for doc in manifests(f):
                self._apply(doc)
                names.append(doc["metadata"]["name"])
        def established(name: str) -> bool:
            crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            return any(c["type"] == "Established" and c["status"] == "True"
                       for c in (crd.get("status") or {}).get("conditions") or ())

        for name in names:
            self.cp.wait_for(functools.partial(established, name), 60, what=f"CRD {name} established")
        self._apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NS}}, keep=True)
        for f in sorted((self.kit / "configmaps").glob("*.yaml")):
            for doc in manifests(f):
                self._apply(doc)

    def _install_kdesched(self) -> None:
        """knative/common + knative/base as they are (but the Knative Services: no Serving here)."""
        common, base = KNATIVE_DIR / "common", KNATIVE_DIR / "base"
        for doc in manifests(common / "namespace.yaml"):
            self._apply(doc, keep=True)
        for f in (common / "policy.yaml", common / "rbac-evictor.yaml", base / "rbac-node-source.yaml",
                  base / "rbac-functions.yaml", base / "broker.yaml", base / "triggers.yaml"):
            for doc in manifests(f):
                self._apply(doc, keep=doc["kind"] in ("ClusterRole", "ClusterRoleBinding"))
        (self.source,) = manifests(base / "apiserversource.yaml")
        self._apply(self.source)
        (ping,) = manifests(base / "pingsource.yaml")
        self.ping = self._apply(ping)
        self.services = {d["metadata"]["name"]: d for d in manifests(base / "services.yaml")}
        # the functions' policy: the shipped ConfigMap's profiles, with serve's test Lease timings
        self.policy = self.workdir / "policy.yaml"
        self.policy.write_text(policy_text())
        self.kubeconfigs: dict[str, Path] = {}

    def kubeconfig_for(self, service_account: str) -> Path:
        """A kubeconfig authenticating as ``kdesched/<service_account>`` (a TokenRequest token)."""
        if service_account not in self.kubeconfigs:
            from tests.realk8s.cluster import Cluster

            self.kubeconfigs[service_account] = service_account_kubeconfig(
                self.cp, Cluster(self.cp), self.workdir / f"sa-{service_account}.kubeconfig", name=service_account,
                seconds=6 * 3600)
        return self.kubeconfigs[service_account]

    def function_env(self, name: str) -> dict[str, str]:
        service = self.services[name]
        env = {k: v for k, v in os.environ.items()
               if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE",
                            "K_SINK") and not k.startswith("KDESCHED_")}
        env.update(container_env(service))
        if "KDESCHED_POLICY" in env:
            env["KDESCHED_POLICY"] = str(self.policy)  # the ConfigMap mount, here a file
        if "KDESCHED_BROKER_URL" in env:
            env["KDESCHED_BROKER_URL"] = self.broker_url  # the MT broker ingress of this data plane
        if name == "classifier":
            env["KDESCHED_CLASSIFIER_RESYNC_SECONDS"] = str(self.resync_seconds)
        # Knative Serving's queue-proxy, which holds events past containerConcurrency back in its
        # queue, is not part of this tier: the broker delivers to the functions directly. They take
        # the default number of events at once (10) instead of answering 503 to what queue-proxy
        # would have queued (KDESCHED_CONCURRENCY = containerConcurrency; docs/reactor.md)
        env.pop("KDESCHED_CONCURRENCY", None)
        pod = service["spec"]["template"]["spec"]
        if pod.get("automountServiceAccountToken") is not False:
            env["KUBECONFIG"] = str(self.kubeconfig_for(pod.get("serviceAccountName") or "default"))
        return env

    def _start_functions(self) -> None:
        for name in FUNCTIONS:
            self.functions[name] = FunctionProc(name, free_port(), self.function_env(name), self.workdir)
        # all spawned first, so that their imports (~1 s each) overlap
        for fn in self.functions.values():
            fn.spawn()
        for fn in self.functions.values():
            fn.wait_healthy()

    # the controllers' part ----------------------------------------------------------------------
    def _status(self, doc: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
        api = self.cp.api
        assert api is not None
        live = api.get(path_for(doc))
        live["status"] = {"observedGeneration": live["metadata"].get("generation", 1), **status}
        return dict(api.request("PUT", path_for(doc) + "/status", live))

    def triggers(self) -> list[dict[str, Any]]:
        api = self.cp.api
        assert api is not None
        return list(api.get(f"/apis/eventing.knative.dev/v1/namespaces/{NS}/triggers")["items"])

    def broker(self) -> dict[str, Any]:
        api = self.cp.api
        assert api is not None
        return dict(api.get(f"/apis/eventing.knative.dev/v1/namespaces/{NS}/brokers/{BROKER}"))

    def _write_status(self) -> None:
        """What the eventing controllers write: Broker address + channel, the InMemoryChannel with its
        subscribers (one per Trigger), Trigger status, PingSource sink. Trigger subscribers are the
        function processes (``subscriber_overrides`` can point one elsewhere, e.g. a proxy)."""
        broker = self.broker()
        self._status(broker, {
            "address": {"url": self.broker_url},
            "annotations": {"knative.dev/channelAddress": self.channel_url,
                            "knative.dev/channelAPIVersion": "messaging.knative.dev/v1",
                            "knative.dev/channelKind": "InMemoryChannel", "knative.dev/channelName": CHANNEL},
            "conditions": _ready(1, "Addressable", "FilterReady", "IngressReady", "TriggerChannelReady",
                                 "DeadLetterSinkResolved"),
            "deadLetterSinkUri": self.resolve(broker["spec"]["delivery"]["deadLetterSink"]),
        })
        subscribers = []
        for trigger in self.triggers():
            delivery = dict(trigger["spec"].get("delivery") or broker["spec"].get("delivery") or {})
            status: dict[str, Any] = {"subscriberUri": self.subscriber_url(trigger),
                                      "conditions": _ready(1, "BrokerReady", "DependencyReady", "SubscriberResolved",
                                                           "SubscriptionReady")}
            if delivery.get("deadLetterSink"):
                delivery["deadLetterSink"] = {"uri": self.resolve(delivery["deadLetterSink"])}
                status["deadLetterSinkUri"] = delivery["deadLetterSink"]["uri"]
            self._status(trigger, status)
            subscribers.append({"uid": trigger["metadata"]["uid"], "generation": 1,
                                "subscriberUri": self.filter_url(trigger), "replyUri": self.broker_url,
                                "delivery": delivery})
        channel = {"apiVersion": "messaging.knative.dev/v1", "kind": "InMemoryChannel",
                   "metadata": {"name": CHANNEL, "namespace": NS,
                                "labels": {"eventing.knative.dev/broker": BROKER,
                                           "eventing.knative.dev/brokerEverything": "true"},
                                "ownerReferences": [{"apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
                                                     "name": BROKER, "uid": broker["metadata"]["uid"],
                                                     "controller": True, "blockOwnerDeletion": True}]},
                   "spec": {"subscribers": subscribers}}
        channel = self._apply(channel)
        self._status(channel, {"address": {"url": self.channel_url}, "conditions": _ready(1, "Addressable"),
                               "subscribers": [{"uid": s["uid"], "observedGeneration": 1, "ready": "True"}
                                               for s in subscribers]})
        # the PingSource stays not Ready (mtping ignores it) until a test calls set_ping(): its
        # schedule would otherwise start a sweep in the middle of other tests

    def set_ping(self, schedule: str | None) -> None:
        """Make the PingSource of knative/base Ready with ``schedule`` (what the PingSource
        controller does once its sink resolves); None: back to its manifest, not Ready."""
        api = self.cp.api
        assert api is not None
        spec_schedule = schedule or self.ping["spec"]["schedule"]
        api.patch(path_for(self.ping), {"spec": {"schedule": spec_schedule}})
        if schedule is None:
            self._status(self.ping, {"conditions": [{**c, "status": "False"} for c in _ready(1)]})
            self.ping_ready = False
            return
        self._status(self.ping, {"sinkUri": self.resolve(self.ping["spec"]["sink"]),
                                 "conditions": _ready(1, "Deployed", "SinkProvided")})
        self.ping_ready = True

    def subscriber_url(self, trigger: Mapping[str, Any]) -> str:
        name = trigger["metadata"]["name"]
        return self.subscriber_overrides.get(name) or self.resolve(trigger["spec"]["subscriber"])

    def set_subscriber(self, trigger: str, url: str | None) -> None:
        """Point Trigger ``trigger`` at ``url`` (None: back at its function), as the Trigger
        controller would after its subscriber's address changed; waits until the filter uses it."""
        if url is None:
            self.subscriber_overrides.pop(trigger, None)
        else:
            self.subscriber_overrides[trigger] = url
        (t,) = [t for t in self.triggers() if t["metadata"]["name"] == trigger]
        self._status(t, {**t.get("status", {}), "subscriberUri": self.subscriber_url(t)})

    # the Knative programs -------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str], env: Mapping[str, str]) -> Proc:
        log = self.workdir / f"{name}.log"
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"), **env}
        with open(log, "ab") as out:
            popen = subprocess.Popen([str(self.kit / "bin" / name), *args], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir, env=full, start_new_session=True,
                                     preexec_fn=_die_with_parent)  # noqa: PLW1509 - prctl only
        proc = Proc(name, popen, log)
        self.procs[name] = proc
        return proc

    def _common_env(self, name: str) -> dict[str, str]:
        return {"KUBECONFIG": str(self.cp.admin_kubeconfig), "SYSTEM_NAMESPACE": SYSTEM_NS, "POD_NAME": f"{name}-0",
                "CONTAINER_NAME": name, "METRICS_PROMETHEUS_PORT": str(free_port()),
                "PROFILING_PORT": str(free_port()), "CONFIG_LOGGING_NAME": "config-logging",
                "CONFIG_OBSERVABILITY_NAME": "config-observability", "METRICS_DOMAIN": "knative.dev/eventing"}

    def _start_programs(self) -> None:
        self._spawn("in_memory_channel_dispatcher", ["--disable-ha"], {
            **self._common_env("dispatcher"), "KUBERNETES_MIN_VERSION": "v1.23.0", "MAX_IDLE_CONNS": "1000",
            "MAX_IDLE_CONNS_PER_HOST": "1000"})
        self._spawn("broker_filter", [], {**self._common_env("filter"), "FILTER_PORT": str(self.filter_port),
                                          "FILTER_PORT_HTTPS": str(free_port()), "NAMESPACE": SYSTEM_NS})
        self._spawn("broker_ingress", [], {**self._common_env("ingress"), "INGRESS_PORT": str(self.ingress_port),
                                           "INGRESS_PORT_HTTPS": str(free_port())})
        self._spawn("mtping", ["--disable-ha"], {**self._common_env("mtping"), "NAMESPACE": SYSTEM_NS,
                                                 "KUBERNETES_MIN_VERSION": "v1.23.0"})
        # the adapter's probes server binds the same fixed port, at once, where the dispatcher binds it
        # only once its informers synced: start the adapter after the dispatcher holds the port (else
        # the dispatcher fails to bind, and the ingress gets the adapter's 404s: seen when the tier
        # ran after the rest of the real control-plane tier)
        self.cp.wait_for(lambda: not port_free(DISPATCHER_PORT), 60, interval=0.05,
                         what=f"the in-memory channel dispatcher to listen on port {DISPATCHER_PORT}")
        self.start_adapter()

    def start_adapter(self) -> Proc:
        """The ApiServerSource receive adapter, as its Deployment would run it (restartable)."""
        old = self.procs.get("apiserver_receive_adapter")
        if old is not None and old.alive():
            return old
        sa = self.source["spec"].get("serviceAccountName") or "default"
        env = {**self._common_env("adapter"), **adapter_settings(self.source),
               "K_SINK": self.resolve(self.source["spec"]["sink"]), "K_OBSERVABILITY_CONFIG": "{}",
               "KUBECONFIG": str(self.kubeconfig_for(sa))}
        return self._spawn("apiserver_receive_adapter", [], env)

    def stop_adapter(self) -> None:
        proc = self.procs.pop("apiserver_receive_adapter", None)
        if proc is not None:
            proc.stop(timeout=5.0)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Set a cluster up unseen, as if kdesched were deployed afterwards: the adapter is down
        inside the block; on leaving, the classifier restarts (seeding its cache with one LIST of
        what is there now) and the adapter starts (announcing nothing that exists), and a probe
        node proves the adapter's watch delivers before the test goes on."""
        self.stop_adapter()
        yield
        classifier = self.functions["classifier"]
        classifier.stop()
        # deployed afterwards: no node record of an earlier classifier (else its start-up reconcile
        # would rightly send what this setup changed unseen; tests/reactor/test_reconcile.py shows it)
        self.forget_classifier_record()
        classifier.start()
        self.start_adapter()
        self.probe()

    def forget_classifier_record(self) -> None:
        api = self.cp.api
        assert api is not None
        try:
            api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kdesched-classifier")
        except ApiError as exc:
            if exc.status != 404:
                raise

    def probe(self, timeout: float = 60.0) -> None:
        """Nodes that are never usable (cordoned, tainted) are created and deleted until the
        classifier gets one's add and delete through adapter, broker and filter. A node created
        before the adapter's first LIST is in that LIST, which announces nothing: so one per
        2 seconds, each deleted if unseen."""
        api = self.cp.api
        assert api is not None
        classifier = self.functions["classifier"]
        deadline = time.monotonic() + timeout

        def more(ce_type: str, than: float) -> bool:
            return classifier.events(ce_type) > than

        while True:
            adds, deletes = classifier.events(APISERVER_ADD), classifier.events(APISERVER_DELETE)
            name = f"realknative-probe-{time.monotonic_ns()}"
            api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                                         "spec": {"unschedulable": True, "taints": [
                                             {"key": "realknative/probe", "effect": "NoSchedule"}]}})
            seen = wait_until(functools.partial(more, APISERVER_ADD, adds), 2.0, "", interval=0.05, quiet=True)
            api.delete(f"/api/v1/nodes/{name}", grace=0)
            if seen:
                self.cp.wait_for(functools.partial(more, APISERVER_DELETE, deletes),
                                 max(5.0, deadline - time.monotonic()), interval=0.05, what="the probe node's delete")
                return
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the adapter delivered no node event within {timeout}s "
                                   f"(log: {self.workdir / 'apiserver_receive_adapter.log'})")

    def check_alive(self) -> None:
        for proc in self.procs.values():
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail(40)}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until an event posted to the ingress comes out at the deadletter function through the
        channel, the filter and the audit Trigger (everything is listening and configured)."""
        deadletter = self.functions["deadletter"]
        probe = f"realknative-probe-{os.getpid()}-{time.monotonic_ns()}"

        def delivered() -> bool:
            self.check_alive()
            try:
                self.post_event("dev.kdesched.run.completed", {"evictions": [], "trigger": "probe"}, id=probe,
                                source="/realknative/probe")
            except (OSError, urllib.error.HTTPError):
                return False
            time.sleep(0.3)
            return any(probe in m for m in deadletter.messages())

        self.cp.wait_for(delivered, timeout, interval=0.5, what="an event through ingress, channel and filter")

    def post_event(self, ce_type: str, data: Any, *, id: str, source: str = "/realknative/test",
                   extensions: Mapping[str, str] | None = None, url: str | None = None) -> int:
        """POST a binary-mode CloudEvent to the Broker ingress (what a person or CI does); the status."""
        headers = {"Content-Type": "application/json", "ce-specversion": "1.0", "ce-type": ce_type, "ce-id": id,
                   "ce-source": source, **{f"ce-{k}": v for k, v in (extensions or {}).items()}}
        req = urllib.request.Request(url or self.broker_url, data=json.dumps(data).encode(), headers=headers,
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)

    def begin_test(self) -> None:
        """From now on :meth:`dead_letters` and :meth:`audits` show only what the test caused."""
        self._deadletter_mark = len(self.functions["deadletter"].messages())

    def _deadletter_messages(self) -> list[str]:
        return self.functions["deadletter"].messages()[getattr(self, "_deadletter_mark", 0):]

    def repost(self, delivery: Delivery) -> int:
        """Send a recorded delivery again, to the Broker ingress, with its CloudEvent attributes and
        id: a duplicate from upstream (the adapter retries a send whose answer it lost), arriving
        after whatever happened since. It takes the whole path again: channel, filter, Trigger."""
        headers = {k: v for k, v in delivery.headers.items() if k.startswith("ce-") or k == "content-type"}
        req = urllib.request.Request(self.broker_url, data=delivery.body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)

    def dead_letters(self) -> list[str]:
        """The dead-letter log lines (``dead letter: type=... error={...} data=...``) since begin_test()."""
        return [m for m in self._deadletter_messages() if m.startswith("dead letter: ")]

    def audits(self) -> list[str]:
        """The run.completed audit lines since begin_test() (not the readiness probes')."""
        return [m for m in self._deadletter_messages() if m.startswith("audit: ") and "realknative-probe" not in m]

    def route(self, trigger: str, proxy: Proxy) -> None:
        """Point Trigger ``trigger`` (its subscriber is the classifier) at ``proxy`` and wait until
        node events really go through it (probe nodes)."""
        self.set_subscriber(trigger, proxy.url)
        self.proxies.append(proxy)
        deadline = time.monotonic() + 60
        while not proxy.deliveries(APISERVER_ADD):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node events do not reach the proxy of Trigger {trigger}")
            self.probe()

    def nodes_cached(self) -> str:
        """The classifier's /readyz reason, e.g. ``node cache seeded (2 nodes)``."""
        code, body = self.functions["classifier"].get("/readyz")
        return str(json.loads(body).get("reason")) if code in (200, 503) else f"HTTP {code}: {body}"


    # cleaning up ----------------------------------------------------------------------------------
    def _uninstall(self) -> None:
        api = self.cp.api
        if api is None:
            return
        for plural, group in (("triggers", "eventing.knative.dev/v1"), ("brokers", "eventing.knative.dev/v1"),
                              ("inmemorychannels", "messaging.knative.dev/v1"),
                              ("apiserversources", "sources.knative.dev/v1"), ("pingsources", "sources.knative.dev/v1")):
            try:
                api.request("DELETE", f"/apis/{group}/namespaces/{NS}/{plural}",
                            {"kind": "DeleteOptions", "apiVersion": "v1"})
            except ApiError as exc:
                if exc.status != 404:
                    raise
        # let ControlPlane.reset() take what is left (namespaces, RBAC, ConfigMaps)
        for kind_path in (f"/api/v1/namespaces/{NS}", f"/api/v1/namespaces/{SYSTEM_NS}"):
            _unkeep(api, kind_path)
        for plural in ("clusterroles", "clusterrolebindings"):
            for obj in api.get(f"/apis/rbac.authorization.k8s.io/v1/{plural}",
                               labelSelector=KEEP_LABEL)["items"]:
                _unkeep(api, f"/apis/rbac.authorization.k8s.io/v1/{plural}/{quote(obj['metadata']['name'])}")


# -- a loopback proxy in front of a function ----------------------------------------------------------
@dataclass
class Delivery:
    """One request the proxy received: CloudEvent headers, the object's uid/resourceVersion (Node
    events), what it answered, and which upstream served it (-1: answered by the rule)."""

    ce_type: str
    ce_id: str
    uid: str
    resource_version: str
    status: int
    upstream: int
    at: float
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    body: bytes = field(default=b"", repr=False)
    lost: int = 0  # the upstream's status when the proxy lost its answer (``lose``), else 0


class Proxy:
    """A tiny HTTP proxy on loopback: each POST goes to the next upstream (round-robin), unless
    ``rule(delivery_so_far, body)`` returns a status to answer instead (e.g. 503: the dispatcher
    will retry it later, letting later events overtake it). Everything is recorded in ``log``.

    Stands in for what Knative Serving's routing would do (two replicas behind one Service URL),
    and for a network or pod failing some deliveries, without touching the code under test."""

    def __init__(self, upstreams: list[str], rule: Callable[[Delivery, bytes], int | None] | None = None,
                 repeat: Callable[[Delivery], bool] | None = None,
                 lose: Callable[[Delivery], bool] | None = None) -> None:
        import http.server
        import threading

        self.upstreams = upstreams
        self.rule = rule
        self.repeat = repeat  # deliver twice (a redelivery after a lost answer); answer the first
        self.lose = lose  # deliver, then lose the answer: the caller gets 503 (and will redeliver)
        self.log: list[Delivery] = []
        self._next = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy._serve(self, body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="realknative-proxy", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def _serve(self, handler: Any, body: bytes) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        meta: dict[str, Any] = {}
        try:
            doc = json.loads(body) if body else None
            if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
                meta = doc["metadata"]
        except ValueError:
            pass
        delivery = Delivery(headers.get("ce-type", ""), headers.get("ce-id", ""), str(meta.get("uid") or ""),
                            str(meta.get("resourceVersion") or ""), 0, -1, time.monotonic(), headers, body)
        status = self.rule(delivery, body) if self.rule is not None else None
        reply_headers: dict[str, str] = {}
        reply = b""
        if status is None:
            with self._lock:
                delivery.upstream = self._next % len(self.upstreams)
                self._next += 1
            forward = {k: v for k, v in handler.headers.items()
                       if k.lower() not in ("host", "content-length", "connection", "transfer-encoding")}
            status, reply, reply_headers = self._forward(self.upstreams[delivery.upstream], body, forward)
            if self.repeat is not None and self.repeat(delivery):
                again = Delivery(**{**delivery.__dict__, "at": time.monotonic()})
                again.status = self._forward(self.upstreams[delivery.upstream], body, forward)[0]
                with self._lock:
                    self.log.append(again)
            if self.lose is not None and self.lose(delivery):
                delivery.lost = status
                status, reply, reply_headers = 503, b"", {}
        delivery.status = status
        with self._lock:
            self.log.append(delivery)
        handler.send_response(status)
        for k, v in reply_headers.items():
            if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(reply)))
        handler.end_headers()
        handler.wfile.write(reply)

    @staticmethod
    def _forward(url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                return resp.status, resp.read(), dict(resp.headers.items())
        except urllib.error.HTTPError as err:
            return err.code, err.read(), dict(err.headers.items())
        except OSError:
            return 502, b"", {}

    def deliveries(self, ce_type: str | None = None) -> list[Delivery]:
        with self._lock:
            return [d for d in self.log if ce_type is None or d.ce_type == ce_type]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def dead_letter_error(line: str) -> dict[str, Any]:
    """The Knative error extensions of a dead-letter log line, with ``knativeerrordata`` unwrapped:
    on loopback the dispatcher keeps the filter's ``{errdestination, errresponsebody}`` wrapper
    (base64 body); the answer of the function is returned as ``response``."""
    import base64

    error = json.loads(line.split(" error=", 1)[1].split(" data=", 1)[0])
    data = error.get("knativeerrordata") or ""
    try:
        wrapped = json.loads(data)
        error["response"] = base64.b64decode(wrapped.get("errresponsebody") or "").decode("utf-8", "replace")
    except (ValueError, AttributeError):
        error["response"] = data
    return dict(error)


def _unkeep(api: Any, path: str) -> None:
    try:
        api.patch(path, {"metadata": {"labels": {KEEP_LABEL: None}}})
    except ApiError as exc:
        if exc.status != 404:
            raise


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2, *,
               quiet: bool = False) -> Any:
    """Poll ``check`` until truthy (returned); TimeoutError naming ``what`` (``quiet``: None)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            if quiet:
                return None
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)

"""``kdesched serve`` and ``kdesched function NAME``: argparse glue for the long-running modes.

Why: the CLI's main module stays about one-shot commands; the two server modes share their
start-up order here: load and validate the policy and the ``kdesched:`` block first (bad input ->
exit 2 before any API call), then build the client, then serve until SIGTERM/SIGINT, then exit 0.
Both serve HTTP with gunicorn's threaded worker, in this process (:mod:`kdesched.httpserver`: one
process per container holds the state; the threads match ``--concurrency``, the Service's
``containerConcurrency``, plus a reserve for the probes).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any

from kdesched_functions import FUNCTIONS

from kdesched.cli.common import InputError, add_client_limit_flags, client_limits, exit_now, load_policy_arg
from kdesched.cli.flags import NumberFlag, address
from kdesched.cli.startup import started

log = logging.getLogger("kdesched.cli.serve")



def _default_port() -> str:
    """``$PORT`` or 8080, as text: argparse checks a text default with the flag's type, so a bad
    ``$PORT`` (99999, 8O80) exits 2 naming ``--port`` instead of failing at bind time or being
    replaced by 8080 without a word."""
    return os.environ.get("PORT") or "8080"


_port = NumberFlag(int, 0, 65535)
_concurrency = NumberFlag(int, 1, 1000)

CONCURRENCY_ENV = "KDESCHED_CONCURRENCY"
"""The Service's ``containerConcurrency``, set beside it in knative/base/services.yaml."""
DEFAULT_CONCURRENCY = 10
FUNCTION_GRACE_SECONDS = 600.0
"""On SIGTERM a function lets requests in flight finish for up to this long: the longest revision
timeout Knative allows by default. The real bound is the pod's grace period, which Knative sets to
the Service's ``timeoutSeconds`` (and its queue-proxy drains before the container gets SIGTERM)."""


def _add_concurrency_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", type=_concurrency, metavar="N",
                   default=os.environ.get(CONCURRENCY_ENV) or DEFAULT_CONCURRENCY,  # a string: checked by type
                   help=f"events handled at once (default ${CONCURRENCY_ENV}, else {DEFAULT_CONCURRENCY}; on Knative "
                        "the Service's containerConcurrency): one more is answered 503 with Retry-After at once. The "
                        "HTTP server runs N threads plus 3 for the probes and /metrics")

DEFAULT_MAX_OBJECTS_TEXT = ("auto: 35%% of the container's memory limit at ~2.7 KB per object, e.g. ~275,000 at "
                            "2 Gi; 300,000 without a limit")
DEFAULT_DRAIN_TEXT = "15, for the shipped manifest's grace period of 30 s"  # kdesched.reactor.serve.server.DEFAULT_DRAIN_SECONDS

_positive_int = NumberFlag(int, 1, 100_000_000)

MAX_SWEEP_SECONDS = 7 * 24 * 3600
"""``--sweep-interval``'s bound: the policy's, kdesched.reactor.run.settings.MAX_SWEEP_SECONDS, not
imported (that would load the policy and admission code into every ``kdesched function``'s cold
start); tests/test_cli_policy_sweep.py checks they agree."""



@dataclass(frozen=True)
class _CountOrAuto(NumberFlag):
    """``--cache-max-objects``: a whole number in range, or ``auto`` (None: from the memory limit)."""

    def __call__(self, text: str) -> int | None:  # type: ignore[override]
        if text.strip().lower() == "auto":
            return None
        return int(super().__call__(text))


_max_objects = _CountOrAuto(int, 1, 100_000_000, note="or auto")
_seconds = NumberFlag(float, 0, MAX_SWEEP_SECONDS, "seconds")
_drain_seconds = NumberFlag(float, 0, 3600, "seconds")


def configure_serve_parser(subparsers: Any, common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Register ``kdesched serve``."""
    p = subparsers.add_parser(
        "serve", parents=[common] if common is not None else [], help="the standalone reactor (no Knative needed)",
        description="Watch Nodes through the API server, classify changes, run the strategies each change affects "
                    "(in-process, coordinated by a Lease), sweep periodically, and serve POST / for "
                    "dev.kdesched.run.requested CloudEvents plus /healthz /readyz /metrics. Two Leases in the "
                    "--lease-namespace: 'kdesched' serialises balance runs and keeps the eviction history, "
                    "'kdesched-leader' elects the one replica that watches and runs ($KDESCHED_LEASE_NAME renames "
                    "both: NAME and NAME-leader). A missing namespace or RBAC refusing a Lease stops serve at start "
                    "with exit 1. SIGTERM stops cleanly (exit 0). Mode: the event path, with kdesched's safety "
                    "defaults on (somewhere to go, per-workload pacing) unless the policy sets "
                    "kdesched.safety.enabled: false.")
    p.add_argument("--policy", metavar="FILE", help="DeschedulerPolicy file (default: the default policy)")
    p.add_argument("--profile", metavar="NAME", action="append", default=[], help="a named preset profile; repeatable")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context")
    p.add_argument("--host", type=address, default="0.0.0.0", help="listen address: an IP address or a host name "
                   "(default 0.0.0.0)")
    p.add_argument("--port", type=_port, default=_default_port(), help="HTTP port (default $PORT or 8080; 0 = any)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, evict nothing")
    p.add_argument("--sweep-interval", type=_seconds, default=None, metavar="SECONDS",
                   help="periodic full run every SECONDS (default kdesched.sweepIntervalSeconds, 900; 0 disables)")
    p.add_argument("--no-leader-election", dest="leader_election", action="store_false",
                   help="run without the leader Lease (only with a single replica)")
    p.add_argument("--identity", help="leader/lease holder identity (default: $POD_NAME, else the host name, plus a random "
                        "suffix unique to this process)")
    p.add_argument("--drain-seconds", type=_drain_seconds, default=None, metavar="SECONDS",
                   help="on SIGTERM, how long runs in flight get to end before serve releases the leader Lease and "
                        f"exits 0 anyway (default {DEFAULT_DRAIN_TEXT}); keep it under the pod's "
                        "terminationGracePeriodSeconds minus ~10 s for the release")
    p.add_argument("--lease-namespace", metavar="NAMESPACE",
                   help="namespace of the Leases kdesched and kdesched-leader (default: $KDESCHED_LEASE_NAMESPACE, "
                        "else the pod's namespace in a cluster, else the kubeconfig context's namespace, else "
                        "'default'); it must exist, with the Role kdesched-lease bound there")
    p.add_argument("--cache", action=argparse.BooleanOptionalAction, default=True,
                   help="plan from a watch-fed cache of the kinds the policy reads (LIST once, then WATCH) instead of "
                        "LISTing them for every run (default: on; --no-cache LISTs per run)")
    p.add_argument("--cache-max-objects", type=_max_objects, default="auto", metavar="N|auto",
                   help=f"ceiling of the watch cache, all kinds together (default {DEFAULT_MAX_OBJECTS_TEXT}); a "
                        "kind counted past it is not listed: the cache is dropped and runs LIST per event, as with "
                        "--no-cache, until the objects are counted under 80%% of it again (every 15 minutes)")
    _add_concurrency_flag(p)
    add_client_limit_flags(p)
    p.set_defaults(func=cmd_serve, ends_startup=True)  # kdesched.cli.startup.started once built
    return p


def configure_function_parser(subparsers: Any, common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Register ``kdesched function NAME``."""
    p = subparsers.add_parser(
        "function", parents=[common] if common is not None else [], help="serve one Knative function",
        description="Serve one function over HTTP (the container command on Knative). The policy comes from "
                    "--policy or $KDESCHED_POLICY (default policy otherwise); the cluster from the in-cluster "
                    "service account or $KUBECONFIG. Mode: the event path, with kdesched's safety defaults on "
                    "(somewhere to go, per-workload pacing) unless the policy sets kdesched.safety.enabled: false.")
    p.add_argument("name", nargs="?", default=os.environ.get("KDESCHED_FUNCTION"), choices=list(FUNCTIONS),
                   metavar="NAME", help="the function to serve (default $KDESCHED_FUNCTION): "
                   + "; ".join(f"{f.name}: {f.summary}" for f in FUNCTIONS.values()))
    p.add_argument("--policy", metavar="FILE", help="DeschedulerPolicy file (default $KDESCHED_POLICY)")
    p.add_argument("--host", type=address, default="0.0.0.0", help="listen address: an IP address or a host name "
                   "(default 0.0.0.0)")
    p.add_argument("--port", type=_port, default=_default_port(), help="HTTP port (default $PORT or 8080)")
    _add_concurrency_flag(p)
    p.set_defaults(func=cmd_function, ends_startup=True)  # kdesched.cli.startup.started once built
    return p


def _load(policy_path: str | None, profiles: list[str], dry_run: bool) -> Any:
    """The policy checked as a whole, its settings and dry-run decision, before any API call
    (bad input -> InputError -> exit 2). See :func:`kdesched.cli.common.load_policy_arg`."""
    return load_policy_arg(policy_path, profiles, dry_run_flag=dry_run)


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context in use ("" if none is set or the file cannot be read):
    ``--kubeconfig`` else the first file of $KUBECONFIG else ~/.kube/config; ``--context`` else
    current-context."""
    import yaml

    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or os.path.expanduser(
        "~/.kube/config")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return ""
    if not isinstance(doc, dict):
        return ""
    name = context or doc.get("current-context")
    contexts = doc.get("contexts")
    for entry in contexts if isinstance(contexts, list) else ():  # a malformed file: the client names the field
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get("context")
            ns = body.get("namespace") if isinstance(body, dict) else None
            return ns if isinstance(ns, str) else ""
    return ""


def lease_namespace(flag: str | None, kubeconfig: str | None, context: str | None,
                    env: Any = None, sa_file: str = SERVICE_ACCOUNT_NAMESPACE) -> tuple[str, str]:
    """(namespace, where it came from) for serve's Leases: --lease-namespace, else
    $KDESCHED_LEASE_NAMESPACE / $POD_NAMESPACE, else the pod's namespace (in a cluster: the service
    account's namespace file), else the kubeconfig context's namespace, else "default"."""
    from kdesched.reactor.run.settings import LEASE_NAMESPACE_ENV

    env = os.environ if env is None else env
    if flag:
        return flag, "--lease-namespace"
    for key in (LEASE_NAMESPACE_ENV, "POD_NAMESPACE"):
        if env.get(key):
            return env[key], f"${key}"
    if not kubeconfig and env.get("KUBERNETES_SERVICE_HOST"):
        try:
            with open(sa_file, encoding="utf-8") as fh:
                ns = fh.read().strip()
            if ns:
                return ns, "the pod's namespace"
        except OSError:
            pass
    ns = kubeconfig_namespace(kubeconfig, context)
    if ns:
        return ns, "the kubeconfig context's namespace"
    return "default", "default (no namespace in the kubeconfig context)"


def _on_signals(stop: Any) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def cmd_serve(args: argparse.Namespace) -> int:
    from kdesched_functions.manual import create_serve_app

    from kdesched.kube.client import KubeClient
    from kdesched.kube.errors import ConfigError
    from kdesched.reactor.serve.server import ReactorServer

    loaded = _load(args.policy, args.profile, args.dry_run)
    policy, settings = loaded.policy, loaded.settings
    log.info("kdesched serve: %s (%s)", "dry run, nothing will be evicted" if loaded.dry_run else "live",
             loaded.dry_run_why)
    namespace, origin = lease_namespace(args.lease_namespace, args.kubeconfig, args.context)
    from kdesched.model.names import is_dns_label  # here: `kdesched function` never loads the model package

    if not is_dns_label(namespace):
        raise InputError(f"--lease-namespace: must be a namespace name (DNS label), got {namespace!r} (from {origin})")
    settings = replace(settings, lease_namespace=namespace)

    try:
        client = KubeClient.from_config(args.kubeconfig, context=args.context, limits=client_limits(args))
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    from kdesched.kube.cache import DEFAULT_MAX_OBJECTS, auto_ceiling
    from kdesched.reactor.serve.server import DEFAULT_DRAIN_SECONDS

    # auto (None): from the container's memory limit, logged (not read at all with --no-cache)
    max_objects = args.cache_max_objects or (auto_ceiling().objects if args.cache else DEFAULT_MAX_OBJECTS)
    server = ReactorServer(policy, settings, client, host=args.host, port=args.port, app_factory=create_serve_app,
                           sweep_interval_seconds=args.sweep_interval, leader_election=args.leader_election,
                           identity=args.identity, cache=args.cache, cache_max_objects=max_objects,
                           drain_seconds=DEFAULT_DRAIN_SECONDS if args.drain_seconds is None else args.drain_seconds,
                           http_concurrency=args.concurrency)
    _on_signals(server.shutdown)
    started()  # the start-up's objects are built: freeze them, collect from here on (kdesched.cli.startup)
    log.info("kdesched serve: balanceDelay=%gs settle=%gs sweep=%gs Leases %s/%s and %s/%s-leader "
             "(namespace from %s); %s", settings.balance_delay_seconds, settings.settle_seconds,
             server.sweep_interval, namespace, settings.lease_name, namespace, settings.lease_name, origin,
             f"watch cache of {', '.join(server.cache.kinds)} (ceiling {server.cache.max_objects} objects)"
             if server.cache is not None else "no watch cache: runs LIST what they read")
    code = server.run()
    if getattr(args, "exit_when_done", False):
        # on the command line: exit now, not when a run still evicting past the drain (a worker
        # thread the interpreter would wait for) ends; the Lease is already released
        exit_now(code)
    return code


def build_function_app(name: str, policy_path: str | None = None) -> Any:
    """The Flask app of function ``name`` (policy from ``policy_path`` or $KDESCHED_POLICY)."""
    function = FUNCTIONS.get(name)
    if function is None:
        raise InputError(f"unknown function {name!r} (known: {', '.join(FUNCTIONS)})")
    if not function.needs_policy:
        return function.create_app()
    loaded = _load(policy_path or os.environ.get("KDESCHED_POLICY"), [], False)
    log.info("function %s: %s (%s)", name, "dry run, nothing will be evicted" if loaded.dry_run else "live",
             loaded.dry_run_why)
    return function.create_app(policy=loaded.policy, settings=loaded.settings)


def cmd_function(args: argparse.Namespace) -> int:
    from kdesched.httpserver import WSGIServer, container_cpus, describe_cpus, threads_for

    if not args.name:
        raise InputError(f"function: NAME is required (or set $KDESCHED_FUNCTION): {', '.join(FUNCTIONS)}")
    try:
        app = build_function_app(args.name, args.policy)
    except Exception as exc:
        # imported only on failure: deadletter never loads the kube layer's errors (and tenacity)
        from kdesched.kube.errors import ConfigError

        if isinstance(exc, ConfigError):
            raise InputError(str(exc)) from None
        raise
    app.limit_events(args.concurrency)
    threads = threads_for(args.concurrency)
    server = WSGIServer(args.host, args.port, app, threads=threads, graceful_seconds=FUNCTION_GRACE_SECONDS)
    stopping = threading.Event()

    def stop() -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=server.shutdown, name="kdesched-http-stop", daemon=True).start()

    _on_signals(stop)
    started()  # the app is built: freeze the start-up's objects, collect from here on (kdesched.cli.startup)
    log.info("function %s listening on %s:%d (gunicorn gthread, one worker in this process: %d event(s) at once, "
             "%d threads; %s)", args.name, args.host, server.server_port, args.concurrency, threads,
             describe_cpus(container_cpus()))
    server.serve_forever()
    log.info("function %s stopped", args.name)
    if getattr(args, "exit_when_done", False):
        # a request still running past the graceful stop must not hold the process (the pod's grace
        # period ends it anyway)
        exit_now(0)
    return 0

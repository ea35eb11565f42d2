"""The runtime of the functions that evict (rebalance, taints, affinity, manual): the policy, the
reactor settings, the API client and the reactor, built once at start-up, and the handlers that
hand an event to the reactor and reply with its report.

Why a module of its own: this is what loads the reactor, the engine, the policy package and the
kubernetes client, about two thirds of an evicting function's start-up. The HTTP part every
function shares (:mod:`kdesched_functions.common`) must not pay for it, so ``deadletter`` starts
without any of it (docs/reactor.md, "Cold start").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.kube.errors import ConfigError
from kdesched.policy.types import Policy
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.events.types import RUN_COMPLETED
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import ReactorSettings

from kdesched_functions import Function
from kdesched_functions.apierrors import API_ANSWERS
from kdesched_functions.common import (
    FunctionApp,
    Handler,
    Incoming,
    Reply,
    Result,
    create_function_app,
    reply_id,
)

CACHE_ENV = "KDESCHED_CACHE"
"""``1``/``true``: the function keeps a watch cache (kdesched.kube.cache) and plans from it; only
worth it with ``min-scale: 1`` (docs/reactor.md, "Knative functions: warm cache or LIST per event")."""

POLICY_ENV = "KDESCHED_POLICY"


def cache_enabled(env: Mapping[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(CACHE_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"${CACHE_ENV}: must be 1/true or 0/false, got {value!r}")


@dataclass
class Runtime:
    """What a function needs, built once at start-up (from the environment, or injected by tests)."""

    policy: Policy
    settings: ReactorSettings
    client: Any  # KubeClient
    reactor: Reactor | None = None
    cache: Any = None  # kdesched.kube.cache.ClusterCache with $KDESCHED_CACHE=1
    resume_moves: bool = False  # a deployed function (not one a test injects): continue held moves at start

    def get_reactor(self) -> Reactor:
        if self.reactor is None:
            self.reactor = Reactor(self.policy, self.settings, self.client)
            if self.resume_moves:
                # paced moves this function's previous process (or another replica) left held in the
                # disruption ledger: repeat them (a scaled-to-zero or crashed process lost its timers)
                import threading

                threading.Thread(target=self.reactor.resume, name="kdesched-resume", daemon=True).start()
            if cache_enabled():
                from kdesched.kube.cache import ClusterCache
                from kdesched.reactor.events.routing import kinds_needed
                from kdesched.reactor.io.loaders import CachedLoader

                # LIST + WATCH the kinds this policy reads; runs LIST until each is listed
                self.cache = ClusterCache(self.client, kinds=kinds_needed(self.reactor.policy))
                self.cache.on_pod_ready(self.reactor.pod_turned_ready)  # as serve: a Ready replacement wakes its moves
                self.cache.start()
                self.reactor.loader = CachedLoader(self.cache)
        return self.reactor

    def ready(self) -> tuple[bool, str]:
        """Ready once the policy is loaded (a cache still syncing only means LISTs meanwhile)."""
        why = f"policy loaded ({self.policy.source or 'default policy'})"
        return True, why + (f"; {self.cache.describe()}" if self.cache is not None else "")


def load_runtime(policy: Policy | None = None, settings: ReactorSettings | None = None, client: Any = None,
                 reactor: Reactor | None = None) -> Runtime:
    """Fill what is not given: policy from $KDESCHED_POLICY (else the default policy), settings from
    it (+ env), the API client from $KUBECONFIG or in-cluster config."""
    if reactor is not None:
        return Runtime(reactor.policy, reactor.settings, reactor.client, reactor)
    if policy is None:
        path = os.environ.get(POLICY_ENV)
        if path:
            from kdesched.policy.load import load_policy
            from kdesched.reactor.run.settings import block_problems

            policy = load_policy(path, check_block=block_problems)  # plugin and kdesched: errors together
        else:
            from kdesched.policy.defaults import default_policy

            policy = default_policy()
    if settings is None:
        settings = ReactorSettings.from_policy(policy)
    deployed = client is None
    if client is None:
        from kdesched.kube.client import KubeClient

        client = KubeClient.from_config(os.environ.get("KUBECONFIG") or None)
    return Runtime(policy, settings, client, resume_moves=deployed)


def trigger_of(incoming: Incoming, node: str = "") -> Trigger:
    """The reactor's record of the event that asked for a run."""
    return Trigger(incoming.type, incoming.id, incoming.source, node)


def run_completed(incoming: Incoming, report: Mapping[str, Any], node: str = "") -> Reply:
    """The reply of every run: a ``dev.kdesched.run.completed`` event carrying the report, with an
    id derived from the event that asked for the run (:func:`~kdesched_functions.common.reply_id`):
    a redelivered event's report is the same audit event, not a second one."""
    return Reply(RUN_COMPLETED, dict(report), subject=node, id=reply_id(incoming, RUN_COMPLETED))


def node_event_handler(reactor: Reactor) -> Handler:
    """rebalance, taints, affinity: the reactor runs the event's scope; reply with the report."""

    def handle(incoming: Incoming) -> Result:
        report = reactor.node_event(trigger_of(incoming), parse_node_event(incoming.data))
        return run_completed(incoming, report, report["trigger"]["node"])

    return handle


def reactor_app(fn: Function, runtime: Runtime, handler: Handler) -> FunctionApp:
    return create_function_app(fn.name, handler, fn.accepts, ready=runtime.ready, answers=API_ANSWERS)


def create_node_app(fn: Function, **inject: Any) -> FunctionApp:
    """rebalance, taints, affinity: one app each, differing only by the event types they accept
    (``inject``: policy=, settings=, client=, reactor= for tests and serve)."""
    runtime = load_runtime(**inject)
    return reactor_app(fn, runtime, node_event_handler(runtime.get_reactor()))

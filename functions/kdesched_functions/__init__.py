"""The Knative functions: thin CloudEvent adapters over the library (``kdesched``).

Every function is declared once, in :data:`FUNCTIONS` below: its name (the Knative Service and
``kdesched function NAME``), the CloudEvent types it accepts (what its Triggers filter on), and how
its HTTP app is made. Adding a function is one entry here, a Service and a Trigger in knative/.

The three node-event functions share one factory (:func:`kdesched_functions.runtime.create_node_app`):

- rebalance: ``node.added`` / ``node.ready`` -> LowNodeUtilization + RemoveDuplicates (by default).

  Why: a node that joins or recovers is where pods should go now, not at the next timer tick. The
  run balances the whole cluster (balance strategies see every node), under the Lease, and a burst
  of such events (an autoscaler adding twenty nodes) gives one run at once plus at most one
  follow-up. ``node.ready`` means the node became *usable for ordinary pods* (Ready, uncordoned, no
  NoSchedule/NoExecute taint such a pod is refused by: kdesched.reactor.events.lifecycle), sent once on
  the write that completed it; a ``node.added`` for a node not usable yet (a cloud node still
  ``uninitialized``) is acknowledged with a report saying why and runs nothing.

- taints: ``node.taints.changed`` -> RemovePodsViolatingNodeTaints on that node only.

  Why: a taint edit affects only the pods of that node, so the run reads only that node's pods
  (``fieldSelector=spec.nodeName``) plus the node list, never the whole cluster. Runs for the same
  node never overlap (per-node lock); across instances a repeat is harmless (docs/reactor.md).

- affinity: ``node.labels.changed`` -> RemovePodsViolatingNodeAffinity on that node, plus
  RemovePodsViolatingTopologySpreadConstraint when a topology label changed.

  Why: a label edit can make pods on that node violate their required node affinity (only that
  node's pods are read), and a changed zone/region/hostname (or any key pods spread over) changes
  topology domains, which TopologySpread must re-balance across the cluster (under the Lease).

This module imports nothing heavy (no werkzeug, no client, no policy: the event types come from the
leaf module :mod:`kdesched.reactor.events.types`) so that the ``kdesched`` command can list the
functions without paying for them; an app's module is imported only when it is built, and each
imports only what its function uses (cold start after scale-to-zero, docs/reactor.md):

- ``common``: the HTTP part every function shares (CloudEvent decoding, replies, status codes,
  the WSGI app on werkzeug); no reactor, no API client, no policy;
- ``runtime``: what the evicting functions add (policy, settings, API client, reactor);
- ``deadletter`` imports ``common`` only; ``classifier`` adds the API client and the classifier.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kdesched.reactor.events.types import (
    APISERVER_EVENTS,
    LABELS_CHANGED,
    NODE_ADDED,
    NODE_EVENTS,
    NODE_READY,
    PING,
    RUN_COMPLETED,
    RUN_REQUESTED,
    TAINTS_CHANGED,
)

if TYPE_CHECKING:
    from kdesched_functions.common import FunctionApp


@dataclass(frozen=True)
class Function:
    """One deployable function."""

    name: str
    accepts: tuple[str, ...]
    """The CloudEvent types it handles; anything else is answered 400."""
    summary: str
    """One line for ``kdesched function --help`` and the docs."""
    factory: str
    """``module:callable`` (inside this package) that builds the app: ``callable(function, **inject)``."""
    needs_policy: bool = True
    """Whether the app is built with the policy and reactor settings (``policy=``, ``settings=``)."""

    def create_app(self, **inject: Any) -> FunctionApp:
        """The app (``inject``: policy=, settings=, client=, reactor= ... for tests and serve)."""
        module, _, attr = self.factory.partition(":")
        factory: Callable[..., FunctionApp] = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        return factory(self, **inject)


FUNCTIONS: Mapping[str, Function] = {f.name: f for f in (
    Function("classifier", APISERVER_EVENTS,
             "ApiServerSource Node events -> the semantic dev.kdesched.node.* events (a singleton)",
             "classifier:create_app", needs_policy=False),
    Function("rebalance", (NODE_ADDED, NODE_READY),
             "a node joined or became usable -> LowNodeUtilization + RemoveDuplicates (balance run, Lease)",
             "runtime:create_node_app"),
    Function("taints", (TAINTS_CHANGED,),
             "taints changed -> RemovePodsViolatingNodeTaints on that node only",
             "runtime:create_node_app"),
    Function("affinity", (LABELS_CHANGED,),
             "labels changed -> RemovePodsViolatingNodeAffinity on that node (+ TopologySpread on a topology key)",
             "runtime:create_node_app"),
    Function("manual", (RUN_REQUESTED, PING),
             "run.requested from a person or CI, and the PingSource sweep",
             "manual:create_app"),
    # the dead-letter sink receives whatever failed, and audits run.completed replies
    Function("deadletter", (RUN_COMPLETED, *APISERVER_EVENTS, *NODE_EVENTS, RUN_REQUESTED, PING),
             "dead letters and the run.completed audit log (always 202)",
             "deadletter:create_app", needs_policy=False),
)}
"""Every function, by name."""

FUNCTION_EVENT_TYPES: Mapping[str, tuple[str, ...]] = {name: f.accepts for name, f in FUNCTIONS.items()}
"""Function name -> the CloudEvent types it accepts (the Knative Triggers filter on these)."""

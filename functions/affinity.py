"""affinity: ``node.labels.changed`` -> RemovePodsViolatingNodeAffinity on that node, plus
RemovePodsViolatingTopologySpreadConstraint when a topology label changed.

Why: a label edit can make pods on that node violate their required node affinity (only that
node's pods are read), and a changed zone/region/hostname (or any key pods spread over) changes
topology domains, which TopologySpread must re-balance across the cluster (under the Lease).
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from kdesched.functions.common import load_runtime, node_event_handler, reactor_app

NAME = "affinity"


def create_app(**inject: Any) -> Flask:
    """The Flask app (``inject``: policy=, settings=, client=, reactor= for tests and serve)."""
    runtime = load_runtime(**inject)
    return reactor_app(NAME, runtime, node_event_handler(runtime.get_reactor()))

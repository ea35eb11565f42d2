"""taints: ``node.taints.changed`` -> RemovePodsViolatingNodeTaints on that node only.

Why: a taint edit affects only the pods of that node, so the run reads only that node's pods
(``fieldSelector=spec.nodeName``) plus the node list, never the whole cluster. Runs for the same
node never overlap (per-node lock); across instances a repeat is harmless (docs/reactor.md).
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from kdesched.functions.common import load_runtime, node_event_handler, reactor_app

NAME = "taints"


def create_app(**inject: Any) -> Flask:
    """The Flask app (``inject``: policy=, settings=, client=, reactor= for tests and serve)."""
    runtime = load_runtime(**inject)
    return reactor_app(NAME, runtime, node_event_handler(runtime.get_reactor()))

"""rebalance: ``node.added`` / ``node.ready`` -> LowNodeUtilization + RemoveDuplicates (by default).

Why: a node that joins or recovers is where pods should go now, not at the next timer tick. The
run balances the whole cluster (balance strategies see every node), under the Lease, and a burst
of such events (an autoscaler adding twenty nodes) is coalesced into one run. A ``node.added``
for a node that is not Ready and schedulable yet is acknowledged with a report saying "waiting
for node.ready" and runs nothing: the classifier sends ``node.ready`` when it is.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from kdesched.functions.common import load_runtime, node_event_handler, reactor_app

NAME = "rebalance"


def create_app(**inject: Any) -> Flask:
    """The Flask app (``inject``: policy=, settings=, client=, reactor= for tests and serve)."""
    runtime = load_runtime(**inject)
    return reactor_app(NAME, runtime, node_event_handler(runtime.get_reactor()))

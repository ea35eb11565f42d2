"""manual: ``dev.kdesched.run.requested`` (a person, CI) and the PingSource sweep.

Why: operators need a run on demand after an incident or from CI (``data.strategies``,
``data.dryRun``, ``data.nodes``), and the periodic sweep (``dev.knative.sources.ping``, a full
run of the whole policy) catches whatever events were lost. Both run under the Lease.
``data.dryRun: true`` forces a dry run; ``false`` cannot override a dry-run deployment.
"""

from __future__ import annotations

from typing import Any

from kdesched.reactor.events.requests import parse_run_request, parse_sweep_data
from kdesched.reactor.events.types import PING
from kdesched.reactor.run.runner import Reactor

from kdesched_functions import FUNCTIONS, Function
from kdesched_functions.apierrors import API_ANSWERS
from kdesched_functions.common import FunctionApp, Handler, Incoming, Result, create_function_app
from kdesched_functions.runtime import load_runtime, reactor_app, run_completed, trigger_of

NAME = "manual"


def manual_handler(reactor: Reactor) -> Handler:
    def handle(incoming: Incoming) -> Result:
        parse = parse_sweep_data if incoming.type == PING else parse_run_request
        return run_completed(incoming, reactor.run_requested(trigger_of(incoming), parse(incoming.data)))

    return handle


def create_app(function: Function, **inject: Any) -> FunctionApp:
    """The app (``inject``: policy=, settings=, client=, reactor= for tests and serve)."""
    runtime = load_runtime(**inject)
    return reactor_app(function, runtime, manual_handler(runtime.get_reactor()))


def create_serve_app(server: Any) -> FunctionApp:
    """The HTTP endpoint of ``kdesched serve`` (a :class:`~kdesched.reactor.serve.server.ReactorServer`):
    the manual function's handling on ``POST /`` over the server's in-process reactor."""
    return create_function_app("serve", manual_handler(server.reactor), FUNCTIONS[NAME].accepts,
                               ready=server.ready, max_events=getattr(server, "http_concurrency", 10),
                               answers=API_ANSWERS)

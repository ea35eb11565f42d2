"""What each function imports, through its real container command (``kdesched function NAME``).

Why: with scale-to-zero every import is paid again on the first event after an idle period, so a
function must import only what it uses (issue 22). Checked by ``sys.modules`` in a fresh
interpreter, never by time (the timings are bench/bench_function_start.py's job): the command runs
through ``kdesched.cli.main.main`` up to the point where it would serve, and then, instead of
listening, answers one CloudEvent through the app it built and reports what was imported at start
and after that event.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events import types as eventtypes

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request

REPO = Path(__file__).resolve().parents[2]

# Runs `kdesched function NAME` through the console script's entry point (kdesched.cli.entry) with
# the HTTP server (kdesched.httpserver.WSGIServer) replaced by a stand-in whose serve_forever posts
# the event given on argv to the app and prints what sys.modules held, and the collector's state.
PROBE = r"""
import gc, json, sys
import kdesched.cli.startup
kdesched.cli.startup.pause()  # as kdesched.cli.entry.main() does before the first import
import kdesched.httpserver

name, headers, body = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].encode("latin-1")

class Server:
    server_port = 0

    def __init__(self, host, port, app, **options):
        self.app = app

    def serve_forever(self):
        started = sorted(sys.modules)
        gc_state = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
        resp = self.app.test_client().post("/", data=body, headers=headers)
        print(json.dumps({"started": started, "after_event": sorted(sys.modules), "status": resp.status_code,
                          "gc": gc_state}))

    def shutdown(self):
        pass

kdesched.httpserver.WSGIServer = Server
sys.argv = ["kdesched", "function", name, "--port", "0"]
import kdesched.cli.entry
sys.exit(kdesched.cli.entry.main())
"""


def probe(name: str, etype: str, data: Any, env: dict[str, str] | None = None) -> dict[str, Any]:
    headers, body = ce_request(etype, data)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KDESCHED_")}
    environ.update({"LOG_FORMAT": "text", **(env or {})})
    proc = subprocess.run([sys.executable, "-c", PROBE, name, json.dumps(headers), body.decode("latin-1")],
                          check=False, capture_output=True, text=True, env=environ, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def loaded(modules: list[str], *prefixes: str) -> list[str]:
    """The modules that are one of ``prefixes`` or inside one of them."""
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


HEAVY = ("kubernetes", "kdesched.kube.client", "kdesched.reactor.run.runner", "kdesched.reactor.events.routing",
         "kdesched.policy", "kdesched.engine", "kdesched.model", "kdesched.strategies", "kdesched_functions.runtime",
         "yaml", "urllib3", "flask", "jinja2", "click")


def test_deadletter_imports_neither_the_client_nor_the_reactor_nor_the_policy() -> None:
    out = probe("deadletter", ev.RUN_COMPLETED, {"trigger": {"type": "x"}, "evictions": []})
    assert out["status"] == 202
    for when in ("started", "after_event"):
        assert loaded(out[when], *HEAVY) == [], when
    # what it does use: the HTTP part, werkzeug and the SDK
    assert {"kdesched_functions.common", "kdesched_functions.deadletter", "werkzeug", "cloudevents"} <= set(
        out["started"])
    # start-up ran without the cyclic collector, which is back on, past what start-up built, when it serves
    assert out["gc"]["enabled"] and out["gc"]["frozen"] > 10_000


@pytest.fixture
def kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> str:
    fake_api.add(node_obj("n1", taints=[{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]),
                 node_obj("n2"), pod_obj("intolerant", "n1", owner_name="web"))
    return fake_api.kubeconfig(tmp_path / "kubeconfig")


def test_taints_imports_only_what_a_taint_run_uses(kubeconfig: str, fake_api: FakeApiServer) -> None:
    out = probe("taints", ev.TAINTS_CHANGED, {"node": "n1", "before": {"taints": []}, "after": {"taints": [
        {"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}}, {"KUBECONFIG": kubeconfig})
    assert out["status"] == 200 and fake_api.get("Pod", "intolerant", "default") is None  # it did run
    after = out["after_event"]
    # it needs the client, the reactor and the policy...
    assert {"kubernetes", "kdesched.reactor.run.runner", "kdesched_functions.runtime",
            "kdesched.strategies.node_taints"} <= set(after)
    # ...but not the other functions, the standalone server, the one-shot commands' output or the
    # strategies it does not run (kdesched.strategies.registry imports a strategy on first lookup)
    unused = loaded(after, "kdesched_functions.classifier", "kdesched_functions.deadletter",
                    "kdesched_functions.manual", "kdesched.reactor.serve", "kdesched.reactor.io.watch",
                    "kdesched.cli.output", "kdesched.policy.dump", "flask", "jinja2", "click",
                    "kdesched.kube.cache",  # the watch cache: no $KDESCHED_CACHE here
                    "kdesched.strategies.low_node_utilization", "kdesched.strategies.remove_duplicates",
                    "kdesched.strategies.topology_spread", "kdesched.strategies.node_affinity")
    assert unused == []
    assert out["gc"]["enabled"] and out["gc"]["frozen"] > 10_000


def test_classifier_imports_neither_the_engine_run_nor_the_policy_loader(kubeconfig: str) -> None:
    node = {**node_obj("n1"), "metadata": {"name": "n1", "uid": "node-n1", "resourceVersion": "1"}}
    out = probe("classifier", ev.APISERVER_UPDATE, node, {"KUBECONFIG": kubeconfig})
    assert out["status"] in (200, 202)
    assert loaded(out["after_event"], "kdesched.reactor.run.runner", "kdesched.engine", "kdesched.policy.load",
                  "kdesched.reactor.events.routing", "kdesched_functions.runtime", "kdesched.strategies.registry") == []


def test_event_type_module_is_a_leaf_and_events_re_exports_it() -> None:
    code = ("import sys; before = set(sys.modules); import kdesched.reactor.events.types; "
            "print(sorted(set(sys.modules) - before))")
    new = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    cwd=REPO).stdout.replace("'", '"'))
    assert new == ["kdesched", "kdesched.reactor", "kdesched.reactor.events", "kdesched.reactor.events.types"]
    names = [n for n in vars(eventtypes) if n.isupper()]
    assert len(names) == 13 and all(getattr(ev, n) is getattr(eventtypes, n) for n in names)


def test_the_http_server_is_gunicorn_and_the_errors_module_a_leaf() -> None:
    """The functions serve with gunicorn (its worker, socket and config modules; not its logging
    module, which would load logging.config), and the errors every layer raises import nothing."""
    out = probe("deadletter", ev.RUN_COMPLETED, {"trigger": {"type": "x"}, "evictions": []})
    assert {"gunicorn.workers.gthread", "kdesched.httpserver", "kdesched.errors"} <= set(out["started"])
    assert loaded(out["after_event"], "gunicorn.glogging", "gunicorn.arbiter", "logging.config") == []
    code = ("import sys; before = set(sys.modules); import kdesched.errors; "
            "print(sorted(set(sys.modules) - before))")
    new = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    cwd=REPO).stdout.replace("'", '"'))
    assert loaded(new, "kdesched", "kdesched_functions") == ["kdesched", "kdesched.errors"]
    assert loaded(new, "kubernetes", "werkzeug", "gunicorn", "cloudevents") == []

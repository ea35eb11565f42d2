"""JSON logs of a function as it runs in the cluster: ``kdesched function NAME`` with ``LOG_FORMAT=json``.

Why: the functions pass ``function``, ``ce_type``, ``ce_id`` and ``status`` as ``extra=`` log
fields; under ``LOG_FORMAT=json`` (the in-cluster default) the formatter installed by the CLI kept
only a fixed list of keys and dropped them (issue 22). This starts the real command on a loopback
port, sends it CloudEvents over HTTP, stops it with SIGTERM and reads its stderr line by line.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kdesched.reactor.events import types as ev

from tests.functions.helpers import ce_request

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def send(port: int, headers: dict[str, str], body: bytes, deadline: float = 30.0) -> int:
    start = time.monotonic()
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("POST", "/", body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        except ConnectionRefusedError:
            if time.monotonic() - start > deadline:
                raise
            time.sleep(0.02)
        finally:
            conn.close()


def test_deadletter_json_lines_carry_the_event_fields() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KDESCHED_")}
    env["LOG_FORMAT"] = "json"
    proc = subprocess.Popen([sys.executable, "-m", "kdesched", "function", "deadletter", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        dead = ce_request(ev.TAINTS_CHANGED, {"node": "n1"}, id="dl-1", extensions={"knativeerrorcode": "500"})
        audit = ce_request(ev.RUN_COMPLETED, {"trigger": {"type": "x"}, "evictions": []}, "structured", id="rc-1")
        bad = ce_request(ev.RUN_COMPLETED, {"evictions": "all"}, id="bad-1")
        assert [send(port, *dead), send(port, *audit), send(port, *bad)] == [202, 202, 400]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines: list[dict[str, Any]] = [json.loads(line) for line in err.splitlines() if line.strip()]  # all JSON
    by_id = {line.get("ce_id"): line for line in lines if "ce_id" in line}
    assert by_id["dl-1"]["function"] == "deadletter" and by_id["dl-1"]["ce_type"] == ev.TAINTS_CHANGED
    assert by_id["dl-1"]["level"] == "warning" and "dead letter" in by_id["dl-1"]["msg"]
    assert by_id["rc-1"]["ce_type"] == ev.RUN_COMPLETED and by_id["rc-1"]["msg"].startswith("audit:")
    refused = by_id["bad-1"]
    assert refused["function"] == "deadletter" and refused["status"] == 400 and refused["field"] == "data.evictions"
    assert all({"time", "level", "logger", "msg"} <= set(line) for line in lines)

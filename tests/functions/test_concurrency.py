"""200 clients at once against one function's real server process (``kdesched function NAME`` on
loopback: gunicorn's threaded worker, ``--concurrency`` as the Service's containerConcurrency).

Why: issue 31's target. A burst past containerConcurrency (a broker retrying a backlog, a caller that
bypasses queue-proxy, ``serve``'s endpoint) must get no error but "try again later": every request
answered 2xx, or 429/503 with Retry-After, never a reset connection, a 500 or a hang; and no event
lost: each client retries as Knative's dispatcher does until its event is accepted, and every
accepted event was handled (deadletter: its audit line; taints: the run report of that event).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kdesched.reactor.events import types as ev

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 200
DEADLINE_SECONDS = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``kdesched function NAME`` in its own process, its log collected."""

    def __init__(self, name: str, concurrency: int, env: dict[str, str]) -> None:
        self.port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KDESCHED_")}
        environ.update({"LOG_FORMAT": "json", **env})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kdesched", "function", name, "--host", "127.0.0.1", "--port", str(self.port),
             "--concurrency", str(concurrency)], env=environ, cwd=REPO, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 30
        while not self._healthy():
            assert self.proc.poll() is None, "\n".join(self.lines[-20:])
            assert time.monotonic() < deadline, "the function did not answer /healthz in 30 s"
            time.sleep(0.02)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def _healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        return code

    def records(self) -> Iterator[dict[str, Any]]:
        for line in self.lines:
            if line.startswith("{"):
                yield json.loads(line)


def deliver(port: int, etype: str, data: Any, event_id: str, start: threading.Barrier) -> tuple[list[int], bytes]:
    """POST one event, retrying 429/503 after their Retry-After as Knative's dispatcher does; the
    statuses seen and the accepted answer's body. Anything but 2xx or 429/503 + Retry-After fails."""
    headers, body = ce_request(etype, data, id=event_id)
    statuses: list[int] = []
    start.wait()
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", "/", body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
        finally:
            conn.close()
        statuses.append(resp.status)
        if 200 <= resp.status < 300:
            return statuses, answer
        assert resp.status in (429, 503), (resp.status, answer[:300])
        retry_after = resp.getheader("Retry-After")
        assert retry_after is not None and int(retry_after) >= 1, "a 429/503 must say when to retry"
        assert time.monotonic() < deadline, f"event {event_id} not accepted in {DEADLINE_SECONDS:g} s"
        time.sleep(min(int(retry_after), 1) * 0.2)  # sooner than asked: more contention, a harder test


def burst(server: Server, etype: str, data: Any, clients: int = CLIENTS) -> dict[str, tuple[list[int], bytes]]:
    start = threading.Barrier(clients)
    ids = [f"burst-{i:03d}" for i in range(clients)]
    with ThreadPoolExecutor(max_workers=clients) as pool:
        futures = {i: pool.submit(deliver, server.port, etype, data, i, start) for i in ids}
        return {i: f.result() for i, f in futures.items()}


def check_answers(results: dict[str, tuple[list[int], bytes]], accepted: int) -> Counter[int]:
    seen: Counter[int] = Counter(s for statuses, _ in results.values() for s in statuses)
    assert set(seen) <= {accepted, 429, 503}, seen
    assert all(statuses[-1] == accepted for statuses, _ in results.values())
    return seen


def test_200_clients_at_once_against_deadletter_lose_nothing() -> None:
    server = Server("deadletter", 10, {})
    try:
        results = burst(server, ev.RUN_COMPLETED, {"trigger": {"type": "x"}, "evictions": []})
    finally:
        assert server.stop() == 0
    seen = check_answers(results, 202)
    audited = Counter(r["msg"].split()[2] for r in server.records() if r["msg"].startswith("audit: run "))
    assert set(audited) == set(results), "every accepted event was handled"
    assert all(n == 1 for n in audited.values()), "and once: a refused attempt never ran"
    assert not [r for r in server.records() if r["level"] in ("ERROR", "CRITICAL")]
    print(f"deadletter, {CLIENTS} clients: {dict(seen)}")


@pytest.fixture
def kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> str:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    return fake_api.kubeconfig(tmp_path / "kubeconfig", namespace="kdesched")


def test_200_clients_at_once_against_an_evicting_function_lose_nothing(kubeconfig: str) -> None:
    """taints at containerConcurrency 1 (as deployed): one run at a time, the rest told to retry.
    50 clients, not 200: the accepted runs are serial (~0.1 s each here), and the burst's shape is the
    same (deadletter above takes the 200)."""
    server = Server("taints", 1, {"KUBECONFIG": kubeconfig, "KDESCHED_LEASE_NAMESPACE": "kdesched"})
    try:
        results = burst(server, ev.TAINTS_CHANGED, {"node": "n1", "before": {"taints": []}, "after": {"taints": []}},
                        clients=50)
    finally:
        assert server.stop() == 0
    seen = check_answers(results, 200)
    for event_id, (_, answer) in results.items():  # each accepted event got its own run's report
        assert json.loads(answer)["trigger"]["id"] == event_id  # binary mode: the body is the data
    assert seen[200] == len(results) and seen[503] + seen[429] > 0, seen
    assert not [r for r in server.records() if r["level"] in ("ERROR", "CRITICAL")]
    print(f"taints, {len(results)} clients: {dict(seen)}")

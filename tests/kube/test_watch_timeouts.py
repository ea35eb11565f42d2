"""Every request of the client reaches urllib3 with a timeout, a WATCH with a connect and a read
timeout, and the pool keeps its TCP connections alive (review J, finding 1).

Why: the watch used to hand the kubernetes client a ``urllib3.Timeout`` object as
``_request_timeout``; the client (``kubernetes.client.rest``) only understands a number or a
``(connect, read)`` tuple and silently dropped it, so urllib3 got ``timeout=None``. A watch on a
peer that went away without a reset (API-server node lost, load-balancer failover, NAT entry
expired) then blocked in ``recv()`` for ever: no failure, no back-off, no re-LIST; serve stopped
reacting to Node events and the watch cache served its frozen state as synced.

Covers: what urllib3 receives for a WATCH (connect 10 s, read ``timeoutSeconds`` + the slack) and
for every other verb (never None); a server that answers the WATCH's headers and then goes silent
ends the watch by its read timeout (a loopback server, the slack made small), as an
:class:`Unavailable` the reflector backs off from; the connection pools (fake-API host and
kubeconfig) set TCP keepalive.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kdesched.kube.client import KubeClient
from kdesched.kube.config import host_configuration, load_configuration
from kdesched.kube.deadline import Deadline
from kdesched.kube.errors import Unavailable
from kdesched.kube.transport import WATCH_CONNECT_SECONDS, WATCH_READ_SLACK_SECONDS

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer


def spy_timeouts(kube: KubeClient) -> list[tuple[str, str, Any]]:
    """Record (method, url, timeout) of every request the client's pool sends."""
    seen: list[tuple[str, str, Any]] = []
    pool = kube.api_client.rest_client.pool_manager
    real = pool.request

    def spy(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((method, url, kwargs.get("timeout")))
        return real(method, url, *args, **kwargs)

    pool.request = spy  # type: ignore[method-assign]
    return seen


def test_a_watch_hands_urllib3_a_connect_and_a_read_timeout(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"))
    seen = spy_timeouts(kube)
    events = list(kube.watch_raw("Node", resource_version="0", timeout_seconds=0))
    assert [t for t, _ in events] == ["ADDED", "BOOKMARK"]
    (method, url, timeout), = seen
    assert method == "GET" and "watch=true" in url
    assert isinstance(timeout, urllib3.Timeout), f"urllib3 got timeout={timeout!r}: the watch could hang for ever"
    assert timeout.connect_timeout == WATCH_CONNECT_SECONDS == 10.0
    # the server ends the watch after timeoutSeconds; the read timeout (per recv) only catches a dead peer
    assert timeout.read_timeout == 0 + WATCH_READ_SLACK_SECONDS == 30.0
    assert timeout.total is None  # a watch lasts timeoutSeconds: a total would cut a healthy one


def test_the_read_timeout_follows_the_watchs_timeout_seconds(fake_api: FakeApiServer, kube: KubeClient) -> None:
    seen = spy_timeouts(kube)
    kube.watch_read_slack_seconds = 2.5
    rv = kube.list_raw("Node").resource_version
    stream = kube.watch_raw("Node", resource_version=rv, timeout_seconds=7)
    fake_api.send_bookmark()
    assert next(stream)[0] == "BOOKMARK"
    stream.close()
    timeout = seen[-1][2]
    assert isinstance(timeout, urllib3.Timeout)
    assert (timeout.connect_timeout, timeout.read_timeout) == (WATCH_CONNECT_SECONDS, 9.5)


def test_every_verb_hands_urllib3_a_timeout(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), pod_obj("p", "n1"), pod_obj("q", "n1"))
    seen = spy_timeouts(kube)
    kube.get_raw("Node", "n1")
    kube.list_raw("Pod")
    kube.evict_pod("default", "p", uid=None, grace_period_seconds=None, annotations={}, timeout=5)
    kube.evict_pod("default", "q", uid=None, grace_period_seconds=None, annotations={},
                   deadline=Deadline(time.monotonic() + 20))  # sent once (Transport._send_once)
    list(kube.watch_raw("Node", resource_version="0", timeout_seconds=0))
    assert len(seen) == 5
    for method, url, timeout in seen:
        assert isinstance(timeout, urllib3.Timeout), f"{method} {url}: urllib3 got timeout={timeout!r}"
        assert timeout.total is not None or timeout.read_timeout is not None, f"{method} {url}: {timeout!r}"


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A server that answers every request with 200 and chunked headers, then never sends another
    byte (a peer gone without a reset, as far as the client can tell)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.05)  # (a close does not wake a blocked accept: the loop looks at `stop`)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            c.settimeout(5)
            conns.append(c)
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(5)
    srv.close()
    for c in conns:
        c.close()


def test_a_silent_watch_ends_by_its_read_timeout(silent_server: int) -> None:
    kube = KubeClient.for_host(f"http://127.0.0.1:{silent_server}")
    kube.watch_read_slack_seconds = 0.5  # timeoutSeconds=0: the read timeout is the slack alone
    try:
        stream = kube.watch_raw("Pod", resource_version="1", timeout_seconds=0)
        ended: dict[str, Any] = {}

        def read() -> None:
            try:
                ended["events"] = list(stream)
            except Exception as exc:  # noqa: BLE001 - the expected end: a typed Unavailable
                ended["error"] = exc

        started = time.monotonic()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(10.0)
        assert not reader.is_alive(), "the watch is still blocked 10 s later (its read timeout was 0.5 s)"
        assert 0.4 < time.monotonic() - started < 5.0
        error = ended.get("error")
        assert isinstance(error, Unavailable) and "timed out" in str(error), ended
    finally:
        kube.close()


def keepalive_options(kube: KubeClient) -> list[tuple[int, int, int]]:
    options = kube.api_client.rest_client.pool_manager.connection_pool_kw.get("socket_options") or []
    return list(options)


def test_the_connection_pools_keep_tcp_connections_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle watch (a quiet kind sees no event for minutes) must not be dropped silently by a
    load balancer or NAT idle timeout, and a dead peer is found by the kernel's probes."""
    kube = KubeClient.for_host("http://127.0.0.1:1")
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in keepalive_options(kube)
    sibling = kube.sibling(pool_size=3)  # the watch cache's own pool
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in keepalive_options(sibling)
    # urllib3's own default (Nagle off) is kept: the list replaces its defaults
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in keepalive_options(kube)
    kube.close()
    sibling.close()
    assert host_configuration("http://x").keep_alive is True
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert load_configuration(str(config)).keep_alive is True

"""One clock on the real control plane: an aggregated API's answers never move a process's
estimate of the API server's clock (docs/reactor.md "One clock", "Whose answers are samples").

kube-apiserver's aggregator passes the backend's ``Date`` header through unchanged. For
``metrics.k8s.io`` the backend is metrics-server, a pod on some node, with that node's clock. Were
its answers samples of "the API server's clock", one metrics read on a node 3 minutes ahead would
restart the estimate 180 s ahead (an answer that does not fit the bounds restarts it), and every
time the process writes or compares until the next kube-apiserver answer (a run's ``now``, its
admissions, their deadlines, cool-downs) would be 3 minutes off: another process's fresh admission
would look abandoned and its pod evictable again. ``serve``'s MetricsCollector reads metrics.k8s.io
every 5 s and a run that uses KubernetesMetrics reads it right before its ``now`` is taken, so both
are exercised here.

The stand-in metrics-server (skewed_metrics_backend.py) runs under Debian's faketime, 3 minutes
ahead, on a non-loopback address of this machine (an Endpoints address may not be a loopback one),
behind a second kube-apiserver started with ``--enable-aggregator-routing`` (it dials the
Endpoints, no kube-proxy needed).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kdesched.evictor.ledger import InFlight
from kdesched.kube.client import KubeClient
from kdesched.kube.usage import MetricsCollector, read_metrics

from tests.realk8s import faketime
from tests.realk8s.controlplane import ControlPlane, free_port

SKEW = "+3m"
BACKEND = Path(__file__).with_name("skewed_metrics_backend.py")


def non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not a loopback one (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # TEST-NET-1: only the route is looked up
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


HOST = non_loopback_address()
pytestmark = pytest.mark.skipif(HOST is None or not faketime.available(),
                                reason="needs Debian's faketime and a non-loopback IPv4 address")


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            out = check()
            if out:
                return out
        except Exception as exc:  # noqa: BLE001 (the aggregated group is not served yet)
            last = exc
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen within {timeout}s ({last})")


@pytest.fixture
def aggregated(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ControlPlane]:
    """A kube-apiserver with ``metrics.k8s.io`` served by a stand-in metrics-server 3 minutes ahead."""
    assert HOST is not None
    cert, key = tmp_path / "backend.crt", tmp_path / "backend.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=metrics-server"], check=True, capture_output=True,
                   timeout=60)
    port = free_port()
    backend = subprocess.Popen([sys.executable, str(BACKEND), HOST, str(port), str(cert), str(key)],
                               env={**os.environ, **faketime.env(SKEW)}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    cp = ControlPlane(control_plane.bin_dir, apiserver_args=["--enable-aggregator-routing=true"])
    try:
        assert backend.stdout is not None and b"ready" in backend.stdout.readline()
        cp.start()
        api = cp.api
        assert api is not None
        api.create("/api/v1/namespaces/kube-system/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "metrics-server", "namespace": "kube-system"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}})
        api.create("/api/v1/namespaces/kube-system/endpoints", {
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "metrics-server", "namespace": "kube-system"},
            "subsets": [{"addresses": [{"ip": HOST}], "ports": [{"name": "https", "port": port}]}]})
        api.create("/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": True,
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "service": {"name": "metrics-server", "namespace": "kube-system", "port": 443}}})
        yield cp
    finally:
        backend.kill()
        backend.wait()
        cp.stop()


def test_an_aggregated_apis_date_does_not_move_the_server_clock(aggregated: ControlPlane) -> None:
    client = KubeClient.from_config(str(aggregated.admin_kubeconfig))
    wait_for("metrics.k8s.io served", lambda: client.get_path("/apis/metrics.k8s.io/v1beta1/nodes") is not None)

    # a run: it reads the cluster (the API server's own answers), then the metrics
    for _ in range(3):
        client.list_raw("Node")
    before = client.clock.now() - time.time()  # the API server runs on this machine's clock
    readings = read_metrics(client)
    assert readings.error == "", readings.error
    after_run = client.clock.now() - time.time()
    # serve's collector, every 5 s
    client.list_raw("Node")
    MetricsCollector(client).collect()
    after_collector = client.clock.now() - time.time()
    state = client.clock.state()

    # what it would change: an admission another process made 10 s ago, deadline 60 s after it
    true_now = time.time()
    other = InFlight("uid-1", "default/web-1", "n1", true_now - 10, deadline=true_now + 50)
    still = other.may_still_land(client.clock.now())
    assert abs(after_run) < 2 and abs(after_collector) < 2 and still and state.restarts == 0, (
        f"the process's estimate of the API server's clock: {before:+.1f}s off before reading metrics.k8s.io, "
        f"{after_run:+.1f}s off after a run's metrics read, {after_collector:+.1f}s off after serve's collector "
        f"({state.restarts} restart(s) of the estimate); an admission another process made 10 s ago, deadline in "
        f"50 s, may still land: {still} (False: taken for abandoned, its pod evictable again)")
    assert abs(client.clock.offset_seconds()) < 2, "the process's clock is this machine's: no false warning"

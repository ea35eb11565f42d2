"""Parity with the upstream descheduler v0.36 binary on ``metricsUtilization.source: Prometheus``:
the same cluster in a real API server (the real control-plane tier), the same per-node series in a real
Prometheus, the same policy file; kdesched (``run --dry-run``) and upstream evict the same number of
pods per strategy, node and owner (which pod among equals is upstream's unstable sort).

Two facts of upstream shape the harness, both read from its log:

* its Prometheus client is built by a Secret reconciler that starts only after the first cycle, so
  a one-shot run (``--descheduling-interval 0``) always fails with "prometheus client not
  initialized": upstream runs with a 2 s interval and the first cycle after the client exists is
  the one compared;
* it loads the in-cluster service account CA (``/var/run/secrets/kubernetes.io/serviceaccount/ca.crt``)
  even for an http URL, so it runs in a private mount namespace (``unshare -m``, root only) with a
  tmpfs over ``/run`` holding that file; nothing on the machine is touched.

Needs both tiers' binaries (``realk8s`` and ``realprom`` markers); skipped with one line without
``unshare`` or root.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kdesched.cli.main import main

from tests.builders import node_obj, pod_obj
from tests.realk8s import diffcorpus as dc
from tests.realk8s.controlplane import ControlPlane
from tests.realk8s.fixtures import BIN_DIR, control_plane  # noqa: F401 (the session's API server fixture)
from tests.realprom.prometheus import Prometheus
from tests.realprom.test_usage_prometheus import QUERY, Exporter

pytestmark = pytest.mark.realk8s

if BIN_DIR is None or not (BIN_DIR / "descheduler").is_file():
    pytest.skip("upstream parity on Prometheus: no Kubernetes kit with the descheduler binary", allow_module_level=True)
if shutil.which("unshare") is None or os.geteuid() != 0:
    pytest.skip("upstream parity on Prometheus: needs root and unshare (a private /run for upstream's CA file)",
                allow_module_level=True)

SA_DIR = "/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture
def api_cluster(control_plane: ControlPlane, tmp_path: Path) -> Iterator[tuple[Path, dc.Api]]:  # noqa: F811
    """n1 with 8 pods of 400m (one owner), n2 and n3 empty; the token Secret upstream reads."""
    kubeconfig = tmp_path / "admin.kubeconfig"
    control_plane.kubeconfig(kubeconfig)
    api = dc.Api(kubeconfig)
    objects = [node_obj("n1"), node_obj("n2"), node_obj("n3")]
    objects += [pod_obj(f"p{i}", "n1", cpu="400m", owner_name="rs-a") for i in range(1, 9)]
    for obj in objects:
        obj["metadata"].pop("uid", None)
    dc.load(api, objects)
    api.request("POST", "/api/v1/namespaces/kube-system/secrets", {
        "metadata": {"name": "prom-token"},
        "data": {"prometheusAuthToken": base64.b64encode(b"not-checked").decode()}}, ok=(409,))
    try:
        yield kubeconfig, api
    finally:
        api.request("DELETE", "/api/v1/namespaces/kube-system/secrets/prom-token", ok=(404,))
        control_plane.check_alive()
        control_plane.reset()


def policy_text(url: str, limit: int | None) -> str:
    limits = f"\n      evictionLimits: {{node: {limit}}}" if limit is not None else ""
    return f"""\
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
metricsProviders:
- source: Prometheus
  prometheus:
    url: {url}
    authToken: {{secretReference: {{namespace: kube-system, name: prom-token}}}}
profiles:
- name: usage
  pluginConfig:
  - name: LowNodeUtilization
    args:
      thresholds: {{MetricResource: 30}}
      targetThresholds: {{MetricResource: 50}}
      metricsUtilization: {{source: Prometheus, prometheus: {{query: {json.dumps(QUERY)}}}}}{limits}
  plugins: {{balance: {{enabled: [LowNodeUtilization]}}}}
"""


def ca_of(kubeconfig: Path) -> bytes:
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    if cluster.get("certificate-authority"):
        return Path(cluster["certificate-authority"]).read_bytes()
    return base64.b64decode(cluster["certificate-authority-data"])


def first_cycle_with_client(log: str) -> list[dc.Eviction] | None:
    """The evictions of upstream's first cycle that ran with its Prometheus client, or None while
    none has ended. A cycle is the log between two "Number of evictions/requests" lines; the cycles
    that ended after the client was made count. The first of them may have begun before it, and its
    "not initialized" error is then logged on either side of the "recreating" line (after it: the
    fresh-clone CI at 67700f1; before it: the CI at 0de3ba2, where the two goroutines' lines came out
    of order). Such a cycle evicted nothing, and the next one decides."""
    ready = log.find("recreating prometheus client")
    if ready < 0:
        return None
    start = 0
    for cycle in log.split("Number of evictions/requests")[:-1]:
        start, end = start + len(cycle) + len("Number of evictions/requests"), start + len(cycle)
        if end < ready:
            continue  # ended before the client was made
        if "prometheus client not initialized" not in cycle:
            return dc.parse_upstream_log(cycle)
        assert not dc.parse_upstream_log(cycle), f"a cycle without its Prometheus client evicted:\n{cycle}"
    return None


def run_upstream(kubeconfig: Path, policy: Path, work: Path, timeout: float = 60) -> list[dc.Eviction]:
    """Upstream every 2 s, until the first cycle that ran with its Prometheus client; its evictions."""
    ca = work / "sa-ca.crt"
    ca.write_bytes(ca_of(kubeconfig))
    binary = BIN_DIR / "descheduler"  # type: ignore[operator]
    command = " ".join([str(binary), "--policy-config-file", str(policy), "--kubeconfig", str(kubeconfig),
                        "--secure-port", "0", "--v", "3", "--descheduling-interval", "2s",
                        "--client-connection-qps", "1000", "--client-connection-burst", "1000"])
    script = (f"mount -t tmpfs tmpfs /run && mkdir -p {SA_DIR} && cp {ca} {SA_DIR}/ca.crt && exec {command}")
    log_path = work / "upstream.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = log_path.read_text()
            evictions = first_cycle_with_client(log)
            if evictions is not None:
                return evictions
            if proc.poll() is not None:
                raise AssertionError(f"upstream exited {proc.returncode}:\n{log[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"no upstream cycle with a Prometheus client within {timeout:.0f}s:\n"
                             f"{log_path.read_text()[-3000:]}")
    finally:
        proc.kill()
        proc.wait()


def run_kdesched(kubeconfig: Path, policy: Path, capsys: pytest.CaptureFixture[str]) -> list[dc.Eviction]:
    code = main(["run", "--dry-run", "--policy", str(policy), "--kubeconfig", str(kubeconfig), "-o", "json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    return [dc.Eviction(e["strategy"], e["namespace"], e["pod"], e["node"]) for e in json.loads(cap.out)["evictions"]]


@pytest.mark.parametrize("limit, count", [(None, 1), (3, 3)], ids=["one-per-node", "node-limit-3"])
def test_kdesched_and_upstream_decide_alike_on_prometheus(
        api_cluster: tuple[Path, dc.Api], prometheus: Prometheus, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], limit: int | None, count: int) -> None:
    kubeconfig, _ = api_cluster
    exporter = Exporter({"n1": 0.9, "n2": 0.15, "n3": 0.2})
    try:
        prometheus.scrape(exporter.address)
        prometheus.wait_for(QUERY, check=lambda result: len(result) == 3)
        policy = tmp_path / "policy.yaml"
        policy.write_text(policy_text(prometheus.url, limit))
        ours = run_kdesched(kubeconfig, policy, capsys)  # a dry run first: upstream really evicts
        theirs = run_upstream(kubeconfig, policy, tmp_path)
    finally:
        exporter.stop()

    def per_node(evictions: list[dc.Eviction]) -> Counter[tuple[str, str, str]]:
        return Counter((e.strategy, e.namespace, e.node) for e in evictions)

    assert per_node(theirs) == Counter({("LowNodeUtilization", "default", "n1"): count}), theirs
    assert per_node(ours) == per_node(theirs), (ours, theirs)
    assert all(e.pod.startswith("p") for e in ours + theirs)  # the one owner's pods


EVICTED_LINE = ('I1128 21:58:14.1 1 evictions.go:1] "Evicted pod" pod="default/{pod}" reason="" strategy="LowNodeUtilization" '
                'node="n1" profile="usage"\n')


def test_the_cycle_begun_before_the_prometheus_client_is_skipped() -> None:
    """The CI log's order: the first cycle's "not initialized" error logged after "recreating"."""
    log = ('I1 profile.go:417] "Total number of evictions/requests" evictedPods=0\n'
           "I2 prom_client_controller.go:228] authentication secret token updated, recreating prometheus client\n"
           'E3 descheduler.go:300] "running balance extension point failed with error" err="plugin '
           '\\"LowNodeUtilization\\" finished with error: error initializing usage client: prometheus client not '
           'initialized"\n'
           'I4 descheduler.go:252] "Number of evictions/requests" totalEvicted=0\n')
    assert first_cycle_with_client(log) is None  # the next cycle has not ended yet
    log += EVICTED_LINE.format(pod="a") + 'I5 descheduler.go:252] "Number of evictions/requests" totalEvicted=1\n'
    assert first_cycle_with_client(log) == [dc.Eviction("LowNodeUtilization", "default", "a", "n1")]
    assert first_cycle_with_client(log.replace("recreating", "creating")) is None  # no client yet


def test_the_cycle_whose_error_is_logged_before_the_recreating_line_is_skipped() -> None:
    """The CI log at 0de3ba2: the error, then "recreating", then that cycle's summary."""
    log = ('E1 descheduler.go:300] "running balance extension point failed with error" err="error initializing '
           'usage client: prometheus client not initialized"\n'
           "I2 prom_client_controller.go:228] authentication secret token updated, recreating prometheus client\n"
           'I3 descheduler.go:252] "Number of evictions/requests" totalEvicted=0\n')
    assert first_cycle_with_client(log) is None
    log += EVICTED_LINE.format(pod="c") + 'I4 descheduler.go:252] "Number of evictions/requests" totalEvicted=1\n'
    assert first_cycle_with_client(log) == [dc.Eviction("LowNodeUtilization", "default", "c", "n1")]


def test_a_cycle_without_its_client_that_evicted_fails_the_comparison() -> None:
    log = ("I2 recreating prometheus client\nE3 prometheus client not initialized\n" + EVICTED_LINE.format(pod="b")
           + 'I4 "Number of evictions/requests" totalEvicted=1\n')
    with pytest.raises(AssertionError, match="without its Prometheus client evicted"):
        first_cycle_with_client(log)

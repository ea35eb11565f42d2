"""Fixtures of the real control-plane tier: one etcd + kube-apiserver for the whole session, the
scheduler / controller-manager per module on demand, the kubelet stand-in per test, and a reset of
every test object after each test.

Why: the fake API server (tests/fakeapi.py) stays for fault injection; what only the real server
can show (RBAC, admission defaults, the Eviction API's PDB rules, watch semantics, Lease conflicts,
the scheduler placing replacements) is tested here. Without the binaries the whole tier is skipped
with one line at the end of the run, unless KDESCHED_REQUIRE_REAL_K8S=1 (CI with the kit) makes that a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import REQUIRE_ENV, SKIP_REASON, ControlPlane, Kubelet, Proc, find_binaries

HERE = Path(__file__).resolve().parent


def _locate() -> tuple[Path | None, str | None]:
    try:
        return find_binaries(), None
    except RuntimeError as exc:  # the kit is there but unpacking or a checksum failed
        return None, f"real control-plane tier: {exc}"


BIN_DIR, KIT_ERROR = _locate()
REQUIRED = os.environ.get(REQUIRE_ENV) == "1"
# Absent binaries (and not required): collect nothing here and say so in ONE line at the end.
SKIPPED = BIN_DIR is None and KIT_ERROR is None and not REQUIRED
collect_ignore_glob = ["test_*.py"] if SKIPPED else []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SKIPPED:
        terminalreporter.write_line(SKIP_REASON, yellow=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every test of this folder carries the marker: `-m "not realk8s"` runs the fast tier alone
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realk8s)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (RBAC, admin token, SA keys, TLS) for the session."""
    if KIT_ERROR:
        pytest.fail(KIT_ERROR)
    if BIN_DIR is None:
        pytest.fail(f"{REQUIRE_ENV}=1 but no Kubernetes binaries: {SKIP_REASON.split(': ', 1)[1]}")
    cp = ControlPlane(BIN_DIR, keep_logs=os.environ.get("KDESCHED_K8S_KEEP_LOGS") == "1")
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(autouse=True)
def _fresh_cluster(control_plane: ControlPlane) -> Iterator[None]:
    """Each test starts from an empty cluster and leaves nothing behind."""
    yield
    control_plane.check_alive()
    control_plane.reset()


@pytest.fixture
def cluster(control_plane: ControlPlane) -> Cluster:
    return Cluster(control_plane)


@pytest.fixture(scope="module")
def scheduler(control_plane: ControlPlane) -> Iterator[Proc]:
    proc = control_plane.start_scheduler()
    try:
        yield proc
    finally:
        control_plane.stop_scheduler()


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[Proc]:
    """deployment, replicaset, statefulset, disruption, namespace and garbagecollector controllers."""
    proc = control_plane.start_controller_manager()
    try:
        yield proc
    finally:
        control_plane.stop_controller_manager()


@pytest.fixture
def kubelet(control_plane: ControlPlane) -> Iterator[Kubelet]:
    """The kubelet stand-in: bound pods become Running + Ready at once (per-pod annotations or
    ``kubelet.ready_delay`` change that); deleted pods are finished at once."""
    stand_in = control_plane.start_kubelet()
    try:
        yield stand_in
    finally:
        errors = list(stand_in.errors)
        control_plane.stop_kubelet()
        assert not errors, f"kubelet stand-in errors: {errors[:5]}"


@pytest.fixture(scope="module")
def compacting(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """A second API server without a watch cache whose etcd history is compacted every second:
    watches go to etcd, and a watch resumed from a resourceVersion older than the last compaction
    really gets 410 Gone (the kube layer's and the watch cache's re-list tests)."""
    cp = ControlPlane(control_plane.bin_dir, apiserver_args=["--watch-cache=false", "--etcd-compaction-interval=1s"])
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()

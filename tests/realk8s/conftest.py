"""Fixtures of the real control-plane tier: one etcd + kube-apiserver for the whole session, the
scheduler / controller-manager per module on demand, the kubelet stand-in per test, and a reset of
every test object after each test (the fixtures themselves live in tests/realk8s/fixtures.py,
shared with tests/realknative).

Why: the fake API server (tests/fakeapi.py) stays for fault injection; what only the real server
can show (RBAC, admission defaults, the Eviction API's PDB rules, watch semantics, Lease conflicts,
the scheduler placing replacements) is tested here. Without the binaries the whole tier is skipped
with one line at the end of the run, unless KDESCHED_REQUIRE_REAL_K8S=1 (CI with the kit) makes that a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realk8s import fixtures as shared
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import SKIP_REASON, ControlPlane, Kubelet, Proc
from tests.realk8s.fixtures import BIN_DIR, KIT_ERROR, REQUIRED
from tests.realk8s.serve_stories import NS, Serve

# the fixtures (tests/realk8s/fixtures.py, shared with tests/realknative)
control_plane, cluster, kubelet = shared.control_plane, shared.cluster, shared.kubelet
scheduler, controller_manager = shared.scheduler, shared.controller_manager

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test that started ``kdesched serve`` shows the end of every serve's log in its
    report: a failure in CI (where nothing is kept) says what serve did and did not do."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if rep.when != "call" or not rep.failed:
        return
    for s in getattr(item, "funcargs", {}).get("serves") or ():
        try:
            tail = "\n".join(s.log().splitlines()[-80:])
        except OSError as exc:
            tail = f"(no log: {exc})"
        rep.sections.append((f"kdesched serve {s.identity}: the last 80 lines of its log", tail))


@pytest.fixture
def serves() -> Iterator[list[Serve]]:
    """``kdesched serve`` processes a test starts (appended by the test), stopped after it."""
    started: list[Serve] = []
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def real(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet,
         cluster: Cluster) -> Cluster:
    """The whole control plane (scheduler, controller-manager, kubelet stand-in) and kdesched's namespace."""
    cluster.namespace(NS)
    return cluster

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


_fresh_cluster = pytest.fixture(autouse=True)(shared.fresh_cluster)


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

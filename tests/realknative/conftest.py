"""Fixtures of the Knative tier: the real control plane of tests/realk8s (shared with it, one per
session) plus Knative Eventing's real data plane and kdesched's six functions as processes
(:mod:`tests.realknative.dataplane`), started once for the session.

Without the Knative kit (``$KDESCHED_KNATIVE_BIN``, or a ``shared/knative`` kit next to the
checkout) or the k8s kit, the tier is skipped with one line at the end of the run; under
KDESCHED_REQUIRE_REAL_K8S=1 that is a failure.
The dispatcher binds the fixed port 8080: one tier instance per machine at a time (it fails naming
the port otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realk8s import fixtures as shared
from tests.realk8s.controlplane import REQUIRE_ENV, ApiError, ControlPlane
from tests.realk8s.fixtures import BIN_DIR, KIT_ERROR, REQUIRED
from tests.realknative.dataplane import KNATIVE_SKIP_REASON as SKIP_REASON
from tests.realknative.dataplane import NS, KnativeDataPlane, find_knative

# the real control plane's fixtures (one control plane per session, shared with tests/realk8s)
control_plane, cluster, kubelet = shared.control_plane, shared.cluster, shared.kubelet
scheduler, controller_manager = shared.scheduler, shared.controller_manager

HERE = Path(__file__).resolve().parent


def _locate() -> tuple[Path | None, str | None]:
    try:
        return find_knative(), None
    except RuntimeError as exc:  # the kit is there but unpacking or a checksum failed
        return None, f"real Knative tier: {exc}"


KIT, KNATIVE_ERROR = _locate()
SKIPPED = (BIN_DIR is None or KIT is None) and not (KIT_ERROR or KNATIVE_ERROR or REQUIRED)
collect_ignore_glob = ["test_*.py"] if SKIPPED else []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SKIPPED:
        terminalreporter.write_line(SKIP_REASON, yellow=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the tier runs on the real control plane: `-m "not realk8s"` (the fast tier) leaves it out too
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realk8s)


@pytest.fixture(scope="package")
def knative(control_plane: ControlPlane) -> Iterator[KnativeDataPlane]:
    """Adapter, ingress, filter, dispatcher, mtping and the six functions, wired by knative/base.
    Package scope: stopped once this tier's tests are done, so the functions do not act on the
    stories of tiers that run after it on the same control plane (tests/realprom)."""
    if KNATIVE_ERROR:
        pytest.fail(KNATIVE_ERROR)
    if KIT is None:
        pytest.fail(f"{REQUIRE_ENV}=1 but no Knative kit: {SKIP_REASON.split(': ', 1)[1]}")
    dp = KnativeDataPlane(control_plane, KIT, keep_logs=os.environ.get("KDESCHED_K8S_KEEP_LOGS") == "1")
    dp.start()
    try:
        yield dp
    finally:
        dp.stop()
        control_plane.reset()


@pytest.fixture(autouse=True)
def _fresh_cluster(control_plane: ControlPlane, knative: KnativeDataPlane) -> Iterator[None]:
    """Each test starts from an empty cluster (the Knative objects stay) with the data plane as
    installed: every function and the adapter up, Triggers at their functions, no Lease (so no
    eviction history: cool-downs of one test do not reach the next)."""
    knative.begin_test()
    yield
    control_plane.check_alive()
    knative.check_alive()
    knative.restore()
    control_plane.reset()
    api = control_plane.api
    assert api is not None
    try:
        api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                    {"kind": "DeleteOptions", "apiVersion": "v1"})
    except ApiError as exc:
        if exc.status != 404:
            raise

"""The Helm tier: the chart rendered, linted, validated and installed with the real Helm 3 and 4.

Without the Helm kit the whole folder is skipped with one line at the end of the run, unless
KDESCHED_REQUIRE_HELM=1 (which .ci/run sets when the kit is there) makes that a failure. The tests
that install on the real control plane (``test_real_*.py``) also need the k8s kit: without it (and
without KDESCHED_REQUIRE_REAL_K8S=1) they are left out, with the real tier's own one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helm import REQUIRE_ENV, SKIP_REASON, find_helm
from tests.realk8s import fixtures as shared
from tests.realk8s.controlplane import SKIP_REASON as REAL_SKIP_REASON
from tests.realk8s.fixtures import BIN_DIR, KIT_ERROR, REQUIRED

# the real control plane's fixtures (one per session, shared with tests/realk8s)
control_plane, cluster, kubelet = shared.control_plane, shared.cluster, shared.kubelet
scheduler, controller_manager = shared.scheduler, shared.controller_manager

HERE = Path(__file__).resolve().parent


def _locate() -> tuple[Path | None, str | None]:
    try:
        return find_helm(), None
    except RuntimeError as exc:
        return None, f"Helm tier: {exc}"


HELM_DIR, HELM_ERROR = _locate()
HELM_REQUIRED = os.environ.get(REQUIRE_ENV) == "1"
SKIPPED = HELM_DIR is None and HELM_ERROR is None and not HELM_REQUIRED
REAL_SKIPPED = BIN_DIR is None and KIT_ERROR is None and not REQUIRED
collect_ignore_glob = ["test_*.py"] if SKIPPED else (["test_real_*.py"] if REAL_SKIPPED else [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SKIPPED:
        terminalreporter.write_line(SKIP_REASON, yellow=True)
    elif REAL_SKIPPED:
        terminalreporter.write_line(f"Helm install tests skipped: {REAL_SKIP_REASON}", yellow=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE in path.parents:
            item.add_marker(pytest.mark.helm)
            if path.name.startswith("test_real_"):
                item.add_marker(pytest.mark.realk8s)


@pytest.fixture(scope="session")
def helm() -> Path:
    """The directory holding ``helm`` (v4) and ``helm3`` (v3)."""
    if HELM_ERROR:
        pytest.fail(HELM_ERROR)
    if HELM_DIR is None:
        pytest.fail(f"{REQUIRE_ENV}=1 but no Helm binaries: {SKIP_REASON.split(': ', 1)[1]}")
    return HELM_DIR


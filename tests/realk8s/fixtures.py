"""The real control-plane fixtures, shared by the tiers that run on it: tests/realk8s and
tests/realknative (each conftest imports them). One etcd + kube-apiserver serves a whole pytest
session whichever tiers it runs (:func:`control_plane` starts it once and stops it after its last
user); the scheduler and controller-manager per module on demand; the kubelet stand-in per test.

Why a module of its own: a fixture defined in tests/realk8s/conftest.py is visible only under
tests/realk8s, and a second control plane per tier would double the memory and start-up time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import REQUIRE_ENV, SKIP_REASON, ControlPlane, Kubelet, Proc, find_binaries


def _locate() -> tuple[Path | None, str | None]:
    try:
        return find_binaries(), None
    except RuntimeError as exc:  # the kit is there but unpacking or a checksum failed
        return None, f"real control-plane tier: {exc}"


BIN_DIR, KIT_ERROR = _locate()
REQUIRED = os.environ.get(REQUIRE_ENV) == "1"


class _Shared:
    cp: ControlPlane | None = None
    users = 0


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver (RBAC, admin token, SA keys, TLS) for the session, shared by the tiers."""
    if KIT_ERROR:
        pytest.fail(KIT_ERROR)
    if BIN_DIR is None:
        pytest.fail(f"{REQUIRE_ENV}=1 but no Kubernetes binaries: {SKIP_REASON.split(': ', 1)[1]}")
    cp = _Shared.cp
    if cp is None:
        cp = ControlPlane(BIN_DIR, keep_logs=os.environ.get("KDESCHED_K8S_KEEP_LOGS") == "1")
        cp.start()
        _Shared.cp = cp
    _Shared.users += 1
    try:
        yield cp
    finally:
        _Shared.users -= 1
        if not _Shared.users:
            cp.stop()
            _Shared.cp = None


def fresh_cluster(control_plane: ControlPlane) -> Iterator[None]:
    """Each test starts from an empty cluster and leaves nothing behind (each tier's conftest makes
    this autouse)."""
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

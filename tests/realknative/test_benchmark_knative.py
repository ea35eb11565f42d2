"""``python bench/bench_knative_taint.py --repeat 1``'s measurement, on this tier's control plane and
Knative data plane: the benchmark completes and finds its hops in the functions' logs (see
tests/bench/test_benchmarks.py for why benchmarks run in the suite)."""

from __future__ import annotations

from bench import bench_knative_taint
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc
from tests.realknative.dataplane import KnativeDataPlane


def test_bench_knative_taint_once(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc,
                                  kubelet: Kubelet, cluster: Cluster, knative: KnativeDataPlane) -> None:
    run = bench_knative_taint.one(control_plane, knative)
    assert run["total"] is not None, run

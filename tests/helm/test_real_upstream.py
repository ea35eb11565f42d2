"""An upstream chart values file's policy decides as the upstream descheduler binary does, on the
differential corpus of tests/realk8s (generated clusters loaded into the real API server).

Its own module: the corpus is loaded as static objects (pods owned by ReplicaSets that do not exist),
so no controller-manager may run beside it, and the scheduler and controller-manager of
test_real_install.py are module-scoped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helm import CHART, find_obj, run_helm, values_file
from tests.realk8s import diffcorpus as dc
from tests.realk8s import fixtures as shared
from tests.realk8s.controlplane import ControlPlane

NS = "kdesched"

_fresh = pytest.fixture(autouse=True)(shared.fresh_cluster)



@pytest.mark.parametrize("seed", [3, 4, 5], ids=["policy-A", "policy-B", "policy-C"])
def test_upstream_values_policy_decides_as_the_upstream_binary(helm: Path, control_plane: ControlPlane, seed: int,
                                                                tmp_path: Path) -> None:
    """The corpus' policies A, B and C (tests/realk8s/diffcorpus) given as the upstream chart's
    deschedulerPolicy; the policy the chart renders, decided by kdesched and by the upstream v0.36
    binary on the same generated cluster: the same evictions, or a documented cause."""
    policy = dc.policy_for_seed(seed)
    values = {"kind": "CronJob", "deschedulerPolicyAPIVersion": policy["apiVersion"],
              "deschedulerPolicy": {k: v for k, v in policy.items() if k not in ("apiVersion", "kind")}}
    done = run_helm(helm, "helm3", "template", "kdesched", str(CHART), "-n", NS,
                    "-f", str(values_file(tmp_path, values)))
    assert done.returncode == 0, done.stderr
    rendered = yaml.safe_load(find_obj([d for d in yaml.safe_load_all(done.stdout) if d], "ConfigMap", "kdesched-policy")["data"]["policy.yaml"])
    kubeconfig = tmp_path / "admin.kubeconfig"
    control_plane.kubeconfig(kubeconfig)
    api = dc.Api(kubeconfig)
    dc.reset(api)
    result = dc.run_seed(api, kubeconfig, seed, tmp_path, policy=rendered, isolated=False, combined=True)
    run = result.combined
    if run is not None and not run.accepted:
        # A whole-policy difference is put down to plan-aware decisions only by elimination (every
        # strategy of the cluster, run alone, agrees or differs by a documented cause:
        # dc.explain_combined), so the strategies alone are decided only when the whole policy
        # differs. (Upstream's later strategies evict a pod an earlier one evicted again when their
        # informer has not seen the eviction yet: docs/differences.md, "decisions within a run".)
        result = dc.run_seed(api, kubeconfig, seed, tmp_path, policy=rendered, isolated=True, combined=True)
        run = result.combined
    assert run is not None and run.accepted, (
        f"kdesched {[(e.namespace, e.pod) for e in run.kdesched] if run else None} vs upstream "
        f"{[(e.namespace, e.pod) for e in run.upstream] if run else None}: {run.differences if run else None}")
    assert run.upstream, "the corpus cluster gives upstream work: an agreement on nothing proves nothing"

"""The disruption ledger's records on a real kube-apiserver (kdesched.reactor.io.ledger_store).

What only the real server shows: its 256 KiB limit on an object's annotations (0.1's single record
passed it and every write was refused with 422), conditional deletes with a resourceVersion
precondition, label-selected LISTs, and the kdesched service account's RBAC (the shipped Role) for
every call the store makes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kdesched.evictor.ledger import RECORD_MAX_BYTES, Admission, Ledger
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ApiError
from kdesched.model.records import Pod
from kdesched.reactor.io.ledger_store import LEDGER_ANNOTATION, LedgerStore

from tests.builders import pod_obj
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane

NS = "kdesched"
TAINTS = "RemovePodsViolatingNodeTaints"
REPO = Path(__file__).resolve().parents[2]


def wpod(w: int, r: int, node: str, *, ready: bool = False, pad: int = 0) -> Pod:
    name = f"app{w}{'x' * pad}"
    return Pod.from_api(pod_obj(f"{name}-7d9f8-{r}", node, namespace="shop", owner_name=f"{name}-7d9f8",
                                labels={"pod-template-hash": "7d9f8"},
                                **({"conditions": [{"type": "Ready", "status": "True"}]} if ready else {})))


def maintenance(workloads: int, pad: int = 0) -> list[Admission]:
    return [Admission(wpod(w, r, f"pool-{w % 20}", pad=pad), TAINTS, r > 0, f"node:pool-{w % 20}:{TAINTS}",
                      "spare-0" if r == 0 else "", 4, 4) for w in range(workloads) for r in range(4)]


def apply_rbac(control_plane: ControlPlane, tmp_path: Path) -> Path:
    """The shipped evictor identity (knative/common), applied as kubectl would; its kubeconfig."""
    import subprocess

    rendered = subprocess.run(["kubectl", "kustomize", str(REPO / "knative" / "common")], capture_output=True,
                              text=True, check=True).stdout
    docs = [d for d in rendered.split("\n---\n") if "kind: ConfigMap" not in d]
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text("\n---\n".join(docs))
    subprocess.run(["kubectl", "--kubeconfig", str(control_plane.admin_kubeconfig), "apply", "-f", str(manifest)],
                   capture_output=True, text=True, check=True)
    return control_plane.kubeconfig(tmp_path / "sa.kubeconfig", as_user=f"system:serviceaccount:{NS}:kdesched")


def test_a_maintenance_0_1_could_not_store_is_stored_as_records_with_the_shipped_rbac(
        control_plane: ControlPlane, cluster: Cluster, tmp_path: Path) -> None:
    cluster.namespace(NS)
    ledger = Ledger().admit(maintenance(300, pad=20), round(time.time(), 3), "run-1", 60)  # the records keep ms
    text = ledger.to_annotation()
    assert len(text) > 256 * 1024
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as admin:
        # what 0.1 did: the whole ledger as one annotation of the run Lease. The real server says no.
        with pytest.raises(ApiError) as refused:
            admin.create_raw("Lease", {"metadata": {"name": "kdesched", "namespace": NS,
                                                    "annotations": {LEDGER_ANNOTATION: text}}, "spec": {}})
        assert refused.value.status == 422
    with KubeClient.from_config(str(apply_rbac(control_plane, tmp_path))) as client:
        store = LedgerStore(client, NS, "kdesched")
        assert store.write(store.read(), ledger, "run-1")  # every call as the shipped service account
        read = store.read()
        assert read.problem == "" and read.ledger.moves == ledger.moves and len(read.records) == 300
        leases = cluster.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")["items"]
        assert max(sum(len(v) for v in (o["metadata"].get("annotations") or {}).values()) for o in leases) < 2048
        # the moves end (each workload back at its Ready count), then their cool-downs run out:
        # every record is deleted, with a resourceVersion precondition, at most 100 a write
        pods_of = {k: [wpod(int(k.split("/app")[1].split("x")[0]), 9 + r, "spare-0", ready=True, pad=20)
                       for r in range(4)] for k in read.ledger.moves}
        now = time.time()
        ended = read.ledger.settle(pods_of, now + 5, 120).ledger
        assert not any(mv.active for mv in ended.moves.values())
        assert store.write(read, ended, "settle")
        assert len(store.read().records) == 300  # their cool-downs still run
        for _ in range(3):
            again = store.read()
            assert store.write(again, again.ledger.prune(now + 1000, 300, 0), "gc")
            assert store.last_write.deletes <= 100
        assert len(store.read().records) == 0


def test_a_record_at_its_bound_is_accepted_by_the_real_server(control_plane: ControlPlane, cluster: Cluster) -> None:
    """The record's bound (RECORD_MAX_BYTES, 192 KiB) is below what the API server takes, names and
    metadata included: one workload with every held pod the record keeps and long names."""
    from kdesched.evictor.ledger import WorkloadRecord

    cluster.namespace(NS)
    pods = [wpod(1, r, f"node-{r}-{'n' * 180}", pad=150) for r in range(3000)]
    now = round(time.time(), 3)
    ledger = Ledger().admit([Admission(p, TAINTS, True, f"node:{p.node_name}:{TAINTS}", "", 9, 9) for p in pods],
                           now, "r", 60)
    ledger = ledger.admit([Admission(p, TAINTS, False, f"node:{p.node_name}:{TAINTS}", "spare", 9, 9)
                           for p in pods[:160]], now, "r", 60)
    records, _ = ledger.split()
    (rec,) = records.values()
    assert len(rec.to_text()) > RECORD_MAX_BYTES and len(WorkloadRecord.fitted(rec).to_text()) <= RECORD_MAX_BYTES
    with KubeClient.from_config(str(control_plane.admin_kubeconfig)) as client:
        store = LedgerStore(client, NS, "kdesched")
        assert store.write(store.read(), ledger, "r")
        back = store.read()
        assert back.problem == "" and len(back.ledger.moves[rec.key].inflight) == 160

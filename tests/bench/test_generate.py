"""The synthetic cluster generator: deterministic, the requested counts, parseable, and the story
(empty and crowded nodes, DaemonSets everywhere, violations to fix) that gives strategies work.

Why: the benchmark's figures mean something only if the generated cluster has the intended
shape; these tests pin that shape at small, fast sizes.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import Any

import pytest
from kdesched.model.files import iter_objects, load_snapshot, parse_documents
from kdesched.model.snapshot import Snapshot

from bench.generate import GPU_TAINT_KEY, ZONE_LABEL, ZONES, _Ids, dumps, generate, main


def _kinds(cluster: dict[str, Any]) -> Counter[str]:
    return Counter(o["kind"] for o in cluster["items"])


def _snapshot(cluster: dict[str, Any]) -> Snapshot:
    return Snapshot.from_objects(iter_objects([cluster], "generated"))


@pytest.fixture(scope="module")
def story() -> tuple[dict[str, Any], Snapshot]:
    cluster = generate(120, 30, seed=7)
    return cluster, _snapshot(cluster)


def test_same_seed_same_bytes_other_seed_other_cluster() -> None:
    a, b, c = generate(15, 10, seed=3), generate(15, 10, seed=3), generate(15, 10, seed=4)
    assert dumps(a) == dumps(b)
    assert dumps(a) != dumps(c)


@pytest.mark.parametrize("nodes, pods_per_node", [(1, 1), (2, 1), (5, 3), (20, 10), (40, 30), (7, 120)])
def test_requested_counts_and_every_object_parses(nodes: int, pods_per_node: int) -> None:
    cluster = generate(nodes, pods_per_node, seed=1)
    assert cluster["apiVersion"] == "v1" and cluster["kind"] == "List"
    kinds = _kinds(cluster)
    assert kinds["Node"] == nodes
    assert kinds["Pod"] == nodes * pods_per_node
    snap = _snapshot(cluster)  # raises ModelError on any malformed object
    assert snap.notes == ()  # no kind was skipped
    assert len(snap.nodes) == nodes and len(snap.pods) == nodes * pods_per_node
    assert len(snap.pdbs) == kinds["PodDisruptionBudget"]
    assert len(snap.pvcs) == kinds["PersistentVolumeClaim"]
    assert len(snap.namespaces) >= 20 and len(snap.priority_classes) == kinds["PriorityClass"] >= 4


@pytest.mark.parametrize("nodes, pods_per_node", [(0, 10), (10, 0), (-1, 5)])
def test_rejects_sizes_below_one(nodes: int, pods_per_node: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        generate(nodes, pods_per_node)


def test_daemonset_pods_on_every_node(story: tuple[dict[str, Any], Snapshot]) -> None:
    _, snap = story
    per_node = Counter(p.node_name for p in snap.pods if any(o.kind == "DaemonSet" for o in p.owner_refs))
    assert set(per_node) == set(snap.nodes)
    assert len(set(per_node.values())) == 1  # every DaemonSet has exactly one pod on each node


def test_some_new_nodes_hold_only_daemonset_pods_and_some_nodes_are_crowded(
        story: tuple[dict[str, Any], Snapshot]) -> None:
    _, snap = story
    workload = Counter(p.node_name for p in snap.pods
                       if p.node_name and not any(o.kind == "DaemonSet" for o in p.owner_refs))
    empty = [n for n in snap.nodes if workload[n] == 0 and snap.nodes[n].ready]
    assert 1 <= len(empty) <= len(snap.nodes) // 10
    busy = [workload[n] for n in snap.nodes if workload[n]]
    assert max(busy) >= 1.6 * statistics.median(busy)


def test_no_ready_node_is_overcommitted(story: tuple[dict[str, Any], Snapshot]) -> None:
    _, snap = story
    for name, node in snap.nodes.items():
        live = [p for p in snap.pods_by_node.get(name, ()) if not p.terminal]
        assert len(live) <= node.allocatable["pods"]
        for res in ("cpu", "memory"):
            assert sum(p.requests.get(res, 0) for p in live) <= node.allocatable[res], (name, res)


def test_shape_of_a_real_cluster(story: tuple[dict[str, Any], Snapshot]) -> None:
    cluster, snap = story
    assert {n.labels[ZONE_LABEL] for n in snap.nodes.values()} == set(ZONES)
    effects = Counter(t.effect for n in snap.nodes.values() for t in n.taints if t.key == GPU_TAINT_KEY)
    assert effects["NoSchedule"] >= 1 and effects["NoExecute"] >= 1
    assert {n.allocatable["cpu"] // 1000 + 1 for n in snap.nodes.values()} <= {8, 16, 32}
    owners = Counter(p.owner_refs[0].kind if p.owner_refs else "" for p in snap.pods)
    assert owners["ReplicaSet"] > owners["StatefulSet"] > 0 and owners["Job"] > 0 and owners[""] > 0
    assert owners["ReplicaSet"] > len(snap.pods) // 2
    phases = Counter(p.phase for p in snap.pods)
    assert phases["Succeeded"] > 0 and phases["Failed"] > 0
    assert any(v.kind == "persistentVolumeClaim" for p in snap.pods for v in p.volumes)
    assert all((p.namespace, v.claim_name) in snap.pvcs
               for p in snap.pods for v in p.volumes if v.kind == "persistentVolumeClaim")
    assert any(p.priority is not None and p.priority >= 2_000_000_000 for p in snap.pods)
    assert any(p.tolerations and any(t.key == GPU_TAINT_KEY for t in p.tolerations) for p in snap.pods)
    assert any(p.node_selector for p in snap.pods)
    assert any(p.affinity and p.affinity.node_required for p in snap.pods)
    assert any(p.affinity and p.affinity.pod_anti_affinity_required for p in snap.pods)
    assert any(c.topology_key == ZONE_LABEL and c.max_skew == 1 for p in snap.pods for c in p.topology_spread_constraints)
    raw_pods = [o for o in cluster["items"] if o["kind"] == "Pod"]
    assert any(o["spec"].get("initContainers") for o in raw_pods)
    applied = [o["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] for o in raw_pods
               if "kubectl.kubernetes.io/last-applied-configuration" in o["metadata"].get("annotations", {})]
    assert applied and all(700 <= len(a) <= 2000 for a in applied)
    assert all("managedFields" not in o["metadata"] for o in cluster["items"])
    assert all(o["status"].get("disruptionsAllowed") is not None for o in cluster["items"]
               if o["kind"] == "PodDisruptionBudget")
    assert any(b.disruptions_allowed == 0 for b in snap.pdbs) and any(b.disruptions_allowed for b in snap.pdbs)


def test_requests_stay_within_the_documented_ranges(story: tuple[dict[str, Any], Snapshot]) -> None:
    cluster, _ = story
    from kdesched.model.quantity import to_resource_int

    for o in cluster["items"]:
        if o["kind"] != "Pod":
            continue
        for c in o["spec"]["containers"] + o["spec"].get("initContainers", []):
            req = c["resources"]["requests"]
            assert 50 <= to_resource_int("cpu", req["cpu"]) <= 2000
            assert 64 * 2**20 <= to_resource_int("memory", req["memory"]) <= 4 * 2**30


def test_work_for_the_default_strategies(story: tuple[dict[str, Any], Snapshot]) -> None:
    """Duplicates on one node, pods off their selector or taint, co-located anti-affine replicas."""
    _, snap = story
    dup = Counter((p.node_name, p.owner_refs[0].uid) for p in snap.pods
                  if p.node_name and p.owner_refs and p.owner_refs[0].kind == "ReplicaSet")
    assert max(dup.values()) >= 2
    taints = {n.name: n.taints for n in snap.nodes.values()}
    from kdesched.model.scheduling import tolerates_all

    assert any(p.node_name and not p.terminal and taints[p.node_name]
               and not tolerates_all(p.tolerations, [t for t in taints[p.node_name] if t.effect == "NoSchedule"])
               for p in snap.pods)
    assert any(p.node_selector and p.node_name
               and any(snap.nodes[p.node_name].labels.get(k) != v for k, v in p.node_selector.items())
               for p in snap.pods)
    anti = Counter((p.node_name, p.labels.get("app")) for p in snap.pods
                   if p.node_name and p.affinity and p.affinity.pod_anti_affinity_required)
    assert anti and max(anti.values()) >= 2


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_serialized_forms_load_back_unchanged(fmt: str) -> None:
    cluster = generate(6, 8, seed=2)
    text = dumps(cluster, fmt)
    if fmt == "yaml":
        assert "&id" not in text and "*id" not in text  # shared sub-objects are not anchors
    docs = parse_documents(text, f"cluster.{fmt}")
    assert docs == [json.loads(json.dumps(cluster))]


def test_cli_writes_a_file_kdesched_loads(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.json"
    assert main(["--nodes", "9", "--pods-per-node", "6", "--seed", "5", "-o", str(out)]) == 0
    snap = load_snapshot(str(out))
    assert len(snap.nodes) == 9 and len(snap.pods) == 54
    assert "54 pods" in capsys.readouterr().err


@pytest.mark.parametrize("chunk", [64, 4096, 1 << 20])
def test_streaming_loader_prototype_builds_the_same_snapshot(tmp_path: Any, chunk: int) -> None:
    """The streaming loader the benchmark measures as a proposal must agree with load_snapshot,
    whatever the read size (small chunks split every token across reads)."""
    from bench.bench_simulate import iter_json_list_items

    path = tmp_path / "c.json"
    path.write_text(json.dumps(generate(8, 6, seed=9), indent=1), encoding="utf-8")
    expected = load_snapshot(str(path))
    streamed = Snapshot.from_objects(iter_json_list_items(str(path), chunk=chunk))
    assert [p.key for p in streamed.pods] == [p.key for p in expected.pods]
    assert [(p.requests, p.node_name, p.phase) for p in streamed.pods] == \
        [(p.requests, p.node_name, p.phase) for p in expected.pods]
    assert list(streamed.nodes) == list(expected.nodes)
    assert len(streamed.pdbs) == len(expected.pdbs) and streamed.pvcs.keys() == expected.pvcs.keys()


def test_streaming_loader_gives_kind_to_items_of_a_typed_list(tmp_path: Any) -> None:
    from bench.bench_simulate import iter_json_list_items

    nodes = [o for o in generate(3, 2)["items"] if o["kind"] == "Node"]
    for o in nodes:
        del o["kind"]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": nodes, "metadata": {"x": 12345}}))
    assert [o["kind"] for _, o in iter_json_list_items(str(path), chunk=16)] == ["Node"] * 3


def test_pdb_index_prototype_finds_the_same_budgets_in_the_same_order() -> None:
    """Every pod of a generated cluster (plus budgets with expressions only, empty selectors and
    overlapping label pairs) gets exactly the PDBs the namespace scan finds."""
    from bench.bench_simulate import indexed_pdbs_for

    cluster = generate(60, 20, seed=11)
    ns = "payments"
    extra = [
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": n, "namespace": ns},
         "spec": {"maxUnavailable": 1, **({"selector": sel} if sel is not None else {})},
         "status": {"disruptionsAllowed": 1}}
        for n, sel in (("everything", {}), ("none", None),
                       ("expr", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}),
                       ("two-labels", {"matchLabels": {"app.kubernetes.io/part-of": ns, "version": "v3"}}))
    ]
    cluster["items"] = extra + cluster["items"]
    snap = _snapshot(cluster)
    lookup = indexed_pdbs_for()
    matched = 0
    for pod in snap.pods:
        expected = snap.pdbs_for(pod)
        assert lookup(snap, pod) == expected, pod.key
        matched += len(expected)
    assert matched > len(snap.pods) // 20  # the comparison saw plenty of selected pods


def test_fast_pod_parser_prototype_builds_identical_records_and_keeps_the_errors() -> None:
    import dataclasses

    from kdesched.model.errors import ModelError
    from kdesched.model.records import Pod

    from bench.bench_simulate import fast_pod_parser

    fast = fast_pod_parser()
    raws = [o for o in generate(30, 15, seed=12)["items"] if o["kind"] == "Pod"]
    raws.append({"metadata": {"name": "odd", "labels": {"n": 5, "none": None}, "annotations": None},
                 "spec": {"containers": [{"resources": {"requests": {"cpu": 0.5}}}],
                          "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}}]}})
    raws.append({"metadata": {"name": "limits-only"},  # requests default to limits; QoS Guaranteed
                 "spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]},
                 "status": {"containerStatuses": [{"name": "c", "restartCount": 4, "ready": True}]}})
    names = [f.name for f in dataclasses.fields(Pod)]
    for raw in raws:
        a, b = Pod.from_api(raw), fast(Pod, raw)
        assert [getattr(a, n) for n in names] == [getattr(b, n) for n in names], raw["metadata"]["name"]
    bad = {"metadata": {"name": "bad"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}]}}
    with pytest.raises(ModelError) as slow_error:
        Pod.from_api(bad)
    with pytest.raises(ModelError) as fast_error:
        fast(Pod, bad)
    assert str(fast_error.value) == str(slow_error.value)
    assert "spec.containers[0].resources.requests.cpu" in str(fast_error.value)
    restarts = {"metadata": {"name": "r"}, "status": {"containerStatuses": [{"name": "c", "restartCount": "4"}]}}
    with pytest.raises(ModelError) as slow_error:
        Pod.from_api(restarts)
    with pytest.raises(ModelError) as fast_error:
        fast(Pod, restarts)
    assert str(fast_error.value) == str(slow_error.value)


def test_name_suffixes_never_repeat_at_the_size_of_a_large_cluster() -> None:
    """5 random characters collide by the birthday bound well before 5,000 pods of one DaemonSet: the
    5000x30 cluster of docs/benchmarks.md held the same pod name twice, which kdesched refuses, so
    its figures could not be reproduced. Drawn as the generator draws them, none repeats."""
    import random

    ids = _Ids(random.Random(1))
    drawn = [ids.suffix(5) for _ in range(20000)]
    assert len(set(drawn)) == len(drawn)
    again = _Ids(random.Random(1))
    assert [again.suffix(5) for _ in range(20000)] == drawn  # still deterministic for a seed

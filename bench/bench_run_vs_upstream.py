"""``kdesched run`` against the upstream descheduler binary, one full pass each, on a real API server.

Why: issue 12's target is a full pass at 500 nodes / 15,000 pods in at most half the wall time of
the upstream binary with its client unthrottled (``--client-connection-qps 1000
--client-connection-burst 1000``; at its shipped 5 requests/s it is no yardstick). Only a real
etcd + kube-apiserver (tests/realk8s/controlplane.py) shows what reading, the Eviction API's PDB
checks and the Events cost. No scheduler, controllers or kubelet run: an evicted pod stays
terminating and nothing replaces it, the same for every contender.

For each repeat, and each variant in turn (interleaved, so a drift of the machine hits all of
them): the cluster's pods, PDBs and Events are deleted and re-created exactly as generated
(``bench/generate.py``: nodes, namespaces, priority classes and PVCs are never changed by a pass
and stay), then one pass runs as a subprocess. Reported per pass: wall time (process start to
exit), evictions (in all and per strategy: upstream's ``"Evicted pod"`` lines, kdesched's
report), the requests and response bytes the API server counted (``apiserver_request_total``
and ``apiserver_response_sizes`` from its /metrics, before and after: only the contender talks to it meanwhile; the eviction handler's own PDB LISTs and PDB status
writes, which the server counts under the same metrics, are taken out), and for kdesched its own phase split (read / plan /
evict, from its log), the seconds its requests waited for the client-side rate limit, and the CPU
seconds of the contender and of the API server + etcd during the pass (``getrusage`` of the child,
/proc of the servers): the machine has few cores, so who burns them matters.

    python bench/bench_run_vs_upstream.py                          # 500x30, 1 repeat, three variants
    python bench/bench_run_vs_upstream.py --repeat 3 --variants upstream,kdesched-unthrottled

Variants: ``upstream`` (the binary, qps/burst 1000), ``kdesched`` (``kdesched run`` at its
defaults), ``kdesched-unthrottled`` (``--kube-api-qps 1000 --kube-api-burst 1000``), and
``kdesched-sequential`` (unthrottled, ``--max-concurrent-evictions 1``: what concurrency buys) and
``kdesched-consistent`` (unthrottled, ``--consistent-read``: pages from etcd instead of the watch cache)
``kdesched-64`` (unthrottled, 64 evictions in flight instead of 16) and ``kdesched-dry``
(unthrottled, ``--dry-run``: what reading and planning alone cost, client and server).
The policy is the seed articles' policy (kdesched's default policy without its ``kdesched:`` block,
converted to descheduler/v1alpha2, which upstream v0.36 needs), so kdesched decides in upstream
parity mode. Results go to stdout (a table) and bench/out/run-vs-upstream.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.generate import generate
from bench.machine import machine
from tests.realk8s.controlplane import ApiError, ControlPlane, RawApi, find_binaries

UPSTREAM_FLAGS = ("--client-connection-qps", "1000", "--client-connection-burst", "1000")
VARIANTS: dict[str, tuple[str, ...]] = {
    "upstream": (),
    "kdesched": (),
    "kdesched-unthrottled": ("--kube-api-qps", "1000", "--kube-api-burst", "1000"),
    "kdesched-sequential": ("--kube-api-qps", "1000", "--kube-api-burst", "1000", "--max-concurrent-evictions", "1"),
    "kdesched-consistent": ("--kube-api-qps", "1000", "--kube-api-burst", "1000", "--consistent-read"),
    "kdesched-64": ("--kube-api-qps", "1000", "--kube-api-burst", "1000", "--max-concurrent-evictions", "64"),
    "kdesched-dry": ("--kube-api-qps", "1000", "--kube-api-burst", "1000", "--dry-run"),
}
SYSTEM_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")
_UPSTREAM_EVICTED = re.compile(r'"Evicted pod"(?! in dry run)(?:[^\n]*?strategy="(\w+)")?')
_READ = re.compile(r"read the cluster in ([\d.]+)s: (\d+) pods, (\d+) nodes; (\d+) requests, (\d+) bytes")
_PLAN = re.compile(r"planned in ([\d.]+)s: (\d+) eviction")
_EVICT = re.compile(r"carried out the plan in ([\d.]+)s: (\d+) requests, (\d+) bytes; requests waited ([\d.]+)s")


# --- loading ----------------------------------------------------------------------------------------


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as a create request: no status, no server-set metadata."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion", "creationTimestamp",
                                                                   "generation")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _collection(obj: dict[str, Any]) -> str:
    kind, meta = obj["kind"], obj["metadata"]
    return {"Namespace": "/api/v1/namespaces", "Node": "/api/v1/nodes",
            "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
            "Pod": f"/api/v1/namespaces/{meta.get('namespace')}/pods",
            "PersistentVolumeClaim": f"/api/v1/namespaces/{meta.get('namespace')}/persistentvolumeclaims",
            "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{meta.get('namespace')}/poddisruptionbudgets"}[kind]


def _create(api: RawApi, obj: dict[str, Any]) -> None:
    path = _collection(obj)
    try:
        created = api.create(path, _clean(obj))
    except ApiError as exc:
        if exc.status == 409 or (exc.status == 403 and obj["metadata"]["name"] in SYSTEM_PRIORITY_CLASSES):
            return  # kube-system, the built-in priority classes
        raise
    status = obj.get("status")
    if status and obj["kind"] in ("Node", "Pod", "PodDisruptionBudget", "PersistentVolumeClaim"):
        if obj["kind"] == "PodDisruptionBudget":
            status = {**status, "observedGeneration": created["metadata"].get("generation", 1)}
        api.patch(f"{path}/{obj['metadata']['name']}/status", {"status": status})


def _parallel(fn: Callable[[Any], None], items: Iterable[Any], workers: int) -> None:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(fn, i) for i in items]:
            f.result()


def load_all(apis: Sequence[RawApi], items: Sequence[dict[str, Any]], kinds: Sequence[str]) -> float:
    """Create the ``kinds`` of ``items`` (in that order, each kind's objects concurrently). Seconds."""
    t0 = time.perf_counter()
    for kind in kinds:
        objs = [o for o in items if o["kind"] == kind]
        _parallel(lambda io: _create(apis[io[0] % len(apis)], io[1]), enumerate(objs), len(apis))
    return time.perf_counter() - t0


def wipe(api: RawApi, namespaces: Sequence[str]) -> float:
    """Delete every pod, PDB and Event of ``namespaces`` at once (no grace) and wait until gone."""
    t0 = time.perf_counter()
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}

    def one(ns: str) -> None:
        for path in (f"/api/v1/namespaces/{ns}/pods", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                     f"/apis/events.k8s.io/v1/namespaces/{ns}/events"):
            api.request("DELETE", path, body, timeout=300)

    _parallel(one, namespaces, 4)
    while api.get("/api/v1/pods", limit=1)["items"]:
        time.sleep(0.2)
    return time.perf_counter() - t0


# --- measuring --------------------------------------------------------------------------------------


_LABEL = re.compile(r'(\w+)="([^"]*)"')
KINDS_READ = ("pods", "nodes", "namespaces", "poddisruptionbudgets", "priorityclasses", "persistentvolumeclaims",
              "events")


def server_counters(api: RawApi) -> tuple[dict[str, int], float]:
    """What the API server has counted since it started: requests per ``VERB resource[/subresource]``
    for the kinds a descheduler touches (its own internal requests, leases and the like, are left
    out), and the bytes of read responses for those kinds."""
    text = api.pool.request("GET", api.url + "/metrics", headers=api.headers).data.decode()
    requests: dict[str, int] = {}
    size = 0.0
    for line in text.splitlines():
        if not line.startswith(("apiserver_request_total{", "apiserver_response_sizes_sum{")):
            continue
        labels = dict(_LABEL.findall(line.split("}", 1)[0]))
        if labels.get("resource") not in KINDS_READ:
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith("apiserver_request_total{"):
            key = f"{labels.get('verb')} {labels['resource']}" + (f"/{labels['subresource']}"
                                                                  if labels.get("subresource") else "")
            requests[key] = requests.get(key, 0) + int(value)
        elif labels["resource"] != "poddisruptionbudgets":  # mostly the eviction handler's own LISTs
            size += value
    return requests, size


def client_requests(by_verb: dict[str, int]) -> int:
    """The contender's own requests: the API server's eviction handler itself LISTs the pod's PDBs
    (once per eviction attempt) and PUTs a PDB's status when it spends a disruption; both are
    counted under the same metric and taken out here."""
    evictions = by_verb.get("POST pods/eviction", 0)
    own_pdb_lists = max(0, by_verb.get("LIST poddisruptionbudgets", 0) - evictions)
    return sum(v for k, v in by_verb.items() if k not in ("LIST poddisruptionbudgets", "PUT poddisruptionbudgets/status")) \
        + own_pdb_lists


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a running process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_variant(name: str, kubeconfig: Path, policy: Path, binary: Path, workdir: Path,
                server_pids: Sequence[int] = ()) -> dict[str, Any]:
    if name == "upstream":
        cmd = [str(binary), "--policy-config-file", str(policy), "--kubeconfig", str(kubeconfig),
               "--secure-port", "0", "--v", "3", *UPSTREAM_FLAGS]
    else:
        cmd = [sys.executable, "-m", "kdesched", "run", "--policy", str(policy), "--kubeconfig", str(kubeconfig),
               "-o", "json", *VARIANTS[name]]
    server_cpu = sum(cpu_seconds(p) for p in server_pids)
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        t0 = time.perf_counter()
        popen = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, text=True)
        _, status, usage = os.wait4(popen.pid, 0)
        wall = time.perf_counter() - t0
        popen.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    (workdir / f"{name}.log").write_text(stderr + ("" if name != "upstream" else stdout))
    out: dict[str, Any] = {"variant": name, "wall_s": round(wall, 3), "exit": popen.returncode,
                           "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                           "server_cpu_s": round(sum(cpu_seconds(p) for p in server_pids) - server_cpu, 2)}
    if name == "upstream":
        strategies = _UPSTREAM_EVICTED.findall(stdout + stderr)
        out["evictions"] = len(strategies)
        out["by_strategy"] = dict(sorted(Counter(s or "?" for s in strategies).items()))
        return out
    try:
        report = json.loads(stdout)
        evicted = Counter(e.get("strategy") or "?" for e in report.get("evictions", []) if e.get("result") == "evicted")
        out["evictions"] = sum(evicted.values())
        out["results"] = dict(sorted(report.get("summary", {}).get("results", {}).items()))
        out["by_strategy"] = dict(sorted(evicted.items()))
    except ValueError:
        out["evictions"] = None
    log = stderr
    if m := _READ.search(log):
        out.update(read_s=float(m[1]), pods=int(m[2]), read_requests=int(m[4]), read_bytes=int(m[5]))
    if m := _PLAN.search(log):
        out.update(plan_s=float(m[1]), planned=int(m[2]))
    if m := _EVICT.search(log):
        out.update(evict_s=float(m[1]), evict_requests=int(m[2]), rate_limit_wait_s=float(m[4]))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/bench_run_vs_upstream.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--variants", default="upstream,kdesched,kdesched-unthrottled",
                        help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--load-workers", type=int, default=16, help="concurrent creates while loading")
    parser.add_argument("--keep", metavar="DIR", help="keep the logs and the policy here")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {', '.join(sorted(unknown))}; known: {', '.join(VARIANTS)}")
    bin_dir = find_binaries()
    if bin_dir is None or not (bin_dir / "descheduler").is_file():
        print("the k8s kit (etcd, kube-apiserver, descheduler) was not found; see docs/testing.md", file=sys.stderr)
        return 2
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="kdesched-bench-run-"))
    workdir.mkdir(parents=True, exist_ok=True)
    policy = workdir / "policy.yaml"
    write_seed_policy(policy)
    conditions = machine()
    cluster = generate(args.nodes, args.pods_per_node, seed=args.seed)
    items = cluster["items"]
    namespaces = [o["metadata"]["name"] for o in items if o["kind"] == "Namespace"]
    pods = sum(1 for o in items if o["kind"] == "Pod")
    print(f"cluster: {args.nodes} nodes, {pods} pods (seed {args.seed}); machine {conditions}", flush=True)
    runs: list[dict[str, Any]] = []
    with ControlPlane(bin_dir) as cp:
        assert cp.api is not None
        apis = [RawApi(cp.url, cp.token, str(cp.ca_file)) for _ in range(args.load_workers)]
        first = load_all(apis, items, ("Namespace", "PriorityClass", "Node", "PersistentVolumeClaim"))
        loaded = False
        for r in range(args.repeat):
            for name in variants:
                wiped = wipe(cp.api, namespaces) if loaded else 0.0
                reload_s = load_all(apis, items, ("PodDisruptionBudget", "Pod"))
                loaded = True
                print(f"[{r + 1}/{args.repeat}] {name}: cluster re-loaded (wipe {wiped:.1f}s, load "
                      f"{reload_s + first:.1f}s), load average {os.getloadavg()[0]:.2f}", flush=True)
                first = 0.0
                before = server_counters(cp.api)
                pids = [p.popen.pid for p in (cp.apiserver, cp.etcd) if p is not None]
                run = run_variant(name, cp.admin_kubeconfig, policy, bin_dir / "descheduler", workdir, pids)
                after = server_counters(cp.api)
                by_verb = _delta(after[0], before[0])
                run.update(repeat=r + 1, server_requests=client_requests(by_verb), server_requests_by_verb=by_verb,
                           server_read_bytes=int(after[1] - before[1]), loadavg=round(os.getloadavg()[0], 2))
                runs.append(run)
                print("   ", json.dumps(run), flush=True)
        for a in apis:
            a.close()
    print_table(runs, variants, conditions)
    out = REPO / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "run-vs-upstream.json").write_text(json.dumps({"machine": conditions, "nodes": args.nodes, "pods": pods,
                                                          "seed": args.seed, "runs": runs}, indent=2))
    return 0


def write_seed_policy(path: Path) -> None:
    """The seed articles' policy (kdesched's default policy, its strategies only) as v1alpha2."""
    import yaml
    from kdesched.policy.defaults import default_policy
    from kdesched.policy.dump import policy_to_v1alpha2

    doc = policy_to_v1alpha2(default_policy())
    doc.pop("kdesched", None)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def print_table(runs: Sequence[dict[str, Any]], variants: Sequence[str], conditions: dict[str, Any]) -> None:
    print(f"\nmachine: {conditions['cpus']} CPUs ({conditions['cpu']}), Python {conditions['python']}, "
          f"commit {conditions['commit']}, load average before {conditions['loadavg']}")
    print("| variant | wall s (median) | runs | evictions | API requests | read MB | read s | plan s | evict s |"
          " rate-limit wait s | CPU s | server CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    upstream = [r["wall_s"] for r in runs if r["variant"] == "upstream"]
    for v in variants:
        rs = [r for r in runs if r["variant"] == v]
        if not rs:
            continue

        def med(key: str, rs: list[dict[str, Any]] = rs) -> str:
            vals = [r[key] for r in rs if r.get(key) is not None]
            return f"{statistics.median(vals):.2f}" if vals else ""

        walls = ", ".join(f"{r['wall_s']:.2f}" for r in rs)
        ratio = f" ({statistics.median(r['wall_s'] for r in rs) / statistics.median(upstream):.2f}x)" \
            if upstream and v != "upstream" else ""
        print(f"| {v} | {med('wall_s')}{ratio} | {walls} | {'/'.join(str(r.get('evictions')) for r in rs)} | "
              f"{'/'.join(str(r['server_requests']) for r in rs)} | "
              f"{statistics.median(r['server_read_bytes'] for r in rs) / 1e6:.1f} | {med('read_s')} | "
              f"{med('plan_s')} | {med('evict_s')} | {med('rate_limit_wait_s')} | {med('cpu_s')} | "
              f"{med('server_cpu_s')} |")


if __name__ == "__main__":
    sys.exit(main())

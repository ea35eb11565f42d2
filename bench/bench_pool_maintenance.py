"""A pool maintenance on a real control plane: kdesched ``serve`` against the upstream descheduler's loop.

Why: issue 28's first target. 0.1 was proven safe on a few nodes and one workload, and on a pool of
real size its controls stopped the very maintenance they exist to make safe (after 300 s, 180 of 200
pods were still on the tainted nodes; the upstream descheduler on a 10 s loop moved all 200 in 43 s,
with 2 of 4 replicas of one Deployment down at once). This measures the same maintenance, as an
operator would do it, on etcd + kube-apiserver + the real scheduler + controller-manager and the
kubelet stand-in (tests/realk8s), replacements Ready ``--ready-delay`` (3) s after they are bound:

* ``--pool`` (20) nodes labelled ``pool=a`` run ``--deployments`` (50) Deployments of ``--replicas``
  (4) pods (100m each), placed by the scheduler while the ``--spares`` (4) spare nodes with room
  for every pod are cordoned; then the spares are uncordoned and every pod is Ready;
* the contender starts and is waited for (``serve``: leading and watching; upstream: its first,
  empty cycle), then all pool nodes get ``maintenance.kdesched.dev/pool=a:NoSchedule`` at once
  (a taint no workload tolerates), written concurrently.

Variants: ``kdesched`` (``kdesched serve`` with the shipped default policy,
shared/kdesched/data/default-policy.yaml as it is: the event path's safety defaults, maxUnavailable
1, cool-downs 300 s, the cluster-wide bucket 300/min burst 100) and the descheduler v0.36 binary of
the k8s kit, RemovePodsViolatingNodeTaints alone in v1alpha2, ``--descheduling-interval 10s``, in
two ways:

* ``upstream``: as an operator runs it (its Helm chart sets no client flags): its client at
  client-go's defaults, 5 requests/s, burst 10. This is the yardstick of issue 28 ("moved all 200
  in 43 s");
* ``upstream-unthrottled``: ``--client-connection-qps 1000 --client-connection-burst 1000``, as
  bench_run_vs_upstream runs it: how fast it could go with nothing but the control plane to wait
  for.

Reported per run: seconds from the taint until no live pod is on a pool node ("drained") and until
every Deployment is back at its replicas Ready with none on the pool ("whole"); the pacing floor
(ceil(replicas / maxUnavailable) waves x the replacement's start-up); the most pods of one workload
unavailable at once (every pod sampled every ``--interval`` (0.2) s: replicas minus Ready pods not
terminating); the pods replaced and the evictions the contender logged; for kdesched, the ledger's
largest object (bytes of the Lease as JSON) and most records at once (sampled every second), any
422 in serve's log, its refusals grouped by reason, the runs that gave up after 12 lost ledger
commits in a row and the taint events serve dropped after 3 tries (what holds a slow maintenance
back). serve runs with its own defaults (sweep every 900 s) unless ``--sweep`` says otherwise.

    python bench/bench_pool_maintenance.py                 # 20 nodes, 50 x 4, every variant once
    python bench/bench_pool_maintenance.py --tiny          # smoke: 3 nodes, 4 x 2
    python bench/bench_pool_maintenance.py --variants kdesched --repeat 3 --json /tmp/pool.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.machine import machine
from tests.realk8s.cluster import Cluster, is_ready, node_obj, workload_obj
from tests.realk8s.controlplane import ControlPlane, RawApi, find_binaries
from tests.realk8s.serve_stories import NS, Serve, leader, set_taints, set_unschedulable

DEFAULT_POLICY = REPO / "shared/kdesched/data/default-policy.yaml"
MAINTENANCE = {"key": "maintenance.kdesched.dev/pool", "value": "a", "effect": "NoSchedule"}
UPSTREAM_FLAGS: dict[str, tuple[str, ...]] = {
    "upstream": (),  # client-go's defaults: 5 requests/s, burst 10
    "upstream-unthrottled": ("--client-connection-qps", "1000", "--client-connection-burst", "1000"),
}
LEDGER_LABEL = "kdesched.dev/ledger"
APP_PREFIX = "pm-"
_UPSTREAM_EVICTED = re.compile(r'"Evicted pod"(?! in dry run)')
_REFUSAL = re.compile(r"kdesched\.evictor: (?:not evicting|pacing|could not evict) \S+ (?:from \S+ )?\([^)]*\): (.*)$")


@dataclass(frozen=True, slots=True)
class Shape:
    pool: int
    spares: int
    deployments: int
    replicas: int
    cpu_milli: int = 100

    @property
    def pods(self) -> int:
        return self.deployments * self.replicas


# -- the cluster -----------------------------------------------------------------------------------------
def setup(cp: ControlPlane, shape: Shape) -> tuple[list[str], list[str]]:
    """Pool nodes running every pod (spares cordoned while the scheduler places them), then the
    spares uncordoned. Returns (pool node names, spare node names)."""
    cp.reset(timeout=120)
    cluster = Cluster(cp)
    cluster.namespace(NS)
    pool = [f"pool-{i}" for i in range(shape.pool)]
    spares = [f"spare-{i}" for i in range(shape.spares)]
    per_pool = math.ceil(shape.pods / shape.pool)
    pool_cpu = max(1, math.ceil(per_pool * shape.cpu_milli * 2 / 1000))  # half full
    spare_cpu = max(2, math.ceil(shape.pods * shape.cpu_milli * 2 / 1000 / shape.spares))  # room for all, twice
    for n in pool:
        cluster.create(node_obj(n, cpu=str(pool_cpu), labels={"pool": "a"}))
    for n in spares:
        cluster.create(node_obj(n, cpu=str(spare_cpu), unschedulable=True, labels={"pool": "spare"}))
    objs = [workload_obj("Deployment", f"{APP_PREFIX}{i}", shape.replicas, "default", cpu=f"{shape.cpu_milli}m")
            for i in range(shape.deployments)]
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(cluster.create, objs))
    cluster.wait_running("default", shape.pods, timeout=300)
    for n in spares:
        set_unschedulable(cluster, n, False)
    return pool, spares


# -- sampling ---------------------------------------------------------------------------------------------
@dataclass
class Sampler:
    """Every ``interval`` s: every pod (per workload, the most unavailable at once; when no live pod
    is left on the pool; when every workload is whole off the pool); every second, the ledger's
    Leases (largest object, most records)."""

    api: RawApi
    pool: frozenset[str]
    replicas: int
    interval: float
    t0: float = 0.0
    drained_at: float | None = None
    whole_at: float | None = None
    worst: int = 0
    worst_app: str = ""
    worst_at: float = 0.0
    samples: int = 0
    ledger_max_bytes: int = 0
    ledger_max_records: int = 0
    commit_bytes: int = 0
    errors: int = 0
    #: uid -> [app, first seen, first seen bound, first seen Ready, first seen terminating, last seen]:
    #: sample times since the taint (first seen 0.0: there before it)
    timeline: dict[str, list[Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, t0: float) -> Sampler:
        self.t0 = t0
        for target in (self._pods, self._ledger):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _pods(self) -> None:
        while not self._stop.is_set():
            at = time.monotonic()
            try:
                pods = self.api.get("/api/v1/namespaces/default/pods")["items"]
            except Exception:  # noqa: BLE001 - a failed sample is counted, not a verdict
                self.errors += 1
                self._stop.wait(self.interval)
                continue
            self.samples += 1
            ready: Counter[str] = Counter()
            live: Counter[str] = Counter()
            on_pool = 0
            for p in pods:
                app = (p["metadata"].get("labels") or {}).get("app", "")
                if not app.startswith(APP_PREFIX):
                    continue
                self._note(p, app, at - self.t0)
                if p["metadata"].get("deletionTimestamp"):
                    continue
                live[app] += 1
                if p["spec"].get("nodeName") in self.pool:
                    on_pool += 1
                if is_ready(p):
                    ready[app] += 1
            apps = set(live) | set(ready)
            for app in apps:
                down = self.replicas - ready[app]
                if down > self.worst:
                    self.worst, self.worst_app, self.worst_at = down, app, at - self.t0
            if on_pool == 0 and self.drained_at is None:
                self.drained_at = at - self.t0
            if (on_pool == 0 and self.whole_at is None
                    and all(ready[a] == self.replicas and live[a] == self.replicas for a in apps)):
                self.whole_at = at - self.t0
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - at)))

    def _note(self, pod: dict[str, Any], app: str, now: float) -> None:
        first = 0.0 if self.samples == 1 else now  # a pod of the first sample was there before the taint
        row = self.timeline.setdefault(pod["metadata"]["uid"], [app, first, None, None, None, now])
        row[5] = now
        if row[2] is None and pod["spec"].get("nodeName"):
            row[2] = now
        if row[3] is None and is_ready(pod):
            row[3] = now
        if row[4] is None and pod["metadata"].get("deletionTimestamp"):
            row[4] = now

    def waves(self) -> dict[str, Any]:
        """Where a wave's time goes, from the pod timeline (sample resolution): for each replacement
        (a pod first seen after the taint), its predecessor's eviction (the workload's pod seen
        terminating just before it) to its creation, its scheduling, its start-up to Ready; and
        for each later eviction of the workload, the time since the last replacement turned Ready
        (the contender's reaction). Medians and 90th percentiles in seconds."""
        by_app: dict[str, list[list[Any]]] = {}
        for row in self.timeline.values():
            by_app.setdefault(row[0], []).append(row)
        parts: dict[str, list[float]] = {"evicted_to_created": [], "created_to_bound": [],
                                         "bound_to_ready": [], "ready_to_next_eviction": []}
        for rows in by_app.values():
            end = max(r[5] for r in rows)
            # evicted: seen terminating, or gone between two samples (the stand-in kubelet may remove it first)
            gone = sorted(r[4] if r[4] is not None else r[5] for r in rows if r[4] is not None or r[5] < end)
            new = sorted((r for r in rows if r[1] > 0.0), key=lambda r: r[1])
            for r in new:
                before = [g for g in gone if g <= r[1]]
                if before:
                    parts["evicted_to_created"].append(r[1] - before[-1])
                if r[2] is not None:
                    parts["created_to_bound"].append(r[2] - r[1])
                    if r[3] is not None:
                        parts["bound_to_ready"].append(r[3] - r[2])
            readies = sorted(r[3] for r in new if r[3] is not None)
            for g in gone[1:]:
                before = [t for t in readies if t <= g]
                if before:
                    parts["ready_to_next_eviction"].append(g - before[-1])
        out: dict[str, Any] = {}
        for name, xs in parts.items():
            xs.sort()
            out[name] = ({"n": len(xs), "median": round(xs[len(xs) // 2], 2),
                          "p90": round(xs[min(len(xs) - 1, int(len(xs) * 0.9))], 2)} if xs else {"n": 0})
        return out

    def _ledger(self) -> None:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
        while not self._stop.is_set():
            try:
                items = self.api.get(base)["items"]
            except Exception:  # noqa: BLE001
                self.errors += 1
                self._stop.wait(1.0)
                continue
            records = [o for o in items if LEDGER_LABEL in (o["metadata"].get("labels") or {})]
            ledger = records + [o for o in items if o["metadata"]["name"].endswith("-ledger")]
            self.ledger_max_records = max(self.ledger_max_records, len(records))
            for o in ledger:
                size = len(json.dumps(o, separators=(",", ":")))
                self.ledger_max_bytes = max(self.ledger_max_bytes, size)
                if not (o["metadata"].get("labels") or {}).get(LEDGER_LABEL):
                    self.commit_bytes = max(self.commit_bytes, size)
            self._stop.wait(1.0)


def taint_pool(api: RawApi, pool: Sequence[str]) -> float:
    """Taint every pool node at once (concurrent patches); the monotonic time of the first write."""
    cluster = Cluster.__new__(Cluster)
    cluster.api = api
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda n: set_taints(cluster, n, [MAINTENANCE]), pool))
    return t0


def uids(api: RawApi) -> set[str]:
    return {p["metadata"]["uid"] for p in api.get("/api/v1/namespaces/default/pods")["items"]
            if (p["metadata"].get("labels") or {}).get("app", "").startswith(APP_PREFIX)}


# -- the contenders ---------------------------------------------------------------------------------------
def upstream_policy(path: Path) -> Path:
    """RemovePodsViolatingNodeTaints alone, in the v1alpha2 shape bench_run_vs_upstream feeds upstream."""
    from kdesched.policy.defaults import default_policy
    from kdesched.policy.dump import policy_to_v1alpha2

    doc = policy_to_v1alpha2(default_policy())
    doc.pop("kdesched", None)
    doc["profiles"] = [p for p in doc["profiles"]
                       if "RemovePodsViolatingNodeTaints" in json.dumps(p.get("plugins") or {})]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def refusals(log: str) -> Counter[str]:
    """serve's refusals and paced outcomes by reason, numbers and names blurred so alike ones count together."""
    out: Counter[str] = Counter()
    for line in log.splitlines():
        if m := _REFUSAL.search(line):
            why = re.sub(r"[\w.-]+/[\w./-]+", "<obj>", m.group(1))
            why = re.sub(r"\d+(\.\d+)?", "N", why)
            out[why[:140]] += 1
    return out


def run_once(cp: ControlPlane, variant: str, shape: Shape, args: argparse.Namespace, workdir: Path,
             bins: Path) -> dict[str, Any]:
    kubelet = cp.start_kubelet(ready_delay=0.0)
    pool, _ = setup(cp, shape)
    api = cp.api
    assert api is not None
    before = uids(api)
    tag = f"{variant}-{int(time.time())}"
    serve: Serve | None = None
    upstream: subprocess.Popen[bytes] | None = None
    up_log = workdir / f"{tag}.log"
    if variant == "kdesched":
        pythonpath = (os.pathsep.join(str(Path(args.checkout) / d) for d in ("shared", "functions"))
                      if args.checkout else "")
        serve = Serve(cp.admin_kubeconfig, Path(args.policy), f"pool-{tag}", workdir=workdir,
                      pythonpath=pythonpath, sweep_interval=args.sweep).start()
        cluster = Cluster(cp)
        cp.wait_for(lambda: leader(cluster) == serve.identity and "watching" in serve.readyz()[1], 120,
                    what="serve to lead and watch")
        time.sleep(1.0)
    else:
        policy = upstream_policy(workdir / "upstream-policy.yaml")
        with open(up_log, "wb") as fh:
            upstream = subprocess.Popen(
                [str(bins / "descheduler"), "--policy-config-file", str(policy), "--kubeconfig",
                 str(cp.admin_kubeconfig), "--secure-port", "0", "--v", "3", "--descheduling-interval",
                 f"{args.upstream_interval:g}s", *UPSTREAM_FLAGS[variant]],
                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(3.0)  # its first cycle (nothing to do) runs at start; the taint lands mid-interval
        if upstream.poll() is not None:
            raise RuntimeError(f"upstream descheduler exited: {up_log.read_text()[-2000:]}")
    kubelet.ready_delay = args.ready_delay
    sampler = Sampler(RawApi(cp.url, cp.token, str(cp.ca_file)), frozenset(pool), shape.replicas, args.interval)
    load = round(os.getloadavg()[0], 2)
    try:
        t0 = taint_pool(api, pool)
        sampler.start(t0)
        deadline = t0 + args.timeout
        while time.monotonic() < deadline and sampler.whole_at is None:
            time.sleep(0.2)
        time.sleep(2.0)  # anything still happening shows in the figures
    finally:
        sampler.stop()
        if serve is not None:
            serve.stop()
        if upstream is not None and upstream.poll() is None:
            upstream.send_signal(signal.SIGTERM)
            try:
                upstream.wait(20)
            except subprocess.TimeoutExpired:
                upstream.kill()
                upstream.wait(5)
    replaced = len(before - uids(api))
    out: dict[str, Any] = {
        "variant": variant, "drained_s": _r(sampler.drained_at), "whole_s": _r(sampler.whole_at),
        "timeout_s": args.timeout, "max_unavailable_seen": sampler.worst, "worst_workload": sampler.worst_app,
        "worst_at_s": _r(sampler.worst_at), "replaced": replaced, "samples": sampler.samples,
        "sample_errors": sampler.errors, "loadavg_at_start": load, "waves": sampler.waves(),
        "code": args.checkout if variant == "kdesched" and args.checkout else "this"}
    if serve is not None:
        log = serve.log()
        out.update(logged_evictions=log.count("kdesched.evictor: evicted "),
                   ledger_busy=log.count("changed 12 times while this run decided"),
                   events_skipped=re.findall(r"taints\.changed on (\S+) skipped after", log),
                   ledger_max_bytes=sampler.ledger_max_bytes, ledger_max_records=sampler.ledger_max_records,
                   commit_bytes=sampler.commit_bytes, http_422=len(re.findall(r"HTTP 422\b|Unprocessable Entity", log)),
                   refusals=dict(refusals(log).most_common(12)), log=str(serve.log_path))
    else:
        text = up_log.read_text(errors="replace")
        out.update(logged_evictions=len(_UPSTREAM_EVICTED.findall(text)), log=str(up_log))
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="kdesched,upstream,upstream-unthrottled",
                    help="comma-separated: kdesched, upstream (its shipped client limits), upstream-unthrottled")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--kcm-qps", type=int, default=None,
                    help="kube-controller-manager's --kube-api-qps (burst 1.5x); default: its own, 20/30 as on "
                         "most clusters. Its ReplicaSet controller makes every replacement: at 20 requests/s it, "
                         "not the descheduler, bounds how fast 200 pods are replaced")
    ap.add_argument("--pool", type=int, default=20)
    ap.add_argument("--spares", type=int, default=4)
    ap.add_argument("--deployments", type=int, default=50)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--tiny", action="store_true", help="a smoke run: 3 pool nodes, 2 spares, 4 Deployments of 2")
    ap.add_argument("--ready-delay", type=float, default=3.0, help="replacements Ready this long after they are bound")
    ap.add_argument("--interval", type=float, default=0.2, help="pod sampling interval (s)")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up on a run after this long (s)")
    ap.add_argument("--upstream-interval", type=float, default=10.0)
    ap.add_argument("--sweep", type=float, default=900.0,
                    help="serve's --sweep-interval (default: serve's own default, 900 s; 0 turns it off)")
    ap.add_argument("--policy", default=str(DEFAULT_POLICY), help="kdesched's policy (default: the shipped one)")
    ap.add_argument("--checkout", metavar="DIR",
                    help="run the kdesched of another checkout (its shared/ and functions/ on PYTHONPATH): a fix "
                         "measured before it is merged")
    ap.add_argument("--keep", metavar="DIR", help="keep the logs here")
    ap.add_argument("--json", metavar="FILE", help="write every run and the machine's conditions here")
    args = ap.parse_args(argv)
    shape = (Shape(3, 2, 4, 2) if args.tiny else
             Shape(args.pool, args.spares, args.deployments, args.replicas))
    variants = [v for v in args.variants.split(",") if v]
    if set(variants) - {"kdesched", *UPSTREAM_FLAGS}:
        ap.error(f"--variants: kdesched, {', '.join(UPSTREAM_FLAGS)}")
    bins = find_binaries()
    if bins is None or (set(variants) & set(UPSTREAM_FLAGS) and not (bins / "descheduler").is_file()):
        print("the k8s kit (etcd, kube-apiserver, scheduler, controller-manager, descheduler) was not found; "
              "see docs/testing.md", file=sys.stderr)
        return 2
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="kdesched-bench-pool-"))
    workdir.mkdir(parents=True, exist_ok=True)
    conditions = machine()
    floor = math.ceil(shape.replicas / 1) * args.ready_delay  # maxUnavailable 1 (the shipped default)
    print(f"pool maintenance: {shape.pool} pool nodes tainted at once under {shape.deployments} Deployments of "
          f"{shape.replicas} ({shape.pods} pods), {shape.spares} spare nodes; replacements Ready "
          f"{args.ready_delay:g} s after binding; pacing floor {floor:g} s; machine {conditions}", flush=True)
    runs: list[dict[str, Any]] = []
    with ControlPlane(bins) as cp:
        cp.start_scheduler()
        cp.start_controller_manager(api_qps=args.kcm_qps)
        for r in range(args.repeat):
            for v in variants:
                try:
                    run = run_once(cp, v, shape, args, workdir, bins)
                except Exception as exc:  # noqa: BLE001 - one failed run is reported, the rest still run
                    run = {"variant": v, "error": str(exc)[:800]}
                run["repeat"] = r + 1
                runs.append(run)
                print("   ", json.dumps(run), flush=True)
    print_table(runs, shape, floor, args, conditions)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": conditions, "shape": asdict(shape), "floor_s": floor,
                                               "runs": runs}, indent=2))
    return 0


def print_table(runs: Sequence[dict[str, Any]], shape: Shape, floor: float, args: argparse.Namespace,
                conditions: dict[str, Any]) -> None:
    print(f"\nmachine: {conditions['cpus']} CPUs ({conditions['cpu']}), Python {conditions['python']}, "
          f"commit {conditions['commit']}, load average before {conditions['loadavg']}")
    print(f"{shape.pool} nodes tainted, {shape.deployments} x {shape.replicas} pods, ready-delay {args.ready_delay:g} s, "
          f"pacing floor {floor:g} s")
    print("| variant | drained s | whole s | most of one workload down | pods replaced | evictions logged |"
          " ledger: largest object B / most records | 422s |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        if "error" in run:
            print(f"| {run['variant']} | error: {run['error'][:200]} |")
            continue
        drained = run["drained_s"] if run["drained_s"] is not None else f">{run['timeout_s']:g}"
        whole = run["whole_s"] if run["whole_s"] is not None else f">{run['timeout_s']:g}"
        ledger = (f"{run['ledger_max_bytes']} / {run['ledger_max_records']}" if "ledger_max_bytes" in run else "-")
        print(f"| {run['variant']} | {drained} | {whole} | {run['max_unavailable_seen']} of {shape.replicas} "
              f"({run['worst_workload']} at {run['worst_at_s']} s) | {run['replaced']} | {run['logged_evictions']} | "
              f"{ledger} | {run.get('http_422', '-')} |")
    for run in runs:
        if run.get("waves"):
            print(f"\n{run['variant']} (repeat {run['repeat']}): where a wave's time goes (median / p90 s, n):")
            for part, fig in run["waves"].items():
                print(f"  {part:24s} " + (f"{fig['median']:6.2f} / {fig['p90']:6.2f}  ({fig['n']})" if fig["n"] else "-"))
    for run in runs:
        if "ledger_busy" in run:
            print(f"\n{run['variant']} (repeat {run['repeat']}): {run['ledger_busy']} run(s) gave up after 12 lost "
                  f"ledger commits in a row; taint events dropped after 3 tries: {run['events_skipped'] or 'none'}")
        if run.get("refusals"):
            print(f"{run['variant']} (repeat {run['repeat']}): refusals and paced outcomes by reason:")
            for why, n in run["refusals"].items():
                print(f"  {n:6d}  {why}")


if __name__ == "__main__":
    raise SystemExit(main())

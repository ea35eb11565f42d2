"""A taint through Knative's real data plane, to the eviction: how long, and where the time goes.

Why: issue 22 asks for the event-to-eviction time of kdesched's first deployment, Knative, through
the real programs: the ApiServerSource adapter, the Broker's ingress, the in-memory channel's
dispatcher and the Broker's filter, the classifier function, the same path again for the semantic
event, and the taints function. This starts the real control plane (kube-apiserver, scheduler,
controller-manager v1.24 and the kubelet stand-in) and the data plane of tests/realknative
(:class:`tests.realknative.dataplane.KnativeDataPlane`, knative/base applied as it is), sets up the
seed taint story unseen for each repeat, taints the node, and reads the hops from the processes'
JSON logs (wall-clock times, milliseconds):

- ``to classifier``: the taint written -> the classifier has emitted ``node.taints.changed``
  (the adapter's watch, the adapter -> ingress -> channel -> filter -> classifier deliveries);
- ``to taints``: -> the taints function has evicted the first pod (the reply back through the
  ingress, the channel, the filter, the function's reads and decision, the eviction call);
- ``total``: the taint written -> the first eviction.

    python bench/bench_knative_taint.py [--repeat 5]

It binds the data plane's fixed port 8080 (no other Knative tier on the machine meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.machine import machine
from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, find_binaries
from tests.realk8s.serve_stories import taint, uids, wait_placement
from tests.realknative.dataplane import NS, FunctionProc, KnativeDataPlane, find_knative


def _lines(fn: FunctionProc) -> list[dict[str, Any]]:
    out = []
    for line in fn.log().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "time" in doc:
            out.append(doc)
    return out


def _when(doc: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(doc["time"])).timestamp()


def first_after(fn: FunctionProc, since: float, needle: str) -> float | None:
    for doc in _lines(fn):
        t = _when(doc)
        if t >= since and needle in str(doc.get("msg", "")):
            return t
    return None


def one(cp: ControlPlane, dp: KnativeDataPlane) -> dict[str, float | None]:
    dp.restore()
    cp.reset()
    api = cp.api
    assert api is not None
    try:  # no Lease: a previous repeat's cool-downs must not reach this one (as tests/realknative does)
        api.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                    {"kind": "DeleteOptions", "apiVersion": "v1"})
    except Exception:  # noqa: BLE001, S110 - none yet
        pass
    cluster = Cluster(cp)
    if cluster.get(f"/api/v1/namespaces/{NS}") is None:
        cluster.namespace(NS)
    with dp.quiet():
        story = taint(cp, cluster)
    before = uids(cluster, story.app)
    time.sleep(0.5)
    written = time.time()
    story.change()
    try:
        wait_placement(cp, cluster, story.app, story.done, timeout=60, what="the shop pods on node-1")
    except TimeoutError:
        for name in ("classifier", "taints"):
            print(f"--- {name} log (tail):\n" + "\n".join(dp.functions[name].log().splitlines()[-15:]), file=sys.stderr)
        raise
    assert len(before - uids(cluster, story.app)) == story.evictions
    time.sleep(0.5)  # the last log lines
    classified = first_after(dp.functions["classifier"], written - 0.01, "dev.kdesched.node.taints.changed")
    evicted = first_after(dp.functions["taints"], written - 0.01, "evicted ")
    return {"to classifier": None if classified is None else classified - written,
            "to taints": None if classified is None or evicted is None else evicted - classified,
            "total": None if evicted is None else evicted - written}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    bins, kit = find_binaries(), find_knative()
    if bins is None or kit is None:
        print("needs the k8s and Knative kits (tests/realk8s, tests/realknative find them)", file=sys.stderr)
        return 2
    runs: list[dict[str, float | None]] = []
    with ControlPlane(bins) as cp:
        cp.start_scheduler()
        cp.start_controller_manager()
        cp.start_kubelet()
        dp = KnativeDataPlane(cp, kit)
        dp.start()
        try:
            for i in range(args.repeat):
                run = one(cp, dp)
                runs.append(run)
                print(f"  run {i + 1}: " + ", ".join(f"{k} {v:.3f}s" if v is not None else f"{k} ?"
                                                    for k, v in run.items()), file=sys.stderr)
        finally:
            dp.stop()
    info = machine()
    print(f"taint -> first eviction through adapter, broker, classifier, broker and taints (Knative {kit.name}); "
          f"median of {args.repeat}")
    print(f"python {info['python']}, {info['cpus']} CPUs ({info['cpu']}), load {info['loadavg']}, commit {info['commit']}")
    for hop in ("to classifier", "to taints", "total"):
        values = [v for r in runs if (v := r[hop]) is not None]
        if values:
            print(f"{hop:14s} median {statistics.median(values):.3f}s (min {min(values):.3f}, max {max(values):.3f})")
        else:
            print(f"{hop:14s} not measured (log lines not found)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

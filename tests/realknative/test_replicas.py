"""Two replicas of an evicting function receiving concurrent events.

Knative Serving would put two pods of ``taints`` behind one Service URL when it scales out; without
Serving, two ``kdesched function taints`` processes stand behind a loopback round-robin proxy, and
Trigger ``taints`` points at the proxy. Two nodes carrying pods of one workload are tainted, and
the two taints.changed events are posted to the Broker at once; the proxy forwards them together,
so the two replicas' runs overlap. The safety defaults promise at
most ``maxUnavailable`` (1) pods of a workload unavailable because of kdesched at any moment; each
replica checks that against what it reads from the API server, so two replicas evicting at the same
moment can both see the workload whole. Holding it across processes is the disruption ledger's job
(issue 21): until it lands this test may fail, and is marked so.
"""

from __future__ import annotations

import contextlib
import threading
import time

from tests.realk8s.cluster import Cluster, is_ready
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc, free_port
from tests.realk8s.serve_stories import app_pods, set_taints, set_unschedulable, wait_placement
from tests.realknative.dataplane import Delivery, FunctionProc, KnativeDataPlane, Proxy

REPLICAS = 4
MAX_UNAVAILABLE = 1  # kdesched.safety.maxUnavailable of the shipped policy (docs/safety.md)
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
TAINTS = "dev.kdesched.node.taints.changed"


def test_two_taints_replicas_keep_the_workload_allowance(control_plane: ControlPlane, scheduler: Proc,
                                                        controller_manager: Proc, kubelet: Kubelet, cluster: Cluster,
                                                        knative: KnativeDataPlane) -> None:
    with knative.quiet():
        cluster.node("node-1", unschedulable=True)
        cluster.node("gpu-1")
        cluster.node("gpu-2", unschedulable=True)
        cluster.deployment("shop", 2, cpu="200m")
        wait_placement(control_plane, cluster, "shop", lambda p: p == {"gpu-1": 2})
        set_unschedulable(cluster, "gpu-1", True)
        set_unschedulable(cluster, "gpu-2", False)
        cluster.api.patch("/apis/apps/v1/namespaces/default/deployments/shop", {"spec": {"replicas": REPLICAS}})
        wait_placement(control_plane, cluster, "shop", lambda p: p == {"gpu-1": 2, "gpu-2": 2})
        set_unschedulable(cluster, "gpu-1", False)
        set_unschedulable(cluster, "node-1", False)
        set_taints(cluster, "gpu-1", [GPU_TAINT])
        set_taints(cluster, "gpu-2", [GPU_TAINT])
    first = knative.functions["taints"]
    second = FunctionProc("taints", free_port(), dict(first.env), knative.workdir)
    knative.extra_functions["taints"] = [second]
    second.start()
    # the two taints.changed deliveries are held until both arrived, then forwarded together: the
    # two runs really overlap (otherwise the second may start after the first evicted, and see it)
    both = threading.Barrier(2, timeout=30)

    def together(d: Delivery, body: bytes) -> int | None:
        if d.ce_type == TAINTS:
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
        return None

    proxy = Proxy([first.url, second.url], together)
    knative.proxies.append(proxy)
    knative.set_subscriber("taints", proxy.url)
    time.sleep(1)  # the filter's Trigger informer follows the new subscriber URI
    kubelet.ready_delay = 3.0  # replacements stay unavailable for a while: the window to watch

    worst = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            ready = [p for p in app_pods(cluster, "shop") if is_ready(p)]
            worst[0] = max(worst[0], REPLICAS - len(ready))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # the two taints.changed events, as the classifier words them, posted to the Broker ingress
        # at the same moment (one adapter's events cannot do that here: its chain is synchronous,
        # see test_incarnations.py; a Kafka broker, or the classifier's extra events, can)
        posts = [threading.Thread(target=knative.post_event, args=(TAINTS, {
            "node": node, "before": {"taints": []}, "after": {"taints": [GPU_TAINT]}}),
            kwargs={"id": f"replicas-{node}", "source": "/kdesched/classifier"}) for node in ("gpu-1", "gpu-2")]
        for t in posts:
            t.start()
        for t in posts:
            t.join()
        # each replica answers once its run is over (its waves included); then the replacements
        # become Ready (the rest of the drain waits for the workload cool-down: not this test's matter)
        control_plane.wait_for(lambda: len([d for d in proxy.deliveries(TAINTS) if d.status]) == 2, 120,
                               what="both replicas to answer their taints.changed")
        control_plane.wait_for(lambda: len([p for p in app_pods(cluster, "shop") if is_ready(p)]) == REPLICAS, 60,
                               what="the replacements to be Ready")
    finally:
        stop.set()
        watcher.join(5)
    served = sorted((d.upstream, d.status) for d in proxy.deliveries(TAINTS))
    assert served == [(0, 200), (1, 200)], f"each replica should have served one taints.changed: {served}"
    assert worst[0] <= MAX_UNAVAILABLE, (
        f"{worst[0]} of {REPLICAS} shop pods were unavailable at once (maxUnavailable {MAX_UNAVAILABLE})")

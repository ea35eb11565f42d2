"""200 clients at once against ``kdesched serve``'s own HTTP endpoint (manual runs, dry).

Why: serve answers manual runs in the same process that watches Nodes and leads; a burst must be
answered 200 or refused with 429/503 and ``Retry-After`` (so the sender retries and no event is
lost), and the probes must keep answering meanwhile, or the kubelet restarts the leader.
"""

from __future__ import annotations

import http.client
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kdesched.kube.client import KubeClient
from kdesched.reactor.events import types as ev
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import ReactorServer
from kdesched_functions.manual import create_serve_app

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.functions.test_concurrency import check_answers, deliver
from tests.reactor.policies import default_like_policy
from tests.reactor.test_serve import wait_for


def test_200_clients_against_serve_lose_nothing(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    fake_api.add(pod_obj("p", "n1", owner_name="web"))
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5}
    policy = default_like_policy(kdesched=block)
    srv = ReactorServer(policy, parse_settings(block, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                        app_factory=create_serve_app, sweep_interval_seconds=0, identity="me", http_concurrency=10)
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: srv.ready()[0] and srv.leadership.is_leader.is_set())
        start = threading.Barrier(201)
        probes: list[int] = []

        def probe() -> None:
            start.wait()
            for _ in range(20):
                c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
                c.request("GET", "/readyz")
                probes.append(c.getresponse().status)
                c.close()
                time.sleep(0.05)

        with ThreadPoolExecutor(max_workers=201) as pool:
            pf = pool.submit(probe)
            futs = {i: pool.submit(deliver, srv.port, ev.RUN_REQUESTED, {"dryRun": True}, f"b-{i:03d}", start)
                    for i in range(200)}
            results = {i: f.result() for i, f in futs.items()}
            pf.result()
        check_answers(results, 200)  # every event eventually accepted; refusals carry Retry-After
        assert set(probes) == {200}
    finally:
        srv.shutdown()
        t.join(30)

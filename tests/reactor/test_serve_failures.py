"""``kdesched serve`` when things fail: the leader steps down instead of leading on a Lease it may
have lost, a concurrent write of its Lease (409) is not a loss, and a stop releases the Lease
within the pod's grace period even while a run is still evicting.

The renew deadline is judged by a fake clock the test moves (the leader loop itself runs for real
with short waits), so no assertion depends on how fast the machine is.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.cli.main import main
from kdesched.cli.serve import DEFAULT_DRAIN_TEXT
from kdesched.kube.client import KubeClient
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import DEFAULT_DRAIN_SECONDS, SHUTDOWN_MARGIN_SECONDS, ReactorServer

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy
from tests.reactor.test_serve import TAINT, wait_for

REPO = Path(__file__).resolve().parents[2]
LEADER = "/apis/coordination.k8s.io/v1/namespaces/kdesched/leases/kdesched-leader"
# short Leases: renew every 0.5 s, retry every 0.2 s, step down 1 s (fake clock) after the last renew
BLOCK = {"settleSeconds": 0.05, "leaseWaitSeconds": 0.5, "leaseDurationSeconds": 5, "leaseRenewDeadlineSeconds": 1}


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Running:
    """A ReactorServer running in a thread, and what ``run`` returned."""

    def __init__(self, srv: ReactorServer) -> None:
        self.srv = srv
        self.result: list[int] = []
        self.thread = threading.Thread(target=lambda: self.result.append(srv.run()), daemon=True)
        self.thread.start()

    def join(self) -> list[int]:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        return self.result


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def leader(fake_api: FakeApiServer, kube: KubeClient, clock: FakeClock) -> Iterator[Running]:
    fake_api.add(node_obj("n1"), node_obj("n2"))
    fake_api.add(pod_obj("intolerant", "n1", owner_name="web"))
    policy = default_like_policy(kdesched=BLOCK)
    srv = ReactorServer(policy, parse_settings(BLOCK, policy=policy, env={}), kube, host="127.0.0.1", port=0,
                        sweep_interval_seconds=0, identity="me", watch_timeout_seconds=2, drain_seconds=0.2,
                        clock=clock)
    running = Running(srv)
    wait_for(lambda: srv.leadership.is_leader.is_set() and srv.watcher.listed.is_set())
    yield running
    srv.shutdown()
    running.join()


def leader_puts(fake_api: FakeApiServer) -> int:
    return len(fake_api.requests("PUT", LEADER))


def holder(fake_api: FakeApiServer) -> str:
    return str(((fake_api.get("Lease", "kdesched-leader", "kdesched") or {}).get("spec") or {}).get("holderIdentity")
               or "")


def test_the_leader_steps_down_once_no_renew_succeeded_within_the_deadline(leader: Running, fake_api: FakeApiServer,
                                                                           clock: FakeClock) -> None:
    srv = leader.srv
    fake_api.script("PUT", LEADER, [500] * 10_000)
    before = leader_puts(fake_api)
    wait_for(lambda: leader_puts(fake_api) >= before + 3)  # failing, retried every retry period
    assert srv.leadership.is_leader.is_set() and not srv.stop.is_set()  # errors alone: within the deadline, still leading
    clock.t += 1.5
    wait_for(srv.stop.is_set)
    assert "not renewed for 1.5s (renew deadline 1s)" in srv.leadership.stepped_down
    assert not srv.leadership.is_leader.is_set()
    assert leader.join() == [0]  # stopped as on SIGTERM; the Deployment restarts it as a candidate
    # the API still fails: the release did too, the Lease expires by itself (a standby waits one
    # duration after the last renew it saw, by its own clock: this replica stopped well before)
    assert holder(fake_api) == "me"


def test_the_leader_steps_down_at_once_when_another_holds_its_lease(leader: Running,
                                                                    fake_api: FakeApiServer) -> None:
    lease = fake_api.get("Lease", "kdesched-leader", "kdesched")
    assert lease is not None
    lease["spec"]["holderIdentity"] = "usurper"
    fake_api.update(lease)
    wait_for(leader.srv.stop.is_set)
    assert "no longer ours" in leader.srv.leadership.stepped_down
    assert leader.join() == [0]
    assert holder(fake_api) == "usurper"  # not ours: left alone


def test_a_concurrent_write_of_the_leader_lease_is_not_a_loss(leader: Running, fake_api: FakeApiServer) -> None:
    """A 409 on the renew (someone updated the Lease meanwhile) used to stop the leader. Now it
    re-reads and renews again; even repeated 409s are only errors, retried within the deadline."""
    fake_api.script("PUT", LEADER, [409] * 7)
    before = leader_puts(fake_api)
    wait_for(lambda: leader_puts(fake_api) >= before + 10)
    assert leader.srv.leadership.is_leader.is_set() and not leader.srv.stop.is_set() and leader.srv.leadership.stepped_down == ""
    assert holder(fake_api) == "me"


def test_a_run_still_evicting_after_the_drain_does_not_keep_the_lease(leader: Running,
                                                                      fake_api: FakeApiServer) -> None:
    fake_api.gather_evictions(2, timeout=60)  # the one eviction hangs (server side) until the fake stops
    node = fake_api.get("Node", "n1")
    assert node is not None
    node["spec"]["taints"] = [TAINT]
    fake_api.update(node)
    wait_for(lambda: fake_api.evictions_in_flight == 1)
    leader.srv.shutdown()
    assert leader.join() == [0]
    assert leader.srv.abandoned_runs == 1 and fake_api.evictions_in_flight == 1  # released while it still ran
    assert holder(fake_api) == ""
    # let the abandoned run finish while the API server is still up (else it logs its retries after
    # the test's log capture closed)
    fake_api.release_evictions()
    wait_for(lambda: not [t for t in threading.enumerate() if t.name.startswith(("kdesched-evict", "kdesched-event"))],
             timeout=30)


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return path


def test_sigterm_with_a_run_stuck_evicting_exits_0_after_the_drain(fake_api: FakeApiServer, tmp_path: Path) -> None:
    """The command line, end to end: the run's worker thread is still blocked in its eviction call
    when the drain ends; serve releases the Lease and the process exits 0 all the same."""
    fake_api.add(node_obj("n1"), node_obj("n2"))
    fake_api.add(pod_obj("intolerant", "n1", owner_name="web"))
    fake_api.gather_evictions(2, timeout=60)
    cfg = kubeconfig(tmp_path, fake_api.url)
    env = {**os.environ, "KUBECONFIG": str(cfg), "KDESCHED_LEASE_NAMESPACE": "kdesched"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "kdesched", "serve", "--kubeconfig", str(cfg), "--port", "0",
                             "--sweep-interval", "0", "--host", "127.0.0.1", "--identity", "sub",
                             "--drain-seconds", "0.5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Wait for the node *watch*: the first node request is a one-item permission probe, and a taint
        # applied before the seeding LIST would be seen as the starting state, not as a change.
        wait_for(lambda: holder(fake_api) == "sub" and any(
            r.query.get("watch") == "true" for r in fake_api.requests("GET", "/api/v1/nodes")), timeout=30)
        node = fake_api.get("Node", "n1")
        assert node is not None
        node["spec"]["taints"] = [TAINT]
        fake_api.update(node)
        try:
            wait_for(lambda: fake_api.evictions_in_flight == 1, timeout=30)
        except AssertionError:
            proc.kill()
            raise AssertionError("no eviction reached the API server; serve said:\n"
                                 + (proc.stderr.read().decode() if proc.stderr else "")) from None
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0, err
    assert "1 run(s) still in flight after the 0.5s drain" in err
    assert holder(fake_api) == "" and fake_api.evictions_in_flight == 1


# --- the drain option and the shipped manifest ---------------------------------------------------


@pytest.mark.parametrize("value,message", [("-1", "out of range (range: 0 to 3600 seconds), got '-1'"),
                                           ("nan", "must be a finite number"), ("inf", "must be a finite number"),
                                           ("soon", "must be a number (range: 0 to 3600 seconds)")])
def test_drain_seconds_is_validated_naming_the_flag(value: str, message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--drain-seconds", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --drain-seconds" in err and message in err


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_the_server_refuses_a_bad_drain(kube: KubeClient, bad: float) -> None:
    with pytest.raises(ValueError, match="drain_seconds must be a finite number >= 0"):
        ReactorServer(default_like_policy(), parse_settings({}, env={}), kube, drain_seconds=bad, cache=False)


def test_the_manifests_grace_period_outlasts_the_default_drain_and_the_margin() -> None:
    """SIGKILL comes terminationGracePeriodSeconds after SIGTERM: the drain and then the Lease
    release must both be over by then, or the Lease is left to expire and no standby takes over."""
    docs = list(yaml.safe_load_all((REPO / "knative" / "standalone" / "deployment.yaml").read_text()))
    deployment: dict[str, Any] = next(d for d in docs if d and d.get("kind") == "Deployment")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > DEFAULT_DRAIN_SECONDS + SHUTDOWN_MARGIN_SECONDS
    assert DEFAULT_DRAIN_TEXT.startswith(f"{DEFAULT_DRAIN_SECONDS:g}, ") and f"{grace} s" in DEFAULT_DRAIN_TEXT

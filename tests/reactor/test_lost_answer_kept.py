"""An admission is released only when its eviction is known to have ended or provably can no
longer land (issue 28). An eviction whose answer was lost, and whose pod then could not be read
back, may have landed: it is reported ``failed`` with cause ``unconfirmed`` and its admission is
kept. Before, it was taken back like any failure, and another process admitted a second pod of
the workload in the gap before the replacement existed: 2 of 6 down with maxUnavailable 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kdesched.evictor.execute import LiveExecutor, RetrySettings
from kdesched.kube.client import KubeClient
from kdesched.kube.transport import ReadRetry
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import Trigger, parse_node_event
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings

from tests.builders import node_obj, pod_obj
from tests.fakeapi import ACT_THEN_DROP, FakeApiServer, Fault
from tests.reactor.policies import default_like_policy

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
READY = [{"type": "Ready", "status": "True"}]
FAST_READS = ReadRetry(max_attempts=2, initial_backoff_seconds=0.05, max_backoff_seconds=0.05, max_total_seconds=2)
FAST_EVICT = RetrySettings(max_attempts=2, initial_backoff_seconds=0.05, max_backoff_seconds=0.05)


def reactor(client: KubeClient, identity: str) -> Reactor:
    block = {"settleSeconds": 0.05, "leaseWaitSeconds": 2}
    policy = default_like_policy(kdesched=block)
    return Reactor(policy, parse_settings(block, policy=policy, env={}), client, identity=identity,
                   executor_factory=lambda dry: LiveExecutor(client, FAST_EVICT, events=False))


@contextmanager
def six_replicas_on_tainted_nodes() -> Iterator[tuple[FakeApiServer, Any]]:
    """A fake API server with web's 6 replicas, one on each of the tainted p0..p5, and 2 spare nodes;
    yields it and ``processes(**client_settings_of_a)``, which makes two reactors (proc-a, proc-b), each
    with its own client, stopped with their clients at the end."""
    with FakeApiServer() as fake:
        fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdesched"}})
        fake.add(*[node_obj(f"p{i}", taints=[TAINT]) for i in range(6)], *[node_obj(f"s{i}") for i in range(2)])
        fake.add(*[web(f"web-7d9f8-{i}", f"p{i}") for i in range(6)])
        made: list[tuple[Reactor, KubeClient]] = []

        def processes(**a_kw: Any) -> tuple[Reactor, Reactor]:
            a_client, b_client = KubeClient.for_host(fake.url, **a_kw), KubeClient.for_host(fake.url)
            made.extend([(reactor(a_client, "proc-a"), a_client), (reactor(b_client, "proc-b"), b_client)])
            return made[0][0], made[1][0]

        try:
            yield fake, processes
        finally:
            for r, client in made:
                r.stop.set()
                r.continuations.cancel_all()
                client.close()


def replicas_gone(fake: FakeApiServer) -> list[str]:
    return [f"web-7d9f8-{i}" for i in range(6) if fake.get("Pod", f"web-7d9f8-{i}", "default") is None]


def web(name: str, node: str) -> dict[str, Any]:
    return pod_obj(name, node, owner_name="web-7d9f8", labels={"app": "web", "pod-template-hash": "7d9f8"},
                   conditions=READY)


def test_a_landed_eviction_whose_answer_was_lost_keeps_its_admission() -> None:
    with six_replicas_on_tainted_nodes() as (fake, processes):
        # the API server carries out the first eviction but its answer is lost; for a few seconds
        # after, pod requests fail (an API server restart, an etcd leader election)
        fake.script_eviction("default/web-7d9f8-0", [ACT_THEN_DROP, Fault(code=503)])
        fake.script("GET", "/api/v1/namespaces/default/pods/web-7d9f8-0", [503, 503])
        a, b = processes(read_retry=FAST_READS)
        out_a = a.node_event(Trigger(ev.TAINTS_CHANGED, "e-p0"), parse_node_event({"node": "p0"}))
        assert fake.get("Pod", "web-7d9f8-0", "default") is None, "the first eviction landed"
        assert [(e["pod"], e["result"], e.get("cause")) for e in out_a["evictions"]] == [
            ("web-7d9f8-0", "failed", "unconfirmed")]
        # another process (the same taint event of the maintenance, on p1) a moment later
        out_b = b.node_event(Trigger(ev.TAINTS_CHANGED, "e-p1"), parse_node_event({"node": "p1"}))
        gone = replicas_gone(fake)
        assert len(gone) <= 1, (
            f"{len(gone)} of 6 replicas evicted ({gone}) with maxUnavailable 1: process A reported "
            f"{[(e['pod'], e['result'], e.get('cause')) for e in out_a['evictions']]} and took its admission back; "
            f"process B then got {[(e['pod'], e['result']) for e in out_b['evictions']]}")


def test_an_eviction_a_gateway_timed_out_keeps_its_admission_while_it_can_still_land() -> None:
    """Both attempts answered 504 by a gateway, the pod read back still there: the API server may
    still be carrying the first attempt out (its ?timeout= runs to the admission's deadline). The
    admission is kept (``failed``/unconfirmed), so another process admits no second replica before
    the first eviction lands (review J, finding 3: it was taken back at once)."""
    with six_replicas_on_tainted_nodes() as (fake, processes):
        gateway = Fault(code=504, message="gateway timeout: upstream did not answer in time")
        fake.script_eviction("default/web-7d9f8-0", [gateway, gateway])
        a, b = processes()
        out_a = a.node_event(Trigger(ev.TAINTS_CHANGED, "e-p0"), parse_node_event({"node": "p0"}))
        assert [(e["pod"], e["result"], e.get("cause")) for e in out_a["evictions"]] == [
            ("web-7d9f8-0", "failed", "unconfirmed")]
        out_b = b.node_event(Trigger(ev.TAINTS_CHANGED, "e-p1"), parse_node_event({"node": "p1"}))
        fake.delete("Pod", "web-7d9f8-0", "default")  # the first attempt lands after all
        gone = replicas_gone(fake)
        assert len(gone) <= 1, (
            f"{len(gone)} of 6 replicas evicted ({gone}) with maxUnavailable 1: process B got "
            f"{[(e['pod'], e['result']) for e in out_b['evictions']]}")

"""The sweep (PingSource ``dev.knative.sources.ping``) honours ``data.dryRun`` as
knative/base/pingsource.yaml documents it; other data is refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.kube.client import KubeClient
from kdesched.reactor.events import routing as ev
from kdesched.reactor.events.requests import RequestError, RunRequest, Trigger, parse_sweep_data
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings
from kdesched_functions import FUNCTIONS

from tests.builders import node_obj, pod_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request, post, reply_event
from tests.reactor.policies import default_like_policy

TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def make(kube: KubeClient, **block: Any) -> Reactor:
    block = {"leaseWaitSeconds": 0.5, **block}
    policy = default_like_policy(kdesched=block)
    return Reactor(policy, parse_settings(block, policy=policy, env={}), kube, identity="sweep-test")


def evicted(fake: FakeApiServer) -> list[str]:
    return [r.path.split("/")[-2] for r in fake.requests("POST") if r.path.endswith("/eviction")]


@pytest.fixture
def tainted(fake_api: FakeApiServer) -> FakeApiServer:
    fake_api.add(node_obj("n1", taints=[TAINT]), node_obj("n2"), node_obj("n3"))
    fake_api.add(pod_obj("intolerant", "n1", owner_name="web"))
    return fake_api


def test_ping_dry_run_true_evicts_nothing_and_false_is_a_real_run(tainted: FakeApiServer, kube: KubeClient) -> None:
    c = FUNCTIONS["manual"].create_app(reactor=make(kube)).test_client()
    resp = post(c, *ce_request(ev.PING, {"dryRun": True}, source="/apis/v1/namespaces/kdesched/pingsources/s"))
    data = reply_event(resp).get_data()
    assert resp.status_code == 200 and data["dryRun"] is True and [e["result"] for e in data["evictions"]] == ["dry-run"]
    assert evicted(tainted) == []
    resp = post(c, *ce_request(ev.PING, {"dryRun": False}, source="/apis/v1/namespaces/kdesched/pingsources/s"))
    data = reply_event(resp).get_data()
    assert data["dryRun"] is False and evicted(tainted) == ["intolerant"]


def test_ping_false_cannot_override_a_dry_run_deployment(tainted: FakeApiServer, kube: KubeClient) -> None:
    out = make(kube, dryRun=True).run_requested(Trigger(ev.PING, "p1"), parse_sweep_data({"dryRun": False}))
    assert out["dryRun"] is True and evicted(tainted) == []


@pytest.mark.parametrize("data,field", [({"dryRun": "yes"}, "data.dryRun"), ({"strategies": []}, "data.strategies"),
                                        ([1], "data")])
def test_bad_sweep_data_names_the_field(data: Any, field: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_sweep_data(data)
    assert err.value.field == field


def test_no_data_is_a_sweep_of_the_whole_policy() -> None:
    assert parse_sweep_data(None) == parse_sweep_data("") == parse_sweep_data({}) == RunRequest()

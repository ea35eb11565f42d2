"""``KDESCHED_CACHE=1``: a node function keeps a watch cache and plans from it (for ``min-scale: 1``
deployments of big clusters); unset, it LISTs per event as before; a bad value is a start-up
error naming the variable."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kdesched.evictor.ledger import workload_key
from kdesched.kube.cache import ClusterCache
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ConfigError
from kdesched.model.records import Pod
from kdesched.reactor.events import routing as ev
from kdesched.reactor.io.loaders import CACHE_NOTE
from kdesched.reactor.run.runner import Reactor
from kdesched.reactor.run.settings import parse_settings
from kdesched_functions import FUNCTIONS
from kdesched_functions.runtime import CACHE_ENV, cache_enabled

from tests.builders import pod_obj
from tests.fakeapi import FakeApiServer
from tests.functions.helpers import ce_request, post, reply_event
from tests.functions.test_functions import TAINT, cluster
from tests.reactor.policies import default_like_policy


def taints_app(kube: KubeClient) -> object:
    block = {"settleSeconds": 0.02, "leaseWaitSeconds": 0.1}
    policy = default_like_policy(kdesched=block)
    return FUNCTIONS["taints"].create_app(policy=policy, settings=parse_settings(block, policy=policy, env={}),
                                          client=kube).test_client()


def synced_taints_app(kube: KubeClient) -> object:
    """The taints function with ``KDESCHED_CACHE=1``, once /readyz says its watch cache is synced."""
    c = taints_app(kube)
    deadline = time.monotonic() + 15
    while "watch cache synced" not in (reason := c.get("/readyz").get_json()["reason"]):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, reason
        time.sleep(0.02)
    return c


def taint_event(c: object) -> dict[str, object]:
    resp = post(c, *ce_request(ev.TAINTS_CHANGED, {"node": "n1", "before": {"taints": []},
                                                   "after": {"taints": [TAINT]}}))
    assert resp.status_code == 200
    data: dict[str, object] = reply_event(resp).get_data()
    return data


@pytest.fixture
def caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ClusterCache]]:
    """Every cache a function starts here is closed after the test."""
    started: list[ClusterCache] = []
    original = ClusterCache.start

    def start(self: ClusterCache) -> ClusterCache:
        started.append(self)
        return original(self)

    monkeypatch.setattr(ClusterCache, "start", start)
    yield started
    for cache in started:
        cache.close()


def test_with_the_switch_the_function_plans_from_its_cache(fake_api: FakeApiServer, kube: KubeClient,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caches: list[ClusterCache]) -> None:
    cluster(fake_api)
    monkeypatch.setenv(CACHE_ENV, "1")
    c = synced_taints_app(kube)
    fake_api.clear_journal()
    data = taint_event(c)
    assert [e["pod"] for e in data["evictions"]] == ["intolerant"]  # type: ignore[index, union-attr]
    assert CACHE_NOTE in data["notes"]  # type: ignore[operator]
    assert not [r for r in fake_api.requests("GET") if r.path in ("/api/v1/pods", "/api/v1/nodes")
                and "watch" not in r.query]
    assert len(caches) == 1 and caches[0].kinds == ("Node", "Pod", "PodDisruptionBudget")


def test_without_it_the_function_lists_per_event(fake_api: FakeApiServer, kube: KubeClient,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cluster(fake_api)
    monkeypatch.delenv(CACHE_ENV, raising=False)
    c = taints_app(kube)
    data = taint_event(c)
    assert [e["pod"] for e in data["evictions"]] == ["intolerant"]  # type: ignore[index, union-attr]
    assert CACHE_NOTE not in data["notes"]  # type: ignore[operator]
    assert "watch cache" not in c.get("/readyz").get_json()["reason"]  # type: ignore[attr-defined]


def test_a_bad_value_names_the_variable() -> None:
    assert cache_enabled({CACHE_ENV: "True"}) and not cache_enabled({}) and not cache_enabled({CACHE_ENV: "0"})
    with pytest.raises(ConfigError, match=r"\$KDESCHED_CACHE: must be 1/true or 0/false, got 'sometimes'"):
        cache_enabled({CACHE_ENV: "sometimes"})


def test_with_the_switch_a_replacement_turning_ready_wakes_the_functions_paced_moves(
        fake_api: FakeApiServer, kube: KubeClient, monkeypatch: pytest.MonkeyPatch,
        caches: list[ClusterCache]) -> None:
    """As in serve: the function's cache reports a pod turning Ready to its reactor, which starts
    again a paced move of that workload whose repeats had timed out (kdesched.reactor.run.continuation)."""
    cluster(fake_api)
    fake_api.add(pod_obj("web-new", "n2", owner_name="web", phase="Pending"))
    monkeypatch.setenv(CACHE_ENV, "1")
    synced_taints_app(kube)  # its reactor lives on in the cache's Ready hook
    (cache,) = caches
    new = fake_api.get("Pod", "web-new", "default")
    assert new is not None
    key = workload_key(Pod.from_api(new))
    (hook,) = cache.ready_hooks.hooks
    reactor = hook.__self__  # type: ignore[attr-defined]
    assert isinstance(reactor, Reactor)
    continuations = reactor.continuations
    scope = "node:n1:RemovePodsViolatingNodeTaints"
    continuations.run = lambda s: None  # the revived repeat itself is not what is shown here
    now = [0.0]
    continuations.clock = lambda: now[0]
    # a move of the workload whose repeats timed out (its replacement was slow)
    continuations.after_run(scope, held={key}, evicted={key})
    now[0] = max(continuations.timeout_seconds, continuations.longest) + 1  # nothing moved since
    assert "no progress" in continuations.after_run(scope, held={key}, evicted=set())
    assert continuations.dormant() == {scope: frozenset({key})}
    new["status"].update(phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    fake_api.update(new)
    deadline = time.monotonic() + 10
    while scope not in continuations.scheduled():
        assert time.monotonic() < deadline, continuations.dormant()
        time.sleep(0.02)
    assert continuations.dormant() == {}
    continuations.cancel_all()

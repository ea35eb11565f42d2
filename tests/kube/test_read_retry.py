"""Reads retried as client-go retries them, and the one transient/deterministic rule.

Covers, against the fake API server with scripted faults and an injected sleep: each LIST page
and GET retried after 429 (Retry-After honoured, capped), 502/503/504, a plain 500, a 5xx with
Retry-After, a dropped connection and a read timeout; not after 403/404/400/501; the total
budget and the attempt bound; a LIST whose continue token expired starting over; retries taking
rate-limit tokens; the rule table of :func:`is_transient` / :func:`cause_of` for reads and
evictions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kdesched.kube.client import NO_READ_RETRY, KubeClient, ReadRetry
from kdesched.kube.errors import (
    Forbidden,
    NotFound,
    ServerError,
    TooManyRequests,
    Unavailable,
    cause_of,
    error_from_response,
    is_pdb_refusal,
    is_transient,
)

from tests.builders import node_obj
from tests.fakeapi import DROP, PDB_MESSAGE, FakeApiServer, Fault

NODES = "/api/v1/nodes"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(fake_api: FakeApiServer, sleeps: Sleeps) -> Iterator[KubeClient]:
    c = KubeClient.for_host(fake_api.url, sleep=sleeps, request_timeout=2.0)
    try:
        yield c
    finally:
        c.close()


@pytest.mark.parametrize(("script", "retries"), [
    ([429], 1), ([(429, 2)], 1), ([502], 1), ([503], 1), ([504], 1), ([500], 1), ([(500, 1)], 1),
    # urllib3 itself re-sends a GET once after a dropped connection (config.TRANSPORT_RETRIES: a
    # kept-alive connection the server closed); the second drop in a row is kdesched's to retry
    ([DROP, DROP], 1), ([DROP, DROP, DROP, DROP], 2),
    ([Fault(delay=3.0), Fault(delay=3.0)], 1),  # a read timeout (2 s here) is a dropped connection
    ([503, 429, DROP, DROP, 500], 4),
], ids=str)
def test_a_list_page_is_retried_after_transient_answers(fake_api: FakeApiServer, client: KubeClient,
                                                        sleeps: Sleeps, script: list[Any], retries: int) -> None:
    fake_api.add(*(node_obj(f"n{i}") for i in range(3)))
    fake_api.script("GET", NODES, script)
    names = [n["metadata"]["name"] for n in client.list_raw("Node").items]
    assert names == ["n0", "n1", "n2"]
    assert len(sleeps) == retries == client.read_retries
    assert len(fake_api.requests("GET", NODES)) == len(script) + 1


def test_retry_after_is_honoured_and_capped(fake_api: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    fake_api.add(node_obj("n"))
    fake_api.script("GET", NODES, [(429, 3), (503, 600)])
    client.list_raw("Node")
    assert sleeps == [3.0, ReadRetry().max_retry_after_seconds]


def test_backoff_grows_with_jitter_and_stops_at_the_attempt_bound(fake_api: FakeApiServer,
                                                                  sleeps: Sleeps) -> None:
    retry = ReadRetry(max_attempts=4, initial_backoff_seconds=0.5, max_backoff_seconds=2.0)
    client = KubeClient.for_host(fake_api.url, sleep=sleeps, read_retry=retry)
    fake_api.script("GET", NODES, [503] * 10)
    with pytest.raises(ServerError):
        client.list_raw("Node")
    assert len(fake_api.requests("GET", NODES)) == 4 and len(sleeps) == 3
    assert all(0.5 <= s <= 2.0 for s in sleeps) and sleeps[0] < 1.0 + 1e-9


def test_the_total_budget_bounds_a_read(fake_api: FakeApiServer, sleeps: Sleeps) -> None:
    client = KubeClient.for_host(fake_api.url, sleep=sleeps, read_retry=ReadRetry(max_attempts=100,
                                                                                  max_total_seconds=12))
    fake_api.script("GET", NODES, [(429, 5)] * 100)
    with pytest.raises(TooManyRequests):
        client.list_raw("Node")
    assert sum(sleeps) == pytest.approx(12, abs=0.01) and len(sleeps) == 3


@pytest.mark.parametrize(("code", "error"), [(403, Forbidden), (400, None), (501, ServerError), (404, NotFound)])
def test_deterministic_answers_are_not_retried(fake_api: FakeApiServer, client: KubeClient, sleeps: Sleeps,
                                               code: int, error: type | None) -> None:
    fake_api.script("GET", NODES, [code])
    with pytest.raises(error or Exception):
        client.list_raw("Node")
    assert sleeps == [] and len(fake_api.requests("GET", NODES)) == 1


def test_a_get_is_retried_and_404_is_none(fake_api: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    fake_api.add(node_obj("n1"))
    fake_api.script("GET", f"{NODES}/n1", [503, DROP, DROP])
    obj = client.get_raw("Node", "n1")
    assert obj is not None and obj["metadata"]["name"] == "n1" and len(sleeps) == 2
    assert client.get_raw("Node", "nope") is None and len(sleeps) == 2


def test_a_caller_can_bound_one_read(fake_api: FakeApiServer, client: KubeClient, sleeps: Sleeps) -> None:
    """A Lease read passes its own bounds (its renew deadline), not the client's minute."""
    fake_api.script("GET", f"{NODES}/n1", [503, 503, 503])
    with pytest.raises(ServerError):
        client.get_raw("Node", "n1", retry=ReadRetry(max_attempts=2))
    assert len(sleeps) == 1
    with pytest.raises(ServerError):
        client.get_raw("Node", "n1", retry=NO_READ_RETRY)
    assert len(sleeps) == 1


def test_each_page_is_retried_on_its_own(fake_api: FakeApiServer, client: KubeClient, sleeps: Sleeps,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault on page 2 retries page 2 with its continue token, not the whole list."""
    fake_api.add(*(node_obj(f"n{i}") for i in range(5)))
    original = fake_api.handle
    failed: list[str] = []

    def fail_second_page_once(method: str, path: str, query: dict[str, str], body: object,
                              headers: dict[str, str]) -> tuple[int, object]:
        if query.get("continue") and not failed:
            failed.append(query["continue"])
            fake_api.script("GET", NODES, [503])
        return original(method, path, query, body, headers)

    monkeypatch.setattr(fake_api, "handle", fail_second_page_once)
    names = [n["metadata"]["name"] for n in client.list_raw("Node", page_size=2).items]
    assert names == [f"n{i}" for i in range(5)]
    continued = [r.query.get("continue") for r in fake_api.requests("GET", NODES)]
    assert continued.count(failed[0]) == 2  # the failed page was asked again with the same token
    assert continued[0] is None and continued.count(None) == 1


def test_an_expired_continue_token_starts_the_list_over(fake_api: FakeApiServer, client: KubeClient,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_api.add(*(node_obj(f"n{i}") for i in range(4)))
    original = fake_api.handle
    compactions: list[int] = []

    def compact_after_the_first_page_once(method: str, path: str, query: dict[str, str], body: object,
                                          headers: dict[str, str]) -> tuple[int, object]:
        result = original(method, path, query, body, headers)
        if not compactions:
            compactions.append(fake_api.rv)
            fake_api.add(node_obj("late"))
            fake_api.compact()
        return result

    monkeypatch.setattr(fake_api, "handle", compact_after_the_first_page_once)
    names = [n["metadata"]["name"] for n in client.list_raw("Node", page_size=2).items]
    assert names == ["late", "n0", "n1", "n2", "n3"]  # one consistent list from the new start
    tokens = [r.query.get("continue") for r in fake_api.requests("GET", NODES)]
    assert tokens[0] is None and tokens[1] is not None and tokens[2] is None  # 410, then from the first page


def test_retries_take_rate_limit_tokens(fake_api: FakeApiServer, client: KubeClient) -> None:
    fake_api.script("GET", NODES, [503, 503])
    client.list_raw("Node")
    assert client.stats.requests == 3  # every attempt is a request, counted and rate limited


def test_the_watch_cache_sibling_keeps_the_read_rule(fake_api: FakeApiServer, client: KubeClient,
                                                     sleeps: Sleeps) -> None:
    fake_api.script("GET", NODES, [503])
    client.sibling().list_raw("Node")
    assert len(sleeps) == 1


def test_connection_refused_fails_a_read_at_once(sleeps: Sleeps) -> None:
    """client-go retries a GET whose connection was reset, not one that could not connect: a run
    against a wrong address says so at once."""
    client = KubeClient.for_host("http://127.0.0.1:9", sleep=sleeps)
    with pytest.raises(Unavailable, match="refused") as info:
        client.list_raw("Node")
    assert sleeps == [] and info.value.maybe_sent is False


# -- the rule, as a table ---------------------------------------------------------------------------


def err(code: int, message: str = "m", *, retry_after: str | None = None, causes: list[Any] | None = None) -> Any:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}
    if causes is not None:
        body["details"] = {"causes": causes}
    return error_from_response(code, "", json.dumps(body).encode(), {"Retry-After": retry_after} if retry_after else {})


PDB_CAUSES = [{"reason": "DisruptionBudget", "message": "needs more healthy pods"}]


@pytest.mark.parametrize(("error", "read", "eviction", "cause"), [
    (err(429), True, True, "throttled"),
    (err(429, retry_after="1"), True, True, "throttled"),
    (err(429, "x", causes=PDB_CAUSES), False, False, "disruption-budget"),
    (err(429, PDB_MESSAGE), False, False, "disruption-budget"),
    (err(502), True, True, "server-error"),
    (err(503), True, True, "server-error"),
    (err(504), True, True, "server-error"),
    (err(500), True, False, "server-error"),
    (err(500, retry_after="2"), True, True, "server-error"),
    (err(500, "etcdserver: leader changed"), True, True, "server-error"),
    (err(500, "This pod has more than one PodDisruptionBudget"), True, False, "server-error"),
    (err(501), False, False, "server-error"),
    (err(501, retry_after="1"), False, False, "server-error"),
    (err(505), False, False, "server-error"),
    (err(505, retry_after="1"), True, True, "server-error"),
    (err(400), False, False, "rejected"),
    (err(403), False, False, "rejected"),
    (err(422), False, False, "rejected"),
    (err(404), False, False, "not-found"),
    (err(409), False, False, "conflict"),
    (err(410), False, False, "gone"),
    (Unavailable("connection lost: reset", maybe_sent=True), True, True, "connection"),
    (Unavailable("cannot connect: refused", maybe_sent=False), False, True, "connection"),
], ids=lambda v: str(v)[:40] if not isinstance(v, bool) else str(v))
def test_the_transient_rule(error: Any, read: bool, eviction: bool, cause: str) -> None:
    assert is_transient(error, read=True) is read
    assert is_transient(error, read=False) is eviction
    assert cause_of(error) == cause
    assert is_pdb_refusal(error) is (cause == "disruption-budget")

"""Shared fixtures: a fresh fake API server per test and a KubeClient pointed at it.

The fake runs on 127.0.0.1 with a random port (tests/fakeapi.py); tests talk to it through the
real ``kubernetes`` client, so paths, query strings and error bodies are exercised for real.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kdesched.kube.client import KubeClient

from tests import threadguard
from tests.fakeapi import FakeApiServer
from tests.reactor.reactors import STARTED
from tests.threadguard import REAL_TIERS, alive, describe, left_behind


@pytest.fixture(autouse=True)
def _no_thread_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Error a test that leaves a thread running (tests/threadguard.py). Set up before, so torn
    down after, the test's other function-scoped fixtures: the threads they stop are not counted;
    those of wider-scoped fixtures were there before it."""
    if any(request.node.get_closest_marker(tier) for tier in REAL_TIERS):
        yield
        return
    before = alive()
    yield
    left = left_behind(before, wait=threadguard.WAIT_SECONDS)
    if left:
        pytest.fail("the test left a thread running (stop it in the test or its fixture, or allow it "
                    "in tests/threadguard.py with a reason): " + "; ".join(describe(t) for t in left),
                    pytrace=False)


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Undo what an in-process command's ``setup_logging`` did to the root logger: its handler
    writes to the ``sys.stderr`` pytest captured for that test, which is closed afterwards, and a
    thread that outlives the test (a watch, a server) then logged "--- Logging error ---" into a
    later test's output. pytest's own handlers are subclasses and are left alone."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop every reactor a test made (tests.reactor.reactors.STARTED) before any fixture is torn
    down: their paced repeats and continuations run on timers, which must neither outlive the test
    nor call its fake API server while it goes."""
    while STARTED:
        r = STARTED.pop()
        r.stop.set()
        r.continuations.cancel_all()
    return (yield)


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(fake_api: FakeApiServer) -> Iterator[KubeClient]:
    client = KubeClient.for_host(fake_api.url)
    try:
        yield client
    finally:
        client.close()

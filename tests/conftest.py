"""Shared fixtures: a fresh fake API server per test and a KubeClient pointed at it.

The fake runs on 127.0.0.1 with a random port (tests/fakeapi.py); tests talk to it through the
real ``kubernetes`` client, so paths, query strings and error bodies are exercised for real.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kdesched.kube.client import KubeClient

from tests.fakeapi import FakeApiServer


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

"""Fixtures shared by the evictor's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kdesched.kube.client import ClientLimits, KubeClient

from tests.fakeapi import FakeApiServer


@pytest.fixture
def wide(fake_api: FakeApiServer) -> Iterator[KubeClient]:
    """A client sized for 8 evictions in flight, rate limit out of the way."""
    client = KubeClient.for_host(fake_api.url, limits=ClientLimits(qps=10_000, burst=10_000, max_concurrent_evictions=8))
    try:
        yield client
    finally:
        client.close()

"""Shared fixtures of the reactor tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reactor.reactors import STARTED


@pytest.fixture(autouse=True)
def _stop_reactors() -> Iterator[None]:
    """Paced repeats run on timers: stop every reactor a test made (tests.reactor.reactors.STARTED)
    before its fake API server goes."""
    yield
    while STARTED:
        r = STARTED.pop()
        r.stop.set()
        r.continuations.cancel_all()

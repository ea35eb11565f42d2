"""Shared fixtures of the kube tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.promstub import Answer, Stub


@pytest.fixture
def stub() -> Iterator[Callable[[Answer], Stub]]:
    """``stub(answer)`` starts a stub Prometheus (tests/promstub.py); each is stopped after the test."""
    made: list[Stub] = []

    def make(answer: Answer) -> Stub:
        made.append(Stub(answer))
        return made[-1]

    yield make
    for s in made:
        s.stop()

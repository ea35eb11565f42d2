"""Reactors a test started, stopped after it (``pytest_runtest_teardown`` in tests/conftest.py, before
the test's fixtures go): their paced repeats and continuations run on timers, which must not
outlive the test or its fake API server."""

from __future__ import annotations

from kdesched.reactor.run.runner import Reactor

STARTED: list[Reactor] = []

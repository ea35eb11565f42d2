"""Reactors a test started, stopped after it (tests/reactor/conftest.py): their paced repeats and
continuations run on timers, which must not outlive the test's fake API server."""

from __future__ import annotations

from kdesched.reactor.run.runner import Reactor

STARTED: list[Reactor] = []

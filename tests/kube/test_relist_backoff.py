"""The reflector's back-off keeps growing while the watch keeps failing, however long a LIST takes
(review L, finding 4).

Why: the back-off (client-go's) goes back to its first step when more than 2 minutes passed since
the previous step: the time between counted as healthy. Since every failed WATCH re-LISTs (184df19)
that time includes a whole LIST: a kind whose LIST takes over 2 minutes (150,000 pods from a
loaded API server) and whose WATCH always fails waited 0.8-1.6 s between LISTs, for ever: 28
full LISTs an hour instead of one every 30-60 s.

Covers (kdesched.kube.reflector): the time spent listing does not count towards the reset,
whether the LIST worked or failed; a watch that stayed open past the reset interval before it
failed still starts the back-off again (a fake clock, waits not slept).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

from kdesched.kube.client import ListResult
from kdesched.kube.errors import ServerError
from kdesched.kube.reflector import BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET_SECONDS, Backoff, ListWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowList:
    """Each LIST takes ``list_seconds`` (and fails, with ``list_fails``); each WATCH stays open
    ``watch_seconds`` and then is answered 500."""

    def __init__(self, clock: Clock, list_seconds: float, *, watch_seconds: float = 0.0,
                 list_fails: bool = False) -> None:
        self.clock, self.list_seconds, self.watch_seconds, self.list_fails = clock, list_seconds, watch_seconds, list_fails
        self.lists: list[float] = []

    def list_raw(self, kind: str, **_: Any) -> ListResult:
        self.lists.append(self.clock.now)
        self.clock.now += self.list_seconds
        if self.list_fails:
            raise ServerError(500, "Internal Server Error", "etcdserver: request timed out")
        return ListResult([], "42")

    def watch_raw(self, kind: str, **_: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        if not self.watch_seconds:
            raise ServerError(500, "Internal Server Error", "etcdserver: request timed out")

        def stream() -> Iterator[tuple[str, dict[str, Any]]]:
            yield "MODIFIED", {"metadata": {"name": "x", "resourceVersion": "43"}}
            self.clock.now += self.watch_seconds
            raise ServerError(500, "Internal Server Error", "etcdserver: request timed out")
        return stream()


def run_for(client: SlowList, clock: Clock, seconds: float) -> list[float]:
    """Run a ListWatch on ``clock`` for ``seconds``; the waits it made (random 0: each is its step)."""
    stop = threading.Event()
    waits: list[float] = []

    def wait(delay: float) -> bool:
        waits.append(delay)
        clock.now += delay
        if clock.now >= seconds:
            stop.set()
        return stop.is_set()

    backoff = Backoff(clock=clock, random=lambda: 0.0)
    ListWatch(client, "Pod", stop=stop, wait=wait, clock=clock, backoff=backoff).run()  # type: ignore[arg-type]
    return waits


def test_a_watch_that_keeps_failing_does_not_relist_back_to_back() -> None:
    """Review L's repro: every LIST takes 130 s, every WATCH fails at once."""
    clock = Clock()
    client = SlowList(clock, list_seconds=130.0)
    waits = run_for(client, clock, 3600)
    assert waits[:7] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, BACKOFF_MAX], waits
    assert set(waits[6:]) == {BACKOFF_MAX}, (
        f"{len(client.lists)} full LISTs in an hour; the waits between them: {waits}")
    # six LISTs while the step grows, then one per LIST and a wait at the cap (review L: 28)
    assert len(client.lists) <= 6 + math.ceil((3600 - 6 * 130) / (130 + BACKOFF_MAX))


def test_a_list_that_keeps_failing_slowly_does_not_reset_the_backoff_either() -> None:
    clock = Clock()
    client = SlowList(clock, list_seconds=130.0, list_fails=True)
    waits = run_for(client, clock, 3600)
    assert set(waits[6:]) == {BACKOFF_MAX}, waits


def test_a_watch_that_was_healthy_past_the_reset_interval_starts_the_backoff_again() -> None:
    """A watch open (with events) for 3 minutes before it fails: the time since the LIST was
    healthy, so the step goes back to the first, as client-go's."""
    clock = Clock()
    client = SlowList(clock, list_seconds=130.0, watch_seconds=BACKOFF_RESET_SECONDS + 60)
    waits = run_for(client, clock, 3600)
    assert set(waits) == {BACKOFF_INITIAL}, waits


def test_time_spent_listing_does_not_count_towards_the_reset() -> None:
    clock = Clock()
    backoff = Backoff(clock=clock, random=lambda: 0.0)
    assert [backoff.next_delay() for _ in range(3)] == [0.8, 1.6, 3.2]
    clock.now += 200  # a LIST
    backoff.unhealthy_until_now()
    clock.now += 100  # a watch, open 100 s
    assert backoff.next_delay() == 6.4
    clock.now += BACKOFF_RESET_SECONDS + 1  # healthy past the reset interval
    assert backoff.next_delay() == 0.8

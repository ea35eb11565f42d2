"""The guard of tests/conftest.py (tests/threadguard.py): a test that leaves a thread running errors
at teardown, naming the thread and its target; a thread that ends within the wait, one that was
there before and an allowed one are let be."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests import threadguard
from tests.threadguard import alive, describe, left_behind

pytest_plugins = ["pytester"]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _start(name: str, release: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=release.wait, name=name, daemon=True)
    thread.start()
    return thread


def test_a_thread_still_running_is_named_with_its_target_and_where_it_is(release: threading.Event) -> None:
    before = alive()
    thread = _start("left-behind", release)
    assert left_behind(before, wait=0.05) == [thread]
    text = describe(thread)
    assert text.startswith("'left-behind' (target threading.Event.wait, daemon, now at ")
    assert "threading.py" in text
    release.set()
    thread.join(5)


def test_a_timer_is_named_with_its_function(release: threading.Event) -> None:
    before = alive()
    timer = threading.Timer(30, release.set)
    timer.start()
    try:
        assert "target threading.Event.set" in describe(left_behind(before, wait=0.0)[0])
    finally:
        timer.cancel()
        timer.join(5)


def test_threads_that_end_within_the_wait_were_there_before_or_are_allowed_are_let_be(
        release: threading.Event) -> None:
    earlier = _start("earlier", release)
    before = alive()
    allowed = _start("kept-123", release)
    quick = threading.Timer(0.05, lambda: None)
    quick.start()
    assert left_behind(before, wait=2.0, allowed={r"kept-\d+": "shared by the session"}) == []
    assert not quick.is_alive() and earlier.is_alive() and allowed.is_alive()
    release.set()


def test_the_guard_errors_a_test_that_leaves_a_thread_and_passes_one_that_stops_it(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threadguard, "WAIT_SECONDS", 0.2)  # the leaking inner test waits no longer
    pytester.makeconftest("from tests.conftest import _no_thread_left_behind  # noqa: F401\n")
    pytester.makepyfile(test_inner="""
        import threading
        import pytest

        RELEASE = threading.Event()

        def test_leaves():
            threading.Thread(target=RELEASE.wait, name="inner-left", daemon=True).start()

        def test_stops():
            t = threading.Thread(target=RELEASE.wait, name="inner-stopped", daemon=True)
            t.start()
            RELEASE.set()
            t.join()
            RELEASE.clear()

        @pytest.mark.realk8s
        def test_real_tier_is_not_judged():
            threading.Thread(target=RELEASE.wait, name="inner-real", daemon=True).start()

        def test_zz_release():
            RELEASE.set()
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-o", "markers=realk8s: the real tier")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_leaves*",
                                 "*left a thread running*'inner-left' (target threading.Event.wait, daemon*"])
    assert "inner-stopped" not in result.stdout.str() and "inner-real" not in result.stdout.str()

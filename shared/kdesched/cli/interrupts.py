"""SIGINT (Ctrl-C) and SIGTERM while ``kdesched run`` evicts: stop starting evictions, then report.

Why: the operator presses Ctrl-C because the run is evicting what it should not, and a Job's pod
deleted or a CI step cancelled gets SIGTERM. Python's default (a KeyboardInterrupt wherever the main
thread is, or the process killed) would either cut an eviction off mid-request or, with evictions in
flight on worker threads, leave without a report of what was evicted. Within :class:`Interrupts`
the first signal only asks the run to stop: :meth:`Interrupts.reason` is the run's ``keep_going``
(kdesched.evictor.execute), so no eviction not yet started is sent (each is reported
``abandoned``), those in flight finish, and the command writes its report and exits
:attr:`Interrupts.exit_code` (128 + the signal's number, the shell's convention: 130, 143). A second
signal stops at once (KeyboardInterrupt: exit 130, no report; still nothing new is started).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any, Self

log = logging.getLogger("kdesched.cli")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Installs the handlers in the main thread for the ``with`` block and puts the previous back
    after it (elsewhere, e.g. a command run in-process on another thread, it installs nothing)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                if signal.getsignal(s) is signal.SIG_IGN:
                    continue  # (ignored at start, e.g. SIGINT of `kdesched run &` in a script: not for us)
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            log.warning("%s again: stopping now, without a report", signal.Signals(signum).name)
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s: stopping: no eviction not started yet is sent, those in flight finish, then the report "
                    "(%s again to stop at once)", self.name, self.name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def reason(self) -> str | None:
        """``keep_going``: None until a signal came, then why to stop."""
        return f"interrupted ({self.name})" if self.signum is not None else None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum if self.signum is not None else 0

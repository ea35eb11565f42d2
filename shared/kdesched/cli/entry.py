"""The ``kdesched`` console script and ``python -m kdesched``: the garbage collector paused, then the command.

Why a module of its own: the pause must come before the first heavy import (kdesched.cli.startup
says why), so this imports nothing else at the top; and kdesched.cli.startup stays a leaf that the
commands import to end the pause, with no import back up to them.
"""

from __future__ import annotations

from kdesched.cli import startup


def main() -> int:
    startup.pause()
    from kdesched.cli.main import main as run

    return run()

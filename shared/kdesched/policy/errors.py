"""The one error type of the policy layer: every problem of a policy file, found at once.

Why: an operator fixing a policy should see all of its mistakes in one go, each naming the
profile, the plugin and the field (``profile "cleanup" / plugin LowNodeUtilization:
thresholds.cpu: must be between 0 and 100, got 120``), not one traceback per attempt. The CLI
prints ``str(error)`` and exits 2.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def show_value(value: Any) -> str:
    """A value as an error message quotes it, in the policy's own terms (YAML): ``"x"``, ``null``,
    ``true``, ``3``."""
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


class PolicyError(ValueError):
    """A policy could not be loaded; ``errors`` holds every problem found, one message each."""

    def __init__(self, errors: Iterable[str], source: str = "") -> None:
        self.errors: list[str] = [str(e) for e in errors] or ["invalid policy"]
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        head = self.source or "policy"
        return head + ":\n" + "\n".join(f"  {message}" for message in self.errors)

    def __str__(self) -> str:
        return self.render()

    def with_source(self, source: str) -> PolicyError:
        """The same problems, attributed to ``source`` (a file name, or ``-`` for stdin)."""
        return PolicyError(self.errors, source)

"""Command-line values checked at the edge: numbers finite and in a documented range, addresses
that parse, and the range of every numeric flag written into its ``--help``.

Why: a flag value travels far before it is used. ``--sweep-interval inf`` reached the sweep
thread, which died of OverflowError in ``Event.wait`` while serve went on without a sweep;
``nan`` compared false with everything and silently disabled it; ``--host "not an address"``
failed at bind time with exit 1. Each value is checked once, where argparse reads it, so a bad one
is exit 2 naming the flag (argparse's ``argument --flag: ...``) before anything starts. A
:class:`NumberFlag` carries its own range, and :func:`document_ranges` appends it to the flag's
help, so the help, the check and docs/cli.md cannot drift apart.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from dataclasses import dataclass

_HOST_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?")


def _plain(value: float) -> str:
    """A bound as people write it: 604800, 0.001, 10,000 for big integers."""
    if float(value).is_integer():
        return f"{int(value):,}" if abs(value) >= 1_000_000 else str(int(value))
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class NumberFlag:
    """An argparse ``type``: an int or a finite float in ``[low, high]`` (``low`` excluded when
    ``above_low``). Its :attr:`range_text` goes into the flag's help."""

    kind: type[int | float]
    low: float
    high: float
    unit: str = ""
    above_low: bool = False
    note: str = ""

    @property
    def range_text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.above_low:
            text = f"more than {_plain(self.low)} and at most {_plain(self.high)}{unit}"
        else:
            text = f"{_plain(self.low)} to {_plain(self.high)}{unit}"
        return f"range: {text}" + (f", {self.note}" if self.note else "")

    def __call__(self, text: str) -> int | float:
        what = "a whole number" if self.kind is int else "a number"
        cleaned = text.strip().replace("_", "")
        if self.kind is int:
            cleaned = cleaned.replace(",", "")
        try:
            value: int | float = int(cleaned) if self.kind is int else float(cleaned)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} ({self.range_text}), got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number ({self.range_text}), got {text!r}")
        too_low = value <= self.low if self.above_low else value < self.low
        if too_low or value > self.high:
            raise argparse.ArgumentTypeError(f"out of range ({self.range_text}), got {text!r}")
        return value


def address(text: str) -> str:
    """A listen address: an IPv4 or IPv6 address (brackets allowed), or a host name (RFC 1123
    labels, at most 253 characters). Not resolved here: ``localhost`` and names in /etc/hosts are
    the usual ones."""
    value = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    name = value.removesuffix(".")
    labels = name.split(".")
    if value is not text or not name or len(name) > 253 or labels[-1].isdigit() or not all(
            len(label) <= 63 and _HOST_LABEL.fullmatch(label) for label in labels):
        raise argparse.ArgumentTypeError(f"must be an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name, "
                                         f"got {text!r}")
    return name


def document_ranges(parser: argparse.ArgumentParser) -> None:
    """Append each :class:`NumberFlag`'s range to its flag's help, in ``parser`` and all its
    subcommands (once; a help that already states it is left alone)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                document_ranges(sub)
        elif isinstance(action.type, NumberFlag) and action.help and action.type.range_text not in action.help:
            action.help = f"{action.help}; {action.type.range_text}"

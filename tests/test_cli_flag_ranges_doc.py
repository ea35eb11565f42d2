"""Every numeric flag's range, as the parser enforces it, is in docs/cli.md's ranges table ("Flags are
checked where they are read"): an operator who follows the table must not get an exit 2 the table does
not announce (``--drain-seconds 5400`` was documented as "a finite number >= 0" and refused above 3600)."""

from __future__ import annotations

import argparse
import re

import pytest
from kdesched.cli.flags import NumberFlag

from tests.deploy import REPO


def numeric_flags() -> list[tuple[str, str, NumberFlag]]:
    from kdesched.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for command, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action.type, NumberFlag) and action.option_strings:
                out.append((command, action.option_strings[-1], action.type))
    return out


def table_rows() -> list[str]:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("**Flags are checked where they are read**", 1)[1].split("\n\n", 2)[1]
    return [ln for ln in section.splitlines() if ln.startswith("| `")]


def shown(value: float) -> str:
    """The bound as the table may write it: 65535 or 65,535 (a regexp)."""
    plain = f"{value:g}" if value < 1e6 else str(int(value))
    return f"(?:{re.escape(plain)}|{re.escape(f'{int(value):,}')})"


def test_the_table_is_found_and_the_flags_are_found() -> None:
    assert len(table_rows()) >= 7 and len(numeric_flags()) >= 7


@pytest.mark.parametrize(("command", "option", "flag"), numeric_flags(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_numeric_flag_has_its_range_in_the_table(command: str, option: str, flag: NumberFlag) -> None:
    rows = [r for r in table_rows() if re.search(rf"`(\w+ )?{re.escape(option)}\b", r.split(" | ")[0])]
    assert rows, f"docs/cli.md's ranges table has no row for {command} {option} (the parser allows {flag.range_text})"
    cell = " ".join(r.split(" | ", 1)[1] for r in rows)
    assert re.search(rf"(?<![\d,.]){shown(flag.high)}(?![\d,])", cell), (
        f"{command} {option}: the parser allows {flag.range_text}; docs/cli.md says {cell!r}")

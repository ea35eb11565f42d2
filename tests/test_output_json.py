"""``dumps_indented`` writes exactly what ``json.dumps(indent=2)`` writes (the JSON report is a
contract, and its bytes must not change with the encoder): on report-shaped data, on every
awkward value (floats, escapes, non-ASCII, DEL, big ints, Enums, NaN, non-str keys) and on
random trees."""

from __future__ import annotations

import enum
import json
import random
import string
from typing import Any

import pytest
from kdesched.cli.output import dumps_indented


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


AWKWARD: list[Any] = [
    {}, [], (), {"a": []}, {"a": {}}, [[[]]],
    {"f": [1.5, 2e-07, 1.7e-05, 1e22, 1e300, -0.0, 0.0, 5e-324, 123456789.0, 0.1 + 0.2]},
    {"s": "".join(chr(i) for i in range(128))},
    {"s": "é ☃ \u2028 \U0001f600"}, {"é": 1}, {"k\x7f": "v"},
    {"big": 10**30, "neg": -(2**63), "edge": 2**64, "small": -(2**64)},
    {"e": Color.RED}, {"i": Level.HIGH}, {1: "int key"}, {None: 1}, {True: 1}, {1.5: 2},
    [float("nan")], [float("inf")], {"t": (1, (2.5, "x"), [])},
    {"bools": [True, False, None]},
]


@pytest.mark.parametrize("value", AWKWARD, ids=range(len(AWKWARD)))
def test_same_bytes_as_json_on_awkward_values(value: Any) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_unencodable_values_fail_as_json_does() -> None:
    with pytest.raises(TypeError):
        json.dumps({"x": object()}, indent=2)
    with pytest.raises(TypeError):
        dumps_indented({"x": object()})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(loop)


def _tree(rnd: random.Random, depth: int) -> Any:
    r = rnd.random()
    if depth > 4 or r < 0.35:
        return rnd.choice([
            rnd.random() * 10 ** rnd.randint(-30, 30), rnd.randint(-(2**70), 2**70), rnd.randint(-5, 5),
            "".join(rnd.choice(string.printable) for _ in range(rnd.randint(0, 6))), None, True, False, 0.0,
        ])
    if r < 0.7:
        return [_tree(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    return {"".join(rnd.choice(string.printable) for _ in range(3)): _tree(rnd, depth + 1)
            for _ in range(rnd.randint(0, 4))}


def test_same_bytes_as_json_on_random_trees() -> None:
    rnd = random.Random(12)
    for _ in range(2000):
        value = _tree(rnd, 0)
        assert dumps_indented(value) == json.dumps(value, indent=2)


def test_report_shape() -> None:
    rows = [{"namespace": "ns", "pod": f"p-{i}", "node": "n1", "attempts": 0, "wave": i % 3,
             "waitsFor": [f"ns/p-{i - 1}"] if i else []} for i in range(50)]
    report = {"dryRun": True, "clock": {"time": "2026-01-15T12:00:00+00:00", "from": "--now"}, "evictions": rows,
              "blocked": [], "summary": {"strategies": [{"seconds": 0.000123}, {"seconds": 1.5}],
                                         "durationSeconds": 12.345678, "notes": [], "podsPerNode": {"n1": {"before": 3}}}}
    assert dumps_indented(report) == json.dumps(report, indent=2)

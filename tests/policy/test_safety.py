"""kdesched.safety: parsing (every bad field named) and the one rule for when the defaults apply."""

from __future__ import annotations

import pytest
from kdesched.policy.safety import Path, SafetySettings, parse_safety


def test_defaults_depend_on_the_path() -> None:
    s = parse_safety(None, [])
    assert s == SafetySettings()
    assert s.resolve(Path.EVENT).enabled is True
    assert s.resolve(Path.PARITY).enabled is False
    assert "parity" in s.resolve(Path.PARITY).why


@pytest.mark.parametrize("enabled", [True, False])
def test_the_policy_wins_on_every_path(enabled: bool) -> None:
    s = parse_safety({"enabled": enabled}, [])
    assert {s.resolve(p).enabled for p in Path} == {enabled}
    assert "in the policy" in s.resolve(Path.EVENT).why


@pytest.mark.parametrize(("raw", "expected"), [(1, 1), (3, 3), ("25%", "25%"), ("100%", "100%"), ("07%", "7%")])
def test_max_unavailable_accepts_counts_and_percentages(raw: object, expected: object) -> None:
    errors: list[str] = []
    assert parse_safety({"maxUnavailable": raw}, errors).max_unavailable == expected
    assert errors == []


def test_every_bad_field_is_named_at_once() -> None:
    errors: list[str] = []
    parse_safety({"enabled": "yes", "maxUnavailable": 0, "replacementTimeoutSeconds": -1,
                  "controlPlaneTaints": "no", "typo": 1}, errors)
    assert len(errors) == 5
    for field in ("enabled", "maxUnavailable", "replacementTimeoutSeconds", "controlPlaneTaints", "typo"):
        assert any(f"kdesched.safety.{field}" in e for e in errors), field


@pytest.mark.parametrize("raw", [0, -1, "0%", "101%", "x%", "25", 1.5, True, None.__class__])
def test_max_unavailable_refuses_what_is_not_a_count_or_percentage(raw: object) -> None:
    errors: list[str] = []
    parse_safety({"maxUnavailable": raw}, errors)
    assert len(errors) == 1 and "maxUnavailable" in errors[0]


@pytest.mark.parametrize("raw", ["\u0663%", "\uff12\uff15%", "\u00b2%", "2\u00b2%"])
def test_max_unavailable_refuses_unicode_digits_naming_the_field(raw: str) -> None:
    errors: list[str] = []
    parse_safety({"maxUnavailable": raw}, errors)
    assert len(errors) == 1 and errors[0].startswith("kdesched.safety.maxUnavailable: must be an integer >= 1")

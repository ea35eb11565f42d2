"""Quantities parse, round and print as apimachinery's resource.Quantity does."""

from __future__ import annotations

from fractions import Fraction

import pytest
from kdesched.model.quantity import INT64_MAX, QuantityError, format_resource, parse_quantity, to_resource_int

F = Fraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", F(0)), ("1", F(1)), ("+1", F(1)), ("-1", F(-1)), ("007", F(7)),
        (".5", F(1, 2)), ("5.", F(5)), ("1.25", F(5, 4)), ("-0.5", F(-1, 2)),
        ("1n", F(1, 10**9)), ("1u", F(1, 10**6)), ("1m", F(1, 1000)), ("100m", F(1, 10)),
        ("1k", F(1000)), ("1M", F(10**6)), ("1G", F(10**9)), ("1T", F(10**12)), ("1P", F(10**15)),
        ("1E", F(10**18)),
        ("1Ki", F(1024)), ("1Mi", F(2**20)), ("1Gi", F(2**30)), ("1Ti", F(2**40)), ("1Pi", F(2**50)),
        ("1Ei", F(2**60)), ("1.5Gi", F(3 * 2**29)), (".5Ki", F(512)),
        ("1e3", F(1000)), ("1E3", F(1000)), ("1E-3", F(1, 1000)), ("12e+2", F(1200)), ("1.5e1", F(15)),
        ("0e0", F(0)),
        # ParseQuantity rounds a non-zero amount up to nano precision
        ("0.1n", F(1, 10**9)), ("-0.1n", F(-1, 10**9)), ("1.0000000001", F(10**9 + 1, 10**9)),
        # Quantity.UnmarshalJSON trims surrounding whitespace before parsing
        (" 5", F(5)), ("5m\n", F(5, 1000)),
        (3, F(3)), (0.25, F(1, 4)), (1e-10, F(1, 10**9)),
    ],
)
def test_parse_quantity(text: str | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", " ", "m", "Ki", ".", "+", "-", "1.2.3", "1Kb", "1ki", "1K", "1i", "5 m", "1 Gi", "1e", "1e+", "1e1.5",
     "1e3Ki", "0x10", "1_000", "--1", "1,5", "abc", "1e1001", "9" * 5000, "١"],
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, False, None, float("nan"), float("inf"), float("-inf"), [1], {"a": 1}])
def test_parse_quantity_rejects_non_quantities(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


def test_quantity_error_is_a_value_error_naming_the_input() -> None:
    with pytest.raises(ValueError, match="'1Kb' is not a quantity"):
        parse_quantity("1Kb")


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "1", 1000), ("cpu", "250m", 250), ("cpu", "0.1", 100), ("cpu", "1e-1", 100),
        ("cpu", "1n", 1), ("cpu", "0.0001", 1), ("cpu", "1001u", 2), ("cpu", "1.0005", 1001),
        ("cpu", 2, 2000), ("cpu", "0", 0),
        ("memory", "1.5", 2), ("memory", "1Gi", 2**30), ("memory", "100M", 10**8), ("memory", "1m", 1),
        ("memory", "0.5Ki", 512), ("memory", "129e6", 129_000_000),
        ("pods", "110", 110), ("nvidia.com/gpu", "1", 1), ("ephemeral-storage", "1e3", 1000),
    ],
)
def test_to_resource_int_rounds_up(resource: str, text: str | int, expected: int) -> None:
    assert to_resource_int(resource, text) == expected


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [
        ("cpu", 1000, "1"), ("cpu", 1500, "1500m"), ("cpu", 0, "0"), ("cpu", 1, "1m"), ("cpu", 64000, "64"),
        ("memory", 2**30, "1Gi"), ("memory", 3 * 2**20, "3Mi"), ("memory", 1024, "1Ki"), ("memory", 1000, "1000"),
        ("memory", 0, "0"), ("memory", 1536 * 2**20, "1536Mi"), ("ephemeral-storage", 2**31, "2Gi"),
        ("hugepages-2Mi", 2**21, "2Mi"), ("pods", 1024, "1024"), ("nvidia.com/gpu", 2, "2"),
    ],
)
def test_format_resource(resource: str, value: int, expected: str) -> None:
    assert format_resource(resource, value) == expected


@pytest.mark.parametrize(("resource", "text"), [("cpu", "1500m"), ("cpu", "3"), ("memory", "5Gi"), ("memory", "7Ki")])
def test_format_resource_round_trips(resource: str, text: str) -> None:
    value = to_resource_int(resource, text)
    assert to_resource_int(resource, format_resource(resource, value)) == value


@pytest.mark.parametrize("text", ["-5", "-1m", "-0.5Gi", "-1e3", -2])
def test_negative_amounts_are_refused_as_the_api_server_does(text: str | int) -> None:
    # kube-apiserver: "must be greater than or equal to 0" for requests, limits, overhead, capacity
    with pytest.raises(QuantityError, match="must be greater than or equal to 0"):
        to_resource_int("cpu", text)
    with pytest.raises(QuantityError, match="must be greater than or equal to 0"):
        to_resource_int("memory", text)


@pytest.mark.parametrize(("resource", "text"), [
    ("cpu", "1e400"), ("cpu", "9223372036854775807"), ("memory", "16Ei"), ("memory", "1e19"),
    ("pods", "99999999999999999999999999999999999999"),
])
def test_amounts_past_int64_are_capped_at_int64(resource: str, text: str) -> None:
    value = to_resource_int(resource, text)
    assert value == INT64_MAX
    assert float(value * 1000)  # a strategy's float arithmetic cannot overflow


def test_zero_and_the_largest_int64_amount_are_kept() -> None:
    assert to_resource_int("cpu", "0") == 0 and to_resource_int("cpu", "-0") == 0
    assert to_resource_int("memory", "9223372036854775807") == INT64_MAX
    assert to_resource_int("memory", "9223372036854775806") == INT64_MAX - 1

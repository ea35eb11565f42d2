"""Kubernetes resource quantities, parsed exactly as apimachinery's ``resource.Quantity`` does.

Why: requests decide every utilization threshold, and ``0.1``, ``100m``, ``1e-1`` and ``1Gi`` must
compare the way the scheduler compares them. Values are kept as exact fractions; the helpers round
*up* to integers as ``Quantity.Value()`` / ``MilliValue()`` do.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# <signedNumber><suffix>; the number may be "5", "5.", ".5" or "5.5".
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_CACHE: dict[str, Fraction] = {}
# Exponents past this are typos, not quantities; refusing them keeps "1e999999999" from building a
# billion-digit integer.
_MAX_EXPONENT = 1000
_NANO = 10**9
INT64_MAX = 2**63 - 1
"""The largest amount Kubernetes components compute with (``Quantity.Value()``/``MilliValue()``
are int64). The API server stores larger decimal quantities (``1e400`` is kept as ``10e399``:
checked against kube-apiserver v1.24) but nothing can use them, and it caps binary-SI amounts
(``16Ei``) at this value itself; kdesched caps every amount here, so such a pod simply
requests more than any node has, instead of overflowing float arithmetic in a strategy."""


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | float) -> Fraction:
    """Parse a quantity (``"500m"``, ``"1.5"``, ``"2Gi"``, ``"1e3"``, ``"100M"``, or a number)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        value = repr(value)  # "1.5", "1e-10": parsed (and rounded) like the string form
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    # Quantity.UnmarshalJSON trims surrounding whitespace before ParseQuantity; inner spaces fail.
    cached = _CACHE.get(value)
    if cached is not None:
        return cached
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 1.5, 2Gi, 1e3)")
    number, exponent, suffix = match.groups()
    try:  # int() refuses more than 4,300 digits: such a string is no quantity either
        result = Fraction(number)
        power = 0 if exponent is None else int(exponent[1:])
    except ValueError:
        raise QuantityError(f"{value[:40]!r}... is out of range") from None
    if exponent is not None:
        if abs(power) > _MAX_EXPONENT:
            raise QuantityError(f"{value!r} is out of range (exponent beyond +/-{_MAX_EXPONENT})")
        result *= Fraction(10) ** power
    elif suffix in _BINARY:
        result *= _BINARY[suffix]
    else:
        result *= _DECIMAL[suffix or ""]
    if (result * _NANO).denominator != 1:
        # ParseQuantity rounds a non-zero amount up (away from zero) to nano precision: "0.1n" is 1n.
        result = Fraction(ceil_int(result * _NANO), _NANO)
    if len(_CACHE) < 4096:
        _CACHE[value] = result
    return result


def ceil_int(value: Fraction) -> int:
    """Round up to an integer, away from zero, as ``Quantity.Value()`` does."""
    return math.ceil(value) if value >= 0 else -math.ceil(-value)


_INT_CACHE: dict[tuple[bool, str], int] = {}


def to_resource_int(resource: str, value: str | float) -> int:
    """The integer kdesched keeps for a resource: millicores for ``cpu``, whole units otherwise,
    capped at :data:`INT64_MAX`. A negative amount is a :class:`QuantityError`: the API server
    refuses every negative request, limit, overhead, capacity and allocatable
    ("must be greater than or equal to 0").

    A cluster repeats a few hundred request strings across 150,000 pods, so string results are
    memoized (bounded) to skip the exact-fraction arithmetic."""
    is_cpu = resource == "cpu"
    if isinstance(value, str):
        key = (is_cpu, value)
        hit = _INT_CACHE.get(key)
        if hit is not None:
            return hit
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"{value!r} must be greater than or equal to 0")
    result = min(ceil_int(q * 1000) if is_cpu else ceil_int(q), INT64_MAX)
    if isinstance(value, str) and len(_INT_CACHE) < 8192:
        _INT_CACHE[(is_cpu, value)] = result
    return result


def format_resource(resource: str, value: int) -> str:
    """Human form of :func:`to_resource_int` output, for tables and logs."""
    if resource == "cpu":
        return f"{value}m" if value % 1000 else str(value // 1000)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value and value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)

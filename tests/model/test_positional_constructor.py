"""``positional_constructor`` (the msgspec loader's fast way to build Pods) builds ordinary,
frozen records: the same class, fields, equality and immutability as the dataclass's own
``__init__``; it refuses classes whose layout it cannot reproduce."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from kdesched.model.records import OwnerRef, Pod, Toleration, new_pod, positional_constructor


def _values() -> tuple[object, ...]:
    when = datetime(2026, 1, 15, tzinfo=UTC)
    return ("ns", "p", "uid-1", "n1", "Running", {"app": "a"}, {}, (OwnerRef("ReplicaSet", "rs", "u", True),), 5,
            "", "Burstable", {"cpu": 100}, frozenset({"cpu"}), (Toleration("k", "Exists", "", ""),), {}, None, (),
            (), ("img",), (), (), (), (), "", when, when, None, True, "other-scheduler")


def test_builds_the_same_record_as_the_dataclass() -> None:
    fast, slow = new_pod(*_values()), Pod(*_values())
    assert type(fast) is Pod
    for f in dataclasses.fields(Pod):
        assert getattr(fast, f.name) == getattr(slow, f.name)
    assert fast.key == "ns/p" and fast.terminal is False and repr(fast) == repr(slow)
    assert fast != slow  # Pods compare by identity (eq=False), as before
    assert dataclasses.replace(fast, name="q").name == "q"


def test_the_record_stays_frozen() -> None:
    for pod in (new_pod(*_values()), Pod(*_values())):
        with pytest.raises(dataclasses.FrozenInstanceError):
            pod.name = "x"  # type: ignore[misc]
        with pytest.raises((AttributeError, TypeError)):  # no slot for it (CPython's frozen+slots
            pod.extra = 1  # type: ignore[attr-defined]  # __setattr__ raises TypeError here)


def test_every_field_is_required() -> None:
    with pytest.raises(TypeError):
        new_pod(*_values()[:-1])


@dataclasses.dataclass(frozen=True)
class _NoSlots:
    a: int


@dataclasses.dataclass(frozen=True, slots=True)
class _WithPostInit:
    a: int

    def __post_init__(self) -> None:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str = "x"


def test_refuses_what_it_cannot_reproduce() -> None:
    with pytest.raises(TypeError):
        positional_constructor(_NoSlots)
    with pytest.raises(TypeError):
        positional_constructor(_WithPostInit)
    build = positional_constructor(_Plain)
    assert build(1, "y") == _Plain(1, "y")
    assert type(build(1, "y")) is _Plain

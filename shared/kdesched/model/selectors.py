"""Label selectors: the API's ``LabelSelector`` objects and the string form ``a=b,c in (x,y),!d``.

Why: PDBs, anti-affinity terms, spread constraints, policy arguments and the top-level policy
``nodeSelector`` all select by labels; they must agree with apimachinery's semantics (a nil
selector matches nothing where the API says so, an empty one matches everything).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdesched.model.errors import ModelError

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# strconv.ParseInt(s, 10, 64): an optional sign and ASCII digits, nothing else (Python's int()
# would also take "1_0" and " 7 ", which are valid label values but not integers to Kubernetes).
_INT = re.compile(r"[+-]?[0-9]+")


def parse_int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it, or None."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None
NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key operator values`` requirement (label or node-selector form)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            if self.key not in labels or len(self.values) != 1:
                return False
            have, want = parse_int64(labels[self.key]), parse_int64(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A ``metav1.LabelSelector``: all ``match_labels`` and all ``match_expressions`` must hold.

    An empty selector matches every object. Where the API treats a *missing* selector as matching
    nothing (PDB, pod affinity terms), callers hold ``None`` and must check for it.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            if not req.matches(labels):
                return False
        return True

    def with_labels(self, extra: Mapping[str, str]) -> LabelSelector:
        """This selector ANDed with ``key=value`` for each item (``matchLabelKeys`` semantics)."""
        if not extra:
            return self
        return LabelSelector(self.match_labels + tuple(sorted(extra.items())), self.match_expressions)

    @classmethod
    def from_api(cls, raw: Any, where: str = "labelSelector") -> LabelSelector:
        """Build from API JSON, raising :class:`ModelError` naming ``where`` on bad input."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ModelError(where, f"must be an object with matchLabels/matchExpressions, got {type(raw).__name__}")
        unknown = set(raw) - {"matchLabels", "matchExpressions"}
        if unknown:
            raise ModelError(where, f"unknown field(s) {', '.join(sorted(unknown))}")
        labels = raw.get("matchLabels")
        if labels is None:
            labels = {}
        if not isinstance(labels, Mapping):
            raise ModelError(f"{where}.matchLabels", "must be a map of label to value")
        raw_exprs = raw.get("matchExpressions")
        if raw_exprs is None:
            raw_exprs = []
        if not isinstance(raw_exprs, list):
            raise ModelError(f"{where}.matchExpressions", "must be a list of requirements")
        for k, v in labels.items():
            if not isinstance(v, str):
                # as the API (and the upstream descheduler's decoder) refuses it; YAML reads an
                # unquoted true, 2 or n as a boolean or a number
                raise ModelError(f"{where}.matchLabels.{k}", f"must be a string, got the {type(v).__name__} {v!r}: quote "
                                 "the value (in YAML an unquoted y, n, yes, no, on, off, true or false is a boolean, "
                                 "digits a number)")
        exprs = []
        for i, item in enumerate(raw_exprs):
            exprs.append(requirement_from_api(item, f"{where}.matchExpressions[{i}]", LABEL_OPERATORS))
        return cls(tuple(sorted((str(k), v) for k, v in labels.items())), tuple(exprs))

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in self.match_expressions
            ]
        return out

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for r in self.match_expressions:
            if r.operator in ("In", "NotIn"):
                parts.append(f"{r.key} {r.operator.lower()} ({','.join(r.values)})")
            elif r.operator == "Exists":
                parts.append(r.key)
            elif r.operator == "DoesNotExist":
                parts.append(f"!{r.key}")
            else:  # Gt / Lt, as apimachinery prints them (and parse_selector reads them back)
                parts.append(f"{r.key}{'>' if r.operator == 'Gt' else '<'}{','.join(r.values)}")
        return ",".join(parts)


def requirement_from_api(raw: Any, where: str, operators: tuple[str, ...]) -> Requirement:
    if not isinstance(raw, Mapping):
        raise ModelError(where, "must be an object with key, operator and values")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise ModelError(f"{where}.key", "must be a non-empty string")
    op = raw.get("operator")
    if op not in operators:
        raise ModelError(f"{where}.operator", f"must be one of {', '.join(operators)}, got {op!r}")
    values = raw.get("values")
    if values is None:
        values = ()
    if not isinstance(values, (list, tuple)):
        raise ModelError(f"{where}.values", "must be a list of strings")
    for j, v in enumerate(values):
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            raise ModelError(f"{where}.values[{j}]", f"must be a string, got {v!r}")
    values = tuple(str(v) for v in values)
    if op in ("In", "NotIn") and not values:
        raise ModelError(f"{where}.values", f"must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ModelError(f"{where}.values", f"must be empty for operator {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ModelError(f"{where}.values", f"must hold exactly one integer for operator {op}")
        if parse_int64(values[0]) is None:
            raise ModelError(f"{where}.values", f"must hold an integer for operator {op}, got {values[0]!r}")
    return Requirement(key, op, values)


# apimachinery's lexer: the special symbols, and identifiers running up to whitespace or a symbol.
_TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|=|,|\(|\)|!|>|<)|(?P<word>[^\s=!(),<>]+))")
_NAME = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_LABEL_KEY = re.compile(rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}")
_LABEL_VALUE = re.compile(rf"{_NAME}?")


def parse_selector(text: str, where: str = "selector") -> LabelSelector:
    """Parse the string form used by ``kubectl -l`` and the policy's ``nodeSelector``.

    Supports ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``,
    ``k>1`` and ``k<1``, as apimachinery's ``labels.Parse`` reads them: ``k=`` and ``k in ()``
    mean the empty value, keys and values must be valid label keys and values, and a trailing
    comma is an error. The empty string selects everything.
    """
    text = text or ""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ModelError(where, f"cannot parse selector {text!r} at position {pos}")
        tokens.append(("op", m.group("op")) if m.group("op") else ("word", m.group("word")))
        pos = m.end()

    def fail(why: str) -> ModelError:
        return ModelError(where, f"cannot parse selector {text!r}: {why}")

    def at(j: int) -> tuple[str, str]:
        return tokens[j] if j < len(tokens) else ("end", "")

    def key_at(j: int) -> str:
        kind, tok = at(j)
        if kind != "word" or tok in ("in", "notin"):
            raise fail(f"found {tok or 'end of string'!r}, expected a label key")
        if not _LABEL_KEY.fullmatch(tok):
            raise fail(f"{tok!r} is not a valid label key")
        return tok

    def value(tok: str) -> str:
        if not _LABEL_VALUE.fullmatch(tok):
            raise fail(f"{tok!r} is not a valid label value")
        return tok

    reqs: list[Requirement] = []
    i = 0
    while i < len(tokens):
        if at(i) == ("op", "!"):
            reqs.append(Requirement(key_at(i + 1), "DoesNotExist"))
            i += 2
        else:
            key = key_at(i)
            i += 1
            kind, tok = at(i)
            if kind in ("end",) or (kind, tok) == ("op", ","):
                reqs.append(Requirement(key, "Exists"))
            elif kind == "op" and tok in ("=", "==", "!=", ">", "<"):
                i += 1
                nkind, ntok = at(i)
                if nkind == "word":
                    val = value(ntok)
                    i += 1
                elif nkind == "end" or (nkind, ntok) == ("op", ","):
                    val = ""
                else:
                    raise fail(f"found {ntok!r}, expected a value after {key}{tok}")
                if tok in (">", "<"):
                    if parse_int64(val) is None:
                        raise fail(f"{key}{tok} needs an integer, got {val!r}")
                    reqs.append(Requirement(key, "Gt" if tok == ">" else "Lt", (val,)))
                else:
                    reqs.append(Requirement(key, "NotIn" if tok == "!=" else "In", (val,)))
            elif (kind, tok) in (("word", "in"), ("word", "notin")):
                op = "In" if tok == "in" else "NotIn"
                i += 1
                if at(i) != ("op", "("):
                    raise fail(f"expected '(' after {tok}")
                i += 1
                values: list[str] = []
                expect_value = True  # at the start and after each comma: a value or an empty one
                while True:
                    vkind, vtok = at(i)
                    if vkind == "word" and expect_value:
                        values.append(value(vtok))
                        expect_value = False
                    elif (vkind, vtok) == ("op", ","):
                        if expect_value:
                            values.append("")  # "(,a)" and "(a,,b)" hold the empty value
                        expect_value = True
                    elif (vkind, vtok) == ("op", ")"):
                        if expect_value:
                            values.append("")  # "()" and "(a,)" too
                        i += 1
                        break
                    elif vkind == "end":
                        raise fail("missing ')'")
                    else:
                        raise fail(f"found {vtok!r}, expected ',' or ')'")
                    i += 1
                reqs.append(Requirement(key, op, tuple(dict.fromkeys(values))))
            else:
                raise fail(f"found {tok!r}, expected an operator (=, ==, !=, in, notin, >, <)")
        if i < len(tokens):
            if at(i) != ("op", ","):
                raise fail(f"found {at(i)[1]!r}, expected ',' or end of string")
            i += 1
            if i >= len(tokens):
                raise fail("expected a requirement after ','")
    return LabelSelector((), tuple(reqs))

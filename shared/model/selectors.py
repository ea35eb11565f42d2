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
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
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

    def with_labels(self, extra: Mapping[str, str]) -> "LabelSelector":
        """This selector ANDed with ``key=value`` for each item (``matchLabelKeys`` semantics)."""
        if not extra:
            return self
        return LabelSelector(self.match_labels + tuple(sorted(extra.items())), self.match_expressions)

    @classmethod
    def from_api(cls, raw: Any, where: str = "labelSelector") -> "LabelSelector":
        """Build from API JSON, raising :class:`ModelError` naming ``where`` on bad input."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ModelError(where, f"must be an object with matchLabels/matchExpressions, got {type(raw).__name__}")
        unknown = set(raw) - {"matchLabels", "matchExpressions"}
        if unknown:
            raise ModelError(where, f"unknown field(s) {', '.join(sorted(unknown))}")
        labels = raw.get("matchLabels") or {}
        if not isinstance(labels, Mapping):
            raise ModelError(f"{where}.matchLabels", "must be a map of label to value")
        exprs = []
        for i, item in enumerate(raw.get("matchExpressions") or ()):
            exprs.append(requirement_from_api(item, f"{where}.matchExpressions[{i}]", LABEL_OPERATORS))
        return cls(tuple(sorted((str(k), str(v)) for k, v in labels.items())), tuple(exprs))

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
            else:
                parts.append(f"{r.key} {r.operator} {','.join(r.values)}")
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
    values = raw.get("values") or ()
    if not isinstance(values, (list, tuple)):
        raise ModelError(f"{where}.values", "must be a list of strings")
    values = tuple(str(v) for v in values)
    if op in ("In", "NotIn") and not values:
        raise ModelError(f"{where}.values", f"must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise ModelError(f"{where}.values", f"must be empty for operator {op}")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ModelError(f"{where}.values", f"must hold exactly one integer for operator {op}")
        try:
            int(values[0])
        except ValueError:
            raise ModelError(f"{where}.values", f"must hold an integer for operator {op}, got {values[0]!r}") from None
    return Requirement(key, op, values)


_TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|=|,|\(|\)|!|>|<)|(?P<word>[A-Za-z0-9_./-]+))")


def parse_selector(text: str, where: str = "selector") -> LabelSelector:
    """Parse the string form used by ``kubectl -l`` and the policy's ``nodeSelector``.

    Supports ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``,
    ``k>1`` and ``k<1``. The empty string selects everything.
    """
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text or ""
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ModelError(where, f"cannot parse selector {text!r} at position {pos}")
        tokens.append(("op", m.group("op")) if m.group("op") else ("word", m.group("word")))
        pos = m.end()
    reqs: list[Requirement] = []
    i = 0

    def expect_word(j: int) -> str:
        if j >= len(tokens) or tokens[j][0] != "word":
            raise ModelError(where, f"cannot parse selector {text!r}: expected a label key or value")
        return tokens[j][1]

    while i < len(tokens):
        kind, tok = tokens[i]
        if kind == "op" and tok == "!":
            reqs.append(Requirement(expect_word(i + 1), "DoesNotExist"))
            i += 2
        else:
            key = expect_word(i)
            i += 1
            if i >= len(tokens) or tokens[i] == ("op", ","):
                reqs.append(Requirement(key, "Exists"))
            elif tokens[i][0] == "op" and tokens[i][1] in ("=", "==", "!=", ">", "<"):
                op = tokens[i][1]
                value = tokens[i + 1][1] if i + 1 < len(tokens) and tokens[i + 1][0] == "word" else ""
                i += 2 if value else 1
                if op in (">", "<"):
                    try:
                        int(value)
                    except ValueError:
                        raise ModelError(where, f"cannot parse selector {text!r}: {key}{op} needs an integer") from None
                    reqs.append(Requirement(key, "Gt" if op == ">" else "Lt", (value,)))
                else:
                    reqs.append(Requirement(key, "NotIn" if op == "!=" else "In", (value,)))
            elif tokens[i] in (("word", "in"), ("word", "notin")):
                op = "In" if tokens[i][1] == "in" else "NotIn"
                i += 1
                if i >= len(tokens) or tokens[i] != ("op", "("):
                    raise ModelError(where, f"cannot parse selector {text!r}: expected '(' after {op.lower()}")
                i += 1
                values: list[str] = []
                while i < len(tokens) and tokens[i] != ("op", ")"):
                    if tokens[i] != ("op", ","):
                        values.append(expect_word(i))
                    i += 1
                if i >= len(tokens):
                    raise ModelError(where, f"cannot parse selector {text!r}: missing ')'")
                i += 1
                reqs.append(Requirement(key, op, tuple(values)))
            else:
                raise ModelError(where, f"cannot parse selector {text!r} near {tokens[i][1]!r}")
        if i < len(tokens):
            if tokens[i] != ("op", ","):
                raise ModelError(where, f"cannot parse selector {text!r}: expected ',' near {tokens[i][1]!r}")
            i += 1
    return LabelSelector((), tuple(reqs))

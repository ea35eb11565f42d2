"""Label selectors agree with apimachinery: metav1.LabelSelector objects and the string form."""

from __future__ import annotations

from typing import Any

import pytest
from kdesched.model.errors import ModelError
from kdesched.model.selectors import (
    NODE_OPERATORS,
    LabelSelector,
    Requirement,
    parse_selector,
    requirement_from_api,
)

LABELS = {"app": "web", "tier": "front", "rank": "7", "empty": ""}


@pytest.mark.parametrize(
    ("raw", "matches"),
    [
        (None, True), ({}, True), ({"matchLabels": {}}, True), ({"matchExpressions": []}, True),
        ({"matchLabels": {"app": "web"}}, True), ({"matchLabels": {"app": "db"}}, False),
        ({"matchLabels": {"app": "web", "tier": "back"}}, False), ({"matchLabels": {"empty": ""}}, True),
        ({"matchLabels": {"missing": ""}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}, False),
        ({"matchExpressions": [{"key": "missing", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}, True),
        ({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "missing", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "empty", "operator": "DoesNotExist", "values": []}]}, False),
        ({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}]},
         False),
    ],
)
def test_label_selector_matches(raw: Any, matches: bool) -> None:
    assert LabelSelector.from_api(raw).matches(LABELS) is matches


def test_empty_selector_is_empty_and_matches_no_labels_too() -> None:
    sel = LabelSelector.from_api({})
    assert sel.empty and sel.matches({})
    assert not LabelSelector.from_api({"matchLabels": {"a": "b"}}).empty


@pytest.mark.parametrize(
    ("raw", "where", "message"),
    [
        ("app=web", "sel", "must be an object"),
        ([], "sel", "must be an object"),
        ({"matchLabel": {"a": "b"}}, "sel", "unknown field(s) matchLabel"),
        ({"matchLabels": ["a"]}, "sel.matchLabels", "must be a map"),
        ({"matchLabels": []}, "sel.matchLabels", "must be a map"),
        ({"matchLabels": "a=b"}, "sel.matchLabels", "must be a map"),
        ({"matchExpressions": {"key": "a"}}, "sel.matchExpressions", "must be a list"),
        ({"matchExpressions": "a"}, "sel.matchExpressions", "must be a list"),
        ({"matchExpressions": ["a"]}, "sel.matchExpressions[0]", "must be an object"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "sel.matchExpressions[0].key", "non-empty string"),
        ({"matchExpressions": [{"key": "", "operator": "Exists"}]}, "sel.matchExpressions[0].key", "non-empty"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "a", "operator": "Equals"}]},
         "sel.matchExpressions[1].operator", "must be one of In, NotIn, Exists, DoesNotExist, got 'Equals'"),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
         "sel.matchExpressions[0].operator", "got 'Gt'"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "sel.matchExpressions[0].values",
         "must be non-empty for operator In"),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]}, "sel.matchExpressions[0].values",
         "must be non-empty for operator NotIn"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
         "sel.matchExpressions[0].values", "must be empty for operator Exists"),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
         "sel.matchExpressions[0].values", "must be empty for operator DoesNotExist"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}, "sel.matchExpressions[0].values",
         "must be a list"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", None]}]},
         "sel.matchExpressions[0].values[1]", "must be a string"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": [True]}]},
         "sel.matchExpressions[0].values[0]", "must be a string"),
    ],
)
def test_label_selector_errors_name_the_field(raw: Any, where: str, message: str) -> None:
    with pytest.raises(ModelError) as info:
        LabelSelector.from_api(raw, "sel")
    assert info.value.where == where
    assert message in info.value.message


@pytest.mark.parametrize(
    ("values", "op", "label", "matches"),
    [
        (["5"], "Gt", "7", True), (["7"], "Gt", "7", False), (["8"], "Lt", "7", True), (["7"], "Lt", "7", False),
        (["-1"], "Gt", "0", True), (["+5"], "Lt", "4", True),
        # a label value that Go's strconv.ParseInt refuses never matches
        (["5"], "Gt", "abc", False), (["5"], "Gt", "1_0", False), (["5"], "Gt", "7.5", False),
        (["5"], "Gt", "", False), (["5"], "Gt", " 7", False), (["5"], "Gt", "99999999999999999999", False),
    ],
)
def test_gt_lt_node_requirements(values: list[str], op: str, label: str, matches: bool) -> None:
    req = requirement_from_api({"key": "k", "operator": op, "values": values}, "r", NODE_OPERATORS)
    assert req.matches({"k": label}) is matches
    assert not req.matches({})


@pytest.mark.parametrize("values", [[], ["1", "2"], ["x"], ["1.5"], ["1_0"], [""]])
def test_gt_lt_need_one_integer(values: list[str]) -> None:
    with pytest.raises(ModelError) as info:
        requirement_from_api({"key": "k", "operator": "Gt", "values": values}, "r", NODE_OPERATORS)
    assert info.value.where == "r.values"


def test_with_labels_ands_match_label_keys() -> None:
    sel = LabelSelector.from_api({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})
    assert sel.with_labels({}) is sel
    narrowed = sel.with_labels({"app": "web"})
    assert narrowed.matches(LABELS)
    assert not narrowed.matches({**LABELS, "app": "db"})
    assert not narrowed.matches({"app": "web"})  # the original requirement still holds


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"matchLabels": {"b": "2", "a": "1"}},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]},
                              {"key": "b", "operator": "DoesNotExist"}]},
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["z"]},
                                                          {"key": "d", "operator": "Exists"}]},
    ],
)
def test_to_api_round_trips(raw: dict[str, Any]) -> None:
    sel = LabelSelector.from_api(raw)
    assert LabelSelector.from_api(sel.to_api()) == sel
    assert sel.to_api() == raw


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        (LabelSelector(), ""),
        (LabelSelector((("a", "1"), ("b", "2"))), "a=1,b=2"),
        (LabelSelector((), (Requirement("a", "In", ("x", "y")),)), "a in (x,y)"),
        (LabelSelector((), (Requirement("a", "NotIn", ("x",)),)), "a notin (x)"),
        (LabelSelector((), (Requirement("a", "Exists"),)), "a"),
        (LabelSelector((), (Requirement("a", "DoesNotExist"),)), "!a"),
        (LabelSelector((), (Requirement("a", "Gt", ("3",)),)), "a>3"),
        (LabelSelector((), (Requirement("a", "Lt", ("3",)),)), "a<3"),
        (LabelSelector((("app", "web"),), (Requirement("tier", "Exists"),)), "app=web,tier"),
    ],
)
def test_str_is_the_selector_string_form(selector: LabelSelector, text: str) -> None:
    assert str(selector) == text
    # and it reads back to a selector that selects the same label sets
    back = parse_selector(text)
    for labels in ({}, {"a": "1", "b": "2"}, {"a": "x"}, {"a": "4"}, {"a": "2"}, {"app": "web", "tier": "t"}):
        assert back.matches(labels) is selector.matches(labels)


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement(key, op, values)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()), ("   ", ()),
        ("a=b", (req("a", "In", "b"),)), ("a==b", (req("a", "In", "b"),)), ("a!=b", (req("a", "NotIn", "b"),)),
        (" a = b , c != d ", (req("a", "In", "b"), req("c", "NotIn", "d"))),
        ("a in (x, y)", (req("a", "In", "x", "y"),)), ("a in(x,y)", (req("a", "In", "x", "y"),)),
        ("a notin (x)", (req("a", "NotIn", "x"),)),
        ("a", (req("a", "Exists"),)), ("!a", (req("a", "DoesNotExist"),)), ("! a", (req("a", "DoesNotExist"),)),
        ("k>1", (req("k", "Gt", "1"),)), ("k < 10", (req("k", "Lt", "10"),)),
        ("a,!b,c=d", (req("a", "Exists"), req("b", "DoesNotExist"), req("c", "In", "d"))),
        ("example.com/role=db", (req("example.com/role", "In", "db"),)),
        ("node-role.kubernetes.io/worker", (req("node-role.kubernetes.io/worker", "Exists"),)),
        # apimachinery: a missing value is the empty value
        ("a=", (req("a", "In", ""),)), ("a=,b", (req("a", "In", ""), req("b", "Exists"))),
        ("a!=", (req("a", "NotIn", ""),)),
        ("a in ()", (req("a", "In", ""),)), ("a in (,b)", (req("a", "In", "", "b"),)),
        ("a in (b,)", (req("a", "In", "b", ""),)), ("a in (b,,c)", (req("a", "In", "b", "", "c"),)),
        ("a in (in, notin)", (req("a", "In", "in", "notin"),)),
        ("a in (x,x)", (req("a", "In", "x"),)),
    ],
)
def test_parse_selector(text: str, expected: tuple[Requirement, ...]) -> None:
    sel = parse_selector(text)
    assert sel.match_labels == ()
    assert sel.match_expressions == expected


@pytest.mark.parametrize(
    "text",
    ["a=b=c", "a,", ",", ",a", "a,,b", "a b", "a in (b c)", "a in (b", "a in b", "a in", "k>x", "k>", "k<1.5",
     "!", "!a=b", "!=b", "=b", "a=(b)", "in=1", "a=b/c", "-a=b", "a/b/c=d", "a=" + "x" * 64, "a=b;c", "(a)",
     "a notin (b))"],
)
def test_parse_selector_errors(text: str) -> None:
    with pytest.raises(ModelError) as info:
        parse_selector(text, "nodeSelector")
    assert info.value.where == "nodeSelector"
    assert repr(text) in info.value.message


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("", {}, True), ("a=b", {"a": "b"}, True), ("a=b", {}, False), ("a!=b", {}, True), ("a!=b", {"a": "b"}, False),
        ("a=", {"a": ""}, True), ("a=", {}, False), ("a in ()", {"a": ""}, True), ("!a", {"a": ""}, False),
        ("a notin (x,y)", {"a": "z"}, True), ("k>1", {"k": "2"}, True), ("k>1", {"k": "x"}, False),
    ],
)
def test_parsed_selector_matches(text: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(text).matches(labels) is matches

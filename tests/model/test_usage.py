"""The measured-usage parsers (kdesched.model.usage) shared by ``simulate --usage`` files and the
live reads: any JSON document gives readings or a ModelError naming where, never another
exception (fuzzed), and the quantities are read as metrics-server writes them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kdesched.model.errors import ModelError
from kdesched.model.usage import Usage, parse_node_metrics_list, parse_pod_metrics_list, usage_from_document

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)
KEYS = st.sampled_from(["kind", "items", "metadata", "name", "namespace", "usage", "cpu", "memory", "containers",
                        "status", "data", "resultType", "result", "metric", "instance", "value", "window",
                        "timestamp"])
SHAPED = st.recursive(
    st.none() | st.integers() | st.text(max_size=6) | st.sampled_from(
        ["NodeMetricsList", "PodMetricsList", "success", "vector", "250m", "1Gi", "0.5", "20s"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(doc=st.one_of(JSON, SHAPED))
def test_any_document_gives_readings_or_a_model_error(doc: Any) -> None:
    try:
        result = usage_from_document(doc, "u.json")
    except ModelError as exc:
        assert str(exc).startswith("u.json")
    else:
        assert isinstance(result, Usage)


def test_metrics_server_quantities() -> None:
    nodes = parse_node_metrics_list({"items": [
        {"metadata": {"name": "n"}, "timestamp": "2026-11-01T12:00:00Z", "window": "1m0s",
         "usage": {"cpu": "123456789n", "memory": "1024Ki"}}]})
    assert nodes["n"].usage == {"cpu": 124, "memory": 1 << 20}  # nanocores up to millicores (Quantity rules)
    assert nodes["n"].window_seconds == 60
    pods = parse_pod_metrics_list({"items": [{"metadata": {"name": "p", "namespace": "d"}, "containers": [
        {"name": "a", "usage": {"cpu": "1m"}}, {"name": "b", "usage": {"memory": "1Mi"}}]}]})
    assert pods == {("d", "p"): {"cpu": 1, "memory": 1 << 20}}


@pytest.mark.parametrize("window", ["soon", 30, "5x"])
def test_bad_window_names_the_field(window: Any) -> None:
    with pytest.raises(ModelError, match=r"items\[0\].window: must be a duration such as 30s"):
        parse_node_metrics_list({"items": [{"metadata": {"name": "n"}, "window": window, "usage": {}}]})

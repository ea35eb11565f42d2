"""The one DNS-name rule (kdesched.model.names): whole matches only, as the API server checks names.

Why: four copies of the rule had drifted; one (``^...$`` with ``re.match``) accepted a trailing
newline, because ``$`` also matches before a final ``\\n``. Every caller now asks this module.
"""

from __future__ import annotations

import pytest
from kdesched.model.names import dns_label_problem, dns_subdomain_problem, is_dns_label, is_dns_subdomain
from kdesched.reactor.events.routing import EventScopeError, validate_node_name

TRAILING = ["src-0\n", "src-0\r\n", "\nsrc-0", "src-0 ", "src-0\n\n"]


@pytest.mark.parametrize("name", ["a", "node-1", "0", "a" * 63])
def test_labels(name: str) -> None:
    assert is_dns_label(name) and dns_label_problem(name) is None
    assert is_dns_subdomain(name) and dns_subdomain_problem(name) is None


@pytest.mark.parametrize("name", ["ip-10-0-0-1.eu-west-1.compute.internal", "a.b", ("a" * 63 + ".") * 3 + "a"])
def test_subdomains(name: str) -> None:
    assert is_dns_subdomain(name) and dns_subdomain_problem(name) is None
    assert not is_dns_label(name) and dns_label_problem(name) is not None


@pytest.mark.parametrize("name", [*TRAILING, "", "-a", "a-", "A", "a_b", "a..b", ".a", "a.", "a" * 254, 5, None])
def test_not_subdomains(name: object) -> None:
    assert not is_dns_subdomain(name)
    if isinstance(name, str):
        assert dns_subdomain_problem(name) is not None


@pytest.mark.parametrize("name", [*TRAILING, "", "a.b", "a" * 64, "Node"])
def test_not_labels(name: str) -> None:
    assert not is_dns_label(name) and dns_label_problem(name) is not None


@pytest.mark.parametrize("name", TRAILING)
def test_an_event_for_a_node_named_with_a_newline_is_refused(name: str) -> None:
    with pytest.raises(EventScopeError, match="not a valid node name"):
        validate_node_name(name)

"""The API server's DNS name rules, in one place: RFC 1123 labels and subdomains.

Why: the same rule was written four times (snapshot checks, event scoping, the settings' Lease
names, ``serve --lease-namespace``), and one copy (``^...$`` with ``re.match``) let a trailing
newline in: ``$`` also matches before a final ``\\n``. Every check here is a whole match
(``fullmatch``), as ``k8s.io/apimachinery/pkg/util/validation`` ``IsDNS1123Label`` and
``IsDNS1123Subdomain`` are. A leaf module (``re`` only): the classifier and the CLI import it
without the model's records.
"""

from __future__ import annotations

import re

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253

LABEL_PATTERN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
"""One RFC 1123 label (no length bound: the callers check lengths)."""
SUBDOMAIN_PATTERN = rf"{LABEL_PATTERN}(\.{LABEL_PATTERN})*"
"""Labels joined by dots."""

_DNS_LABEL = re.compile(LABEL_PATTERN)
_DNS_SUBDOMAIN = re.compile(SUBDOMAIN_PATTERN)


def is_dns_label(value: object) -> bool:
    """IsDNS1123Label: a string of at most 63 lowercase letters, digits and '-', starting and
    ending with a letter or digit; nothing before or after it (not even a newline)."""
    return (isinstance(value, str) and len(value) <= DNS_LABEL_MAX
            and _DNS_LABEL.fullmatch(value) is not None)


def is_dns_subdomain(value: object) -> bool:
    """IsDNS1123Subdomain: at most 253 characters, DNS labels joined by dots (Node, Pod and Lease
    names); nothing before or after it (not even a newline)."""
    return (isinstance(value, str) and len(value) <= DNS_SUBDOMAIN_MAX
            and _DNS_SUBDOMAIN.fullmatch(value) is not None)


def _problem(value: str, pattern: re.Pattern[str], limit: int, what: str) -> str | None:
    if len(value) > limit:
        return f"must be at most {limit} characters, got {len(value)}"
    if pattern.fullmatch(value) is None:
        return f"must be a {what}, got {value!r}"
    return None


def dns_subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS subdomain, in the words of the snapshot checks; None if it is."""
    return _problem(value, _DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, "DNS subdomain (lowercase letters, digits, '-' and "
                    "'.', starting and ending with a letter or digit)")


def dns_label_problem(value: str) -> str | None:
    """Why ``value`` is not a DNS label, in the words of the snapshot checks; None if it is."""
    return _problem(value, _DNS_LABEL, DNS_LABEL_MAX, "DNS label (lowercase letters, digits and '-', starting "
                    "and ending with a letter or digit)")

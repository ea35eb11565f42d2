"""The ``kdesched.usage`` settings: how live usage is read, and the event path's young-node rule.

Why a block of kdesched's own: upstream's ``metricsProviders`` entry names a Prometheus server and
its token Secret, and trusts the in-cluster service account CA for it; kdesched runs outside a
cluster too (``kdesched run`` from a laptop, CI), so the CA is an explicit optional setting here.
It lives in the ``kdesched:`` block, not in ``metricsProviders``, so a policy still decodes
strictly in the upstream descheduler (docs/differences.md).

==========================  =========  ===========================================================
key                         default    meaning
==========================  =========  ===========================================================
prometheusCAFile            ""         PEM CA bundle for an https Prometheus URL; unset: the
                                       in-cluster service account CA when it exists (upstream's
                                       choice) and OpenShift's service CA beside it, plus the
                                       system's trust store
prometheusTimeoutSeconds    10         one query's time limit (connect + answer)
youngNodeSeconds            300        event path: a node created less than this long ago counts
                                       at no less than its pods' requests (0 turns it off)
==========================  =========  ===========================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KNOWN_KEYS = ("prometheusCAFile", "prometheusTimeoutSeconds", "youngNodeSeconds")
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
SERVICE_CA = "/var/run/secrets/kubernetes.io/serviceaccount/service-ca.crt"  # OpenShift's service CA


@dataclass(frozen=True, slots=True)
class UsageSettings:
    prometheus_ca_file: str = ""
    prometheus_timeout_seconds: float = 10.0
    young_node_seconds: float = 300.0


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _number(raw: Mapping[str, Any], key: str, where: str, default: float, errors: list[str], *,
            positive: bool) -> float:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        errors.append(f"{where}.{key}: must be a number {'> 0' if positive else '>= 0'}, got {_show(value)}")
        return default
    return float(value)


def parse_usage_settings(raw: Any, errors: list[str], where: str = "kdesched.usage") -> UsageSettings:
    """Validate a raw ``kdesched.usage`` block, appending one message per bad field to ``errors``."""
    if raw is None:
        return UsageSettings()
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping, got {_show(raw)}")
        return UsageSettings()
    for key in raw:
        if key not in KNOWN_KEYS:
            errors.append(f"{where}.{key}: unknown field (known: {', '.join(KNOWN_KEYS)})")
    ca = raw.get("prometheusCAFile", "")
    if not isinstance(ca, str):
        errors.append(f"{where}.prometheusCAFile: must be a file path, got {_show(ca)}")
        ca = ""
    return UsageSettings(
        prometheus_ca_file=ca,
        prometheus_timeout_seconds=_number(raw, "prometheusTimeoutSeconds", where, 10.0, errors, positive=True),
        young_node_seconds=_number(raw, "youngNodeSeconds", where, 300.0, errors, positive=False),
    )


def usage_settings(block: Mapping[str, Any] | None) -> UsageSettings:
    """The settings of an already validated policy's ``kdesched:`` block."""
    return parse_usage_settings((block or {}).get("usage"), [])


def needs_usage(policy: Any) -> tuple[bool, frozenset[str]]:
    """Does some enabled LowNodeUtilization balance on KubernetesMetrics, and which Prometheus
    queries does the policy run? (The caller reads only what is asked for.)"""
    metrics = False
    queries: set[str] = set()
    for profile in policy.profiles:
        if "LowNodeUtilization" not in profile.balance:
            continue
        mu = getattr(profile.plugin_args.get("LowNodeUtilization"), "metrics_utilization", None)
        if mu is None:
            continue
        if mu.source == "Prometheus":
            queries.add(mu.prometheus_query)
        elif mu.source == "KubernetesMetrics" or mu.metrics_server:
            metrics = True
    return metrics, frozenset(queries)

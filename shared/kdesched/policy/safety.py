"""kdesched's safety defaults, and the one rule for when they apply.

Why: a plain upstream policy in ``kdesched simulate`` / ``kdesched run`` must decide exactly as
upstream does (parity, so people can compare and migrate), while the event path (``serve``, the
Knative functions, ``simulate --event``) acts far more often than a timer and must be safer than
one. Every safety default (per-workload pacing, "somewhere to go", no drain on control-plane
taints) reads its switch from one :class:`Safety` value resolved here, never from its own flag.

The rule (docs/safety.md, "Safety defaults and parity"):

* ``kdesched.safety.enabled: true`` or ``false`` in the policy wins everywhere;
* otherwise the defaults are on in the event path and off in ``simulate`` / ``run``.

The shipped policies (the packaged default, knative/, standalone) set ``enabled: true``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

KNOWN_KEYS = ("enabled", "maxUnavailable", "replacementTimeoutSeconds", "controlPlaneTaints")

CONTROL_PLANE_TAINTS = (
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized",
)
"""Taint keys that the control plane (node controller, kubelet, cloud controller) manages itself."""


class Path(Enum):
    """Where a decision is made: the command decides the default mode."""

    PARITY = "simulate/run"  # simulate, run: upstream semantics unless the policy turns safety on
    EVENT = "event path"  # serve, functions, simulate --event: safety defaults unless turned off


@dataclass(frozen=True, slots=True)
class Safety:
    """The resolved safety settings of one run."""

    enabled: bool
    why: str
    """Human words for the report: why the defaults are on or off (``policy``, ``event path``...)."""
    max_unavailable: int | str = 1
    """Per workload: a count of pods, or a percentage string ``"25%"`` of the workload's replicas."""
    replacement_timeout_seconds: float = 120.0
    """How long a held eviction waits for its workload to be back at its Ready count."""
    control_plane_taints: bool = False
    """Whether control-plane taints (:data:`CONTROL_PLANE_TAINTS`) trigger taint evictions."""

    def to_json(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "why": self.why}


@dataclass(frozen=True, slots=True)
class SafetySettings:
    """The ``kdesched.safety`` block as written (``enabled`` None = depends on the command)."""

    enabled: bool | None = None
    max_unavailable: int | str = 1
    replacement_timeout_seconds: float = 120.0
    control_plane_taints: bool = False

    def resolve(self, path: Path) -> Safety:
        """The effective settings for a run made on ``path``."""
        if self.enabled is not None:
            enabled = self.enabled
            why = f"kdesched.safety.enabled: {'true' if enabled else 'false'} in the policy"
        elif path is Path.EVENT:
            enabled, why = True, "event path (serve, functions, simulate --event): safety defaults on"
        else:
            enabled, why = False, "simulate/run with a plain upstream policy: upstream parity"
        return Safety(enabled, why, self.max_unavailable, self.replacement_timeout_seconds,
                      self.control_plane_taints)

    def with_enabled(self, enabled: bool | None) -> SafetySettings:
        return replace(self, enabled=enabled)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def parse_max_unavailable(value: Any, where: str, errors: list[str]) -> int | str | None:
    """An integer >= 1 or a percentage string ``"N%"`` with 0 < N <= 100; None after an error."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value >= 1:
            return value
    elif isinstance(value, str) and value.endswith("%"):
        digits = value[:-1]
        if digits.isascii() and digits.isdigit() and 0 < int(digits) <= 100:
            return f"{int(digits)}%"
    errors.append(f"{where}: must be an integer >= 1 or a percentage like \"25%\" (1% to 100%), got {_show(value)}")
    return None


def parse_safety(raw: Any, errors: list[str], where: str = "kdesched.safety") -> SafetySettings:
    """Validate a raw ``kdesched.safety`` block, appending one message per bad field to ``errors``."""
    if raw is None:
        return SafetySettings()
    if not isinstance(raw, Mapping):
        errors.append(f"{where}: must be a mapping, got {_show(raw)}")
        return SafetySettings()
    for key in raw:
        if key not in KNOWN_KEYS:
            errors.append(f"{where}.{key}: unknown field (known: {', '.join(KNOWN_KEYS)})")
    out = SafetySettings()
    enabled = raw.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        errors.append(f"{where}.enabled: must be true or false, got {_show(enabled)}")
        enabled = None
    out = replace(out, enabled=enabled)
    if raw.get("maxUnavailable") is not None:
        mu = parse_max_unavailable(raw["maxUnavailable"], f"{where}.maxUnavailable", errors)
        if mu is not None:
            out = replace(out, max_unavailable=mu)
    timeout = raw.get("replacementTimeoutSeconds")
    if timeout is not None:
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and math.isfinite(timeout) \
                and timeout >= 0:
            out = replace(out, replacement_timeout_seconds=float(timeout))
        else:
            errors.append(f"{where}.replacementTimeoutSeconds: must be a number >= 0, got {_show(timeout)}")
    cpt = raw.get("controlPlaneTaints")
    if cpt is not None:
        if isinstance(cpt, bool):
            out = replace(out, control_plane_taints=cpt)
        else:
            errors.append(f"{where}.controlPlaneTaints: must be true or false, got {_show(cpt)}")
    return out

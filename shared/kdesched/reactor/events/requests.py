"""What an event asks for, parsed and validated once, at the edge.

Why: the functions (HTTP), ``kdesched serve`` (its watch and its HTTP endpoint) and ``simulate
--event`` all hand events to the reactor. Parsing a CloudEvent's ``data`` is an input concern: it
happens where the event enters (the functions' handlers, serve's dispatch), and the reactor takes
the typed requests below, never an untyped dict. A request that can never succeed raises
:class:`RequestError` naming the field (HTTP 400, nothing run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdesched.errors import InvalidEvent
from kdesched.policy.plugins import PLUGINS
from kdesched.policy.safety import Safety
from kdesched.policy.types import Policy
from kdesched.reactor.events.routing import (
    RUNNABLE_POINTS,
    EventScopeError,
    enabled_strategies,
    event_policy,
    extension_point,
    validate_node_name,
)


class RequestError(InvalidEvent):
    """The event can never succeed as sent (HTTP 400): names the bad ``field``."""


@dataclass(frozen=True, slots=True)
class Trigger:
    """The event that asked for a run."""

    type: str
    id: str
    source: str = ""
    node: str = ""

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "id": self.id, "node": self.node, "source": self.source}


@dataclass(frozen=True, slots=True)
class NodeEventRequest:
    """A semantic node event's data: the node, the label keys it changed (None = unknown), and the
    classifier's view of the node after the change (``usable``, ``ready``, ``taints``...)."""

    node: str
    changed: frozenset[str] | None = None
    after: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """``run.requested`` (or the sweep): which strategies and nodes (None = all), and dryRun."""

    strategies: tuple[str, ...] | None = None
    nodes: tuple[str, ...] | None = None
    dry_run: bool | None = None


def _object(data: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise RequestError(f"data: must be a JSON object {what}", "data")
    return data


def parse_node_event(data: Any) -> NodeEventRequest:
    """A node event's data -> :class:`NodeEventRequest`."""
    data = _object(data, "with a node field")
    node = data.get("node")
    try:
        validate_node_name(node)
    except EventScopeError as exc:
        raise RequestError(f"data.{exc}", "data.node") from None
    for key in ("before", "after"):
        if key in data and data[key] is not None and not isinstance(data[key], Mapping):
            raise RequestError(f"data.{key}: must be an object", f"data.{key}")
    before, after = data.get("before") or {}, data.get("after") or {}
    changed = frozenset(before) | frozenset(after)
    return NodeEventRequest(str(node), changed or None, dict(after))


def _names(data: Mapping[str, Any], key: str, what: str) -> list[str] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise RequestError(f"data.{key}: must be a list of {what}", f"data.{key}")
    if not value:
        # an empty list is not "all": a caller that meant all leaves the field out
        raise RequestError(f"data.{key}: must name at least one {what[:-1]} (leave the field out for all)",
                           f"data.{key}")
    return value


def parse_run_request(data: Any) -> RunRequest:
    """``run.requested`` data -> :class:`RunRequest` (no data: the whole policy on every node)."""
    if data is None:
        return RunRequest()
    data = _object(data, "")
    known = ("strategies", "nodes", "dryRun")
    for key in data:
        if key not in known:
            raise RequestError(f"data.{key}: unknown field (known: {', '.join(known)})", f"data.{key}")
    strategies = _names(data, "strategies", "strategy names")
    if strategies is not None:
        runnable = [n for n, i in PLUGINS.items() if i.extension_points & set(RUNNABLE_POINTS)]
        for s in strategies:
            if s not in runnable:
                raise RequestError(f"data.strategies: unknown strategy {s!r} (known: {', '.join(runnable)})",
                                   "data.strategies")
    nodes = _names(data, "nodes", "node names")
    for n in nodes or ():
        try:
            validate_node_name(n)
        except EventScopeError as exc:
            raise RequestError(f"data.nodes: {exc}", "data.nodes") from None
    return RunRequest(tuple(dict.fromkeys(strategies)) if strategies else None,
                      tuple(dict.fromkeys(nodes)) if nodes else None, _dry_run(data))


def _dry_run(data: Mapping[str, Any]) -> bool | None:
    dry_run = data.get("dryRun")
    if dry_run is not None and not isinstance(dry_run, bool):
        raise RequestError(f"data.dryRun: must be true or false, got {dry_run!r}", "data.dryRun")
    return dry_run


def parse_sweep_data(data: Any) -> RunRequest:
    """The sweep's (PingSource) data -> a whole-policy :class:`RunRequest`. Its data may only say
    ``{"dryRun": true|false}`` (``false`` cannot override a dry-run deployment). A PingSource
    without data sends none (or an empty string)."""
    if data is None or data == "" or data == b"":
        return RunRequest()
    if not isinstance(data, Mapping):
        raise RequestError('data: a sweep takes a JSON object {"dryRun": true|false} or no data', "data")
    for key in data:
        if key != "dryRun":
            raise RequestError(f"data.{key}: unknown field for a sweep (known: dryRun)", f"data.{key}")
    return RunRequest(dry_run=_dry_run(data))


def request_policy(policy: Policy, safety: Safety, strategies: tuple[str, ...] | None,
                   nodes: tuple[str, ...] | None) -> Policy:
    """The policy a ``run.requested`` runs: the policy itself, or the strategies it names (on the
    event path's terms, :func:`~kdesched.reactor.events.routing.event_policy`). ``data.nodes``
    scopes Deschedule strategies only (kdesched.engine.plan_run); a Balance strategy always weighs,
    and evicts from, every node, so such a request is refused rather than run wider than asked.
    RequestError names the field."""
    try:
        chosen = event_policy(policy, strategies, safety) if strategies else policy
    except EventScopeError as exc:
        raise RequestError(str(exc), "data.strategies") from None
    if nodes:
        balance = [s for s in (strategies or enabled_strategies(chosen)) if extension_point(s) == "balance"]
        if balance:
            raise RequestError(f"data.nodes: restricts Deschedule strategies to those nodes, and "
                               f"{', '.join(balance)} {'is a Balance strategy' if len(balance) == 1 else 'are Balance strategies'}, "
                               "which always weigh and evict across every node: name only Deschedule strategies "
                               "in data.strategies, or leave out data.nodes", "data.nodes")
    return chosen

"""Whether the node a rebalance event names is usable for ordinary pods yet, asked of the event
first and of the API server only when the event does not say.

Why: a rebalance started before a node can take pods plans nothing (docs/reactor.md, "When a
node is usable"). The rule itself is pure (:mod:`kdesched.reactor.events.lifecycle`); this is the
one place a rebalance trigger may read the Node to apply it, for a ``node.added`` or ``node.ready``
from a sender that does not carry the classifier's verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.reactor.events.classifier import digest_of
from kdesched.reactor.events.lifecycle import taints_from_json, unusable_reason


class NodeProbe:
    """Why a rebalance trigger waits, for one process's API client."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def not_usable(self, etype: str, node: str, after: Mapping[str, Any]) -> str:
        """Why a rebalance trigger runs nothing ("" = it runs): the node is not usable for ordinary
        pods (:mod:`kdesched.reactor.events.lifecycle`). Decided on the event's own ``after`` when it says
        (the classifier's view at that write: so exactly one event of a node's way to usable runs,
        however late it is delivered); else (a ``node.added`` or ``node.ready`` without those fields),
        on the node as the API server has it now."""
        usable = after.get("usable")
        if isinstance(usable, bool):
            if usable:
                return ""
            why = after.get("unusable")
            if not isinstance(why, str) or not why:
                taints = taints_from_json(after.get("taints")) or []
                why = unusable_reason(bool(after.get("ready")), bool(after.get("unschedulable")), taints) \
                    or "not usable"
            return waiting_note(etype, node, why)
        # a node.ready without the field too (someone posting it by hand to force a rebalance): the
        # rule is one for every entry point, and simulate --event applies it to the node as well
        raw = self.client.get_raw("Node", node)
        if raw is None:
            return f"node {node} no longer exists; nothing to do"
        why = digest_of(raw).unusable_reason
        return waiting_note(etype, node, why) if why else ""


def waiting_note(etype: str, node: str, why: str) -> str:
    short = etype.removeprefix("dev.kdesched.")
    return (f"{short}: node {node} is not usable for ordinary pods yet ({why}): no run; waiting for "
            f"node.ready (sent once it becomes usable)")

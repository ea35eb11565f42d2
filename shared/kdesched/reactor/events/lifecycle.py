"""When a node is *usable for ordinary pods*: the moment a rebalance can actually move pods there.

Why: a node's Ready condition is not the moment it can take pods. On cloud providers a new node
turns Ready while it still carries ``node.cloudprovider.kubernetes.io/uninitialized:NoSchedule``
(and often ``node.kubernetes.io/not-ready:NoSchedule``), lifted a fraction of a second to tens of
seconds later; a recovered node keeps its condition taints until the node controller lifts them;
a cordoned node is Ready. A rebalance started before the last of these changes plans nothing
(LowNodeUtilization's nodeFit refuses a node the pods do not tolerate) and the node then waits for
the sweep. So the classifier sends the rebalance trigger on the transition to *usable*, whichever
change comes last, and a ``node.added`` for a node that is not usable yet runs nothing and says
why. One definition, used by the classifier, the rebalance function, ``kdesched serve`` and
``kdesched simulate --event``.

Usable for ordinary pods = Ready, not cordoned (``spec.unschedulable``), and no ``NoSchedule`` /
``NoExecute`` taint that a pod without special tolerations would be refused by. An *ordinary pod*
carries only the tolerations every pod gets from the DefaultTolerationSeconds admission plugin:
``node.kubernetes.io/not-ready:NoExecute`` and ``node.kubernetes.io/unreachable:NoExecute`` (for
300 s). ``PreferNoSchedule`` never refuses a pod.
"""

from __future__ import annotations

from collections.abc import Iterable

Taint = tuple[str, str, str]  # (key, value, effect)

ORDINARY_TOLERATIONS: tuple[tuple[str, str], ...] = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
)
"""(key, effect) every pod tolerates by default (DefaultTolerationSeconds admission plugin)."""

REFUSING_EFFECTS = ("NoSchedule", "NoExecute")


def refusing_taints(taints: Iterable[Taint]) -> list[Taint]:
    """The taints an ordinary pod is refused by (in the given order)."""
    return [t for t in taints if t[2] in REFUSING_EFFECTS and (t[0], t[2]) not in ORDINARY_TOLERATIONS]


def unusable_reason(ready: bool, unschedulable: bool, taints: Iterable[Taint]) -> str:
    """Why a node is not usable for ordinary pods, or "" when it is."""
    why = []
    if not ready:
        why.append("NotReady")
    if unschedulable:
        why.append("cordoned (spec.unschedulable)")
    refusing = refusing_taints(taints)
    if refusing:
        shown = ", ".join(f"{k}{'=' + v if v else ''}:{e}" for k, v, e in refusing)
        why.append(f"tainted {shown}")
    return "; ".join(why)


def is_usable(ready: bool, unschedulable: bool, taints: Iterable[Taint]) -> bool:
    return not unusable_reason(ready, unschedulable, taints)


def taints_from_json(raw: object) -> list[Taint] | None:
    """Taints as the classifier writes them in event data (``[{key, value?, effect}]``); None when
    ``raw`` is not such a list."""
    if not isinstance(raw, list):
        return None
    out: list[Taint] = []
    for t in raw:
        if not isinstance(t, dict):
            return None
        out.append((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "")))
    return out

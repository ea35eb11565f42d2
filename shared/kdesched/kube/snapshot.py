"""Reading a live cluster into a :class:`~kdesched.model.snapshot.Snapshot`.

Why: a full run lists every kind once (paginated), but an event handler that reacts to one node
only needs that node's pods: ``pod_nodes`` switches pods to one ``spec.nodeName=<node>`` LIST per
node, which costs the API server a fraction of a cluster-wide pod LIST. The records come out of
the same parser as snapshot files (``Snapshot.from_objects``), so live and simulated runs decide
on identical data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.model.snapshot import KINDS, Snapshot

# Items per LIST page (limit/continue). Read at call time so a test can make it small enough that a
# modest real cluster is read in many pages.
DEFAULT_PAGE_SIZE = 500


def load_live_snapshot(client: KubeClient, *, pod_nodes: Collection[str] | None = None,
                       include: Collection[str] = KINDS, page_size: int | None = None) -> Snapshot:
    """List the ``include`` kinds and build a snapshot.

    Pods: one paginated cluster-wide LIST when ``pod_nodes`` is None, otherwise one LIST per node
    with ``fieldSelector=spec.nodeName=<node>`` (pending pods without a node are then not read).
    API failures propagate as the typed errors of :mod:`kdesched.kube.errors`; a malformed object
    raises :class:`~kdesched.model.errors.ModelError` naming the object and field.
    """
    page_size = page_size or DEFAULT_PAGE_SIZE
    unknown = set(include) - set(KINDS)
    if unknown:
        raise ValueError(f"unsupported kind(s) {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
    nodes = list(dict.fromkeys(pod_nodes)) if pod_nodes is not None else []  # unique, in order
    notes: list[str] = []
    if pod_nodes is not None and "Pod" in include:
        notes.append(f"pods read for {len(nodes)} node(s) only: {', '.join(nodes) or '-'}")

    def objects() -> Iterator[tuple[str, dict[str, Any]]]:
        for kind in KINDS:
            if kind not in include:
                continue
            if kind == "Pod" and pod_nodes is not None:
                for node in nodes:
                    result = client.list_raw("Pod", field_selector=f"spec.nodeName={node}", page_size=page_size)
                    for i, item in enumerate(result.items):
                        yield f"API pods on node {node} [{i}]", item
                continue
            result = client.list_raw(kind, page_size=page_size)
            for i, item in enumerate(result.items):
                yield f"API {kind} list [{i}]", item

    return Snapshot.from_objects(objects(), notes=notes)

"""Reading a live cluster into a :class:`~kdesched.model.snapshot.Snapshot`.

Why: a full run lists every kind once (paginated), but an event handler that reacts to one node
only needs that node's pods: ``pod_nodes`` switches pods to one ``spec.nodeName=<node>`` LIST per
node, which costs the API server a fraction of a cluster-wide pod LIST. The records come out of
the same parsers as snapshot files (``Snapshot.from_objects``, and for pods the msgspec fast path
of :mod:`kdesched.model.fastload`), so live and simulated runs decide on identical data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdesched.kube.client import KubeClient
from kdesched.model.records import Pod
from kdesched.model.snapshot import KINDS, Snapshot

# Items per LIST page (limit/continue). Read at call time so a test can make it small enough that a
# modest real cluster is read in many pages.
DEFAULT_PAGE_SIZE = 500


def _etcd_key(item: Pod | dict[str, Any]) -> str:
    """``namespace/name`` (``name`` if cluster-scoped): the order etcd keeps objects of a kind in.
    Anything malformed sorts first and is reported by the model's parser as usual."""
    if isinstance(item, Pod):
        return f"{item.namespace}/{item.name}"
    meta = item.get("metadata")
    if not isinstance(meta, dict):
        return ""
    ns, name = meta.get("namespace"), meta.get("name")
    name = name if isinstance(name, str) else ""
    return f"{ns}/{name}" if isinstance(ns, str) and ns else name


def load_live_snapshot(client: KubeClient, *, pod_nodes: Collection[str] | None = None,
                       include: Collection[str] = KINDS, page_size: int | None = None,
                       from_cache: bool = False) -> Snapshot:
    """List the ``include`` kinds (the cluster-wide LISTs concurrently) and build a snapshot.

    ``from_cache``: every cluster-wide LIST with ``resourceVersion=0``, answered from the API
    server's watch cache in one response each (:meth:`KubeClient.list_for_snapshot`); ``kdesched
    run`` reads so, as upstream's informers do.

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

    kinds = [k for k in KINDS if k in include]
    full = [k for k in kinds if not (k == "Pod" and pod_nodes is not None)]
    # every cluster-wide LIST at once (the small kinds are read while the pods are decoded); the
    # results are consumed in KINDS order, so the model's errors and their order are unchanged
    def read(kind: str) -> list[Pod | dict[str, Any]]:
        items = client.list_for_snapshot(kind, page_size=page_size, from_cache=from_cache)
        if from_cache:
            # the watch cache answers in no particular order (a Go map in v1.24); decisions follow
            # the snapshot's order, so put it back in etcd's key order, what a paged read returns
            items.sort(key=_etcd_key)
        return items

    with ThreadPoolExecutor(max_workers=max(1, len(full)), thread_name_prefix="kdesched-list") as pool:
        lists = {k: pool.submit(read, k) for k in full}

        def objects() -> Iterator[tuple[str, Pod | dict[str, Any]]]:
            for kind in kinds:
                if kind == "Pod" and pod_nodes is not None:
                    for node in nodes:
                        items = client.list_for_snapshot("Pod", field_selector=f"spec.nodeName={node}",
                                                         page_size=page_size)
                        for i, item in enumerate(items):
                            yield f"API pods on node {node} [{i}]", item
                    continue
                for i, item in enumerate(lists[kind].result()):
                    yield f"API {kind} list [{i}]", item

        try:
            return Snapshot.from_objects(objects(), notes=notes)
        finally:
            for f in lists.values():
                f.cancel()

"""Typed resource descriptors: where each kind kdesched touches lives in the API, and how its JSON
becomes a model record and a request body.

Why a module of its own: the client's verbs (:mod:`kdesched.kube.verbs`) are generic, as
lightkube's are: they take a :class:`Resource` and never name a kind. Everything kind-specific is
data here (api path, plural, scope, the model parser) or a pure function building a body (an
Eviction, an events.k8s.io Event, DeleteOptions), so a new kind is one line in :data:`RESOURCES`
and the watch cache, the snapshot loader and the client agree on it. No I/O, no ``kubernetes``
import: what is here is tested without a server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kdesched.model.records import (
    Namespace,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
)

REPORTING_CONTROLLER = "kdesched.dev/descheduler"
EVENT_ACTION = "Descheduled"
MAX_EVENT_NOTE = 1024  # events.k8s.io/v1 validation limit for ``note``


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the API: ``/api/v1/...`` or ``/apis/<group>/<version>/...``; whether
    it is namespaced; ``from_api``: the model's parser of one raw object (None: kdesched keeps the
    kind as raw JSON)."""

    kind: str
    group_version: str
    plural: str
    namespaced: bool
    from_api: Callable[[Any], Any] | None = None

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if namespace is not None:
            if not self.namespaced:
                raise ValueError(f"{self.kind} is cluster-scoped: no namespace may be given")
            base += f"/namespaces/{quote(namespace, safe='')}"
        elif name is not None and self.namespaced:
            raise ValueError(f"{self.kind} {name!r} is namespaced: a namespace is required")
        path = f"{base}/{self.plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
            if subresource:
                path += f"/{subresource}"
        return path

    def scoped(self, namespace: str | None) -> str | None:
        """``namespace`` for a namespaced kind, None for a cluster-scoped one (whatever was given)."""
        return namespace if self.namespaced else None

    def typed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with ``kind`` and ``apiVersion`` filled in (a LIST's items and watch objects
        carry neither)."""
        obj.setdefault("kind", self.kind)
        obj.setdefault("apiVersion", self.group_version)
        return obj

    def body(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """A request body for ``obj``: its own fields over this kind's ``apiVersion`` and ``kind``."""
        return {"apiVersion": self.group_version, "kind": self.kind, **obj}


RESOURCES: dict[str, Resource] = {r.kind: r for r in (
    Resource("Node", "v1", "nodes", False, Node.from_api),
    Resource("Pod", "v1", "pods", True, Pod.from_api),
    Resource("Namespace", "v1", "namespaces", False, Namespace.from_api),
    Resource("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True, PersistentVolumeClaim.from_api),
    Resource("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True, PodDisruptionBudget.from_api),
    Resource("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", False, PriorityClass.from_api),
    Resource("Lease", "coordination.k8s.io/v1", "leases", True),
    Resource("Event", "events.k8s.io/v1", "events", True),
    Resource("Secret", "v1", "secrets", True),  # only the Prometheus token Secret (kdesched.kube.usage)
    # surge-first moves (kdesched.kube.owners): read one Deployment / ReplicaSet, write the Deployment's scale
    Resource("Deployment", "apps/v1", "deployments", True),
    Resource("ReplicaSet", "apps/v1", "replicasets", True),
)}


def resource_for(kind: str) -> Resource:
    try:
        return RESOURCES[kind]
    except KeyError:
        raise ValueError(f"unsupported kind {kind!r}; known kinds: {', '.join(sorted(RESOURCES))}") from None


def micro_time(when: datetime | None = None) -> str:
    """A ``metav1.MicroTime``: RFC 3339 in UTC with microseconds (``2026-01-02T03:04:05.000006Z``)."""
    when = (when or datetime.now(UTC)).astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_object_name(regarding: str) -> str:
    """An Event's name as client-go makes it: ``<object>.<unix nanos in hex>``."""
    return f"{regarding}.{time.time_ns():x}"


def delete_options(resource_version: str = "") -> dict[str, Any]:
    """A DELETE's body; with ``resource_version``, a precondition on it."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if resource_version:
        body["preconditions"] = {"resourceVersion": resource_version}
    return body


def eviction_body(namespace: str, name: str, *, uid: str | None, grace_period_seconds: int | None,
                  annotations: Mapping[str, str]) -> dict[str, Any]:
    """A policy/v1 Eviction of one pod; ``uid``: the precondition that it is still the pod judged."""
    options: dict[str, Any] = {}
    if grace_period_seconds is not None:
        options["gracePeriodSeconds"] = grace_period_seconds
    if uid:
        options["preconditions"] = {"uid": uid}
    body: dict[str, Any] = {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace, **({"annotations": dict(annotations)} if annotations else {})},
    }
    if options:
        body["deleteOptions"] = options
    return body


def event_body(*, namespace: str, name: str, uid: str | None, reason: str, note: str, event_type: str,
               action: str, kind: str, api_version: str, when: datetime, reporting_instance: str,
               event_name: str | None = None) -> dict[str, Any]:
    """An events.k8s.io/v1 Event regarding one object, as client-go's event recorder writes it."""
    regarding: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name}
    known = RESOURCES.get(kind)
    if known is not None and not known.namespaced:
        del regarding["namespace"]  # a Node's Event lives in the namespace given; the Node has none
    if uid:
        regarding["uid"] = uid
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        # client-go names events "<object>.<unix nanos in hex>"
        "metadata": {"name": event_name or event_object_name(name), "namespace": namespace},
        "eventTime": micro_time(when),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": reporting_instance[:128],
        "action": action, "reason": reason[:128], "note": note[:MAX_EVENT_NOTE], "type": event_type,
        "regarding": regarding,
    }


__all__ = ["EVENT_ACTION", "MAX_EVENT_NOTE", "REPORTING_CONTROLLER", "RESOURCES", "Resource", "delete_options",
           "event_body", "event_object_name", "eviction_body", "micro_time", "resource_for"]

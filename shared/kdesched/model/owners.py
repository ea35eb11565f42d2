"""The few fields of a Deployment and a ReplicaSet that a surge-first move decides on.

Why: a surge-first move (docs/safety.md, "Surge-first moves") scales a pod's owner up by one,
waits for the new pod, and scales it back; whether that is safe depends on the owner's strategy
(``maxSurge``), on whether a rollout is under way, on whether its ReplicaSet can create pods at all
(a ResourceQuota refuses them: the ``ReplicaFailure`` condition) and on the operator's opt-out.
The snapshot holds pods, not owners, so these are read one object at a time by the kube layer and
turned here into small frozen records, as every other API object is (:mod:`kdesched.model.records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# the field manager of kdesched's scale writes (``?fieldManager=``): the Deployment's managedFields then
# say whether spec.replicas is still kdesched's or was written since by someone else (an HPA, a person)
SURGE_MANAGER = "kdesched-surge"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class DeploymentInfo:
    """A Deployment as a surge-first move sees it (``resource_version`` makes the scale write conditional)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    observed_generation: int
    replicas: int  # spec.replicas (the scale subresource's value)
    status_replicas: int
    updated_replicas: int
    strategy: str  # RollingUpdate | Recreate
    max_surge: str  # as written ("25%", "1", "0"); "" when absent (the API server defaults 25%)
    paused: bool
    annotations: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[Condition, ...] = ()
    selector: str = ""  # spec.selector.matchLabels as a label selector ("" when it has matchExpressions only)
    # the field managers that own spec.replicas (metadata.managedFields); None when the object has no
    # managedFields at all (an API server or a record that does not keep them)
    replicas_managers: tuple[str, ...] | None = None

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def rolling_out(self) -> bool:
        """Is a rollout (or a change the controller has not acted on yet) under way?"""
        return (self.observed_generation < self.generation or self.updated_replicas != self.status_replicas
                or self.status_replicas != self.replicas)


@dataclass(frozen=True, slots=True)
class ReplicaSetInfo:
    namespace: str
    name: str
    owner_kind: str  # its controller's kind ("" = none)
    owner_name: str
    replicas: int
    conditions: tuple[Condition, ...] = ()

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


def _conditions(raw: Any) -> tuple[Condition, ...]:
    out = []
    for c in raw or ():
        if isinstance(c, Mapping):
            out.append(Condition(str(c.get("type") or ""), str(c.get("status") or ""), str(c.get("reason") or ""),
                                 str(c.get("message") or "")))
    return tuple(out)


def _int(raw: Any, default: int = 0) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else default


def deployment_from_json(obj: Mapping[str, Any]) -> DeploymentInfo:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    strategy = spec.get("strategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    surge = rolling.get("maxSurge")
    return DeploymentInfo(
        str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
        str(meta.get("resourceVersion") or ""), _int(meta.get("generation")), _int(status.get("observedGeneration")),
        _int(spec.get("replicas"), 1), _int(status.get("replicas")), _int(status.get("updatedReplicas")),
        str(strategy.get("type") or "RollingUpdate"), "" if surge is None else str(surge), bool(spec.get("paused")),
        {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}, _conditions(status.get("conditions")),
        _selector(spec.get("selector")), _replicas_managers(meta.get("managedFields")))


def _replicas_managers(raw: Any) -> tuple[str, ...] | None:
    """The managers whose managedFields entry owns ``f:spec.f:replicas`` (the scale subresource's
    entries included), or None without managedFields."""
    if not isinstance(raw, list) or not raw:
        return None
    out: list[str] = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            continue
        fields = entry.get("fieldsV1")
        spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
        if isinstance(spec, Mapping) and "f:replicas" in spec:
            out.append(str(entry.get("manager") or ""))
    return tuple(sorted(set(out)))


def _selector(raw: Any) -> str:
    labels = (raw or {}).get("matchLabels") if isinstance(raw, Mapping) else None
    if not isinstance(labels, Mapping):
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def replicaset_from_json(obj: Mapping[str, Any]) -> ReplicaSetInfo:
    meta = obj.get("metadata") or {}
    owner = next((o for o in meta.get("ownerReferences") or () if isinstance(o, Mapping) and o.get("controller")), {})
    return ReplicaSetInfo(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(owner.get("kind") or ""),
                          str(owner.get("name") or ""), _int((obj.get("spec") or {}).get("replicas"), 1),
                          _conditions((obj.get("status") or {}).get("conditions")))

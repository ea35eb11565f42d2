"""Immutable records for the objects decisions need, built once from raw API JSON.

Why: one parse per object, a few dozen fields, slots and tuples: this is what keeps a 150,000-pod
decision inside seconds and a bounded amount of memory. Each ``from_api`` raises
:class:`ModelError` naming the field that is wrong, so a bad cluster file gets a one-line error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from kdesched.model.errors import ModelError
from kdesched.model.quantity import QuantityError, to_resource_int
from kdesched.model.selectors import (
    NODE_OPERATORS,
    LabelSelector,
    Requirement,
    parse_int64,
    requirement_from_api,
)

Resources = Mapping[str, int]
"""Resource name -> integer amount: millicores for ``cpu``, whole units (bytes, count) otherwise."""

EMPTY: Mapping[str, str] = {}

# Annotations that matter to decisions; everything else (notably last-applied-configuration) is
# dropped to keep pods small.
# (pod-deletion-cost: the ReplicaSet's scale-down order, which a surge-first give-up must predict)
KEPT_ANNOTATION_PREFIXES = ("descheduler.alpha.kubernetes.io/", "kubernetes.io/config.", "kdesched.dev/",
                            "controller.kubernetes.io/pod-deletion-cost")


def parse_time(value: Any, where: str) -> datetime | None:
    """RFC 3339 time from the API (``2024-01-02T03:04:05Z``), or None."""
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise ModelError(where, f"must be an RFC 3339 time, got {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ModelError(where, f"must be an RFC 3339 time, got {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _map(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ModelError(where, "must be a map of string to string")
    return {str(k): "" if v is None else str(v) for k, v in raw.items()}


def _list(raw: Any, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ModelError(where, "must be a list")
    return raw


def _int(raw: Any, where: str, default: int | None = None) -> int | None:
    """An integer field (int32/int64 in the API): ``default`` when absent, else an int or a
    :class:`ModelError` naming ``where`` (a bool, "3" or 3.5 is not an integer to the API)."""
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ModelError(where, f"must be an integer, got {raw!r}")
    return raw


def _intstr(raw: Any) -> str:
    """An IntOrString field as text ("" when absent)."""
    return "" if raw is None or isinstance(raw, bool) else str(raw).strip()


def _name(meta: Mapping[str, Any]) -> str:
    name = meta.get("name")
    if name is None or name == "":
        raise ModelError("metadata.name", "is required")
    if not isinstance(name, str):
        raise ModelError("metadata.name", f"is required: a non-empty string, got {name!r}")
    return name


def _obj(raw: Any, where: str) -> Mapping[str, Any]:
    if raw is None:
        return EMPTY
    if not isinstance(raw, Mapping):
        raise ModelError(where, "must be an object")
    return raw


def parse_resources(raw: Any, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in _obj(raw, where).items():
        try:
            out[str(name)] = to_resource_int(str(name), value)
        except QuantityError as exc:
            raise ModelError(f"{where}.{name}", str(exc)) from None
    return out


def add_resources(into: dict[str, int], other: Resources) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def max_resources(into: dict[str, int], other: Resources) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


# --- taints and tolerations -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    @classmethod
    def from_api(cls, raw: Any, where: str) -> Taint:
        raw = _obj(raw, where)
        key = raw.get("key")
        if not isinstance(key, str) or not key:
            raise ModelError(f"{where}.key", "must be a non-empty string")
        effect = raw.get("effect")
        if effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ModelError(f"{where}.effect", f"must be NoSchedule, PreferNoSchedule or NoExecute, got {effect!r}")
        return cls(key, str(raw.get("value") or ""), effect)

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty = every effect

    @classmethod
    def from_api(cls, raw: Any, where: str) -> Toleration:
        raw = _obj(raw, where)
        op = raw.get("operator") or "Equal"
        if op not in ("Equal", "Exists", "Lt", "Gt"):
            raise ModelError(f"{where}.operator", f"must be Equal or Exists (or alpha Lt, Gt), got {op!r}")
        return cls(str(raw.get("key") or ""), op, str(raw.get("value") or ""), str(raw.get("effect") or ""))

    def tolerates(self, taint: Taint) -> bool:
        """The scheduler's ``ToleratesTaint``: effect, key, then operator."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator == "Equal":
            return self.value == taint.value
        if self.operator in ("Lt", "Gt"):  # alpha numeric tolerations (KEP-5471)
            have, want = parse_int64(taint.value), parse_int64(self.value)
            if have is None or want is None:
                return False
            return have < want if self.operator == "Lt" else have > want
        return False


def tolerates(tolerations: tuple[Toleration, ...], taint: Taint) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


# --- affinity -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed; a term with no requirements matches no node (API semantics)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.match_expressions and not self.match_fields:
            return False
        for req in self.match_expressions:
            if not req.matches(labels):
                return False
        for req in self.match_fields:
            if req.key != "metadata.name" or not req.matches({"metadata.name": node_name}):
                return False
        return True

    @classmethod
    def from_api(cls, raw: Any, where: str) -> NodeSelectorTerm:
        raw = _obj(raw, where)
        exprs = tuple(
            requirement_from_api(x, f"{where}.matchExpressions[{i}]", NODE_OPERATORS)
            for i, x in enumerate(_list(raw.get("matchExpressions"), f"{where}.matchExpressions"))
        )
        fields = []
        for i, x in enumerate(_list(raw.get("matchFields"), f"{where}.matchFields")):
            req = requirement_from_api(x, f"{where}.matchFields[{i}]", ("In", "NotIn"))
            # ValidateNodeFieldSelectorRequirement: the one supported field, exactly one value
            if req.key != "metadata.name":
                raise ModelError(f"{where}.matchFields[{i}].key", f"must be metadata.name, got {req.key!r}")
            if len(req.values) != 1:
                raise ModelError(f"{where}.matchFields[{i}].values", "must hold exactly one value for a field selector")
            fields.append(req)
        return cls(exprs, tuple(fields))


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term. ``label_selector`` None matches no pod."""

    label_selector: LabelSelector | None
    namespaces: tuple[str, ...]
    topology_key: str
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, raw: Any, where: str) -> PodAffinityTerm:
        raw = _obj(raw, where)
        sel = raw.get("labelSelector")
        nsel = raw.get("namespaceSelector")
        return cls(
            None if sel is None else LabelSelector.from_api(sel, f"{where}.labelSelector"),
            tuple(str(n) for n in _list(raw.get("namespaces"), f"{where}.namespaces")),
            str(raw.get("topologyKey") or ""),
            None if nsel is None else LabelSelector.from_api(nsel, f"{where}.namespaceSelector"),
            tuple(str(k) for k in _list(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys")),
            tuple(str(k) for k in _list(raw.get("mismatchLabelKeys"), f"{where}.mismatchLabelKeys")),
        )


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class Affinity:
    """The parts of ``spec.affinity`` descheduling reads.

    ``node_required`` is None when the pod has no required node affinity (not the same as an
    empty tuple, which matches no node).
    """

    node_required: tuple[NodeSelectorTerm, ...] | None = None
    node_preferred: tuple[PreferredTerm, ...] = ()
    pod_affinity_required: tuple[PodAffinityTerm, ...] = ()
    pod_affinity_preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    pod_anti_affinity_required: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity_preferred: tuple[WeightedPodAffinityTerm, ...] = ()

    @classmethod
    def from_api(cls, raw: Any, where: str) -> Affinity | None:
        if not raw:
            return None
        raw = _obj(raw, where)
        na = _obj(raw.get("nodeAffinity"), f"{where}.nodeAffinity")
        required = None
        req_raw = na.get("requiredDuringSchedulingIgnoredDuringExecution")
        if req_raw is not None:
            w = f"{where}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
            required = tuple(
                NodeSelectorTerm.from_api(t, f"{w}[{i}]")
                for i, t in enumerate(_list(_obj(req_raw, w).get("nodeSelectorTerms"), w))
            )
        wp = f"{where}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
        preferred = tuple(
            PreferredTerm(_int(_obj(p, f"{wp}[{i}]").get("weight"), f"{wp}[{i}].weight", 0) or 0,
                          NodeSelectorTerm.from_api(_obj(p, f"{wp}[{i}]").get("preference"), f"{wp}[{i}].preference"))
            for i, p in enumerate(_list(na.get("preferredDuringSchedulingIgnoredDuringExecution"), wp))
        )

        def pod_terms(block: str) -> tuple[tuple[PodAffinityTerm, ...], tuple[WeightedPodAffinityTerm, ...]]:
            b = _obj(raw.get(block), f"{where}.{block}")
            wr = f"{where}.{block}.requiredDuringSchedulingIgnoredDuringExecution"
            req = tuple(PodAffinityTerm.from_api(t, f"{wr}[{i}]")
                        for i, t in enumerate(_list(b.get("requiredDuringSchedulingIgnoredDuringExecution"), wr)))
            wpp = f"{where}.{block}.preferredDuringSchedulingIgnoredDuringExecution"
            pref = tuple(
                WeightedPodAffinityTerm(_int(_obj(t, f"{wpp}[{i}]").get("weight"), f"{wpp}[{i}].weight", 0) or 0,
                                        PodAffinityTerm.from_api(_obj(t, f"{wpp}[{i}]").get("podAffinityTerm"),
                                                                 f"{wpp}[{i}].podAffinityTerm"))
                for i, t in enumerate(_list(b.get("preferredDuringSchedulingIgnoredDuringExecution"), wpp))
            )
            return req, pref

        pa_req, pa_pref = pod_terms("podAffinity")
        paa_req, paa_pref = pod_terms("podAntiAffinity")
        return cls(required, preferred, pa_req, pa_pref, paa_req, paa_pref)


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: str | None = None  # Honor | Ignore (None = Honor)
    node_taints_policy: str | None = None  # Honor | Ignore (None = Ignore)
    match_label_keys: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, raw: Any, where: str) -> TopologySpreadConstraint:
        raw = _obj(raw, where)
        sel = raw.get("labelSelector")
        max_skew = _int(raw.get("maxSkew"), f"{where}.maxSkew", 1)
        return cls(
            max_skew if max_skew is not None else 1,
            str(raw.get("topologyKey") or ""),
            str(raw.get("whenUnsatisfiable") or "DoNotSchedule"),
            None if sel is None else LabelSelector.from_api(sel, f"{where}.labelSelector"),
            _int(raw.get("minDomains"), f"{where}.minDomains"),
            raw.get("nodeAffinityPolicy"),
            raw.get("nodeTaintsPolicy"),
            tuple(str(k) for k in _list(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys")),
        )


# --- pods ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class Volume:
    """A pod volume, reduced to its kind (``hostPath``, ``emptyDir``, ``persistentVolumeClaim``,
    ``ephemeral``, ``configMap``...) and, for PVCs, the claim name."""

    name: str
    kind: str
    claim_name: str = ""


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    name: str
    restart_count: int = 0
    waiting_reason: str = ""
    terminated_reason: str = ""
    terminated_exit_code: int | None = None
    # the last termination, as kubectl shows "Last State"
    last_terminated_reason: str = ""
    last_terminated_exit_code: int | None = None
    ready: bool = False

    @classmethod
    def from_api(cls, raw: Any, where: str) -> ContainerStatus:
        raw = _obj(raw, where)
        state = _obj(raw.get("state"), f"{where}.state")
        waiting = _obj(state.get("waiting"), f"{where}.state.waiting")
        term = _obj(state.get("terminated"), f"{where}.state.terminated")
        last = _obj(_obj(raw.get("lastState"), f"{where}.lastState").get("terminated"), f"{where}.lastState.terminated")
        return cls(
            str(raw.get("name") or ""),
            _int(raw.get("restartCount"), f"{where}.restartCount", 0) or 0,
            str(waiting.get("reason") or ""),
            str(term.get("reason") or ""),
            _int(term.get("exitCode"), f"{where}.state.terminated.exitCode"),
            str(last.get("reason") or ""),
            _int(last.get("exitCode"), f"{where}.lastState.terminated.exitCode"),
            bool(raw.get("ready")),
        )


@dataclass(frozen=True, slots=True)
class PodCondition:
    type: str
    status: str
    reason: str = ""
    last_transition_time: datetime | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Pod:
    """A pod as descheduling sees it. Compared and hashed by identity; ``key`` is ``ns/name``."""

    namespace: str
    name: str
    uid: str
    node_name: str
    phase: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_refs: tuple[OwnerRef, ...]
    priority: int | None
    priority_class_name: str
    qos_class: str  # BestEffort | Burstable | Guaranteed
    requests: Resources  # effective pod request (containers vs init containers, plus overhead)
    # resource names any container or init container requests explicitly (HighNodeUtilization's
    # OnlyThresholdingResources)
    requested_resource_names: frozenset[str]
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str]
    affinity: Affinity | None
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...]
    volumes: tuple[Volume, ...]
    images: tuple[str, ...]  # spec.containers images, in spec order
    container_statuses: tuple[ContainerStatus, ...]
    init_container_statuses: tuple[ContainerStatus, ...]
    ephemeral_container_statuses: tuple[ContainerStatus, ...]
    conditions: tuple[PodCondition, ...]
    status_reason: str
    start_time: datetime | None
    creation_time: datetime | None
    deletion_time: datetime | None
    has_resource_claims: bool = False
    scheduler_name: str = "default-scheduler"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def terminating(self) -> bool:
        return self.deletion_time is not None

    def __repr__(self) -> str:
        return f"Pod({self.key} on {self.node_name or '-'})"

    @classmethod
    def from_api(cls, raw: Any) -> Pod:
        if not isinstance(raw, Mapping):
            raise ModelError("", "a Pod must be an object")
        meta = _obj(raw.get("metadata"), "metadata")
        name = _name(meta)
        namespace = str(meta.get("namespace") or "default")
        spec = _obj(raw.get("spec"), "spec")
        status = _obj(raw.get("status"), "status")
        annotations = {
            k: v for k, v in _map(meta.get("annotations"), "metadata.annotations").items()
            if k.startswith(KEPT_ANNOTATION_PREFIXES)
        }
        owners = tuple(
            OwnerRef(str(_obj(o, f"metadata.ownerReferences[{i}]").get("kind") or ""), str(o.get("name") or ""),
                     str(o.get("uid") or ""), bool(o.get("controller")))
            for i, o in enumerate(_list(meta.get("ownerReferences"), "metadata.ownerReferences"))
        )
        containers = _list(spec.get("containers"), "spec.containers")
        init_containers = _list(spec.get("initContainers"), "spec.initContainers")
        requests, names, qos = _pod_requests(spec, containers, init_containers)
        priority = spec.get("priority")
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise ModelError("spec.priority", f"must be an integer, got {priority!r}")
        volumes = []
        for i, v in enumerate(_list(spec.get("volumes"), "spec.volumes")):
            v = _obj(v, f"spec.volumes[{i}]")
            kind = next((k for k in v if k != "name"), "")
            claim = ""
            if kind == "persistentVolumeClaim":
                claim = str(_obj(v[kind], f"spec.volumes[{i}].persistentVolumeClaim").get("claimName") or "")
            volumes.append(Volume(str(v.get("name") or ""), kind, claim))
        conditions = tuple(
            PodCondition(str(_obj(c, f"status.conditions[{i}]").get("type") or ""), str(c.get("status") or ""),
                         str(c.get("reason") or ""),
                         parse_time(c.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime"))
            for i, c in enumerate(_list(status.get("conditions"), "status.conditions"))
        )
        return cls(
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            node_name=str(spec.get("nodeName") or ""),
            phase=str(status.get("phase") or "Pending"),
            labels=_map(meta.get("labels"), "metadata.labels"),
            annotations=annotations,
            owner_refs=owners,
            priority=priority,
            priority_class_name=str(spec.get("priorityClassName") or ""),
            qos_class=str(status.get("qosClass") or qos),
            requests=requests,
            requested_resource_names=names,
            tolerations=tuple(Toleration.from_api(t, f"spec.tolerations[{i}]")
                              for i, t in enumerate(_list(spec.get("tolerations"), "spec.tolerations"))),
            node_selector=_map(spec.get("nodeSelector"), "spec.nodeSelector"),
            affinity=Affinity.from_api(spec.get("affinity"), "spec.affinity"),
            topology_spread_constraints=tuple(
                TopologySpreadConstraint.from_api(c, f"spec.topologySpreadConstraints[{i}]")
                for i, c in enumerate(_list(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"))
            ),
            volumes=tuple(volumes),
            images=tuple(str(_obj(c, f"spec.containers[{i}]").get("image") or "") for i, c in enumerate(containers)),
            container_statuses=tuple(ContainerStatus.from_api(c, f"status.containerStatuses[{i}]")
                                     for i, c in enumerate(_list(status.get("containerStatuses"), "status.containerStatuses"))),
            init_container_statuses=tuple(
                ContainerStatus.from_api(c, f"status.initContainerStatuses[{i}]")
                for i, c in enumerate(_list(status.get("initContainerStatuses"), "status.initContainerStatuses"))),
            ephemeral_container_statuses=tuple(
                ContainerStatus.from_api(c, f"status.ephemeralContainerStatuses[{i}]")
                for i, c in enumerate(_list(status.get("ephemeralContainerStatuses"), "status.ephemeralContainerStatuses"))),
            conditions=conditions,
            status_reason=str(status.get("reason") or ""),
            start_time=parse_time(status.get("startTime"), "status.startTime"),
            creation_time=parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
            deletion_time=parse_time(meta.get("deletionTimestamp"), "metadata.deletionTimestamp"),
            has_resource_claims=bool(spec.get("resourceClaims")),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        )


def positional_constructor(cls: type[Any]) -> Callable[..., Any]:
    """A constructor of the frozen, slotted dataclass ``cls`` taking every field positionally, in
    field order, several times faster than ``cls(...)`` (docs/benchmarks.md, "Figures behind the
    code").

    Why: a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (29
    calls per Pod, a good part of a large load). Here a plain twin class with the very same
    ``__slots__`` (so the same memory layout) is filled with ordinary attribute stores, then
    becomes a ``cls`` by ``__class__`` assignment, which CPython allows exactly between classes of
    identical slot layout. The result is an ordinary, frozen ``cls`` instance: same fields, same
    class, same behaviour. No ``__post_init__`` or field defaults run, so ``cls`` must have none
    that matters (every field is passed)."""
    names = [f.name for f in fields(cls)]
    if tuple(names) != tuple(getattr(cls, "__slots__", ())) or "__post_init__" in vars(cls):
        raise TypeError(f"{cls.__name__}: not a slotted dataclass without __post_init__")
    code = (f"def __init__(self, {', '.join(names)}):\n" + "".join(f"    self.{n} = {n}\n" for n in names)
            + f"def build({', '.join(names)}):\n    obj = Draft({', '.join(names)})\n"
            + "    obj.__class__ = cls\n    return obj\n")
    space: dict[str, Any] = {"cls": cls}
    exec(code, space)  # noqa: S102 - generated from the dataclass's own field names, as dataclasses does
    space["Draft"] = type(f"_{cls.__name__}Draft", (), {"__slots__": cls.__slots__, "__init__": space["__init__"]})
    build: Callable[..., Any] = space["build"]
    build.__doc__ = f"{cls.__name__}(*every field in order), built fast (records.positional_constructor)"
    return build


new_pod: Callable[..., Pod] = positional_constructor(Pod)
"""``Pod(*every field in field order)``, fast: the msgspec loader builds 150,000 of them."""


def _container_resources(c: Any, where: str) -> tuple[dict[str, int], dict[str, int]]:
    """A container's requests (defaulted from its limits, as ``SetDefaults_Pod`` does: a resource
    with a limit and no request requests its limit) and its limits."""
    res = _obj(_obj(c, where).get("resources"), f"{where}.resources")
    req = parse_resources(res.get("requests"), f"{where}.resources.requests")
    lim = parse_resources(res.get("limits"), f"{where}.resources.limits")
    for name, value in lim.items():
        req.setdefault(name, value)
    return req, lim


def _pod_requests(spec: Mapping[str, Any], containers: list[Any],
                  init_containers: list[Any]) -> tuple[dict[str, int], frozenset[str], str]:
    """Kubernetes' effective pod request (``resourcehelper.PodRequests``), the names any
    container requests, and the QoS class (``qos.ComputePodQOS``).

    Regular containers are summed; restartable init containers (sidecars) run beside them and
    are added too; each ordinary init container needs its own request plus the sidecars started
    before it; the pod needs the max of the two; then the RuntimeClass overhead is added. A
    pod-level ``spec.resources.requests`` (PodLevelResources) overrides cpu and memory. Requests
    default to limits first, as the API server does before it stores a pod.
    """
    total: dict[str, int] = {}
    names: set[str] = set()
    per_container: list[tuple[dict[str, int], dict[str, int]]] = []
    for i, c in enumerate(containers):
        req, lim = _container_resources(c, f"spec.containers[{i}]")
        per_container.append((req, lim))
        add_resources(total, req)
        names.update(req)
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for i, c in enumerate(init_containers):
        req, lim = _container_resources(c, f"spec.initContainers[{i}]")
        per_container.append((req, lim))
        names.update(req)
        if _obj(c, f"spec.initContainers[{i}]").get("restartPolicy") == "Always":
            add_resources(total, req)
            add_resources(sidecars, req)
            max_resources(init_max, sidecars)
        else:
            step = dict(req)
            add_resources(step, sidecars)
            max_resources(init_max, step)
    max_resources(total, init_max)
    pod_res = _obj(spec.get("resources"), "spec.resources")
    pod_req = parse_resources(pod_res.get("requests"), "spec.resources.requests")
    pod_lim = parse_resources(pod_res.get("limits"), "spec.resources.limits")
    for name in _POD_LEVEL:
        # defaultPodRequests: a pod-level limit without a pod-level request defaults it to the
        # containers' aggregate request, or to the limit where no container requests it.
        if name not in pod_req and name in pod_lim:
            pod_req[name] = total.get(name) or pod_lim[name]
    for name in _POD_LEVEL:
        if name in pod_req:
            total[name] = pod_req[name]
            names.add(name)
    add_resources(total, parse_resources(spec.get("overhead"), "spec.overhead"))
    if pod_req or pod_lim:
        qos = _qos([({k: v for k, v in pod_req.items() if k in _POD_LEVEL}, pod_lim)])
    else:
        qos = _qos(per_container)
    return {k: v for k, v in total.items() if v}, frozenset(names), qos


_POD_LEVEL = ("cpu", "memory")


def _qos(parts: list[tuple[dict[str, int], dict[str, int]]]) -> str:
    """``ComputePodQOS`` over (requests, limits) of every container (or the pod level): cpu and
    memory only, positive amounts only; Guaranteed needs a cpu and a memory limit on every part
    and the summed requests equal to the summed limits."""
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for req, lim in parts:
        for name in _POD_LEVEL:
            if req.get(name, 0) > 0:
                requests[name] = requests.get(name, 0) + req[name]
            if lim.get(name, 0) > 0:
                limits[name] = limits.get(name, 0) + lim[name]
        if not all(lim.get(name, 0) > 0 for name in _POD_LEVEL):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


# --- nodes and the rest ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    name: str
    uid: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool  # False only when a Ready condition exists with status != True (upstream rule)
    allocatable: Resources  # allocatable, or capacity where allocatable is empty
    creation_time: datetime | None = None
    resource_version: str = ""
    # when a manager last wrote the node's taints / labels (metadata.managedFields, the API server's
    # clock, epoch seconds, whole seconds); None when the object carries no such entry
    taints_written_at: float | None = None
    labels_written_at: float | None = None

    def __repr__(self) -> str:
        return f"Node({self.name})"

    @classmethod
    def from_api(cls, raw: Any) -> Node:
        if not isinstance(raw, Mapping):
            raise ModelError("", "a Node must be an object")
        meta = _obj(raw.get("metadata"), "metadata")
        name = _name(meta)
        spec = _obj(raw.get("spec"), "spec")
        status = _obj(raw.get("status"), "status")
        ready = True
        for i, c in enumerate(_list(status.get("conditions"), "status.conditions")):
            c = _obj(c, f"status.conditions[{i}]")
            if c.get("type") == "Ready":
                ready = c.get("status") == "True"
        allocatable = parse_resources(status.get("allocatable"), "status.allocatable") or parse_resources(
            status.get("capacity"), "status.capacity")
        return cls(
            name=name,
            uid=str(meta.get("uid") or ""),
            labels=_map(meta.get("labels"), "metadata.labels"),
            taints=tuple(Taint.from_api(t, f"spec.taints[{i}]") for i, t in enumerate(_list(spec.get("taints"), "spec.taints"))),
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            allocatable=allocatable,
            creation_time=parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
            resource_version=str(meta.get("resourceVersion") or ""),
            taints_written_at=written_at(meta.get("managedFields"), "f:spec", "f:taints"),
            labels_written_at=written_at(meta.get("managedFields"), "f:metadata", "f:labels"),
        )


def written_at(managed: Any, section: str, leaf: str) -> float | None:
    """The latest ``time`` of the ``metadata.managedFields`` entries that own ``section.leaf`` of
    the object itself (not a subresource), epoch seconds; None when none does. The API server sets
    these entries, and validates them, so an entry this cannot read is skipped: it only ever
    delays a run by seconds (kdesched.admission.fresh_change), it never decides one."""
    latest: float | None = None
    for entry in managed if isinstance(managed, list) else ():
        if not isinstance(entry, Mapping) or entry.get("subresource"):
            continue
        fields = entry.get("fieldsV1")
        owned = fields.get(section) if isinstance(fields, Mapping) else None
        if not isinstance(owned, Mapping) or leaf not in owned:
            continue
        try:
            at = parse_time(entry.get("time"), "metadata.managedFields[].time")
        except ModelError:
            continue
        if at is not None:
            latest = at.timestamp() if latest is None else max(latest, at.timestamp())
    return latest


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector | None  # None selects no pod; {} selects every pod in the namespace
    disruptions_allowed: int | None  # status.disruptionsAllowed; None when status is unknown
    expected_pods: int | None = None
    # status.currentHealthy / desiredHealthy: the Eviction API lets a not-Ready pod go without
    # spending the budget while currentHealthy >= desiredHealthy > 0 (evictor/planner.py)
    current_healthy: int | None = None
    desired_healthy: int | None = None
    # spec.minAvailable / spec.maxUnavailable as written ("" when absent): whether one pod more lets
    # the budget allow an eviction (surge-first moves, kdesched.evictor.surge)
    min_available: str = ""
    max_unavailable: str = ""
    # metadata.generation / status.observedGeneration: while the disruption controller has not
    # caught up with a spec change, the Eviction API refuses every eviction the budget would count
    # ("still being processed by the server", 429) whatever disruptionsAllowed says
    generation: int | None = None
    observed_generation: int | None = None

    @property
    def stale(self) -> bool:
        """Is its status older than its spec (the Eviction API refuses what it would count)?"""
        return (self.generation is not None and self.observed_generation is not None
                and self.observed_generation < self.generation)

    @property
    def seen_by_eviction_api(self) -> bool:
        """The Eviction API ignores a PDB whose selector is empty ("it should match nothing, not
        everything"), though the disruption controller and the descheduler's PodsWithoutPDB count it."""
        return self.selector is not None and not self.selector.empty

    @classmethod
    def from_api(cls, raw: Any) -> PodDisruptionBudget:
        raw = _obj(raw, "")
        meta = _obj(raw.get("metadata"), "metadata")
        name = _name(meta)
        spec = _obj(raw.get("spec"), "spec")
        status = _obj(raw.get("status"), "status")
        sel = spec.get("selector")
        allowed = status.get("disruptionsAllowed")
        return cls(
            str(meta.get("namespace") or "default"), name,
            None if sel is None else LabelSelector.from_api(sel, "spec.selector"),
            _int(allowed, "status.disruptionsAllowed"),
            _int(status.get("expectedPods"), "status.expectedPods"),
            _int(status.get("currentHealthy"), "status.currentHealthy"),
            _int(status.get("desiredHealthy"), "status.desiredHealthy"),
            _intstr(spec.get("minAvailable")), _intstr(spec.get("maxUnavailable")),
            _int(meta.get("generation"), "metadata.generation"),
            _int(status.get("observedGeneration"), "status.observedGeneration"),
        )

    def selects(self, pod: Pod) -> bool:
        return self.selector is not None and pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int

    @classmethod
    def from_api(cls, raw: Any) -> PriorityClass:
        raw = _obj(raw, "")
        name = _name(_obj(raw.get("metadata"), "metadata"))
        value = raw.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError("value", f"must be an integer, got {value!r}")
        return cls(name, value)


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_api(cls, raw: Any) -> Namespace:
        raw = _obj(raw, "")
        meta = _obj(raw.get("metadata"), "metadata")
        name = _name(meta)
        return cls(name, _map(meta.get("labels"), "metadata.labels"))


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    storage_class_name: str  # "" when the claim names no class

    @classmethod
    def from_api(cls, raw: Any) -> PersistentVolumeClaim:
        raw = _obj(raw, "")
        meta = _obj(raw.get("metadata"), "metadata")
        name = _name(meta)
        spec = _obj(raw.get("spec"), "spec")
        return cls(str(meta.get("namespace") or "default"), name, str(spec.get("storageClassName") or ""))

"""Snapshot files checked as the API server checks objects, before anything is decided on them.

Why: a cluster snapshot is hand-edited, generated or truncated far more often than a live LIST,
and the record parsers are lenient where the API server is strict (``str(123)`` is a fine node
name to Python). Deciding on an object the API server would refuse gives a plan no cluster can
produce: a pod counted twice changes a duplicate count, ``affinity: []`` silently means "no
affinity". So every field kdesched reads is checked here with the API server's own rules
(``k8s.io/apimachinery/pkg/util/validation`` and ``pkg/apis/core/validation``), *all* problems of
a file are collected (up to :data:`SHOWN` shown, then a count) and the file is refused as a whole:
never a partial decision.

Only snapshot files are checked (:mod:`kdesched.model.files`, :mod:`kdesched.model.fastload`):
objects from a live API server were validated by it already, and the tests' builders make
minimal objects on purpose. Two concessions to hand-written files, both documented in
docs/cli.md: ``apiVersion`` may be left out (when given it must be the kind's), and so may
``metadata.namespace`` (``default``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kdesched.model.errors import ModelError
from kdesched.model.names import SUBDOMAIN_PATTERN, dns_label_problem, dns_subdomain_problem
from kdesched.model.records import Pod

SHOWN = 20
"""Problems listed in one error; the rest are counted."""

# names joined by newlines, checked in one match (kdesched.model.names holds the one DNS rule)
_DNS_SUBDOMAINS = re.compile(rf"{SUBDOMAIN_PATTERN}(\n{SUBDOMAIN_PATTERN})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_VALUES = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?(\n(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?)*")
_PERCENT = re.compile(r"[0-9]+%")

POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
API_VERSIONS: Mapping[str, tuple[str, ...]] = {
    "Pod": ("v1",), "Node": ("v1",), "Namespace": ("v1",), "PersistentVolumeClaim": ("v1",),
    "PodDisruptionBudget": ("policy/v1", "policy/v1beta1"),
    "PriorityClass": ("scheduling.k8s.io/v1", "scheduling.k8s.io/v1beta1"),
}
CLUSTER_SCOPED = ("Node", "PriorityClass", "Namespace")
POLICY_KINDS = ("DeschedulerPolicy", "KubeDescheduler", "Profiles", "ModuleConfig")
INT32 = (-(1 << 31), (1 << 31) - 1)

Problem = tuple[str, str]
"""(field, message)"""


# --- JSON objects with a key twice -------------------------------------------------------------------


class DuplicateKey(ValueError):
    """A JSON object with a key twice (raised by :func:`object_pairs`)."""


def object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of the snapshot's JSON readers: an object, refusing a key given twice
    (readers disagree on which value wins; YAML mappings get the same rule in
    :mod:`kdesched.model.files`)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"duplicate key {key!r} in an object")
            seen.add(key)
    return obj


# --- the API server's name rules (k8s.io/apimachinery/pkg/util/validation) -------------------------
# (DNS labels and subdomains: kdesched.model.names)


def qualified_name_problem(value: str) -> str | None:
    """IsQualifiedName: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or dns_subdomain_problem(prefix) is not None):
        return f"the prefix of {value!r} must be a DNS subdomain"
    if not name or len(name) > 63 or _QUALIFIED_NAME.fullmatch(name) is None:
        return (f"must be a qualified name (at most 63 characters of letters, digits, '-', '_' and '.', starting "
                f"and ending with a letter or digit, with an optional DNS subdomain prefix and '/'), got {value!r}")
    return None


def label_value_problem(value: str) -> str | None:
    """IsValidLabelValue: empty, or at most 63 characters like a qualified name."""
    if len(value) > 63 or _LABEL_VALUE.fullmatch(value) is None:
        return (f"must be a label value (empty, or at most 63 characters of letters, digits, '-', '_' and '.', "
                f"starting and ending with a letter or digit), got {value!r}")
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- the per-kind rules on raw objects -------------------------------------------------------------


class _Checks:
    """The problems of one raw object, field by field."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out: list[Problem] = []

    def add(self, field: str, message: str) -> None:
        self.out.append((field, message))

    def obj(self, raw: Any, field: str, required: bool = False) -> Mapping[str, Any]:
        if raw is None:
            if required:
                self.add(field, "is required")
            return {}
        if not isinstance(raw, Mapping):
            self.add(field, f"must be an object, got {type(raw).__name__} {_shown(raw)}")
            return {}
        return raw

    def list(self, raw: Any, field: str) -> list[Any]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.add(field, f"must be a list, got {type(raw).__name__} {_shown(raw)}")
            return []
        return raw

    def string(self, raw: Any, field: str, required: bool = False) -> str | None:
        if raw is None or (required and raw == ""):
            if required:
                self.add(field, "is required")
            return None
        if not isinstance(raw, str):
            self.add(field, f"must be a string, got {type(raw).__name__} {_shown(raw)}")
            return None
        return raw

    def boolean(self, raw: Any, field: str) -> None:
        if raw is not None and not isinstance(raw, bool):
            self.add(field, f"must be true or false, got {_shown(raw)}")

    def integer(self, raw: Any, field: str, low: int = INT32[0], high: int = INT32[1]) -> None:
        if raw is None:
            return
        if isinstance(raw, bool) or not isinstance(raw, int):
            self.add(field, f"must be an integer, got {_shown(raw)}")
        elif not low <= raw <= high:
            self.add(field, f"must be from {low} to {high}, got {raw}")

    def one_of(self, raw: Any, field: str, allowed: tuple[str, ...]) -> None:
        if raw is None:
            return
        if raw not in allowed:
            self.add(field, f"must be one of {', '.join(allowed)}, got {_shown(raw)}")

    def name(self, raw: Any, field: str, label: bool = False) -> None:
        value = self.string(raw, field, required=True)
        if value is not None:
            problem = dns_label_problem(value) if label else dns_subdomain_problem(value)
            if problem:
                self.add(field, problem)

    def string_map(self, raw: Any, field: str, labels: bool = False) -> None:
        for key, value in self.obj(raw, field).items():
            if not isinstance(key, str):
                self.add(field, f"keys must be strings, got {_shown(key)}")
                continue
            if not isinstance(value, str):
                self.add(f"{field}[{key}]", f"must be a string, got {type(value).__name__} {_shown(value)}")
                continue
            if labels:
                problem = qualified_name_problem(key)
                if problem:
                    self.add(f"{field}[{key}]", f"key {problem}")
                problem = label_value_problem(value)
                if problem:
                    self.add(f"{field}[{key}]", problem)

    def metadata(self, raw: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
        meta = self.obj(raw.get("metadata"), "metadata", required=True)
        self.name(meta.get("name"), "metadata.name", label=kind == "Namespace")
        if kind not in CLUSTER_SCOPED and meta.get("namespace") not in (None, ""):  # absent: default
            self.name(meta.get("namespace"), "metadata.namespace", label=True)
        self.string(meta.get("uid"), "metadata.uid")
        self.string(meta.get("resourceVersion"), "metadata.resourceVersion")
        self.string_map(meta.get("labels"), "metadata.labels", labels=True)
        self.string_map(meta.get("annotations"), "metadata.annotations")
        return meta

    def owner_references(self, meta: Mapping[str, Any]) -> None:
        for i, ref in enumerate(self.list(meta.get("ownerReferences"), "metadata.ownerReferences")):
            at = f"metadata.ownerReferences[{i}]"
            ref = self.obj(ref, at)
            for key in ("apiVersion", "kind", "name", "uid"):
                self.string(ref.get(key), f"{at}.{key}", required=True)
            self.boolean(ref.get("controller"), f"{at}.controller")

    def containers(self, spec: Mapping[str, Any], key: str, required: bool) -> None:
        items = self.list(spec.get(key), f"spec.{key}")
        if required and not items and (spec.get(key) is None or isinstance(spec.get(key), list)):
            self.add(f"spec.{key}", "must list at least one container")
        for i, c in enumerate(items):
            at = f"spec.{key}[{i}]"
            c = self.obj(c, at)
            self.name(c.get("name"), f"{at}.name", label=True)
            self.string(c.get("image"), f"{at}.image")
            self.string(c.get("restartPolicy"), f"{at}.restartPolicy")
            res = self.obj(c.get("resources"), f"{at}.resources")
            self.obj(res.get("requests"), f"{at}.resources.requests")
            self.obj(res.get("limits"), f"{at}.resources.limits")

    def container_names_once(self, spec: Mapping[str, Any]) -> None:
        """Container names are unique across a Pod's containers and initContainers (the API
        server's ``Duplicate value``)."""
        first: dict[str, str] = {}
        for key in ("containers", "initContainers"):
            items = spec.get(key)
            for i, c in enumerate(items if isinstance(items, list) else ()):
                name = c.get("name") if isinstance(c, Mapping) else None
                if not isinstance(name, str) or not name:
                    continue  # reported by containers()
                at = f"spec.{key}[{i}].name"
                if name in first:
                    self.add(at, f"Duplicate value: {name!r} (the name of {first[name]}); container names are "
                                 f"unique in a Pod")
                else:
                    first[name] = at

    def pod(self, raw: Mapping[str, Any]) -> None:
        meta = self.metadata(raw, "Pod")
        self.owner_references(meta)
        spec = self.obj(raw.get("spec"), "spec", required=True)
        if isinstance(raw.get("spec"), Mapping):  # a missing spec is one problem, not two
            self.containers(spec, "containers", required=True)
            self.containers(spec, "initContainers", required=False)
            self.container_names_once(spec)
        node_name = self.string(spec.get("nodeName"), "spec.nodeName")
        if node_name:
            problem = dns_subdomain_problem(node_name)
            if problem:
                self.add("spec.nodeName", problem)
        for key in ("priorityClassName", "schedulerName"):
            self.string(spec.get(key), f"spec.{key}")
        self.integer(spec.get("priority"), "spec.priority")
        self.string_map(spec.get("nodeSelector"), "spec.nodeSelector")
        self.obj(spec.get("affinity"), "spec.affinity")
        for i, t in enumerate(self.list(spec.get("tolerations"), "spec.tolerations")):
            at = f"spec.tolerations[{i}]"
            t = self.obj(t, at)
            for key in ("key", "operator", "value"):
                self.string(t.get(key), f"{at}.{key}")
            if t.get("effect") not in (None, ""):
                self.one_of(t.get("effect"), f"{at}.effect", TAINT_EFFECTS)
        for i, c in enumerate(self.list(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints")):
            self.obj(c, f"spec.topologySpreadConstraints[{i}]")
        for i, v in enumerate(self.list(spec.get("volumes"), "spec.volumes")):
            v = self.obj(v, f"spec.volumes[{i}]")
            self.string(v.get("name"), f"spec.volumes[{i}].name", required=True)
        status = self.obj(raw.get("status"), "status")
        if status.get("phase") not in (None, ""):
            self.one_of(status.get("phase"), "status.phase", POD_PHASES)
        if status.get("qosClass") not in (None, ""):
            self.one_of(status.get("qosClass"), "status.qosClass", QOS_CLASSES)
        self.string(status.get("reason"), "status.reason")

    def node(self, raw: Mapping[str, Any]) -> None:
        self.metadata(raw, "Node")
        spec = self.obj(raw.get("spec"), "spec")
        self.boolean(spec.get("unschedulable"), "spec.unschedulable")
        for i, t in enumerate(self.list(spec.get("taints"), "spec.taints")):
            at = f"spec.taints[{i}]"
            t = self.obj(t, at)
            key = self.string(t.get("key"), f"{at}.key", required=True)
            if key:
                problem = qualified_name_problem(key)
                if problem:
                    self.add(f"{at}.key", problem)
            self.string(t.get("value"), f"{at}.value")
        status = self.obj(raw.get("status"), "status")
        for i, c in enumerate(self.list(status.get("conditions"), "status.conditions")):
            c = self.obj(c, f"status.conditions[{i}]")
            self.string(c.get("type"), f"status.conditions[{i}].type", required=True)
            self.string(c.get("status"), f"status.conditions[{i}].status")

    def int_or_percent(self, raw: Any, field: str) -> None:
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            self.add(field, f"must be an integer or a percentage, got {_shown(raw)}")
        elif isinstance(raw, int):
            if raw < 0:
                self.add(field, f"must be greater than or equal to 0, got {raw}")
        elif _PERCENT.fullmatch(raw) is None:
            self.add(field, f"must be an integer or a percentage like '50%', got {raw!r}")
        elif int(raw[:-1]) > 100:
            self.add(field, f"must not be greater than 100%, got {raw!r}")

    def pdb(self, raw: Mapping[str, Any]) -> None:
        self.metadata(raw, "PodDisruptionBudget")
        spec = self.obj(raw.get("spec"), "spec")
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            self.add("spec", "minAvailable and maxUnavailable cannot both be set")
        for key in ("minAvailable", "maxUnavailable"):
            if spec.get(key) is not None:
                self.int_or_percent(spec[key], f"spec.{key}")
        self.obj(spec.get("selector"), "spec.selector")

    def priority_class(self, raw: Mapping[str, Any]) -> None:
        self.metadata(raw, "PriorityClass")
        if raw.get("value") is None:
            self.add("value", "is required")
        self.integer(raw.get("value"), "value")

    def namespace(self, raw: Mapping[str, Any]) -> None:
        self.metadata(raw, "Namespace")

    def pvc(self, raw: Mapping[str, Any]) -> None:
        self.metadata(raw, "PersistentVolumeClaim")
        spec = self.obj(raw.get("spec"), "spec")
        self.string(spec.get("storageClassName"), "spec.storageClassName")


_KIND_CHECKS = {
    "Pod": _Checks.pod, "Node": _Checks.node, "PodDisruptionBudget": _Checks.pdb,
    "PriorityClass": _Checks.priority_class, "Namespace": _Checks.namespace, "PersistentVolumeClaim": _Checks.pvc,
}


_KINDS_BY_LOWER = {kind.lower(): kind for kind in _KIND_CHECKS}


def object_problems(kind: str, raw: Mapping[str, Any]) -> list[Problem]:
    """Every problem of one raw object of a kind kdesched reads (none for other kinds)."""
    check = _KIND_CHECKS.get(kind)
    if check is None:
        return []
    checks = _Checks()
    api_version = raw.get("apiVersion")
    if api_version is not None and api_version not in API_VERSIONS[kind]:
        checks.add("apiVersion", f"must be {' or '.join(API_VERSIONS[kind])} for a {kind}, got {_shown(api_version)}")
    check(checks, raw)
    return checks.out


# --- the same rules on the Pod records the fast path built ------------------------------------------


class GiveUp(Exception):
    """The fast path met a Pod record it cannot vouch for: the ordinary loader must read the file
    (it reports every problem, in order, with the same words)."""


class _FastPods:
    """The checks left for the Pod records the fast path built, done the cheap way for 150,000
    pods. msgspec already checked in C what it can while decoding (phase and qosClass among their
    values, priority an int32, owner references with apiVersion, kind, name and uid, container
    names present: :mod:`kdesched.model.fastload`); what it cannot type (apiVersion, spec
    present, affinity an object, toleration effects) sent the pod here as a dict. Here: node names
    against those seen valid, and everything else gathered and checked once at the end (names and
    label values by one regular expression over them all, label keys once each, duplicates by one
    set). Any doubt raises :class:`GiveUp`."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.namespaces: list[str] = []
        self.uids: list[str] = []
        self.label_keys: list[str] = []
        self.label_values: list[str] = []
        self.node_names: set[str] = set()

    def check(self, pod: Pod) -> None:
        node = pod.node_name
        if not pod.images:  # (phase, qosClass, priority, owners, container names: msgspec checked them)
            raise GiveUp
        labels = pod.labels
        if labels:  # checked at the end, each distinct key and value once
            self.label_keys.extend(labels)
            self.label_values.extend(labels.values())
        if node and node not in self.node_names:
            if dns_subdomain_problem(node):
                raise GiveUp
            self.node_names.add(node)
        self.names.append(pod.name)  # self.add(), inline
        self.namespaces.append(pod.namespace)
        if pod.uid:
            self.uids.append(pod.uid)

    def add(self, namespace: str, name: str, uid: str) -> None:
        self.names.append(name)
        self.namespaces.append(namespace)
        if uid:
            self.uids.append(uid)

    def finish(self) -> None:
        """The checks of all pods at once: names, namespaces, no pod twice, no uid twice."""
        names = self.names
        if names:
            joined = "\n".join(names)
            if (max(map(len, names)) > 253 or joined.count("\n") != len(names) - 1
                    or _DNS_SUBDOMAINS.fullmatch(joined) is None):
                raise GiveUp
        if any(dns_label_problem(ns) for ns in set(self.namespaces)):
            raise GiveUp
        if any(qualified_name_problem(key) for key in set(self.label_keys)):
            raise GiveUp
        values = set(self.label_values)
        if values:
            joined = "\n".join(values)
            if (max(map(len, values)) > 63 or joined.count("\n") != len(values) - 1
                    or _LABEL_VALUES.fullmatch(joined) is None):
                raise GiveUp
        if len(set(self.uids)) != len(self.uids):
            raise GiveUp
        if len(set(names)) != len(names) and len(set(zip(self.namespaces, names, strict=True))) != len(names):
            raise GiveUp  # (a name twice in one namespace; names alone are cheaper and usually unique)


# --- a whole file ----------------------------------------------------------------------------------


def object_label(kind: str, raw: Mapping[str, Any] | Pod) -> str:
    """``Kind name in namespace`` (``Kind name`` for cluster-scoped kinds) for messages."""
    if type(raw) is Pod:
        return f"Pod {raw.name or '?'} in {raw.namespace}"
    assert isinstance(raw, Mapping)
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    name = name if isinstance(name, str) and name else "?"
    if kind in CLUSTER_SCOPED:
        return f"{kind} {name}"
    namespace = meta.get("namespace")
    return f"{kind} {name} in {namespace if isinstance(namespace, str) and namespace else 'default'}"


class SnapshotChecks:
    """All the problems of one snapshot file, collected while its objects stream past.

    Wrap the ``(where, object)`` stream with :meth:`objects`: objects with a problem are reported
    and withheld (so the record parsers never see them), duplicates are caught by kind, namespace
    and name and by uid, and :meth:`raise_if_any` ends the load with every problem at once."""

    def __init__(self, name: str, *, fast: bool = False) -> None:
        self.name = name
        self.fast = fast
        """Reading the fast path's stream: Pod records and dicts mixed, pods checked at the end."""
        self.problems: list[str] = []
        self.count = 0
        self._keys: dict[tuple[str, str, str], str] = {}  # kind, namespace, name -> where first seen
        self._uids: dict[str, tuple[str, str, str]] = {}
        self._fast = _FastPods()

    def report(self, where: str, message: str) -> None:
        self.count += 1
        if len(self.problems) < SHOWN:
            self.problems.append(f"{where}: {message}" if where else message)

    def error(self, exc: ModelError, where: str = "") -> None:
        """A parser's own ModelError (a bad quantity, selector or time) counted like the rest."""
        located = exc.within(where) if where else exc
        self.report(located.where, located.message)

    def _identity(self, where: str, kind: str, namespace: str, name: str, uid: str, label: str) -> bool:
        key = (kind, "" if kind in CLUSTER_SCOPED else namespace, name)
        keys, uids = self._keys, self._uids
        if key in keys:
            self.report(f"{where} ({label})", f"metadata.name: the same {kind} again (first at {keys[key]}); every "
                                              f"object must be in the snapshot once")
            return False
        if uid:
            if uid in uids:
                other = uids[uid]
                self.report(f"{where} ({label})", f"metadata.uid: {uid!r} is also the uid of {keys[other]} "
                                                              f"({other[0]} {other[2]}); uids are unique in a cluster")
                return False
            uids[uid] = key
        keys[key] = where
        return True

    def objects(self, objects: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        """The objects of the stream that passed every check, in order; call :meth:`finish`
        after the stream."""
        check_pod, check = self.check_pod, self.check
        for where, raw in objects:
            if type(raw) is Pod:
                check_pod(raw)
                yield where, raw
            elif check(where, raw):
                yield where, raw

    def check_pod(self, pod: Pod) -> None:
        """A Pod record of the fast path (:class:`_FastPods`: :class:`GiveUp` on any doubt)."""
        assert self.fast, "Pod records come from the fast path only"
        self._fast.check(pod)

    def check(self, where: str, raw: Any) -> bool:
        """Whether the raw object at ``where`` passed every check (its problems are reported)."""
        if not isinstance(raw, Mapping):
            self.report(where, f"expected a Kubernetes object, got {type(raw).__name__}")
            return False
        kind = raw.get("kind")
        if kind is None or kind == "":
            self.report(where, "kind: is required (every object names its kind, e.g. kind: Pod)")
            return False
        if not isinstance(kind, str):
            self.report(where, f"kind: must be a string, got {_shown(kind)}")
            return False
        if kind.endswith("List") and "items" in raw:
            self.report(where, f"kind {kind}: a List inside a List; put its items in the outer List")
            return False
        if kind in POLICY_KINDS:
            self.report(where, f"kind {kind}: this looks like a policy ({kind}), not a cluster snapshot; give it "
                               f"as --policy")
            return False
        if kind not in _KIND_CHECKS:
            known = _KINDS_BY_LOWER.get(kind.lower())
            if known is not None:  # "pod": the API server knows no such kind (kinds are case-sensitive)
                self.report(where, f"kind: {kind!r} is not a kind (kinds are case-sensitive): write {known}")
                return False
            return True  # a kind kdesched does not read: skipped with a note by Snapshot.from_objects
        problems = object_problems(kind, raw)
        if problems:
            label = object_label(kind, raw)
            for field, message in problems:
                self.report(f"{where} ({label})", f"{field}: {message}")
            return False
        meta = raw["metadata"]
        namespace, uid = meta.get("namespace") or "default", meta.get("uid") or ""
        if kind == "Pod" and self.fast:  # among the fast path's records: checked with them at the end
            self._fast.add(namespace, meta["name"], uid)
            return True
        return self._identity(where, kind, namespace, meta["name"], uid, object_label(kind, raw))

    def finish(self, container_names: Iterable[str] = ()) -> None:
        """The checks made once the whole stream is read (:class:`GiveUp` from the fast path's,
        which hands over the container names of the pods it built)."""
        if self.fast:
            self._fast.finish()
            if any(dns_label_problem(name) for name in set(container_names)):
                raise GiveUp
            if not self._uids.keys().isdisjoint(self._fast.uids):  # a pod's uid on an object of another kind
                raise GiveUp

    def raise_if_any(self) -> None:
        """A :class:`ModelError` listing the problems found (one line per problem), if any."""
        if not self.count:
            return
        if self.count == 1:
            raise ModelError("", self.problems[0])
        more = f"\n  ... and {self.count - len(self.problems)} more" if self.count > len(self.problems) else ""
        raise ModelError(self.name, f"{self.count} problems; nothing was decided:\n  "
                                    + "\n  ".join(self.problems) + more)

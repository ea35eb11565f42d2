"""The fast path for big JSON snapshot files: msgspec decodes only the fields kdesched reads.

Why: at 150,000 pods the realistic snapshot is 580 MB of JSON, and decoding it with the standard
library (every field into dicts, then the validating record parsers) was most of ``simulate``'s
time. msgspec splits the ``items`` array without building anything, then decodes each Pod into
typed structs that hold only the fields :meth:`Pod.from_api` reads (managedFields and status
details are skipped by its C scanner): faster than ``orjson`` (which builds every dict, and only
of whole documents) and ``json`` (the figures: docs/benchmarks.md, "Decoding").

The file is memory-mapped and the pages of items already turned into records are returned to the
kernel as loading proceeds, so the records do not sit next to a second copy of the file. (A
mapped file must not be truncated while it is read: write a new snapshot next to the old one and
rename it, as ``kubectl ... > new && mv new cluster.json`` does.)

Exactness: this path only ever *accepts* what the ordinary loader (:mod:`kdesched.model.files`)
accepts, with the same records in the same order. Anything unusual gives up and lets the ordinary
loader run:

- the whole file: not a JSON object with an ``items`` array, not valid UTF-8, not JSON to
  msgspec (NaN, lone surrogates, nesting too deep...), stdin, unreadable: :func:`load_json_list`
  returns None and the caller runs the exact slow path, which reports the error it always did;
- one item: anything but a well-formed Pod (other kinds, a field of an unexpected type, a bad
  quantity or time) is decoded by the standard library and parsed by the validating parser, so a
  bad object fails with the same file / item / field message.

Pods are checked as the API server checks them (:mod:`kdesched.model.validate`): the record
built here when every check passes, the ordinary loader for the whole file (``GiveUp``) otherwise,
so that problems are reported in order by one code path.

One difference, for input no tool writes: a key given twice (RFC 8259 says names SHOULD be unique)
inside a Pod the structs read keeps its last value here (msgspec does not report it), where the
ordinary loader refuses the file, as it refuses a YAML mapping with a key twice. The List object's
own keys are walked once (:func:`_keys_once`, one regular-expression match per item) and every item
read by the standard library here (other kinds, unusual pods) is refused alike.
"""

from __future__ import annotations

import codecs
import json
import mmap
import operator
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, Literal

import msgspec

from kdesched.model.errors import ModelError
from kdesched.model.records import (
    EMPTY,
    KEPT_ANNOTATION_PREFIXES,
    Affinity,
    ContainerStatus,
    OwnerRef,
    Pod,
    PodCondition,
    Toleration,
    TopologySpreadConstraint,
    Volume,
    _pod_requests,
    new_pod,
    parse_time,
)
from kdesched.model.snapshot import Snapshot
from kdesched.model.validate import DuplicateKey, GiveUp, SnapshotChecks, object_pairs

_UNSET: Any = msgspec.UNSET
# What the API server checks and msgspec can check in C while it decodes (kdesched.model.validate):
# a pod that fails one is decoded as a dict and reported by the checks (a LIST's pod: Pod.from_api)
_Required = Annotated[str, msgspec.Meta(min_length=1)]
_ContainerName = Annotated[str, msgspec.Meta(min_length=1, max_length=63)]  # a DNS label: see _CONTAINER_NAMES
_Int32 = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]
_Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
_QosClass = Literal["Guaranteed", "Burstable", "BestEffort"]
_NULL = msgspec.Raw(b"null")  # a field that is absent
_Quantities = dict[str, str]  # the API server writes strings; a number takes the slow path


class _Head(msgspec.Struct):
    """The List: its items left undecoded (zero-copy views into the mapped file)."""

    items: list[msgspec.Raw] | None = None
    kind: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)  # a Raw cannot be in a union
    metadata: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)


class _OwnerRef(msgspec.Struct, frozen=True):
    # required and non-empty, as the API server has them (anything else: the checks, as a dict)
    apiVersion: _Required
    kind: _Required
    name: _Required
    uid: _Required
    controller: bool | None = None


class _Meta(msgspec.Struct):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: tuple[_OwnerRef, ...] | None = None
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None


class _Resources(msgspec.Struct):
    requests: _Quantities | None = None
    limits: _Quantities | None = None


class _Container(msgspec.Struct):
    name: _ContainerName
    image: str | None = None
    resources: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)  # its bytes key the cache
    restartPolicy: str | None = None


class _Toleration(msgspec.Struct, frozen=True):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class _Claim(msgspec.Struct):
    claimName: str | None = None


class _Spec(msgspec.Struct):
    nodeName: str | None = None
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    priority: _Int32 | None = None
    priorityClassName: str | None = None
    tolerations: tuple[_Toleration, ...] | None = None
    nodeSelector: dict[str, str] | None = None
    affinity: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)
    topologySpreadConstraints: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)
    volumes: list[dict[str, msgspec.Raw]] | None = None  # sources left undecoded; key order kept
    resources: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)
    overhead: msgspec.Raw = msgspec.field(default_factory=lambda: _NULL)
    resourceClaims: Any = None
    schedulerName: str | None = None


class _Terminated(msgspec.Struct, frozen=True):
    reason: str | None = None
    exitCode: int | None = None


class _Waiting(msgspec.Struct, frozen=True):
    reason: str | None = None


class _State(msgspec.Struct, frozen=True):
    waiting: _Waiting | None = None
    terminated: _Terminated | None = None


class _LastState(msgspec.Struct, frozen=True):
    terminated: _Terminated | None = None


class _ContainerStatus(msgspec.Struct, frozen=True):
    name: str | None = None
    restartCount: int | None = None
    state: _State | None = None
    lastState: _LastState | None = None
    ready: bool | None = None


class _Condition(msgspec.Struct, frozen=True):
    type: str | None = None
    status: str | None = None
    reason: str | None = None
    lastTransitionTime: str | None = None


class _Status(msgspec.Struct):
    phase: _Phase | None = None
    qosClass: _QosClass | None = None
    reason: str | None = None
    startTime: str | None = None
    conditions: tuple[_Condition, ...] | None = None
    containerStatuses: tuple[_ContainerStatus, ...] | None = None
    initContainerStatuses: tuple[_ContainerStatus, ...] | None = None
    ephemeralContainerStatuses: tuple[_ContainerStatus, ...] | None = None


class _Item(msgspec.Struct):
    """Any item, read as a Pod; ``kind`` UNSET (absent) differs from null, as in the slow path."""

    kind: str | None | msgspec.UnsetType = msgspec.UNSET
    apiVersion: str | None | msgspec.UnsetType = msgspec.UNSET
    metadata: _Meta | None = None
    spec: _Spec | None = None
    status: _Status | None = None


_HEAD = msgspec.json.Decoder(_Head)
_ITEM = msgspec.json.Decoder(_Item)
_CLAIM = msgspec.json.Decoder(_Claim | None)
_NAME = msgspec.json.Decoder(str | None)
_RESOURCES = msgspec.json.Decoder(_Resources | None)
_QUANTITIES = msgspec.json.Decoder(_Quantities | None)
_NO_META = _Meta()
_NO_SPEC = _Spec()
_NO_STATUS = _Status()
_NO_STATE = _State()
_NO_TERMINATED = _Terminated()
_DROP_EVERY = 32 << 20  # give consumed pages back to the kernel every 32 MiB


_POD_FIELDS = (
    "namespace", "name", "uid", "node_name", "phase", "labels", "annotations", "owner_refs", "priority",
    "priority_class_name", "qos_class", "requests", "requested_resource_names", "tolerations", "node_selector",
    "affinity", "topology_spread_constraints", "volumes", "images", "container_statuses", "init_container_statuses",
    "ephemeral_container_statuses", "conditions", "status_reason", "start_time", "creation_time", "deletion_time",
    "has_resource_claims", "scheduler_name",
)
"""The order :func:`_pod` passes Pod's fields in."""


class _Slow(Exception):
    """This item needs the validating parser."""


def _strmap(raw: dict[str, str] | None) -> dict[str, str]:
    return {} if raw is None else raw


_TIMES: dict[str, Any] = {}
_REQUESTS: dict[Any, tuple[dict[str, int], frozenset[str], str]] = {}
_STATUSES: dict[Any, Any] = {}
_TOLERATIONS: dict[Any, Any] = {}
_CONDITIONS: dict[Any, Any] = {}
_OWNERS: dict[Any, Any] = {}
_AFFINITIES: dict[Any, Any] = {}
_SPREADS: dict[Any, Any] = {}
_CACHES: tuple[dict[Any, Any], ...] = (_TIMES, _REQUESTS, _STATUSES, _TOLERATIONS, _CONDITIONS, _OWNERS, _AFFINITIES, _SPREADS)
_CACHE_MAX = 1 << 16


def _time(value: str | None) -> Any:
    """parse_time, memoized: a pod's conditions, start and creation often share one timestamp.
    (A bad time raises ModelError; the caller then takes the slow path.)"""
    if not value:
        return None
    hit = _TIMES.get(value)
    if hit is None:
        if len(_TIMES) >= _CACHE_MAX:
            _TIMES.clear()
        hit = _TIMES[value] = parse_time(value, "")
    return hit


def _requests(spec: _Spec) -> tuple[dict[str, int], frozenset[str], str]:
    """``_pod_requests`` of the library, memoized by the bytes of the containers' resources: the
    replicas of a workload repeat the same text, so most pods are a hit and decode nothing."""
    key = (tuple((bytes(c.resources), c.restartPolicy) for c in spec.initContainers or ()),
           tuple(bytes(c.resources) for c in spec.containers or ()),
           bytes(spec.resources), bytes(spec.overhead))
    hit = _REQUESTS.get(key)
    if hit is None:
        containers = [_container_dict(c) for c in spec.containers or ()]
        inits = [_container_dict(c) for c in spec.initContainers or ()]
        pod_level = {"resources": _resources_dict(spec.resources), "overhead": _QUANTITIES.decode(spec.overhead)}
        if len(_REQUESTS) >= _CACHE_MAX:
            _REQUESTS.clear()
        hit = _REQUESTS[key] = _pod_requests(pod_level, containers, inits)
    return dict(hit[0]), hit[1], hit[2]


def _resources_dict(raw: msgspec.Raw) -> Mapping[str, Any]:
    res = _RESOURCES.decode(raw)  # not an object of string quantities: the slow path decides
    if res is None:
        return EMPTY
    return {"requests": res.requests, "limits": res.limits}


def _container_dict(c: _Container) -> Mapping[str, Any]:
    return {"resources": _resources_dict(c.resources), "restartPolicy": c.restartPolicy}


def _status(raw: _ContainerStatus) -> ContainerStatus:
    state = raw.state or _NO_STATE
    term = state.terminated or _NO_TERMINATED
    last = (raw.lastState.terminated if raw.lastState is not None else None) or _NO_TERMINATED
    return ContainerStatus((raw.name or ""), raw.restartCount or 0,
                           (state.waiting.reason or "") if state.waiting is not None else "",
                           (term.reason or ""), term.exitCode, (last.reason or ""), last.exitCode, bool(raw.ready))


def _statuses(raw: tuple[_ContainerStatus, ...] | None) -> tuple[ContainerStatus, ...]:
    if not raw:
        return ()
    return _interned(_STATUSES, raw, lambda: tuple(_status(c) for c in raw))


def _interned(cache: dict[Any, Any], key: Any, build: Callable[[], Any]) -> Any:
    """One immutable record (tuple) per distinct decoded value: replicas repeat the same
    tolerations, owners and container states, and sharing them saves time and memory."""
    hit = cache.get(key)
    if hit is None:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        hit = cache[key] = build()
    return hit


def _tolerations(raw: tuple[_Toleration, ...]) -> tuple[Toleration, ...]:
    out = []
    for t in raw:
        op = t.operator or "Equal"
        if op not in ("Equal", "Exists", "Lt", "Gt") or t.effect not in _EFFECTS:
            raise _Slow
        out.append(Toleration(t.key or "", op, t.value or "", t.effect or ""))
    return tuple(out)


def _conditions(raw: tuple[_Condition, ...]) -> tuple[PodCondition, ...]:
    return tuple(PodCondition(c.type or "", c.status or "", c.reason or "", _time(c.lastTransitionTime))
                 for c in raw)


def _affinity(raw: msgspec.Raw) -> Affinity | None:
    return Affinity.from_api(_json(raw), "spec.affinity")


def _spread(raw: msgspec.Raw) -> tuple[TopologySpreadConstraint, ...]:
    constraints = _json(raw)
    if constraints is None:
        return ()
    if type(constraints) is not list:
        raise _Slow
    return tuple(TopologySpreadConstraint.from_api(c, f"spec.topologySpreadConstraints[{i}]")
                 for i, c in enumerate(constraints))


_EFFECTS = (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute")
_CONTAINER_NAMES: list[str] = []
"""The container names of the pods built, checked all at once by the snapshot's checks (a regex
per container in msgspec's decoder cost more than the rest of the pod's checks)."""
_name_of = operator.attrgetter("name")


def _owners(raw: tuple[_OwnerRef, ...]) -> tuple[OwnerRef, ...]:
    return tuple(OwnerRef(o.kind or "", o.name or "", o.uid or "", bool(o.controller)) for o in raw)


_STRICT_JSON = json.JSONDecoder(object_pairs_hook=object_pairs)  # a key twice: DuplicateKey


def _json(raw: msgspec.Raw) -> Any:
    return _STRICT_JSON.decode(bytes(raw).decode("utf-8"))  # the file is UTF-8: checked by _utf8


def _pod(item: _Item) -> Pod:
    """The record :meth:`Pod.from_api` builds from the same object (raises on anything it would
    treat differently; the caller then runs that parser)."""
    meta = item.metadata or _NO_META
    name = meta.name
    spec = item.spec
    if not name or spec is None or (item.apiVersion is not _UNSET and item.apiVersion != "v1"):
        raise _Slow  # validate.py (a snapshot file) or Pod.from_api (a LIST) decides
    status = item.status or _NO_STATUS
    annotations = {k: v for k, v in meta.annotations.items() if k.startswith(KEPT_ANNOTATION_PREFIXES)} \
        if meta.annotations else {}
    refs, tols, conds = meta.ownerReferences, spec.tolerations, status.conditions
    owners = _interned(_OWNERS, refs, lambda: _owners(refs)) if refs else ()
    requests, names, qos = _requests(spec)
    _CONTAINER_NAMES.extend(map(_name_of, spec.containers or ()))
    if spec.initContainers:
        _CONTAINER_NAMES.extend(map(_name_of, spec.initContainers))
    if spec.initContainers or (spec.containers is not None and len(spec.containers) > 1):
        names_here = [*map(_name_of, spec.containers or ()), *map(_name_of, spec.initContainers or ())]
        if len(set(names_here)) != len(names_here):
            raise _Slow  # a container name twice in one Pod: validate.py reports it, as the API server does
    volumes = []
    for v in spec.volumes or ():
        kind = next((k for k in v if k != "name"), "")
        claim = ""
        if kind == "persistentVolumeClaim":
            source = _CLAIM.decode(v[kind])  # a claim that is not an object, or a name that is
            claim = (source.claimName or "") if source is not None else ""  # not a string: slow path
        vname = v.get("name")
        vname_text = _NAME.decode(vname) if vname is not None else None
        if not vname_text:
            raise _Slow  # a volume's name is required (validate.py)
        volumes.append(Volume(vname_text, kind, claim))
    tolerations = _interned(_TOLERATIONS, tols, lambda: _tolerations(tols)) if tols else ()
    affinity = None
    if spec.affinity is not _NULL:
        text = bytes(spec.affinity)
        if text[:1] not in (b"{", b"n"):
            raise _Slow  # null or an object only (validate.py)
        affinity = _interned(_AFFINITIES, text, lambda: _affinity(spec.affinity))
    spread: tuple[TopologySpreadConstraint, ...] = ()
    if spec.topologySpreadConstraints is not _NULL:
        spread = _interned(_SPREADS, bytes(spec.topologySpreadConstraints),
                           lambda: _spread(spec.topologySpreadConstraints))
    return new_pod(  # positional, in field order (a test holds _POD_FIELDS to it): see new_pod
        meta.namespace or "default",  # namespace
        name,  # name
        (meta.uid or ""),  # uid
        (spec.nodeName or ""),  # node_name
        status.phase or "Pending",  # phase
        _strmap(meta.labels),  # labels
        annotations,  # annotations
        owners,  # owner_refs
        spec.priority,  # priority
        (spec.priorityClassName or ""),  # priority_class_name
        status.qosClass or qos,  # qos_class
        requests,  # requests
        names,  # requested_resource_names
        tolerations,  # tolerations
        _strmap(spec.nodeSelector),  # node_selector
        affinity,  # affinity
        spread,  # topology_spread_constraints
        tuple(volumes),  # volumes
        tuple((c.image or "") for c in spec.containers or ()),  # images
        _statuses(status.containerStatuses),  # container_statuses
        _statuses(status.initContainerStatuses),  # init_container_statuses
        _statuses(status.ephemeralContainerStatuses),  # ephemeral_container_statuses
        _interned(_CONDITIONS, conds, lambda: _conditions(conds)) if conds else (),  # conditions
        (status.reason or ""),  # status_reason
        _time(status.startTime),  # start_time
        _time(meta.creationTimestamp),  # creation_time
        _time(meta.deletionTimestamp),  # deletion_time
        bool(spec.resourceClaims),  # has_resource_claims
        spec.schedulerName or "default-scheduler",  # scheduler_name
    )


def _decode(raw: msgspec.Raw) -> _Item | None:
    try:
        return _ITEM.decode(raw)
    except msgspec.MsgspecError:  # not shaped like a Pod (or not an object): the slow path decides
        return None


def _item(raw: msgspec.Raw, item: _Item | None, kind: str | None) -> Pod | Any:
    """A Pod record when the fast path can build it, else the item as the standard library decodes
    it (for :meth:`Snapshot.from_objects` to parse, or to report, exactly as the slow path does).
    ``kind`` is the list's item kind for items that do not name one."""
    if item is not None and (item.kind if item.kind is not _UNSET else kind) == "Pod":
        try:
            return _pod(item)
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001, S110 - anything unusual: the validating parser decides
            pass
    obj = _json(raw)
    if kind is not None and type(obj) is dict and "kind" not in obj:
        obj["kind"] = kind
    return obj


def _utf8(mm: mmap.mmap) -> bool:
    """Whether the whole file is UTF-8 (msgspec does not check the bytes of fields it skips)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    step = 16 << 20
    try:
        for at in range(0, len(mm), step):
            chunk = mm[at:at + step]
            if not (chunk.isascii() and decoder.getstate()[0] == b""):
                decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def load_json_list(path: str, name: str) -> tuple[Snapshot, dict[str, Any]] | None:
    """The snapshot of a JSON List file and the List's ``kind`` and ``metadata`` (for the
    snapshot time), or None when the ordinary loader must read this file (see the module doc).
    Raises :class:`ModelError` exactly as the ordinary loader would for a bad item; ``name`` is
    the file's name in messages."""
    if path == "-":
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None  # a pipe or a device: opening it here could consume what the slow path reads
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # empty file, a directory, a pipe
            return None
    finally:
        os.close(fd)
    try:
        return _load(mm, name)
    finally:
        for cache in _CACHES:  # what is shared lives on in the records; the rest is freed
            cache.clear()
        _CONTAINER_NAMES.clear()
        try:
            mm.close()
        except BufferError:  # a Raw view still alive (an exception's traceback): freed with it
            pass


_KEY = re.compile(rb'"((?:[^"\\\x00-\x1f]|\\.)*)"[ \t\n\r]*:[ \t\n\r]*')  # a key and its colon
_WS = re.compile(rb"[ \t\n\r]*")
_AFTER = re.compile(rb"[ \t\n\r]*([,\]}])[ \t\n\r]*")  # the delimiter after a value
_WINDOW = 1 << 16


def _value_end(mm: mmap.mmap, pos: int) -> int:
    """Where the (small) JSON value at ``pos`` ends, read by the standard library (a key twice
    inside it raises :class:`DuplicateKey`); -1 if it does not parse."""
    window = _WINDOW
    while True:
        last = pos + window >= len(mm)
        text = codecs.getincrementaldecoder("utf-8")().decode(mm[pos:pos + window], final=last)
        try:
            _, end = _STRICT_JSON.raw_decode(text)
        except json.JSONDecodeError:
            end = -1
        if end >= 0 and (end < len(text) or last):  # a value cut at the window's end (a number) reads on
            return pos + len(text[:end].encode("utf-8"))
        if last:
            return -1
        window *= 4


def _items_end(mm: mmap.mmap, pos: int, items: list[msgspec.Raw]) -> int:
    """Just past the ``]`` of the array whose ``[`` is at ``pos``, walked by the lengths of the
    items msgspec split from it; -1 when they do not line up (another ``items`` was split)."""
    after = _AFTER.match
    at = _WS.match(mm, pos + 1).end()  # type: ignore[union-attr]  # "*" always matches
    if not items:
        return at + 1 if mm[at:at + 1] == b"]" else -1
    last = len(items) - 1
    for i in range(last):
        sep = after(mm, at + len(items[i]))
        if sep is None or sep.group(1) != b",":
            return -1
        at = sep.end()
    sep = after(mm, at + len(items[last]))
    return sep.end() if sep is not None and sep.group(1) == b"]" else -1


def _keys_once(mm: mmap.mmap, start: int, items: list[msgspec.Raw]) -> bool:
    """Whether the List object at ``start`` names each of its keys once (msgspec keeps the last of
    a key given twice, where the ordinary loader refuses the file: ``"items"`` twice would decide on
    the second list alone). Walks the object's keys: ``items`` by the lengths of the items msgspec
    split (one match per item), any other value by the standard library. False when in doubt: the
    ordinary loader then reads the file and reports what it finds."""
    key_at, after = _KEY.match, _AFTER.match
    seen: set[str] = set()
    pos = _WS.match(mm, start + 1).end()  # type: ignore[union-attr]  # "*" always matches
    while True:
        found = key_at(mm, pos)
        if found is None:
            return False
        try:
            key = json.loads(b'"' + found.group(1) + b'"')
        except ValueError:
            return False
        if key in seen:
            return False
        seen.add(key)
        pos = found.end()
        if key == "items" and mm[pos:pos + 1] == b"[":
            pos = _items_end(mm, pos, items)
        else:
            try:
                pos = _value_end(mm, pos)
            except (DuplicateKey, RecursionError):
                return False
        if pos < 0:
            return False
        sep = after(mm, pos)
        if sep is None:
            return False
        if sep.group(1) == b"}":
            return sep.end() == len(mm)
        if sep.group(1) != b",":
            return False
        pos = sep.end()


def _load(mm: mmap.mmap, name: str) -> tuple[Snapshot, dict[str, Any]] | None:
    start = 0
    while start < len(mm) and mm[start] in b" \t\n\r":
        start += 1
    if start >= len(mm) or mm[start] != ord("{") or not _utf8(mm):
        return None
    try:
        head = _HEAD.decode(mm)
        if head.items is None or not _keys_once(mm, start, head.items):
            return None
        head_fields = {"kind": _json(head.kind), "metadata": _json(head.metadata)}
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    list_kind = head_fields["kind"]
    item_kind = list_kind[: -len("List")] if isinstance(list_kind, str) and list_kind.endswith("List") \
        and list_kind != "List" else None
    items = head.items
    del head

    checks = SnapshotChecks(name, fast=True)
    check, check_pod = checks.check, checks.check_pod

    def objects() -> Iterator[tuple[str, Any]]:
        """The items, checked (kdesched.model.validate) as they pass."""
        pending: list[tuple[str, msgspec.Raw]] = []
        consumed, dropped = start, 0
        where = name
        try:
            for i in range(len(items)):
                raw = items[i]
                items[i] = _NULL  # the records are all that stays
                where = f"{name} items[{i}]"
                consumed += len(raw)
                item = _decode(raw)
                if item is not None and item.kind is _UNSET:
                    pending.append((where, raw))  # typed lists: held until the list's kind is known
                elif item is None:  # not shaped like a Pod (another kind): the standard library, once
                    obj = _json(raw)
                    if type(obj) is dict and "kind" not in obj:
                        pending.append((where, raw))
                    elif check(where, obj):
                        yield where, obj
                else:
                    obj = _item(raw, item, None)
                    if type(obj) is Pod:
                        check_pod(obj)
                        yield where, obj
                    elif check(where, obj):
                        yield where, obj
                if consumed - dropped >= _DROP_EVERY and _MADV_DONTNEED is not None:
                    dropped = consumed // mmap.PAGESIZE * mmap.PAGESIZE
                    mm.madvise(_MADV_DONTNEED, 0, dropped)
            for where, raw in pending:
                obj = _item(raw, _decode(raw), item_kind)
                if type(obj) is Pod:
                    check_pod(obj)
                    yield where, obj
                elif check(where, obj):
                    yield where, obj
        except DuplicateKey as exc:  # in the standard library's reading of an item
            raise ModelError(where, f"invalid JSON: {exc}") from None

    try:
        snap = Snapshot.from_objects(objects(), on_error=checks.error)
        checks.finish(_CONTAINER_NAMES)
    except (RecursionError, GiveUp):
        return None  # nested too deeply, or a pod to report: the slow path says so, in order
    checks.raise_if_any()
    return snap, head_fields


_MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


def decode_list_page(data: bytes, kind: str, api_version: str) -> tuple[list[Pod | dict[str, Any]], dict[str, Any]] | None:
    """A LIST response page from the API server: its items (Pod records where the fast path takes
    them, else the dicts the standard library decodes, ``kind`` and ``apiVersion`` filled in,
    non-object items dropped, as ``KubeClient.list_raw`` does) and the list's metadata; None when
    the page must be decoded the ordinary way (not UTF-8, not JSON to msgspec, not an object with
    an ``items`` list and a metadata object, nested too deeply)."""
    if not data or not (data.isascii() or _utf8_bytes(data)):
        return None
    try:
        head = _HEAD.decode(data)
        meta = _json(head.metadata)
        if meta is None:
            meta = {}
        if type(meta) is not dict:
            return None
        out: list[Pod | dict[str, Any]] = []
        for raw in head.items or ():
            item = _decode(raw)
            if item is not None and (item.kind if item.kind is not _UNSET else kind) == "Pod":
                try:
                    out.append(_pod(item))
                    continue
                except RecursionError:
                    raise
                except Exception:  # noqa: BLE001, S110 - anything unusual: the validating parser decides
                    pass
            obj = _json(raw)
            if type(obj) is dict:
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", api_version)
                out.append(obj)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    finally:
        for cache in _CACHES:
            cache.clear()
        _CONTAINER_NAMES.clear()  # a LIST's pods: the API server checked them
    return out, meta


def _utf8_bytes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True

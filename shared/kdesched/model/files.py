"""Reading cluster snapshot files: YAML or JSON, a ``v1`` List or several documents, or stdin.

Why: ``kdesched simulate`` must accept exactly what ``kubectl get nodes,pods,... -A -o yaml``
writes, and must fail on a broken file with one line naming the file, document, item and field.

A snapshot may record when it was taken, as the annotation :data:`SNAPSHOT_TIME` (an RFC 3339
time) on its ``List``'s metadata. Ages (PodLifeTime, minPodAge, failed pods) then read the same
in a year as on the day the file was written: ``simulate`` uses it as its clock unless ``--now``
is given. The examples record it; ``kubectl`` does not write it (add it with ``kubectl annotate``
or by hand).

It also reads the measured-usage files of ``simulate --usage`` (:func:`load_usage_files`, the
same refusals: size, type, encoding), whose content :mod:`kdesched.model.usage` parses.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from kdesched.model.errors import ModelError
from kdesched.model.fastload import load_json_list
from kdesched.model.gcpause import paused_gc
from kdesched.model.records import parse_time
from kdesched.model.snapshot import Snapshot
from kdesched.model.usage import MAX_USAGE_FILE_BYTES, Usage, usage_from_document
from kdesched.model.validate import DuplicateKey, SnapshotChecks, object_pairs

SNAPSHOT_TIME = "kdesched.dev/snapshot-time"
"""Annotation on a snapshot ``List``: when the snapshot was taken (RFC 3339, with a time zone)."""

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def refuse_duplicate_keys(loader: Any, node: yaml.MappingNode, deep: bool, show: Any) -> None:
    """Raise a ConstructorError at the first key ``node`` (a flattened mapping) holds twice, or an
    unhashable key: the one rule of the snapshot and the policy loaders (``show`` renders the key)."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable key", key_node.start_mark) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {show(key)}", key_node.start_mark)
        seen.add(key)


class _Loader(_BaseLoader):
    """The safe loader (libyaml's when present) refusing a mapping with a key twice: readers
    disagree on which value wins (the API server's strict decoding refuses it, as the policy
    loader does), so a snapshot must not depend on it. JSON gets the same rule
    (:func:`kdesched.model.validate.object_pairs`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            refuse_duplicate_keys(self, node, deep, repr)
        result: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return result


_JSON = json.JSONDecoder(object_pairs_hook=object_pairs)


MAX_SNAPSHOT_BYTES = 2 << 30
"""The largest cluster snapshot read (2 GiB; a 150,000-pod cluster as ``kubectl -o json`` writes it
is about 580 MB). Checked before reading: a bigger file, a device or a pipe given by name is
refused with exit 2 instead of filling memory (``/dev/zero`` would never end)."""

MAX_POLICY_BYTES = 16 << 20
"""The largest policy file read (16 MiB; a ConfigMap holds at most 1 MiB)."""


class InputRefused(ValueError):
    """An input file refused before it is read: not a regular file, or larger than its limit."""


def _size(limit: int) -> str:
    if limit >= 1 << 30:
        return f"{limit >> 30} GiB"
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


def read_file_bytes(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused (:class:`InputRefused`) before it is read when
    it is not a regular file (a directory, a FIFO, a device such as ``/dev/zero``) or holds more
    than ``limit`` bytes. Opened without blocking and checked on the open descriptor, so a name
    swapped for a FIFO in between cannot hang the read. OSError (missing, no permission) passes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            what = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
            raise InputRefused(f"is {what}, not a regular file; give a file, or '-' and redirect it to "
                               f"standard input")
        if st.st_size > limit:
            raise InputRefused(f"is {st.st_size} bytes, more than the limit of {_size(limit)}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = read_at_most(fh.read, limit, first=st.st_size + 1)
    finally:
        os.close(fd)
    if data is None:  # it grew after the check
        raise InputRefused(f"is more than the limit of {_size(limit)}")
    return data


_CHUNK = 1 << 24


def read_at_most(read: Callable[[int], bytes], limit: int, first: int = _CHUNK) -> bytes | None:
    """At most ``limit`` bytes from ``read`` until it returns nothing; None when there are more.

    Why chunks: ``read(n)`` allocates its whole ``n``-byte buffer before reading, so one read of
    ``limit + 1`` reserved 2 GiB for a 7 kB snapshot (a MemoryError under a 2 GiB address-space
    limit). The first read asks for ``first`` bytes (a file's size plus one: the whole file and a
    look for more), each later one for at most 16 MiB."""
    chunks: list[bytes] = []
    total, want = 0, max(1, first)
    while total <= limit:
        chunk = read(min(want, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        want = _CHUNK
    if total > limit:
        return None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_stdin(limit: int = MAX_SNAPSHOT_BYTES) -> str:
    """Standard input as UTF-8 text; a ModelError (``<stdin>``) if it is not, or if it holds more
    than ``limit`` bytes (read at most ``limit + 1`` bytes: ``< /dev/zero`` ends there; a device
    given as stdin is refused before it is read).

    Bytes, decoded strictly: Python's text stdin would turn invalid bytes into lone surrogates
    ("surrogateescape") that only fail later, far from here, as "surrogates not allowed"."""
    buffer = getattr(sys.stdin, "buffer", None)
    too_big = f"is more than the limit of {_size(limit)}"
    try:
        if buffer is None:  # a text stream without bytes underneath (tests, embedding)
            text = sys.stdin.read(limit + 1)
            if len(text) > limit:
                raise ModelError("<stdin>", too_big)
            text.encode("utf-8")
            return text
        try:
            st = os.fstat(sys.stdin.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            st = None
        if st is not None and (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) and not os.isatty(
                sys.stdin.fileno()):
            raise ModelError("<stdin>", "is a device, not a file or a pipe; give a file")
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size > limit:
            raise ModelError("<stdin>", f"is {st.st_size} bytes, more than the limit of {_size(limit)}")
        read = read_at_most(buffer.read, limit)
        if read is None:
            raise ModelError("<stdin>", too_big)
        data = read
    except OSError as exc:
        raise ModelError("<stdin>", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeError:
        raise ModelError("<stdin>", "is not UTF-8 text (expected YAML or JSON)") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError("<stdin>", f"is not UTF-8 text (expected YAML or JSON): invalid byte at offset "
                                    f"{exc.start}") from None


def read_text(path: str, limit: int = MAX_SNAPSHOT_BYTES) -> tuple[str, str]:
    """The text of ``path`` (``-`` = stdin) and the name to use in messages; refused before it is
    read when it is not a regular file or larger than ``limit`` (:func:`read_file_bytes`)."""
    if path == "-":
        return read_stdin(limit), "<stdin>"
    p = Path(path)
    try:
        data = read_file_bytes(path, limit)
        return data.decode("utf-8"), str(p)
    except InputRefused as exc:
        raise ModelError(str(p), str(exc)) from None
    except FileNotFoundError:
        raise ModelError(str(p), "no such file") from None
    except IsADirectoryError:
        raise ModelError(str(p), "is a directory, expected a YAML or JSON file") from None
    except UnicodeDecodeError as exc:
        raise ModelError(str(p), f"is not UTF-8 text (expected YAML or JSON): invalid byte at offset "
                                 f"{exc.start}") from None
    except OSError as exc:
        raise ModelError(str(p), f"cannot read: {exc.strerror or exc}") from None


def parse_documents(text: str, name: str) -> list[Any]:
    """Parse JSON (one value) or YAML (one or more documents); empty documents are dropped."""
    stripped = text.lstrip()
    json_error: ModelError | None = None
    if stripped.startswith(("{", "[")):
        try:
            doc = _JSON.decode(text)
        except DuplicateKey as exc:
            raise ModelError(name, f"invalid JSON: {exc}") from None
        except json.JSONDecodeError as exc:
            json_error = ModelError(name, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
            if stripped.startswith("["):
                raise json_error from None
            # JSON is a subset of YAML; a "{"-started flow mapping may still be valid YAML.
        except RecursionError:
            raise ModelError(name, "invalid JSON: nested too deeply") from None
        else:
            return doc if isinstance(doc, list) else [doc]
    try:
        return [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        if json_error is not None:  # it was meant as JSON: say where the JSON broke
            raise json_error from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ModelError(name, f"invalid YAML{where}: {problem}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # PyYAML's constructors raise plain errors for well-formed scalars they cannot build,
        # e.g. the timestamp 2024-13-45 ("month must be in 1..12").
        raise ModelError(name, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise ModelError(name, "invalid YAML: nested too deeply") from None


def _list_time(doc: Mapping[str, Any], where: str) -> datetime | None:
    """The :data:`SNAPSHOT_TIME` annotation of a List document, or None."""
    meta = doc.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or SNAPSHOT_TIME not in annotations:
        return None
    field = f"{where}: metadata.annotations[{SNAPSHOT_TIME}]"
    value = annotations[SNAPSHOT_TIME]
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value  # written unquoted in YAML: PyYAML already read it as a time, zone included
    if not isinstance(value, str) or not has_time_zone(value):
        shown = value.isoformat() if isinstance(value, datetime) else repr(value)
        raise ModelError(field, f"must be an RFC 3339 time with a time zone, e.g. 2024-05-01T12:00:00Z, "
                                f"got {shown}")
    return parse_time(value, field)


def has_time_zone(text: str) -> bool:
    """Whether an RFC 3339 time ends in ``Z`` or a ``+hh:mm`` / ``-hh:mm`` offset (the zone is
    not optional in RFC 3339; Python's ``fromisoformat`` would silently assume local time)."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        return True
    return len(text) > 6 and text[-6] in "+-" and text[-3] == ":" and "T" in text.upper()[:-6]


def snapshot_time(docs: list[Any], name: str) -> datetime | None:
    """The time recorded on the List document(s) of ``docs``; a ModelError if two disagree."""
    found: datetime | None = None
    for d, doc in enumerate(docs):
        if isinstance(doc, Mapping) and isinstance(doc.get("kind"), str) and str(doc["kind"]).endswith("List"):
            where = name if len(docs) == 1 else f"{name} document {d + 1}"
            value = _list_time(doc, where)
            if value is not None and found is not None and value != found:
                raise ModelError(where, f"metadata.annotations[{SNAPSHOT_TIME}]: {value.isoformat()} disagrees "
                                        f"with {found.isoformat()} in an earlier document")
            found = found or value
    return found


def iter_objects(docs: list[Any], name: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Flatten documents and ``*List`` objects into ``(where, object)`` pairs."""
    for d, doc in enumerate(docs):
        where = name if len(docs) == 1 else f"{name} document {d + 1}"
        if not isinstance(doc, Mapping):
            raise ModelError(where, f"expected a Kubernetes object or List, got {type(doc).__name__}")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ModelError(f"{where}.items", "must be a list")
            item_kind = kind[: -len("List")] if kind != "List" else None
            for i, item in enumerate(items):
                if item_kind and isinstance(item, Mapping) and "kind" not in item:
                    item = {**item, "kind": item_kind}
                yield f"{where} items[{i}]", item
        else:
            yield where, doc


_WS = " \t\n\r"


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def iter_json_list(text: str, name: str,
                   head: dict[str, Any] | None = None) -> Iterator[tuple[str, Mapping[str, Any]]] | None:
    """Stream the items of a top-level JSON object that has an ``items`` array (a ``v1 List`` or
    a typed list), one at a time; None if ``text`` is not such an object.

    Why: ``json.loads`` of a 150,000-pod file builds every dict at once (several GB). Streaming
    hands each item to the record builder and lets it be freed before the next is decoded, so the
    peak is the file's text plus the records. Items without a ``kind`` (typed lists such as
    ``PodList``, whose ``kind`` comes after ``items`` in kubectl's output) are held until the list's
    kind is known. ``head``, if given, receives the List's other keys (kind, metadata) once the
    iterator is exhausted.
    """
    decoder = _JSON

    def bad(exc: json.JSONDecodeError) -> ModelError:
        return ModelError(name, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")

    def expect(pos: int, char: str) -> int:
        pos = _skip(text, pos)
        if pos >= len(text) or text[pos] != char:
            raise json.JSONDecodeError(f"Expecting '{char}'", text, min(pos, len(text)))
        return _skip(text, pos + 1)

    pos = _skip(text, 0)
    if pos >= len(text) or text[pos] != "{":
        return None
    head = {} if head is None else head
    try:
        pos = _skip(text, pos + 1)
        while True:
            if pos >= len(text) or text[pos] != '"':
                return None  # "{}", or not JSON: the ordinary parser decides and reports
            key, pos = decoder.raw_decode(text, pos)
            pos = expect(pos, ":")
            if key == "items" and pos < len(text) and text[pos] == "[":
                break
            if key in head or key == "items":
                return None  # a key twice: the ordinary parser refuses it
            head[key], pos = decoder.raw_decode(text, pos)
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == ",":
                pos = _skip(text, pos + 1)
            elif pos >= len(text) or text[pos] != "}":
                return None  # a missing delimiter: the ordinary parser reports it
    except (json.JSONDecodeError, RecursionError, DuplicateKey):
        return None  # let the ordinary parser report the error with its position

    def items() -> Iterator[tuple[str, Mapping[str, Any]]]:
        pending: list[tuple[str, dict[str, Any]]] = []
        at = _skip(text, pos + 1)
        i = 0
        where_now = name
        try:
            while at < len(text) and text[at] != "]":
                where_now = f"{name} items[{i}]"
                item, at = decoder.raw_decode(text, at)
                where = f"{name} items[{i}]"
                i += 1
                if isinstance(item, dict) and "kind" not in item:
                    pending.append((where, item))
                else:
                    yield where, item
                at = _skip(text, at)
                if at < len(text) and text[at] == ",":
                    at = _skip(text, at + 1)
                    if at < len(text) and text[at] == "]":  # "[a,]" is not JSON
                        raise json.JSONDecodeError("Expecting value", text, at)
                elif at < len(text) and text[at] != "]":
                    raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
            at = expect(at, "]")
            where_now = name
            while at < len(text) and text[at] != "}":  # the keys after items (kind, metadata)
                at = expect(at, ",")
                if at >= len(text) or text[at] != '"':
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
                key, at = decoder.raw_decode(text, at)
                at = expect(at, ":")
                if key in head or key == "items":
                    where_now = name
                    raise DuplicateKey(f"duplicate key {key!r} in an object")
                head[key], at = decoder.raw_decode(text, at)
                at = _skip(text, at)
            end = expect(at, "}")
            if end != len(text):
                raise json.JSONDecodeError("Extra data", text, end)
        except json.JSONDecodeError as exc:
            raise bad(exc) from None
        except DuplicateKey as exc:
            raise ModelError(where_now, f"invalid JSON: {exc}") from None
        except RecursionError:
            raise ModelError(name, "invalid JSON: nested too deeply") from None
        kind = head.get("kind")
        item_kind = kind[: -len("List")] if isinstance(kind, str) and kind.endswith("List") and kind != "List" else None
        for where, item in pending:
            if item_kind:
                item["kind"] = item_kind
            yield where, item

    return items()


def load_snapshot(path: str) -> Snapshot:
    """Load a snapshot file; raises :class:`ModelError` (naming file and field) on bad input."""
    with paused_gc():
        return _load_snapshot(path)


def _load_snapshot(path: str) -> Snapshot:
    if path != "-":
        _check_file(path)  # refused before anything maps or reads it
    fast = load_json_list(path, str(Path(path))) if path != "-" else None
    if fast is not None:  # a JSON List, decoded by msgspec (kdesched.model.fastload), already checked
        snap, list_fields = fast
        return _finish(snap, snapshot_time([list_fields], str(Path(path))), str(Path(path)))
    text, name = read_text(path)
    head: dict[str, Any] = {}
    checks = SnapshotChecks(name)
    streamed = iter_json_list(text, name, head)
    if streamed is not None:
        snap = Snapshot.from_objects(checks.objects(streamed), on_error=checks.error)
        taken_at = snapshot_time([head], name)
    else:
        docs = parse_documents(text, name)
        if not docs:
            raise ModelError(name, "contains no objects")
        taken_at = snapshot_time(docs, name)
        snap = Snapshot.from_objects(checks.objects(iter_objects(docs, name)), on_error=checks.error)
    del text
    checks.finish()
    checks.raise_if_any()
    return _finish(snap, taken_at, name)


def _check_file(path: str) -> None:
    """A ModelError if ``path`` is a regular file larger than :data:`MAX_SNAPSHOT_BYTES` or not a
    regular file (what :func:`read_text` would refuse, said before the fast path maps the file)."""
    try:
        st = os.stat(path)
    except OSError:
        return  # read_text names it (no such file, no permission)
    if stat.S_ISREG(st.st_mode) and st.st_size > MAX_SNAPSHOT_BYTES:
        raise ModelError(str(Path(path)), f"is {st.st_size} bytes, more than the limit of "
                                          f"{_size(MAX_SNAPSHOT_BYTES)}")


def _finish(snap: Snapshot, taken_at: datetime | None, name: str) -> Snapshot:
    if taken_at is not None:
        snap = replace(snap, taken_at=taken_at)
    if not snap.nodes:
        raise ModelError(name, "contains no Node objects; a snapshot needs the cluster's nodes")
    missing = sorted(node for node in snap.pods_by_node if node not in snap.nodes)
    if missing:  # the API server keeps such pods a moment after their node is deleted
        pods = sum(len(snap.pods_by_node[node]) for node in missing)
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        note = (f"{pods} pod(s) bound to {len(missing)} node(s) not in the snapshot ({shown}): left out of every "
                f"decision (a node deleted just before the snapshot was taken leaves such pods for a moment)")
        snap = replace(snap, notes=(*snap.notes, note))
    return snap


def load_usage_files(paths: Iterable[str]) -> Usage:
    """``simulate --usage FILE``...: every file read, checked and merged; a bad file is a
    :class:`ModelError` naming the file and the item/field."""
    usage = Usage()
    for path in paths:
        try:
            data = read_file_bytes(path, MAX_USAGE_FILE_BYTES)
        except InputRefused as exc:
            raise ModelError(path, str(exc)) from None
        except FileNotFoundError:
            raise ModelError(path, "no such file") from None
        except IsADirectoryError:
            raise ModelError(path, "is a directory, expected a JSON file") from None
        except OSError as exc:
            raise ModelError(path, f"cannot read: {exc.strerror or exc}") from None
        try:
            doc = json.loads(data)
        except UnicodeDecodeError as exc:
            raise ModelError(path, f"is not UTF-8 text: invalid byte at offset {exc.start}") from None
        except json.JSONDecodeError as exc:
            raise ModelError(path, f"is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        usage = usage.merged(usage_from_document(doc, path))
    return usage

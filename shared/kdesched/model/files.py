"""Reading cluster snapshot files: YAML or JSON, a ``v1`` List or several documents, or stdin.

Why: ``kdesched simulate`` must accept exactly what ``kubectl get nodes,pods,... -A -o yaml``
writes, and must fail on a broken file with one line naming the file, document, item and field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from kdesched.model.errors import ModelError
from kdesched.model.gcpause import paused_gc
from kdesched.model.snapshot import Snapshot

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(path: str) -> tuple[str, str]:
    """The text of ``path`` (``-`` = stdin) and the name to use in messages."""
    if path == "-":
        try:
            return sys.stdin.read(), "<stdin>"
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError("<stdin>", f"cannot read: {exc}") from None
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8"), str(p)
    except FileNotFoundError:
        raise ModelError(str(p), "no such file") from None
    except IsADirectoryError:
        raise ModelError(str(p), "is a directory, expected a YAML or JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(str(p), f"cannot read: {exc}") from None


def parse_documents(text: str, name: str) -> list[Any]:
    """Parse JSON (one value) or YAML (one or more documents); empty documents are dropped."""
    stripped = text.lstrip()
    json_error: ModelError | None = None
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(text)
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


def iter_json_list(text: str, name: str) -> Iterator[tuple[str, Mapping[str, Any]]] | None:
    """Stream the items of a top-level JSON object that has an ``items`` array (a ``v1 List`` or
    a typed list), one at a time; None if ``text`` is not such an object.

    Why: ``json.loads`` of a 150,000-pod file builds every dict at once (several GB). Streaming
    hands each item to the record builder and lets it be freed before the next is decoded, so the
    peak is the file's text plus the records. Items without a ``kind`` (typed lists such as
    ``PodList``, whose ``kind`` comes after ``items`` in kubectl's output) are held until the list's
    kind is known.
    """
    decoder = json.JSONDecoder()

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
    head: dict[str, Any] = {}
    try:
        pos = _skip(text, pos + 1)
        while True:
            if pos >= len(text) or text[pos] != '"':
                return None  # "{}", or not JSON: the ordinary parser decides and reports
            key, pos = decoder.raw_decode(text, pos)
            pos = expect(pos, ":")
            if key == "items" and pos < len(text) and text[pos] == "[":
                break
            head[key], pos = decoder.raw_decode(text, pos)
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == ",":
                pos = _skip(text, pos + 1)
            elif pos >= len(text) or text[pos] != "}":
                return None  # a missing delimiter: the ordinary parser reports it
    except (json.JSONDecodeError, RecursionError):
        return None  # let the ordinary parser report the error with its position

    def items() -> Iterator[tuple[str, Mapping[str, Any]]]:
        pending: list[tuple[str, dict[str, Any]]] = []
        at = _skip(text, pos + 1)
        i = 0
        try:
            while at < len(text) and text[at] != "]":
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
            while at < len(text) and text[at] != "}":  # the keys after items (kind, metadata)
                at = expect(at, ",")
                if at >= len(text) or text[at] != '"':
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
                key, at = decoder.raw_decode(text, at)
                at = expect(at, ":")
                head[key], at = decoder.raw_decode(text, at)
                at = _skip(text, at)
            end = expect(at, "}")
            if end != len(text):
                raise json.JSONDecodeError("Extra data", text, end)
        except json.JSONDecodeError as exc:
            raise bad(exc) from None
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
    text, name = read_text(path)
    streamed = iter_json_list(text, name)
    if streamed is not None:
        snap = Snapshot.from_objects(streamed)
    else:
        docs = parse_documents(text, name)
        if not docs:
            raise ModelError(name, "contains no objects")
        snap = Snapshot.from_objects(iter_objects(docs, name))
    del text
    if not snap.nodes:
        raise ModelError(name, "contains no Node objects; a snapshot needs the cluster's nodes")
    return snap

"""Rendering run reports for people (table) and tools (JSON, the contract in docs/cli.md).

Why separate: the same report is printed by ``simulate`` and ``run`` and returned by functions;
the JSON shape is a contract other tools parse, the table is for an operator at a terminal.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TextIO

import msgspec

from kdesched.engine import RunReport


def _table(rows: list[list[str]], out: TextIO) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out.writelines("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)


def write_table(report: RunReport, out: TextIO, dry_run_why: str = "",
                clock: Mapping[str, str] | None = None) -> None:
    mode = " (dry run: nothing was evicted)" if report.dry_run else ""
    if dry_run_why:
        out.write(f"{'Dry run' if report.dry_run else 'Live run'}: {dry_run_why}.\n")
    if clock:
        out.write(f"Clock: {clock['time']} (from {clock['from']}).\n")
    if dry_run_why or clock:
        out.write("\n")
    outcomes = report.outcomes
    pacing = report.plan.pacing
    steps = pacing.steps if pacing is not None and len(pacing.steps) == len(outcomes) else None
    if outcomes:
        out.write(f"EVICTIONS{mode}\n")
        rows = [["NAMESPACE", "POD", "NODE", "STRATEGY", *(["WAVE", "DESTINATION"] if steps else []), "RESULT",
                 "REASON"]]
        for i, o in enumerate(outcomes):
            e = o.eviction
            result = "would evict" if o.result == "dry-run" else o.result
            if o.cause and o.result not in ("evicted", "dry-run", "paced", "abandoned", o.cause):
                result = f"{o.result} ({o.cause})"  # failed (server-error), already-gone (replaced)...
            reason = (e.reason if o.result == "dry-run" or (o.result == "evicted" and o.cause != "confirmed")
                      else f"{e.reason} [{o.message}]")
            # the node the planner reserved for the pod's replacement ("somewhere to go"); "-" = none
            wave = [str(steps[i].wave), steps[i].destination or "-"] if steps else []
            rows.append([e.pod.namespace, e.pod.name, e.node, e.strategy, *wave, result, reason])
        _table(rows, out)
    if steps and pacing is not None and pacing.waves > 1:
        out.write("\nWAVES (wave N of a workload starts once its wave N-1 replacements are Ready)\n")
        for w in report.waves_json():
            when = ("at once" if w["wave"] == 0 else
                     f"once the replacements of wave {w['wave'] - 1} are Ready: {', '.join(w['workloads'])}")
            out.write(f"wave {w['wave']} ({when}): {', '.join(w['evictions'])}\n")
    if not outcomes:
        out.write(f"No evictions{mode}.\n")
    blocked = list(report.plan.refusals)
    if blocked:
        out.write("\nKEPT (a strategy wanted to evict, a budget, limit or safety check said no)\n")
        rows = [["NAMESPACE", "POD", "NODE", "STRATEGY", "WHY"]]
        for r in blocked:
            rows.append([r.pod.namespace, r.pod.name, r.pod.node_name, r.strategy, r.reason])
        _table(rows, out)
    after = report.pods_after()
    if report.plan.pods_before:
        out.write("\nPODS PER NODE\n")
        rows = [["NODE", "BEFORE", "AFTER"]]
        for node, before in report.plan.pods_before.items():
            rows.append([node, str(before), str(after.get(node, before))])
        _table(rows, out)
    out.writelines(f"note: {note}\n" for note in report.plan.notes)
    safety = report.mode()
    out.write(f"mode: {'kdesched safety defaults' if safety['enabled'] else 'upstream parity'} ({safety['why']})\n")
    out.writelines(f"error: {err}\n" for err in report.plan.errors)
    counts = report.counts()
    names = {"dry-run": "would be evicted (dry run)", "evicted": "evicted", "already-gone": "already gone",
             "blocked": "blocked by a PodDisruptionBudget", "throttled": "throttled by the API server (429)",
             "failed": "failed", "paced": "paced (held for the workload's replacements)",
             "abandoned": "abandoned (the run was stopped)"}
    summary = ", ".join(f"{v} {names.get(k, k)}" for k, v in sorted(counts.items())) or "nothing to evict"
    out.write(f"\n{len(report.plan.evictions)} eviction(s) planned on {len(report.plan.nodes)} node(s): {summary}.\n")
    lost = report.events_lost
    if lost:
        out.write(f"{lost} Event(s) about these evictions could not be posted (see the log).\n")


def write_json(report: RunReport, out: TextIO, dry_run_why: str = "",
               clock: Mapping[str, str] | None = None) -> None:
    data = report.to_json()
    head: dict[str, Any] = {"dryRun": data.pop("dryRun")}
    if dry_run_why:
        head["dryRunWhy"] = dry_run_why
    if clock:
        head["clock"] = dict(clock)
    out.write(dumps_indented({**head, **data}))
    out.write("\n")


class _NotPlain(Exception):
    """A value msgspec would not write exactly as ``json`` does."""


def _plain(obj: Any) -> Any:
    """``obj`` with every float replaced by the text ``json`` writes for it (a msgspec ``Raw``);
    containers are copied only where a float was replaced. Raises :class:`_NotPlain` for anything
    but exact str / int / bool / None / finite float / list / tuple / dict with str keys (a str
    or int subclass such as an Enum, a non-str key, NaN...): ``json`` decides those."""
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float:
        if not math.isfinite(obj):
            raise _NotPlain
        return msgspec.Raw(float.__repr__(obj).encode())
    if t is dict:
        new: dict[str, Any] | None = None
        for k, v in obj.items():
            if type(k) is not str:
                raise _NotPlain
            tv = type(v)
            if tv is str or tv is int or tv is bool or v is None:
                continue
            p = _plain(v)
            if p is not v:
                if new is None:
                    new = dict(obj)
                new[k] = p
        return obj if new is None else new
    if t is list or t is tuple:
        items: list[Any] | None = None
        for i, v in enumerate(obj):
            tv = type(v)
            if tv is str or tv is int or tv is bool or v is None:
                continue
            p = _plain(v)
            if p is not v:
                if items is None:
                    items = list(obj)
                items[i] = p
        return obj if items is None else items
    raise _NotPlain


def dumps_indented(data: Any) -> str:
    """``json.dumps(data, indent=2)``, byte for byte, without ``json``'s pure-Python indenting
    encoder (seconds for a large simulation's report: docs/benchmarks.md): msgspec encodes and indents
    in C. Floats are written as ``json`` writes them (``repr``); anything msgspec could write
    differently (a non-ASCII character or DEL, which ``json`` escapes; see :func:`_plain`) goes
    through ``json`` itself."""
    try:
        raw = msgspec.json.format(msgspec.json.encode(_plain(data)), indent=2)
    except (_NotPlain, RecursionError, msgspec.MsgspecError, OverflowError):
        raw = b""
    if not raw or not raw.isascii() or b"\x7f" in raw:
        return json.dumps(data, indent=2)
    return raw.decode("ascii")


def write_report(report: RunReport, fmt: str, out: TextIO, *, dry_run_why: str = "",
                 clock: Mapping[str, str] | None = None) -> None:
    """Print ``report`` as a table or JSON; ``dry_run_why`` says why the run is (not) a dry run
    (``"dryRunWhy"``), ``clock`` the time ages were measured against and where it came from."""
    (write_json if fmt == "json" else write_table)(report, out, dry_run_why, clock)


def dump_json(data: Any, out: TextIO) -> None:
    out.write(dumps_indented(data))
    out.write("\n")

"""Rendering run reports for people (table) and tools (JSON, the contract in docs/cli.md).

Why separate: the same report is printed by ``simulate`` and ``run`` and returned by functions;
the JSON shape is a contract other tools parse, the table is for an operator at a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TextIO

from kdesched.engine import RunReport


def _table(rows: list[list[str]], out: TextIO) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


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
        rows = [["NAMESPACE", "POD", "NODE", "STRATEGY", *(["WAVE"] if steps else []), "RESULT", "REASON"]]
        for i, o in enumerate(outcomes):
            e = o.eviction
            result = "would evict" if o.result == "dry-run" else o.result
            reason = e.reason if o.result in ("evicted", "dry-run") else f"{e.reason} [{o.message}]"
            wave = [str(steps[i].wave)] if steps else []
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
    for note in report.plan.notes:
        out.write(f"note: {note}\n")
    safety = report.mode()
    out.write(f"mode: {'kdesched safety defaults' if safety['enabled'] else 'upstream parity'} ({safety['why']})\n")
    for err in report.plan.errors:
        out.write(f"error: {err}\n")
    counts = report.counts()
    names = {"dry-run": "would be evicted (dry run)", "evicted": "evicted", "already-gone": "already gone",
             "blocked": "blocked by a PodDisruptionBudget", "failed": "failed",
             "paced": "paced (held for the workload's replacements)"}
    summary = ", ".join(f"{v} {names.get(k, k)}" for k, v in sorted(counts.items())) or "nothing to evict"
    out.write(f"\n{len(report.plan.evictions)} eviction(s) planned on {len(report.plan.nodes)} node(s): {summary}.\n")


def write_json(report: RunReport, out: TextIO, dry_run_why: str = "",
               clock: Mapping[str, str] | None = None) -> None:
    data = report.to_json()
    head: dict[str, Any] = {"dryRun": data.pop("dryRun")}
    if dry_run_why:
        head["dryRunWhy"] = dry_run_why
    if clock:
        head["clock"] = dict(clock)
    json.dump({**head, **data}, out, indent=2, sort_keys=False)
    out.write("\n")


def write_report(report: RunReport, fmt: str, out: TextIO, *, dry_run_why: str = "",
                 clock: Mapping[str, str] | None = None) -> None:
    """Print ``report`` as a table or JSON; ``dry_run_why`` says why the run is (not) a dry run
    (``"dryRunWhy"``), ``clock`` the time ages were measured against and where it came from."""
    (write_json if fmt == "json" else write_table)(report, out, dry_run_why, clock)


def dump_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2)
    out.write("\n")

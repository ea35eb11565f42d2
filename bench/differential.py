"""Differential report: kdesched ``simulate`` against the upstream descheduler binary on generated clusters.

Why: the parity promise (a plain upstream policy decides in ``kdesched simulate``/``run`` as the
descheduler v0.36 does) deserves a number, and every place where the two decide differently
deserves a cause. This script runs the corpus of ``tests/realk8s/diffcorpus.py`` (a larger one
than CI's) and prints:

* the agreement rate in eviction counts: runs where kdesched and upstream evict the same number of
  pods, and runs where every count agrees (total, per strategy, per node, per owner);
* every disagreement with its cause (checked by re-deciding, see ``diffcorpus.explain``), and the
  ones no documented cause explains.

Each cluster is decided twice per strategy set: every strategy of the policy alone ("isolated",
the strict comparison), and the whole policy in one upstream cycle ("whole policy", where
kdesched's plan-aware decisions differ on purpose).

It needs the real binaries (etcd, kube-apiserver, descheduler), found as the real-cluster tier
finds them (``$KDESCHED_K8S_BIN``, then the k8s kit beside the repository: see
``tests/realk8s/controlplane.py``). By default it starts its own etcd + kube-apiserver
(``tests/realk8s/controlplane.py``) and stops them at the end. ``--kubeconfig`` uses an existing,
**disposable** API server instead: every Node, and every pod of the namespaces kube-system,
diff-a and diff-b, is deleted between clusters.

    python -m bench.differential --seeds 40
    python -m bench.differential --seeds 1-100 --json report.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.realk8s import diffcorpus as dc


def parse_seeds(text: str) -> list[int]:
    """``40`` = seeds 1..40; ``5-9`` = 5..9; ``1,4,7`` = those."""
    if "," in text:
        return [int(x) for x in text.split(",") if x.strip()]
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return list(range(1, int(text) + 1))


@contextlib.contextmanager
def cluster(kubeconfig: str | None) -> Iterator[str]:
    """A kubeconfig: the given one, or that of a control plane started (and stopped) here."""
    if kubeconfig:
        yield kubeconfig
        return
    from tests.realk8s.controlplane import ControlPlane  # the real-cluster fixture's own launcher

    bin_dir = dc.k8s_bin_dir()
    assert bin_dir is not None, "checked by main()"
    with ControlPlane(bin_dir) as cp:
        yield str(cp.admin_kubeconfig)


def summarize(results: Sequence[dc.SeedResult]) -> dict[str, Any]:
    """Counts for the report and for ``--json``."""
    runs = [r for s in results for r in s.runs]
    isolated = [r for r in runs if r.strategy != "*"]
    combined = [r for r in runs if r.strategy == "*"]

    def rates(rs: Sequence[dc.Run]) -> dict[str, Any]:
        same_count = sum(1 for r in rs if len(r.kdesched) == len(r.upstream))
        return {"runs": len(rs), "sameEvictionCount": same_count, "allCountsAgree": sum(1 for r in rs if r.agree),
                "explained": sum(1 for r in rs if not r.agree and r.accepted),
                "unexplained": sum(1 for r in rs if not r.accepted),
                "redrawn": sum(1 for r in rs if r.upstream_cycles > 1),
                "kdeschedEvictions": sum(len(r.kdesched) for r in rs),
                "upstreamEvictions": sum(len(r.upstream) for r in rs)}

    per_strategy: dict[str, list[dc.Run]] = defaultdict(list)
    for r in isolated:
        per_strategy[r.strategy].append(r)
    causes = Counter(c for r in runs if not r.agree for c in r.causes)
    return {
        "seeds": [s.seed for s in results],
        "isolated": rates(isolated),
        "wholePolicy": rates(combined),
        "strategies": {name: {**rates(rs), "withEvictions": sum(1 for r in rs if r.kdesched or r.upstream)}
                       for name, rs in per_strategy.items()},
        "causes": dict(causes),
        "disagreements": [
            {"seed": r.seed, "strategy": r.strategy, "kdesched": len(r.kdesched), "upstream": len(r.upstream),
             "causes": list(r.causes), "unaccepted": not r.accepted, "upstreamCycles": r.upstream_cycles,
             "differences": [str(d) for d in r.differences]}
            for r in runs if not r.agree or r.upstream_cycles > 1
        ],
    }


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.1f}%" if d else "-"


def print_report(summary: dict[str, Any], elapsed: float, out: Any = sys.stdout) -> None:
    seeds = summary["seeds"]
    w = out.write
    w(f"differential: {len(seeds)} generated clusters (seeds {seeds[0]}..{seeds[-1]}; policies A, B, "
      f"C by seed % 3), kdesched simulate vs upstream descheduler, {elapsed:.0f} s\n\n")
    for title, key in (("each strategy alone", "isolated"), ("whole policy in one cycle", "wholePolicy")):
        r = summary[key]
        w(f"{title}: {r['runs']} runs, {r['kdeschedEvictions']} evictions by kdesched, "
          f"{r['upstreamEvictions']} by upstream\n")
        w(f"  same eviction count        {r['sameEvictionCount']:4d}  {_pct(r['sameEvictionCount'], r['runs'])}\n")
        w(f"  every count agrees         {r['allCountsAgree']:4d}  {_pct(r['allCountsAgree'], r['runs'])}"
          "   (total, per strategy, per node, per owner)\n")
        w(f"  differ, documented cause   {r['explained']:4d}\n")
        w(f"  differ, NOT ACCEPTED       {r['unexplained']:4d}   (no documented cause, or a kdesched bug)\n")
        w(f"  upstream re-drawn          {r['redrawn']:4d}   (another upstream cycle was needed; the last one counts)\n\n")
    w("per strategy (alone):\n")
    w(f"  {'STRATEGY':46} {'RUNS':>4} {'EVICTING':>8} {'KDESCHED':>8} {'UPSTREAM':>8} {'AGREE':>5} "
      f"{'EXPLAINED':>9} {'NOT ACC.':>8}\n")
    for name, r in summary["strategies"].items():
        w(f"  {name:46} {r['runs']:4d} {r['withEvictions']:8d} {r['kdeschedEvictions']:8d} "
          f"{r['upstreamEvictions']:8d} {r['allCountsAgree']:5d} {r['explained']:9d} {r['unexplained']:8d}\n")
    w("\ncauses:\n")
    for cid, n in sorted(summary["causes"].items(), key=lambda kv: -kv[1]):
        c = dc.CAUSES[cid]
        w(f"  {cid} ({c.kind}) x{n}: {c.summary}\n      docs: {c.docs}\n")
    w("\nevery disagreement:\n")
    for d in summary["disagreements"]:
        label = "whole policy" if d["strategy"] == "*" else d["strategy"]
        cause = ", ".join(d["causes"]) or "UNEXPLAINED"
        if any(dc.CAUSES[c].kind == dc.BUG for c in d["causes"]):
            cause += " (a kdesched bug: NOT accepted)"
        again = f" (upstream cycle {d['upstreamCycles']})" if d["upstreamCycles"] > 1 else ""
        w(f"  seed {d['seed']} {label}: kdesched {d['kdesched']}, upstream {d['upstream']}{again} -> {cause}\n")
        if not d["causes"] or d["unaccepted"]:
            for diff in d["differences"]:
                w(f"      {diff}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.differential", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="40", help="N (= 1..N), A-B or a comma list (default 40)")
    parser.add_argument("--kubeconfig", help="use this disposable API server instead of starting one")
    parser.add_argument("--workdir", help="keep snapshots, policies and upstream logs here (default: a temp dir)")
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    parser.add_argument("--no-whole-policy", action="store_true", help="only run each strategy alone")
    args = parser.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: expected N, A-B or a comma-separated list of integers")
    if not seeds:
        parser.error("--seeds: no seeds")
    try:
        found = dc.k8s_bin_dir()
    except RuntimeError as exc:  # the kit is there but unpacking or a checksum failed
        print(f"bench.differential: {exc}", file=sys.stderr)
        return 2
    if found is None:
        from tests.realk8s.controlplane import SKIP_REASON

        print(f"bench.differential: the real binaries are missing ({SKIP_REASON})", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results: list[dc.SeedResult] = []
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="kdesched-diff-"))
        Path(workdir).mkdir(parents=True, exist_ok=True)
        kubeconfig = stack.enter_context(cluster(args.kubeconfig))
        api = dc.Api(kubeconfig)
        dc.reset(api)
        for seed in seeds:
            results.append(dc.run_seed(api, kubeconfig, seed, workdir, combined=not args.no_whole_policy))
            r = results[-1]
            bad = sum(1 for x in r.runs if not x.accepted)
            print(f"seed {seed}: {sum(1 for x in r.runs if x.agree)}/{len(r.runs)} runs agree"
                  + (f", {bad} NOT ACCEPTED" if bad else ""), file=sys.stderr, flush=True)
    summary = summarize(results)
    print_report(summary, time.perf_counter() - started)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 1 if summary["isolated"]["unexplained"] or summary["wholePolicy"]["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())

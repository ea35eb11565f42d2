"""Every benchmark the docs name runs, at a tiny size, as its documented command line.

Why: a benchmark is only run by hand, before a figure goes into docs/benchmarks.md, so nothing
noticed when a refactoring broke one (``bench/bench_serve_cache.py`` died with ``AttributeError:
module 'kdesched.reactor.run.runner' has no attribute 'plan_run'``, and the serve warm-cache figures
could no longer be reproduced). Here each runs as a user would run it (a subprocess of
``python bench/NAME.py``), on a few nodes, against the fake API server where it needs one; the
ones that need a real control plane, the upstream binary or Knative run in the real tiers, on
their fixtures (tests/realk8s/test_benchmarks_real.py, tests/realk8s/test_benchmark_differential.py,
tests/realknative/test_benchmark_knative.py). The figures are not checked, only that each
benchmark completes and prints its result.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "docs" / "benchmarks.md", REPO / "docs" / "reactor.md", REPO / "bench" / "README.md"]

# script -> (arguments at a tiny size, a line its output must contain); {tmp} is a scratch folder
FAST: dict[str, tuple[list[str], str]] = {
    "generate": (["--nodes", "3", "--pods-per-node", "2", "-o", "{tmp}/c.json"], "generated 3 nodes, 6 pods"),
    "bench_simulate": (["--sizes", "4x3", "--repeat", "1", "--phases", "parse,load,decision,cli",
                        "--out", "{tmp}/simulate.json"], "4x3: decision (load + plan)"),
    "bench_events": (["--nodes", "20", "--pods-per-node", "3", "--repeat", "1"],
                     "node-scoped taints.changed reads"),
    "bench_decode": (["--rounds", "1", "--pods", "30", "{tmp}/c.json"], "fast "),
    "bench_serve_cache": (["--api", "fake", "--nodes", "6", "--pods-per-node", "3", "--repeat", "1"],
                          "taint on a loaded node (taints.changed) (median)"),
    "bench_ledger": (["--runs", "2", "--repeat", "1"], "ledger "),
    "bench_cache_relist_peak": (["--nodes", "4", "--pods-per-node", "3"], "410 re-LISTs"),
    "bench_balance_decision": (["--cluster", "{tmp}/c.json", "--repeat", "1"], "stop when spent"),
    "bench_function_start": (["--functions", "deadletter", "--targets", "both", "--repeat", "1",
                              "--out", "{tmp}/start.json"], "| deadletter |"),
}
# run in the real tiers (tests/realk8s/test_benchmark*.py, tests/realknative/test_benchmark_knative.py)
REAL = {"bench_reaction", "bench_run_vs_upstream", "differential", "bench_knative_taint", "bench_admissions",
        "bench_pool_maintenance"}
NEEDS_CLUSTER_FILE = {"bench_decode", "bench_balance_decision"}


def named_in_docs() -> set[str]:
    """The benchmark scripts the docs name (``bench/NAME.py`` or ``python -m bench.NAME``)."""
    names: set[str] = set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        names.update(re.findall(r"(?<![\w/])bench/(\w+)\.py\b", text))
        names.update(re.findall(r"-m bench\.(\w+)\b", text))
    return names - {"__init__", "machine"}


def test_every_benchmark_the_docs_name_is_run_by_a_test() -> None:
    missing = named_in_docs() - set(FAST) - REAL
    assert not missing, f"benchmarks named in the docs without a run in the tests: {sorted(missing)}"
    assert all((REPO / "bench" / f"{name}.py").is_file() for name in [*FAST, *REAL])


def run_bench(name: str, args: list[str], tmp: Path, timeout: float = 120) -> str:
    argv = [a.replace("{tmp}", str(tmp)) for a in args]
    done = subprocess.run([sys.executable, str(REPO / "bench" / f"{name}.py"), *argv], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def tiny_cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("bench")
    run_bench("generate", FAST["generate"][0], tmp)
    return tmp


@pytest.mark.parametrize("name", sorted(FAST))
def test_benchmark_runs_at_a_tiny_size(name: str, tiny_cluster: Path, tmp_path: Path) -> None:
    args, expected = FAST[name]
    tmp = tiny_cluster if name in NEEDS_CLUSTER_FILE or name == "generate" else tmp_path
    out = run_bench(name, args, tmp)
    assert expected in out, out[-2000:]

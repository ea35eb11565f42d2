"""Decoder candidates for JSON snapshot files, measured on the same pods in the same run.

Why: choosing the JSON decoder for ``kdesched.model.fastload`` is a measurement, not a guess, and
a shared machine makes wall times noisy. Every candidate decodes the same Pod items (each as its own
bytes, as the loader sees them) in interleaved rounds, timed in CPU seconds (``process_time``) with
the cyclic GC paused as the loader pauses it; the best round of each is reported. Then the loader
itself, fast path against the ordinary path, each in a fresh interpreter (CPU seconds and peak RSS).

    python bench/bench_decode.py FILE [--rounds 3] [--pods 20000]

``orjson`` is measured when it is installed (it is not a dependency of kdesched).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from kdesched.model import fastload

_CHILD = """
import json, resource, sys, time
from kdesched.model import files
if sys.argv[1] == "ordinary":
    files.load_json_list = lambda path, name: None
wall, cpu = time.perf_counter(), time.process_time()
snap = files.load_snapshot(sys.argv[2])
print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "pods": len(snap.pods),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def pod_items(path: str, limit: int) -> list[bytes]:
    with open(path, "rb") as f:
        head = fastload._HEAD.decode(f.read())
    pods = []
    for raw in head.items or ():
        item = bytes(raw)
        if b'"kind":"Pod"' in item[:200]:
            pods.append(item)
            if len(pods) >= limit:
                break
    return pods


def candidates() -> dict[str, Callable[[bytes], Any]]:
    typed = msgspec.json.Decoder(fastload._Item)
    found: dict[str, Callable[[bytes], Any]] = {
        "json (stdlib)": json.loads,
        "msgspec, untyped (dicts)": msgspec.json.decode,
        "msgspec, typed structs (kdesched's fields)": typed.decode,
        "msgspec typed + Pod record (the fast path)": lambda b: fastload._pod(typed.decode(b)),
    }
    try:
        import orjson  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        found["orjson (dicts)"] = orjson.loads
    return found


def measure(pods: list[bytes], rounds: int) -> dict[str, float]:
    best: dict[str, float] = {}
    gc.disable()
    try:
        for _ in range(rounds):
            for name, decode in candidates().items():
                for cache in fastload._CACHES:  # each round starts cold, as a load does
                    cache.clear()
                start = time.process_time()
                for item in pods:
                    decode(item)
                per_pod = (time.process_time() - start) / len(pods) * 1e6
                best[name] = min(best.get(name, per_pod), per_pod)
    finally:
        gc.enable()
    return best


def loader(path: str, mode: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, path], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=20000)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}; CPUs: {os.cpu_count()}; Python {sys.version.split()[0]}")
    pods = pod_items(args.file, args.pods)
    size = sum(len(p) for p in pods) / len(pods)
    print(f"\n{len(pods)} pods, {size:.0f} bytes each; CPU microseconds per pod, best of {args.rounds} rounds:")
    for name, us in sorted(measure(pods, args.rounds).items(), key=lambda x: x[1]):
        print(f"  {us:7.1f}  {name}")
    print(f"\nload_snapshot({args.file}), fresh interpreters, best of {args.rounds} (fast/ordinary interleaved):")
    runs: dict[str, list[dict[str, Any]]] = {"fast": [], "ordinary": []}
    for _ in range(args.rounds):
        for mode, results in runs.items():
            results.append(loader(args.file, mode))
    for mode, results in runs.items():
        cpu = min(r["cpu_s"] for r in results)
        wall = min(r["wall_s"] for r in results)
        peak = max(r["peak_rss_mb"] for r in results)
        print(f"  {mode:9} cpu {cpu:6.2f} s  wall {wall:6.2f} s  peak RSS {peak:6.0f} MB  pods {results[0]['pods']}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Decoder candidates for JSON snapshot files, measured on the same pods in the same run.

Why: choosing the JSON decoder for ``kdesched.model.fastload`` is a measurement, not a guess, and
a shared machine makes wall times noisy. Every candidate decodes the same Pod items (each as its own
bytes, as the loader sees them) in interleaved rounds, timed in CPU seconds (``process_time``) with
the cyclic GC paused as the loader pauses it; the best round of each is reported. Then the same
pods as API LIST pages of 500 (what ``kdesched run`` and ``serve`` read) turned into a snapshot,
``decode_list_page`` against ``json`` and the validating parser. Then the file loader itself, fast
path against the ordinary path, each in a fresh interpreter (CPU seconds and peak RSS).

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
from kdesched.model.snapshot import Snapshot

_CHILD = """
import json, sys, time
from kdesched.model import files
if sys.argv[1] == "ordinary":
    files.load_json_list = lambda path, name: None
wall, cpu = time.perf_counter(), time.process_time()
snap = files.load_snapshot(sys.argv[2])
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork + exec
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "pods": len(snap.pods),
                  "peak_rss_mb": hwm / 1024}))
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


def api_pages(pods: list[bytes], per_page: int = 500) -> list[bytes]:
    """The pods as a LIST returns them: pages of ``per_page``, items without kind/apiVersion."""
    objs = [{k: v for k, v in json.loads(p).items() if k not in ("kind", "apiVersion")} for p in pods]
    return [json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                        "items": objs[i:i + per_page]}, separators=(",", ":")).encode()
            for i in range(0, len(objs), per_page)]


def _ordinary_page(data: bytes) -> list[Any]:
    """What ``KubeClient._list_page`` does without the fast path."""
    items = []
    for item in json.loads(data).get("items") or ():
        if isinstance(item, dict):
            item.setdefault("kind", "Pod")
            item.setdefault("apiVersion", "v1")
            items.append(item)
    return items


def measure_pages(pages: list[bytes], rounds: int) -> dict[str, float]:
    ways: dict[str, Callable[[bytes], list[Any]]] = {
        "json + Pod.from_api (before)": _ordinary_page,
        "decode_list_page (fast path)": lambda d: (fastload.decode_list_page(d, "Pod", "v1") or ([], {}))[0],
    }
    best: dict[str, float] = {}
    gc.disable()
    try:
        for _ in range(rounds):
            for name, decode in ways.items():
                start = time.process_time()
                objects = [(f"API Pod list [{i}]", x) for i, x in enumerate(x for d in pages for x in decode(d))]
                Snapshot.from_objects(objects)
                spent = time.process_time() - start
                best[name] = min(best.get(name, spent), spent)
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
    pages = api_pages(pods)
    print(f"\nthe same pods as {len(pages)} API LIST pages of 500 ({sum(map(len, pages)) / 1e6:.1f} MB) into a "
          f"snapshot, CPU seconds, best of {args.rounds}:")
    for name, spent in measure_pages(pages, args.rounds).items():
        print(f"  {spent:6.2f}  {name}")
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

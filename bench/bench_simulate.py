"""Measure what a ``kdesched simulate`` costs, phase by phase, on synthetic clusters.

Why: the target is a 150,000-pod decision (5,000 nodes x 30 pods) in under 10 s and 1.5 GB.
Knowing only the end-to-end number hides where the time and memory go, so every phase runs in a
fresh interpreter (peak RSS is then that phase's own) and is reported separately:

* ``parse``    ``json.load`` of the cluster file: the floor no loader can go below;
* ``load``     ``load_snapshot``: parse plus building records and indexes;
* ``decision`` ``load_snapshot`` then ``plan_run`` with the default (or given) policy, both timed;
* ``cli``      ``kdesched simulate FILE --output json`` end to end, interpreter start included.

Usage: ``python bench/bench_simulate.py [--sizes 500x30,5000x30] [--repeat 1] [--policy FILE]``.
Results go to stdout (a table plus the machine's conditions) and to ``bench/out/results.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench.generate import GENERATED_AT

PHASES = ("parse", "load", "decision", "cli")
DEFAULT_SIZES = "500x30,5000x30"
NOW = GENERATED_AT.strftime("%Y-%m-%dT%H:%M:%SZ")
TARGET_SECONDS = 10.0
TARGET_MB = 1536.0
EXPERIMENTS = ("gc-off", "stream", "quantity-cache", "pdb-index", "fast-checks", "fast-pod")


# --- measurements inside the child -----------------------------------------------------------------


def _proc_status_kb(field: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _mb(kb: int) -> float:
    return round(kb / 1024, 1)


def _peak_mb() -> float:
    """Peak RSS of this process: VmHWM when /proc has it, else ru_maxrss (KiB on Linux)."""
    return _mb(_proc_status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# --- experiments: proposals measured here before anyone changes the library -------------------------

_WS = re.compile(r"[ \t\n\r]*")


def iter_json_list_items(path: str, chunk: int = 1 << 20) -> Iterator[tuple[str, Any]]:
    """Stream ``(where, object)`` pairs out of a JSON ``List`` file, one item at a time.

    A prototype for ``load_snapshot``: the whole text and the whole parsed tree never exist at
    once, so peak memory is the records plus one read buffer. Top-level keys other than
    ``items`` are parsed and dropped; a ``FooList`` gives its items the kind ``Foo`` when ``kind``
    comes before ``items`` (API server order; kubectl's ``List`` items carry their own kind)."""
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as f:
        buf, pos, eof = f.read(chunk), 0, False

        def more() -> bool:
            nonlocal buf, pos, eof
            if eof:
                return False
            data = f.read(chunk)
            eof = not data
            buf, pos = buf[pos:] + data, 0
            return bool(data)

        def skip() -> None:
            nonlocal pos
            while True:
                pos = _WS.match(buf, pos).end()  # type: ignore[union-attr]
                if pos < len(buf) or not more():
                    return

        def value() -> Any:
            nonlocal pos
            while True:
                try:
                    obj, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError:
                    if more():
                        continue
                    raise
                # a number at the buffer's end may continue in the next chunk
                if end == len(buf) and not eof and more():
                    continue
                pos = end
                return obj

        def expect(char: str) -> None:
            nonlocal pos
            skip()
            if buf[pos:pos + 1] != char:
                raise ValueError(f"{path}: expected {char!r} at offset {pos}")
            pos += 1

        expect("{")
        kind = None
        index = 0
        while True:
            skip()
            if buf[pos:pos + 1] == "}":
                return
            if buf[pos:pos + 1] == ",":
                pos += 1
                continue
            key = value()
            expect(":")
            skip()
            if key == "items" and buf[pos:pos + 1] == "[":
                pos += 1
                while True:
                    skip()
                    c = buf[pos:pos + 1]
                    if c == "]":
                        pos += 1
                        break
                    if c == ",":
                        pos += 1
                        continue
                    item = value()
                    if kind and isinstance(item, dict) and "kind" not in item and kind != "List":
                        item["kind"] = kind[:-4]
                    yield f"{path} items[{index}]", item
                    index += 1
            else:
                v = value()
                if key == "kind" and isinstance(v, str):
                    kind = v


def stream_snapshot(path: str) -> Any:
    """``load_snapshot`` built on :func:`iter_json_list_items` (JSON ``List`` files only)."""
    from kdesched.model.snapshot import Snapshot

    return Snapshot.from_objects(iter_json_list_items(path))


def install_quantity_cache() -> None:
    """Prototype: memoize ``to_resource_int`` per (resource, text); real clusters repeat a few
    dozen request strings, so the exact Fraction arithmetic runs once per distinct string."""
    from kdesched.model import records

    exact = records.to_resource_int
    cache: dict[tuple[str, Any], int] = {}

    def cached(resource: str, value: Any) -> int:
        key = (resource, value)
        try:
            return cache[key]
        except KeyError:
            pass
        except TypeError:  # unhashable: let the exact parser complain
            return exact(resource, value)
        result = cache[key] = exact(resource, value)
        return result

    records.to_resource_int = cached


def indexed_pdbs_for() -> Any:
    """Prototype: ``Snapshot.pdbs_for`` through an index instead of a scan of the namespace.

    Today every planned eviction scans all PDBs of the pod's namespace (5,000 nodes: ~500 PDBs
    per namespace, 17 million selector matches for 34,000 evictions). A PDB whose selector has
    ``matchLabels`` can only select pods carrying its first label pair, so it is filed under
    ``(namespace, key, value)``; the rest (expressions only, empty) are scanned as before. The
    result keeps the snapshot's PDB order. The real change belongs in ``Snapshot.build`` (one more
    index field); here the index is cached per snapshot object. Returns the replacement method.
    """
    indexes: dict[int, tuple[Any, dict[tuple[str, str, str], list[Any]], dict[str, list[Any]]]] = {}

    def pdbs_for(self: Any, pod: Any) -> list[Any]:
        cached = indexes.get(id(self))
        if cached is None or cached[0] is not self:
            by_label: dict[tuple[str, str, str], list[Any]] = {}
            scan: dict[str, list[Any]] = {}
            for pos, b in enumerate(self.pdbs):
                if b.selector is None:
                    continue  # a PDB without a selector selects no pod
                if b.selector.match_labels:
                    key, value = b.selector.match_labels[0]
                    by_label.setdefault((b.namespace, key, value), []).append((pos, b))
                else:
                    scan.setdefault(b.namespace, []).append((pos, b))
            cached = indexes[id(self)] = (self, by_label, scan)
        _, by_label, scan = cached
        ns = pod.namespace
        found = [(pos, b) for pos, b in scan.get(ns, ()) if b.selects(pod)]
        for key, value in pod.labels.items():
            for pos, b in by_label.get((ns, key, value), ()):
                if b.selects(pod):
                    found.append((pos, b))
        if len(found) > 1:
            found.sort(key=lambda t: t[0])
        return [b for _, b in found]

    return pdbs_for


def install_pdb_index() -> None:
    from kdesched.model.snapshot import Snapshot

    Snapshot.pdbs_for = indexed_pdbs_for()


def install_fast_checks() -> None:
    """Prototype: the record parsers' type checks with a ``type(x) is dict/list`` fast path.

    ``isinstance(x, Mapping)`` goes through the ABC machinery (~4.7 million calls for 150,000
    pods); JSON only ever yields ``dict`` and ``list``, so the ABC check is kept for the rest.
    """
    from kdesched.model import records

    slow_obj, slow_list = records._obj, records._list

    def fast_obj(raw: Any, where: str) -> Any:
        return raw if type(raw) is dict else slow_obj(raw, where)

    def fast_list(raw: Any, where: str) -> Any:
        return raw if type(raw) is list else slow_list(raw, where)

    records._obj = fast_obj
    records._list = fast_list


def fast_pod_parser() -> Any:
    """Prototype: ``Pod.from_api`` with a fast path for well-formed pods.

    The current parser validates every field and formats a location string (``spec.containers[3]``)
    for every list element whether or not anything is wrong, and checks types through the
    ``Mapping`` ABC. Here the happy path checks with ``type(x) is dict`` and builds no location
    strings; anything unexpected (a wrong type, a bad quantity, a bad time) falls back to the
    original parser, which then raises its precise error, so error messages do not change.
    Requests and QoS come from the library's ``_pod_requests`` as they are (combine with
    ``quantity-cache`` for the quantities). Returns the function to install as ``Pod.from_api``;
    records are field-for-field equal to the original parser's.
    """
    from kdesched.model import records
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
        parse_time,
    )

    slow = Pod.from_api.__func__
    pod_requests = records._pod_requests

    class Slow(Exception):
        pass

    def d(x: Any) -> Any:
        if type(x) is dict:
            return x
        if x is None:
            return EMPTY
        raise Slow

    def lst(x: Any) -> Any:
        if type(x) is list:
            return x
        if x is None:
            return ()
        raise Slow

    def strmap(x: Any) -> dict[str, str]:
        if x is None:
            return {}
        if type(x) is not dict:
            raise Slow
        for v in x.values():
            if type(v) is not str:
                return {str(k): "" if v is None else str(v) for k, v in x.items()}
        return dict(x)

    def cstatus(raw: Any) -> Any:
        raw = d(raw)
        state = d(raw.get("state"))
        waiting, term = d(state.get("waiting")), d(state.get("terminated"))
        last = d(d(raw.get("lastState")).get("terminated"))
        restarts, code, last_code = raw.get("restartCount"), term.get("exitCode"), last.get("exitCode")
        for value in (restarts, code, last_code):
            if value is not None and type(value) is not int:
                raise Slow  # the original parser names the field
        return ContainerStatus(str(raw.get("name") or ""), restarts or 0,
                               str(waiting.get("reason") or ""), str(term.get("reason") or ""),
                               code, str(last.get("reason") or ""), last_code, bool(raw.get("ready")))

    def fast(raw: Any) -> Any:
        meta = d(d(raw).get("metadata"))
        name = meta.get("name")
        if type(name) is not str or not name:
            raise Slow
        spec, status = d(raw.get("spec")), d(raw.get("status"))
        ann = meta.get("annotations")
        if ann is None:
            annotations: dict[str, str] = {}
        elif type(ann) is dict:
            annotations = {k: "" if v is None else str(v) for k, v in ann.items() if k.startswith(KEPT_ANNOTATION_PREFIXES)}
        else:
            raise Slow
        owners = []
        for o in lst(meta.get("ownerReferences")):
            o = d(o)
            owners.append(OwnerRef(str(o.get("kind") or ""), str(o.get("name") or ""), str(o.get("uid") or ""),
                                   bool(o.get("controller"))))
        containers, inits = lst(spec.get("containers")), lst(spec.get("initContainers"))
        reqs, names, qos = pod_requests(spec, containers, inits)  # the library's, unchanged
        priority = spec.get("priority")
        if priority is not None and type(priority) is not int:
            raise Slow
        volumes = []
        for v in lst(spec.get("volumes")):
            v = d(v)
            kind = next((k for k in v if k != "name"), "")
            claim = str(d(v[kind]).get("claimName") or "") if kind == "persistentVolumeClaim" else ""
            volumes.append(Volume(str(v.get("name") or ""), kind, claim))
        conditions = []
        for c in lst(status.get("conditions")):
            c = d(c)
            t = c.get("lastTransitionTime")
            conditions.append(PodCondition(str(c.get("type") or ""), str(c.get("status") or ""), str(c.get("reason") or ""),
                                           parse_time(t, "") if t else None))
        tolerations = []
        for t in lst(spec.get("tolerations")):
            t = d(t)
            op = t.get("operator") or "Equal"
            if op not in ("Equal", "Exists", "Lt", "Gt"):
                raise Slow
            tolerations.append(Toleration(str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or "")))
        aff = spec.get("affinity")
        spread = lst(spec.get("topologySpreadConstraints"))
        st, ct, dt = status.get("startTime"), meta.get("creationTimestamp"), meta.get("deletionTimestamp")
        return Pod(
            namespace=str(meta.get("namespace") or "default"), name=name, uid=str(meta.get("uid") or ""),
            node_name=str(spec.get("nodeName") or ""), phase=str(status.get("phase") or "Pending"),
            labels=strmap(meta.get("labels")), annotations=annotations, owner_refs=tuple(owners),
            priority=priority, priority_class_name=str(spec.get("priorityClassName") or ""),
            qos_class=str(status.get("qosClass") or qos), requests=reqs, requested_resource_names=names,
            tolerations=tuple(tolerations), node_selector=strmap(spec.get("nodeSelector")),
            affinity=Affinity.from_api(aff, "spec.affinity") if aff else None,
            topology_spread_constraints=tuple(
                TopologySpreadConstraint.from_api(c, f"spec.topologySpreadConstraints[{i}]") for i, c in enumerate(spread)),
            volumes=tuple(volumes), images=tuple(str(d(c).get("image") or "") for c in containers),
            container_statuses=tuple(cstatus(c) for c in lst(status.get("containerStatuses"))),
            init_container_statuses=tuple(cstatus(c) for c in lst(status.get("initContainerStatuses"))),
            ephemeral_container_statuses=tuple(cstatus(c) for c in lst(status.get("ephemeralContainerStatuses"))),
            conditions=tuple(conditions), status_reason=str(status.get("reason") or ""),
            start_time=parse_time(st, "") if st else None, creation_time=parse_time(ct, "") if ct else None,
            deletion_time=parse_time(dt, "") if dt else None, has_resource_claims=bool(spec.get("resourceClaims")),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        )

    def from_api(cls: Any, raw: Any) -> Any:
        try:
            return fast(raw)
        except Exception:  # noqa: BLE001 - anything unusual: the original parser decides, with its precise error
            return slow(cls, raw)

    return from_api


def install_fast_pod() -> None:
    from kdesched.model.records import Pod

    Pod.from_api = classmethod(fast_pod_parser())


def _load_policy(path: str | None) -> Any:
    if path:
        from kdesched.policy.load import load_policy

        return load_policy(path)
    from kdesched.policy.defaults import default_policy

    return default_policy()


def run_child(phase: str, path: str, policy_path: str | None, profile_dir: str | None,
              experiments: Sequence[str] = ()) -> dict[str, Any]:
    """Run one phase in this (fresh) process and return its figures."""
    import gc

    if "gc-off" in experiments:
        gc.disable()
    if "quantity-cache" in experiments:
        install_quantity_cache()
    if "pdb-index" in experiments:
        install_pdb_index()
    if "fast-checks" in experiments:
        install_fast_checks()
    if "fast-pod" in experiments:
        install_fast_pod()
    from kdesched.model.files import load_snapshot as standard_loader

    load_snapshot: Callable[[str], Any] = stream_snapshot if "stream" in experiments else standard_loader
    out: dict[str, Any] = {"phase": phase, "experiments": list(experiments)}
    if phase == "parse":
        out["rss_start_mb"] = _mb(_proc_status_kb("VmRSS"))
        t0 = time.perf_counter()
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        out["seconds"] = time.perf_counter() - t0
        out["objects"] = len(data.get("items", ())) if isinstance(data, dict) else 0
    elif phase == "load":
        out["rss_start_mb"] = _mb(_proc_status_kb("VmRSS"))
        t0 = time.perf_counter()
        snap = load_snapshot(path)
        out["seconds"] = out["load_seconds"] = time.perf_counter() - t0
        out["rss_records_mb"] = _mb(_proc_status_kb("VmRSS"))
        out["pods"], out["nodes"] = len(snap.pods), len(snap.nodes)
    elif phase == "decision":
        from kdesched.engine import plan_run
        from kdesched.strategies.registry import default_registry

        default_registry()  # import every strategy before the clock starts
        policy = _load_policy(policy_path)
        from kdesched.model.records import parse_time

        now = parse_time(NOW, "now")
        out["rss_start_mb"] = _mb(_proc_status_kb("VmRSS"))
        profiler = None
        if profile_dir:
            import cProfile

            profiler = cProfile.Profile()
        t0 = time.perf_counter()
        if profiler:
            profiler.enable()
        snap = load_snapshot(path)
        if profiler:
            profiler.disable()
            _dump_profile(profiler, Path(str(profile_dir)) / "load")
            profiler = cProfile.Profile()
        t1 = time.perf_counter()
        out["rss_records_mb"] = _mb(_proc_status_kb("VmRSS"))
        if profiler:
            profiler.enable()
        plan = plan_run(policy, snap, now=now)
        if profiler:
            profiler.disable()
            _dump_profile(profiler, Path(str(profile_dir)) / "plan")
        t2 = time.perf_counter()
        out["load_seconds"], out["plan_seconds"], out["seconds"] = t1 - t0, t2 - t1, t2 - t0
        out["evictions"] = len(plan.evictions)
        # a digest of the decision, so experiments can be checked to decide exactly the same
        decided = sorted(f"{e.pod.namespace}/{e.pod.name}@{e.node}:{e.strategy}" for e in plan.evictions)
        out["evictions_digest"] = hashlib.sha256("\n".join(decided).encode()).hexdigest()[:16]
        out["refusals"] = len(plan.refusals)
        out["errors"] = list(plan.errors)
        out["strategies"] = [
            {"strategy": r.strategy, "planned": r.planned, "seconds": round(r.seconds, 4)} for r in plan.strategy_runs
        ]
        out["pods"], out["nodes"] = len(snap.pods), len(snap.nodes)
    else:
        raise ValueError(f"unknown phase {phase!r}")
    out["rss_end_mb"] = _mb(_proc_status_kb("VmRSS"))
    out["peak_rss_mb"] = _peak_mb()
    return out


def _dump_profile(profiler: Any, stem: Path) -> None:
    import io
    import pstats

    profiler.dump_stats(str(stem.with_suffix(".prof")))
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(35)
    stem.with_suffix(".txt").write_text(buf.getvalue(), encoding="utf-8")


# --- the parent: generate, run children, report ------------------------------------------------------


def machine_conditions() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_total = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_total = int(line.split()[1])
    except OSError:
        pass
    commit = ""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "memory_gb": round(mem_total / 1024 / 1024, 1),
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "commit": commit,
    }


def _experiments(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown experiment(s) {', '.join(unknown)}; expected {', '.join(EXPERIMENTS)}")
    return names


def parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for part in text.split(","):
        part = part.strip()
        try:
            nodes, pods = part.lower().split("x")
            sizes.append((int(nodes), int(pods)))
        except ValueError:
            raise SystemExit(f"--sizes: {part!r} is not NODESxPODS_PER_NODE (e.g. 5000x30)") from None
        if sizes[-1][0] < 1 or sizes[-1][1] < 1:
            raise SystemExit(f"--sizes: {part!r}: both numbers must be at least 1")
    return sizes


def _child_cmd(phase: str, path: str, args: argparse.Namespace, profile_dir: str | None) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", phase, "--file", path]
    if args.policy:
        cmd += ["--policy", args.policy]
    if profile_dir:
        cmd += ["--profile-dir", profile_dir]
    if args.experiment:
        cmd += ["--experiment", ",".join(args.experiment)]
    return cmd


def run_phase(phase: str, path: str, args: argparse.Namespace, profile_dir: str | None) -> dict[str, Any]:
    """One phase in a fresh interpreter; for ``cli`` the real command, measured with wait4()."""
    if phase == "cli":
        return run_cli(path, args)
    t0 = time.perf_counter()
    proc = subprocess.run(_child_cmd(phase, path, args, profile_dir), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"phase": phase, "skipped": f"child failed (exit {proc.returncode}): {tail}"}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    return result


def _cli_command() -> list[str] | None:
    script = Path(sys.executable).parent / "kdesched"
    if script.exists():
        return [str(script)]
    found = shutil.which("kdesched")
    return [found] if found else None


def run_cli(path: str, args: argparse.Namespace) -> dict[str, Any]:
    base = _cli_command()
    if base is None:
        return {"phase": "cli", "skipped": "the kdesched command is not installed"}
    cmd = base + ["simulate", path, "--output", "json", "--now", NOW]
    if args.policy:
        cmd += ["--policy", args.policy]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read().decode("utf-8", "replace")
    result: dict[str, Any] = {"phase": "cli", "seconds": wall, "exit_code": proc.returncode,
                              "peak_rss_mb": _mb(usage.ru_maxrss), "cpu_seconds": usage.ru_utime + usage.ru_stime,
                              "stderr_lines": len(stderr.splitlines()), "stdout_bytes": len(stdout)}
    try:
        report = json.loads(stdout)
    except ValueError:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        result["skipped"] = f"kdesched simulate exited {proc.returncode} without a JSON report: {tail}"
        return result
    rows = report.get("evictions", ())
    result["evictions"] = len(rows)
    # the same digest as the decision phase (sorted ns/pod@node:strategy) and one of the ordered
    # list, so a change to the code can be checked to decide exactly the same
    decided = [f"{r['namespace']}/{r['pod']}@{r['node']}:{r['strategy']}" for r in rows]
    result["evictions_digest"] = hashlib.sha256("\n".join(sorted(decided)).encode()).hexdigest()[:16]
    result["evictions_order_digest"] = hashlib.sha256("\n".join(decided).encode()).hexdigest()[:16]
    summary = report.get("summary", {})
    result["plan_seconds"] = sum(s.get("seconds", 0) for s in summary.get("strategies", ()))
    result["errors"] = summary.get("errors", [])
    return result


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "skipped" not in r]
    if not ok:
        return runs[-1]
    best = dict(min(ok, key=lambda r: r["seconds"]))
    best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok)
    for key in ("load_seconds", "plan_seconds"):
        values = [r[key] for r in ok if key in r]
        if values:
            best[key] = min(values)
    return best


def generate_file(nodes: int, ppn: int, seed: int, directory: str) -> dict[str, Any]:
    path = os.path.join(directory, f"cluster-{nodes}x{ppn}-s{seed}.json")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.generate", "--nodes", str(nodes), "--pods-per-node", str(ppn),
                           "--seed", str(seed), "--now", NOW, "-o", path], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"generating {nodes}x{ppn} failed: {proc.stderr.strip()}")
    return {"path": path, "file_bytes": os.path.getsize(path), "generate_seconds": round(time.perf_counter() - t0, 2),
            "generator": proc.stderr.strip()}


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_table(results: list[dict[str, Any]]) -> None:
    header = ("size", "pods", "phase", "wall s", "CPU s", "load s", "plan s", "peak RSS MB", "evictions", "note")
    rows = []
    for size in results:
        for ph in size["phases"]:
            b = ph["best"]
            note = b.get("skipped", "")
            if not note and b.get("errors"):
                note = f"{len(b['errors'])} plan error(s): {b['errors'][0]}"
            if not note and ph["phase"] == "cli" and b.get("exit_code"):
                note = f"exit {b['exit_code']}"
            if len(note) > 70:
                note = note[:67] + "..."
            rows.append((size["size"], str(size["pods"]), ph["phase"], _fmt(b.get("seconds")), _fmt(b.get("cpu_seconds")),
                         _fmt(b.get("load_seconds")),
                         _fmt(b.get("plan_seconds")), _fmt(b.get("peak_rss_mb"), 0), _fmt(b.get("evictions")), note))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated NODESxPODS_PER_NODE (default {DEFAULT_SIZES})")
    parser.add_argument("--repeat", type=int, default=1, help="runs per phase; the best time is reported")
    parser.add_argument("--policy", help="DeschedulerPolicy file (default: kdesched's default policy)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--phases", default=",".join(PHASES), help=f"subset of {','.join(PHASES)}")
    parser.add_argument("--profile", action="store_true", help="also profile the decision (cProfile) into bench/out/")
    parser.add_argument("--experiment", type=_experiments, default=[],
                        help=f"comma-separated proposals to measure in the parse/load/decision children: "
                             f"{', '.join(EXPERIMENTS)} (the cli phase always runs the code as it is)")
    parser.add_argument("--keep", action="store_true", help="keep the generated cluster files (printed paths)")
    parser.add_argument("--cluster", metavar="FILE",
                        help="measure this existing cluster file (one generated by bench/generate.py for --sizes "
                             "NODESxPODS_PER_NODE and --seed) instead of generating it; it is never deleted")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "results.json"))
    # internal: one phase in a fresh interpreter
    parser.add_argument("--child", choices=PHASES[:3], help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    parser.add_argument("--profile-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(run_child(args.child, args.file, args.policy, args.profile_dir, args.experiment)))
        return 0

    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"--phases: unknown phase(s) {', '.join(unknown)}; expected {', '.join(PHASES)}")
    if args.policy and not os.path.isfile(args.policy):
        parser.error(f"--policy {args.policy}: no such file")
    sizes = parse_sizes(args.sizes)
    if args.cluster and (len(sizes) != 1 or not os.path.isfile(args.cluster)):
        parser.error("--cluster FILE: needs an existing file and exactly one size in --sizes (the file's)")
    machine = machine_conditions()
    print(f"machine: {machine['nproc']} CPU(s), {machine['cpu_model']}, {machine['memory_gb']} GB RAM, "
          f"load average {' '.join(map(str, machine['loadavg_before']))}, Python {machine['python']}, "
          f"kdesched {machine['commit']}", flush=True)
    out_dir = Path(args.out).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="kdesched-bench-")
    results: list[dict[str, Any]] = []
    try:
        for nodes, ppn in sizes:
            label = f"{nodes}x{ppn}"
            if args.cluster:
                gen = {"path": args.cluster, "file_bytes": os.path.getsize(args.cluster), "generate_seconds": None}
                print(f"{label}: {gen['file_bytes'] / 1e6:.1f} MB JSON from {args.cluster}", flush=True)
            else:
                gen = generate_file(nodes, ppn, args.seed, workdir)
                print(f"{label}: {gen['file_bytes'] / 1e6:.1f} MB JSON generated in {gen['generate_seconds']} s",
                      flush=True)
            size_result: dict[str, Any] = {
                "size": label, "nodes": nodes, "pods_per_node": ppn, "pods": nodes * ppn, "seed": args.seed,
                "file_bytes": gen["file_bytes"], "generate_seconds": gen["generate_seconds"],
                "loadavg_before": [round(x, 2) for x in os.getloadavg()], "phases": [],
            }
            for phase in phases:
                profile_dir = None
                if args.profile and phase == "decision":
                    profile_dir = str(out_dir / f"profile-{label}")
                    os.makedirs(profile_dir, exist_ok=True)
                runs = [run_phase(phase, gen["path"], args, profile_dir if i == 0 else None) for i in range(args.repeat)]
                best = best_of(runs)
                size_result["phases"].append({"phase": phase, "best": best, "runs": runs})
                shown = best.get("skipped") or (f"{best['seconds']:.2f} s, peak {best['peak_rss_mb']:.0f} MB"
                                                 + (f", {best['evictions']} evictions" if "evictions" in best else ""))
                print(f"  {phase}: {shown}", flush=True)
            results.append(size_result)
            if args.keep:
                print(f"  kept {gen['path']}")
            elif not args.cluster:
                os.unlink(gen["path"])
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print_table(results)
    for size in results:
        decision = next((p["best"] for p in size["phases"] if p["phase"] == "decision"), None)
        if decision and "skipped" not in decision:
            ok_t = decision["seconds"] <= TARGET_SECONDS
            ok_m = decision["peak_rss_mb"] <= TARGET_MB
            print(f"{size['size']}: decision (load + plan) {decision['seconds']:.2f} s "
                  f"[target {TARGET_SECONDS:.0f} s: {'met' if ok_t else 'MISSED'}], peak {decision['peak_rss_mb']:.0f} MB "
                  f"[target {TARGET_MB:.0f} MB: {'met' if ok_m else 'MISSED'}]")
    payload = {"machine": machine, "now": NOW, "policy": args.policy or "default", "repeat": args.repeat,
               "experiments": args.experiment, "targets": {"seconds": TARGET_SECONDS, "peak_rss_mb": TARGET_MB},
               "results": results}
    Path(args.out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

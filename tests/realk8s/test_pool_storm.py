"""The storm grown to cluster size (issue 28, item 7): node pools tainted and lifted under a hundred
workloads, against ``kdesched serve`` on the real control plane.

30 nodes of 4 CPUs in three pools (``pool=a|b|c``), 100 workloads (tests/realk8s/pool_storm.py:
Deployments of 2-5 replicas with varied ``kdesched.dev/max-unavailable`` annotations and PDBs, eight
StatefulSets; 345 pods, 25.7 CPUs, so one pool holds them all), every pod Ready, then replacements
Ready 1.5 s after they are bound. A seeded generator taints whole pools at once (the ten node
writes concurrent), lifts them, taints a second pool while the first is still being drained, and
taints a few single nodes; never all three pools. One ``kdesched serve`` (sweep off) receives it,
with the shipped default policy, cool-downs of 5 s and ``replacementTimeoutSeconds`` 20 as in
test_storm.py; the cluster-wide bucket keeps its default (300/min, burst 100).

Checked from outside, through the admin API, all the while (storm.Checker, sampling every pod and
node every 0.3 s) and at the end:

* no workload ever has fewer Ready pods than spec.replicas minus its allowance, no PDB below its
  floor (every pod that is not Ready exists because kdesched evicted one: the storm deletes no pod);
* no pod evicted twice, none evicted with nowhere to go (storm.analyse_evictions);
* within BOUND seconds of the last storm write, no pod on a tainted node and every workload whole
  (every move finished);
* the ledger stays bounded: its largest object (a workload record or the commit Lease, as JSON)
  under 192 KiB all the while, and no 422 in serve's log.

Safety (the first two items, and the ledger's) and liveness (the third) fail the test. Liveness
was an expected failure until issue 28's pool maintenance was fixed: at 0d4793d seed 1 left 26 pods
on the tainted pool c 150 s after the last write (serve dropped node events whose runs lost 12
ledger commits in a row, and moves whose scope made no progress for 20 s ended paced, with the
sweep off), at 5c8fa8c still 4 to 20 (a node run refused by the cluster-wide bucket was never
repeated). With node runs decided together and the bucket's refusal repeated at its next token
(5af9837), seeds 1, 2 and 3 settle 11.1 s, 25.2 s and 17.5 s after the last write (load average 6-7
from other work). A move whose repeats timed out (replacements slower than the timeout: a loaded CI
machine left a pod on tainted poolc-6 this way) is kept dormant and woken by its replacement's Ready;
``KDESCHED_POOL_STORM_READY_DELAY=12 KDESCHED_POOL_STORM_REPLACEMENT_TIMEOUT=2`` forces it: 3 pods left
after 150 s before, settled in 23.2 s after (docs/testing.md). ``KDESCHED_POOL_STORM_STRICT=0`` turns a
liveness failure back into an expected failure (a machine far slower than the bound assumes); safety
always fails.

Seeds: ``KDESCHED_POOL_STORM_SEEDS="serve=1,2;functions=3"`` (default: serve seed 1; the
functions variant, two ``kdesched function taints`` processes fed by the test as in
test_storm.py, runs only when asked), events per seed ``KDESCHED_POOL_STORM_EVENTS`` (default 7).
Wall time on the 2-core development machine (load average 4-6 from other work): 263 s for seed 1
(setup of the 345 pods 27 s, the storm 80 s, then up to BOUND = 150 s waiting for it to settle:
less once the maintenance finishes), 281 s for the file. ``KDESCHED_STORM_REPORT=FILE`` appends
each seed's summary to FILE and keeps the processes' logs beside it, as test_storm.py does.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kdesched.reactor.events.classifier import Classifier
from kdesched.reactor.events.routing import TAINTS_CHANGED

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet
from tests.realk8s.pool_storm import (
    ALL_NODES,
    MAX_SINGLE,
    POOLS,
    RECORD_LIMIT_BYTES,
    ROOM_FACTOR,
    LedgerWatch,
    Model,
    PoolEvent,
    apply_event,
    generate,
    pool_workloads,
    requested_milli,
    setup_cluster,
)
from tests.realk8s.serve_stories import Serve, policy_text, wait_leading, write_file
from tests.realk8s.storm import (
    Checker,
    Deliverer,
    FunctionProc,
    SeedResult,
    Violation,
    analyse_evictions,
    by_name,
    classify,
    evicted_by,
    evictions,
    misplaced,
    pods_by_uid,
    report,
    wait_settled,
)


def seeds_from_env(raw: str) -> dict[str, list[int]]:
    """KDESCHED_POOL_STORM_SEEDS="serve=1,2;functions=3" (either part may be left out; a bare list is
    serve's); default: serve seed 1."""
    out: dict[str, list[int]] = {"serve": [], "functions": []}
    if not raw.strip():
        return {"serve": [1], "functions": []}
    for part in raw.split(";"):
        mode, _, seeds = part.rpartition("=")
        mode = mode.strip() or "serve"
        if mode not in out:
            raise ValueError(f"KDESCHED_POOL_STORM_SEEDS: unknown mode {mode!r} (serve or functions): {raw!r}")
        out[mode] = [int(x) for x in seeds.split(",") if x.strip()]
    return out


SEEDS = seeds_from_env(os.environ.get("KDESCHED_POOL_STORM_SEEDS", ""))
EVENTS = int(os.environ.get("KDESCHED_POOL_STORM_EVENTS", "7"))
# replacements slower than the replacement timeout (e.g. 12 and 2) show a move's repeats timing out
# and going on when the replacement is Ready (kdesched.reactor.run.continuation, dormant moves)
READY_DELAY = float(os.environ.get("KDESCHED_POOL_STORM_READY_DELAY", "1.5"))
COOLDOWN_SECONDS = 5
REPLACEMENT_TIMEOUT_SECONDS = float(os.environ.get("KDESCHED_POOL_STORM_REPLACEMENT_TIMEOUT", "20"))
# everything off the tainted nodes and every workload whole this long after the last write: the
# biggest maintenance (a pool of ~170 pods, five waves of replicas at 1.5 s plus the runs) with room
# for a loaded 2-core machine
BOUND = 150
SAMPLE_INTERVAL = 0.3
EVICTED_LINE = "kdesched.evictor: evicted "
LIVENESS = frozenset({"must-move", "settle"})  # the checks that wait for the maintenance to finish
WORKLOADS = pool_workloads()


@pytest.fixture
def stoppers() -> Iterator[list[Serve | FunctionProc]]:
    started: list[Serve | FunctionProc] = []
    yield started
    for p in started:
        p.stop()


def storm_policy(tmp_path: Path) -> Path:
    """test_storm.py's policy: the shipped one, cool-downs 5 s, replacement timeout 20 s."""
    return write_file(tmp_path, "policy.yaml", policy_text(
        cooldown={"workloadSeconds": COOLDOWN_SECONDS, "nodeSeconds": COOLDOWN_SECONDS},
        safety={"enabled": True, "replacementTimeoutSeconds": REPLACEMENT_TIMEOUT_SECONDS}))


def run_seed(cp: ControlPlane, real: Cluster, result: SeedResult, began: float, setup_s: float,
             on_writes: Callable[[list[tuple[str, dict[str, Any]]]], None], logs: Callable[[], dict[str, str]],
             events: Sequence[PoolEvent], workdir: Path) -> str:
    """Apply the events, wait for the cluster to settle, run the whole-run checks; the summary."""
    specs = by_name(WORKLOADS)
    checker = Checker(cp, SAMPLE_INTERVAL, specs, ledger=False).start()
    ledger = LedgerWatch(cp).start()
    since = time.time()
    model = Model()
    last = since
    left: list[str] = []
    try:
        for ev in events:
            time.sleep(ev.gap)
            on_writes(apply_event(real.api, model, ev))
            last = time.time()
        result.settled_after = wait_settled(checker, last, BOUND)
        if result.settled_after is None:
            s = checker.latest()
            assert s is not None
            left = misplaced(s)
            detail = (f"{len(left)} pod(s) still on tainted nodes {BOUND}s after the last storm event: "
                      f"{'; '.join(left[:20])}" if left else
                      f"a workload is not back at spec.replicas Ready {BOUND}s after the last storm event")
            checker.add(Violation("must-move" if left else "settle", s.at, detail, s.describe()))
        time.sleep(1)
    finally:
        checker.stop()
        ledger.stop()
    samples = checker.samples()
    result.samples = len(samples)
    evs = evictions(checker.api, pods_by_uid(samples), since)
    texts = logs()
    findings = analyse_evictions(evs, samples, evicted_by(texts, evs))
    result.evictions = evs
    result.excused = findings.excused
    result.violations = [*checker.violations, *findings.violations]
    result.more_violations = checker.more
    for label, text in texts.items():
        refused = re.findall(r".*(?:HTTP 422\b|Unprocessable Entity).*", text)  # kube.errors: "HTTP <status> <reason>"
        if refused:
            result.violations.append(Violation("ledger-422", time.time(), f"{len(refused)} line(s) of {label}'s log "
                                               f"name a 422: {refused[0][:300]}"))
    if ledger.largest >= RECORD_LIMIT_BYTES:
        result.violations.append(Violation("ledger-size", time.time(), f"the ledger object {ledger.largest_name} "
                                           f"reached {ledger.largest} bytes (bound {RECORD_LIMIT_BYTES})"))
    logged = sum(t.count(EVICTED_LINE) for t in texts.values())
    result.notes += [
        (f"setup {setup_s:.0f}s; {len(WORKLOADS)} workloads, {sum(w.replicas for w in WORKLOADS)} pods on "
         f"{len(ALL_NODES)} nodes; storm {last - since:.0f}s"),
        f"the processes' logs hold {logged} '{EVICTED_LINE}' line(s), the Events {len(evs)} eviction(s)",
        (f"ledger: largest object {ledger.largest} bytes ({ledger.largest_name}), at most {ledger.most_records} "
         f"workload records at once ({ledger.reads} reads)"),
        f"wall time of this seed: {time.monotonic() - began:.0f}s"]
    if checker.errors:
        result.notes.append(f"{checker.errors} sample(s) failed and were skipped")
    return report(result, workdir) + told_about(left, texts)


def told_about(left: Sequence[str], texts: Mapping[str, str], per_pod: int = 12, per_node: int = 20) -> str:
    """What the processes' logs say about the pods a liveness failure left on tainted nodes (their
    names, then their nodes: the runs, refusals and repeats), at the END of the failure's text,
    where CI shows it: a failure the next run may not repeat must explain itself."""
    out: list[str] = []
    for entry in left[:3]:
        pod, _, rest = entry.partition(" on ")
        node = rest.split(" ", 1)[0]
        for label, text in texts.items():
            lines = text.splitlines()
            about_pod = [ln for ln in lines if pod in ln][-per_pod:]
            about_node = [ln for ln in lines if node and node in ln and pod not in ln][-per_node:]
            out.append(f"--- {label}'s log about {pod}: {len(about_pod)} line(s) shown")
            out += [ln[:400] for ln in about_pod]
            out.append(f"--- {label}'s log about {node}, the last {len(about_node)} line(s)")
            out += [ln[:400] for ln in about_node]
    return ("\n" + "\n".join(out)) if out else ""


@pytest.mark.parametrize("seed", SEEDS["serve"])
def test_pool_storm_against_serve(seed: int, control_plane: ControlPlane, real: Cluster, kubelet: Kubelet,
                                  stoppers: list[Serve | FunctionProc], tmp_path: Path) -> None:
    began = time.monotonic()
    kubelet.ready_delay = 0.0
    setup_cluster(control_plane, real, WORKLOADS)
    setup_s = time.monotonic() - began
    kubelet.ready_delay = READY_DELAY
    serve = Serve(control_plane.admin_kubeconfig, storm_policy(tmp_path), f"pool{seed}", workdir=tmp_path).start()
    stoppers.append(serve)
    wait_leading(control_plane, real, serve, timeout=120)
    events = generate(seed, EVENTS, requested_milli(WORKLOADS))
    result = SeedResult(seed, "pool storm, serve", events, bound=BOUND)  # type: ignore[arg-type]
    text = run_seed(control_plane, real, result, began, setup_s, lambda _writes: None,
                    lambda: {serve.identity: serve.log()}, events, tmp_path)
    verdict(result, text)


@pytest.mark.parametrize("seed", SEEDS["functions"])
def test_pool_storm_against_two_taints_functions(seed: int, control_plane: ControlPlane, real: Cluster,
                                                 kubelet: Kubelet, stoppers: list[Serve | FunctionProc],
                                                 tmp_path: Path) -> None:
    """Two ``kdesched function taints`` processes, as test_storm.py runs the functions: the test
    classifies every node write with kdesched's own Classifier and posts each taints.changed to both
    instances at once (retried as a Trigger would, a third once more later to one of them)."""
    began = time.monotonic()
    kubelet.ready_delay = 0.0
    setup_cluster(control_plane, real, WORKLOADS)
    setup_s = time.monotonic() - began
    kubelet.ready_delay = READY_DELAY
    policy = storm_policy(tmp_path)
    taints = [FunctionProc("taints", i, control_plane.admin_kubeconfig, policy, tmp_path) for i in range(2)]
    for p in taints:
        stoppers.append(p.start())
    for p in taints:
        p.wait_ready()
    events = generate(seed, EVENTS, requested_milli(WORKLOADS))
    result = SeedResult(seed, "pool storm, taints x2", events, bound=BOUND)  # type: ignore[arg-type]
    classifier = Classifier()
    classifier.seed(real.api.get("/api/v1/nodes")["items"])
    deliverer = Deliverer({"taints": taints}, random.Random(seed * 7919))

    def on_writes(writes: list[tuple[str, dict[str, Any]]]) -> None:
        for e in classify(classifier, writes):
            result.semantic[e.type.removeprefix("dev.kdesched.node.")] += 1
            if e.type == TAINTS_CHANGED:
                deliverer.dispatch(e)

    try:
        text = run_seed(control_plane, real, result, began, setup_s, on_writes,
                        lambda: {p.label: p.log() for p in taints}, events, tmp_path)
        if not deliverer.drain(30):
            text += "\n  note: some deliveries were still being retried 30 s after settling"
    finally:
        deliverer.close()
    verdict(result, text)


def verdict(result: SeedResult, text: str) -> None:
    """Safety fails the test (allowance, PDB, evicted twice, nowhere to go, the ledger's size and
    422s), and so does liveness (every pod off the tainted nodes and every workload whole within
    BOUND) unless KDESCHED_POOL_STORM_STRICT=0 makes it an expected failure."""
    assert result.evictions, f"the storm evicted nothing: it tested nothing\n{text}"
    safety = [v for v in result.violations if v.invariant not in LIVENESS]
    assert not safety, text
    if result.violations or result.more_violations:
        if os.environ.get("KDESCHED_POOL_STORM_STRICT", "1") == "0":
            pytest.xfail(f"liveness (KDESCHED_POOL_STORM_STRICT=0): {result.violations[0].detail[:300]}")
        pytest.fail(text)


# -- the generator and the ledger watch themselves (no control plane) ---------------------------------------
def test_the_generator_keeps_room_never_taints_every_pool_and_overlaps_pools() -> None:
    requested = requested_milli(WORKLOADS)
    assert 20_000 <= requested <= 30_000 and len(WORKLOADS) == 100
    assert sum(1 for w in WORKLOADS if w.kind == "StatefulSet") >= 5
    assert {w.max_unavailable for w in WORKLOADS} >= {None, "1", "2", "50%", "25%"}
    assert sum(1 for w in WORKLOADS if w.pdb_floor is not None) >= 30
    overlapping = several = 0
    for seed in range(300):
        events = generate(seed, EVENTS, requested)
        assert generate(seed, EVENTS, requested) == events  # a seed is one sequence
        assert events[0].kind == "taint-pool"
        model, most, tainted = Model(), 0, set()
        for ev in events:
            model.step(ev)
            assert len(model.pools) < len(POOLS), f"seed {seed}: every pool tainted at {ev}"
            assert model.usable_milli() >= ROOM_FACTOR * requested, f"seed {seed}: too little room at {ev}"
            assert len(model.nodes) <= MAX_SINGLE
            most = max(most, len(model.pools))
            if ev.kind == "taint-pool":
                tainted.add(ev.target)
        overlapping += most >= 2
        several += len(tainted) >= 2
    assert overlapping > 200 and several > 250, (overlapping, several)


def test_the_ledger_watch_finds_the_largest_ledger_object_and_counts_records() -> None:
    watch = LedgerWatch.__new__(LedgerWatch)
    watch.lease, watch.largest, watch.largest_name, watch.most_records, watch.reads = "kdesched", 0, "", 0, 0
    record = {"metadata": {"name": "kdesched-w-1", "labels": {"kdesched.dev/ledger": "kdesched"},
                           "annotations": {"x": "y" * 500}}}
    commit = {"metadata": {"name": "kdesched-ledger", "annotations": {"q": "1"}}}
    other = {"metadata": {"name": "kdesched-leader", "annotations": {"big": "z" * 5000}}}  # not the ledger
    watch.observe([record, commit, other, {"metadata": {"name": "kdesched-w-2",
                                                        "labels": {"kdesched.dev/ledger": "kdesched"}}}])
    assert watch.largest_name == "kdesched-w-1" and 500 < watch.largest < 1000
    assert watch.most_records == 2
    watch.observe([commit])
    assert watch.most_records == 2 and watch.reads == 2


def test_the_seeds_come_from_the_environment_per_receiver() -> None:
    assert seeds_from_env("") == {"serve": [1], "functions": []}
    assert seeds_from_env("1,2") == {"serve": [1, 2], "functions": []}
    assert seeds_from_env("serve=;functions=4") == {"serve": [], "functions": [4]}
    with pytest.raises(ValueError, match="unknown mode"):
        seeds_from_env("knative=1")

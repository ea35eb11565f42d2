"""The randomized storm on the real control plane (issue 21, item 6).

Each seed (tests/realk8s/storm.py generates its events) runs against either

* ``kdesched serve`` (one process, sweep off; on even seeds the leader is SIGKILLed half-way and a
  second ``serve`` takes over, with a 20 s sweep, because the events written while no one leads
  are, by design, the sweep's to catch), or
* two instances of each evicting function (``kdesched function taints|affinity|rebalance``), the
  test playing the classifier and the broker: every semantic event goes to both instances of its
  function at once, some once more later; one ``taints`` instance is SIGKILLed half-way and
  restarted 2 s later (deliveries to it are retried meanwhile, as the broker would).

The checker (storm.Checker) samples all the while; at the end the eviction Events are checked for
pods evicted twice or with nowhere to go, and everything that must move must have moved within
BOUND seconds of the last storm write. And the "why not" Events (issue 24): every eviction a
process held back for a reason they report (its log's refusals and paced outcomes) has one, posted
or rate-limited, and no object has two for one reason in one clock minute, across processes (the
functions run two instances of each, both receiving every event). A violation fails the test with the seed, the trace and the
cluster state; the summary of every seed is printed (pytest -s) and, with
KDESCHED_STORM_REPORT=FILE, appended to FILE. Profiles: docs/testing.md, "The storm".

The last tests check the generator and the checker themselves on made-up samples (no control
plane): each invariant the checker watches is shown to fail when it should, and only then.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kdesched.reactor.events.classifier import Classifier

from tests.realk8s.cluster import Cluster
from tests.realk8s.controlplane import ControlPlane, Kubelet, Proc, RawApi
from tests.realk8s.serve_stories import NS, Serve, policy_text, wait_leading, write_file
from tests.realk8s.storm import (
    MAX_ADDED,
    MAX_GAP_SECONDS,
    STORM_TAINT,
    WORKLOADS,
    Checker,
    Deliverer,
    Eviction,
    FunctionProc,
    NodeView,
    PodView,
    Sample,
    SeedResult,
    Violation,
    WhyNotEvent,
    acceptable,
    analyse_evictions,
    analyse_why_not,
    classify,
    event_count,
    evicted_by,
    evictions,
    generate,
    initial_model,
    misplaced,
    pods_by_uid,
    report,
    run_storm,
    sample_violations,
    seeds_from_env,
    settled,
    setup_cluster,
    step,
    wait_settled,
    why_not_events,
)

PROFILE = seeds_from_env({"serve": [1, 2], "functions": [3]})
COOLDOWN_SECONDS = 5
REPLACEMENT_TIMEOUT_SECONDS = 20
SWEEP_SECONDS = 20  # only after a leader change
# everything that must move has moved (and every workload is whole again) this long after the last write
BOUND = max(COOLDOWN_SECONDS, REPLACEMENT_TIMEOUT_SECONDS) + 30
READY_DELAY = 1.5  # replacements are Ready 1.5 s after they are bound
EVICTED_LINE = "kdesched.evictor: evicted "  # the evictor's log line of each eviction


def storm_policy(tmp_path: Path) -> Path:
    """The shipped default policy, cool-downs 5 s and replacement timeout 20 s (so moves held by a
    cool-down finish within the storm's bound); the cluster-wide bucket's default (300/min, burst
    100) is above the storm's needs."""
    return write_file(tmp_path, "policy.yaml", policy_text(
        cooldown={"workloadSeconds": COOLDOWN_SECONDS, "nodeSeconds": COOLDOWN_SECONDS},
        safety={"enabled": True, "replacementTimeoutSeconds": REPLACEMENT_TIMEOUT_SECONDS}))


@pytest.fixture
def real(control_plane: ControlPlane, scheduler: Proc, controller_manager: Proc, kubelet: Kubelet,
         cluster: Cluster) -> Cluster:
    cluster.namespace(NS)
    return cluster


@pytest.fixture
def stoppers() -> Iterator[list[Serve | FunctionProc]]:
    started: list[Serve | FunctionProc] = []
    yield started
    for p in started:
        p.stop()


def finish(result: SeedResult, checker: Checker, since: float, last: float, logs: Callable[[], dict[str, str]]) -> None:
    """Wait for the cluster to settle (within result.bound), stop the checker and run the whole-run checks."""
    result.settled_after = wait_settled(checker, last, result.bound)
    if result.settled_after is None:
        s = checker.latest()
        assert s is not None
        left = misplaced(s)
        detail = (f"{len(left)} pod(s) still where they must not run {result.bound:g}s after the last storm "
                  f"event: {'; '.join(left)}" if left else
                  f"a workload is not back at spec.replicas Ready {result.bound:g}s after the last storm event")
        checker.add(Violation("must-move" if left else "settle", s.at, detail, s.describe(), s.ledger))
    time.sleep(1)
    checker.stop()
    samples = checker.samples()
    result.samples = len(samples)
    evs = evictions(checker.api, pods_by_uid(samples), since)
    texts = logs()
    findings = analyse_evictions(evs, samples, evicted_by(texts, evs))
    result.notes.append(f"the processes' logs hold {sum(t.count(EVICTED_LINE) for t in texts.values())} "
                        f"'{EVICTED_LINE}' line(s), the Events {len(evs)} eviction(s)")
    posted = why_not_events(checker.api, since)
    why_not = analyse_why_not(texts, posted, time.time())
    closest = "none (no object had two)" if why_not.closest is None else f"{why_not.closest:.1f}s apart"
    result.notes.append(f"\"why not\": {why_not.held} held-back eviction(s) in the logs ({why_not.reasoned} answered "
                        f"under the decision's later reason, {why_not.gone} evicted just before by another process), "
                        "why-not lines "
                        f"{dict(sorted(why_not.answered.items()))}, Events "
                        f"{dict(sorted(Counter(e.reason for e in posted).items()))}; closest two of one object and reason: "
                        f"{closest}")
    result.evictions = evs
    result.excused = findings.excused
    result.violations = [*checker.violations, *findings.violations, *why_not.violations]
    result.more_violations = checker.more
    if checker.errors:
        result.notes.append(f"{checker.errors} sample(s) failed and were skipped")


@pytest.mark.parametrize("seed", PROFILE["serve"])
def test_storm_against_serve(seed: int, control_plane: ControlPlane, real: Cluster, kubelet: Kubelet,
                             stoppers: list[Serve | FunctionProc], tmp_path: Path) -> None:
    setup_cluster(control_plane, real)
    kubelet.ready_delay = READY_DELAY
    policy = storm_policy(tmp_path)
    leader_change = seed % 2 == 0
    sweep = SWEEP_SECONDS if leader_change else 0
    a = Serve(control_plane.admin_kubeconfig, policy, f"storm{seed}-a", sweep_interval=sweep, workdir=tmp_path).start()
    stoppers.append(a)
    wait_leading(control_plane, real, a)
    events = generate(seed, event_count())
    result = SeedResult(seed, "serve" + (" + leader change" if leader_change else ""), events,
                        bound=BOUND + (SWEEP_SECONDS + 5 if leader_change else 0))
    api = real.api
    classifier = Classifier()
    classifier.seed(api.get("/api/v1/nodes")["items"])

    def fault() -> str:
        a.stop(signal.SIGKILL)
        b = Serve(control_plane.admin_kubeconfig, policy, f"storm{seed}-b", sweep_interval=sweep,
                  workdir=tmp_path).start()
        stoppers.append(b)
        return f"SIGKILL serve {a.identity} (the leader) before event {len(events) // 2}; {b.identity} started"

    def on_writes(_: int, writes: list[tuple[str, dict[str, object]]]) -> None:
        for e in classify(classifier, writes):  # what serve's own classifier sees (for the report)
            result.semantic[e.type.removeprefix("dev.kdesched.node.")] += 1

    checker = Checker(control_plane).start()
    since = time.time()
    try:
        last = run_storm(api, events, on_writes=on_writes, fault_at=len(events) // 2 if leader_change else None,
                         fault=fault if leader_change else None, result=result)
        finish(result, checker, since, last, lambda: {s.identity: s.log() for s in stoppers if isinstance(s, Serve)})
    finally:
        checker.stop()
    text = report(result, tmp_path)
    assert not result.violations, text
    assert result.evictions, f"the storm evicted nothing: it tested nothing\n{text}"


@pytest.mark.parametrize("seed", PROFILE["functions"])
def test_storm_against_two_instances_of_each_function(seed: int, control_plane: ControlPlane, real: Cluster,
                                                      kubelet: Kubelet, stoppers: list[Serve | FunctionProc],
                                                      tmp_path: Path) -> None:
    setup_cluster(control_plane, real)
    kubelet.ready_delay = READY_DELAY
    policy = storm_policy(tmp_path)
    functions = {name: [FunctionProc(name, i, control_plane.admin_kubeconfig, policy, tmp_path) for i in range(2)]
                 for name in ("taints", "affinity", "rebalance")}
    for procs in functions.values():
        for p in procs:
            stoppers.append(p.start())
    for procs in functions.values():
        for p in procs:
            p.wait_ready()
    events = generate(seed, event_count())
    result = SeedResult(seed, "functions x2 + crash", events, bound=BOUND)
    api: RawApi = real.api
    classifier = Classifier()
    classifier.seed(api.get("/api/v1/nodes")["items"])
    deliverer = Deliverer(functions, random.Random(seed * 7919))
    victim = functions["taints"][0]

    restart = threading.Timer(2.0, victim.start)

    def fault() -> str:
        victim.kill()
        restart.start()
        return f"SIGKILL {victim.label} before event {len(events) // 2}, restarted 2 s later on the same port"

    def on_writes(_: int, writes: list[tuple[str, dict[str, object]]]) -> None:
        for e in classify(classifier, writes):
            result.semantic[e.type.removeprefix("dev.kdesched.node.")] += 1
            deliverer.dispatch(e)

    checker = Checker(control_plane).start()
    since = time.time()
    try:
        last = run_storm(api, events, on_writes=on_writes, fault_at=len(events) // 2, fault=fault,
                         result=result)
        finish(result, checker, since, last,
               lambda: {p.label: p.log() for procs in functions.values() for p in procs})
        if not deliverer.drain(30):
            result.notes.append("some deliveries were still being retried 30 s after settling")
    finally:
        checker.stop()
        deliverer.close()
        if restart.is_alive():
            restart.join(10)  # the restarted instance is then stopped with the others
    result.deliveries = dict(deliverer.statuses)
    result.notes.append(f"{deliverer.redeliveries} event(s) redelivered to one instance 1-4 s later")
    text = report(result, tmp_path)
    assert not result.violations, text
    assert result.evictions, f"the storm evicted nothing: it tested nothing\n{text}"


# -- the generator and the checker themselves (no control plane: they must be able to fail) ---------------
def test_the_generator_keeps_room_for_every_workload_and_ends_every_notready_spell() -> None:
    for seed in range(300):
        events = generate(seed, 40)
        assert generate(seed, 40) == events  # a seed is one sequence
        nodes = initial_model()
        for ev in events:
            assert 0 <= ev.gap <= MAX_GAP_SECONDS
            step(nodes, ev)
            assert acceptable(nodes), f"seed {seed}: {ev} leaves too little room"
            assert sum(1 for n in nodes.values() if not n.ready) <= 1, f"seed {seed}: two nodes NotReady at {ev}"
        assert all(n.ready for n in nodes.values()), f"seed {seed} ends with a NotReady node"
        assert sum(1 for e in events if e.kind == "add") <= MAX_ADDED


def whole() -> Sample:
    """Every workload whole: pods spread over 8 untainted nodes (4 gold), all Ready."""
    nodes = {f"n{i}": NodeView(f"n{i}", True, False, (), i < 4, 2000) for i in range(8)}
    pods, i = [], 0
    for w in WORKLOADS:
        for r in range(w.replicas):
            node = f"n{(i % 4) if w.gold else i % 8}"
            pods.append(PodView(f"{w.name}-{r}", f"{w.name}-{r}", w.name, node, True, False))
            i += 1
    return Sample(100.0, tuple(pods), nodes, "{}")


def with_pods(s: Sample, change: dict[str, PodView | None], at: float | None = None) -> Sample:
    """``s`` with pods replaced (uid -> new view), removed (uid -> None) or added (a new uid)."""
    known = {p.uid for p in s.pods}
    pods = [change.get(p.uid, p) for p in s.pods] + [p for uid, p in change.items() if uid not in known]
    return Sample(s.at if at is None else at, tuple(p for p in pods if p is not None), s.nodes, s.ledger)


def test_the_checker_sees_too_many_unavailable_and_a_pdb_below_its_minimum() -> None:
    s = whole()
    assert sample_violations(s) == [] and settled(s)
    # api (allowance 1, PDB maxUnavailable 1): one replacement starting is fine, two are not
    one = with_pods(s, {"api-0": PodView("api-0", "api-0", "api", "n1", False, False)})
    assert sample_violations(one) == []
    two = with_pods(one, {"api-1": PodView("api-1", "api-1", "api", "n2", False, False)})
    found = {(v.invariant, v.detail.split(":")[0]) for v in sample_violations(two)}
    assert found == {("allowance", "Deployment api"), ("pdb", "PDB api")}
    # web: allowance 3 (50%) but PDB minAvailable 4: 3 down breaks the PDB only
    down = with_pods(s, {f"web-{r}": PodView(f"web-{r}", f"web-{r}", "web", "n0", False, r == 0) for r in range(3)})
    assert [v.invariant for v in sample_violations(down)] == ["pdb"]
    assert "web: 3/6 Ready" in sample_violations(down)[0].state


def test_the_checker_sees_a_pod_evicted_twice_and_one_evicted_with_nowhere_to_go() -> None:
    s = whole()
    twice = [Eviction(100.5, "tiny-0", "default/tiny-0", "tiny", "RemovePodsViolatingNodeTaints", "n5", "a"),
             Eviction(100.6, "tiny-0", "default/tiny-0", "tiny", "RemovePodsViolatingNodeTaints", "n5", "b")]
    replaced = with_pods(s, {"tiny-0": None, "tiny-9": PodView("tiny-9", "tiny-9", "tiny", "n6", True, False)}, 102)
    found = analyse_evictions(twice, [s, replaced], {"default/tiny-0": ["taints-0", "taints-1"]})
    assert [v.invariant for v in found.violations] == ["evicted-twice"]
    assert "taints-0, taints-1" in found.violations[0].detail
    # gold may only run on n0-n3: with those full (or refusing), its evicted pod had nowhere to go
    full = {n: NodeView(n, True, n != "n0", (), True, 2000) for n in ("n0", "n1", "n2", "n3")}
    cramped = Sample(100.0, s.pods, {**s.nodes, **full}, "{}")
    gone = Eviction(100.5, "gold-0", "default/gold-0", "gold", "RemovePodsViolatingNodeAffinity", "n0", "a")
    pending = with_pods(cramped, {"gold-0": None, "gold-9": PodView("gold-9", "gold-9", "gold", "", False, False)}, 110)
    found = analyse_evictions([gone], [cramped, pending], {})
    assert [v.invariant for v in found.violations] == ["nowhere-to-go"] and not found.excused
    # the same eviction when another gold node had room then: excused (the storm took it after)
    found = analyse_evictions([gone], [s, pending], {})
    assert not found.violations and len(found.excused) == 1


def test_a_pod_on_a_tainted_node_must_move_only_when_another_node_can_take_it() -> None:
    s = whole()
    tainted = {**s.nodes, "n5": NodeView("n5", True, False, ((STORM_TAINT["key"], "NoSchedule"),), False, 2000)}
    left = misplaced(Sample(100.0, s.pods, tainted, "{}"))
    assert left and all(" on n5 (tainted " in x for x in left)
    assert not settled(Sample(100.0, s.pods, tainted, "{}"))
    nowhere = {n: NodeView(n, True, True, (), v.gold, 2000) if n != "n5" else tainted["n5"] for n, v in s.nodes.items()}
    assert misplaced(Sample(100.0, s.pods, nowhere, "{}")) == []
    unlabelled = {**s.nodes, "n1": NodeView("n1", True, False, (), False, 2000)}
    assert [x for x in misplaced(Sample(100.0, s.pods, unlabelled, "{}")) if x.startswith("gold")] == [
        f"{p.name} on n1 (no gold label)" for p in s.pods if p.app == "gold" and p.node == "n1"]


def test_the_why_not_check_sees_a_hold_without_an_event_and_two_events_in_a_minute() -> None:
    hold = ("2026-11-26 10:00:01,000 INFO    kdesched.evictor: not evicting default/web-1 (p/RemovePodsViolatingNodeTaints)"
            " [cooldown-workload]: cool-down: workload Deployment/default/web lost a pod 3s ago (cooldown.workloadSeconds 5)")
    pace = ("2026-11-26 10:00:01,100 INFO    kdesched.evictor: pacing default/web-2 from n1 (RemovePodsViolatingNodeTaints)"
            ": held by the per-workload allowance (wave 1)")
    rate = ("2026-11-26 10:00:01,200 INFO    kdesched.evictor: not evicting default/web-3 (p/RemovePodsViolatingNodeTaints)"
            " [rate-limit]: rate limit: the cluster-wide eviction bucket is empty")  # not a reason "why not" Events report
    answer = "2026-11-26 10:00:01,300 INFO    kdesched.reactor.whynot: why-not {} {} on Node /n1 for default/web-1 {}"
    posted = WhyNotEvent(600.0, "Node", "n1", "CoolDown", "a")
    logs = {"a": "\n".join([hold, pace, rate, answer.format("posted", "CoolDown", ""),
                          answer.format("posted", "Paced", "default/web-2")])}
    ok = analyse_why_not(logs, [posted], 700.0)
    assert ok.violations == () and ok.held == 2 and ok.answered == {"posted": 2}
    # the paced hold has no line: missing
    found = analyse_why_not({"a": "\n".join([hold, pace, answer.format("posted", "CoolDown", "")])}, [posted], 700.0)
    assert [v.invariant for v in found.violations] == ["why-not-missing"] and "default/web-2 Paced" in found.violations[0].detail
    # a probe's refusal the decision answered under its own reason (the pod has an Event): not missing
    probe = hold.replace("[cooldown-workload]: cool-down: workload Deployment/default/web lost a pod 3s ago "
                         "(cooldown.workloadSeconds 5)",
                         "[disruption-budget]: PodDisruptionBudget default/web allows 0 disruption(s) and 0 are "
                         "already planned")
    ok = analyse_why_not({"a": "\n".join([probe, hold, answer.format("posted", "CoolDown", "")])}, [posted], 700.0)
    assert ok.violations == () and ok.reasoned == 1
    # a pod another process had evicted just before (its snapshot was a moment older): no Event owed
    # (the CI at 8876a29: taints-1 evicted gold-...-j6xd5 at :27.595, taints-0 logged its PDB at :27.631)
    gold = ("2026-11-26 10:00:01,631 INFO    kdesched.evictor: not evicting default/gold-1 (p/RemovePodsViolatingNodeTaints)"
            " [disruption-budget]: PodDisruptionBudget default/gold allows 0 disruption(s) and 0 are already planned")
    evicted = ("2026-11-26 10:00:01,595 INFO    kdesched.evictor: evicted default/gold-1 from n1: "
               "strategy=RemovePodsViolatingNodeTaints")
    ok = analyse_why_not({"a": gold, "b": evicted}, [], 700.0)
    assert ok.violations == () and ok.gone == 1
    # ... but a hold after a namesake's eviction long before, or before the eviction, is owed one
    for when in ("2026-11-26 09:59:58,000", "2026-11-26 10:00:02,000"):
        found = analyse_why_not({"a": gold, "b": evicted.replace("2026-11-26 10:00:01,595", when)}, [], 700.0)
        assert [v.invariant for v in found.violations] == ["why-not-missing"] and found.gone == 0
    # another process's "exists" needs the Event; "lost" is a violation
    found = analyse_why_not({"b": "\n".join([hold, answer.format("exists", "CoolDown", "")])}, [], 700.0)
    assert [v.invariant for v in found.violations] == ["why-not-unposted"]
    found = analyse_why_not({"b": "\n".join([hold, answer.format("lost", "CoolDown", "")])}, [], 700.0)
    assert [v.invariant for v in found.violations] == ["why-not-lost"]
    # two Events of one object and reason in one clock minute (600-659), but not across minutes
    twice = analyse_why_not({}, [posted, WhyNotEvent(659.0, "Node", "n1", "CoolDown", "b")], 700.0)
    assert [v.invariant for v in twice.violations] == ["why-not-rate"] and twice.closest == 59.0
    across = analyse_why_not({}, [WhyNotEvent(659.0, "Node", "n1", "CoolDown", "a"),
                                  WhyNotEvent(660.0, "Node", "n1", "CoolDown", "b")], 700.0)
    assert across.violations == ()

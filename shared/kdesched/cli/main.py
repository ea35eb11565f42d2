"""``kdesched``: simulate, run, serve, function and policy commands.

Exit codes (a contract, docs/cli.md): 0 success, 2 bad input (the message names the file and the
field), 1 runtime failure (API server unreachable, a strategy crashed...), 128 + the signal's number
for a ``run`` that SIGINT or SIGTERM stopped (kdesched.cli.interrupts). Bad input never prints
a traceback. Heavy imports (the kubernetes client, Flask) happen only in the commands that need
them, so ``simulate`` starts fast.

Here: ``simulate`` and ``run``, the parser of every command, and ``main``. Elsewhere in the
package: ``serve`` and ``function`` (:mod:`kdesched.cli.serve`), ``policy validate|convert``
(:mod:`kdesched.cli.policy_commands`), what every command shares (:mod:`kdesched.cli.common`: exit
codes, InputError, the policy as a command loads it, the client's limit flags, the fast exit),
logging (:mod:`kdesched.cli.logs`), flag types (:mod:`kdesched.cli.flags`) and the report
(:mod:`kdesched.cli.output`). Imports point one way: main -> serve -> common.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from kdesched import __version__
from kdesched.cli.common import (
    EXIT_INPUT,
    EXIT_OK,
    EXIT_RUNTIME,
    InputError,
    LoadedPolicy,
    add_client_limit_flags,
    client_limits,
    exit_now,
    load_policy_arg,
    stdin_once,
)
from kdesched.cli.interrupts import Interrupts
from kdesched.cli.logs import setup_logging
from kdesched.cli.policy_commands import cmd_policy_convert, cmd_policy_validate
from kdesched.cli.startup import started

log = logging.getLogger("kdesched.cli")

# --- shared helpers --------------------------------------------------------------------------------


def parse_now(text: str | None) -> datetime:
    """``--now``: an RFC 3339 time with its time zone (``Z`` or ``+02:00``); None = the real clock."""
    if text is None:
        return datetime.now(UTC)
    from kdesched.model.errors import ModelError
    from kdesched.model.files import has_time_zone
    from kdesched.model.records import parse_time

    example = "e.g. 2024-05-01T12:00:00Z"
    if not text.strip():
        raise InputError(f"--now: must be an RFC 3339 time, {example}; got an empty string")
    try:
        value = parse_time(text, "--now")
    except ModelError:
        raise InputError(f"--now: must be an RFC 3339 time, {example}; got {text!r}") from None
    if not has_time_zone(text):
        raise InputError(f"--now: {text!r} has no time zone; RFC 3339 needs one, {example} or "
                         f"2024-05-01T14:00:00+02:00")
    assert value is not None
    return value


def simulation_clock(now_arg: str | None, taken_at: datetime | None) -> tuple[datetime, str]:
    """The clock of ``simulate`` and where it came from: ``--now``, else the time the snapshot
    recorded (``kdesched.dev/snapshot-time``), else the current time."""
    from kdesched.model.files import SNAPSHOT_TIME

    if now_arg is not None:
        return parse_now(now_arg), "--now"
    if taken_at is not None:
        return taken_at, f"the snapshot's {SNAPSHOT_TIME} annotation"
    return datetime.now(UTC), "the current time (the snapshot records no time)"


def freeze_heap() -> None:
    """Move everything loaded so far out of the cyclic GC's reach (``gc.freeze``).

    A one-shot command holds a snapshot of up to 150,000 cycle-free records for its whole life;
    without this, the first full collection after loading re-scans all of them (~4.5 s at 150,000
    pods, bench/README.md). Reference counting still frees them as usual."""
    import gc

    gc.freeze()


def parse_event(text: str) -> tuple[str, str]:
    if ":" not in text:
        raise InputError(f"--event {text!r}: expected TYPE:NODE, e.g. dev.kdesched.node.ready:node-1")
    etype, node = text.rsplit(":", 1)
    if not etype or not node:
        raise InputError(f"--event {text!r}: expected TYPE:NODE, e.g. dev.kdesched.node.ready:node-1")
    return etype, node


def _safety(loaded: LoadedPolicy, event_path: bool) -> Any:
    """The run's safety mode (kdesched.policy.safety): the policy's switch, else the command's default."""
    from kdesched.policy.safety import Path

    return loaded.settings.safety.resolve(Path.EVENT if event_path else Path.PARITY)


def parity_policy(policy: Any) -> Any:
    """``simulate`` / ``run`` without --event: the safety defaults apply only when the policy turns
    them on (``kdesched.safety.enabled: true``, as the shipped policies do); a plain upstream policy
    keeps upstream semantics (kdesched.policy.safety, Path.PARITY)."""
    from kdesched.policy.control_plane import exclude_control_plane_taints, policy_safety
    from kdesched.policy.safety import Path

    return exclude_control_plane_taints(policy, policy_safety(policy, Path.PARITY))[0]


# --- commands --------------------------------------------------------------------------------------


def _gc_paused(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``kdesched.model.gcpause.paused_gc`` around a command, imported when the command runs: the
    model package costs ~30 ms to import, which ``kdesched function deadletter`` never needs."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        from kdesched.model.gcpause import paused_gc

        with paused_gc():
            return command(args)

    return run


@_gc_paused  # one command over cycle-free records: no cyclic GC at all (kdesched.model.gcpause)
def cmd_simulate(args: argparse.Namespace) -> int:
    from kdesched.cli.output import write_report
    from kdesched.engine import PlanError, execute_plan, plan_run
    from kdesched.evictor.execute import RecordingExecutor
    from kdesched.model.errors import ModelError
    from kdesched.model.files import load_snapshot

    started = time.perf_counter()
    stdin_once(("CLUSTER", args.cluster), ("--policy", args.policy))
    if args.now is not None:
        parse_now(args.now)  # bad input is refused before anything is read
    try:
        snapshot = load_snapshot(args.cluster)
    except ModelError as exc:
        raise InputError(str(exc)) from None
    usage_files = list(getattr(args, "usage", None) or [])
    if usage_files:
        from dataclasses import replace as _replace

        from kdesched.model.files import load_usage_files

        try:
            readings = load_usage_files(usage_files)
        except ModelError as exc:
            raise InputError(str(exc)) from None
        snapshot = _replace(snapshot, actual_usage=readings)
    freeze_heap()
    now, clock_from = simulation_clock(args.now, snapshot.taken_at)
    loaded = load_policy_arg(args.policy, args.profile, tuple(snapshot.namespaces))
    policy = loaded.policy
    log.info("kdesched simulate: dry run (simulate never evicts); clock %s from %s", now.isoformat(), clock_from)
    strategies = nodes = None
    trigger = "simulate"
    event_note = ""
    if args.event:
        from kdesched.reactor.events.routing import event_policy, scope_for_event

        etype, node = parse_event(args.event)
        if node not in snapshot.nodes:
            known = ", ".join(sorted(snapshot.nodes)[:10]) + (", ..." if len(snapshot.nodes) > 10 else "")
            raise InputError(f"--event {args.event}: node {node!r} is not in {args.cluster} (nodes: {known})")
        try:
            scope = scope_for_event(loaded.settings, policy, etype, node, snapshot=snapshot)
        except ValueError as exc:
            raise InputError(f"--event: {exc}") from None
        # the event map may name strategies no profile enables: run them as the function would
        from kdesched.policy.safety import Path as SafetyPath

        policy = event_policy(policy, scope.strategies, loaded.settings.safety.resolve(SafetyPath.EVENT))
        strategies, nodes, trigger = scope.strategies, scope.nodes, f"{etype}:{node}"
        event_note = f"event {etype} on {node} runs {', '.join(scope.strategies) or 'nothing'}: {scope.reason}"
        log.info("%s", event_note)
    else:
        policy = parity_policy(policy)
    safety = _safety(loaded, event_path=bool(args.event))
    if args.event and snapshot.actual_usage is not None:  # the event path's young-node rule (docs/strategies.md)
        from dataclasses import replace as _replace

        young = loaded.settings.usage.young_node_seconds
        snapshot = _replace(snapshot, actual_usage=_replace(snapshot.actual_usage, young_node_seconds=young or None))
    if snapshot.actual_usage is not None:
        from dataclasses import replace as _replace

        snapshot = _replace(snapshot, notes=(*snapshot.notes, *snapshot.actual_usage.notes()))
    admission = _event_admission(loaded, snapshot, now, trigger) if args.event else None
    try:
        plan = plan_run(policy, snapshot, now=now, strategies=strategies, nodes=nodes, safety=safety,
                        gate=admission)
    except PlanError as exc:
        raise InputError(str(exc)) from None
    controlled = None
    if admission is not None:  # the event path's admission pipeline, as serve and the functions ask it
        from kdesched.reactor.run.controls import apply_verdicts, held_flags

        controlled = apply_verdicts(plan, admission.finish(plan.evictions, held_flags(plan)))
        plan = controlled.plan
    if event_note:  # the report says what the event runs and why (a node not usable yet: nothing)
        from dataclasses import replace

        plan = replace(plan, notes=(event_note, *plan.notes))
    report = execute_plan(plan, RecordingExecutor(record_metrics=False), dry_run=True, trigger=trigger,
                          started=started)
    if controlled is not None:
        from kdesched.reactor.run.controls import with_deferred

        report = with_deferred(report, controlled)
    write_report(report, args.output, sys.stdout, dry_run_why="simulate never evicts",
                 clock={"time": now.isoformat(), "from": clock_from})
    code = EXIT_RUNTIME if plan.errors else EXIT_OK
    if getattr(args, "exit_when_done", False):
        exit_now(code)  # before the snapshot and the plan are freed object by object
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from kdesched.cli.output import write_report
    from kdesched.engine import PlanError, execute_plan, plan_run
    from kdesched.evictor.execute import LiveExecutor, RecordingExecutor
    from kdesched.evictor.waves import LiveWorkloads, WaveSettings
    from kdesched.kube.client import KubeClient
    from kdesched.kube.errors import ApiError, ConfigError, Unavailable
    from kdesched.kube.snapshot import load_live_snapshot

    started = time.perf_counter()
    loaded = load_policy_arg(args.policy, args.profile, dry_run_flag=args.dry_run)
    policy = loaded.policy
    safety = _safety(loaded, event_path=False)
    log.info("kdesched run: %s (%s)", "dry run, nothing will be evicted" if loaded.dry_run else "live run",
             loaded.dry_run_why)
    try:
        limits = client_limits(args)
        client = KubeClient.from_config(args.kubeconfig, context=args.context, limits=limits)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    log.info("client limits: %g requests/s, burst %d, up to %d evictions in flight", limits.qps, limits.burst,
             limits.max_concurrent_evictions)
    try:
        # from the API server's watch cache (resourceVersion=0), as upstream's informers read, unless
        # --consistent-read asks for etcd's current state page by page; each read retried (docs/cli.md)
        snapshot = load_live_snapshot(client, from_cache=not args.consistent_read)
    except Unavailable as exc:
        check = ("the kubeconfig's certificate-authority and server address" if "TLS" in exc.message
                 else "that it is running and reachable from here, and the kubeconfig's server address")
        log.error("cannot reach the API server at %s: %s. Check %s (%s)", client.host, exc.message, check,
                  _kubeconfig_hint(args.kubeconfig, args.context))
        return _read_failed(args, loaded, safety, started,
                            f"cannot reach the API server at {client.host}: {exc.message}")
    except ApiError as exc:
        log.error("cannot read the cluster from the API server at %s: %s", client.host, exc)
        return _read_failed(args, loaded, safety, started,
                            f"cannot read the cluster from the API server at {client.host}: {exc}")
    read = client.stats
    read_done = time.perf_counter()
    log.info("read the cluster in %.3fs: %d pods, %d nodes; %d requests, %d bytes", read_done - started,
             len(snapshot.pods), len(snapshot.nodes), read.requests, read.bytes_read)
    if client.read_retries:
        log.info("%d read(s) were retried after transient failures", client.read_retries)
    refused = _health_refusal(loaded, snapshot, ignore=args.ignore_cluster_health, client=client)
    if refused:
        log.error("%s", refused)
        return _read_failed(args, loaded, safety, started, refused)
    from kdesched.kube.usage import read_usage

    usage = read_usage(client, policy, loaded.settings.usage, event_path=False)  # None: the policy reads none
    if usage is not None:
        from dataclasses import replace as _replace

        snapshot = _replace(snapshot, actual_usage=usage, notes=(*snapshot.notes, *usage.notes()))
    freeze_heap()
    policy = parity_policy(policy)
    try:
        # ages (PodLifeTime, minPodAge, failed pods) against the API server's clock, which set the
        # pods' creationTimestamp, not this machine's (kdesched.kube.clock)
        plan = plan_run(policy, snapshot, safety=safety, now=datetime.fromtimestamp(client.clock.now(), UTC))
    except PlanError as exc:
        raise InputError(str(exc)) from None
    plan_done = time.perf_counter()
    log.info("planned in %.3fs: %d eviction(s)", plan_done - read_done, len(plan.evictions))
    executor = RecordingExecutor() if loaded.dry_run else LiveExecutor(client)
    # with the safety defaults on, run proceeds in waves: it waits for each workload's replacements.
    # SIGINT/SIGTERM from here on stop it between evictions, with its report (kdesched.cli.interrupts)
    with Interrupts() as interrupts:
        report = execute_plan(plan, executor, dry_run=loaded.dry_run, trigger="run",
                              grace_period_seconds=policy.grace_period_seconds,
                              failure_events=policy.eviction_failure_event_notification, started=started,
                              reader=LiveWorkloads(client), keep_going=interrupts.reason,
                              waves=WaveSettings(safety.replacement_timeout_seconds, budget_seconds=None))
    if interrupts.signum is not None:
        report = _interrupted(report, interrupts.name)
    total = client.stats
    waited = client.rate_limiter.waited_seconds if client.rate_limiter is not None else 0.0
    log.info("carried out the plan in %.3fs: %d requests, %d bytes; requests waited %.3fs in all for the "
             "client-side rate limit", time.perf_counter() - plan_done, total.requests - read.requests,
             total.bytes_read - read.bytes_read, waited)
    write_report(report, args.output, sys.stdout, dry_run_why=loaded.dry_run_why)
    if interrupts.signum is not None:
        return interrupts.exit_code
    failed = any(o.result in ("failed", "throttled") for o in report.outcomes)
    return EXIT_RUNTIME if plan.errors or failed else EXIT_OK


def _interrupted(report: Any, signal_name: str) -> Any:
    """The report of a run a signal stopped, saying so in ``summary.errors``."""
    from dataclasses import replace

    from kdesched.evictor.execute import STOPPED

    stopped = [o for o in report.outcomes if o.result == "abandoned" and o.cause == STOPPED]
    left = sum(1 for o in stopped if o.attempts == 0)
    # (retried when the signal came: no new attempt was sent, so say so apart from those not started)
    cut = len(stopped) - left
    cut_short = f", {cut} cut short between retries (abandoned)" if cut else ""
    error = (f"interrupted by {signal_name}: {left} eviction(s) not started (abandoned){cut_short}; those in "
             "flight finished their attempt and are reported")
    log.warning("%s", error)
    return replace(report, plan=replace(report.plan, errors=(*report.plan.errors, error)))


def _health_refusal(loaded: LoadedPolicy, snapshot: Any, *, ignore: bool, client: Any = None) -> str:
    """Why ``run`` refuses to evict in this cluster ("" = it goes ahead): the run-wide controls of the
    admission pipeline the event path uses (kdesched.admission.pipeline: the health brake, and the
    alert brake when the policy turns it on), judged on the run's snapshot. A dry run, or
    ``--ignore-cluster-health``, goes ahead with a warning in the log."""
    from kdesched.admission.control import RunContext
    from kdesched.admission.pipeline import Pipeline
    from kdesched.evictor.ledger import Ledger

    settings = loaded.settings
    alerts = None
    if settings.alert_brake.enabled and client is not None:
        from kdesched.kube.usage import read_brake_alerts

        s = settings.alert_brake
        alerts = read_brake_alerts(client, s.url, secret_namespace=s.token_secret_namespace,
                                   secret_name=s.token_secret_name, token_file=s.token_file, ca_file=s.ca_file,
                                   timeout=s.timeout_seconds, settle_seconds=s.settle_seconds)
    if alerts is not None:
        from kdesched.admission.alerts import fail_open_note

        unread = fail_open_note(alerts, settings.alert_brake)
        if unread:
            log.warning("%s", unread)
    now = client.clock.now() if client is not None and hasattr(client, "clock") else time.time()
    brake = Pipeline.build(settings.admission).begin(RunContext(Ledger(), snapshot, now, alerts=alerts)).brake
    if brake is None:
        return ""
    if ignore or loaded.dry_run:
        log.warning("%s; going ahead (%s)", brake.message,
                    "--ignore-cluster-health" if ignore else "a dry run evicts nothing")
        return ""
    return (f"{brake.message.split('; no eviction is admitted')[0]}: kdesched run refuses to evict while the "
            f"{brake.reason.value.replace('-', ' ')} holds (nothing was decided or evicted); pass "
            "--ignore-cluster-health to run anyway")


def _event_admission(loaded: LoadedPolicy, snapshot: Any, now: Any, trigger: str) -> Any:
    """``simulate --event``: the admission pipeline serve and the functions use, on an empty
    disruption ledger (a snapshot has none) and without the alert brake (simulate reads nothing
    but its files: no Prometheus)."""
    from dataclasses import replace as _replace

    from kdesched.admission.alerts import AlertBrakeSettings
    from kdesched.admission.control import RunContext
    from kdesched.admission.pipeline import Pipeline
    from kdesched.evictor.ledger import Ledger

    settings = _replace(loaded.settings.admission, alerts=AlertBrakeSettings())
    from kdesched.reactor.events import routing as ev

    etype = trigger.split(":")[0]
    label = {ev.TAINTS_CHANGED: "taints", ev.LABELS_CHANGED: "affinity"}.get(etype, "rebalance")  # as serve labels it
    return Pipeline.build(settings).begin(RunContext(Ledger(), snapshot, now.timestamp(), trigger=label))


def _read_failed(args: argparse.Namespace, loaded: LoadedPolicy, safety: Any, started: float, error: str) -> int:
    """A run that could not read the cluster still reports (the JSON contract of docs/cli.md: no
    evictions, the failed read in ``summary.errors``) and exits 1."""
    from kdesched.cli.output import write_report
    from kdesched.engine import RunPlan, RunReport

    plan = RunPlan(evictions=(), refusals=(), strategy_runs=(), notes=("nothing was decided or evicted",),
                   errors=(error,), nodes=(), pods_before={}, now=datetime.now(UTC), safety=safety)
    report = RunReport(plan, (), loaded.dry_run, "run", time.perf_counter() - started)
    write_report(report, args.output, sys.stdout, dry_run_why=loaded.dry_run_why)
    return EXIT_RUNTIME


def _kubeconfig_hint(kubeconfig: str | None, context: str | None) -> str:
    from kdesched.kube.config import SERVICE_HOST_ENV, default_kubeconfig_path

    if kubeconfig is None and context is None and os.environ.get(SERVICE_HOST_ENV):
        return f"in-cluster: ${SERVICE_HOST_ENV}"
    where = f"--kubeconfig {kubeconfig}" if kubeconfig else default_kubeconfig_path()
    return where + (f", --context {context}" if context else ", current context")
# --- parser ----------------------------------------------------------------------------------------

DESCRIPTION = """\
kdesched: an event-driven Kubernetes descheduler.

It evicts pods so the scheduler places them again when the cluster changes: a node joins or
recovers, taints or labels change. It implements the upstream descheduler's strategies and policy
formats (descheduler/v1alpha1 and v1alpha2) and evicts only through the Eviction API, so
PodDisruptionBudgets are always honoured.
"""

EPILOG = """\
examples:
  kdesched simulate examples/seed-new-node/cluster.yaml
  kubectl get nodes,pods,pdb,priorityclasses,namespaces,pvc -A -o yaml | kdesched simulate -
  kdesched simulate cluster.yaml --policy policy.yaml --output json
  kdesched simulate cluster.yaml --event dev.kdesched.node.taints.changed:node-3
  kdesched run --dry-run
  kdesched policy validate policy.yaml

modes (printed in every report): simulate and run decide exactly as upstream for a plain policy
(upstream parity); serve, the functions and simulate --event apply kdesched's safety defaults
(somewhere to go, at most maxUnavailable pods of a workload unavailable at once, evictions in
waves). kdesched.safety.enabled: true|false in the policy overrides both; the shipped policies
turn them on.

exit codes: 0 ok, 1 runtime failure, 2 bad input (the message names the file and field)
"""


SIMULATE_DESCRIPTION = """\
Run the whole decision offline on a cluster snapshot and print what would be evicted.
Nothing is contacted; the output is what `kdesched run` would do.

Ages (PodLifeTime, minPodAge, failed pods) are measured against a clock: --now if given,
else the time the snapshot recorded (annotation kdesched.dev/snapshot-time on its List, as
the examples have), else the current time. The report says which one was used.

Mode: upstream parity for a plain policy; kdesched's safety defaults (somewhere to go,
per-workload pacing, shown as waves) with --event or when the policy sets
kdesched.safety.enabled: true (the shipped default policy does). The report says which.
"""


def _top_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, Any]:
    """The ``kdesched`` parser, the flags every command takes, and the subparsers to add commands to."""
    parser = argparse.ArgumentParser(prog="kdesched", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"kdesched {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-v: every eviction decision, -vv: why pods were skipped)")
    common.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    common.add_argument("--log-format", choices=("text", "json"), default=None,
                        help="log format on stderr (default: $LOG_FORMAT or text)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    return parser, common, sub


def _function_parser() -> argparse.ArgumentParser:
    """``kdesched function NAME`` alone: the container command of every Knative function, parsed
    without building the other commands, whose flags import the API client's configuration
    (urllib3, yaml: ~60 ms) that ``deadletter`` never needs. A cold start after scale-to-zero pays
    every import on the first event (docs/reactor.md, "Cold start")."""
    from kdesched.cli.serve import configure_function_parser

    parser, common, sub = _top_parser()
    configure_function_parser(sub, common)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser, common, sub = _top_parser()

    policy_help = ("DeschedulerPolicy file (descheduler/v1alpha2 or v1alpha1, YAML or JSON, '-' for stdin); "
                   "default: RemoveDuplicates, LowNodeUtilization (20%%/50%%), RemovePodsViolatingInterPodAntiAffinity, "
                   "RemovePodsViolatingNodeAffinity, RemovePodsViolatingNodeTaints")
    profile_help = ("a named preset profile (OpenShift descheduler operator names: AffinityAndTaints, "
                    "TopologyAndDuplicates, SoftTopologyAndDuplicates, LifecycleAndUtilization, LongLifecycle, "
                    "CompactAndScale, EvictPodsWithPVC, EvictPodsWithLocalStorage); repeatable")
    output_help = "table (for people) or json (one object: dryRun, evictions, blocked, summary)"

    sim = sub.add_parser("simulate", parents=[common], help="decide on a cluster snapshot file, evict nothing",
                         description=SIMULATE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    sim.add_argument("cluster", metavar="CLUSTER",
                     help="snapshot file: YAML or JSON, a v1 List or several documents of Node, Pod, "
                          "PodDisruptionBudget, PriorityClass, Namespace, PersistentVolumeClaim objects, as written "
                          "by `kubectl get nodes,pods,pdb,priorityclasses,namespaces,pvc -A -o yaml`; '-' reads stdin")
    sim.add_argument("--policy", metavar="FILE", help=policy_help)
    sim.add_argument("--profile", metavar="NAME", action="append", default=[], help=profile_help)
    sim.add_argument("--event", metavar="TYPE:NODE",
                     help="run only what this event would run, e.g. dev.kdesched.node.ready:node-1 "
                          "(types: dev.kdesched.node.added|ready|taints.changed|labels.changed)")
    sim.add_argument("--usage", metavar="FILE", action="append", default=[],
                     help="measured usage for LowNodeUtilization's metricsUtilization, repeatable (one file each): "
                          "`kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes` (NodeMetricsList) and "
                          "`.../pods` (PodMetricsList) for source KubernetesMetrics, or a Prometheus instant-query "
                          "answer (`curl URL/api/v1/query?query=...`, one sample per node named by its `instance` "
                          "label) for source Prometheus")
    sim.add_argument("--now", metavar="TIME",
                     help="RFC 3339 time with a time zone (e.g. 2024-05-01T12:00:00Z) used as the clock for ages "
                          "(PodLifeTime, minPodAge, failed pods); default: the snapshot's kdesched.dev/snapshot-time "
                          "annotation, else now")
    sim.add_argument("-o", "--output", choices=("table", "json"), default="table", help=output_help)
    sim.set_defaults(func=cmd_simulate)

    run = sub.add_parser("run", parents=[common], help="one full pass against a live cluster",
                         description="Read the cluster, decide with every strategy of the policy, and evict through "
                                     "the Eviction API with retries (what the upstream descheduler Job does). Mode: "
                                     "upstream parity for a plain policy; with kdesched.safety.enabled: true, "
                                     "kdesched's safety defaults: somewhere to go, and evictions in waves that wait "
                                     "for each workload's replacements to be Ready (replacementTimeoutSeconds). "
                                     "Ctrl-C (SIGINT) or SIGTERM while it evicts: nothing more is started, the "
                                     "evictions in flight finish, the report is written, exit 130 / 143.")
    run.add_argument("--policy", metavar="FILE", help=policy_help)
    run.add_argument("--profile", metavar="NAME", action="append", default=[], help=profile_help)
    run.add_argument("--kubeconfig", metavar="FILE",
                     help="kubeconfig file (default: in-cluster config when running in a pod, else $KUBECONFIG or "
                          "~/.kube/config)")
    run.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current context)")
    run.add_argument("--dry-run", action="store_true", help="decide and report, evict nothing")
    run.add_argument("-o", "--output", choices=("table", "json"), default="table", help=output_help)
    add_client_limit_flags(run)
    run.add_argument("--consistent-read", action="store_true",
                     help="read the cluster from etcd page by page (500 objects per LIST, a quorum read) instead of "
                          "from the API server's watch cache (resourceVersion=0, one response per kind, as upstream's "
                          "informers read; possibly a moment stale, evictions still carry the pod's uid)")
    run.add_argument("--ignore-cluster-health", action="store_true",
                     help="evict even while the cluster-health brake would hold (more than "
                          "kdesched.healthBrake.maxUnhealthyShare of the nodes, default 20%%, or a whole zone NotReady "
                          "or unreachable); without it run refuses then and exits 1 (docs/safety.md)")
    run.set_defaults(func=cmd_run)

    try:
        from kdesched.cli.serve import configure_function_parser, configure_serve_parser
    except ModuleNotFoundError:  # pragma: no cover - during development only
        pass
    else:
        configure_serve_parser(sub, common)
        configure_function_parser(sub, common)

    pol = sub.add_parser("policy", help="check or convert a DeschedulerPolicy file")
    pol_sub = pol.add_subparsers(dest="policy_command", metavar="ACTION")
    pol_sub.required = True
    val = pol_sub.add_parser("validate", parents=[common], help="report every problem in a policy file at once",
                             description="Load and validate a policy (any supported format) without contacting a "
                                         "cluster. Every problem is reported, naming profile, plugin and field.")
    val.add_argument("file", metavar="FILE", help="the policy file ('-' for stdin)")
    val.set_defaults(func=cmd_policy_validate)
    conv = pol_sub.add_parser("convert", parents=[common], help="convert a policy to descheduler/v1alpha2",
                              description="Convert a v1alpha1 (or any supported) policy to descheduler/v1alpha2 the "
                                          "way upstream v0.27-v0.30 did, and print it as YAML.")
    conv.add_argument("file", metavar="FILE", help="the policy file ('-' for stdin)")
    conv.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                      help="yaml (default) or json; -o means --output in every command")
    conv.add_argument("--output-file", metavar="FILE",
                      help="write the converted policy to FILE (whole or not at all) instead of stdout")
    conv.set_defaults(func=cmd_policy_convert)
    from kdesched.cli.flags import document_ranges

    document_ranges(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _function_parser() if words[:1] == ["function"] else build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "ends_startup", False):
        started()  # the collector paused by the entry point runs again (kdesched.cli.startup)
    setup_logging(-1 if getattr(args, "quiet", False) else getattr(args, "verbose", 0), getattr(args, "log_format", None))
    try:
        args.exit_when_done = argv is None  # the command line, not an in-process call: see exit_now
        return int(args.func(args))
    except InputError as exc:
        print(f"kdesched: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK

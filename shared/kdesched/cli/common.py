"""What every ``kdesched`` command shares: the exit codes and the input error, the policy as a
command loads it, the API client's limit flags, and the fast exit.

Why a module of its own: both the one-shot commands (:mod:`kdesched.cli.main`) and the server
modes (:mod:`kdesched.cli.serve`) need them, and ``main`` builds its parser from ``serve``'s; with
them here imports only point one way (main -> serve -> common). Like the rest of the CLI it
imports the heavy packages (the policy loader, the API client's configuration) only inside the
functions that need them, so a command starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported lazily at run time: simulate starts without the reactor's imports
    from kdesched.policy.types import Policy
    from kdesched.reactor.run.settings import ReactorSettings

EXIT_OK, EXIT_RUNTIME, EXIT_INPUT = 0, 1, 2


class InputError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""



@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    """A policy checked as a whole (plugins and ``kdesched:`` block), and what it means for this run."""

    policy: Policy
    settings: ReactorSettings  # ``dry_run`` already resolved
    dry_run: bool
    dry_run_why: str
    """Why the run is (or is not) a dry run, in the operator's words: ``--dry-run``, the policy's
    ``kdesched.dryRun``, ``$KDESCHED_DRY_RUN`` (every one that applies), or why it is live."""


def _dry_run_reasons(policy: Policy, flag: bool, source: str) -> list[str]:
    from kdesched.reactor.run.settings import DRY_RUN_ENV

    reasons = ["--dry-run"] if flag else []
    if policy.kdesched.get("dryRun") is True:
        reasons.append(f"kdesched.dryRun: true in {source}")
    if os.environ.get(DRY_RUN_ENV, "").lower() in ("1", "true", "yes", "on"):
        reasons.append(f"${DRY_RUN_ENV}={os.environ[DRY_RUN_ENV]}")
    return reasons


def load_policy_arg(path: str | None, profiles: Sequence[str] = (), namespaces: Sequence[str] = (), *,
                    dry_run_flag: bool = False) -> LoadedPolicy:
    """The policy from ``path`` and/or ``--profile`` presets (else the default policy), validated
    as a whole before anything else happens: plugin errors and ``kdesched:`` errors are one report
    (InputError -> exit 2). The policy's ``kdesched.dryRun`` (and ``$KDESCHED_DRY_RUN``) make the run
    a dry run; ``--dry-run`` can only add dry-run, never remove it."""
    from kdesched.policy.errors import PolicyError
    from kdesched.reactor.run.settings import ReactorSettings, block_problems

    for name in profiles:
        if not name.strip():
            raise InputError(f"--profile: must name a preset profile (e.g. AffinityAndTaints), got {name!r}")
    try:
        base = None
        if path:
            from kdesched.policy.load import load_policy

            # with presets, the event map is checked against the merged policy below
            base = load_policy(path, check_block=(lambda raw, _: block_problems(raw, None)) if profiles
                               else block_problems)
        if profiles:
            from kdesched.policy.load import expand_presets
            from kdesched.policy.presets import PresetCustomizations, merge_policies

            preset = expand_presets(list(profiles), PresetCustomizations(), namespaces)
            policy = merge_policies(base, preset) if base is not None else preset
        elif base is not None:
            policy = base
        else:
            from kdesched.policy.defaults import default_policy

            policy = default_policy()
        settings = ReactorSettings.from_policy(policy)
    except PolicyError as exc:
        raise InputError(str(exc)) from None
    source = "<stdin>" if path == "-" else (path or "the default policy")
    reasons = _dry_run_reasons(policy, dry_run_flag, source)
    dry_run = bool(reasons) or settings.dry_run
    if dry_run:
        why = " and ".join(reasons) or "the policy's kdesched settings"
    else:
        why = f"no --dry-run flag and no kdesched.dryRun in {source}"
    from dataclasses import replace

    return LoadedPolicy(policy, replace(settings, dry_run=dry_run, dry_run_why=why if dry_run else ""), dry_run, why)


def stdin_once(*uses: tuple[str, str | None]) -> None:
    """Refuse ``-`` (standard input) in more than one place: stdin can be read only once."""
    readers = [name for name, value in uses if value == "-"]
    if len(readers) > 1:
        raise InputError(f"{' and '.join(readers)} both say '-' (standard input), which can be read only once; "
                         f"give at least one of them as a file")


def _qps_flag(text: str) -> float:
    from kdesched.kube.config import parse_qps

    try:
        return parse_qps(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _burst_flag(text: str) -> int:
    from kdesched.kube.config import MAX_BURST, parse_count

    try:
        return parse_count(text, 1, MAX_BURST)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _concurrency_flag(text: str) -> int:
    from kdesched.kube.config import MAX_CONCURRENCY, parse_count

    try:
        return parse_count(text, 1, MAX_CONCURRENCY)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_client_limit_flags(parser: argparse.ArgumentParser, *, concurrency: bool = True) -> None:
    """``--kube-api-qps``, ``--kube-api-burst`` (and ``--max-concurrent-evictions``): run and serve."""
    from kdesched.kube.config import (
        BURST_ENV,
        CONCURRENCY_ENV,
        DEFAULT_BURST,
        DEFAULT_MAX_CONCURRENT_EVICTIONS,
        DEFAULT_QPS,
        MAX_BURST,
        MAX_CONCURRENCY,
        MAX_QPS,
        QPS_ENV,
    )

    parser.add_argument("--kube-api-qps", type=_qps_flag, default=None, metavar="QPS",
                        help=f"client-side rate limit: requests per second to the API server, every request counted "
                             f"(default ${QPS_ENV}, else {DEFAULT_QPS:g}, kube-scheduler's default); range: more "
                             f"than 0 and at most {MAX_QPS:,.0f}")
    parser.add_argument("--kube-api-burst", type=_burst_flag, default=None, metavar="N",
                        help=f"requests that may go above --kube-api-qps in a burst (default ${BURST_ENV}, else "
                             f"{DEFAULT_BURST}); range: 1 to {MAX_BURST:,}")
    if concurrency:
        parser.add_argument("--max-concurrent-evictions", type=_concurrency_flag, default=None, metavar="N",
                            help=f"evictions in flight at once, 1 = one after another (default ${CONCURRENCY_ENV}, "
                                 f"else {DEFAULT_MAX_CONCURRENT_EVICTIONS}); range: 1 to {MAX_CONCURRENCY}")


def client_limits(args: argparse.Namespace) -> Any:
    """The run's :class:`~kdesched.kube.config.ClientLimits`: flags, else environment, else defaults
    (a bad environment value raises ConfigError naming the variable)."""
    from kdesched.kube.config import limits_from_env

    return limits_from_env(qps=args.kube_api_qps, burst=args.kube_api_burst,
                           max_concurrent_evictions=getattr(args, "max_concurrent_evictions", None))


def exit_now(code: int) -> None:
    """End the process once the output is written, without freeing the heap object by object:
    at 150,000 pods freeing the snapshot and the plan takes ~0.4 s (docs/benchmarks.md). Used on
    the command line only (``main()`` without ``argv``), never in-process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

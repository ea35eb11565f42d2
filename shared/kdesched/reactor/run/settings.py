"""Reactor settings: the policy's ``kdesched:`` block (plus a few environment variables), validated.

Why: an operator must learn about a typo in the settle window or a rate limit when the policy is
loaded, not when the first burst of events arrives. Every problem is reported at once, naming the
field (``kdesched.settleSeconds: must be a number >= 0, got "x"``), as a
:class:`~kdesched.policy.errors.PolicyError` so the CLI treats it like any other policy mistake
(exit 2, before any API call).

Defaults (also in docs/reactor.md):

==============================  =========  ==================================================
key                             default    meaning
==============================  =========  ==================================================
balanceDelaySeconds             0.5        leading edge: a balance run starts this soon after the first event
settleSeconds                   10         a burst's follow-up balance run starts no sooner than this after
                                           the previous one started (node-scoped runs: right after)
leaseWaitSeconds                5          how long a balance run waits for a busy Lease (429 after)
leaseDurationSeconds            60         Lease duration; renewed every third of it while held
leaseRenewDeadlineSeconds       2/3 of it  a holder whose renews all failed for this long steps down
                                           (stops evicting, stops leading); must be >= 1 and < the duration
cooldown.workloadSeconds        300        no second eviction of the same owner (uid) before this
cooldown.nodeSeconds            300        no eviction from a node evicted from before this
cooldown.wastedMoveBaseSeconds  workload   a wasted move backs its workload off this long for the strategy
                                seconds    (x2 per consecutive wasted move); default workloadSeconds, 300 if 0
cooldown.wastedMoveMaxSeconds   3600       cap of that back-off (checked moves, docs/safety.md)
rateLimits.global               300/min,   one token bucket over every eviction, cluster-wide (kept in the
                                burst 100  disruption ledger); null disables it
rateLimits.perNode/perNamespace removed    0.1's per-process buckets: only null is accepted (the node
                                           cool-down and namespace budgets cover them; docs/safety.md)
topologyKeys                    []         extra node label keys that count as topology labels
sweepIntervalSeconds            900        ``kdesched serve`` periodic full run (0 disables)
historyMaxEntries               1000       accepted for 0.1 policies; the ledger is split per workload and
                                           has no entry cap any more (docs/design.md)
safety                          see below  kdesched.policy.safety: on in the event path, off in simulate/run
healthBrake                     see below  kdesched.admission.health: no eviction while > 20% of nodes (or a zone) is down
alertBrake                      disabled   kdesched.admission.alerts: no eviction while named Prometheus alerts fire
disruptionWindows               []         kdesched.admission.windows: cron schedule + duration, allow or forbid
disruptionBudgets               []         kdesched.admission.budgets: at most N or N% unavailable through kdesched
usage                           see below  kdesched.policy.usage: Prometheus CA and timeout, the young-node rule
moves.surge                     true       surge-first moves in the event path (kdesched.evictor.surge); false:
                                           evictions only (what simulate and run always do)
events                          see events.DEFAULT_EVENT_STRATEGIES
==============================  =========  ==================================================
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdesched.admission.alerts import AlertBrakeSettings, parse_alert_brake
from kdesched.admission.bucket import ClusterBucket
from kdesched.admission.budgets import Budget
from kdesched.admission.health import HealthBrakeSettings
from kdesched.admission.pipeline import AdmissionSettings
from kdesched.admission.windows import TRIGGERS, Cron, CronError, Window, parse_duration, parse_zone
from kdesched.model.errors import ModelError
from kdesched.model.names import is_dns_label, is_dns_subdomain
from kdesched.model.selectors import LabelSelector
from kdesched.policy.errors import PolicyError
from kdesched.policy.errors import show_value as _show
from kdesched.policy.safety import SafetySettings, parse_safety
from kdesched.policy.types import Policy
from kdesched.policy.usage import UsageSettings, parse_usage_settings

LEASE_NAME_ENV = "KDESCHED_LEASE_NAME"
LEASE_NAMESPACE_ENV = "KDESCHED_LEASE_NAMESPACE"
DRY_RUN_ENV = "KDESCHED_DRY_RUN"
BROKER_ENV = ("K_SINK", "KDESCHED_BROKER_URL")


@dataclass(frozen=True, slots=True)
class BucketSettings:
    """One token bucket: ``per_minute`` tokens refilled per minute, at most ``burst`` stored."""

    per_minute: float
    burst: int

    @property
    def rate_per_second(self) -> float:
        return self.per_minute / 60.0


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    """Eviction rate limits per unit of time (None = disabled): one cluster-wide bucket. A pool
    maintenance of 200 pods in waves of 50 fits in its burst and refill (docs/safety.md)."""

    global_: BucketSettings | None = BucketSettings(300, 100)


@dataclass(frozen=True, slots=True)
class ReactorSettings:
    """Everything the reactor needs besides the policy itself."""

    events: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # filled by from_policy
    events_overridden: frozenset[str] = frozenset()  # event types the policy mapped explicitly
    settle_seconds: float = 10.0  # min spacing of two balance runs (the follow-up of a burst)
    balance_delay_seconds: float = 0.5  # leading edge: gather time of the first balance event
    lease_wait_seconds: float = 5.0
    lease_duration_seconds: int = 60
    lease_renew_deadline_seconds: float | None = None  # None: 2/3 of the duration (see lease_renew_deadline)
    lease_name: str = "kdesched"
    lease_namespace: str = "kdesched"
    cooldown_workload_seconds: float = 300.0
    cooldown_node_seconds: float = 300.0
    wasted_move_base_seconds: float = 300.0  # checked moves: the back-off after one wasted move
    wasted_move_max_seconds: float = 3600.0  # its cap
    rate_limits: RateLimitSettings = RateLimitSettings()
    topology_keys: tuple[str, ...] = ()
    sweep_interval_seconds: float = 900.0
    history_max_entries: int = 1000
    dry_run: bool = False
    dry_run_why: str = ""  # what made it a dry run (the policy, the environment, --dry-run); "" when live
    safety: SafetySettings = field(default_factory=SafetySettings)  # kdesched.policy.safety: resolved per command
    health_brake: HealthBrakeSettings = field(default_factory=HealthBrakeSettings)
    alert_brake: AlertBrakeSettings = field(default_factory=AlertBrakeSettings)  # kdesched.admission.alerts
    windows: tuple[Window, ...] = ()
    budgets: tuple[Budget, ...] = ()
    usage: UsageSettings = field(default_factory=UsageSettings)  # kdesched.policy.usage
    # kdesched.moves.surge: surge-first moves (kdesched.evictor.surge); None = the command's default
    # (on in the event path, which is the only path that makes them: they need the disruption ledger)
    surge_moves: bool | None = None

    @property
    def surge_enabled(self) -> bool:
        return self.surge_moves is not False

    @property
    def admission(self) -> AdmissionSettings:
        """The admission pipeline's settings (kdesched.admission.pipeline), from this block."""
        g = self.rate_limits.global_
        return AdmissionSettings(self.health_brake, self.alert_brake, self.cooldown_workload_seconds,
                                 self.cooldown_node_seconds, self.wasted_move_base_seconds,
                                 self.wasted_move_max_seconds,
                                 ClusterBucket(g.per_minute, g.burst) if g is not None else None,
                                 self.windows, self.budgets)

    @property
    def lease_renew_deadline(self) -> float:
        """The renew deadline in force: ``lease_renew_deadline_seconds``, else 2/3 of the duration
        (client-go's 10 s of 15 s)."""
        if self.lease_renew_deadline_seconds is not None:
            return self.lease_renew_deadline_seconds
        return self.lease_duration_seconds * 2 / 3

    @classmethod
    def from_policy(cls, policy: Policy, env: Mapping[str, str] | None = None) -> ReactorSettings:
        """Parse and validate ``policy.kdesched`` (+ env); raises PolicyError naming every bad field."""
        return parse_settings(policy.kdesched, policy=policy, env=os.environ if env is None else env,
                              source=policy.source)


# --- parsing -------------------------------------------------------------------------------------




def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


MAX_SWEEP_SECONDS = 7 * 24 * 3600
"""The longest sweep interval (a week), here and for ``serve --sweep-interval``: a larger one is a
typo, and ``inf`` killed the sweep thread. Checked with the policy, so ``policy validate`` refuses
what ``serve`` would."""


class _Reader:
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors

    def mapping(self, raw: Any, where: str, known: tuple[str, ...]) -> Mapping[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            self.errors.append(f"{where}: must be a mapping, got {_show(raw)}")
            return {}
        for key in raw:
            if key not in known:
                self.errors.append(f"{where}.{key}: unknown field (known: {', '.join(known)})")
        return raw

    def number(self, raw: Mapping[str, Any], key: str, where: str, default: float, *,
               minimum: float = 0.0, strict: bool = False) -> float:
        if key not in raw or raw[key] is None:
            return default
        value = raw[key]
        ok = _is_number(value) and (value > minimum if strict else value >= minimum)
        if not ok:
            op = ">" if strict else ">="
            self.errors.append(f"{where}.{key}: must be a number {op} {minimum:g}, got {_show(value)}")
            return default
        return float(value)

    def integer(self, raw: Mapping[str, Any], key: str, where: str, default: int, *, minimum: int) -> int:
        if key not in raw or raw[key] is None:
            return default
        value = raw[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.errors.append(f"{where}.{key}: must be an integer >= {minimum}, got {_show(value)}")
            return default
        return value

    def boolean(self, raw: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        if key not in raw or raw[key] is None:
            return default
        value = raw[key]
        if not isinstance(value, bool):
            self.errors.append(f"{where}.{key}: must be true or false, got {_show(value)}")
            return default
        return value

    def bucket(self, raw: Mapping[str, Any], key: str, where: str,
               default: BucketSettings | None) -> BucketSettings | None:
        if key not in raw:
            return default
        if raw[key] is None:
            return None  # explicitly disabled
        sub = self.mapping(raw[key], f"{where}.{key}", ("perMinute", "burst"))
        if not isinstance(raw[key], Mapping):
            return default
        base = default or BucketSettings(60, 30)
        per_minute = self.number(sub, "perMinute", f"{where}.{key}", base.per_minute, minimum=0, strict=True)
        burst = self.integer(sub, "burst", f"{where}.{key}", base.burst, minimum=1)
        return BucketSettings(per_minute, burst)


KNOWN_KEYS = ("events", "settleSeconds", "balanceDelaySeconds", "leaseWaitSeconds", "leaseDurationSeconds",
              "leaseRenewDeadlineSeconds", "cooldown", "rateLimits", "topologyKeys", "sweepIntervalSeconds",
              "historyMaxEntries", "dryRun", "safety", "healthBrake", "alertBrake", "disruptionWindows",
              "disruptionBudgets", "usage", "moves")


def parse_settings(raw: Any, *, policy: Policy | None = None, env: Mapping[str, str] | None = None,
                   source: str = "") -> ReactorSettings:
    """Validate a raw ``kdesched:`` block. ``policy`` lets the event map be checked against it."""
    from kdesched.reactor.events.routing import validate_event_map  # events imports settings' types only

    env = env or {}
    errors: list[str] = []
    r = _Reader(errors)
    block = r.mapping(raw, "kdesched", KNOWN_KEYS)
    settle = r.number(block, "settleSeconds", "kdesched", 10.0)
    balance_delay = r.number(block, "balanceDelaySeconds", "kdesched", 0.5)
    lease_wait = r.number(block, "leaseWaitSeconds", "kdesched", 5.0)
    lease_duration = r.integer(block, "leaseDurationSeconds", "kdesched", 60, minimum=5)
    renew_deadline: float | None = None
    raw_deadline = block.get("leaseRenewDeadlineSeconds")
    if raw_deadline is not None:
        if not _is_number(raw_deadline) or not 1 <= raw_deadline < lease_duration:
            errors.append(f"kdesched.leaseRenewDeadlineSeconds: must be a number >= 1 and < leaseDurationSeconds "
                          f"({lease_duration}), got {_show(raw_deadline)}")
        else:
            renew_deadline = float(raw_deadline)
    sweep = r.number(block, "sweepIntervalSeconds", "kdesched", 900.0)
    if sweep > MAX_SWEEP_SECONDS:
        errors.append(f"kdesched.sweepIntervalSeconds: must be at most {MAX_SWEEP_SECONDS} (a week), got {sweep:g}")
    history_max = r.integer(block, "historyMaxEntries", "kdesched", 1000, minimum=10)
    dry_run = r.boolean(block, "dryRun", "kdesched", False)
    safety = parse_safety(block.get("safety"), errors)
    usage = parse_usage_settings(block.get("usage"), errors)
    moves = r.mapping(block.get("moves"), "kdesched.moves", ("surge",))
    surge_moves = None if moves.get("surge") is None else r.boolean(moves, "surge", "kdesched.moves", True)

    cooldown = r.mapping(block.get("cooldown"), "kdesched.cooldown",
                         ("workloadSeconds", "nodeSeconds", "wastedMoveBaseSeconds", "wastedMoveMaxSeconds"))
    cd_workload = r.number(cooldown, "workloadSeconds", "kdesched.cooldown", 300.0)
    cd_node = r.number(cooldown, "nodeSeconds", "kdesched.cooldown", 300.0)
    wasted_base = r.number(cooldown, "wastedMoveBaseSeconds", "kdesched.cooldown", cd_workload or 300.0)
    wasted_max = r.number(cooldown, "wastedMoveMaxSeconds", "kdesched.cooldown", max(3600.0, wasted_base))
    if wasted_max < wasted_base:
        errors.append(f"kdesched.cooldown.wastedMoveMaxSeconds: must be >= wastedMoveBaseSeconds ({wasted_base:g}), "
                      f"got {wasted_max:g}")

    rates_raw = r.mapping(block.get("rateLimits"), "kdesched.rateLimits", ("global", "perNode", "perNamespace"))
    defaults = RateLimitSettings()
    rates = RateLimitSettings(r.bucket(rates_raw, "global", "kdesched.rateLimits", defaults.global_))
    removed_buckets = (("perNode", "cooldown.nodeSeconds"),
                       ("perNamespace", "disruptionBudgets with a namespaceSelector"))
    for removed, instead in removed_buckets:
        if rates_raw.get(removed) is not None:
            errors.append(f"kdesched.rateLimits.{removed}: removed in 0.2 (a bucket per process bounded nothing "
                          f"cluster-wide and stalled maintenances); use {instead}, or null (docs/safety.md)")

    topo: tuple[str, ...] = ()
    raw_topo = block.get("topologyKeys")
    if raw_topo is not None:
        if not isinstance(raw_topo, list) or not all(isinstance(k, str) and k for k in raw_topo):
            errors.append(f"kdesched.topologyKeys: must be a list of label keys, got {_show(raw_topo)}")
        else:
            topo = tuple(raw_topo)

    events, overridden = validate_event_map(block.get("events"), policy, errors)
    brake = parse_health_brake(r, block.get("healthBrake"))
    alert_brake = AlertBrakeSettings()
    try:
        alert_brake = parse_alert_brake(block.get("alertBrake"))
    except PolicyError as exc:
        errors.extend(exc.errors)
    windows = parse_windows(block.get("disruptionWindows"), errors)
    budgets = parse_budgets(block.get("disruptionBudgets"), errors)

    # environment: names of the Lease, dry-run switch, broker address
    lease_name = env.get(LEASE_NAME_ENV) or "kdesched"
    lease_ns = env.get(LEASE_NAMESPACE_ENV) or env.get("POD_NAMESPACE") or "kdesched"
    if not is_dns_subdomain(lease_name):
        errors.append(f"{LEASE_NAME_ENV}: must be a DNS subdomain name, got {_show(lease_name)}")
    if not is_dns_label(lease_ns):
        errors.append(f"{LEASE_NAMESPACE_ENV}: must be a namespace name (DNS label), got {_show(lease_ns)}")
    dry_reasons = ["kdesched.dryRun: true in the policy"] if dry_run else []
    env_dry = env.get(DRY_RUN_ENV, "")
    if env_dry:
        if env_dry.lower() in ("1", "true", "yes", "on"):
            dry_run = True
            dry_reasons.append(f"${DRY_RUN_ENV}={env_dry}")
        elif env_dry.lower() not in ("0", "false", "no", "off"):
            errors.append(f"{DRY_RUN_ENV}: must be true or false, got {_show(env_dry)}")

    if errors:
        raise PolicyError(errors, source)
    return ReactorSettings(
        events=events, events_overridden=overridden, settle_seconds=settle, balance_delay_seconds=balance_delay,
        lease_wait_seconds=lease_wait,
        lease_duration_seconds=lease_duration, lease_renew_deadline_seconds=renew_deadline, lease_name=lease_name, lease_namespace=lease_ns,
        cooldown_workload_seconds=cd_workload, cooldown_node_seconds=cd_node, wasted_move_base_seconds=wasted_base,
        wasted_move_max_seconds=wasted_max, rate_limits=rates,
        topology_keys=topo, sweep_interval_seconds=sweep, history_max_entries=history_max, dry_run=dry_run,
        dry_run_why=" and ".join(dry_reasons), safety=safety, health_brake=brake, alert_brake=alert_brake,
        windows=windows, budgets=budgets, usage=usage, surge_moves=surge_moves,
    )


def parse_health_brake(r: _Reader, raw: Any) -> HealthBrakeSettings:
    where = "kdesched.healthBrake"
    block = r.mapping(raw, where, ("enabled", "maxUnhealthyShare", "zones", "settleSeconds"))
    d = HealthBrakeSettings()
    share = d.max_unhealthy_share
    if block.get("maxUnhealthyShare") is not None:
        value = block["maxUnhealthyShare"]
        if not _is_number(value) or not 0 <= value < 1:
            r.errors.append(f"{where}.maxUnhealthyShare: must be a number >= 0 and < 1 (a share of the nodes, "
                            f"0.2 = 20%), got {_show(value)}")
        else:
            share = float(value)
    return HealthBrakeSettings(r.boolean(block, "enabled", where, d.enabled), share,
                               r.boolean(block, "zones", where, d.zones),
                               r.number(block, "settleSeconds", where, d.settle_seconds))


def _names(raw: Any, where: str, known: tuple[str, ...] | None, errors: list[str]) -> frozenset[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(x, str) and x for x in raw):
        errors.append(f"{where}: must be a non-empty list of names, got {_show(raw)}")
        return None
    if known is not None:
        for x in raw:
            if x not in known:
                errors.append(f"{where}: unknown name {_show(x)} (known: {', '.join(known)})")
    return frozenset(raw)


def _plugin_names() -> tuple[str, ...]:
    from kdesched.policy.plugins import PLUGINS

    return tuple(sorted(n for n in PLUGINS if n != "DefaultEvictor"))


def _named_items(raw: Any, field: str, known: tuple[str, ...],
                 errors: list[str]) -> Iterator[tuple[str, Mapping[str, Any], Any, int]]:
    """The items of the list ``field`` (windows, budgets): each a mapping of ``known`` keys with an
    optional ``name``. Yields (its path, the item, its name, the error count before its fields were
    checked: an item is kept only if its fields, the name included, add no error); what is not a
    list, not a mapping, an unknown key or a name that is not a string is an error naming the path
    (None: an empty list)."""
    if raw is None:
        return
    if not isinstance(raw, list):
        errors.append(f"{field}: must be a list, got {_show(raw)}")
        return
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            errors.append(f"{where}: must be a mapping with {', '.join(known)}, got {_show(item)}")
            continue
        _Reader(errors).mapping(item, where, known)
        n = len(errors)
        name = item.get("name", "")
        if not isinstance(name, str):
            errors.append(f"{where}.name: must be a string, got {_show(name)}")
        yield where, item, name, n


def parse_windows(raw: Any, errors: list[str]) -> tuple[Window, ...]:
    """``kdesched.disruptionWindows``: a list of {name?, schedule, duration, action, timeZone?,
    strategies?, triggers?} (kdesched.admission.windows)."""
    out: list[Window] = []
    known = ("name", "schedule", "duration", "action", "timeZone", "strategies", "triggers")
    for where, item, name, n in _named_items(raw, "kdesched.disruptionWindows", known, errors):
        cron: Cron | None = None
        duration = 0.0
        zone: Any = None
        for key in ("schedule", "duration"):
            if key not in item:
                errors.append(f"{where}.{key}: required")
        try:
            if "schedule" in item:
                cron = Cron.parse(item["schedule"])
        except CronError as exc:
            errors.append(f"{where}.schedule: {exc}")
        try:
            if "duration" in item:
                duration = parse_duration(item["duration"])
        except CronError as exc:
            errors.append(f"{where}.duration: {exc}")
        try:
            zone = parse_zone(item.get("timeZone"))
        except CronError as exc:
            errors.append(f"{where}.timeZone: {exc}")
        action = item.get("action", "forbid")
        if action not in ("allow", "forbid"):
            errors.append(f"{where}.action: must be allow or forbid, got {_show(action)}")
        strategies = _names(item.get("strategies"), f"{where}.strategies", _plugin_names(), errors)
        triggers = _names(item.get("triggers"), f"{where}.triggers", TRIGGERS, errors)
        if len(errors) == n and cron is not None:
            out.append(Window(str(name), cron, duration, str(action), zone, str(item.get("timeZone") or "UTC"),
                              strategies, triggers))
    return tuple(out)


def parse_budgets(raw: Any, errors: list[str]) -> tuple[Budget, ...]:
    """``kdesched.disruptionBudgets``: a list of {name?, maxUnavailable, namespaceSelector? |
    strategies?} (kdesched.admission.budgets)."""
    out: list[Budget] = []
    known = ("name", "maxUnavailable", "namespaceSelector", "strategies")
    for where, item, name, n in _named_items(raw, "kdesched.disruptionBudgets", known, errors):
        count: int | None = None
        percent: float | None = None
        value = item.get("maxUnavailable")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            count = value
        elif isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?%", value) and float(value[:-1]) <= 100:
            percent = float(value[:-1])
        else:
            errors.append(f"{where}.maxUnavailable: must be an integer >= 0 or a percentage such as \"20%\", "
                          f"got {_show(value)}")
        selector: LabelSelector | None = None
        if "namespaceSelector" in item:
            try:
                selector = LabelSelector.from_api(item["namespaceSelector"] or {}, f"{where}.namespaceSelector")
            except ModelError as exc:
                errors.append(str(exc) if where in str(exc) else f"{where}.namespaceSelector: {exc}")
        strategies = _names(item.get("strategies"), f"{where}.strategies", _plugin_names(), errors)
        if selector is not None and strategies is not None:
            errors.append(f"{where}: set namespaceSelector (a budget per namespace) or strategies (a budget per "
                          "strategy), not both")
        if len(errors) == n:
            out.append(Budget(str(name), count, percent, selector, strategies))
    return tuple(out)


def _assume_configured() -> Policy:
    """A stand-in policy that configures every plugin: used when the real profiles could not be
    checked, so the event map is not blamed for what the profiles' own errors already explain."""
    from kdesched.policy.plugins import PLUGINS
    from kdesched.policy.types import Profile

    return Policy(profiles=(Profile(name="", plugin_args=dict.fromkeys(PLUGINS)),))


def block_problems(raw: Any, policy: Policy | None) -> list[str]:
    """Every problem of a raw ``kdesched:`` block (+ env), one message each; [] when it is valid.

    The :data:`kdesched.policy.load.BlockCheck` every command passes to the policy loader, so that
    a policy's plugin errors and its ``kdesched:`` errors are reported together. Without ``policy``
    (its profiles had errors) the event map is checked for everything but what needs the profiles."""
    try:
        parse_settings(raw, policy=policy if policy is not None else _assume_configured(), env=os.environ)
    except PolicyError as exc:
        return list(exc.errors)
    return []

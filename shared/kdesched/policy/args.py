"""Parsers for every upstream plugin's ``args``: raw YAML mapping -> frozen ``*Args`` dataclass.

Why: upstream decodes plugin args strictly and validates them before a profile is built; a
policy kdesched accepts must mean exactly what it means upstream, and a policy upstream rejects
must be rejected here too, with every problem reported at once. Each ``parse_*`` function
returns ``(args, errors)``: ``args`` is ``None`` whenever ``errors`` is non-empty. Messages are
``<where>: <field path>: <problem>`` where ``where`` names profile and plugin.

Defaults are upstream's (descheduler v0.36; docs/strategies.md). Deliberate differences, all
stricter than upstream and each about a value upstream would silently ignore:

* ``nodeAffinityType`` values other than the two affinity kinds are errors (upstream logs and
  skips them at run time, so a typo disables the plugin).
* A ``MetricResource`` threshold without ``metricsUtilization.source: Prometheus`` is an error
  (no node has such a resource, so the plugin could never act).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kdesched.model.errors import ModelError
from kdesched.model.selectors import LabelSelector, parse_selector
from kdesched.policy.types import (
    DEFAULT_PROTECTIONS,
    EXTRA_PROTECTIONS,
    PREFERRED_AFFINITY,
    REQUIRED_AFFINITY,
    DefaultEvictorArgs,
    HighNodeUtilizationArgs,
    LowNodeUtilizationArgs,
    MetricsUtilization,
    Namespaces,
    OwnerKinds,
    PodConditionFilter,
    PodLifeTimeArgs,
    PriorityThreshold,
    RemoveDuplicatesArgs,
    RemoveFailedPodsArgs,
    RemovePodsHavingTooManyRestartsArgs,
    RemovePodsViolatingInterPodAntiAffinityArgs,
    RemovePodsViolatingNodeAffinityArgs,
    RemovePodsViolatingNodeTaintsArgs,
    RemovePodsViolatingTopologySpreadConstraintArgs,
)

log = logging.getLogger("kdesched.policy")

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
UINT_MAX = 2**64 - 1

METRIC_RESOURCE = "MetricResource"
KUBERNETES_METRICS = "KubernetesMetrics"
PROMETHEUS = "Prometheus"

NO_EVICTION_POLICIES = ("", "Preferred", "Mandatory")
TSC_CONSTRAINTS = ("DoNotSchedule", "ScheduleAnyway")
HNU_EVICTION_MODES = ("OnlyThresholdingResources",)
TOO_MANY_RESTARTS_STATES = ("Running", "CrashLoopBackOff")
NODE_AFFINITY_TYPES = (REQUIRED_AFFINITY, PREFERRED_AFFINITY)
# PodLifeTime states accepted by v0.36 (the last seven are new in v0.36).
POD_LIFE_TIME_STATES = (
    "Running", "Pending", "Succeeded", "Failed", "Unknown",
    "NodeAffinity", "NodeLost", "Shutdown", "UnexpectedAdmissionError",
    "PodInitializing", "ContainerCreating", "ImagePullBackOff", "CrashLoopBackOff",
    "CreateContainerConfigError", "ErrImagePull", "CreateContainerError", "InvalidImageName",
    "OOMKilled", "Error", "Completed", "DeadlineExceeded", "Evicted", "ContainerCannotRun", "StartError",
)
# Deprecated DefaultEvictor booleans, in upstream's order, with the protection each one affects.
LEGACY_EVICTOR_FLAGS: tuple[tuple[str, str, bool], ...] = (
    # (field, protection, True = the flag *removes* a default protection / False = *adds* one)
    ("evictLocalStoragePods", "PodsWithLocalStorage", True),
    ("evictDaemonSetPods", "DaemonSetPods", True),
    ("evictSystemCriticalPods", "SystemCriticalPods", True),
    ("evictFailedBarePods", "FailedBarePods", True),
    ("ignorePvcPods", "PodsWithPVC", False),
    ("ignorePodsWithoutPDB", "PodsWithoutPDB", False),
)

T = TypeVar("T")


# --------------------------------------------------------------------------- value rendering

def show(value: Any) -> str:
    """A value as the user wrote it, for messages (``"abc"``, ``120``, ``true``, ``a list``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --------------------------------------------------------------------------- Go durations

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.Duration`` string (``"5m"``, ``"1h30m"``, ``"1.5s"``) into seconds.

    Raises ``ValueError`` with a readable message; a bare ``"0"`` is zero, like Go.
    """
    s = text.strip()
    if not s:
        raise ValueError("must be a duration such as 5m or 1h30m, got an empty string")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"must be a duration such as 5m or 1h30m, got {json.dumps(text)}")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"must be a duration such as 5m or 1h30m, got {json.dumps(text)}")
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Seconds as Go prints a ``time.Duration`` (``300`` -> ``"5m0s"``, ``5400`` -> ``"1h30m0s"``)."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    whole = int(seconds)
    frac = seconds - whole
    if whole == 0:
        ms = frac * 1000
        if ms >= 1:
            return f"{sign}{ms:g}ms"
        return f"{sign}{frac * 1e6:g}us" if frac * 1e6 >= 1 else f"{sign}{frac * 1e9:g}ns"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    sec_text = f"{secs + frac:.9f}".rstrip("0").rstrip(".") if frac else str(secs)
    out = ""
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return f"{sign}{out}{sec_text}s"


# --------------------------------------------------------------------------- the field reader

class Fields:
    """Strict reader of one mapping: typed getters that record problems, and an unknown-field check.

    Every getter marks its key as known; :meth:`finish` reports the keys nobody asked for, the
    way upstream's strict decoder does. Nested objects get a child reader with a longer prefix.
    """

    def __init__(self, raw: Any, where: str, errors: list[str], prefix: str = "", what: str = "") -> None:
        self.where = where
        self.errors = errors
        self.prefix = prefix
        self.what = what
        self.known: list[str] = []
        self.ok = True
        if raw is None:
            self.raw: Mapping[Any, Any] = {}
        elif isinstance(raw, Mapping):
            self.raw = raw
        else:
            self.raw = {}
            self.ok = False
            self.errors.append(self._at(prefix.rstrip(".") or "args", f"must be a map, got {show(raw)}"))

    # -- plumbing
    def _at(self, field: str, message: str) -> str:
        return f"{self.where}: {field}: {message}" if self.where else f"{field}: {message}"

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, message: str) -> None:
        self.errors.append(self._at(self.path(key), message))

    def error_here(self, message: str) -> None:
        """A problem about this object as a whole (not one of its fields)."""
        self.errors.append(self._at(self.prefix.rstrip(".") or "args", message))

    def has(self, key: str) -> bool:
        if key not in self.known:
            self.known.append(key)
        return key in self.raw and self.raw[key] is not None

    def get(self, key: str) -> Any:
        if key not in self.known:
            self.known.append(key)
        return self.raw.get(key)

    def finish(self) -> None:
        for key in self.raw:
            if key not in self.known:
                known = ", ".join(self.known) if self.known else "none"
                label = f"the {self.what} fields are" if self.what else "known fields are"
                self.errors.append(self._at(self.path(str(key)), f"unknown field ({label}: {known})"))

    # -- scalars
    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.error(key, f"must be true or false, got {show(value)}")
            return default
        return value

    def integer(self, key: str, *, minimum: int | None = None, maximum: int | None = None,
            default: int | None = None, max_message: str = "") -> int | None:
        value = self.get(key)
        if value is None:
            return default
        return check_int(value, minimum, maximum, lambda msg: self.error(key, msg), max_message=max_message, default=default)

    def string(self, key: str, default: str = "", choices: Sequence[str] | None = None) -> str:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.error(key, f"must be a string, got {show(value)}")
            return default
        if choices is not None and value not in choices:
            self.error(key, f"must be one of {_choices(choices)}, got {show(value)}")
            return default
        return value

    def str_list(self, key: str, choices: Sequence[str] | None = None, *, unique: bool = False,
                 non_empty_items: bool = False) -> tuple[str, ...] | None:
        """A list of strings; ``None`` when absent. Reports bad items by index."""
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            self.error(key, f"must be a list of strings, got {show(value)}")
            return None
        out: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.error(f"{key}[{i}]", f"must be a string, got {show(item)}")
                continue
            if non_empty_items and not item:
                self.error(f"{key}[{i}]", "must not be empty")
                continue
            if choices is not None and item not in choices:
                self.error(f"{key}[{i}]", f"must be one of {_choices(choices)}, got {show(item)}")
                continue
            if unique and item in out:
                self.error(f"{key}[{i}]", f"duplicate value {show(item)}")
                continue
            out.append(item)
        return tuple(out)

    def int_list(self, key: str, minimum: int = INT32_MIN, maximum: int = INT32_MAX) -> tuple[int, ...] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            self.error(key, f"must be a list of integers, got {show(value)}")
            return None
        out: list[int] = []
        for i, item in enumerate(value):
            def report(message: str, at: str = f"{key}[{i}]") -> None:
                self.error(at, message)

            checked = check_int(item, minimum, maximum, report)
            if checked is not None:
                out.append(checked)
        return tuple(out)

    def child(self, key: str, what: str = "") -> Fields | None:
        """A reader for the nested object ``key`` (``None`` if absent or not a map)."""
        value = self.get(key)
        if value is None:
            return None
        sub = Fields(value, self.where, self.errors, prefix=f"{self.prefix}{key}.", what=what)
        return sub if sub.ok else None

    # -- composite kubernetes values
    def namespaces(self, key: str = "namespaces", *, exclude_only: bool = False) -> Namespaces | None:
        sub = self.child(key, what="namespaces")
        if sub is None:
            return None
        include = sub.str_list("include", non_empty_items=True) or ()
        exclude = sub.str_list("exclude", non_empty_items=True) or ()
        sub.finish()
        if include and exclude:
            self.error(key, "only one of include and exclude may be set")
            return None
        if exclude_only and include:
            self.error(f"{key}.include", "is not supported here, only exclude")
            return None
        if not include and not exclude:
            return None
        return Namespaces(include=include, exclude=exclude)

    def label_selector(self, key: str = "labelSelector") -> LabelSelector | None:
        value = self.get(key)
        if value is None:
            return None
        try:
            return LabelSelector.from_api(value, where=self.path(key))
        except ModelError as exc:
            self.errors.append(f"{self.where}: {exc}" if self.where else str(exc))
            return None

    def duration_seconds(self, key: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.error(key, f"must be a duration string such as 5m or 1h30m, got {show(value)}")
            return None
        try:
            seconds = parse_go_duration(value)
        except ValueError as exc:
            self.error(key, str(exc))
            return None
        if seconds < 0:
            self.error(key, f"must not be negative, got {show(value)}")
            return None
        return seconds

    def percentages(self, key: str, *, required: bool) -> dict[str, float] | None:
        """A ``resource -> percent`` map with every value in [0, 100]."""
        value = self.get(key)
        if value is None or (isinstance(value, Mapping) and not value):
            if required:
                self.error(key, "is required: give at least one resource percentage, e.g. {cpu: 20}")
            return None
        if not isinstance(value, Mapping):
            self.error(key, f"must be a map of resource name to percentage, got {show(value)}")
            return None
        out: dict[str, float] = {}
        good = True
        for name, pct in value.items():
            if not isinstance(name, str) or not name:
                self.error(key, f"resource names must be non-empty strings, got {show(name)}")
                good = False
                continue
            if not _is_number(pct):
                self.error(f"{key}.{name}", f"must be a number between 0 and 100, got {show(pct)}")
                good = False
                continue
            if not 0 <= pct <= 100:
                self.error(f"{key}.{name}", f"must be between 0 and 100, got {show(pct)}")
                good = False
                continue
            out[name] = float(pct) if isinstance(pct, float) else pct
        return out if good else None


def _choices(choices: Sequence[str]) -> str:
    return ", ".join(json.dumps(c) if c == "" else c for c in choices)


def check_int(value: Any, minimum: int | None, maximum: int | None, report: Callable[[str], None], *,
              max_message: str = "", default: int | None = None) -> int | None:
    """Validate an integer against a range, calling ``report`` with a message naming the range."""
    unbounded = maximum is None or maximum >= 2**53
    if minimum == 0 and unbounded:
        want = "a non-negative integer"
    elif minimum is not None and unbounded:
        want = f"an integer >= {minimum}"
    elif minimum is not None and maximum is not None and (minimum, maximum) != (INT32_MIN, INT32_MAX):
        want = f"an integer between {minimum} and {maximum}"
    else:
        want = "an integer"
    if not _is_int(value):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            report(f"must be {want} without a fraction, got {show(value)}")
        else:
            report(f"must be {want}, got {show(value)}")
        return default
    if minimum is not None and value < minimum:
        report(f"must be {want}, got {value}")
        return default
    if maximum is not None and value > maximum:
        report(max_message or f"must be {want}, got {value}")
        return default
    return int(value)


def _start(raw: Any, where: str, what: str) -> tuple[Fields, list[str]]:
    errors: list[str] = []
    return Fields(raw, where, errors, what=what), errors


def _done(fields: Fields, errors: list[str], build: Callable[[], T]) -> tuple[T | None, list[str]]:
    fields.finish()
    if errors:
        return None, errors
    return build(), errors


# --------------------------------------------------------------------------- DefaultEvictor

def parse_default_evictor(raw: Any, where: str) -> tuple[DefaultEvictorArgs | None, list[str]]:
    """DefaultEvictor args (upstream v0.36), with the effective protections computed.

    ``priorityThreshold`` defaults to ``{value: 2000000000}`` as upstream's policy loader sets it;
    a ``name`` is kept for :func:`kdesched.policy.load.resolve_priority_thresholds`.
    """
    f, errors = _start(raw, where, "DefaultEvictor")
    node_selector = f.string("nodeSelector")
    if node_selector:
        try:
            parse_selector(node_selector, where="nodeSelector")
        except ModelError as exc:
            errors.append(f"{where}: {exc}")
    label_selector = f.label_selector("labelSelector")
    namespace_label_selector = f.label_selector("namespaceLabelSelector")

    threshold = PriorityThreshold(value=SYSTEM_CRITICAL_PRIORITY)
    pt = f.child("priorityThreshold", what="priorityThreshold")
    if pt is not None:
        value = pt.integer("value", minimum=INT32_MIN, maximum=SYSTEM_CRITICAL_PRIORITY,
                       max_message=f"must not be greater than {SYSTEM_CRITICAL_PRIORITY} (system-critical), got "
                       f"{show(pt.raw.get('value'))}")
        name = pt.string("name")
        pt.finish()
        if value is not None and name:
            f.error("priorityThreshold", "only one of value and name may be set")
        elif name:
            threshold = PriorityThreshold(name=name)
        elif value is not None:
            threshold = PriorityThreshold(value=value)

    node_fit = f.boolean("nodeFit")
    min_replicas = f.integer("minReplicas", minimum=0, maximum=UINT_MAX, default=0) or 0
    min_pod_age = f.duration_seconds("minPodAge")
    no_eviction_policy = f.string("noEvictionPolicy", choices=NO_EVICTION_POLICIES)

    default_disabled: tuple[str, ...] = ()
    extra_enabled: tuple[str, ...] = ()
    storage_classes: tuple[str, ...] = ()
    pp = f.child("podProtections", what="podProtections")
    if pp is not None:
        default_disabled = _protections(pp, "defaultDisabled", DEFAULT_PROTECTIONS, "a default", EXTRA_PROTECTIONS)
        extra_enabled = _protections(pp, "extraEnabled", EXTRA_PROTECTIONS, "an extra", DEFAULT_PROTECTIONS)
        both = set(default_disabled) & set(extra_enabled)
        for name in sorted(both):
            pp.error_here(f"protection {name} is listed in both defaultDisabled and extraEnabled")
        config = pp.child("config", what="podProtections.config")
        if config is not None:
            pvc = config.child("PodsWithPVC", what="PodsWithPVC")
            if pvc is not None:
                storage_classes = _storage_classes(pvc)
                pvc.finish()
            config.finish()
        pp.finish()

    legacy: dict[str, bool] = {}
    for flag, _, _ in LEGACY_EVICTOR_FLAGS:
        if f.has(flag):
            legacy[flag] = f.boolean(flag)
        else:
            f.get(flag)
    if default_disabled or extra_enabled:
        for flag, value in legacy.items():
            if value:
                f.error(flag, "is deprecated and cannot be combined with podProtections.defaultDisabled/extraEnabled; "
                        "use the podProtections lists only")

    protections = effective_protections(default_disabled, extra_enabled, legacy)

    return _done(f, errors, lambda: DefaultEvictorArgs(
        node_selector=node_selector,
        label_selector=label_selector,
        namespace_label_selector=namespace_label_selector,
        priority_threshold=threshold,
        node_fit=node_fit,
        min_replicas=min_replicas,
        min_pod_age_seconds=min_pod_age,
        no_eviction_policy=no_eviction_policy,
        protections=protections,
        protected_storage_classes=storage_classes,
        default_disabled=default_disabled,
        extra_enabled=extra_enabled,
        legacy=legacy,
    ))


def effective_protections(default_disabled: Sequence[str], extra_enabled: Sequence[str],
                          legacy: Mapping[str, bool]) -> frozenset[str]:
    """Reference §1 "Effective protections": the lists win; otherwise the deprecated booleans."""
    if default_disabled or extra_enabled:
        return frozenset((DEFAULT_PROTECTIONS - set(default_disabled)) | set(extra_enabled))
    out = set(DEFAULT_PROTECTIONS)
    for flag, protection, removes in LEGACY_EVICTOR_FLAGS:
        if legacy.get(flag):
            if removes:
                out.discard(protection)
            else:
                out.add(protection)
    return frozenset(out)


def _protections(pp: Fields, key: str, allowed: frozenset[str], kind: str, other: frozenset[str]) -> tuple[str, ...]:
    names = pp.str_list(key) or ()
    out: list[str] = []
    for i, name in enumerate(names):
        if name in out:
            pp.error(f"{key}[{i}]", f"duplicate protection {name}")
        elif name in other:
            pp.error(f"{key}[{i}]", f"{name} is not {kind} protection (allowed: {', '.join(sorted(allowed))})")
        elif name not in allowed:
            pp.error(f"{key}[{i}]", f"unknown protection {show(name)} (allowed: {', '.join(sorted(allowed))})")
        else:
            out.append(name)
    return tuple(out)


def _storage_classes(pvc: Fields) -> tuple[str, ...]:
    value = pvc.get("protectedStorageClasses")
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        pvc.error("protectedStorageClasses", f"must be a list of {{name: CLASS}}, got {show(value)}")
        return ()
    out: list[str] = []
    for i, item in enumerate(value):
        entry = Fields(item, pvc.where, pvc.errors, prefix=pvc.path(f"protectedStorageClasses[{i}]."),
                       what="protectedStorageClasses entry")
        if not entry.ok:
            continue
        name = entry.string("name")
        entry.finish()
        if not name:
            entry.error("name", "must be a non-empty storage class name")
        else:
            out.append(name)
    return tuple(out)


# --------------------------------------------------------------------------- balance plugins

def parse_remove_duplicates(raw: Any, where: str) -> tuple[RemoveDuplicatesArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemoveDuplicates")
    namespaces = f.namespaces()
    kinds = f.str_list("excludeOwnerKinds", non_empty_items=True) or ()
    return _done(f, errors, lambda: RemoveDuplicatesArgs(namespaces=namespaces, exclude_owner_kinds=kinds))


def _check_metric_keys(f: Fields, key: str, values: Mapping[str, float], prometheus: bool) -> None:
    if prometheus:
        if set(values) != {METRIC_RESOURCE}:
            f.error(key, f"with metricsUtilization.source Prometheus must hold exactly one key {METRIC_RESOURCE}, "
                    f"got {', '.join(sorted(values)) or 'none'}")
    elif METRIC_RESOURCE in values:
        f.error(f"{key}.{METRIC_RESOURCE}", "is only measured with metricsUtilization.source: Prometheus")


def parse_low_node_utilization(raw: Any, where: str) -> tuple[LowNodeUtilizationArgs | None, list[str]]:
    f, errors = _start(raw, where, "LowNodeUtilization")
    thresholds = f.percentages("thresholds", required=True)
    targets = f.percentages("targetThresholds", required=True)
    deviation = f.boolean("useDeviationThresholds")
    number_of_nodes = f.integer("numberOfNodes", minimum=0, maximum=UINT_MAX, default=0) or 0
    evictable = f.namespaces("evictableNamespaces", exclude_only=True)
    limit_node: int | None = None
    limits = f.child("evictionLimits", what="evictionLimits")
    if limits is not None:
        limit_node = limits.integer("node", minimum=0, maximum=UINT_MAX)
        limits.finish()

    metrics: MetricsUtilization | None = None
    mu = f.child("metricsUtilization", what="metricsUtilization")
    prometheus = False
    if mu is not None:
        metrics_server = mu.boolean("metricsServer")
        source = mu.string("source", choices=("", KUBERNETES_METRICS, PROMETHEUS))
        query = ""
        prom_present = mu.has("prometheus")
        prom = mu.child("prometheus", what="metricsUtilization.prometheus")
        if prom is not None:
            query = prom.string("query")
            prom.finish()
        mu.finish()
        if metrics_server and source:
            mu.error_here("metricsServer (deprecated) cannot be combined with source; use source: KubernetesMetrics")
        if prom_present and source == KUBERNETES_METRICS:
            mu.error("prometheus", "cannot be set with source: KubernetesMetrics")
        if source == PROMETHEUS and not query:
            mu.error("prometheus.query", "is required with source: Prometheus")
        if prom_present and source != PROMETHEUS and query:
            mu.error("prometheus", "is only used with source: Prometheus")
        prometheus = source == PROMETHEUS
        metrics = MetricsUtilization(source=source, metrics_server=metrics_server, prometheus_query=query)
        if metrics_server and not source:
            # upstream v0.36 still honours it (usageClientForMetrics) and says it is deprecated
            log.warning("%s: metricsUtilization.metricsServer is deprecated: write metricsUtilization.source: "
                        "KubernetesMetrics (same meaning)", where or "LowNodeUtilization")

    if thresholds is not None and targets is not None:
        _check_metric_keys(f, "thresholds", thresholds, prometheus)
        _check_metric_keys(f, "targetThresholds", targets, prometheus)
        if set(thresholds) != set(targets):
            f.error_here(
                "thresholds and targetThresholds must name the same resources "
                f"(thresholds: {', '.join(sorted(thresholds))}; targetThresholds: {', '.join(sorted(targets))})")
        elif not deviation:
            for name in sorted(thresholds):
                if thresholds[name] > targets[name]:
                    f.error(f"thresholds.{name}", f"must not be greater than targetThresholds.{name} "
                            f"({show(targets[name])}), got {show(thresholds[name])}")

    return _done(f, errors, lambda: LowNodeUtilizationArgs(
        thresholds=dict(thresholds or {}),
        target_thresholds=dict(targets or {}),
        use_deviation_thresholds=deviation,
        number_of_nodes=number_of_nodes,
        evictable_namespaces=evictable,
        eviction_limits_node=limit_node,
        metrics_utilization=metrics,
    ))


def parse_high_node_utilization(raw: Any, where: str) -> tuple[HighNodeUtilizationArgs | None, list[str]]:
    f, errors = _start(raw, where, "HighNodeUtilization")
    thresholds = f.percentages("thresholds", required=True)
    number_of_nodes = f.integer("numberOfNodes", minimum=0, maximum=UINT_MAX, default=0) or 0
    modes = f.str_list("evictionModes", choices=HNU_EVICTION_MODES, unique=True) or ()
    evictable = f.namespaces("evictableNamespaces", exclude_only=True)
    if thresholds is not None and METRIC_RESOURCE in thresholds:
        f.error(f"thresholds.{METRIC_RESOURCE}", "is not supported by HighNodeUtilization (no metrics source)")
    return _done(f, errors, lambda: HighNodeUtilizationArgs(
        thresholds=dict(thresholds or {}),
        number_of_nodes=number_of_nodes,
        eviction_modes=modes,
        evictable_namespaces=evictable,
    ))


def parse_topology_spread(raw: Any, where: str) -> tuple[RemovePodsViolatingTopologySpreadConstraintArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemovePodsViolatingTopologySpreadConstraint")
    namespaces = f.namespaces()
    selector = f.label_selector()
    constraints = f.str_list("constraints", choices=TSC_CONSTRAINTS, unique=True) or ("DoNotSchedule",)
    node_fit = f.boolean("topologyBalanceNodeFit", default=True)
    return _done(f, errors, lambda: RemovePodsViolatingTopologySpreadConstraintArgs(
        namespaces=namespaces, label_selector=selector, constraints=constraints, topology_balance_node_fit=node_fit))


# --------------------------------------------------------------------------- deschedule plugins

def parse_inter_pod_anti_affinity(raw: Any, where: str) -> tuple[RemovePodsViolatingInterPodAntiAffinityArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemovePodsViolatingInterPodAntiAffinity")
    namespaces = f.namespaces()
    selector = f.label_selector()
    return _done(f, errors, lambda: RemovePodsViolatingInterPodAntiAffinityArgs(namespaces=namespaces, label_selector=selector))


def parse_node_affinity(raw: Any, where: str) -> tuple[RemovePodsViolatingNodeAffinityArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemovePodsViolatingNodeAffinity")
    types = f.str_list("nodeAffinityType", choices=NODE_AFFINITY_TYPES, unique=True)
    if not f.raw.get("nodeAffinityType"):
        f.error("nodeAffinityType", f"is required: a list of {_choices(NODE_AFFINITY_TYPES)}")
    namespaces = f.namespaces()
    selector = f.label_selector()
    return _done(f, errors, lambda: RemovePodsViolatingNodeAffinityArgs(
        node_affinity_type=types or (), namespaces=namespaces, label_selector=selector))


def parse_node_taints(raw: Any, where: str) -> tuple[RemovePodsViolatingNodeTaintsArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemovePodsViolatingNodeTaints")
    namespaces = f.namespaces()
    selector = f.label_selector()
    prefer = f.boolean("includePreferNoSchedule")
    excluded = f.str_list("excludedTaints", non_empty_items=True) or ()
    included = f.str_list("includedTaints", non_empty_items=True)
    if excluded and included:
        f.error_here("only one of excludedTaints and includedTaints may be set")
    return _done(f, errors, lambda: RemovePodsViolatingNodeTaintsArgs(
        namespaces=namespaces, label_selector=selector, include_prefer_no_schedule=prefer,
        excluded_taints=excluded, included_taints=included))


def parse_too_many_restarts(raw: Any, where: str) -> tuple[RemovePodsHavingTooManyRestartsArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemovePodsHavingTooManyRestarts")
    if f.raw.get("podRestartThreshold") is None:
        f.get("podRestartThreshold")
        f.error("podRestartThreshold", "is required: an integer >= 1")
        threshold = None
    else:
        threshold = f.integer("podRestartThreshold", minimum=1, maximum=INT32_MAX)
    init = f.boolean("includingInitContainers")
    states = f.str_list("states", choices=TOO_MANY_RESTARTS_STATES, unique=True) or ()
    namespaces = f.namespaces()
    selector = f.label_selector()
    return _done(f, errors, lambda: RemovePodsHavingTooManyRestartsArgs(
        pod_restart_threshold=threshold or 1, including_init_containers=init, states=states,
        namespaces=namespaces, label_selector=selector))


def parse_pod_life_time(raw: Any, where: str) -> tuple[PodLifeTimeArgs | None, list[str]]:
    f, errors = _start(raw, where, "PodLifeTime")
    max_age = f.integer("maxPodLifeTimeSeconds", minimum=0, maximum=UINT_MAX)
    states = f.str_list("states", choices=POD_LIFE_TIME_STATES, unique=True) or ()
    conditions: list[PodConditionFilter] = []
    raw_conditions = f.get("conditions")
    if raw_conditions is not None:
        if not isinstance(raw_conditions, (list, tuple)):
            f.error("conditions", f"must be a list of {{type, status, reason, minTimeSinceLastTransitionSeconds}}, "
                    f"got {show(raw_conditions)}")
        else:
            for i, item in enumerate(raw_conditions):
                c = Fields(item, where, errors, prefix=f"conditions[{i}].", what="condition filter")
                if not c.ok:
                    continue
                ctype = c.string("type")
                status = c.string("status")
                reason = c.string("reason")
                min_time = c.integer("minTimeSinceLastTransitionSeconds", minimum=0, maximum=UINT_MAX)
                c.finish()
                if not (ctype or status or reason or min_time is not None):
                    c.error_here("must set at least one of type, status, reason, minTimeSinceLastTransitionSeconds")
                conditions.append(PodConditionFilter(ctype, status, reason, min_time))
    exit_codes = f.int_list("exitCodes") or ()
    owner_kinds: OwnerKinds | None = None
    ok = f.child("ownerKinds", what="ownerKinds")
    if ok is not None:
        include = ok.str_list("include", non_empty_items=True) or ()
        exclude = ok.str_list("exclude", non_empty_items=True) or ()
        ok.finish()
        if include and exclude:
            f.error("ownerKinds", "only one of include and exclude may be set")
        elif include or exclude:
            owner_kinds = OwnerKinds(include=include, exclude=exclude)
    init = f.boolean("includingInitContainers")
    ephemeral = f.boolean("includingEphemeralContainers")
    namespaces = f.namespaces()
    selector = f.label_selector()
    if max_age is None and not states and not f.raw.get("conditions") and not exit_codes:
        f.error_here("at least one of maxPodLifeTimeSeconds, states, conditions or exitCodes must be set")
    return _done(f, errors, lambda: PodLifeTimeArgs(
        max_pod_life_time_seconds=max_age, states=states, conditions=tuple(conditions), exit_codes=exit_codes,
        owner_kinds=owner_kinds, including_init_containers=init, including_ephemeral_containers=ephemeral,
        namespaces=namespaces, label_selector=selector))


def parse_remove_failed_pods(raw: Any, where: str) -> tuple[RemoveFailedPodsArgs | None, list[str]]:
    f, errors = _start(raw, where, "RemoveFailedPods")
    min_age = f.integer("minPodLifetimeSeconds", minimum=0, maximum=UINT_MAX, default=3600)
    kinds = f.str_list("excludeOwnerKinds", non_empty_items=True) or ()
    reasons = f.str_list("reasons", non_empty_items=True) or ()
    exit_codes = f.int_list("exitCodes") or ()
    init = f.boolean("includingInitContainers")
    namespaces = f.namespaces()
    selector = f.label_selector()
    return _done(f, errors, lambda: RemoveFailedPodsArgs(
        min_pod_lifetime_seconds=min_age, exclude_owner_kinds=kinds, reasons=reasons, exit_codes=exit_codes,
        including_init_containers=init, namespaces=namespaces, label_selector=selector))

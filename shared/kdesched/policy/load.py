"""Load a policy file of any supported format into one validated, defaulted :class:`Policy`.

Why: every later layer trusts the Policy it gets; all checking happens here, once, and every
problem is reported together (:class:`PolicyError`). Formats, told apart by ``apiVersion``/``kind``:

* ``descheduler/v1alpha2`` ``DeschedulerPolicy`` — upstream's format, decoded strictly;
* ``descheduler/v1alpha1`` ``DeschedulerPolicy`` — converted as upstream v0.27-v0.30 did
  (:mod:`kdesched.policy.v1alpha1`);
* either of them wrapped in a ``v1`` ``ConfigMap`` under ``data: {policy.yaml: ...}`` (the way the
  upstream manifests and operators store it);
* ``kdesched.dev/v1alpha1`` ``Profiles`` and ``operator.openshift.io/v1`` ``KubeDescheduler``:
  the OpenShift operator's profile presets (:mod:`kdesched.policy.presets`);
* Deckhouse descheduler module values (no ``apiVersion``, its boolean switches) and its
  ``deckhouse.io/v1alpha1`` ``ModuleConfig`` (:mod:`kdesched.policy.deckhouse`).

Deliberate differences from upstream (v1alpha2):

* Upstream fails profile creation when an enabled plugin has no ``pluginConfig`` entry.
  kdesched builds default args for plugins whose args are all optional (e.g. RemoveDuplicates,
  RemovePodsViolatingNodeTaints) — what a reader of such a policy expects — and reports an
  error only for plugins with required args (LowNodeUtilization and HighNodeUtilization
  thresholds, RemovePodsViolatingNodeAffinity ``nodeAffinityType``,
  RemovePodsHavingTooManyRestarts ``podRestartThreshold``, PodLifeTime's criteria).
* The deprecated ``metricsCollector: {enabled: true}`` is kept as a ``KubernetesMetrics``
  entry of ``metricsProviders`` (what it means upstream), so ``policy convert`` writes the
  current form.
* ``presort``/``sort`` extension points are accepted and ignored (upstream never runs them);
  ``disabled`` lists are accepted and ignored, as upstream does.
* A YAML mapping with a duplicate key is an error (upstream's strict decoder rejects it; PyYAML
  would silently keep the last value).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

import yaml

from kdesched.model.errors import ModelError
from kdesched.model.files import (
    MAX_POLICY_BYTES,
    InputRefused,
    read_file_bytes,
    read_stdin,
    refuse_duplicate_keys,
)
from kdesched.model.selectors import parse_selector
from kdesched.model.validate import DuplicateKey, object_pairs
from kdesched.policy import v1alpha1
from kdesched.policy.args import INT32_MAX, SYSTEM_CRITICAL_PRIORITY, UINT_MAX, Fields, show
from kdesched.policy.errors import PolicyError
from kdesched.policy.plugins import PLUGINS, parse_plugin_args
from kdesched.policy.types import (
    EXTENSION_POINTS,
    DefaultEvictorArgs,
    MetricsProvider,
    Policy,
    PriorityThreshold,
    Profile,
)

if TYPE_CHECKING:  # rendered only for --profile: loaded when used
    from kdesched.policy.presets import PresetCustomizations

log = logging.getLogger("kdesched.policy")

V1ALPHA2 = "descheduler/v1alpha2"
V1ALPHA1 = v1alpha1.API_VERSION
KIND = "DeschedulerPolicy"
CONFIGMAP_KEY = "policy.yaml"

TOP_LEVEL_FIELDS = (
    "apiVersion", "kind", "profiles", "nodeSelector", "maxNoOfPodsToEvictPerNode",
    "maxNoOfPodsToEvictPerNamespace", "maxNoOfPodsToEvictTotal", "evictionFailureEventNotification",
    "gracePeriodSeconds", "metricsCollector", "metricsProviders", "kdesched",
)
UNUSED_EXTENSION_POINTS = ("presort", "sort")
# top-level fields ``policy convert`` writes back as written when they equal their defaults
WRITTEN_TOP_LEVEL = ("nodeSelector", "maxNoOfPodsToEvictPerNode", "maxNoOfPodsToEvictPerNamespace",
                     "maxNoOfPodsToEvictTotal", "evictionFailureEventNotification", "gracePeriodSeconds",
                     "metricsProviders", "kdesched")

BlockCheck = Callable[[Any, Policy | None], list[str]]
"""Validates the raw ``kdesched:`` block: ``(block, policy)`` -> one message per problem.

The block's rules (settle windows, rate limits, the event map...) live in the reactor, a layer
above this one, so the caller passes them in. ``policy`` is the loaded policy when everything else
is valid, or None when other fields already failed: the block is checked either way, so that one
report holds the plugin errors and the ``kdesched:`` errors together."""

_BLOCK_CHECK: ContextVar[BlockCheck | None] = ContextVar("kdesched_block_check", default=None)
METRICS_SOURCES = ("KubernetesMetrics", "Prometheus")


# --------------------------------------------------------------------------- YAML reading

class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys in a mapping, and reads the plain scalars ``y``, ``Y``,
    ``n`` and ``N`` as booleans, as the upstream descheduler's decoder does (sigs.k8s.io/yaml on
    go-yaml v2, YAML 1.1): PyYAML reads them as strings, so ``nodeFit: y`` was refused here and ran
    upstream, and ``matchLabels: {pick: n}`` ran here and was refused upstream. Quote them
    (``"y"``) for the string, in both."""

    bool_values: ClassVar[dict[str, bool]] = {**yaml.SafeLoader.bool_values, "y": True, "n": False}


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    refuse_duplicate_keys(loader, node, deep, show)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))


def parse_yaml(text: str, source: str) -> Any:
    """The one YAML (or JSON) document in ``text``; :class:`PolicyError` if there is not exactly one."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except yaml.YAMLError as exc:
        try:  # JSON that YAML does not take (e.g. tabs); a key twice stays refused (DuplicateKey)
            docs = [json.loads(text, object_pairs_hook=object_pairs)]
        except DuplicateKey as dup:
            raise PolicyError([f"not valid JSON: {dup}"], source) from None
        except (ValueError, RecursionError):
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise PolicyError([f"not valid YAML or JSON: {problem}{where}"], source) from None
    except (ValueError, RecursionError) as exc:
        raise PolicyError([f"not valid YAML: {exc}"], source) from None
    if not docs:
        raise PolicyError(["the file is empty; expected a DeschedulerPolicy"], source)
    if len(docs) > 1:
        if all(looks_like_snapshot(d) for d in docs):
            raise PolicyError([SNAPSHOT_NOT_POLICY], source)
        raise PolicyError([f"holds {len(docs)} YAML documents; a policy file holds exactly one"], source)
    return docs[0]


SNAPSHOT_KINDS = ("Node", "Pod", "PodDisruptionBudget", "PriorityClass", "Namespace", "PersistentVolumeClaim")
SNAPSHOT_NOT_POLICY = ("this looks like a cluster snapshot (Kubernetes objects such as Nodes and Pods), not a "
                       "policy: give it as CLUSTER (kdesched simulate CLUSTER --policy POLICY)")


def looks_like_snapshot(doc: Any) -> bool:
    """Whether ``doc`` is a cluster object or a List of them (what ``kubectl get -o yaml`` writes)."""
    if not isinstance(doc, Mapping):
        return False
    kind = doc.get("kind")
    if kind in SNAPSHOT_KINDS and "apiVersion" in doc:
        return True
    return isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list)


def load_policy(path: str, check_block: BlockCheck | None = None) -> Policy:
    """Load the policy file at ``path`` (``-`` reads standard input); ``check_block`` also
    validates the ``kdesched:`` block (see :data:`BlockCheck`)."""
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            text = read_stdin(MAX_POLICY_BYTES)
        else:  # a FIFO, a device (--policy /dev/zero) or a file over the limit is refused unread
            text = read_file_bytes(path, MAX_POLICY_BYTES).decode("utf-8")
    except ModelError as exc:
        raise PolicyError([exc.message], source) from None
    except InputRefused as exc:
        raise PolicyError([str(exc)], source) from None
    except IsADirectoryError:
        raise PolicyError(["is a directory, expected a policy file (YAML or JSON)"], source) from None
    except OSError as exc:
        raise PolicyError([f"cannot read the policy file: {exc.strerror or exc}"], source) from None
    except UnicodeDecodeError as exc:
        raise PolicyError([f"not a UTF-8 text file: invalid byte at offset {exc.start}"], source) from None
    return load_policy_text(text, source, check_block)


def load_policy_text(text: str, source: str, check_block: BlockCheck | None = None) -> Policy:
    """Load a policy from its YAML/JSON ``text``; ``source`` names it in messages."""
    return policy_from_mapping(parse_yaml(text, source), source, check_block)


# --------------------------------------------------------------------------- dispatch

def policy_from_mapping(doc: Any, source: str, check_block: BlockCheck | None = None) -> Policy:
    """Validate a parsed policy document of any supported format into a :class:`Policy`."""
    errors: list[str] = []
    token = _BLOCK_CHECK.set(check_block)
    try:
        policy = _dispatch(doc, source, errors)
    except RecursionError:
        raise PolicyError(["the document is nested too deeply"], source) from None
    finally:
        _BLOCK_CHECK.reset(token)
    if errors or policy is None:
        raise PolicyError(errors, source)
    return policy


def expand_presets(names: Sequence[str], custom: PresetCustomizations | None = None,
                   namespaces: Collection[str] = ()) -> Policy:
    """The policy for OpenShift profiles ``names`` (the CLI's ``--profile NAME``, repeatable):
    :mod:`kdesched.policy.presets` renders the document, loaded here like any other (here, not
    there: the presets module stays a renderer, and the loader imports it without a circle)."""
    from kdesched.policy.presets import PresetCustomizations, render_presets

    source = "presets " + ", ".join(names) if names else "presets"
    try:
        doc = render_presets(names, custom or PresetCustomizations(), namespaces)
    except PolicyError as exc:
        raise exc.with_source(source) from None
    return policy_from_mapping(doc, source)


def _dispatch(doc: Any, source: str, errors: list[str]) -> Policy | None:
    if not isinstance(doc, Mapping):
        errors.append(f"expected a DeschedulerPolicy object (a YAML map), got {show(doc)}")
        return None
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if looks_like_snapshot(doc):
        errors.append(SNAPSHOT_NOT_POLICY)
        return None
    if kind == "ConfigMap" and api_version in ("v1", None):
        return _from_configmap(doc, source, errors)
    if api_version is None:
        from kdesched.policy import deckhouse

        values = deckhouse.find_values(doc)
        if values is not None:
            return _from_deckhouse(values, source, errors, deckhouse.VALUES_FORMAT)
        errors.append(f"apiVersion: is required ({V1ALPHA2} or {V1ALPHA1})")
        if kind is None:
            errors.append(f"kind: is required ({KIND})")
        return None
    if not isinstance(api_version, str):
        errors.append(f"apiVersion: must be a string, got {show(api_version)}")
        return None
    if (api_version, kind) == ("deckhouse.io/v1alpha1", "ModuleConfig"):
        from kdesched.policy import deckhouse

        values = deckhouse.module_config_values(doc, errors)
        return None if values is None else _from_deckhouse(values, source, errors, deckhouse.API_VERSION)
    if api_version not in (V1ALPHA2, V1ALPHA1):
        from kdesched.policy import presets

        if isinstance(kind, str) and (api_version, kind) in presets.DOCUMENT_KINDS:
            v2doc = presets.document_to_v1alpha2(doc, errors)
            return None if v2doc is None else _v1alpha2(v2doc, errors, {}, source, api_version=api_version)
        errors.append(f"apiVersion: unsupported {show(api_version)} (expected {V1ALPHA2} or {V1ALPHA1})")
        return None
    if kind is None:
        errors.append(f"kind: is required ({KIND})")
        return None
    if kind != KIND:
        errors.append(f"kind: must be {KIND}, got {show(kind)}")
        return None
    if api_version == V1ALPHA1:
        v2doc, labels = _convert_v1alpha1(doc, errors)
        return _v1alpha2(v2doc, errors, labels, source, api_version=V1ALPHA1)
    return _v1alpha2(doc, errors, {}, source, api_version=V1ALPHA2)


def _convert_v1alpha1(doc: Mapping[str, Any], errors: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    return v1alpha1.convert(doc, errors)


def _from_deckhouse(values: tuple[Mapping[str, Any], str], source: str, errors: list[str],
                    detected: str) -> Policy | None:
    """``values`` is ``(settings, field path prefix)`` as ``deckhouse.find_values`` returns it;
    ``detected`` names the format the file really is (``Policy.api_version``)."""
    from kdesched.policy import deckhouse

    converted = deckhouse.to_v1alpha1(values, errors)
    if converted is None:
        return None
    v2doc, labels = _convert_v1alpha1(converted, errors)
    return _v1alpha2(v2doc, errors, labels, source, api_version=detected)


def _from_configmap(doc: Mapping[str, Any], source: str, errors: list[str]) -> Policy | None:
    data = doc.get("data")
    if not isinstance(data, Mapping) or not data:
        errors.append(f"data: a ConfigMap holding a policy needs data.{CONFIGMAP_KEY}")
        return None
    if CONFIGMAP_KEY in data:
        key = CONFIGMAP_KEY
    elif len(data) == 1:
        key = str(next(iter(data)))
    else:
        errors.append(f"data: no {CONFIGMAP_KEY} key (keys: {', '.join(sorted(map(str, data)))})")
        return None
    text = data[key]
    if not isinstance(text, str):
        errors.append(f"data.{key}: must be the policy as a string, got {show(text)}")
        return None
    inner_source = f"{source} (ConfigMap data {key})"
    try:
        inner = parse_yaml(text, inner_source)
    except PolicyError as exc:
        errors.extend(f"data.{key}: {e}" for e in exc.errors)
        return None
    if isinstance(inner, Mapping) and inner.get("kind") == "ConfigMap":
        errors.append(f"data.{key}: holds another ConfigMap; expected a DeschedulerPolicy")
        return None
    return _dispatch(inner, source, errors)


# --------------------------------------------------------------------------- v1alpha2

def _v1alpha2(doc: Mapping[str, Any], errors: list[str], labels: Mapping[str, str], source: str,
              api_version: str) -> Policy | None:
    """Validate a v1alpha2 document; ``labels`` maps profile names to message prefixes."""
    start = len(errors)
    f = Fields(doc, "", errors, what="DeschedulerPolicy")
    f.get("apiVersion")
    f.get("kind")
    node_selector = f.string("nodeSelector")
    if node_selector:
        try:
            parse_selector(node_selector, where="nodeSelector")
        except ModelError as exc:
            errors.append(str(exc))
    per_node = f.integer("maxNoOfPodsToEvictPerNode", minimum=0, maximum=UINT_MAX)
    per_namespace = f.integer("maxNoOfPodsToEvictPerNamespace", minimum=0, maximum=UINT_MAX)
    total = f.integer("maxNoOfPodsToEvictTotal", minimum=0, maximum=UINT_MAX)
    grace = f.integer("gracePeriodSeconds", minimum=0, maximum=2**63 - 1)
    notify = f.boolean("evictionFailureEventNotification")
    collector = False
    mc = f.child("metricsCollector", what="metricsCollector")
    if mc is not None:
        collector = mc.boolean("enabled")
        mc.finish()
        if collector:  # upstream v0.36 still honours it and calls it deprecated
            log.warning("%s: metricsCollector.enabled is deprecated: write metricsProviders: [{source: "
                        "KubernetesMetrics}] (same meaning)", source or "policy")
    providers = _metrics_providers(f, collector)
    kdesched = f.get("kdesched")
    if kdesched is not None and not isinstance(kdesched, Mapping):
        f.error("kdesched", f"must be a map of kdesched settings, got {show(kdesched)}")
        kdesched = None

    profiles: list[Profile] = []
    raw_profiles = f.get("profiles")
    if raw_profiles is not None and not isinstance(raw_profiles, list):
        f.error("profiles", f"must be a list of profiles, got {show(raw_profiles)}")
    else:
        names: set[str] = set()
        for i, raw in enumerate(raw_profiles or ()):
            profile = _profile(raw, i, errors, labels)
            if profile is None:
                continue
            if profile.name in names:
                f.error(f"profiles[{i}].name", f"duplicate profile name {show(profile.name)}")
                continue
            names.add(profile.name)
            profiles.append(profile)
    _check_metrics_sources(profiles, providers, collector, errors, labels)
    f.finish()
    check = _BLOCK_CHECK.get()
    if len(errors) > start:
        if check is not None:
            errors.extend(check(kdesched, None))
        return None
    policy = Policy(
        profiles=tuple(profiles),
        node_selector=node_selector or None,
        max_pods_to_evict_per_node=per_node,
        max_pods_to_evict_per_namespace=per_namespace,
        max_pods_to_evict_total=total,
        grace_period_seconds=grace,
        eviction_failure_event_notification=notify,
        metrics_providers=providers,
        kdesched=dict(kdesched or {}),
        source=source,
        api_version=api_version,
        written={k: v for k, v in doc.items() if k in WRITTEN_TOP_LEVEL},
    )
    if check is not None:
        problems = check(kdesched, policy)
        if problems:
            errors.extend(problems)
            return None
    return policy


def _metrics_providers(f: Fields, collector: bool) -> tuple[MetricsProvider, ...]:
    raw = f.get("metricsProviders")
    out: list[MetricsProvider] = []
    if raw is not None and not isinstance(raw, list):
        f.error("metricsProviders", f"must be a list of {{source, prometheus}}, got {show(raw)}")
        raw = None
    seen: set[str] = set()
    for i, item in enumerate(raw or ()):
        p = Fields(item, f.where, f.errors, prefix=f"metricsProviders[{i}].", what="metricsProvider")
        if not p.ok:
            continue
        source = p.string("source")
        prom = p.child("prometheus", what="prometheus")
        url = namespace = name = ""
        if prom is not None:
            url = prom.string("url")
            token = prom.child("authToken", what="authToken")
            if token is not None:
                ref = token.child("secretReference", what="secretReference")
                if ref is not None:
                    namespace = ref.string("namespace")
                    name = ref.string("name")
                    ref.finish()
                    if not namespace or not name:
                        ref.error_here("needs both namespace and name")
                token.finish()
            prom.finish()
        p.finish()
        if source not in METRICS_SOURCES:
            p.error("source", f"must be one of {', '.join(METRICS_SOURCES)}, got {show(source)}")
            continue
        if source in seen:
            p.error("source", f"{source} is listed more than once")
            continue
        seen.add(source)
        if source == "Prometheus":
            if not url:
                p.error("prometheus.url", "is required for source Prometheus")
                continue
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                p.error("prometheus.url", f"must be an http(s) URL, got {show(url)}")
                continue
        elif prom is not None:
            p.error("prometheus", f"is only used with source Prometheus, not {source}")
            continue
        out.append(MetricsProvider(source=source, prometheus_url=url, secret_namespace=namespace, secret_name=name))
    if collector:
        if "KubernetesMetrics" in seen:
            f.error("metricsCollector", "the deprecated metricsCollector cannot be combined with a "
                    "KubernetesMetrics metricsProvider; keep only the metricsProvider")
        else:
            out.insert(0, MetricsProvider(source="KubernetesMetrics"))
    return tuple(out)


def _check_metrics_sources(profiles: list[Profile], providers: tuple[MetricsProvider, ...], collector: bool,
                           errors: list[str], labels: Mapping[str, str]) -> None:
    """An enabled LowNodeUtilization that balances on usage needs the policy to say where usage
    comes from, as upstream's plugin constructor does (``usageClientForMetrics`` in
    ``pkg/framework/plugins/nodeutilization/lownodeutilization.go``: "metrics client not
    initialized" / "prometheus client not initialized"): KubernetesMetrics (or the deprecated
    ``metricsServer``) needs ``metricsCollector.enabled`` or a KubernetesMetrics
    ``metricsProviders`` entry; Prometheus needs a Prometheus entry (its URL)."""
    sources = {p.source for p in providers}
    for profile in profiles:
        if "LowNodeUtilization" not in profile.balance:
            continue
        args = profile.plugin_args.get("LowNodeUtilization")
        metrics = getattr(args, "metrics_utilization", None)
        if metrics is None:
            continue
        label = labels.get(profile.name) or f'profile "{profile.name}"'
        where = f"{label} / plugin LowNodeUtilization: metricsUtilization"
        if metrics.source == "Prometheus" and "Prometheus" not in sources:
            errors.append(f"{where}.source: Prometheus needs a metricsProviders entry with source: Prometheus "
                          "and prometheus.url (the server to query)")
        elif (metrics.source == "KubernetesMetrics" or metrics.metrics_server) and not (
                collector or "KubernetesMetrics" in sources):
            field = "source" if metrics.source else "metricsServer"
            errors.append(f"{where}.{field}: KubernetesMetrics needs a metricsProviders entry with source: "
                          "KubernetesMetrics (or the deprecated metricsCollector.enabled: true)")


def _profile(raw: Any, index: int, errors: list[str], labels: Mapping[str, str]) -> Profile | None:
    start = len(errors)
    head = Fields(raw, "", errors, prefix=f"profiles[{index}].", what="profile")
    if not head.ok:
        return None
    name = head.raw.get("name")
    if not isinstance(name, str) or not name:
        head.error("name", f"is required: a non-empty string, got {show(name)}")
        return None
    label = labels.get(name) or f'profile "{name}"'
    p = Fields(raw, label, errors, what="profile")
    p.get("name")

    # pluginConfig
    configs: dict[str, Any] = {}
    written: dict[str, Mapping[str, Any]] = {}
    raw_configs = p.get("pluginConfig")
    if raw_configs is not None and not isinstance(raw_configs, list):
        p.error("pluginConfig", f"must be a list of {{name, args}}, got {show(raw_configs)}")
        raw_configs = None
    for i, item in enumerate(raw_configs or ()):
        c = Fields(item, label, errors, prefix=f"pluginConfig[{i}].", what="pluginConfig entry")
        if not c.ok:
            continue
        plugin = c.string("name")
        raw_args = c.get("args")
        c.finish()
        if not plugin:
            c.error("name", "is required: the plugin these args are for")
            continue
        if plugin not in PLUGINS:
            c.error("name", f"unknown plugin {show(plugin)} (known: {', '.join(PLUGINS)})")
            continue
        if plugin in configs:
            c.error("name", f"duplicate pluginConfig for {plugin}")
            continue
        args, problems = parse_plugin_args(plugin, raw_args, f"{label} / plugin {plugin}")
        errors.extend(problems)
        configs[plugin] = args
        if isinstance(raw_args, Mapping):
            written[plugin] = raw_args

    # plugins
    enabled: dict[str, tuple[str, ...]] = {point: () for point in EXTENSION_POINTS}
    plugins = p.child("plugins", what="plugins")
    if plugins is not None:
        for point in (*EXTENSION_POINTS, *UNUSED_EXTENSION_POINTS):
            section = plugins.child(point, what=f"plugins.{point}")
            if section is None:
                continue
            names = section.str_list("enabled") or ()
            section.str_list("disabled")  # accepted and ignored, as upstream
            section.finish()
            if point in UNUSED_EXTENSION_POINTS:
                continue
            accepted: list[str] = []
            for i, plugin in enumerate(names):
                at = f"{point}.enabled[{i}]"
                info = PLUGINS.get(plugin)
                if info is None:
                    plugins.error(at, f"unknown plugin {show(plugin)} (known: {', '.join(PLUGINS)})")
                elif point not in info.extension_points:
                    plugins.error(at, f"{plugin} does not implement {point} "
                                  f"(it runs at {', '.join(sorted(info.extension_points))})")
                elif plugin in accepted:
                    plugins.error(at, f"{plugin} is enabled twice")
                else:
                    accepted.append(plugin)
            enabled[point] = tuple(accepted)
        plugins.finish()
    p.finish()

    for point in ("deschedule", "balance"):
        for i, plugin in enumerate(enabled[point]):
            if plugin in configs:
                continue
            info = PLUGINS[plugin]
            if info.required_args:
                p.error(f"plugins.{point}.enabled[{i}]", f"{plugin} needs a pluginConfig entry: {info.requirement()}")
                continue
            args, problems = parse_plugin_args(plugin, None, f"{label} / plugin {plugin}")
            errors.extend(problems)
            configs[plugin] = args
    if len(errors) > start:
        return None
    if "DefaultEvictor" not in configs:
        evictor, problems = parse_plugin_args("DefaultEvictor", None, f"{label} / plugin DefaultEvictor")
        errors.extend(problems)
        configs = {"DefaultEvictor": evictor, **configs}
    else:
        configs = {"DefaultEvictor": configs.pop("DefaultEvictor"), **configs}
    return Profile(
        name=name,
        plugin_args=configs,
        deschedule=enabled["deschedule"],
        balance=enabled["balance"],
        filter=("DefaultEvictor",),
        pre_eviction_filter=("DefaultEvictor",),
        written_args=written,
    )


# --------------------------------------------------------------------------- priority classes

def resolve_priority_thresholds(policy: Policy, priority_classes: Mapping[str, int]) -> Policy:
    """Replace every DefaultEvictor ``priorityThreshold.name`` by that PriorityClass's value.

    Upstream resolves the name once, when the policy is loaded; kdesched does it when the
    cluster's PriorityClasses are known (a snapshot or the live API). A missing class, or one
    above system-critical, is a :class:`PolicyError` naming the profile and the class.
    """
    errors: list[str] = []
    profiles: list[Profile] = []
    for profile in policy.profiles:
        evictor = profile.plugin_args.get("DefaultEvictor")
        if not isinstance(evictor, DefaultEvictorArgs) or evictor.priority_threshold is None \
                or not evictor.priority_threshold.name:
            profiles.append(profile)
            continue
        name = evictor.priority_threshold.name
        where = f'profile "{profile.name}" / plugin DefaultEvictor: priorityThreshold.name'
        if name not in priority_classes:
            errors.append(f"{where}: PriorityClass {show(name)} does not exist")
            continue
        value = priority_classes[name]
        if value > SYSTEM_CRITICAL_PRIORITY or value > INT32_MAX:
            errors.append(f"{where}: PriorityClass {show(name)} has value {value}, above the maximum "
                          f"{SYSTEM_CRITICAL_PRIORITY} (system-critical)")
            continue
        resolved = replace(evictor, priority_threshold=PriorityThreshold(value=value))
        profiles.append(replace(profile, plugin_args={**profile.plugin_args, "DefaultEvictor": resolved}))
    if errors:
        raise PolicyError(errors, policy.source)
    return replace(policy, profiles=tuple(profiles))

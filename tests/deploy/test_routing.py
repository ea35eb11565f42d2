"""The Knative wiring is complete and consistent: every event reaches the function that handles it.

Why: a Trigger that filters on a misspelt type, a function without a Trigger, or a Trigger whose
subscriber is missing all apply cleanly and then silently drop events. These tests tie the
manifests to one table of which function handles which CloudEvent types (kept here, and
cross-checked against kdesched_functions.FUNCTION_EVENT_TYPES, the registry of functions),
and check the Knative webhook rules that the CRD schemas do not express (Trigger filter dialects,
read-only ConfigMap mounts, reserved env names, timeouts, autoscaling annotations), plus the
decisions documented in the manifests' comments (delivery timeout == timeoutSeconds, the
dry-run switch first in env, the audit path, the sweep's extension).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deploy import (
    NAMESPACE,
    Doc,
    all_manifest_docs,
    by_kind,
    env_map,
    find,
    install,
    knative_services,
    main_container,
)

APISERVER = ("dev.knative.apiserver.resource.add", "dev.knative.apiserver.resource.update",
             "dev.knative.apiserver.resource.delete")
PING = "dev.knative.sources.ping"
RUN_COMPLETED = "dev.kdesched.run.completed"

# function -> the CloudEvent types a Trigger routes to it (docs/reactor.md's event table).
FUNCTION_TYPES: dict[str, frozenset[str]] = {
    "classifier": frozenset(APISERVER),
    "rebalance": frozenset({"dev.kdesched.node.added", "dev.kdesched.node.ready"}),
    "taints": frozenset({"dev.kdesched.node.taints.changed"}),
    "affinity": frozenset({"dev.kdesched.node.labels.changed"}),
    "manual": frozenset({"dev.kdesched.run.requested", PING}),
    # the dead-letter sink also receives any event that failed elsewhere (broker/Trigger
    # deadLetterSink, no Trigger); the only type routed to it by a Trigger is the run report
    "deadletter": frozenset({RUN_COMPLETED}),
}
ORIGIN = ("kdeschedorigin", "nodes")   # ApiServerSource ceOverrides -> classifier Trigger
SWEEP = ("kdeschedsweep", "true")      # PingSource ceOverrides -> manual-sweep Trigger

KNATIVE = install("knative")
TRIGGERS = by_kind(KNATIVE, "Trigger")
SERVICES = knative_services(KNATIVE)
ATTRIBUTE_NAME = re.compile(r"^[a-z][a-z0-9]*$")          # knative/eventing trigger_validation.go
EXTENSION_NAME = re.compile(r"^[a-z0-9]{1,20}$")          # CloudEvents: lowercase alphanumerics
DURATION = re.compile(r"^PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?$")
RESERVED_ENV = {"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"}
DIALECTS = ("exact", "prefix", "suffix", "all", "any", "not", "cesql")


def seconds(duration: str) -> float:
    m = DURATION.match(duration)
    assert m and any(m.groups()), f"not an ISO-8601 duration Knative accepts: {duration!r}"
    h, mi, s = m.groups()
    return int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)


def walk_filters(filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for f in filters:
        yield f
        for key in ("all", "any"):
            yield from walk_filters(f.get(key, []))
        if "not" in f:
            yield from walk_filters([f["not"]])


def routed_types(trigger: Doc) -> set[str]:
    """The `type` values a Trigger admits: exact type filters at top level (ANDed, so at most one
    may name a type) or alternatives of an `any` at top level."""
    out: set[str] = set()
    for f in trigger.obj["spec"]["filters"]:
        if "type" in f.get("exact", {}):
            out.add(f["exact"]["type"])
        for alt in f.get("any", []):
            if "type" in alt.get("exact", {}):
                out.add(alt["exact"]["type"])
    return out


def required_exact(trigger: Doc) -> dict[str, str]:
    """Top-level exact filters other than type: attributes every routed event must carry."""
    return {k: v for f in trigger.obj["spec"]["filters"] for k, v in f.get("exact", {}).items() if k != "type"}


def subscriber(trigger: Doc) -> str:
    ref = trigger.obj["spec"]["subscriber"]["ref"]
    assert (ref["apiVersion"], ref["kind"]) == ("serving.knative.dev/v1", "Service"), trigger.label
    return str(ref["name"])


def function_of(svc: Doc) -> str:
    container = main_container(svc)
    assert container.get("command") == ["kdesched"], f"{svc.label}: command must be [kdesched]"
    args = container.get("args", [])
    assert len(args) == 2 and args[0] == "function", f"{svc.label}: args must be [function, NAME], got {args}"
    return str(args[1])


# -- routing table -------------------------------------------------------------------------------

def test_every_function_has_a_service_running_it() -> None:
    assert {function_of(s) for s in SERVICES} == set(FUNCTION_TYPES)
    for svc in SERVICES:
        assert svc.name == function_of(svc), f"{svc.label}: Service name and function differ"


@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda d: d.name)
def test_trigger_routes_only_types_its_subscriber_handles(trigger: Doc) -> None:
    types = routed_types(trigger)
    assert types, f"{trigger.label}: no exact `type` filter"
    fn = subscriber(trigger)
    assert fn in FUNCTION_TYPES, f"{trigger.label}: subscriber {fn} is not a kdesched function"
    assert types <= FUNCTION_TYPES[fn], f"{trigger.label}: {sorted(types - FUNCTION_TYPES[fn])} not handled by {fn}"


@pytest.mark.parametrize(("function", "event_type"),
                         sorted((f, t) for f, ts in FUNCTION_TYPES.items() for t in ts))
def test_every_handled_type_has_a_trigger(function: str, event_type: str) -> None:
    hits = [t for t in TRIGGERS if subscriber(t) == function and event_type in routed_types(t)]
    assert len(hits) == 1, f"{event_type} -> {function}: expected one Trigger, found {[t.name for t in hits]}"


def test_routing_table_matches_the_reactor() -> None:
    from kdesched_functions import FUNCTION_EVENT_TYPES

    code = {name: frozenset(types) for name, types in FUNCTION_EVENT_TYPES.items()}
    assert set(code) == set(FUNCTION_TYPES)
    for name, types in FUNCTION_TYPES.items():
        if name == "deadletter":
            # it accepts every type (dead letters); what a Trigger routes to it must be among them,
            # and everything else it accepts must be routed to some other function
            assert types <= code[name]
            others = set().union(*(t for n, t in FUNCTION_TYPES.items() if n != "deadletter"))
            assert code[name] - types <= others
        else:
            assert code[name] == types, f"{name}: manifests route {sorted(types)}, code handles {sorted(code[name])}"


def test_raw_node_events_are_filtered_on_the_origin_extension() -> None:
    source = find(KNATIVE, "ApiServerSource", "kdesched-nodes")
    assert source.obj["spec"]["ceOverrides"]["extensions"].get(ORIGIN[0]) == ORIGIN[1]
    assert [r["kind"] for r in source.obj["spec"]["resources"]] == ["Node"]
    assert source.obj["spec"]["mode"] == "Resource"  # the classifier diffs the object in the event
    for trigger in TRIGGERS:
        if routed_types(trigger) & set(APISERVER):
            assert required_exact(trigger).get(ORIGIN[0]) == ORIGIN[1], trigger.label


def test_sweep_is_routed_by_ping_type_and_extension() -> None:
    ping = find(KNATIVE, "PingSource", "kdesched-sweep")
    assert ping.obj["spec"]["ceOverrides"]["extensions"] == {SWEEP[0]: SWEEP[1]}
    assert json.loads(ping.obj["spec"]["data"]) == {"dryRun": False}
    assert ping.obj["spec"]["contentType"] == "application/json"
    sweep = [t for t in TRIGGERS if PING in routed_types(t)]
    assert len(sweep) == 1 and required_exact(sweep[0]) == {SWEEP[0]: SWEEP[1]}
    assert subscriber(sweep[0]) == "manual"


def test_run_reports_are_audited_once_without_a_loop() -> None:
    audit = [t for t in TRIGGERS if RUN_COMPLETED in routed_types(t)]
    assert [t.name for t in audit] == ["audit"] and subscriber(audit[0]) == "deadletter"
    # loop guard: a report emitted by the logger itself is not sent back to it
    assert {"not": {"suffix": {"source": "/deadletter"}}} in audit[0].obj["spec"]["filters"]


# -- Knative webhook rules the CRD schemas do not express ----------------------------------------

@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda d: d.name)
def test_trigger_filters_pass_the_knative_webhook(trigger: Doc) -> None:
    spec = trigger.obj["spec"]
    assert spec["broker"] == "kdesched"
    assert "filter" not in spec, "use `filters` only (legacy `filter` is ignored when both are set)"
    for f in walk_filters(spec["filters"]):
        dialects = [k for k in DIALECTS if f.get(k) not in (None, {}, [], "")]
        assert len(dialects) == 1, f"{trigger.label}: one dialect per filter, found {dialects} in {f}"
        assert set(f) == set(dialects), f"{trigger.label}: unknown keys in {f}"
        for key in ("exact", "prefix", "suffix"):
            if key in f:
                assert len(f[key]) == 1, f"{trigger.label}: {key} takes exactly one attribute: {f[key]}"
                (attr, value), = f[key].items()
                assert ATTRIBUTE_NAME.match(attr) and isinstance(value, str) and value, f"{trigger.label}: {f}"


@pytest.mark.parametrize("doc", by_kind(KNATIVE, "ApiServerSource") + by_kind(KNATIVE, "PingSource"),
                         ids=lambda d: d.label)
def test_source_extensions_are_valid_cloudevents_attribute_names(doc: Doc) -> None:
    for name, value in doc.obj["spec"]["ceOverrides"]["extensions"].items():
        assert EXTENSION_NAME.match(name), f"{doc.label}: extension {name!r} must be lowercase alphanumeric"
        assert isinstance(value, str)


def test_ping_schedule_is_a_cron_knative_accepts() -> None:
    schedule = find(KNATIVE, "PingSource", "kdesched-sweep").obj["spec"]["schedule"]
    assert "@every" not in schedule
    assert schedule.startswith("@") or len(schedule.split()) in (5, 6), schedule


@pytest.mark.parametrize("doc", by_kind(KNATIVE, "Broker") + TRIGGERS, ids=lambda d: d.label)
def test_delivery_spec(doc: Doc) -> None:
    delivery = doc.obj["spec"]["delivery"]
    assert isinstance(delivery["retry"], int) and delivery["retry"] >= 1
    assert delivery["backoffPolicy"] == "exponential"
    assert seconds(delivery["backoffDelay"]) > 0
    if doc.kind == "Trigger":
        assert seconds(delivery["timeout"]) > 0
    if doc.name != "audit":  # the audit logger is the dead-letter sink itself
        assert delivery["deadLetterSink"]["ref"]["name"] == "deadletter", doc.label


@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda d: d.name)
def test_delivery_timeout_equals_the_subscriber_timeout(trigger: Doc) -> None:
    """services.yaml: the broker waits exactly as long as Knative lets the request run."""
    svc = find(SERVICES, "Service", subscriber(trigger))
    assert seconds(trigger.obj["spec"]["delivery"]["timeout"]) == svc.obj["spec"]["template"]["spec"]["timeoutSeconds"]


@pytest.mark.parametrize("svc", SERVICES, ids=lambda d: d.name)
def test_service_passes_the_knative_webhook(svc: Doc) -> None:
    spec = svc.obj["spec"]["template"]["spec"]
    assert 0 < spec["timeoutSeconds"] <= 600, "default max-revision-timeout-seconds is 600"
    assert isinstance(spec["containerConcurrency"], int) and 0 <= spec["containerConcurrency"] <= 1000
    container = main_container(svc)
    assert len(container.get("ports", [])) == 1 and container["ports"][0]["containerPort"] == 8080
    assert not RESERVED_ENV & set(env_map(container)), "PORT and K_* are set by Knative"
    mounts = container.get("volumeMounts", [])
    assert mounts and all(m.get("readOnly") is True for m in mounts), "ConfigMap mounts must be readOnly"
    for probe in ("readinessProbe", "livenessProbe"):
        assert "port" not in container[probe]["httpGet"], "Knative probes the serving port"
    for gated in ("affinity", "tolerations", "nodeSelector", "securityContext", "priorityClassName",
                  "initContainers"):
        assert gated not in spec, f"{gated} needs a Knative feature flag (kubernetes.podspec-*)"
    assert all("valueFrom" not in e for e in container.get("env", [])), "fieldRef needs a feature flag"


@pytest.mark.parametrize("svc", SERVICES, ids=lambda d: d.name)
def test_the_function_takes_as_many_events_at_once_as_knative_sends(svc: Doc) -> None:
    """KDESCHED_CONCURRENCY (the app's event slots and the HTTP server's threads, kdesched.httpserver)
    is the Service's containerConcurrency: fewer would answer 503 to events queue-proxy let through,
    more would let a run's slots be taken by requests that bypass it."""
    spec = svc.obj["spec"]["template"]["spec"]
    env = env_map(main_container(svc))
    assert int(env["KDESCHED_CONCURRENCY"]) == spec["containerConcurrency"] >= 1, svc.name


def scale(svc: Doc) -> tuple[int, int, int]:
    ann = svc.obj["spec"]["template"]["metadata"]["annotations"]
    spec = svc.obj["spec"]["template"]["spec"]
    return (int(ann["autoscaling.knative.dev/min-scale"]), int(ann["autoscaling.knative.dev/max-scale"]),
            spec["containerConcurrency"])


@pytest.mark.parametrize(("function", "expected"), [
    ("classifier", (1, 1, 1)),   # per-node state: exactly one instance, one event at a time
    ("rebalance", (0, 1, 1)),    # balance runs: serialised (and the Lease)
    ("manual", (0, 1, 1)),       # balance runs: serialised (and the Lease)
    ("taints", (0, 1, 1)),       # node-scoped: duplicates of one node's event run one after the other
    ("affinity", (0, 1, 1)),
    ("deadletter", (1, 3, 10)),  # stateless logger, a pod kept for `kubectl logs`
])
def test_scale_and_concurrency(function: str, expected: tuple[int, int, int]) -> None:
    assert scale(find(SERVICES, "Service", function)) == expected


@pytest.mark.parametrize("svc", SERVICES, ids=lambda d: d.name)
def test_service_common_settings(svc: Doc) -> None:
    assert svc.obj["metadata"]["labels"]["networking.knative.dev/visibility"] == "cluster-local"
    container = main_container(svc)
    env = container["env"]
    assert env[0] == {"name": "KDESCHED_DRY_RUN", "value": "false"}, "dry-run switch must be env[0] (dry-run overlay)"
    values = env_map(container)
    assert values["KDESCHED_POLICY"] == "/etc/kdesched/policy.yaml"
    assert (values["KDESCHED_LEASE_NAME"], values["KDESCHED_LEASE_NAMESPACE"]) == ("kdesched", NAMESPACE)
    assert values["LOG_FORMAT"] in ("json", "text")
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][bound]), f"{svc.label}: resources.{bound}"
    sc = container["securityContext"]
    assert (sc["runAsNonRoot"], sc["allowPrivilegeEscalation"], sc["readOnlyRootFilesystem"]) == (True, False, True)
    assert sc["capabilities"]["drop"] == ["ALL"]


def test_classifier_posts_extra_events_to_the_broker_ingress() -> None:
    url = env_map(main_container(find(SERVICES, "Service", "classifier")))["KDESCHED_BROKER_URL"]
    assert url == f"http://broker-ingress.knative-eventing.svc.cluster.local/{NAMESPACE}/kdesched"


# -- references between objects ------------------------------------------------------------------

def refs(doc: Doc) -> Iterator[dict[str, Any]]:
    spec = doc.obj["spec"]
    for key in ("sink", "subscriber"):
        if key in spec:
            yield spec[key]["ref"]
    if "delivery" in spec and "deadLetterSink" in spec["delivery"]:
        yield spec["delivery"]["deadLetterSink"]["ref"]


@pytest.mark.parametrize("doc", [d for d in KNATIVE if d.group.endswith("knative.dev") and d.kind != "Service"],
                         ids=lambda d: d.label)
def test_every_reference_resolves(doc: Doc) -> None:
    for ref in refs(doc):
        group = ref["apiVersion"].rpartition("/")[0]
        find(KNATIVE, ref["kind"], ref["name"], group)
        assert ref.get("namespace", NAMESPACE) == NAMESPACE


@pytest.mark.parametrize("install_name", ["knative", "dry-run", "standalone"])
def test_namespaced_objects_live_in_the_kdesched_namespace(install_name: str) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    docs = install(install_name)
    assert find(docs, "Namespace", NAMESPACE)
    for doc in docs:
        assert (doc.namespace is None) == (doc.kind in cluster_scoped), doc.label
        assert doc.namespace in (None, NAMESPACE), doc.label


def test_policy_mount_matches_the_configmap() -> None:
    cm = find(KNATIVE, "ConfigMap", "kdesched-policy")
    assert list(cm.obj["data"]) == ["policy.yaml"]
    for doc in SERVICES + by_kind(install("standalone"), "Deployment"):
        pod = doc.obj["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "kdesched-policy")
        mount = next(m for m in main_container(doc)["volumeMounts"] if m["name"] == volume["name"])
        assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates"
        assert mount["mountPath"] + "/policy.yaml" == "/etc/kdesched/policy.yaml"


def test_manifests_parse_with_identity() -> None:
    docs = all_manifest_docs()
    assert docs
    seen: set[tuple[str, str, str | None, str]] = set()
    for doc in docs:
        assert doc.api_version and doc.kind and doc.name, doc.label
        key = (doc.group, doc.kind, doc.namespace, doc.name)
        assert key not in seen, f"{doc.label} defined twice"
        seen.add(key)

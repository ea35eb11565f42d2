"""Every Knative object under knative/ validates against the openAPIV3Schema of its CRD.

Why: a typo in a Knative manifest (`containerConcurency`, `timeoutSecond: "300"`) is otherwise
found only when `kubectl apply` reaches a cluster with Knative installed, or worse, silently
pruned by the API server. The CRDs are the vendored copy in tests/deploy/schemas/ (its SOURCES.md
names the knative/serving and knative/eventing commits they come from); a development setup that
keeps the same kit in a sibling folder is preferred when present, and both must be identical.

The CRD schemas are turned into strict JSON Schemas: where a schema lists `properties` and does
not say `x-kubernetes-preserve-unknown-fields`, unknown keys are errors (the API server would
prune them; a pruned field is a lost setting). Where Knative preserves unknown fields (the whole
Trigger and ApiServerSource spec, delivery blocks) only the known fields are type-checked; the
webhook rules that matter for these manifests are checked in test_routing.py instead.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy import REPO, Doc, all_manifest_docs

VENDORED = Path(__file__).resolve().parent / "schemas"
SIBLING = REPO.parent / "shared" / "schemas" / "knative"
CRD_FILES = ("service.yaml", "broker.yaml", "trigger.yaml", "apiserversource.yaml", "pingsource.yaml")
KNATIVE_GROUPS = ("serving.knative.dev", "eventing.knative.dev", "sources.knative.dev",
                  "messaging.knative.dev", "flows.knative.dev")


def schema_dir() -> Path:
    return SIBLING if SIBLING.is_dir() else VENDORED


@cache
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(group, kind) -> CRD object, from the preferred schema directory."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for name in CRD_FILES:
        crd = yaml.safe_load((schema_dir() / name).read_text(encoding="utf-8"))
        out[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return out


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes structural schema as a JSON Schema that rejects unknown fields.

    - `x-kubernetes-preserve-unknown-fields: true` keeps the object open;
    - `x-kubernetes-int-or-string` becomes integer|string;
    - `nullable: true` also admits null;
    - an object with `properties` and no `additionalProperties` gets `additionalProperties: false`.
    """
    s = copy.deepcopy(schema)
    if s.get("x-kubernetes-int-or-string"):
        s.pop("type", None)
        s["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if s.get("nullable") and "type" in s:
        s["type"] = [s["type"], "null"]
    for key in ("properties", "patternProperties"):
        if key in s:
            s[key] = {k: strict(v) for k, v in s[key].items()}
    if isinstance(s.get("items"), dict):
        s["items"] = strict(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = strict(s["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in s:
            s[key] = [strict(x) for x in s[key]]
    if "not" in s:
        s["not"] = strict(s["not"])
    if ("properties" in s and "additionalProperties" not in s
            and not s.get("x-kubernetes-preserve-unknown-fields")):
        s["additionalProperties"] = False
    return s


def validator_for(doc: Doc) -> jsonschema.Draft202012Validator:
    crd = crds()[(doc.group, doc.kind)]
    version = doc.api_version.rpartition("/")[2]
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served")}
    assert version in served, f"{doc.label}: {doc.api_version} is not a served version of {crd['metadata']['name']}"
    root = copy.deepcopy(served[version]["schema"]["openAPIV3Schema"])
    # apiVersion, kind and metadata are always allowed by the API server; some CRDs leave them out
    # of the schema. metadata itself is checked against ObjectMeta in test_core_objects.py.
    props = root.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    props.setdefault("metadata", {"type": "object"})
    return jsonschema.Draft202012Validator(strict(root))


def knative_docs() -> list[Doc]:
    return [d for d in all_manifest_docs() if d.group in KNATIVE_GROUPS]


@pytest.mark.parametrize("name", CRD_FILES)
def test_vendored_crd_is_identical_to_the_reference_kit(name: str) -> None:
    if not SIBLING.is_dir():
        pytest.skip(f"reference kit not found at {SIBLING}; validating with the vendored copy only")
    assert (VENDORED / name).read_bytes() == (SIBLING / name).read_bytes(), (
        f"tests/deploy/schemas/{name} differs from {SIBLING / name}: copy it over unchanged")


def test_every_knative_kind_used_has_a_crd() -> None:
    kinds = {(d.group, d.kind) for d in knative_docs()}
    assert kinds, "no Knative objects found under knative/"
    assert kinds <= set(crds()), f"no CRD schema for {sorted(kinds - set(crds()))}"


@pytest.mark.parametrize("doc", knative_docs(), ids=lambda d: d.label)
def test_knative_object_validates_against_its_crd(doc: Doc) -> None:
    errors = sorted(validator_for(doc).iter_errors(doc.obj), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{doc.label}: {'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


@pytest.mark.parametrize(("kind", "path", "value"), [
    ("Service", ("spec", "template", "spec", "containerConcurency"), 1),          # typo
    ("Service", ("spec", "template", "spec", "timeoutSeconds"), "300"),           # wrong type
    ("Service", ("spec", "template", "spec", "containers", 0, "imagee"), "x"),    # typo in a container
    ("Broker", ("spec", "deliver"), {}),                                          # typo
    ("PingSource", ("spec", "schedul"), "* * * * *"),                             # typo
    ("ApiServerSource", ("spec", "resources", 0, "kind"), 3),                     # wrong type
])
def test_schema_check_catches_mistakes(kind: str, path: tuple[Any, ...], value: Any) -> None:
    """The strict schema is not vacuous: a typical mistake in each kind is reported."""
    doc = next(d for d in knative_docs() if d.kind == kind)
    broken = copy.deepcopy(doc.obj)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert list(validator_for(doc).iter_errors(broken)), f"{kind}: {'.'.join(map(str, path))} not caught"

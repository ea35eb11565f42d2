"""Every core Kubernetes object under knative/ is a valid object of its kind.

Why: a misspelt field in a Deployment or a ClusterRole is accepted by `kubectl apply` with at most
a warning and then silently dropped by the API server, so a probe or a security setting that
looks present is not. Without a cluster, the `kubernetes` client's generated models are the
schema: each object is deserialised into its V1* model (types and required fields are checked by
the model). Deserialisation silently DROPS unknown fields, so the raw object is also walked
against each model's `attribute_map`, recursively: every key must be a field of the model at
that place. The same check covers `metadata` of the Knative objects (their CRD schemas leave it
open) and the pod template metadata of the Knative Services.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client import ApiClient

from tests.deploy import MONITORING_GROUP, Doc, all_manifest_docs, knative_services

_GENERIC = re.compile(r"^(List|Dict|Optional)\[(.*)\]$")


def model_name(doc: Doc) -> str:
    """`apps/v1` Deployment -> V1Deployment; `rbac.authorization.k8s.io/v1` Role -> V1Role."""
    version = doc.api_version.rpartition("/")[2]
    return version[0].upper() + version[1:] + doc.kind


def _element_type(type_name: str) -> str:
    """The model type inside List[...], Dict[str, ...], Optional[...] (or the name itself)."""
    while m := _GENERIC.match(type_name):
        inner = m.group(2)
        type_name = inner.split(",", 1)[1].strip() if m.group(1) == "Dict" else inner
    return type_name


def unknown_fields(data: Any, type_name: str, where: str = "") -> list[str]:
    """Paths of keys in `data` that the model `type_name` (recursively) does not define."""
    model = getattr(kubernetes.client.models, _element_type(type_name), None)
    if model is None or not hasattr(model, "attribute_map"):
        return []  # a primitive, `object` (free-form) or a quantity/int-or-string
    if type_name.startswith("List[") and isinstance(data, list):
        return [p for i, item in enumerate(data) for p in unknown_fields(item, _element_type(type_name), f"{where}[{i}]")]
    if type_name.startswith("Dict[") and isinstance(data, dict):
        return [p for k, v in data.items() for p in unknown_fields(v, _element_type(type_name), f"{where}.{k}")]
    if not isinstance(data, dict):
        return []  # wrong type: the deserialisation reports it
    json_to_attr = {json_name: attr for attr, json_name in model.attribute_map.items()}
    out: list[str] = []
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in json_to_attr:
            out.append(f"{path} (not a field of {model.__name__})")
            continue
        out.extend(unknown_fields(value, model.openapi_types[json_to_attr[key]], path))
    return out


def deserialize(data: Any, type_name: str) -> Any:
    return ApiClient()._ApiClient__deserialize(copy.deepcopy(data), type_name)  # type: ignore[attr-defined]


def core_docs() -> list[Doc]:
    # Knative objects: test_knative_schemas; the PrometheusRule: test_monitoring (and promtool)
    return [d for d in all_manifest_docs() if not d.group.endswith("knative.dev") and d.group != MONITORING_GROUP]


@pytest.mark.parametrize("doc", core_docs(), ids=lambda d: d.label)
def test_core_object_deserializes_into_its_model(doc: Doc) -> None:
    name = model_name(doc)
    assert hasattr(kubernetes.client.models, name), f"{doc.label}: no model {name} for {doc.api_version} {doc.kind}"
    model = deserialize(doc.obj, name)
    assert model is not None and model.metadata.name == doc.name


@pytest.mark.parametrize("doc", core_docs(), ids=lambda d: d.label)
def test_core_object_has_no_unknown_fields(doc: Doc) -> None:
    assert unknown_fields(doc.obj, model_name(doc)) == []


@pytest.mark.parametrize("doc", [d for d in all_manifest_docs() if d.group.endswith("knative.dev")],
                         ids=lambda d: d.label)
def test_knative_object_metadata_is_object_meta(doc: Doc) -> None:
    deserialize(doc.obj["metadata"], "V1ObjectMeta")
    assert unknown_fields(doc.obj["metadata"], "V1ObjectMeta", "metadata") == []


@pytest.mark.parametrize("doc", knative_services(all_manifest_docs()), ids=lambda d: d.label)
def test_knative_revision_template_metadata_is_object_meta(doc: Doc) -> None:
    meta = doc.obj["spec"]["template"]["metadata"]
    deserialize(meta, "V1ObjectMeta")
    assert unknown_fields(meta, "V1ObjectMeta", "spec.template.metadata") == []


@pytest.mark.parametrize(("kind", "mutate", "expected"), [
    ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"][0].update(imagee="x"),
     "spec.template.spec.containers[0].imagee"),
    ("Deployment", lambda o: o["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]
     .update(pth="/x"), "spec.template.spec.containers[0].livenessProbe.httpGet.pth"),
    ("ClusterRole", lambda o: o["rules"][0].update(verb=["get"]), "rules[0].verb"),
    ("ConfigMap", lambda o: o["metadata"].update(label={}), "metadata.label"),
])
def test_unknown_field_check_catches_typos(kind: str, mutate: Any, expected: str) -> None:
    """The walk is not vacuous: a typo at any depth is reported, though deserialisation accepts it."""
    doc = next(d for d in core_docs() if d.kind == kind)
    broken = copy.deepcopy(doc.obj)
    mutate(broken)
    deserialize(broken, model_name(doc))  # silently drops the unknown field...
    assert any(p.startswith(expected) for p in unknown_fields(broken, model_name(doc)))  # ...we do not


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda c: c["ports"][0].update(containerPort="eighty"), "containerPort"),   # wrong type
    (lambda c: c.pop("name"), "name"),                                              # required field
])
def test_deserialization_checks_types_and_required_fields(mutate: Any, expected: str) -> None:
    doc = next(d for d in core_docs() if d.kind == "Deployment")
    broken = copy.deepcopy(doc.obj)
    mutate(broken["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(Exception, match=expected):
        deserialize(broken, model_name(doc))

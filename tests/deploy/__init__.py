"""Shared helpers for the deployment tests: find, load and index the manifests under knative/.

Why: the checks in tests/deploy (schemas, routing, RBAC, kustomize) all need the same view of the
manifests: every YAML document of every file, and the object set each install directory would
create (knative/, knative/dry-run/, knative/standalone/), resolved from the kustomization files
the way kustomize follows `resources`. Keeping that in one place means a new manifest file is
seen by every test at once. No cluster, no kustomize binary needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KNATIVE = REPO / "knative"
KUSTOMIZATION = "kustomization.yaml"

# The directories an operator applies with `kubectl apply -k` (docs/deploying.md, "Deploying on Knative").
INSTALL_DIRS = {
    "knative": KNATIVE,
    "dry-run": KNATIVE / "dry-run",
    "standalone": KNATIVE / "standalone",
}
# Applied on request beside an install: the dashboard and alert rules (they need the Prometheus
# Operator's PrometheusRule CRD, which a cluster may not have; docs/deploying.md, "Monitoring").
OPTIONAL_DIRS = {
    "monitoring": KNATIVE / "monitoring",
}
# API groups whose objects are checked by their own tests, not against the kubernetes client models.
MONITORING_GROUP = "monitoring.coreos.com"

NAMESPACE = "kdesched"
IMAGE_PLACEHOLDER = "kdesched"


@dataclass(frozen=True)
class Doc:
    """One YAML document of a manifest file."""

    path: Path
    index: int
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion", ""))

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def name(self) -> str:
        return str(self.obj.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str | None:
        ns = self.obj.get("metadata", {}).get("namespace")
        return None if ns is None else str(ns)

    @property
    def label(self) -> str:
        """A readable id for test output: ``base/services.yaml#2 Service/manual``."""
        return f"{self.path.relative_to(KNATIVE)}#{self.index} {self.kind}/{self.name}"


def yaml_files() -> list[Path]:
    """Every YAML file under knative/ (kustomization files included), sorted."""
    return sorted(p for p in KNATIVE.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


@cache
def load_file(path: Path) -> tuple[Doc, ...]:
    """The non-empty documents of one file. Raises yaml.YAMLError on a parse error."""
    with path.open(encoding="utf-8") as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    return tuple(Doc(path, i, d) for i, d in enumerate(docs))


def load_kustomization(directory: Path) -> dict[str, Any]:
    data = yaml.safe_load((directory / KUSTOMIZATION).read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{directory / KUSTOMIZATION}: not a mapping"
    return data


def resource_docs(directory: Path, _seen: frozenset[Path] = frozenset()) -> Iterator[Doc]:
    """The objects a kustomization directory creates, following `resources` (files and directories)
    recursively like kustomize does; patches, images and components are not applied (they do not
    add objects here: test_kustomize checks that components hold no resources)."""
    directory = directory.resolve()
    assert directory not in _seen, f"kustomization cycle through {directory}"
    for entry in load_kustomization(directory).get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            yield from resource_docs(target, _seen | {directory})
        else:
            yield from load_file(target)


@cache
def install(name: str) -> tuple[Doc, ...]:
    """The objects `kubectl apply -k` of one install directory creates (see INSTALL_DIRS, OPTIONAL_DIRS)."""
    return tuple(resource_docs({**INSTALL_DIRS, **OPTIONAL_DIRS}[name]))


def all_manifest_docs() -> list[Doc]:
    """Every Kubernetes object document under knative/ (kustomization/component files excluded)."""
    return [d for p in yaml_files() if p.name != KUSTOMIZATION for d in load_file(p)]


def by_kind(docs: tuple[Doc, ...] | list[Doc], kind: str, group: str | None = None) -> list[Doc]:
    return [d for d in docs if d.kind == kind and (group is None or d.group == group)]


def find(docs: tuple[Doc, ...] | list[Doc], kind: str, name: str, group: str | None = None) -> Doc:
    hits = [d for d in by_kind(docs, kind, group) if d.name == name]
    assert len(hits) == 1, f"expected exactly one {kind}/{name}, found {len(hits)}"
    return hits[0]


def knative_services(docs: tuple[Doc, ...] | list[Doc]) -> list[Doc]:
    return by_kind(docs, "Service", "serving.knative.dev")


def main_container(doc: Doc) -> dict[str, Any]:
    """The single container of a Knative Service or Deployment."""
    containers = doc.obj["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{doc.label}: expected one container, found {len(containers)}"
    return containers[0]


def env_map(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or the valueFrom mapping) of a container's env list."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}

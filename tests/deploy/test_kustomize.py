"""`kubectl apply -k knative/` (and knative/dry-run/, knative/standalone/) installs every manifest.

Why: kustomize only applies what a kustomization.yaml lists, so a manifest file added without
listing it is silently never installed, and one listed but deleted breaks the install. These
tests check every YAML file parses, that each kustomization lists exactly the manifest files of
its directory, that the image reference is set in one place, and, when a `kubectl` binary with
its built-in kustomize is available, that the real build produces the objects the other tests
examined, with the image replaced and the dry-run overlay applied.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import (
    IMAGE_PLACEHOLDER,
    INSTALL_DIRS,
    KNATIVE,
    KUSTOMIZATION,
    OPTIONAL_DIRS,
    env_map,
    find,
    install,
    knative_services,
    load_file,
    load_kustomization,
    main_container,
    yaml_files,
)

KUSTOMIZE_DIRS = sorted(p.parent for p in KNATIVE.rglob(KUSTOMIZATION))


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(KNATIVE)))
def test_yaml_file_parses(path: Path) -> None:
    docs = load_file(path)
    assert docs, f"{path}: empty"
    for doc in docs:
        assert isinstance(doc.obj, dict) and doc.obj.get("apiVersion") and doc.obj.get("kind"), doc.label


def test_every_directory_with_yaml_is_a_kustomization() -> None:
    dirs = {p.parent for p in yaml_files()}
    assert dirs == set(KUSTOMIZE_DIRS), f"YAML outside any kustomization: {sorted(map(str, dirs - set(KUSTOMIZE_DIRS)))}"


@pytest.mark.parametrize("directory", KUSTOMIZE_DIRS, ids=lambda p: str(p.relative_to(KNATIVE)) or "knative")
def test_kustomization_lists_every_manifest_of_its_directory(directory: Path) -> None:
    kustomization = load_kustomization(directory)
    listed = kustomization.get("resources", [])
    assert len(listed) == len(set(listed)), f"{directory}: duplicate resources"
    files = {e for e in listed if not (directory / e).is_dir()}
    dirs = {e for e in listed if (directory / e).is_dir()}
    present = {p.name for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.name != KUSTOMIZATION}
    assert files == present, f"{directory}: not listed {sorted(present - files)}, listed but missing {sorted(files - present)}"
    for entry in dirs | set(kustomization.get("components", [])):
        assert (directory / entry / KUSTOMIZATION).is_file(), f"{directory}: {entry} is not a kustomization"


def test_image_is_set_in_one_component_used_by_every_install() -> None:
    component = load_kustomization(KNATIVE / "image")
    assert component["kind"] == "Component" and "resources" not in component
    (image,) = component["images"]
    assert image["name"] == IMAGE_PLACEHOLDER and image["newName"] and image["newTag"]
    for name, directory in INSTALL_DIRS.items():
        components = [(directory / c).resolve() for c in load_kustomization(directory).get("components", [])]
        assert components == [(KNATIVE / "image").resolve()], f"{name}: must include the image component"
    others = [d for d in KUSTOMIZE_DIRS if d.resolve() not in {p.resolve() for p in INSTALL_DIRS.values()}
              and d.name != "image"]
    for directory in others:
        assert "images" not in load_kustomization(directory), f"{directory}: set the image in knative/image only"


@pytest.mark.parametrize("install_name", sorted(INSTALL_DIRS))
def test_every_container_uses_the_image_placeholder(install_name: str) -> None:
    workloads = [d for d in install(install_name) if d.kind in ("Deployment",) or
                 (d.kind == "Service" and d.group == "serving.knative.dev")]
    assert workloads
    for doc in workloads:
        assert main_container(doc)["image"] == IMAGE_PLACEHOLDER, doc.label


def test_installs_cover_every_manifest() -> None:
    installed = {(d.path, d.index) for name in [*INSTALL_DIRS, *OPTIONAL_DIRS] for d in install(name)}
    every = {(p, d.index) for p in yaml_files() if p.name != KUSTOMIZATION for d in load_file(p)}
    assert every == installed, f"never installed: {sorted(str(p) for p, _ in every - installed)}"


# -- the policy ConfigMap -------------------------------------------------------------------------

def policy_text() -> str:
    return str(find(install("knative"), "ConfigMap", "kdesched-policy").obj["data"]["policy.yaml"])


def test_policy_configmap_is_the_packaged_default_policy() -> None:
    load = pytest.importorskip("kdesched.policy.load", reason="kdesched.policy.load not written yet")
    packaged = Path(load.__file__).resolve().parents[1] / "data" / "default-policy.yaml"
    if not packaged.is_file():
        pytest.skip(f"no packaged default policy at {packaged}")
    ours = dataclasses.asdict(load.load_policy_text(policy_text(), "knative/common/policy.yaml"))
    default = dataclasses.asdict(load.load_policy(str(packaged)))
    for key in ("source", "api_version", "written"):  # where it came from, its format and wording differ
        ours.pop(key, None)
        default.pop(key, None)
    for policy in (ours, default):
        for profile in policy["profiles"]:
            profile.pop("written_args", None)  # the args as written: not part of the policy's meaning
    assert ours == default


def test_policy_configmap_validates_with_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    cli = pytest.importorskip("kdesched.cli.main", reason="kdesched.cli.main not written yet")
    path = str(KNATIVE / "common" / "policy.yaml")
    assert cli.main(["policy", "validate", path]) == 0
    assert "valid" in capsys.readouterr().out


# -- the real kustomize build ---------------------------------------------------------------------

def kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with built-in kustomize) not installed: the real build is not checked")
    proc = subprocess.run([kubectl, "kustomize", str(directory)], check=False, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def identity(obj: dict[str, Any]) -> tuple[str, str, str | None, str]:
    return (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])


@pytest.mark.parametrize("install_name", sorted(INSTALL_DIRS))
def test_kustomize_build_produces_the_examined_objects(install_name: str) -> None:
    built = kubectl_kustomize(INSTALL_DIRS[install_name])
    assert sorted(map(identity, built)) == sorted(identity(d.obj) for d in install(install_name))
    image = load_kustomization(KNATIVE / "image")["images"][0]
    expected_image = f"{image['newName']}:{image['newTag']}"
    workloads = [o for o in built if o["kind"] in ("Deployment", "Service") and "template" in o.get("spec", {})]
    assert workloads
    for obj in workloads:
        assert [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]] == [expected_image]


@pytest.mark.parametrize(("install_name", "dry_run"), [("knative", "false"), ("dry-run", "true")])
def test_dry_run_overlay_switches_every_function(install_name: str, dry_run: str) -> None:
    built = kubectl_kustomize(INSTALL_DIRS[install_name])
    services = [o for o in built if o["kind"] == "Service" and o["apiVersion"].startswith("serving.knative.dev/")]
    assert len(services) == len(knative_services(install("knative")))
    for svc in services:
        assert env_map(svc["spec"]["template"]["spec"]["containers"][0])["KDESCHED_DRY_RUN"] == dry_run

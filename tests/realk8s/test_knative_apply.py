"""The knative/ manifests applied for real, with ``kubectl apply --validate=strict``, to an API server
that has the Knative CRDs (the vendored copies in tests/deploy/schemas).

What this adds to the offline schema tests (tests/deploy): the API server's own admission and
validation of every object (RBAC objects, the ConfigMap, the Deployment, the Knative resources
against their CRDs' structural schemas), kustomize's real output, and a second apply that changes
nothing. Knative's own webhooks are not running (no Knative controllers here): what they would
default or reject beyond the CRD schema is not covered.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy import INSTALL_DIRS, REPO
from tests.realk8s.controlplane import ControlPlane

SCHEMAS = REPO / "tests" / "deploy" / "schemas"
pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane) -> Iterator[Path]:
    """The Knative CRDs installed once for this module (reset() leaves CRDs alone)."""
    kc = control_plane.admin_kubeconfig
    files = sorted(SCHEMAS.glob("*.yaml"))
    done = kubectl(kc, "apply", "--validate=strict", *[a for f in files for a in ("-f", str(f))])
    assert done.returncode == 0, done.stderr
    done = kubectl(kc, "wait", "--for", "condition=Established", "--timeout=60s",
                   *[f"crd/{line.split('/', 1)[1].split()[0]}" for line in done.stdout.splitlines()])
    assert done.returncode == 0, done.stderr
    yield kc


def versions(kubeconfig: Path, manifests: str) -> dict[str, str]:
    done = kubectl(kubeconfig, "get", "-f", "-", "-o", "json", stdin=manifests)
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout).get("items") or []
    return {f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}":
            str(o["metadata"]["resourceVersion"]) for o in items}


def rendered(install: str) -> str:
    done = subprocess.run(["kubectl", "kustomize", str(INSTALL_DIRS[install])], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("install", sorted(INSTALL_DIRS))
def test_install_applies_strictly_and_idempotently(install: str, crds: Path) -> None:
    manifests = rendered(install)
    first = kubectl(crds, "apply", "--validate=strict", "-f", "-", stdin=manifests)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("\n") == manifests.count("\nkind: ") + manifests.startswith("kind: ")
    before = versions(crds, manifests)
    second = kubectl(crds, "apply", "--validate=strict", "-f", "-", stdin=manifests)
    assert second.returncode == 0, second.stderr
    # Knative Services report "configured" again: client-side apply replaces a whole list in a
    # merge patch when the live one carries defaults (the CRD schema's); what matters is that
    # the server stored nothing new (every resourceVersion is the same)
    assert versions(crds, manifests) == before
    gone = kubectl(crds, "delete", "--wait=false", "-f", "-", stdin=manifests)
    assert gone.returncode == 0, gone.stderr


def test_strict_validation_refuses_an_unknown_field(crds: Path) -> None:
    # the check above can fail: the same manifests with one misspelt field in a Knative Service
    manifests = rendered("knative").replace("containerConcurrency:", "containerConcurency:", 1)
    done = kubectl(crds, "apply", "--validate=strict", "-f", "-", stdin=manifests)
    assert done.returncode != 0
    assert 'unknown field "containerConcurency"' in done.stderr
    kubectl(crds, "delete", "--wait=false", "--ignore-not-found", "-f", "-", stdin=rendered("knative"))

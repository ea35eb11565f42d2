"""Helpers of the Helm tier: find the real Helm 3 and Helm 4 binaries, render the chart, install it.

Why: the chart (charts/kdesched) is only as good as what `helm` itself makes of it: its template
engine, its schema validation, its lint, its install/upgrade/rollback/uninstall against a real API
server. Nothing here re-implements Helm; every test runs the binaries of the Helm kit (the official
release binaries v3.17.3 and v4.1.4, ``shared/helm`` next to the checkout, see its README), with
Helm's own config, cache and data directories in a temporary directory so a developer's Helm setup
(repositories, plugins) neither leaks in nor gets touched.

Where the binaries are looked for: ``$KDESCHED_HELM_BIN`` (a directory holding ``helm`` (4) and
``helm3``, or a kit with ``unpack.sh``), else the kit ``shared/helm`` next to the repository root,
unpacked by its ``unpack.sh`` (checksums verified) into ``~/.cache/kdesched-helm``.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kdesched"
KIT = REPO.parent / "shared" / "helm"
BIN_ENV = "KDESCHED_HELM_BIN"
REQUIRE_ENV = "KDESCHED_REQUIRE_HELM"
SKIP_REASON = f"Helm tier skipped: set {BIN_ENV} or put the Helm kit at ../shared/helm"
VERSIONS = {"helm3": "v3.17.3", "helm": "v4.1.4"}  # binary name -> the version the kit holds
HELPER_LABELS = ("helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
                 "app.kubernetes.io/version")


def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in VERSIONS)


def find_helm(env: Mapping[str, str] | None = None) -> Path | None:
    """The directory holding ``helm`` and ``helm3``, or None. Raises RuntimeError when a kit is
    there but its unpacking (or checksum check) fails."""
    env = os.environ if env is None else env
    candidates = [Path(env[BIN_ENV]).expanduser()] if env.get(BIN_ENV) else []
    candidates.append(KIT)
    for candidate in candidates:
        if _complete(candidate):
            return candidate
        unpack = candidate / "unpack.sh"
        if unpack.is_file():
            cache_dir = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdesched-helm"
            cache_dir.parent.mkdir(parents=True, exist_ok=True)
            # one unpack at a time: pytest-xdist workers (the fast loop) all look for the kit at start
            with open(cache_dir.parent / ".kdesched-helm.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                done = subprocess.run(["bash", str(unpack), str(cache_dir)], capture_output=True, text=True,
                                      timeout=300, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{unpack} failed: {done.stderr.strip() or done.stdout.strip()}")
            out = Path(done.stdout.strip().splitlines()[-1])
            if _complete(out):
                return out
    return None


@cache
def _helm_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="kdesched-helm-home-"))
    atexit.register(shutil.rmtree, home, True)
    return home


def helm_env(kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment every helm call gets: its own config/cache/data, no developer kubeconfig."""
    home = _helm_home()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    env.update(HELM_CONFIG_HOME=str(home / "config"), HELM_CACHE_HOME=str(home / "cache"),
               HELM_DATA_HOME=str(home / "data"))
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run_helm(bin_dir: Path, binary: str, *args: str, kubeconfig: Path | None = None,
             timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``binary`` (``helm`` = Helm 4, ``helm3`` = Helm 3) with ``args``; never raises on exit status."""
    return subprocess.run([str(bin_dir / binary), *args], capture_output=True, text=True, timeout=timeout,
                          env=helm_env(kubeconfig), check=False)


def values_file(directory: Path, values: Mapping[str, Any], name: str = "values.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(dict(values), sort_keys=False))
    return path


def template(bin_dir: Path, values: Mapping[str, Any] | None = None, *, binary: str = "helm3",
             namespace: str = "kdesched", release: str = "kdesched", args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``helm template`` of the chart: the rendered objects (asserts it succeeded)."""
    done = template_raw(bin_dir, values, binary=binary, namespace=namespace, release=release, args=args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def template_raw(bin_dir: Path, values: Mapping[str, Any] | None = None, *, binary: str = "helm3",
                 namespace: str = "kdesched", release: str = "kdesched",
                 args: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="kdesched-values-") as tmp:
        extra = ["-f", str(values_file(Path(tmp), values))] if values is not None else []
        return run_helm(bin_dir, binary, "template", release, str(CHART), "--namespace", namespace, *extra, *args)


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj["apiVersion"]), str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))


def by_identity(objs: Sequence[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for obj in objs:
        key = identity(obj)
        assert key not in out, f"rendered twice: {key}"
        out[key] = obj
    return out


def find_obj(objs: Sequence[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind}/{name}, found {len(hits)}"
    return hits[0]


def rendered_policy(objs: Sequence[dict[str, Any]]) -> str:
    """The policy file the chart mounts (ConfigMap kdesched-policy, key policy.yaml)."""
    return str(find_obj(objs, "ConfigMap", "kdesched-policy")["data"]["policy.yaml"])

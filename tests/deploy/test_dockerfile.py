"""The Dockerfile builds the one image the manifests run, checked without a Docker engine.

Why: CI has no Docker engine, and an image that cannot start its command is only found in a
cluster. The static tests read the Dockerfile: the base image is pinned to an exact release, the
final stage runs as a non-root numeric user, ships no compilers, is unbuffered, and runs
`kdesched function` by default; .dockerignore lets through everything the Dockerfile copies.
The slow test replays the builder stage's RUN steps in a fresh virtual environment (pip reaches
PyPI; without a network it skips, it does not fail) and runs the final stage's command and every
command the manifests use with --help, and imports every function module the manifests name,
from that installed copy.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy import REPO, find, install, knative_services, main_container

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?$")
BUILD_TOOLS = ("gcc", "g++", "cc1", "build-essential", "make", "clang", "python3-dev", "libc6-dev", "git")
NETWORK_ERRORS = ("Temporary failure in name resolution", "Failed to establish a new connection",
                  "Network is unreachable", "No matching distribution found", "Could not fetch URL",
                  "NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "Name or service not known")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]


def logical_lines(text: str) -> list[str]:
    """Instructions with line continuations joined and comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    assert not pending, "Dockerfile ends in a line continuation"
    return out


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with ${ARG} substituted in FROM."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif instruction == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        else:
            assert stages, f"{instruction} before FROM"
            stages[-1].instructions.append((instruction, rest.strip()))
    return args, stages


def json_array(text: str) -> list[str]:
    import json
    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"use the exec form: {text}"
    return value


ARGS, STAGES = parse(DOCKERFILE.read_text(encoding="utf-8"))
FINAL = STAGES[-1]
BUILDER = next(s for s in STAGES if s.name == "builder")


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for token in shlex.split(args):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def final_command() -> list[str]:
    (entrypoint,) = FINAL.all("ENTRYPOINT")
    (cmd,) = FINAL.all("CMD")
    return json_array(entrypoint) + json_array(cmd)


# -- static checks --------------------------------------------------------------------------------

@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name or "final")
def test_base_image_is_pinned_to_an_exact_release(stage: Stage) -> None:
    assert PINNED_BASE.match(stage.base), f"{stage.base}: pin python:3.11.<patch>-slim-<debian>"


def test_builder_and_final_stage_use_the_same_base() -> None:
    """The venv's interpreter symlink points into the base image: both stages must match."""
    assert len(STAGES) == 2 and BUILDER.base == FINAL.base and FINAL.name is None


def test_final_stage_runs_as_a_non_root_numeric_user() -> None:
    users = FINAL.all("USER")
    assert users, "the final stage must set USER"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) != 0, f"USER {users[-1]}: numeric, not root (runAsNonRoot needs a UID)"
    assert not group or (group.isdigit() and int(group) != 0)
    for sc in [main_container(s)["securityContext"] for s in knative_services(install("knative"))]:
        assert sc["runAsNonRoot"] is True  # the manifests rely on it


def test_final_stage_has_no_build_tools() -> None:
    for run in FINAL.all("RUN"):
        words = set(re.split(r"[\s;&|]+", run))
        assert not words & set(BUILD_TOOLS), f"build tools in the final stage: {run}"
        assert "pip" not in run and "apt-get" not in run, f"the final stage installs nothing: {run}"
    copies = FINAL.all("COPY")
    assert copies == ["--from=builder /opt/venv /opt/venv"], f"the final stage copies only the venv: {copies}"


def test_builder_installs_exactly_the_lock_then_kdesched_without_resolving() -> None:
    copies = [args.split() for args in BUILDER.all("COPY")]
    installs = [run for run in BUILDER.all("RUN") if "pip install" in run]
    assert len(installs) == 2, f"two pip steps, the lock then kdesched: {installs}"
    locked, own = installs
    assert re.search(r"--require-hashes -r requirements\.lock$", locked), locked
    assert ["requirements.lock", "./"] in copies, "the lock must be copied before it is installed"
    assert own.endswith("--no-deps ."), "kdesched itself must not re-resolve its dependencies"
    first_copy_of_sources = min(i for i, c in enumerate(copies) if "shared" in c)
    assert copies.index(["requirements.lock", "./"]) < first_copy_of_sources, (
        "copy the lock before the sources, so a source change does not reinstall the dependencies")


# -- the lock: every runtime dependency, its whole transitive set, exact versions and hashes ---------

LOCK = REPO / "requirements.lock"


@dataclass(frozen=True)
class Locked:
    version: str
    hashes: tuple[str, ...]


def parse_lock(text: str) -> dict[str, Locked]:
    """``name==version`` entries of a pip-compile --generate-hashes file, by canonical name."""
    entries: dict[str, Locked] = {}
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)$", line)
        assert m, f"requirements.lock: not an exact pin with hashes: {line[:120]!r}"
        name = canonicalize_name(m.group(1))
        assert name not in entries, f"requirements.lock: {name} twice"
        entries[name] = Locked(m.group(2), tuple(re.findall(r"sha256:([0-9a-f]{64})", m.group(3))))
    return entries


def project() -> dict[str, Any]:
    import tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def runtime_requirements() -> list[Requirement]:
    return [Requirement(r) for r in project()["dependencies"]]


def installed_requires(name: str) -> list[Requirement]:
    """A distribution's own requirements, from the metadata of the copy installed here."""
    try:
        return [Requirement(r) for r in importlib.metadata.requires(name) or []]
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError(f"{name} is in requirements.lock but not installed here; install the lock "
                             "and the project ('pip install -r requirements.lock && pip install .[test]') "
                             "to read its metadata") from None


def locked_requires(lock: dict[str, Locked]) -> Callable[[str], list[Requirement]]:
    """The requirements of each locked release, read from the installed copy, which must be that
    release: another release's metadata says nothing about the locked one (a newer pydantic needs a
    newer pydantic-core than the lock's, which is no fault of the lock)."""
    def requires(name: str) -> list[Requirement]:
        found = installed_requires(name)
        installed = importlib.metadata.version(name)
        if name in lock and installed != lock[name].version:
            raise AssertionError(
                f"{name} {installed} is installed, requirements.lock has {lock[name].version}: the lock can "
                "only be checked against the releases it pins; install it first, as .ci/run does "
                "('pip install -r requirements.lock && pip install .[test]')")
        return found
    return requires


def applies(req: Requirement, extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": extra}) for extra in (extras or {""}))


def lock_problems(lock: dict[str, Locked], roots: list[Requirement],
                  requires: Callable[[str], list[Requirement]]) -> list[str]:
    """What is wrong with a lock for these root requirements: a root missing or outside its range,
    a requirement of a locked package missing or outside its range (the lock is not closed), a
    package nothing needs (stale), a package without hashes."""
    problems = [f"{name}=={entry.version}: no hashes" for name, entry in lock.items() if not entry.hashes]
    reached: set[str] = set()
    todo: list[tuple[Requirement, str]] = [(r, "pyproject.toml") for r in roots if applies(r, frozenset())]
    seen_edges: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, needed_by = todo.pop()
        name = canonicalize_name(req.name)
        entry = lock.get(name)
        if entry is None:
            problems.append(f"{name} ({req}, needed by {needed_by}) is not in the lock")
            continue
        if not req.specifier.contains(entry.version, prereleases=True):
            problems.append(f"{name}=={entry.version} is outside {req} (needed by {needed_by})")
        reached.add(name)
        extras = frozenset(req.extras)
        if (name, extras) in seen_edges:
            continue
        seen_edges.add((name, extras))
        todo += [(sub, name) for sub in requires(name) if applies(sub, extras)]
    problems += [f"{name}=={lock[name].version}: nothing needs it" for name in sorted(set(lock) - reached)]
    return problems


def test_pyproject_keeps_ranges_and_the_lock_the_exact_versions() -> None:
    for req in runtime_requirements():
        operators = {spec.operator for spec in req.specifier}
        assert "==" not in operators and "===" not in operators, (
            f"{req}: the library declares a compatible range; the exact pin belongs in requirements.lock")
        assert operators & {">=", "~="} and operators & {"<", "~="}, f"{req}: give a lower and an upper bound"


def test_lock_covers_every_runtime_dependency_and_is_closed() -> None:
    lock = parse_lock(LOCK.read_text(encoding="utf-8"))
    assert lock_problems(lock, runtime_requirements(), locked_requires(lock)) == []
    assert "kdesched" not in lock, "the lock holds the dependencies, not kdesched itself"


def test_lock_checker_finds_what_is_wrong() -> None:
    lock = {"a": Locked("1.0", ("0" * 64,)), "b": Locked("2.5", ("1" * 64,)), "c": Locked("1.0", ()),
            "old": Locked("1.0", ("2" * 64,))}
    graph = {"a": [Requirement("b>=2,<3"), Requirement("d; extra == 'x'"),
                   Requirement("e; python_version < '3'")],
             "b": [Requirement("c")], "c": [], "old": []}
    assert lock_problems(lock, [Requirement("a>=1,<2")], graph.__getitem__) == [
        "c==1.0: no hashes", "old==1.0: nothing needs it"]
    assert lock_problems(lock, [Requirement("a[x]>=1.1")], graph.__getitem__) == [
        "c==1.0: no hashes", "a==1.0 is outside a[x]>=1.1 (needed by pyproject.toml)",
        "d (d; extra == \"x\", needed by a) is not in the lock", "old==1.0: nothing needs it"]


def test_runtime_environment() -> None:
    env = env_of(FINAL)
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].startswith("/opt/venv/bin:")
    assert env["PORT"] == "8080" and FINAL.all("EXPOSE") == ["8080"]


def test_default_command_serves_the_function_named_by_the_environment() -> None:
    assert final_command() == ["kdesched", "function"]


def test_manifests_run_commands_of_this_image() -> None:
    for svc in knative_services(install("knative")):
        assert main_container(svc)["command"][0] == final_command()[0], svc.label
    deployment = find(install("standalone"), "Deployment", "kdesched")
    assert main_container(deployment)["command"] == [final_command()[0]]
    assert main_container(deployment)["args"][0] == "serve"


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore semantics, enough for an allowlist: the last matching pattern wins,
    a pattern matches a path or any of its parent directories, `!` re-includes."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.strip("/")
        candidates = [pat] + ([pat[3:]] if pat.startswith("**/") else [])
        if any(fnmatch.fnmatchcase(p, c) for p in prefixes for c in candidates):
            result = not negate
    return result


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def copy_sources() -> list[str]:
    out = []
    for stage in STAGES:
        for args in stage.all("COPY"):
            if args.startswith("--from="):
                continue
            out.extend(args.split()[:-1])
    return out


def test_dockerignore_lets_through_everything_copied_and_little_else() -> None:
    patterns = dockerignore_patterns()
    sources = copy_sources()
    assert sources
    for src in sources:
        assert not ignored(src, patterns), f".dockerignore excludes {src}, which the Dockerfile copies"
    for unwanted in (".git", "tests/deploy", "venv", "bench", "shared/kdesched/__pycache__", "kdesched.egg-info"):
        assert ignored(unwanted, patterns), f"{unwanted} would be sent to the build context"
    assert not ignored("shared/kdesched/data/default-policy.yaml", patterns), "package data must reach the image"


# -- slow: install the package like the builder stage does and run the command ------------------

def build_context(tmp: Path) -> Path:
    """A copy of what the Dockerfile COPYs, filtered by .dockerignore like docker would."""
    ctx = tmp / "src"
    ctx.mkdir()
    patterns = dockerignore_patterns()
    for src in copy_sources():
        origin = REPO / src
        if origin.is_dir():
            shutil.copytree(origin, ctx / src, ignore=lambda d, names: [
                n for n in names if ignored(str((Path(d) / n).relative_to(REPO)), patterns)])
        else:
            shutil.copy2(origin, ctx / src)
    return ctx


def replay(command: str, venv: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One builder RUN step with /opt/venv and the image's `python` replaced by local ones."""
    command = command.replace("/opt/venv", str(venv))
    command = re.sub(r"^python\b", shlex.quote(sys.executable), command)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("image")
    ctx = build_context(tmp)
    venv = tmp / "venv"
    assert BUILDER.all("WORKDIR") == ["/src"]
    for step in BUILDER.all("RUN"):
        assert "apt-get" not in step, "system packages cannot be replayed here; the builder needs none"
        proc = replay(step, venv, ctx)
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            if any(marker in output for marker in NETWORK_ERRORS):
                pytest.skip(f"pip cannot reach the package index (no network?): {step}\n{output[-800:]}")
            pytest.fail(f"builder step failed: {step}\n{output[-3000:]}")
    return venv


def run_in_image(venv: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(env_of(FINAL))
    env["PATH"] = f"{venv / 'bin'}:{os.environ.get('PATH', '')}"
    exe = venv / "bin" / argv[0]
    assert exe.is_file(), f"{argv[0]} is not installed in the image's venv"
    return subprocess.run([str(exe), *argv[1:]], env=env, capture_output=True, text=True, timeout=120,
                          cwd=venv, check=False)


@pytest.mark.slow
def test_installed_package_is_not_the_source_tree(image_venv: Path) -> None:
    proc = run_in_image(image_venv, ["python", "-c", "import kdesched; print(kdesched.__file__)"])
    assert proc.returncode == 0, proc.stderr
    assert str(image_venv) in proc.stdout, f"kdesched imported from {proc.stdout.strip()}, not the venv"


@pytest.mark.slow
@pytest.mark.parametrize("argv", [final_command() + ["--help"], ["kdesched", "serve", "--help"]],
                         ids=lambda a: " ".join(a))
def test_image_command_runs(image_venv: Path, argv: list[str]) -> None:
    proc = run_in_image(image_venv, argv)
    assert proc.returncode == 0, f"`{' '.join(argv)}` failed in the installed image:\n{proc.stdout}{proc.stderr}"
    assert "usage:" in proc.stdout.lower()


@pytest.mark.slow
def test_every_function_the_manifests_run_is_installed(image_venv: Path) -> None:
    names = sorted(main_container(s)["args"][1] for s in knative_services(install("knative")))
    # every Service's function is in the registry and its app module imports in the installed image
    code = ("import importlib, sys\nfrom kdesched_functions import FUNCTIONS\nfor n in sys.argv[1:]:\n"
            "    importlib.import_module('kdesched_functions.' + FUNCTIONS[n].factory.partition(':')[0])")
    proc = run_in_image(image_venv, ["python", "-c", code, *names])
    assert proc.returncode == 0, f"functions missing from the image: {proc.stderr[-2000:]}"

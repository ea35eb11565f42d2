"""The repository layout: every module's path is its import path, and an editable install works.

Why: a contributor reads ``shared/kdesched/engine.py`` and types ``import kdesched.engine``;
editors, mypy and import-linter must follow the same mapping without a reinstall after each edit.
The regular install (CI, the image) and the editable one (``pip install -e '.[test]'``) must both
give exactly two import packages, ``kdesched`` and ``kdesched_functions``, and nothing generic.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.deploy import REPO

ROOTS = {"kdesched": REPO / "shared" / "kdesched", "kdesched_functions": REPO / "functions" / "kdesched_functions"}


def source_modules() -> dict[str, Path]:
    """Every module of the two packages, by the import name its path spells."""
    out: dict[str, Path] = {}
    for root in ROOTS.values():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def test_top_level_holds_only_the_two_package_roots() -> None:
    assert sorted(p.name for p in (REPO / "shared").iterdir() if p.name != "__pycache__") == ["kdesched"]
    assert sorted(p.name for p in (REPO / "functions").iterdir() if p.name != "__pycache__") == ["kdesched_functions"]
    for root in ROOTS.values():
        assert (root / "__init__.py").is_file()


def test_every_module_imports_from_the_path_it_is_named_by() -> None:
    """Run in a child with only the two source roots on sys.path: each module's file is its path."""
    modules = source_modules()
    assert "kdesched.cli.main" in modules and "kdesched_functions.common" in modules
    code = ("import importlib, sys\n"
            "for name, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
            "    m = importlib.import_module(name)\n"
            "    assert m.__file__ == path, (name, m.__file__, path)\n")
    argv = [x for name, path in modules.items() if not name.endswith("__main__") for x in (name, str(path))]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'shared'}{os.pathsep}{REPO / 'functions'}"}
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def pip(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_wheel_holds_exactly_the_two_packages_at_their_source_paths(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("kdesched-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"kdesched", "kdesched_functions"}
    for name, path in source_modules().items():
        inside = str(path.relative_to(ROOTS[name.split(".", 1)[0]].parent))
        assert inside in names, f"{path} is not in the wheel as {inside}"
    assert "kdesched/data/default-policy.yaml" in names and "kdesched/py.typed" in names


@pytest.mark.slow
def test_editable_install_runs_the_working_tree_and_the_checkers_follow_it(tmp_path: Path) -> None:
    """``pip install -e .``: imports resolve to the working tree, and mypy and import-linter (run
    from that environment) see both packages with no reinstall."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = pip(venv, "install", "--no-deps", "-q", "-e", str(REPO), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the dependencies (and the checkers) from this test environment, *after* the editable paths,
    # so a regular install of kdesched here cannot shadow the working tree
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "zzz_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    where = subprocess.run([python, "-c", ("import kdesched, kdesched_functions.common as c; "
                                           "print(kdesched.__file__); print(c.__file__)")],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [str(ROOTS["kdesched"] / "__init__.py"),
                                    str(ROOTS["kdesched_functions"] / "common.py")]
    lint = subprocess.run([python, "-c", ("import sys; from importlinter.cli import lint_imports_command as c; "
                                          "sys.exit(c())")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert lint.returncode == 0 and "0 broken" in lint.stdout, lint.stdout[-3000:] + lint.stderr[-2000:]

"""The documentation: links that resolve, a README that stays a front page, a CLI page that is complete.

Why: the README is the front page and the reference lives in ``docs/``; a moved heading or a
renamed page must not leave a dead link, the README must not grow back into the reference, and
every option the parser accepts must be documented on the CLI page (an option added without docs
fails here). Anchors follow GitHub's slug rules, since that is where the pages are read.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shlex
import subprocess
import tokenize
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy import REPO

README_MAX_LINES = 200


def doc_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]
    files += sorted(p for p in (REPO / "examples").rglob("README*") if p.is_file())
    return files


FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """Lines outside fenced code blocks, with their numbers."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: inline markup dropped, lower case, punctuation removed, ' ' -> '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "").replace("~", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # emphasis underscores, not snake_case
    text = text.strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN"
                   or unicodedata.category(ch) == "Mn")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page offers: heading slugs (duplicates get -1, -2, ...) and explicit HTML anchors."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        if slug in seen:
            seen[slug] += 1
            out.add(f"{slug}-{seen[slug]}")
        else:
            seen[slug] = 0
            out.add(slug)
    return out


def links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            yield number, m.group(1)


def test_slug_rules_match_github() -> None:
    assert github_slug("The `kdesched:` block") == "the-kdesched-block"
    assert github_slug("The event → strategies map and how to override it") == \
        "the-event--strategies-map-and-how-to-override-it"
    assert github_slug("Build the image and set its reference") == "build-the-image-and-set-its-reference"
    assert github_slug("Change the policy, the schedule") == "change-the-policy-the-schedule"
    assert github_slug("`kdesched serve`") == "kdesched-serve"
    assert github_slug("Status codes (every function)") == "status-codes-every-function"
    assert github_slug("snake_case_name and *emphasis*") == "snake_case_name-and-emphasis"


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    problems = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        where = f"{page.relative_to(REPO)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        try:
            dest.relative_to(REPO)
        except ValueError:
            problems.append(f"{where}: points outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}")
        elif anchor and dest.suffix != ".md":
            problems.append(f"{where}: an anchor into a file that is not Markdown")
    assert not problems, "\n".join(problems)


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing anchor are both found, code is not read as links."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nope) [gone](missing.md) `[not](a-link.md)`\n"
                    "```\n[also not](inside-a-fence.md)\n```\n", encoding="utf-8")
    found = [target for _, target in links(page)]
    assert found == ["#title", "#nope", "missing.md"]
    assert "title" in anchors(page) and "nope" not in anchors(page)


def test_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it a front page (<= {README_MAX_LINES}) and put reference "
        "material into docs/")
    text = "\n".join(lines)
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"(docs/{page.name}" in text, f"README.md does not link docs/{page.name}"


def readme_commands() -> list[str]:
    """The commands of the README's Quick start, in order: install and simulate, the full check,
    the fast loop."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.DOTALL)


def test_quick_start_has_its_commands_and_ci_runs_the_test_command() -> None:
    install, tests, fast = readme_commands()
    assert install == "pip install . && kdesched simulate examples/seed-new-node/cluster.yaml"
    # the fast loop: the full check's checks, and the tests that need no real component on every core
    checks = tests.split(" && python -m pytest", 1)[0].split("'.[test]' && ", 1)[1]
    assert fast == f'{checks} && python -m pytest -q -n auto -m "not realk8s and not realprom and not slow"'
    assert "pytest-xdist==" in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    (line,) = [ln for ln in ci.splitlines() if "lint-imports" in ln and not ln.lstrip().startswith("#")]
    # .ci/run may only add pip's own quieting flags to each `pip install`
    pip_flags = r"(^|&& )pip install((?: --quiet| -q| --disable-pip-version-check)+) "
    ci_words = shlex.split(re.sub(pip_flags, r"\1pip install ", line.strip()))
    assert ci_words == shlex.split(tests), f".ci/run runs {line!r}, the README says {tests!r}"


# --- the CLI page -------------------------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser,
             prefix: str = "kdesched") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every leaf command of the parser ('kdesched simulate', 'kdesched policy validate', ...)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for action in subs:
        for name, child in action.choices.items():
            yield from commands(child, f"{prefix} {name}")


def cli_sections() -> tuple[str, dict[str, str]]:
    """docs/cli.md's 'Options of each command': its preamble, and each '### kdesched ...' section."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "## Options of each command" in text
    part = text.split("## Options of each command", 1)[1].split("\n## ", 1)[0]
    pieces = re.split(r"^### (kdesched[^\n]*)$", part, flags=re.MULTILINE)
    preamble, sections = pieces[0], dict(zip(pieces[1::2], pieces[2::2]))
    return preamble, {name.strip(): body for name, body in sections.items()}


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    preamble, sections = cli_sections()
    missing = []
    for command, sub in commands(parser):
        if command not in sections:
            missing.append(f"{command}: no section '### {command}' in docs/cli.md")
            continue
        body = sections[command]
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if action.option_strings:
                for option in action.option_strings:
                    if not re.search(rf"`{re.escape(option)}[` ]", body) and not re.search(
                            rf"`{re.escape(option)}[` ]", preamble):
                        missing.append(f"{command}: option {option}")
            else:
                shown = action.metavar or action.dest
                if f"`{shown}`" not in body:
                    missing.append(f"{command}: argument {shown}")
            for choice in action.choices or ():
                if isinstance(choice, str) and choice not in body and choice not in preamble:
                    missing.append(f"{command}: value {choice!r} of {action.option_strings or action.dest}")
    return missing


def test_every_cli_option_is_documented_in_docs_cli() -> None:
    from kdesched.cli.main import build_parser

    parser = build_parser()
    names = [name for name, _ in commands(parser)]
    assert {"kdesched simulate", "kdesched run", "kdesched serve", "kdesched function",
            "kdesched policy validate", "kdesched policy convert"} <= set(names)
    assert undocumented(parser) == []


def test_the_cli_check_sees_an_undocumented_option() -> None:
    from kdesched.cli.main import build_parser

    parser = build_parser()
    serve = dict(commands(parser))["kdesched serve"]
    serve.add_argument("--no-such-documented-option", action="store_true")
    assert undocumented(parser) == ["kdesched serve: option --no-such-documented-option"]


# --- everything a reader needs is in the repository or public ------------------------------------------

# Names of files that exist only in the workspace this project was built in (its design brief and
# reference kit), and local paths: a reader of the repository has neither. Cite the public source
# instead (the upstream descheduler's issues by URL, Knative's docs by URL) or a page under docs/.
OUTSIDE = re.compile(
    r"\b(?:DESIGN|users|descheduler|knative|openshift-profiles|style-anchors)\.md\b"
    r"|reference §|reference/[\w-]+\.md"
    r"|(?:\.\./)+shared\b[\w./-]*"
    r"|(?<![\w.])/(?:work|root)/")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml"}


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60)
        names = [n for n in out.stdout.decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError):  # not a git checkout (an sdist): walk the tree
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*")
                 if p.is_file() and not any(part.startswith(".") or part in ("venv", "build", "dist")
                                            for part in p.relative_to(REPO).parts)]
    return [REPO / n for n in sorted(names) if Path(n).suffix in TEXT_SUFFIXES and (REPO / n).is_file()]


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """Comments and docstrings of a Python file, with their first line numbers: the parts people read.

    Code is left alone: a string in code may name a path the program looks for beside the
    repository (the real control-plane tier's binaries), which is behaviour, not a citation."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                yield node.body[0].lineno, doc


def inside(target: Path, root: Path) -> bool:
    resolved = target.resolve()
    return resolved.exists() and resolved.is_relative_to(root.resolve())


def outside_references(path: Path, root: Path = REPO) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".py":
        pieces = list(python_prose(text))
    else:
        pieces = list(enumerate(text.splitlines(), 1))
    found = []
    for number, piece in pieces:
        for offset, line in enumerate(piece.splitlines()):
            for m in OUTSIDE.finditer(line):
                if m.group(0).startswith("../") and inside(path.parent / m.group(0), root):
                    continue  # a relative link to a file of the repository itself, e.g. from docs/
                where = f"{path.relative_to(root)}:{number + offset}"
                found.append(f"{where}: {m.group(0)!r} in {line.strip()[:100]!r}")
    return found


def test_no_document_or_comment_points_outside_the_repository() -> None:
    files = [p for p in tracked_text_files() if p != Path(__file__).resolve()]
    assert any(p.name == "README.md" for p in files) and any(p.suffix == ".py" for p in files)
    problems = [problem for path in files for problem in outside_references(path)]
    assert not problems, "\n".join(problems)


def test_the_outside_reference_check_reads_prose_not_code(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Why: DESIGN.md says so."""\n'
                      'K8S = "../shared/k8s"  # binaries beside the repository: code, allowed\n'
                      'x = 1  # see /work/notes\n', encoding="utf-8")
    doc = tmp_path / "page.md"
    (tmp_path / "docs").mkdir()
    (tmp_path / "shared").mkdir()
    inner = tmp_path / "docs" / "inner.md"
    inner.write_text("[in the repository](../shared) but not [beside it](../../shared/k8s)\n",
                     encoding="utf-8")
    found = [h.split(": ")[1].split(" in ")[0] for h in outside_references(inner, tmp_path)]
    assert found == ["'../../shared/k8s'"]
    doc.write_text("Run `. /root/venv/bin/activate`; see users.md and reference §3.\n"
                   "[upstream](https://github.com/kubernetes-sigs/descheduler/blob/master/README.md)\n",
                   encoding="utf-8")
    hits = [h.split(": ", 1)[1]
            for h in outside_references(module, tmp_path) + outside_references(doc, tmp_path)]
    assert [h.split(" in ")[0] for h in hits] == ["'/work/'", "'DESIGN.md'", "'/root/'", "'users.md'",
                                                   "'reference §'"]

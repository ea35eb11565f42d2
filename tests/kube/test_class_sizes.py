"""No class of the kube layer grows past 250 lines again (issue 31, "the runtime in layers").

Why: ``KubeClient`` (527 lines) and ``ClusterCache`` (334) had each grown into several roles; they
are split into transport / generic verbs / kind-named methods, and stores / reflector / memory
governor. A class past the bound is the sign a role crept back in.
"""

from __future__ import annotations

import ast
from pathlib import Path

KUBE = Path(__file__).resolve().parents[2] / "shared" / "kdesched" / "kube"
MAX_CLASS_LINES = 250


def test_every_kube_class_is_at_most_250_lines() -> None:
    sizes = {}
    for path in sorted(KUBE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                sizes[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert "client.py:KubeClient" in sizes and "cache.py:ClusterCache" in sizes
    assert {name: n for name, n in sizes.items() if n > MAX_CLASS_LINES} == {}

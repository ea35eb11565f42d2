"""The container's memory limit, read from its cgroup (v2 or v1).

Why: the watch cache of ``kdesched serve`` sizes its ceiling from the memory the process may use
(:func:`kdesched.kube.cache.auto_ceiling`). A fixed default object count cannot be right for both a
1 Gi and an 8 Gi container: above the limit the kernel kills the process (OOM) long before the
cache's own ceiling would have let it fall back to LISTing per event.

Where the limit is (the container's own cgroup is what is mounted at ``/sys/fs/cgroup`` in a
Kubernetes container: a cgroup namespace on v2, the container's directory bind-mounted on v1):

- cgroup v2: ``/sys/fs/cgroup/memory.max``, bytes or ``max`` (no limit);
- cgroup v1: ``/sys/fs/cgroup/memory/memory.limit_in_bytes``, bytes; "no limit" is written as a
  huge number (``9223372036854771712``, the largest page-aligned int64), so any value from
  :data:`NO_LIMIT_BYTES` up means no limit.

Anything else (no such file, a file that cannot be read, text that is not a number) is "no limit
known": the caller keeps its default, and garbage is logged, never raised. The root is a
parameter so tests read temporary files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("kdesched.kube.memlimit")

CGROUP_ROOT = Path("/sys/fs/cgroup")
V2_FILE = "memory.max"
V1_FILE = "memory/memory.limit_in_bytes"
# At or above this (1 EiB) a limit means "unlimited" (v1's unlimited is 2**63 - 4096).
NO_LIMIT_BYTES = 1 << 60


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """A container memory limit: its size and the file it was read from (for logs)."""

    bytes: int
    source: str

    def describe(self) -> str:
        return f"{self.bytes / 2**30:.2f} GiB ({self.source})"


def read_memory_limit(root: Path | str | None = None) -> MemoryLimit | None:
    """The memory limit of this process's cgroup, or None when there is none (or none readable).

    cgroup v2 first (``memory.max`` exists only there, and not in the root cgroup of a host), then
    v1. ``root`` defaults to :data:`CGROUP_ROOT` (looked up at call time, so tests may patch it)."""
    base = Path(root) if root is not None else CGROUP_ROOT
    for name in (V2_FILE, V1_FILE):
        path = base / name
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            continue
        except OSError as exc:  # a directory, no permission...: as good as no file
            log.debug("cannot read the memory limit from %s: %s", path, exc)
            continue
        return _parse(text, str(path))
    return None


def _parse(text: str, source: str) -> MemoryLimit | None:
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        log.warning("ignoring the memory limit in %s: expected a number of bytes or 'max', got %r",
                    source, text[:80])
        return None
    if value <= 0:
        log.warning("ignoring the memory limit in %s: expected a positive number of bytes, got %d", source, value)
        return None
    if value >= NO_LIMIT_BYTES:
        return None
    return MemoryLimit(value, source)


__all__ = ["CGROUP_ROOT", "NO_LIMIT_BYTES", "MemoryLimit", "read_memory_limit"]

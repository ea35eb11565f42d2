"""The container memory limit from the cgroup files (kdesched.kube.memlimit), on temporary files.

Covers: cgroup v2 (``memory.max``: bytes or ``max``), cgroup v1 (``memory/memory.limit_in_bytes``,
where "no limit" is a huge number), v2 read before v1, and everything that is no limit known: no
file, a file that is not a number (logged), zero or negative, a directory in the file's place.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kdesched.kube.memlimit import NO_LIMIT_BYTES, MemoryLimit, read_memory_limit


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_cgroup_v2_limit(tmp_path: Path) -> None:
    path = write(tmp_path, "memory.max", "2147483648\n")
    assert read_memory_limit(tmp_path) == MemoryLimit(2 * 2**30, str(path))
    assert read_memory_limit(tmp_path).describe() == f"2.00 GiB ({path})"  # type: ignore[union-attr]


def test_cgroup_v2_max_is_no_limit(tmp_path: Path) -> None:
    write(tmp_path, "memory.max", "max\n")
    write(tmp_path, "memory/memory.limit_in_bytes", "1073741824\n")  # v2 answered: v1 is not read
    assert read_memory_limit(tmp_path) is None


def test_cgroup_v1_limit(tmp_path: Path) -> None:
    path = write(tmp_path, "memory/memory.limit_in_bytes", "1073741824\n")
    assert read_memory_limit(str(tmp_path)) == MemoryLimit(2**30, str(path))


@pytest.mark.parametrize("text", ["9223372036854771712", str(NO_LIMIT_BYTES), str(2**63 - 1)])
def test_cgroup_v1_huge_value_is_no_limit(tmp_path: Path, text: str) -> None:
    write(tmp_path, "memory/memory.limit_in_bytes", text + "\n")
    assert read_memory_limit(tmp_path) is None


def test_just_under_the_huge_threshold_is_a_limit(tmp_path: Path) -> None:
    write(tmp_path, "memory/memory.limit_in_bytes", str(NO_LIMIT_BYTES - 1))
    limit = read_memory_limit(tmp_path)
    assert limit is not None and limit.bytes == NO_LIMIT_BYTES - 1


def test_no_cgroup_files_is_no_limit(tmp_path: Path) -> None:
    assert read_memory_limit(tmp_path) is None
    assert read_memory_limit(tmp_path / "does-not-exist") is None


@pytest.mark.parametrize("text", ["lots", "", "1.5G", "0", "-1", "\x00\xff"])
def test_garbage_is_no_limit_and_logged(tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "memory.max", text)
    assert read_memory_limit(tmp_path) is None
    assert any(str(path) in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_directory_in_the_files_place_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "memory.max").mkdir()
    write(tmp_path, "memory/memory.limit_in_bytes", "536870912")
    limit = read_memory_limit(tmp_path)
    assert limit is not None and limit.bytes == 512 * 2**20

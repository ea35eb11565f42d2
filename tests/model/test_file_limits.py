"""Input refused before it is read (kdesched.model.files): not a regular file (a FIFO, a device, a
directory), or larger than its documented limit, for the cluster file, the policy and stdin. Once,
``--policy /dev/zero`` read until MemoryError."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kdesched.cli.main import main
from kdesched.model import files
from kdesched.model.errors import ModelError
from kdesched.policy.errors import PolicyError
from kdesched.policy.load import load_policy

ROOT = Path(__file__).resolve().parents[2]
SEED = str(ROOT / "examples" / "seed-new-node" / "cluster.yaml")
POLICY = str(ROOT / "examples" / "pod-lifetime" / "policy.yaml")


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # no writer: a blocking open or read would hang the test
    with pytest.raises(ModelError, match="is a FIFO \\(named pipe\\), not a regular file"):
        files.load_snapshot(str(fifo))
    with pytest.raises(PolicyError, match="is a FIFO"):
        load_policy(str(fifo))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_device_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", SEED, "--policy", "/dev/zero"]) == 2
    assert main(["simulate", "/dev/zero"]) == 2
    err = capsys.readouterr().err
    assert err.count("/dev/zero") == 2 and err.count("is a device, not a regular file") == 2


def test_files_over_the_limit_are_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_SNAPSHOT_BYTES", 100)
    big = tmp_path / "big.json"
    big.write_text('{"kind": "List", "items": [' + " " * 200 + "]}")
    with pytest.raises(ModelError, match=r"big.json: is 2\d\d bytes, more than the limit"):
        files.load_snapshot(str(big))
    with pytest.raises(ModelError, match="more than the limit"):
        files.read_text(str(big), 100)
    monkeypatch.setattr("kdesched.policy.load.MAX_POLICY_BYTES", 100)
    with pytest.raises(PolicyError, match="more than the limit of 100 bytes"):
        load_policy(str(big))
    monkeypatch.undo()
    load_policy(POLICY)  # a normal policy is well under the limit


def test_stdin_is_read_with_a_byte_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x" * 1000)))
    with pytest.raises(ModelError, match="<stdin>: is more than the limit"):
        files.read_stdin(100)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"kind: List\n")))
    assert files.read_stdin(100) == "kind: List\n"


def _under_address_space_limit(code: str, limit: int = 2 << 30) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose address space is capped at ``limit`` bytes."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    return subprocess.run([sys.executable, "-c", prelude + code], check=False, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS as Linux applies it")
def test_a_small_file_is_read_without_reserving_its_limit() -> None:
    """Under a 2 GiB address-space limit a 7 kB snapshot and a policy are read and simulated: the
    read asks for the file's size plus one byte, not the 2 GiB limit plus one (which Python
    allocates before reading: MemoryError, issue 31)."""
    done = _under_address_space_limit(
        "from kdesched.model.files import MAX_SNAPSHOT_BYTES, read_file_bytes\n"
        f"data = read_file_bytes({SEED!r}, MAX_SNAPSHOT_BYTES)\n"
        f"assert data == open({SEED!r}, 'rb').read(), len(data)\n"
        "from kdesched.cli.main import main\n"
        f"raise SystemExit(main(['simulate', {SEED!r}, '--policy', {POLICY!r}, '-q']))\n")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MemoryError" not in done.stderr


def test_reads_in_chunks_up_to_the_limit() -> None:
    """The chunked reader: the whole input under the limit, None past it, whatever the first ask."""
    for data, limit, first in [(b"", 10, 1), (b"abc", 3, 4), (b"abc", 3, 1), (b"x" * 100, 100, 7), (b"abcd", 3, 5),
                               (b"abcd", 3, 1)]:
        got = files.read_at_most(io.BytesIO(data).read, limit, first=first)
        assert got == (data if len(data) <= limit else None), (data, limit, first)

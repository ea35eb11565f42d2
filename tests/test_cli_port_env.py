"""`$PORT`, the documented default of `--port` (docs/cli.md), is checked like the flag: a bad value exits 2."""

from __future__ import annotations

import pytest


def parse(monkeypatch: pytest.MonkeyPatch, port: str, argv: list[str]) -> object:
    monkeypatch.setenv("PORT", port)
    from kdesched.cli.main import build_parser  # the default is read when the parser is built

    return build_parser().parse_args(argv)


@pytest.mark.parametrize("command", [["function", "deadletter"], ["serve"]])
def test_an_out_of_range_port_env_is_refused_as_bad_input(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """docs/cli.md: `--port PORT`: "HTTP port, 0 to 65535 (default `$PORT` or 8080)"; "Flags are
    checked where they are read"; "Bad input never prints a traceback". With `PORT=99999` (a typo in
    a Deployment's env, or `docker run -e PORT=...`), the value skips the check (argparse does not
    type-check a non-string default) and `kdesched function deadletter` dies at bind time with
    `OverflowError: bind(): port must be 0-65535` and a traceback, exit 1."""
    with pytest.raises(SystemExit) as exc:
        args = parse(monkeypatch, "99999", command)
        pytest.fail(f"PORT=99999 accepted: --port defaults to {args.port!r}")  # type: ignore[attr-defined]
    assert exc.value.code == 2


@pytest.mark.parametrize("command", [["function", "deadletter"], ["serve"]])
def test_an_unparsable_port_env_is_not_silently_replaced_by_8080(monkeypatch: pytest.MonkeyPatch,
                                                                 command: list[str]) -> None:
    """docs/cli.md: the default of `--port` is `$PORT` or 8080, and a bad flag value exits 2 naming
    it. With `PORT=8O80` (letter O) kdesched listens on 8080 without a word, so a Service pointing at
    the intended port gets connection refused and nothing in the log says why."""
    with pytest.raises(SystemExit) as exc:
        args = parse(monkeypatch, "8O80", command)
        pytest.fail(f"PORT='8O80' accepted: --port defaults to {args.port!r}")  # type: ignore[attr-defined]
    assert exc.value.code == 2


@pytest.mark.parametrize("command", [["function", "deadletter"], ["serve"]])
def test_a_good_port_env_is_the_default_and_the_flag_wins(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    assert parse(monkeypatch, "9090", command).port == 9090  # type: ignore[attr-defined]
    assert parse(monkeypatch, "9090", [*command, "--port", "7070"]).port == 7070  # type: ignore[attr-defined]
    assert parse(monkeypatch, "", command).port == 8080  # type: ignore[attr-defined]

"""Flags checked at the edge (kdesched.cli.flags): finite numbers in a documented range that the
--help states, listen addresses that parse, and no value that can reach a thread and kill it
(``--sweep-interval inf`` once ended the sweep thread with OverflowError; ``nan`` disabled it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kdesched.cli import common as cli_common
from kdesched.cli.flags import NumberFlag, address
from kdesched.cli.main import build_parser, main
from kdesched.cli.serve import MAX_SWEEP_SECONDS


def numeric_actions() -> list[tuple[str, argparse.Action]]:
    """Every flag of every command whose value is a number."""
    numeric = (cli_common._qps_flag, cli_common._burst_flag, cli_common._concurrency_flag, int, float)
    out = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif isinstance(action.type, NumberFlag) or action.type in numeric:
                out.append((f"{path} {action.option_strings[0]}", action))

    walk(build_parser(), "kdesched")
    return out


def test_every_numeric_flag_states_its_range_in_help() -> None:
    actions = numeric_actions()
    names = {name for name, _ in actions}
    assert {"kdesched serve --sweep-interval", "kdesched serve --port", "kdesched function --port",
            "kdesched serve --cache-max-objects", "kdesched run --kube-api-qps", "kdesched serve --kube-api-burst",
            "kdesched run --max-concurrent-evictions"} <= names
    for name, action in actions:
        assert action.type not in (int, float), f"{name}: a bare int/float accepts inf, nan or any size"
        assert action.help and "range: " in action.help, name


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "NaN", "1e10", "604801", "-0.5", "soon", ""])
def test_sweep_interval_refuses_what_could_kill_or_disable_the_sweep(text: str) -> None:
    parse = build_parser().parse_args
    with pytest.raises(SystemExit):
        parse(["serve", "--sweep-interval", text])


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("900", 900.0), ("0.5", 0.5), (str(MAX_SWEEP_SECONDS),
                                                                                       float(MAX_SWEEP_SECONDS))])
def test_sweep_interval_in_range(text: str, value: float) -> None:
    assert build_parser().parse_args(["serve", "--sweep-interval", text]).sweep_interval == value


def test_number_flag() -> None:
    flag = NumberFlag(int, 1, 100_000_000)
    assert flag("1_000") == 1000 and flag("300,000") == 300_000
    assert flag.range_text == "range: 1 to 100,000,000"
    for bad in ("0", "100000001", "1.5", "1e3", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            flag(bad)
    positive = NumberFlag(float, 0, 10, "seconds", above_low=True)
    assert positive.range_text == "range: more than 0 and at most 10 seconds"
    with pytest.raises(argparse.ArgumentTypeError, match="out of range"):
        positive("0")


@pytest.mark.parametrize(("text", "value"), [
    ("0.0.0.0", "0.0.0.0"), ("127.0.0.1", "127.0.0.1"), ("::", "::"), ("[::1]", "::1"), ("localhost", "localhost"),
    ("kdesched.example.com", "kdesched.example.com"), ("host-1.", "host-1"),
])
def test_addresses_that_parse(text: str, value: str) -> None:
    assert address(text) == value


@pytest.mark.parametrize("text", ["not an address", "", " 0.0.0.0", "999.1.1.1", "1.2.3", "host_1", "-host",
                                  "[localhost]", "a" * 64, "0.0.0.0:8080", "http://0.0.0.0"])
def test_addresses_that_do_not(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="must be an IP address"):
        address(text)


def test_a_policy_sweep_interval_too_long_for_the_sweep_thread_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerPolicy\nprofiles:\n- name: p\n"
                      "  pluginConfig: [{name: RemovePodsViolatingNodeTaints}]\n  plugins: {deschedule: {enabled: "
                      "[RemovePodsViolatingNodeTaints]}}\nkdesched: {sweepIntervalSeconds: 1.0e+10}\n")
    assert main(["serve", "--policy", str(policy), "--kubeconfig", str(tmp_path / "never-read")]) == 2
    err = capsys.readouterr().err
    assert f"kdesched.sweepIntervalSeconds: must be at most {MAX_SWEEP_SECONDS}" in err and "Traceback" not in err

"""What `helm install` accepts, every kdesched container starts with.

Why: values.schema.json and the templates are a second description of what kdesched reads, and
they drift. A value the schema lets through but the code refuses is the worst kind of mistake: the
install or upgrade succeeds, the ConfigMap is written, and then every container exits 2 at start
(serve's rollout stalls on the old pod, Knative revisions never get Ready, each CronJob run fails).
So these tests render the chart with the real Helm for representative values and for values built
from the schema itself (each leaf of its `kdesched` object at the low and the high end of what the
schema allows), and start each rendered container as far as it goes before its first API call:
the container's arguments through the CLI's own parser (kdesched.cli.main.build_parser), with the
container's environment, then the policy file it mounts through the loader the CLI uses
(kdesched.cli.common.load_policy_arg: the policy, its `kdesched:` block, the dry-run decision).
A value the code refuses must be refused by `helm install` already, naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.admission import alerts
from kdesched.cli.common import InputError, load_policy_arg
from kdesched.cli.main import build_parser
from kdesched.policy import safety, usage
from kdesched.reactor.run import settings
from kdesched_functions import FUNCTIONS

from tests.helm import CHART, VERSIONS, rendered_policy, template, template_raw
from tests.helm.test_chart import EXTRA_VOLUMES, NON_DEFAULT

HERE = Path(__file__).resolve().parent
BINARIES = sorted(VERSIONS)
MODES = ("knative", "standalone", "cronjob")
MOUNTED_POLICY = "/etc/kdesched/policy.yaml"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())

# -- the kdesched containers of a rendering, started up to their first API call -------------------


def containers(objs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(object name, container) of every kdesched container: serve, run, the Knative functions."""
    for o in objs:
        spec = o.get("spec") or {}
        if o["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        elif o["kind"] not in ("Deployment", "Job") and not (o["kind"] == "Service" and "template" in spec):
            continue
        for container in spec["template"]["spec"]["containers"]:
            yield f"{o['kind']}/{o['metadata']['name']}", container


def start(container: dict[str, Any], policy: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> str:
    """What the container says when it starts with ``policy`` mounted: "" when it gets as far as
    its first API call, else its error (argparse's, or the policy's)."""
    assert container["command"] == ["kdesched"]
    with monkeypatch.context() as env:
        for var in container.get("env") or ():
            if "value" in var:
                env.setenv(var["name"], str(var["value"]).replace(MOUNTED_POLICY, str(policy)))
        env.setenv("POD_NAMESPACE", "kdesched")  # the downward API's
        args = [str(a).replace(MOUNTED_POLICY, str(policy)) for a in container["args"]]
        capsys.readouterr()
        try:
            parsed = build_parser().parse_args(args)  # built here: its defaults read the environment
        except SystemExit:
            return f"kdesched {' '.join(args)}: {capsys.readouterr().err.strip()}"
        try:
            if parsed.command == "function":
                if FUNCTIONS[parsed.name].needs_policy:
                    load_policy_arg(parsed.policy or os.environ.get("KDESCHED_POLICY"))
            else:
                load_policy_arg(parsed.policy, parsed.profile, dry_run_flag=parsed.dry_run)
        except InputError as exc:
            return f"kdesched {' '.join(args)}: {exc}"
    return ""


def assert_every_container_starts(objs: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> int:
    path = tmp_path / "policy.yaml"
    path.write_text(rendered_policy(objs))
    started = 0
    for name, container in containers(objs):
        error = start(container, path, monkeypatch, capsys)
        assert not error, f"helm accepted values that {name} refuses at start:\n{error}"
        started += 1
    return started


# -- values built from the schema: each leaf of `kdesched` at the low and the high end it allows ------

# leaves the schema cannot pick a value for (free text, lists, cross-field rules): (low, high) by hand
BY_HAND: dict[str, tuple[Any, Any]] = {
    "events": ({}, {"dev.kdesched.node.taints.changed": ["RemovePodsViolatingNodeTaints"]}),
    "leaseRenewDeadlineSeconds": (1, 59),  # the code also wants it under leaseDurationSeconds (default 60)
    "topologyKeys": ([], ["topology.kubernetes.io/zone"]),
    "safety.maxUnavailable": (1, "50%"),
    "disruptionWindows": ([], [{"name": "business-hours", "schedule": "0 9 * * MON-FRI", "duration": "8h",
                                "action": "forbid", "timeZone": "Europe/Berlin"}]),
    "disruptionBudgets": ([], [{"name": "cluster", "maxUnavailable": "5%"},
                               {"name": "dedupe", "maxUnavailable": 3, "strategies": ["RemoveDuplicates"]}]),
    "usage.prometheusCAFile": ("", "/etc/kdesched-extra/ca.crt"),
    # the brake's required fields in both; a token file or a Secret, not both
    "alertBrake.url": ("http://prometheus-k8s.monitoring.svc:9090", "https://prometheus.example:9091/prom"),
    "alertBrake.alertFilterRegexp": ("^(EtcdMembersDown)$", "^(Watchdog|InfoInhibitor)$"),
    "alertBrake.tokenFile": ("/etc/kdesched-extra/token", ""),
    "alertBrake.authToken": ({}, {"secretReference": {"namespace": "monitoring", "name": "prometheus-token"}}),
    "alertBrake.caFile": ("", "/etc/kdesched-extra/ca.crt"),
}
LARGE = 1_000_000  # the high end of a number the schema does not bound
REMOVED_KEYS: set[str] = set()  # keys kdesched still names only to refuse them (none at the top level)


def _number(node: dict[str, Any], high: bool) -> int | float:
    step = 1 if node["type"] == "integer" else 0.001  # the nearest value past an exclusive bound
    if high:
        if "maximum" in node:
            return node["maximum"]
        return node["exclusiveMaximum"] - step if "exclusiveMaximum" in node else LARGE
    if "minimum" in node:
        return node["minimum"]
    return node["exclusiveMinimum"] + step if "exclusiveMinimum" in node else 0


def example(node: dict[str, Any], path: str, high: bool) -> Any:
    """A value of ``node`` the schema accepts: its low or high end."""
    if path in BY_HAND:
        return BY_HAND[path][high]
    if "enum" in node:
        return node["enum"][-1 if high else 0]
    if node.get("type") == "boolean":
        return high
    if node.get("type") in ("integer", "number"):
        return _number(node, high)
    if node.get("type") == "object" and "properties" in node:
        return {key: example(sub, f"{path}.{key}" if path else key, high) for key, sub in node["properties"].items()}
    raise AssertionError(f"kdesched.{path}: no example for {json.dumps(node)}; add one to BY_HAND")


def schema_examples() -> dict[str, dict[str, Any]]:
    kdesched = SCHEMA["properties"]["kdesched"]
    return {"low": example(kdesched, "", False), "high": example(kdesched, "", True)}


def leaves(node: dict[str, Any], path: str = "") -> Iterator[str]:
    if path in BY_HAND or "properties" not in node:
        yield path
        return
    for key, sub in node["properties"].items():
        yield from leaves(sub, f"{path}.{key}" if path else key)


def test_the_schema_knows_every_key_kdesched_reads() -> None:
    """The other way round: a key kdesched reads in its `kdesched:` block (and in the blocks whose keys
    it lists) that the schema does not know is refused by `helm install`, though documented."""
    kdesched = SCHEMA["properties"]["kdesched"]["properties"]
    blocks = {"": (kdesched, set(settings.KNOWN_KEYS) - REMOVED_KEYS), "alertBrake": (None, set(alerts.KNOWN_KEYS)),
              "safety": (None, set(safety.KNOWN_KEYS)), "usage": (None, set(usage.KNOWN_KEYS))}
    for name, (node, known) in blocks.items():
        props = node if node is not None else kdesched.get(name, {}).get("properties", {})
        assert set(props) == known, (f"kdesched{'.' + name if name else ''}: the schema lacks {sorted(known - set(props))}"
                                     f", has unknown {sorted(set(props) - known)}")


def test_the_examples_cover_every_leaf_of_the_schema() -> None:
    """Each leaf of the schema's `kdesched` appears in both examples, and every hand-made example
    still names a leaf of the schema (a leaf removed from the schema is removed here too)."""
    all_leaves = set(leaves(SCHEMA["properties"]["kdesched"]))
    assert set(BY_HAND) <= all_leaves, f"BY_HAND names what the schema no longer has: {set(BY_HAND) - all_leaves}"
    for name, block in schema_examples().items():
        for leaf in all_leaves:
            node: Any = block
            for key in leaf.split("."):
                assert isinstance(node, dict) and key in node, f"{name}: kdesched.{leaf} missing"
                node = node[key]


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize("end", ["low", "high"])
@pytest.mark.parametrize("mode", MODES)
def test_what_the_schema_allows_in_kdesched_every_container_starts_with(
        helm: Path, binary: str, end: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    values = {"mode": mode, "kdesched": schema_examples()[end]}
    objs = template(helm, values, binary=binary)  # the schema accepts it (else the example is wrong)
    assert yaml.safe_load(rendered_policy(objs))["kdesched"] == values["kdesched"]
    assert assert_every_container_starts(objs, tmp_path, monkeypatch, capsys)


# -- representative values ----------------------------------------------------------------------------

COMBOS: dict[str, dict[str, Any]] = {
    "default": {},
    "dry-run": {"dryRun": True},
    "non-default": NON_DEFAULT,
    "longest-interval": {"deschedulingInterval": "167h59m60s", "cmdOptions": {"dry-run": True}},
    "one-off": {"cronjob": {"oneOff": True}, "extraArgs": ["--consistent-read"]},  # cronjob mode only
    "alert-brake-with-its-files": EXTRA_VOLUMES,
    "policy-text": {"policy": (CHART.parents[1] / "examples" / "policies" / "openshift-presets.yaml").read_text()},
}


CASES = [(combo, mode) for combo in sorted(COMBOS) for mode in MODES if combo != "one-off" or mode == "cronjob"]


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize(("combo", "mode"), CASES, ids=[f"{c}-{m}" for c, m in CASES])
def test_representative_values_start_every_container(helm: Path, binary: str, mode: str, combo: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    objs = template(helm, {**COMBOS[combo], "mode": mode}, binary=binary)
    assert assert_every_container_starts(objs, tmp_path, monkeypatch, capsys) == (6 if mode == "knative" else 1)


@pytest.mark.parametrize("binary", BINARIES)
def test_an_upstream_values_file_starts(helm: Path, binary: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    objs = template(helm, yaml.safe_load((HERE / "upstream-values.yaml").read_text()), binary=binary)
    assert assert_every_container_starts(objs, tmp_path, monkeypatch, capsys) == 1


# -- what the code refuses, helm refuses, naming it -----------------------------------------------------

REFUSED = [
    ({"kdesched": {"rateLimits": {"perNode": {"perMinute": 5, "burst": 2}}}}, "perNode"),
    ({"kdesched": {"rateLimits": {"perNamespace": {"perMinute": 5}}}}, "perNamespace"),
    ({"mode": "standalone", "deschedulingInterval": "168h0m1s"}, "deschedulingInterval"),
    ({"kind": "Deployment", "deschedulingInterval": "200h"}, "deschedulingInterval"),
    ({"mode": "standalone", "deschedulingInterval": "99999999999999999999h"}, "deschedulingInterval"),  # not 0
]


@pytest.mark.parametrize("binary", BINARIES)
@pytest.mark.parametrize(("values", "named"), REFUSED, ids=[f"{n}-{i}" for i, (_, n) in enumerate(REFUSED)])
def test_what_every_container_refuses_helm_refuses_naming_it(helm: Path, binary: str, values: dict[str, Any],
                                                             named: str) -> None:
    done = template_raw(helm, values, binary=binary)
    assert done.returncode != 0, f"{values}: rendered, and every container would refuse it at start"
    assert named in done.stderr, done.stderr


def test_the_start_check_sees_a_refused_policy_and_a_refused_flag(
        helm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Not vacuous: a kdesched block the code refuses, and an argument serve refuses, are reported."""
    objs = template(helm, {"mode": "standalone", "kdesched": {"settleSeconds": 1}})
    config = next(o for o in objs if o["kind"] == "ConfigMap")
    config["data"]["policy.yaml"] = config["data"]["policy.yaml"].replace("settleSeconds: 1", "settleSeconds: -1")
    with pytest.raises(AssertionError, match="settleSeconds: must be a number >= 0"):
        assert_every_container_starts(objs, tmp_path, monkeypatch, capsys)
    objs = template(helm, {"mode": "standalone", "extraArgs": ["--sweep-interval", "604801"]})
    with pytest.raises(AssertionError, match="--sweep-interval"):
        assert_every_container_starts(objs, tmp_path, monkeypatch, capsys)

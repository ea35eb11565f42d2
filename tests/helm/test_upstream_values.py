"""A team moving from the upstream descheduler chart passes its values file unchanged.

Why: the issue's promise is "switch with nothing else changed": the upstream chart's `kind`,
`schedule` and `deschedulerPolicy` must mean the same here. The chart renders `deschedulerPolicy`
exactly as the upstream chart does (apiVersion from `deschedulerPolicyAPIVersion`, kind
DeschedulerPolicy, the mapping through `tpl`), so kdesched reads the policy upstream would. These
tests check that with the real Helm: an upstream-style values file installs as the cronjob mode on
its schedule; the rendered policy passes `kdesched policy validate`, loads as the very policy it
was written as, and decides on every example of examples/ what its expected.json says (the real
upstream binary deciding on the same policies is tests/helm/test_real_install.py's job).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kdesched.cli.main import main
from kdesched.policy.load import load_policy_text

from tests.helm import CHART, REPO, find_obj, rendered_policy, run_helm, template

HERE = Path(__file__).resolve().parent
UPSTREAM_VALUES = HERE / "upstream-values.yaml"
EXAMPLES = REPO / "examples"
CORPUS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "policy.yaml").is_file() and (p / "expected.json").is_file())


def as_upstream_values(policy: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A policy file turned into the upstream chart's values: its body under deschedulerPolicy."""
    body = {k: v for k, v in policy.items() if k not in ("apiVersion", "kind")}
    return {"kind": "CronJob", "deschedulerPolicyAPIVersion": policy["apiVersion"], "deschedulerPolicy": body, **more}


def meaning(text: str, source: str) -> dict[str, Any]:
    """The loaded policy without where it came from and how it was written."""
    loaded = dataclasses.asdict(load_policy_text(text, source))
    for key in ("source", "written"):
        loaded.pop(key, None)
    for profile in loaded["profiles"]:
        profile.pop("written_args", None)
    return loaded


@pytest.mark.parametrize("binary", ["helm3", "helm"])
def test_upstream_values_file_installs_as_a_cronjob_on_its_schedule(helm: Path, binary: str) -> None:
    done = run_helm(helm, binary, "template", "descheduler", str(CHART), "-n", "kube-system", "-f", str(UPSTREAM_VALUES))
    assert done.returncode == 0, done.stderr
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]
    cron = find_obj(objs, "CronJob", "kdesched")
    assert cron["spec"]["schedule"] == "*/5 * * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert (cron["spec"]["successfulJobsHistoryLimit"], cron["spec"]["failedJobsHistoryLimit"]) == (3, 1)
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}
    assert pod["containers"][0]["args"] == ["run", "--policy", "/etc/kdesched/policy.yaml"]
    assert not [o for o in objs if o["kind"] in ("Deployment", "Broker", "Service")]


def test_upstream_policy_renders_as_upstream_renders_it(helm: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    values = yaml.safe_load(UPSTREAM_VALUES.read_text())
    text = rendered_policy(template(helm, values))
    doc = yaml.safe_load(text)
    assert text.startswith('apiVersion: "descheduler/v1alpha2"\nkind: "DeschedulerPolicy"\n')
    assert doc == {"apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy", **values["deschedulerPolicy"]}
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    assert main(["policy", "validate", str(path)]) == 0
    assert "valid" in capsys.readouterr().out


@pytest.mark.parametrize("example", CORPUS)
def test_example_policy_through_upstream_values_decides_as_expected(
        helm: Path, example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = EXAMPLES / example
    original = (folder / "policy.yaml").read_text()
    text = rendered_policy(template(helm, as_upstream_values(yaml.safe_load(original))))
    assert meaning(text, "rendered") == meaning(original, "example")
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    assert main(["policy", "validate", str(path)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(folder / "cluster.yaml"), "--policy", str(path), "-o", "json", "-q"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = json.loads((folder / "expected.json").read_text())["evictions"]

    def pick(evictions: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
        return sorted((e["namespace"], e["pod"], e["node"], e["strategy"]) for e in evictions)
    assert pick(report["evictions"]) == pick(expected)


def test_upstream_tpl_in_the_policy_is_expanded(helm: Path) -> None:
    """The upstream chart passes deschedulerPolicy through `tpl`: values may use the release's data."""
    values = {"kind": "CronJob", "deschedulerPolicy": {"profiles": [{
        "name": "default", "pluginConfig": [{"name": "DefaultEvictor", "args": {
            "namespaceLabelSelector": {"matchLabels": {"team": "{{ .Release.Namespace }}"}}}},
            {"name": "RemovePodsViolatingNodeTaints"}],
        "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}}]}}
    doc = yaml.safe_load(rendered_policy(template(helm, values, namespace="shop")))
    assert doc["profiles"][0]["pluginConfig"][0]["args"]["namespaceLabelSelector"] == {"matchLabels": {"team": "shop"}}


def test_deployment_kind_is_standalone_with_the_upstream_interval(helm: Path) -> None:
    objs = template(helm, {"kind": "Deployment", "deschedulingInterval": "5m", "replicas": 2})
    deployment = find_obj(objs, "Deployment", "kdesched")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["serve", "--policy"] and args[args.index("--sweep-interval") + 1] == "300"
    assert deployment["spec"]["replicas"] == 2


@pytest.mark.parametrize("binary", ["helm3", "helm"])
@pytest.mark.parametrize(("option", "dry"), [(None, True), (True, True), ("true", True), (False, False)])
def test_upstream_dry_run_option_is_kept(helm: Path, binary: str, option: Any, dry: bool) -> None:
    """The upstream chart renders cmdOptions as flags: `dry-run: null` (a bare flag) or true is a dry run."""
    objs = template(helm, {"kind": "CronJob", "cmdOptions": {"dry-run": option, "v": 3}}, binary=binary)
    args = find_obj(objs, "CronJob", "kdesched")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--dry-run" in args) is dry


def test_install_notes_list_the_ignored_upstream_keys(helm: Path) -> None:
    """`helm install` (Helm 4's client-side dry run needs no cluster) says which keys it ignored."""
    done = run_helm(helm, "helm", "install", "descheduler", str(CHART), "--dry-run=client", "-n", "kube-system",
                    "-f", str(UPSTREAM_VALUES))
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "mode cronjob" in notes and '"*/5 * * * *"' in notes
    ignored = notes.split("Ignored (upstream descheduler chart values that mean nothing to kdesched): ", 1)[1]
    assert ignored.split()[:6] == ["cmdOptions,", "ports,", "securityContext,", "livenessProbe,", "service,",
                                   "serviceMonitor"]

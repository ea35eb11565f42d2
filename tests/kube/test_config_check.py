"""kubeconfig fields named (kdesched.kube.config.check_kubeconfig): what the official loader fails
on with a TypeError (``contexts: 5``) or accepts and fails on far away (a cluster without
``server``) is a ConfigError naming the file and the field; a valid merged $KUBECONFIG passes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kdesched.kube.config import check_kubeconfig
from kdesched.kube.errors import ConfigError

GOOD = ("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "contexts: [{name: a, context: {cluster: c, user: u, namespace: ops}}]\nusers: [{name: u, user: {token: t}}]\n"
        "current-context: a\n")


def test_a_valid_kubeconfig_passes(tmp_path: Path) -> None:
    f = tmp_path / "config"
    f.write_text(GOOD)
    check_kubeconfig(str(f))
    check_kubeconfig(str(f), "a")


def test_files_are_merged_first_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.write_text("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n")
    second.write_text(GOOD.replace("current-context: a", "current-context: other"))
    check_kubeconfig(f"{first}{os.pathsep}{second}")  # the cluster is found in the second file
    second.write_text("clusters: [{name: c, cluster: {}}]\n")
    with pytest.raises(ConfigError, match=r"two: clusters\[0\] \(c\)\.cluster\.server: is required"):
        check_kubeconfig(f"{first}{os.pathsep}{second}")


@pytest.mark.parametrize(("change", "message"), [
    (("contexts: [", "contexts: 5\nx: ["), "contexts: must be a list"),
    (("server: 'https://127.0.0.1:6443'", "server: ''"), r"clusters\[0\] \(c\)\.cluster\.server: is required"),
    (("server: 'https://127.0.0.1:6443'", "server: 'ftp://x'"), "must be an http or https URL"),
    (("server: 'https://127.0.0.1:6443'", "server: 'https://h:99999'"), "must be an http or https URL"),
    (("cluster: c, user", "cluster: d, user"), r"context\.cluster: 'd' is not in clusters"),
    (("namespace: ops", "namespace: [ops]"), r"context\.namespace: must be a string"),
    (("current-context: a", "current-context: 7"), "current-context: must be a string"),
    (("current-context: a", "current-context: b"), r"context 'b' is not in contexts \(current-context\)"),
    (("users: [{name: u", "users: [{name: 3"), r"users\[0\]\.name: must be a non-empty string"),
])
def test_broken_fields_are_named(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    f = tmp_path / "config"
    f.write_text(GOOD.replace(*change))
    with pytest.raises(ConfigError, match=message):
        check_kubeconfig(str(f))

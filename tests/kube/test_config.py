"""Cluster configuration: explicit kubeconfig, context, $KUBECONFIG, in-cluster, and clear errors.

A kubeconfig pointing at the fake API server proves the whole path: the file is read, the chosen
context's server and bearer token are used for real requests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import ConfigError, Unavailable

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer


def write_kubeconfig(path: Path, servers: dict[str, str], current: str) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": n, "cluster": {"server": url}} for n, url in servers.items()],
        "users": [{"name": n, "user": {"token": f"token-{n}"}} for n in servers],
        "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in servers],
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No in-cluster variables, no $KUBECONFIG, and an empty home directory."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_explicit_kubeconfig_and_context(fake_api: FakeApiServer, tmp_path: Path, no_env: Path) -> None:
    fake_api.add(node_obj("n1"))
    path = write_kubeconfig(tmp_path / "kc.yaml", {"dead": "http://127.0.0.1:9", "fake": fake_api.url}, "dead")
    client = KubeClient.from_config(str(path), context="fake")
    assert [n["metadata"]["name"] for n in client.list_raw("Node").items] == ["n1"]
    assert fake_api.requests()[0].headers.get("authorization") == "Bearer token-fake"
    with pytest.raises(Unavailable):  # the current context: nothing listens on port 9
        KubeClient.from_config(str(path)).list_raw("Node")


def test_kubeconfig_env(fake_api: FakeApiServer, tmp_path: Path, no_env: Path,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_kubeconfig(tmp_path / "env.yaml", {"fake": fake_api.url}, "fake")
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert KubeClient.from_config().list_raw("Node").items == []


@pytest.mark.parametrize(("content", "context", "match"), [
    (None, None, "no such kubeconfig file"),
    ("{not: [valid", None, "invalid kubeconfig"),
    ("just a string", None, ""),
    ("valid", "nope", "nope"),
])
def test_bad_kubeconfig_names_the_file(tmp_path: Path, no_env: Path, content: str | None, context: str | None,
                                       match: str) -> None:
    path = tmp_path / "kc.yaml"
    if content == "valid":
        write_kubeconfig(path, {"a": "http://127.0.0.1:9"}, "a")
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        KubeClient.from_config(str(path), context=context)
    assert str(path) in str(info.value) and match in str(info.value)


def test_nothing_configured(no_env: Path) -> None:
    with pytest.raises(ConfigError, match=r"~/.kube/config: no kubeconfig file found"):
        KubeClient.from_config()


def test_in_cluster_without_service_account(no_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="in-cluster configuration"):
        KubeClient.from_config()


def test_kubeconfig_impersonation_fields_become_headers(fake_api: FakeApiServer, tmp_path: Path,
                                                        no_env: Path) -> None:
    # the official loader drops `as`; acting as the underlying (admin) identity instead would be a
    # silent privilege escalation, so kdesched sends the Impersonate-* headers itself
    path = write_kubeconfig(tmp_path / "kc.yaml", {"fake": fake_api.url}, "fake")
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"].update({"as": "system:serviceaccount:ns:sa", "as-groups": ["team"],
                                       "as-uid": "u-1", "as-user-extra": {"scopes.example/x": ["a"]}})
    path.write_text(yaml.safe_dump(config))
    KubeClient.from_config(str(path)).list_raw("Node")
    headers = fake_api.requests()[0].headers
    assert headers["authorization"] == "Bearer token-fake"
    assert headers["impersonate-user"] == "system:serviceaccount:ns:sa"
    assert headers["impersonate-group"] == "team"
    assert headers["impersonate-uid"] == "u-1"
    assert headers["impersonate-extra-scopes.example%2fx"] == "a"


def test_no_impersonation_headers_without_as(fake_api: FakeApiServer, tmp_path: Path, no_env: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc.yaml", {"fake": fake_api.url}, "fake")
    KubeClient.from_config(str(path)).list_raw("Node")
    assert not [h for h in fake_api.requests()[0].headers if h.startswith("impersonate-")]


@pytest.mark.parametrize(("fields", "match"), [
    ({"as-groups": ["g"]}, "without 'as'"),
    ({"as": ["x"]}, "'as' must be a string"),
    ({"as": "x", "as-groups": "g"}, "'as-groups' must be a list of strings"),
    ({"as": "x", "as-user-extra": {"k": "v"}}, "'as-user-extra' must map"),
])
def test_bad_impersonation_fields_name_the_field(tmp_path: Path, no_env: Path, fields: dict[str, object],
                                                 match: str) -> None:
    path = write_kubeconfig(tmp_path / "kc.yaml", {"a": "http://127.0.0.1:9"}, "a")
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"].update(fields)
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=match) as info:
        KubeClient.from_config(str(path))
    assert str(path) in str(info.value)

"""``kdesched serve`` never idles silently: the Lease namespace (flag, pod, kubeconfig), a missing
namespace or RBAC refusing a Lease -> a clear error at start naming the namespace and the fix,
exit 1; /readyz says why while not leader-capable."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from kdesched.cli.main import main
from kdesched.cli.serve import lease_namespace
from kdesched.kube.client import KubeClient
from kdesched.reactor.run.settings import parse_settings
from kdesched.reactor.serve.server import ReactorServer

from tests.builders import node_obj
from tests.fakeapi import FakeApiServer
from tests.reactor.policies import default_like_policy

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"


def server(kube: KubeClient, namespace: str = "kdesched", **kw: Any) -> ReactorServer:
    settings = parse_settings({}, env={"KDESCHED_LEASE_NAMESPACE": namespace})
    return ReactorServer(default_like_policy(), settings, kube, port=0, sweep_interval_seconds=0, identity="me", **kw)


def kubeconfig(tmp_path: Path, url: str, namespace: str | None = None) -> Path:
    ctx: dict[str, Any] = {"cluster": "fake", "user": "u", **({"namespace": namespace} if namespace else {})}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "contexts": [{"name": "fake", "context": ctx}, {"name": "other", "context": {**ctx, "namespace": "ops"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return path


def test_missing_namespace_is_an_error_at_start_naming_it_and_the_fix(fake_api: FakeApiServer,
                                                                      kube: KubeClient) -> None:
    fake_api.script("POST", LEASES.format(ns="nowhere"), [404])
    srv = server(kube, "nowhere")
    assert srv.run() == 1
    ok, why = srv.ready()
    assert not ok and "'nowhere' does not exist" in why and "--lease-namespace" in why
    assert "kubectl create namespace nowhere" in why and srv.watcher.lists == 0


def test_rbac_refusing_the_lease_is_an_error_at_start(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.script("GET", LEASES.format(ns="kdesched") + "/kdesched-leader", [403])
    srv = server(kube)
    assert srv.run() == 1
    ok, why = srv.ready()
    assert not ok and "RBAC refuses get on Lease kdesched/kdesched-leader" in why
    assert "kdesched, kdesched-leader" in why and "kdesched-lease" in why


def test_rbac_refusing_create_is_an_error_at_start(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.script("POST", LEASES.format(ns="kdesched"), [403])
    assert server(kube).run() == 1


def test_a_later_election_failure_turns_readyz_503_with_the_reason(fake_api: FakeApiServer,
                                                                   kube: KubeClient) -> None:
    from kdesched.kube.lease import LeaseLock

    assert LeaseLock(kube, "kdesched", "kdesched-leader", "other", 1).try_acquire()  # a standby at start
    srv = server(kube)
    assert srv.leadership.preflight() is False and srv.ready() == (True, "standby (not the leader)")
    # the leader's Lease expires; taking it over is refused (RBAC changed meanwhile)
    threading.Event().wait(1.2)
    fake_api.script("PUT", LEASES.format(ns="kdesched") + "/kdesched-leader", [403])
    assert srv.leadership.acquire() is False
    ok, why = srv.ready()
    assert not ok and why.startswith("not leader-capable: RBAC refuses")
    assert srv.leadership.acquire() is True and srv.ready()[0]


def test_readyz_is_not_ready_before_the_check(fake_api: FakeApiServer, kube: KubeClient) -> None:
    ok, why = server(kube).ready()
    assert not ok and why.startswith("starting: checking the Leases in namespace 'kdesched'")


def test_lease_namespace_resolution(tmp_path: Path) -> None:
    cfg = kubeconfig(tmp_path, "http://127.0.0.1:1", namespace="team-a")
    sa = tmp_path / "sa-namespace"
    sa.write_text("from-pod\n")
    assert lease_namespace("flag", str(cfg), None, env={"POD_NAMESPACE": "x"}) == ("flag", "--lease-namespace")
    assert lease_namespace(None, str(cfg), None, env={"KDESCHED_LEASE_NAMESPACE": "e"})[0] == "e"
    assert lease_namespace(None, None, None, env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, sa_file=str(sa)) == \
        ("from-pod", "the pod's namespace")
    assert lease_namespace(None, str(cfg), None, env={}) == ("team-a", "the kubeconfig context's namespace")
    assert lease_namespace(None, str(cfg), "other", env={})[0] == "ops"
    plain = tmp_path / "plain"
    plain.mkdir()
    assert lease_namespace(None, str(kubeconfig(plain, "http://127.0.0.1:1")), None, env={})[0] == "default"


def test_serve_command_exits_1_with_the_message(fake_api: FakeApiServer, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fake_api.add(node_obj("n1"))
    fake_api.script("POST", LEASES.format(ns="team-a"), [404])
    for key in ("KDESCHED_LEASE_NAMESPACE", "POD_NAMESPACE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(key, raising=False)
    cfg = kubeconfig(tmp_path, fake_api.url, namespace="team-a")
    code = main(["serve", "--kubeconfig", str(cfg), "--port", "0", "--host", "127.0.0.1", "--sweep-interval", "0"])
    assert code == 1
    assert "the Lease namespace 'team-a' does not exist" in capsys.readouterr().err
    assert main(["serve", "--kubeconfig", str(cfg), "--lease-namespace", "Bad_NS"]) == 2

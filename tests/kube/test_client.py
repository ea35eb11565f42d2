"""KubeClient over real HTTP against the in-repo fake API server.

Covers: paginated LIST (limit/continue, request count, kind filled in), fieldSelector and
labelSelector passed through, namespaced lists, GET (404 -> None), the Eviction body (uid
precondition, grace period, annotations) and its typed errors, Events (fields; failures never
raise), create/replace with resourceVersion conflicts, request accounting, connection failures.
"""

from __future__ import annotations

import pytest
from kdesched.kube.client import KubeClient, RequestStats
from kdesched.kube.errors import Conflict, Forbidden, NotFound, ServerError, TooManyRequests, Unavailable

from tests.builders import node_obj, pdb_obj, pod_obj
from tests.fakeapi import PDB_MESSAGE, FakeApiServer


def seed_pods(fake: FakeApiServer, count: int) -> None:
    fake.add(*(pod_obj(f"p{i}", node="n1" if i % 2 else "n2", labels={"app": "a" if i < 3 else "b"})
               for i in range(count)))


@pytest.mark.parametrize(("count", "page_size", "pages"), [
    (7, 3, 3), (6, 3, 2), (0, 3, 1), (7, 500, 1), (1, 1, 1), (5, 1, 5),
])
def test_list_paginates(fake_api: FakeApiServer, kube: KubeClient, count: int, page_size: int, pages: int) -> None:
    seed_pods(fake_api, count)
    result = kube.list_raw("Pod", page_size=page_size)
    assert sorted(p["metadata"]["name"] for p in result.items) == sorted(f"p{i}" for i in range(count))
    requests = fake_api.requests("GET", "/api/v1/pods")
    assert len(requests) == pages
    assert all(r.query["limit"] == str(page_size) for r in requests)
    assert "continue" not in requests[0].query and all("continue" in r.query for r in requests[1:])
    assert all(p["kind"] == "Pod" and p["apiVersion"] == "v1" for p in result.items)
    assert result.resource_version == str(fake_api.rv)


def test_list_resource_version_is_the_first_pages(fake_api: FakeApiServer, kube: KubeClient) -> None:
    seed_pods(fake_api, 4)
    first_rv = str(fake_api.rv)
    assert kube.list_raw("Pod", page_size=2).resource_version == first_rv


@pytest.mark.parametrize(("field", "label", "expected"), [
    ("spec.nodeName=n1", None, {"p1", "p3", "p5"}),
    ("spec.nodeName=n2", "app=a", {"p0", "p2"}),
    (None, "app in (b)", {"p3", "p4", "p5", "p6"}),
    (None, "app!=a", {"p3", "p4", "p5", "p6"}),
    ("spec.nodeName=nope", None, set()),
    ("metadata.name=p4", None, {"p4"}),
])
def test_list_selectors_are_sent_and_applied(fake_api: FakeApiServer, kube: KubeClient, field: str | None,
                                             label: str | None, expected: set[str]) -> None:
    seed_pods(fake_api, 7)
    result = kube.list_raw("Pod", field_selector=field, label_selector=label)
    assert {p["metadata"]["name"] for p in result.items} == expected
    (request,) = fake_api.requests("GET", "/api/v1/pods")
    assert request.query.get("fieldSelector") == field and request.query.get("labelSelector") == label


@pytest.mark.parametrize(("kind", "path"), [
    ("Node", "/api/v1/nodes"),
    ("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets"),
    ("PriorityClass", "/apis/scheduling.k8s.io/v1/priorityclasses"),
    ("Namespace", "/api/v1/namespaces"),
    ("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims"),
])
def test_list_paths_per_kind(fake_api: FakeApiServer, kube: KubeClient, kind: str, path: str) -> None:
    kube.list_raw(kind)
    assert [r.path for r in fake_api.requests()] == [path]


def test_namespaced_list(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(pod_obj("a", namespace="x"), pod_obj("b", namespace="y"))
    result = kube.list_raw("Pod", namespace="x")
    assert [p["metadata"]["name"] for p in result.items] == ["a"]
    assert fake_api.requests()[0].path == "/api/v1/namespaces/x/pods"


def test_bad_arguments_fail_before_any_request(fake_api: FakeApiServer, kube: KubeClient) -> None:
    with pytest.raises(ValueError, match="unsupported kind 'StatefulSet'"):
        kube.list_raw("StatefulSet")  # (Deployments are read one by one: surge-first moves)
    with pytest.raises(ValueError, match="cluster-scoped"):
        kube.list_raw("Node", namespace="x")
    with pytest.raises(ValueError, match="page_size"):
        kube.list_raw("Pod", page_size=0)
    assert fake_api.requests() == []


def test_get_raw(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(node_obj("n1"), pod_obj("p", namespace="ns"))
    assert kube.get_raw("Node", "missing") is None
    assert kube.get_raw("Pod", "p", "other") is None
    node = kube.get_raw("Node", "n1")
    assert node is not None and node["kind"] == "Node" and node["metadata"]["name"] == "n1"
    pod = kube.get_raw("Pod", "p", "ns")
    assert pod is not None and pod["metadata"]["namespace"] == "ns"


def test_evict_pod_sends_uid_precondition_grace_and_annotations(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(pod_obj("p", namespace="ns"))
    uid = fake_api.get("Pod", "p", "ns")["metadata"]["uid"]
    kube.evict_pod("ns", "p", uid=uid, grace_period_seconds=30, annotations={"kdesched.dev/reason": "why"})
    (request,) = fake_api.requests("POST")
    assert request.path == "/api/v1/namespaces/ns/pods/p/eviction"
    assert request.body == {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"kdesched.dev/reason": "why"}},
        "deleteOptions": {"gracePeriodSeconds": 30, "preconditions": {"uid": uid}},
    }
    assert fake_api.get("Pod", "p", "ns") is None


def test_evict_pod_without_options_sends_no_delete_options(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(pod_obj("p"))
    kube.evict_pod("default", "p", uid=None, grace_period_seconds=None, annotations={})
    assert "deleteOptions" not in fake_api.requests("POST")[0].body


def test_evict_pod_errors(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(pod_obj("p", labels={"app": "web"}), pod_obj("q", labels={"app": "db"}),
                 pdb_obj("web", {"app": "web"}, disruptions_allowed=0))
    with pytest.raises(NotFound, match='pods "gone" not found'):
        kube.evict_pod("default", "gone", uid=None, grace_period_seconds=None, annotations={})
    with pytest.raises(Conflict, match="Precondition failed"):
        kube.evict_pod("default", "q", uid="some-other-uid", grace_period_seconds=None, annotations={})
    with pytest.raises(TooManyRequests) as info:
        kube.evict_pod("default", "p", uid=None, grace_period_seconds=None, annotations={})
    assert info.value.message == PDB_MESSAGE and info.value.retry_after is None
    assert fake_api.get("Pod", "p", "default") is not None and fake_api.get("Pod", "q", "default") is not None


def test_evict_decrements_pdb_budget(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(pod_obj("a", labels={"app": "web"}), pod_obj("b", labels={"app": "web"}),
                 pdb_obj("web", {"app": "web"}, disruptions_allowed=1))
    kube.evict_pod("default", "a", uid=None, grace_period_seconds=None, annotations={})
    assert fake_api.get("PodDisruptionBudget", "web", "default")["status"]["disruptionsAllowed"] == 0
    with pytest.raises(TooManyRequests):
        kube.evict_pod("default", "b", uid=None, grace_period_seconds=None, annotations={})


@pytest.mark.parametrize(("code", "cls"), [(403, Forbidden), (500, ServerError), (503, ServerError)])
def test_scripted_eviction_failures(fake_api: FakeApiServer, kube: KubeClient, code: int, cls: type) -> None:
    fake_api.add(pod_obj("p"))
    fake_api.script_eviction("default/p", [code])
    with pytest.raises(cls):
        kube.evict_pod("default", "p", uid=None, grace_period_seconds=None, annotations={})
    kube.evict_pod("default", "p", uid=None, grace_period_seconds=None, annotations={})  # script used up
    assert fake_api.get("Pod", "p", "default") is None


def test_retry_after_header_reaches_the_error(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.add(pod_obj("p"))
    fake_api.script_eviction("default/p", [(429, 4)])
    with pytest.raises(TooManyRequests) as info:
        kube.evict_pod("default", "p", uid=None, grace_period_seconds=None, annotations={})
    assert info.value.retry_after == 4.0


def test_create_event(fake_api: FakeApiServer, kube: KubeClient) -> None:
    assert kube.create_event(namespace="ns", name="p", uid="u1", reason="RemoveDuplicates",
                             note="pod eviction from n1 node by kdesched")
    (event,) = fake_api.list("Event")
    assert fake_api.requests("POST")[0].path == "/apis/events.k8s.io/v1/namespaces/ns/events"
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p", "uid": "u1"}
    assert (event["reason"], event["note"], event["type"], event["action"]) == (
        "RemoveDuplicates", "pod eviction from n1 node by kdesched", "Normal", "Descheduled")
    assert event["reportingController"] == "kdesched.dev/descheduler"
    assert event["reportingInstance"] == "kdesched-test"
    assert event["metadata"]["name"].startswith("p.")
    # MicroTime: seconds plus exactly six fraction digits, UTC
    assert len(event["eventTime"]) == len("2026-01-02T03:04:05.000000Z") and event["eventTime"].endswith("Z")


def test_create_event_failure_is_logged_not_raised(fake_api: FakeApiServer, kube: KubeClient,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    fake_api.script("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", [403])
    assert kube.create_event(namespace="ns", name="p", reason="R", note="n") is False
    assert "could not post event R for Pod ns/p" in caplog.text
    fake_api.stop()
    assert kube.create_event(namespace="ns", name="p", reason="R", note="n") is False


def test_create_and_replace_with_resource_version(fake_api: FakeApiServer, kube: KubeClient) -> None:
    lease = {"metadata": {"name": "l", "namespace": "ns"}, "spec": {"holderIdentity": "a"}}
    created = kube.create_raw("Lease", lease)
    with pytest.raises(Conflict, match="already exists"):
        kube.create_raw("Lease", lease)
    stale = created["metadata"]["resourceVersion"]
    updated = kube.replace_raw("Lease", {**created, "spec": {"holderIdentity": "b"}})
    assert updated["spec"]["holderIdentity"] == "b" and updated["metadata"]["resourceVersion"] != stale
    with pytest.raises(Conflict, match="has been modified"):
        kube.replace_raw("Lease", {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": stale},
                                   "spec": {"holderIdentity": "c"}})
    with pytest.raises(NotFound):
        kube.replace_raw("Lease", {"metadata": {"name": "nope", "namespace": "ns"}, "spec": {}})


def test_request_stats(fake_api: FakeApiServer, kube: KubeClient) -> None:
    seed_pods(fake_api, 5)
    assert kube.stats == RequestStats(0, 0)
    kube.list_raw("Pod", page_size=2)
    kube.get_raw("Node", "missing")
    stats = kube.stats
    assert stats.requests == 4 == len(fake_api.requests())
    assert stats.bytes_read > 5 * 200  # five pods' JSON at least
    kube.reset_stats()
    assert kube.stats == RequestStats(0, 0)


def test_node_scoped_lists_read_fewer_bytes(fake_api: FakeApiServer, kube: KubeClient) -> None:
    seed_pods(fake_api, 20)
    kube.list_raw("Pod")
    full = kube.stats.bytes_read
    kube.reset_stats()
    kube.list_raw("Pod", field_selector="spec.nodeName=n1")
    assert 0 < kube.stats.bytes_read < full * 0.6


def test_connection_refused_is_unavailable(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.stop()
    with pytest.raises(Unavailable) as info:
        kube.list_raw("Node")
    assert info.value.status is None and "refused" in info.value.message.lower()
    assert kube.stats.requests == 1

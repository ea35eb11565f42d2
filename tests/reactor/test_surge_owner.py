"""Surge-first moves when the Deployment is written by someone else during the move: the replicas
are put back unless their owner (an HPA, a person, a GitOps tool) wrote them (docs/safety.md, "Safe
when the owner changes underneath"). Driven run after run against a stub of the API server's
Deployment (tests/reactor/surge_api.py); the real controllers are tests/realk8s/test_surge_owner.py's."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from kdesched.kube.client import KubeClient
from kdesched.kube.errors import NotFound
from kdesched.kube.owners import scale_deployment
from kdesched.model.owners import SURGE_MANAGER
from kdesched.reactor.run.surge import Ended

from tests.builders import NOW
from tests.fakeapi import FakeApiServer
from tests.reactor.surge_api import KEY, T0, Api, begun, drive, run, web


def outcomes(ended: list[Ended]) -> list[tuple[str, str]]:
    return [(e.outcome, e.why) for e in ended]


def test_the_scale_write_names_kdesched_as_its_field_manager(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """The replicas are judged kdesched's by the managedFields entry of its scale write, so the write
    must carry ``?fieldManager=``: without it the API server names the manager after the User-Agent."""
    with pytest.raises(NotFound):  # the fake serves no Deployments: only the request matters here
        scale_deployment(kube, "default", "web", 2, "41")
    sent = fake_api.requests("PUT")
    assert sent and sent[-1].query.get("fieldManager") == SURGE_MANAGER


@pytest.mark.parametrize("managed_fields", [True, False], ids=["managedFields", "no-managedFields"])
def test_an_annotation_mid_move_does_not_leave_the_replicas_surged(managed_fields: bool) -> None:
    """An annotation (kubectl annotate, Argo CD or Flux metadata) bumps the Deployment's generation but
    does not touch spec.replicas: they are still kdesched's, so the move goes on or is given up with
    the replicas put back; never ended with them at original+1. Until the Deployment controller has
    observed the write, it may be a template change: the move waits, the replicas kept."""
    api = Api(replicas=1, managed_fields=managed_fields)
    old = web(api, "web-1", "node-a")
    driver, ledger, started = begun(api, old)
    assert started == {KEY: ""} and api.replicas == 2
    api.annotations["team"] = "payments"
    api.spec_write()
    web(api, "web-2", "node-a", created=1, ready=False)  # the surge pod, scheduling
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 2, ended)
    assert KEY in ledger.surges and api.replicas == 2 and not ended
    api.controller_observes()
    ledger = drive(driver, ledger, api, T0 + 3, ended)
    assert KEY not in ledger.surges
    assert api.replicas == 1, f"left at {api.replicas} replicas after {outcomes(ended)}"


def test_an_annotation_the_controller_has_observed_leaves_the_move_going_on() -> None:
    """Once the Deployment controller has observed the annotation (no rollout), the replicas are still
    kdesched's (their managedFields entry is its scale write): the move goes on and ends done."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, ledger, _ = begun(api, old)
    api.annotations["team"] = "payments"
    api.spec_write()
    api.controller_observes()
    web(api, "web-2", "node-b", created=2, ready=True)
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 5, ended)
    assert ("evict", "web-1") in api.calls and ledger.surges[KEY].evicted
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    ledger = drive(driver, ledger, api, T0 + 6, ended)
    assert [o for o, _ in outcomes(ended)] == ["done"] and api.replicas == 1


def test_pausing_the_deployment_mid_move_does_not_leave_the_replicas_surged() -> None:
    """``kubectl rollout pause`` writes spec.paused, not the replicas: they are put back."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, ledger, _ = begun(api, old)
    api.spec_write(paused=True)
    api.controller_observes()
    ended: list[Ended] = []
    drive(driver, ledger, api, T0 + 2, ended)
    assert api.replicas == 1, f"left at {api.replicas} replicas after {outcomes(ended)}"


def test_a_rollout_seen_before_the_controller_acts_keeps_the_replicas_until_it_ends() -> None:
    """A settle between a template write and the Deployment controller's first sync (observedGeneration
    behind, no new ReplicaSet yet) counts it as a rollout: the replicas are kept (no scale-back during
    a rollout, kdesched.evictor.surge._held) until it is over, then put back."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, ledger, _ = begun(api, old)
    api.spec_write()  # kubectl set image: generation + 1, the controller not synced yet
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 2, ended)
    assert api.replicas == 2 and KEY in ledger.surges
    api.controller_observes()
    api.updated = 1
    web(api, "web-3", "node-b", created=3, ready=False, template="def")  # the rollout's first pod
    ledger = drive(driver, ledger, api, T0 + 3, ended, until=T0 + 10)
    assert api.replicas == 2 and KEY in ledger.surges
    del api.pods["web-1"]  # the rollout over: web-1 replaced
    web(api, "web-3", "node-b", created=3, template="def")
    web(api, "web-4", "node-c", created=8, template="def")
    api.updated = None
    drive(driver, ledger, api, T0 + 10, ended)
    assert api.replicas == 1, f"left at {api.replicas} replicas after {outcomes(ended)}"


def test_an_annotation_after_the_eviction_does_not_leave_the_replicas_surged() -> None:
    """After the eviction, an annotation lands before the pod is seen terminating: the scale-back still
    follows once it is."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, ledger, _ = begun(api, old)
    web(api, "web-2", "node-b", created=2, ready=True)
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 5, ended)
    assert ("evict", "web-1") in api.calls and ledger.surges[KEY].evicted
    api.annotations["deployment.kubernetes.io/note"] = "x"
    api.spec_write()
    api.pods["web-1"] = replace(old, deletion_time=NOW)
    ledger = run(driver, ledger, api, T0 + 6, ended)  # not observed by the controller yet: maybe a rollout
    assert api.replicas == 2 and KEY in ledger.surges
    api.controller_observes()
    drive(driver, ledger, api, T0 + 7, ended)
    assert api.replicas == 1, f"left at {api.replicas} replicas after {outcomes(ended)}"


def test_replicas_set_back_to_the_surged_value_by_an_hpa_are_the_hpas() -> None:
    """An HPA that scales 2 -> 3 -> 2 during the move leaves the value kdesched had set, but written by
    the HPA (its managedFields entry owns the replicas now): the owner's value stays."""
    api = Api(replicas=1)
    old = web(api, "web-1", "node-a")
    driver, ledger, _ = begun(api, old)
    api.scale_by("kube-controller-manager", 3)
    api.scale_by("kube-controller-manager", 2)
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 2, ended)
    assert KEY not in ledger.surges and api.replicas == 2
    assert [o for o, _ in outcomes(ended)] == ["overridden"]
    assert [c for c in api.calls if c[0] == "scale"] == [("scale", 2)]  # only kdesched's scale-up


def test_a_rollout_mid_move_keeps_the_extra_replica_until_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    """``kubectl set image`` right after the scale-up (2 -> 3): the new ReplicaSet gets the room (web-3,
    web-4 of template def, not Ready yet), the old one keeps web-1 and web-0 (both on node-a). A
    scale-back now would be spread over the two ReplicaSets by the Deployment controller, and with
    these sizes the old one takes it: its ReplicaSet would delete web-0 or web-1, Ready originals
    (kdesched.evictor.surge._held). So the +1 stays while the rollout runs, past the move's deadline
    too; once it is over (web-1 and web-0 replaced), the replicas go back."""
    api = Api(replicas=2)
    old = web(api, "web-1", "node-a")
    web(api, "web-0", "node-a")
    driver, ledger, _ = begun(api, old)
    api.spec_write()  # the template
    api.controller_observes()
    api.updated = 2
    for i in (3, 4):
        web(api, f"web-{i}", f"node-{i}", created=2, ready=False, template="def")
    ended: list[Ended] = []
    with caplog.at_level(logging.INFO, logger="kdesched.reactor.surge"):
        ledger = drive(driver, ledger, api, T0 + 2, ended, until=T0 + 200)
    assert KEY in ledger.surges and api.replicas == 3, f"scaled back during the rollout: {outcomes(ended)}"
    assert [c for c in api.calls if c[0] == "scale"] == [("scale", 3)] and not ended
    said = [r.getMessage() for r in caplog.records if "until the rollout ends" in r.getMessage()]
    assert len(said) == 7 and "kept at 3 replicas" in said[0]  # every LATE_EVICT_SECONDS, not every run
    held = [e for e in api.events if e["reason"] == "SurgeMoveHeld"]
    assert held and held[0]["name"] == "web" and "rolling out" in held[0]["note"]
    # the rollout over: three pods of template def Ready, the old ones gone
    for name in ("web-1", "web-0"):
        del api.pods[name]
    for i in (3, 4, 5):
        web(api, f"web-{i}", f"node-{i}", created=150, template="def")
    api.updated = None
    drive(driver, ledger, api, T0 + 200, ended)
    assert api.replicas == 2 and [o for o, _ in outcomes(ended)] == ["done"]

"""A Deployment as the API server keeps it, for driving surge-first moves over many runs
(kdesched.reactor.run.surge.Surges against a stateful stub client).

What matters for the moves, as kube-apiserver does it: the scale subresource is conditional on
resourceVersion; every spec or annotation write bumps ``metadata.generation``
(registry/apps/deployment/strategy.go PrepareForUpdate), and the Deployment controller observes it
a moment later; with ``managed_fields``, the managedFields entry owning ``f:spec.f:replicas`` is
the field manager of the last write that changed the replicas (an Update takes a changed field over
from every other manager). tests/fakeapi.py serves no Deployments, hence this stub.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdesched.evictor.ledger import InFlight, Ledger, Move, Settled
from kdesched.evictor.surge import Surge
from kdesched.kube.client import ListResult
from kdesched.kube.errors import Conflict, TooManyRequests
from kdesched.model.records import Pod
from kdesched.reactor.run.surge import Chosen, Ended, Surges

from tests.builders import NOW, pod, ts

T0 = NOW.timestamp()
KEY = "Deployment/default/web"
PDB_429 = TooManyRequests(429, "Too Many Requests", "Cannot evict pod as it would violate the pod's disruption budget.")
READY = [{"type": "Ready", "status": "True"}]
NOT_READY = [{"type": "Ready", "status": "False"}]
STRATEGY = "RemovePodsViolatingNodeTaints"


class Api:
    """The Deployment ``web`` (and its ReplicaSet ``web-abc``), the workload's pods, and the calls made."""

    def __init__(self, replicas: int = 1, generation: int = 5, *, managed_fields: bool = True) -> None:
        self.replicas, self.generation, self.rv = replicas, generation, 40
        self.observed = generation
        self.paused = False
        self.updated: int | None = None  # status.updatedReplicas during a rollout (None: all pods updated)
        self.annotations: dict[str, str] = {}
        self.managed_fields = managed_fields
        self.replicas_manager = "kubectl-client-side-apply"  # who created it with its replicas
        self.fail_after_write: Exception | None = None  # the scale lands, the answer is lost
        self.refuse: Exception | None = None  # every eviction refused with it (a PDB's 429, a webhook)
        self.calls: list[tuple[str, Any]] = []
        self.events: list[dict[str, Any]] = []  # the Events posted
        self.pods: dict[str, Pod] = {}

    # someone else's writes
    def spec_write(self, **kw: Any) -> None:
        """An update of the Deployment that leaves its replicas alone (an annotation, ``paused``, the
        template): a new generation, not observed by the controller yet."""
        for k, v in kw.items():
            setattr(self, k, v)
        self.generation += 1
        self.rv += 1

    def scale_by(self, manager: str, replicas: int) -> None:
        """Someone else (an HPA: kube-controller-manager; a person: kubectl) sets the replicas."""
        if replicas != self.replicas:
            self.replicas_manager = manager
        self.replicas = replicas
        self.generation += 1
        self.observed = self.generation
        self.rv += 1

    def controller_observes(self) -> None:
        self.observed = self.generation
        self.rv += 1

    # the KubeClient calls a surge-first move makes
    def get_raw(self, kind: str, name: str, namespace: str | None = None, **_: Any) -> dict[str, Any] | None:
        if kind == "Deployment":
            meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": str(self.rv),
                                    "generation": self.generation, "annotations": dict(self.annotations)}
            if self.managed_fields:
                meta["managedFields"] = [
                    {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}},
                    {"manager": self.replicas_manager, "operation": "Update", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
            return {"metadata": meta,
                    "spec": {"replicas": self.replicas, "paused": self.paused,
                             "selector": {"matchLabels": {"app": "web"}}},
                    "status": {"observedGeneration": self.observed, "replicas": self.replicas,
                               "updatedReplicas": self.replicas if self.updated is None else self.updated}}
        return {"metadata": {"name": name, "namespace": namespace,
                             "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True}]},
                "spec": {"replicas": self.replicas}, "status": {}}

    def replace_subresource(self, kind: str, name: str, namespace: str, subresource: str,
                            obj: Mapping[str, Any], *, field_manager: str = "") -> dict[str, Any]:
        if obj["metadata"]["resourceVersion"] != str(self.rv):
            raise Conflict(409, "Conflict", "the object has been modified")
        self.calls.append(("scale", obj["spec"]["replicas"]))
        if obj["spec"]["replicas"] != self.replicas:
            self.replicas_manager = field_manager or "unnamed"
        self.replicas = obj["spec"]["replicas"]
        self.generation += 1
        self.observed = self.generation
        self.rv += 1
        if self.fail_after_write is not None:
            exc, self.fail_after_write = self.fail_after_write, None
            raise exc
        return dict(obj)

    def list_raw(self, kind: str, *, namespace: str | None = None, field_selector: str = "", **_: Any) -> ListResult:
        made = self.pods.get(field_selector.removeprefix("metadata.name="))
        if made is None:
            return ListResult([], "1")
        meta: dict[str, Any] = {"name": made.name, "namespace": namespace, "uid": made.uid}
        if made.terminating:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return ListResult([{"metadata": meta}], "1")

    def evict_pod(self, namespace: str, name: str, **kw: Any) -> None:
        self.calls.append(("evict", name))
        if self.refuse is not None:
            raise self.refuse

    def create_event(self, **kw: Any) -> bool:
        self.events.append(kw)
        return True

    def list_pods(self, namespace: str, label_selector: str) -> list[Pod]:
        return list(self.pods.values())


def web(api: Api, name: str, node: str, created: float = -3600, ready: bool = True, template: str = "abc") -> Pod:
    """A pod of ``web`` (``created``: seconds after T0; Ready 3 s later), kept in ``api``."""
    conditions = [{**READY[0], "lastTransitionTime": ts(created + 3)}] if ready else NOT_READY
    made = pod(name, node, owner_name=f"web-{template}", labels={"app": "web", "pod-template-hash": template},
               created=created, conditions=conditions)
    api.pods[name] = made
    return made


def surge_of(api: Api, old: Pod, at: float = T0) -> Surge:
    """The move kdesched records for ``old`` at ``at`` (the generation read, plus its own scale-up)."""
    return Surge(old.uid, old.key, old.node_name, "web", "web-abc", api.replicas, api.replicas + 1, at, at + 120,
                 STRATEGY, api.generation + 1)


def begun(api: Api, old: Pod, driver: Surges | None = None) -> tuple[Surges, Ledger, dict[str, str]]:
    """A move as kdesched begins it: recorded in the ledger at T0, then the conditional scale-up on
    the version read."""
    s = surge_of(api, old)
    f = InFlight(old.uid, old.key, old.node_name, T0 + 0.25, scope=f"node:node-a:{STRATEGY}")
    ledger = Ledger(moves={KEY: Move(STRATEGY, T0, T0, 1, 1, (f,))}, workloads={KEY: T0 + 0.25},
                    nodes={"node-a": T0 + 0.25}, node_strategies={"node-a": STRATEGY}, surges={KEY: s})
    driver = driver or Surges(api, enabled=True, timeout_seconds=120)  # type: ignore[arg-type]
    started = driver.start(Chosen(None, surges={KEY: (s, str(api.rv))}))  # type: ignore[arg-type]
    return driver, ledger, started


def run(driver: Surges, ledger: Ledger, api: Api, now: float, ended: list[Ended]) -> Ledger:
    """One run's settle (its ledger write assumed to go through, and what it claimed then sent)."""
    new = driver.advance(Settled(ledger), {KEY: list(api.pods.values())}, now, ended).ledger
    driver.evict_claimed(new)
    return new


def drive(driver: Surges, ledger: Ledger, api: Api, start: float, ended: list[Ended], until: float = T0 + 400) -> Ledger:
    """A run every second from ``start`` until the move leaves the ledger (or ``until``)."""
    now = start
    while KEY in ledger.surges and now < until:
        ledger = run(driver, ledger, api, now, ended)
        now += 1.0
    return ledger


def evictions_of(api: Api) -> list[str]:
    """The pods evicted through ``api``, in order."""
    return [c[1] for c in api.calls if c[0] == "evict"]


def three_on_node_a_evicted(api: Api, *, first_created: float = -3600) -> tuple[Pod, Surges, Ledger, list[Ended]]:
    """3 replicas on node-a (web-1, ``first_created``, moved; web-2, web-3), the extra pod web-9 Ready
    on spare-1, web-1 evicted at T0 + 6: the old pod, the driver, the ledger, the moves ended."""
    old = web(api, "web-1", "node-a", created=first_created)
    web(api, "web-2", "node-a")
    web(api, "web-3", "node-a")
    driver, ledger, _ = begun(api, old)
    web(api, "web-9", "spare-1", created=2)
    ended: list[Ended] = []
    ledger = run(driver, ledger, api, T0 + 6, ended)
    assert evictions_of(api) == ["web-1"] and api.replicas == 4
    return old, driver, ledger, ended


def doubled_up_and_refused(api: Api) -> tuple[Surges, Ledger, Pod]:
    """Two originals on node-a (web-1 moved, web-0), every eviction refused by the PDB, the extra pod
    web-2 Ready on node-b: past its timeout a scale-back would delete an original, so the move keeps
    the +1 and tries the eviction on. The driver, the ledger, the old pod."""
    api.refuse = PDB_429
    old = web(api, "web-1", "node-a")
    web(api, "web-0", "node-a")
    driver, ledger, _ = begun(api, old)
    web(api, "web-2", "node-b", created=2)
    return driver, ledger, old

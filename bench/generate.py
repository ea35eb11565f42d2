"""Synthetic Kubernetes clusters for benchmarks: realistic shape, deterministic for a seed.

Why: kdesched's performance target (a 150,000-pod decision in seconds) can only be checked on a
cluster that looks like a real one, and no real 5,000-node snapshot can be shipped in a
repository. This module builds one: a ``v1`` ``List`` of Namespaces, PriorityClasses, Nodes,
PersistentVolumeClaims, PodDisruptionBudgets and Pods, shaped like the output of
``kubectl get nodes,pods,pdb,priorityclasses,namespaces,pvc -A -o json`` (managedFields omitted),
with the story that gives every default strategy real work:

* nodes in 3 zones and a few pools (general, memory, compute, infra, gpu); about 4% of the nodes
  carry ``dedicated=gpu:NoSchedule`` and 1% ``dedicated=gpu:NoExecute``; about 3% are new and
  empty (only DaemonSet pods) and about 10% are crowded (RemoveDuplicates, LowNodeUtilization);
* DaemonSet pods on every node; ReplicaSet pods (2-10 replicas, some clumped on one node);
  StatefulSet pods with PVCs; Job pods that Succeeded or Failed; a few bare pods;
* a few pods that violate what they ask for, as happens when taints or labels change after
  scheduling: pods not tolerating a gpu taint, pods off their nodeSelector / required node
  affinity, co-located replicas with required pod anti-affinity, zone-skewed spread constraints;
* PDBs (some with ``disruptionsAllowed: 0``), priorities including system-critical ones,
  a ~1 KB ``kubectl.kubernetes.io/last-applied-configuration`` annotation on some pods.

The same ``seed`` (and ``now``) always yields byte-identical output. Objects share immutable
sub-structures (default tolerations, the service-account volume) to keep generation fast; the
YAML writer disables anchors so the output stays plain.

CLI: ``python -m bench.generate --nodes 500 --pods-per-node 30 --seed 1 -o /tmp/c.json``.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import itertools
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

GENERATED_AT = datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)
"""Default clock of a generated cluster: ages are relative to it. Pass it as ``--now`` to
``kdesched simulate`` to replay the snapshot exactly as generated."""

REGION = "eu-west-1"
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
ZONE_LABEL = "topology.kubernetes.io/zone"
HOST_LABEL = "kubernetes.io/hostname"
POOL_LABEL = "node.kdesched.dev/pool"
GPU_TAINT_KEY = "dedicated"

SYSTEM_NAMESPACES = ("kube-system", "monitoring", "logging", "ingress-nginx", "cert-manager")
TEAM_NAMESPACES = (
    "payments", "checkout", "catalog", "search", "identity", "orders", "inventory", "shipping",
    "analytics", "ml-platform", "media", "notifications", "reporting", "frontend", "gateway",
)
WORDS = (
    "api", "web", "worker", "cart", "auth", "billing", "ledger", "catalog", "orders", "gateway",
    "frontend", "notifier", "reports", "recommender", "profile", "session", "media", "indexer",
    "scheduler", "exporter", "pricing", "quotes", "stream", "cache-warmer", "thumbnailer",
)
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet

# (cpu request, weight) and (memory MiB, weight): skewed to small pods, as in real clusters.
CPU_REQUESTS = (("50m", 50, 24), ("100m", 100, 28), ("200m", 200, 18), ("250m", 250, 10), ("500m", 500, 10),
                ("750m", 750, 3), ("1", 1000, 4), ("1500m", 1500, 1), ("2", 2000, 2))
MEM_REQUESTS = (("64Mi", 64, 12), ("128Mi", 128, 18), ("256Mi", 256, 20), ("512Mi", 512, 20), ("768Mi", 768, 8),
                ("1Gi", 1024, 11), ("2Gi", 2048, 7), ("3Gi", 3072, 2), ("4Gi", 4096, 2))

# (pool, share of nodes, [(cores, memory GiB, weight)], extra labels, taint effect or "")
NODE_POOLS: tuple[tuple[str, float, tuple[tuple[int, int, int], ...]], ...] = (
    ("general", 0.70, ((8, 32, 3), (16, 64, 5), (32, 128, 2))),
    ("memory", 0.11, ((16, 128, 1),)),
    ("compute", 0.08, ((32, 64, 1),)),
    ("infra", 0.06, ((8, 32, 1),)),
    ("gpu", 0.05, ((32, 128, 1),)),
)

PRIORITY_CLASSES = (
    # name, value, globalDefault, description
    ("system-node-critical", 2000001000, False, "Used for system critical pods that must not be moved from their current node."),
    ("system-cluster-critical", 2000000000, False, "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."),
    ("platform-high", 1000000, False, "Ingress, DNS and other platform services."),
    ("business-critical", 100000, False, "Customer-facing services."),
    ("default-priority", 0, True, "Default for workloads that set no priority class."),
    ("batch-low", -100, False, "Batch jobs; preempted first."),
)
_PRIO = {name: value for name, value, _, _ in PRIORITY_CLASSES}


@dataclass
class _Node:
    index: int
    name: str
    ip: str
    zone: str
    pool: str
    cpu: int  # allocatable millicores
    mem: int  # allocatable MiB
    taint: str = ""  # "" | NoSchedule | NoExecute
    new: bool = False
    ready: bool = True
    cores: int = 0
    mem_gi: int = 0
    weight: float = 1.0  # placement weight: crowded nodes weigh more, new nodes nothing
    cpu_used: int = 0
    mem_used: int = 0
    pods: int = 0
    workload_pods: int = 0

    def fits(self, cpu: int, mem: int) -> bool:
        return self.pods < 110 and self.cpu_used + cpu <= self.cpu and self.mem_used + mem <= self.mem

    def take(self, cpu: int, mem: int) -> None:
        self.cpu_used += cpu
        self.mem_used += mem
        self.pods += 1


@dataclass
class _Group:
    """Candidate nodes of a placement constraint with cumulative weights (crowded nodes weigh more)."""

    nodes: list[_Node]
    cum: list[float] = field(default_factory=list)
    cursor: int = 0

    def __post_init__(self) -> None:
        total = 0.0
        for n in self.nodes:
            total += n.weight
            self.cum.append(total)

    def pick(self, rng: random.Random, cpu: int, mem: int, exclude: set[int] | None = None) -> _Node | None:
        if not self.nodes:
            return None
        total = self.cum[-1]
        for _ in range(8):
            n = self.nodes[bisect.bisect_right(self.cum, rng.random() * total)]
            if n.fits(cpu, mem) and (exclude is None or n.index not in exclude):
                return n
        # fallback: the next node with room, round robin, so a full cluster fills up evenly
        count = len(self.nodes)
        for step in range(count):
            n = self.nodes[(self.cursor + step) % count]
            if n.fits(cpu, mem) and (exclude is None or n.index not in exclude):
                self.cursor = (self.cursor + step + 1) % count
                return n
        return None


class _Ids:
    """Deterministic uids, name suffixes and IPs from the generator's random stream."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._pod_ip = 0
        # every suffix handed out: names built from them must be unique (kdesched refuses a snapshot
        # holding one object twice), and 5 random characters collide by the birthday bound long
        # before 5,000 DaemonSet pods of one DaemonSet (150,000 pods: several collisions per cluster)
        self._issued: set[str] = set()

    def uid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"

    def suffix(self, length: int) -> str:
        """A random suffix of ``length`` characters never handed out before (drawn again on a
        collision: still deterministic for a seed)."""
        while True:
            bits = self.rng.getrandbits(5 * length)
            out = []
            for _ in range(length):
                out.append(_ALPHABET[(bits & 31) % 27])
                bits >>= 5
            drawn = "".join(out)
            if drawn not in self._issued:
                self._issued.add(drawn)
                return drawn

    def pod_ip(self) -> str:
        self._pod_ip += 1
        i = self._pod_ip
        return f"100.{64 + (i >> 16) % 64}.{(i >> 8) & 255}.{i & 255}"


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity_mi(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


_CPU_CUM = tuple(itertools.accumulate(w for _, _, w in CPU_REQUESTS))
_MEM_CUM = tuple(itertools.accumulate(w for _, _, w in MEM_REQUESTS))


def _weighted(rng: random.Random, table: Sequence[tuple[str, int, int]], cum: Sequence[int]) -> tuple[str, int]:
    name, value, _ = table[bisect.bisect_right(cum, rng.random() * cum[-1])]
    return name, value


class _Generator:
    def __init__(self, nodes: int, pods_per_node: int, seed: int, now: datetime) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        if pods_per_node < 1:
            raise ValueError("pods_per_node must be at least 1")
        self.n_nodes = nodes
        self.pods_per_node = pods_per_node
        self.rng = random.Random(seed)
        self.ids = _Ids(self.rng)
        self.now = now
        # a pool of timestamps (formatting 150k distinct times is needless work)
        self.times_old = [_ts(now - timedelta(days=self.rng.uniform(2, 120))) for _ in range(512)]
        self.times_recent = [_ts(now - timedelta(hours=self.rng.uniform(1, 47))) for _ in range(256)]
        self.items_pods: list[dict[str, Any]] = []
        self.items_pvcs: list[dict[str, Any]] = []
        self.items_pdbs: list[dict[str, Any]] = []
        self.nodes: list[_Node] = []
        self.pending: int = 0
        self.ns_uids = {ns: self.ids.uid() for ns in SYSTEM_NAMESPACES + TEAM_NAMESPACES}
        self._sa_volumes: dict[str, dict[str, Any]] = {}
        self._shared_default_tolerations = [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ]
        self._gpu_tolerations = [{"key": GPU_TAINT_KEY, "operator": "Equal", "value": "gpu"}] + self._shared_default_tolerations
        self._ds_tolerations = [{"operator": "Exists"}]

    # -- nodes -----------------------------------------------------------------------------------
    def make_nodes(self) -> None:
        rng = self.rng
        n = self.n_nodes
        pools: list[str] = []
        for pool, share, _ in NODE_POOLS[1:]:
            pools += [pool] * round(share * n)
        pools = pools[: n]
        pools += ["general"] * (n - len(pools))
        rng.shuffle(pools)
        n_new = max(1, round(0.03 * n)) if n >= 4 else 0
        n_notready = n // 500
        n_noexec = max(1, round(0.01 * n)) if n >= 20 else 0
        sizes = {pool: sizes for pool, _, sizes in NODE_POOLS}
        general_idx = [i for i, p in enumerate(pools) if p == "general"]
        new_idx = set(rng.sample(general_idx, min(n_new, len(general_idx))))
        rest = [i for i in general_idx if i not in new_idx]
        notready_idx = set(rng.sample(rest, min(n_notready, len(rest))))
        gpu_idx = [i for i, p in enumerate(pools) if p == "gpu"]
        noexec_idx = set(gpu_idx[:n_noexec])
        for i, pool in enumerate(pools):
            cores, mem_gi, _ = rng.choices(sizes[pool], weights=[w for _, _, w in sizes[pool]])[0]
            ip = f"10.{20 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
            node = _Node(
                index=i, name=f"ip-{ip.replace('.', '-')}.{REGION}.compute.internal", ip=ip, zone=ZONES[i % 3],
                pool=pool, cpu=cores * 1000 - 90, mem=mem_gi * 1024 - 600 - mem_gi * 16,
                taint=("NoExecute" if i in noexec_idx else "NoSchedule") if pool == "gpu" else "",
                new=i in new_idx, ready=i not in notready_idx, cores=cores, mem_gi=mem_gi,
            )
            self.nodes.append(node)
        # placement weights: ~10% crowded, ~6% sparse, the rest normal with jitter
        for node in self.nodes:
            r = rng.random()
            node.weight = 0.0 if node.new else (2.2 if r < 0.10 else 0.12 if r < 0.16 else rng.uniform(0.7, 1.2))

    def node_obj(self, node: _Node) -> dict[str, Any]:
        cores, mem_gi = node.cores, node.mem_gi
        created = _ts(self.now - timedelta(minutes=12)) if node.new else self.times_old[node.index % len(self.times_old)]
        labels = {
            "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", HOST_LABEL: node.name,
            "node.kubernetes.io/instance-type": f"m6i.{ {8: '2xlarge', 16: '4xlarge', 32: '8xlarge'}[cores] }",
            "topology.kubernetes.io/region": REGION, ZONE_LABEL: node.zone,
            "failure-domain.beta.kubernetes.io/zone": node.zone, POOL_LABEL: node.pool,
        }
        if node.pool == "infra":
            labels["node-role.kubernetes.io/infra"] = ""
        else:
            labels["node-role.kubernetes.io/worker"] = ""
        if node.pool == "gpu":
            labels["nvidia.com/gpu.present"] = "true"
        capacity = {"cpu": str(cores), "ephemeral-storage": "104845292Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                    "memory": f"{mem_gi * 1024 * 1024 - 300000}Ki", "pods": "110"}
        allocatable = {"cpu": f"{node.cpu}m", "ephemeral-storage": "95551679124", "hugepages-1Gi": "0",
                       "hugepages-2Mi": "0", "memory": f"{node.mem}Mi", "pods": "110"}
        if node.pool == "gpu":
            capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = "4"
        hb = _ts(self.now - timedelta(seconds=20 + node.index % 40))
        conds = [
            {"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": hb, "lastTransitionTime": created}
            for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
        ]
        conds.append({"type": "Ready", "status": "True" if node.ready else "Unknown",
                      "reason": "KubeletReady" if node.ready else "NodeStatusUnknown",
                      "message": "kubelet is posting ready status" if node.ready else "Kubelet stopped posting node status.",
                      "lastHeartbeatTime": hb, "lastTransitionTime": created})
        spec: dict[str, Any] = {"providerID": f"aws:///{node.zone}/i-0{node.index:016x}"}
        taints = []
        if node.taint:
            taints.append({"key": GPU_TAINT_KEY, "value": "gpu", "effect": node.taint})
        if not node.ready:
            taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": hb})
            taints.append({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": hb})
        if taints:
            spec["taints"] = taints
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "uid": self.ids.uid(), "resourceVersion": str(100000 + node.index * 7),
                         "creationTimestamp": created, "labels": labels,
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": spec,
            "status": {
                "capacity": capacity, "allocatable": allocatable, "conditions": conds,
                "addresses": [{"type": "InternalIP", "address": node.ip},
                              {"type": "InternalDNS", "address": node.name}, {"type": "Hostname", "address": node.name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"architecture": "amd64", "bootID": self.ids.uid(), "containerRuntimeVersion": "containerd://1.7.27",
                             "kernelVersion": "6.1.134-152.225.amzn2023.x86_64", "kubeProxyVersion": "v1.32.3",
                             "kubeletVersion": "v1.32.3-eks-473151a", "machineID": f"{node.index:032x}",
                             "operatingSystem": "linux", "osImage": "Amazon Linux 2023.7.20250512",
                             "systemUUID": f"ec2{node.index:029x}"},
            },
        }

    # -- pods ------------------------------------------------------------------------------------
    def sa_volume(self, namespace: str) -> dict[str, Any]:
        vol = self._sa_volumes.get(namespace)
        if vol is None:
            vol = {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}
            self._sa_volumes[namespace] = vol
        return vol

    def pod_obj(self, *, name: str, namespace: str, labels: dict[str, str], owner: dict[str, Any] | None,
                containers: list[dict[str, Any]], node: _Node | None, phase: str = "Running",
                priority_class: str = "", annotations: dict[str, str] | None = None,
                tolerations: list[dict[str, Any]] | None = None, node_selector: dict[str, str] | None = None,
                affinity: dict[str, Any] | None = None, spread: list[dict[str, Any]] | None = None,
                volumes: list[dict[str, Any]] | None = None, init_containers: list[dict[str, Any]] | None = None,
                restart_policy: str = "Always", restarts: int = 0, exit_code: int | None = None,
                created: str | None = None, hostname: str | None = None) -> dict[str, Any]:
        rng = self.rng
        created = created or self.times_old[rng.getrandbits(9)]
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": self.ids.uid(),
                                "resourceVersion": str(rng.randrange(1_000_000, 99_000_000)),
                                "creationTimestamp": created, "labels": labels}
        if owner is not None:
            meta["generateName"] = name[: name.rfind("-") + 1]
            meta["ownerReferences"] = [owner]
        if annotations:
            meta["annotations"] = annotations
        spec: dict[str, Any] = {
            "volumes": [self.sa_volume(namespace)] + (volumes or []),
        }
        if init_containers:
            spec["initContainers"] = init_containers
        spec["containers"] = containers
        spec.update({"restartPolicy": restart_policy, "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                     "serviceAccountName": "default", "serviceAccount": "default"})
        if node_selector:
            spec["nodeSelector"] = node_selector
        if node is not None:
            spec["nodeName"] = node.name
        if hostname:
            spec["hostname"] = hostname
        spec["securityContext"] = {}
        if affinity:
            spec["affinity"] = affinity
        spec["schedulerName"] = "default-scheduler"
        spec["tolerations"] = tolerations if tolerations is not None else self._shared_default_tolerations
        if priority_class:
            spec["priorityClassName"] = priority_class
        spec["priority"] = _PRIO.get(priority_class or "default-priority", 0)
        spec["enableServiceLinks"] = True
        spec["preemptionPolicy"] = "PreemptLowerPriority"
        if spread:
            spec["topologySpreadConstraints"] = spread
        status: dict[str, Any] = {"phase": phase}
        started = created
        if node is None:
            status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                     "message": f"0/{self.n_nodes} nodes are available: insufficient cpu.",
                                     "lastProbeTime": None, "lastTransitionTime": created}]
            status["qosClass"] = "Burstable"
            return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
        ready = "True" if phase == "Running" else "False"
        status["conditions"] = [
            {"type": "PodReadyToStartContainers", "status": "True" if phase == "Running" else "False", "lastProbeTime": None, "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": started},
            {"type": "Ready", "status": ready, "lastProbeTime": None, "lastTransitionTime": started,
             **({} if phase == "Running" else {"reason": "PodCompleted"})},
            {"type": "ContainersReady", "status": ready, "lastProbeTime": None, "lastTransitionTime": started,
             **({} if phase == "Running" else {"reason": "PodCompleted"})},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": created},
        ]
        status["hostIP"] = node.ip
        status["hostIPs"] = [{"ip": node.ip}]
        pod_ip = self.ids.pod_ip()
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
        status["startTime"] = started
        if init_containers:
            status["initContainerStatuses"] = [
                {"name": c["name"], "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                                             "finishedAt": started, "containerID": f"containerd://{rng.getrandbits(256):064x}"}},
                 "lastState": {}, "ready": True, "restartCount": 0, "image": c["image"],
                 "imageID": c["image"] + f"@sha256:{rng.getrandbits(256):064x}", "containerID": f"containerd://{rng.getrandbits(256):064x}",
                 "started": False}
                for c in init_containers
            ]
        statuses = []
        for i, c in enumerate(containers):
            cid = f"containerd://{rng.getrandbits(256):064x}"
            if phase == "Running":
                state: dict[str, Any] = {"running": {"startedAt": started}}
            else:
                code = exit_code if exit_code is not None else 0
                state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                        "startedAt": started, "finishedAt": started, "containerID": cid}}
            cs: dict[str, Any] = {"name": c["name"], "state": state, "lastState": {}, "ready": phase == "Running",
                                  "restartCount": restarts if i == 0 else 0, "image": c["image"],
                                  "imageID": c["image"].split(":")[0] + f"@sha256:{rng.getrandbits(256):064x}",
                                  "containerID": cid, "started": phase == "Running"}
            if restarts and i == 0:
                cs["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": started,
                                                  "finishedAt": started, "containerID": cid}}
            statuses.append(cs)
        status["containerStatuses"] = statuses
        status["qosClass"] = "Burstable"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    def container(self, name: str, image: str, cpu: str, mem: str, *, limit_mem: bool = True,
                  mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        res: dict[str, Any] = {"requests": {"cpu": cpu, "memory": mem}}
        if limit_mem:
            res["limits"] = {"memory": mem}
        return {
            "name": name, "image": image,
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "resources": res,
            "volumeMounts": (mounts or []) + [{"name": "kube-api-access", "readOnly": True,
                                               "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }

    def last_applied(self, kind: str, name: str, namespace: str, labels: dict[str, str], image: str) -> str:
        """A ~1 KB ``kubectl apply`` annotation, as real objects carry."""
        body = {
            "apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind,
            "metadata": {"annotations": {"team": namespace, "owner": f"{namespace}@example.com"},
                         "labels": labels, "name": name, "namespace": namespace},
            "spec": {"containers": [{"name": name, "image": image, "env": [
                {"name": "LOG_LEVEL", "value": "info"}, {"name": "OTEL_EXPORTER_OTLP_ENDPOINT",
                                                          "value": "http://otel-collector.monitoring:4317"},
                {"name": "JAVA_TOOL_OPTIONS", "value": "-XX:MaxRAMPercentage=75 -XX:+UseG1GC"}],
                "ports": [{"containerPort": 8080, "name": "http"}, {"containerPort": 9090, "name": "metrics"}],
                "readinessProbe": {"httpGet": {"path": "/healthz/ready", "port": "http"}, "periodSeconds": 10},
                "livenessProbe": {"httpGet": {"path": "/healthz/live", "port": "http"}, "periodSeconds": 20},
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}}}]},
        }
        return json.dumps(body, separators=(",", ":")) + "\n"

    # -- workloads -------------------------------------------------------------------------------
    def build(self) -> dict[str, Any]:
        rng = self.rng
        self.make_nodes()
        nodes = self.nodes
        total = self.n_nodes * self.pods_per_node
        n_ds = min(4, max(1, self.pods_per_node // 8))
        remaining = total - n_ds * self.n_nodes
        if remaining < 0:  # fewer pods per node than DaemonSets: still one DaemonSet pod per node
            n_ds, remaining = 1, total - self.n_nodes
        # DaemonSets first: every node, whatever its taints (they tolerate everything)
        ds_specs = (("kube-system", "kube-proxy", "100m", "128Mi", "system-node-critical", True),
                    ("kube-system", "aws-node", "50m", "64Mi", "system-node-critical", True),
                    ("logging", "fluent-bit", "100m", "256Mi", "system-node-critical", True),
                    ("monitoring", "node-exporter", "50m", "64Mi", "system-cluster-critical", False))[:n_ds]
        for ns, ds_name, cpu, mem, prio, host_path in ds_specs:
            ds_uid = self.ids.uid()
            ds_hash = str(rng.randrange(10**9, 10**10))
            image = f"registry.k8s.io/{ds_name}:v1.32.3"
            owner: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds_name, "uid": ds_uid,
                     "controller": True, "blockOwnerDeletion": True}
            cpu_m = int(cpu[:-1])
            mem_mi = int(mem[:-2])
            vols = [{"name": "varlog", "hostPath": {"path": "/var/log", "type": ""}}] if host_path else None
            for ds_node in nodes:
                ds_node.take(cpu_m, mem_mi)
                aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [ds_node.name]}]}]}}}
                self.items_pods.append(self.pod_obj(
                    name=f"{ds_name}-{self.ids.suffix(5)}", namespace=ns, owner=owner,
                    labels={"app.kubernetes.io/name": ds_name, "controller-revision-hash": ds_hash, "pod-template-generation": "3"},
                    containers=[self.container(ds_name, image, cpu, mem,
                                               mounts=[{"name": "varlog", "mountPath": "/var/log"}] if host_path else None)],
                    node=ds_node, priority_class=prio, tolerations=self._ds_tolerations, affinity=aff, volumes=vols,
                    created=self.times_old[ds_node.index % 512] if not ds_node.new else _ts(self.now - timedelta(minutes=11)),
                ))
        # placement groups (only Ready, not new-and-empty... new nodes get nothing but DaemonSets)
        eligible = [n for n in nodes if n.ready and not n.new]
        untainted = [n for n in eligible if not n.taint]
        any_group = _Group(untainted)
        # pods from before the gpu taint was added: a few land on NoSchedule gpu nodes
        legacy_gpu = [n for n in eligible if n.taint == "NoSchedule"]
        legacy_group = _Group(legacy_gpu)
        groups = {
            "any": any_group,
            "general": _Group([n for n in untainted if n.pool == "general"]),
            "memory": _Group([n for n in untainted if n.pool == "memory"]),
            "compute": _Group([n for n in untainted if n.pool == "compute"]),
            "infra": _Group([n for n in untainted if n.pool == "infra"]),
            "gpu": _Group([n for n in eligible if n.pool == "gpu"]),
        }
        zone_groups = {z: _Group([n for n in untainted if n.zone == z]) for z in ZONES}
        two_zones = _Group([n for n in untainted if n.zone != ZONES[2]])

        counter = 0
        n_sts = int(remaining * 0.03)
        n_jobs = int(remaining * 0.04)
        n_bare = max(0, int(remaining * 0.004))
        n_rs = remaining - n_sts - n_jobs - n_bare
        made = 0

        def choose_ns() -> str:
            return TEAM_NAMESPACES[rng.randrange(len(TEAM_NAMESPACES))] if rng.random() < 0.9 else SYSTEM_NAMESPACES[1 + rng.randrange(4)]

        def requests() -> tuple[str, int, str, int]:
            cpu, cpu_m = _weighted(rng, CPU_REQUESTS, _CPU_CUM)
            mem, mem_mi = _weighted(rng, MEM_REQUESTS, _MEM_CUM)
            return cpu, cpu_m, mem, mem_mi

        # -- ReplicaSets ---------------------------------------------------------------------------
        while made < n_rs:
            counter += 1
            replicas = min(n_rs - made, rng.choices((2, 3, 4, 5, 6, 8, 10), weights=(25, 25, 15, 12, 10, 8, 5))[0])
            ns = choose_ns()
            word = WORDS[rng.randrange(len(WORDS))]
            deploy = f"{word}-{counter}"
            rs_hash = self.ids.suffix(10)
            rs_name = f"{deploy}-{rs_hash}"
            app_labels = {"app": deploy, "app.kubernetes.io/name": deploy, "app.kubernetes.io/part-of": ns,
                          "pod-template-hash": rs_hash, "version": f"v{1 + counter % 7}"}
            image = f"registry.example.com/{ns}/{word}:1.{counter % 40}.{rng.randrange(20)}"
            cpu, cpu_m, mem, mem_mi = requests()
            owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": self.ids.uid(),
                     "controller": True, "blockOwnerDeletion": True}
            r = rng.random()
            selector: dict[str, str] | None = None
            affinity: dict[str, Any] | None = None
            tolerations: list[dict[str, Any]] | None = None
            group, kind = any_group, "plain"
            if ns in ("monitoring", "logging", "ingress-nginx", "cert-manager") and r < 0.4:
                group, selector, kind = groups["infra"], {"node-role.kubernetes.io/infra": ""}, "selector"
            elif r < 0.04:
                group, selector, tolerations, kind = groups["gpu"], {POOL_LABEL: "gpu"}, self._gpu_tolerations, "selector"
            elif r < 0.12:
                group, selector, kind = groups["memory"], {POOL_LABEL: "memory"}, "selector"
            elif r < 0.17:
                group, kind = two_zones, "affinity"
                affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [ZONES[0], ZONES[1]]}]}]}}}
            spread = None
            if kind != "selector" and rng.random() < 0.10:
                spread = [{"maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
                           "labelSelector": {"matchLabels": {"app": deploy}}, "matchLabelKeys": ["pod-template-hash"]}]
            anti = kind == "plain" and spread is None and rng.random() < 0.03
            if anti:
                affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": deploy}}, "topologyKey": HOST_LABEL}]}}
            elif kind == "plain" and rng.random() < 0.15:
                affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": deploy}},
                                                        "topologyKey": HOST_LABEL}}]}}
            clump = not anti and spread is None and rng.random() < 0.12 and replicas >= 3
            skewed = spread is not None and rng.random() < 0.25
            anti_violation = anti and rng.random() < 0.2 and replicas >= 2
            prio = rng.choices(("", "business-critical", "platform-high", "batch-low"), weights=(70, 20, 5, 5))[0]
            if ns in ("monitoring", "ingress-nginx", "cert-manager"):
                prio = "platform-high" if ns != "cert-manager" else "system-cluster-critical"
            annotations: dict[str, str] = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
            if rng.random() < 0.10:
                annotations["kubectl.kubernetes.io/last-applied-configuration"] = self.last_applied(
                    "Pod", deploy, ns, {"app": deploy}, image)
            if rng.random() < 0.2:
                annotations["kubectl.kubernetes.io/restartedAt"] = self.times_recent[rng.getrandbits(8)]
            sidecar = rng.random() < 0.2
            init = rng.random() < 0.15
            empty_dir = rng.random() < 0.08
            containers = [self.container(word, image, cpu, mem,
                                         mounts=[{"name": "tmp", "mountPath": "/tmp"}] if empty_dir else None)]
            if sidecar:
                containers.append(self.container("istio-proxy", "docker.io/istio/proxyv2:1.24.2", "100m", "128Mi"))
                cpu_m += 100
                mem_mi += 128
            inits = [self.container("migrate", image, "250m", "256Mi")] if init else None
            if init:  # the effective request is the larger of the containers' sum and the init step
                cpu_m, mem_mi = max(cpu_m, 250), max(mem_mi, 256)
            vols = [{"name": "tmp", "emptyDir": {}}] if empty_dir else None
            used: set[int] = set()
            running = 0
            clump_node: _Node | None = None
            zone_start = rng.randrange(3)
            created = self.times_recent[rng.getrandbits(8)] if rng.random() < 0.2 else self.times_old[rng.getrandbits(9)]
            for k in range(replicas):
                node: _Node | None
                if kind in ("selector", "affinity") and rng.random() < 0.03:
                    # node labels changed after scheduling: the pod now sits off its selector/affinity
                    node = (zone_groups[ZONES[2]] if kind == "affinity" else any_group).pick(rng, cpu_m, mem_mi)
                elif kind == "plain" and rng.random() < 0.004:
                    node = legacy_group.pick(rng, cpu_m, mem_mi) or any_group.pick(rng, cpu_m, mem_mi)
                elif clump and k < 3:
                    if clump_node is None or not clump_node.fits(cpu_m, mem_mi):
                        clump_node = group.pick(rng, cpu_m, mem_mi)
                    node = clump_node
                elif spread is not None:
                    zone = ZONES[zone_start] if skewed and k < (replicas + 1) // 2 + 1 else ZONES[(zone_start + k) % 3]
                    zg = zone_groups[zone] if group is any_group or zone != ZONES[2] else zone_groups[ZONES[0]]
                    node = zg.pick(rng, cpu_m, mem_mi)
                elif anti:
                    if anti_violation and k == 1 and used:
                        prev = nodes[next(iter(used))]
                        node = prev if prev.fits(cpu_m, mem_mi) else group.pick(rng, cpu_m, mem_mi, used)
                    else:
                        node = group.pick(rng, cpu_m, mem_mi, used)
                else:
                    node = group.pick(rng, cpu_m, mem_mi)
                if node is None:
                    self.pending += 1
                else:
                    node.take(cpu_m, mem_mi)
                    node.workload_pods += 1
                    used.add(node.index)
                    running += 1
                restarts = rng.randrange(6, 60) if rng.random() < 0.02 else (rng.randrange(1, 3) if rng.random() < 0.05 else 0)
                self.items_pods.append(self.pod_obj(
                    name=f"{rs_name}-{self.ids.suffix(5)}", namespace=ns, owner=owner, labels=app_labels,
                    containers=containers, node=node, phase="Running" if node is not None else "Pending",
                    priority_class=prio, annotations=annotations, tolerations=tolerations, node_selector=selector,
                    affinity=affinity, spread=spread, volumes=vols, init_containers=inits, restarts=restarts,
                    created=created,
                ))
            if replicas >= 3 and rng.random() < 0.35:
                if rng.random() < 0.1:  # a rollout or a strict budget: nothing may be disrupted
                    spec, desired = {"minAvailable": replicas}, replicas
                elif rng.random() < 0.5:
                    spec, desired = {"minAvailable": replicas - 1}, replicas - 1
                else:
                    spec, desired = {"maxUnavailable": 1}, replicas - 1
                self.pdb(ns, deploy, {"app": deploy}, spec, running, desired, max(0, running - desired), replicas)
            made += replicas

        # -- StatefulSets with PVCs -----------------------------------------------------------------
        made = 0
        while made < n_sts:
            counter += 1
            replicas = min(n_sts - made, rng.choice((1, 3, 3, 5)))
            ns = choose_ns()
            sts = f"{rng.choice(('postgres', 'redis', 'kafka', 'zookeeper', 'elasticsearch', 'etcd'))}-{counter}"
            owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts, "uid": self.ids.uid(),
                     "controller": True, "blockOwnerDeletion": True}
            rev = f"{sts}-{self.ids.suffix(10)}"
            cpu, cpu_m, mem, mem_mi = requests()
            image = f"docker.io/bitnami/{sts.rsplit('-', 1)[0]}:16.{counter % 9}.0"
            storage_class = rng.choice(("gp3", "gp3", "io2", "efs-sc"))
            running = 0
            for k in range(replicas):
                pod_name = f"{sts}-{k}"
                claim = f"data-{pod_name}"
                node = any_group.pick(rng, cpu_m, mem_mi)
                if node is None:
                    self.pending += 1
                else:
                    node.take(cpu_m, mem_mi)
                    node.workload_pods += 1
                    running += 1
                labels = {"app.kubernetes.io/name": sts, "controller-revision-hash": rev,
                          "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(k)}
                self.items_pods.append(self.pod_obj(
                    name=pod_name, namespace=ns, owner=owner, labels=labels,
                    containers=[self.container(sts.rsplit("-", 1)[0], image, cpu, mem,
                                               mounts=[{"name": "data", "mountPath": "/data"}])],
                    node=node, phase="Running" if node is not None else "Pending", priority_class="business-critical",
                    volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}], hostname=pod_name,
                ))
                self.items_pvcs.append({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim, "namespace": ns, "uid": self.ids.uid(), "resourceVersion": str(rng.randrange(10**6, 10**8)),
                                 "creationTimestamp": self.times_old[rng.getrandbits(9)],
                                 "labels": {"app.kubernetes.io/name": sts},
                                 "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                                 "volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"},
                                 "finalizers": ["kubernetes.io/pvc-protection"]},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}},
                             "storageClassName": storage_class, "volumeMode": "Filesystem",
                             "volumeName": f"pvc-{self.ids.uid()}"},
                    "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "50Gi"}},
                })
            if replicas >= 3:
                self.pdb(ns, sts, {"app.kubernetes.io/name": sts}, {"maxUnavailable": 1}, running,
                         replicas - 1, max(0, running - (replicas - 1)), replicas)
            made += replicas

        # -- Jobs: completed and failed pods -------------------------------------------------------
        made = 0
        while made < n_jobs:
            counter += 1
            ns = choose_ns()
            job = f"{rng.choice(('nightly-report', 'db-backup', 'etl', 'reindex', 'cleanup'))}-{29000000 + counter}"
            completions = min(n_jobs - made, rng.choice((1, 1, 2, 3)))
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": self.ids.uid(),
                     "controller": True, "blockOwnerDeletion": True}
            failed_job = rng.random() < 0.2
            for _ in range(completions):
                cpu, cpu_m, mem, mem_mi = requests()
                node = any_group.pick(rng, 0, 0)  # terminal pods hold no resources
                phase = "Failed" if failed_job else "Succeeded"
                if node is not None:
                    node.pods += 1
                    node.workload_pods += 1
                else:
                    self.pending += 1
                self.items_pods.append(self.pod_obj(
                    name=f"{job}-{self.ids.suffix(5)}", namespace=ns, owner=owner,
                    labels={"batch.kubernetes.io/job-name": job, "job-name": job,
                            "batch.kubernetes.io/controller-uid": owner["uid"], "controller-uid": owner["uid"]},
                    containers=[self.container("job", f"registry.example.com/{ns}/batch:2.{counter % 9}", cpu, mem)],
                    node=node, phase=phase if node is not None else "Pending", priority_class="batch-low",
                    restart_policy="Never", exit_code=1 if failed_job else 0,
                    created=self.times_recent[rng.getrandbits(8)],
                ))
            made += completions

        # -- bare pods (kubectl run / debugging) ----------------------------------------------------
        for i in range(n_bare):
            ns = choose_ns()
            name = f"debug-{self.ids.suffix(6)}"
            cpu, cpu_m, mem, mem_mi = requests()
            node = any_group.pick(rng, cpu_m, mem_mi)
            if node is None:
                self.pending += 1
            else:
                node.take(cpu_m, mem_mi)
                node.workload_pods += 1
            image = "docker.io/library/busybox:1.37"
            self.items_pods.append(self.pod_obj(
                name=name, namespace=ns, owner=None, labels={"run": name}, containers=[self.container(name, image, cpu, mem)],
                node=node, phase="Running" if node is not None else "Pending",
                annotations={"kubectl.kubernetes.io/last-applied-configuration": self.last_applied("Pod", name, ns, {"run": name}, image)},
            ))

        items: list[dict[str, Any]] = []
        items += [self.namespace_obj(ns) for ns in SYSTEM_NAMESPACES + TEAM_NAMESPACES + ("default",)]
        items += [self.priority_class_obj(*pc) for pc in PRIORITY_CLASSES]
        items += [self.node_obj(n) for n in nodes]
        items += self.items_pvcs
        items += self.items_pdbs
        items += self.items_pods
        return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}

    def pdb(self, ns: str, name: str, selector: dict[str, str], spec: dict[str, Any], healthy: int,
            desired: int, allowed: int, expected: int) -> None:
        t = self.times_old[self.rng.getrandbits(9)]
        self.items_pdbs.append({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns, "uid": self.ids.uid(), "generation": 1,
                         "resourceVersion": str(self.rng.randrange(10**6, 10**8)), "creationTimestamp": t},
            "spec": {**spec, "selector": {"matchLabels": selector}},
            "status": {"currentHealthy": healthy, "desiredHealthy": desired, "disruptionsAllowed": allowed,
                       "expectedPods": expected, "observedGeneration": 1,
                       "conditions": [{"type": "DisruptionAllowed", "status": "True" if allowed else "False",
                                       "reason": "SufficientPods" if allowed else "InsufficientPods",
                                       "message": "", "observedGeneration": 1, "lastTransitionTime": t}]},
        })

    def namespace_obj(self, ns: str) -> dict[str, Any]:
        uid = self.ns_uids.get(ns) or self.ids.uid()
        labels = {"kubernetes.io/metadata.name": ns}
        if ns in TEAM_NAMESPACES:
            labels["team"] = ns
            labels["istio-injection"] = "enabled"
        return {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": uid, "resourceVersion": str(1000 + len(ns)),
                             "creationTimestamp": self.times_old[len(ns)], "labels": labels},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}

    def priority_class_obj(self, name: str, value: int, default: bool, description: str) -> dict[str, Any]:
        obj: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                               "metadata": {"name": name, "uid": self.ids.uid(), "resourceVersion": str(90 + value % 97),
                                            "creationTimestamp": self.times_old[0]},
                               "value": value, "preemptionPolicy": "PreemptLowerPriority", "description": description}
        if default:
            obj["globalDefault"] = True
        return obj


def generate(nodes: int, pods_per_node: int, *, seed: int = 1, now: datetime = GENERATED_AT) -> dict[str, Any]:
    """A synthetic cluster as a ``v1`` ``List``: exactly ``nodes`` Nodes and
    ``nodes * pods_per_node`` Pods (plus namespaces, priority classes, PVCs and PDBs).

    Deterministic for ``(nodes, pods_per_node, seed, now)``. Pods that fit nowhere stay Pending
    with no ``nodeName``, as the scheduler would leave them.

    The cyclic garbage collector is paused while building: the objects form no cycles, and
    without the pause CPython rescans the growing heap again and again (about 2x slower).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Generator(nodes, pods_per_node, seed, now).build()
    finally:
        if was_enabled:
            gc.enable()


def dumps(cluster: dict[str, Any], fmt: str = "json") -> str:
    """Serialize as compact JSON (the C encoder, one pass) or plain YAML (no anchors)."""
    if fmt == "json":
        return json.dumps(cluster, separators=(",", ":"))
    if fmt == "yaml":
        import yaml

        base: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

        class _PlainDumper(base):
            def ignore_aliases(self, data: Any) -> bool:  # shared sub-objects must not become anchors
                return True

        return yaml.dump(cluster, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)
    raise ValueError(f"unknown format {fmt!r}: expected json or yaml")


def write(cluster: dict[str, Any], path: str, fmt: str = "json") -> int:
    """Write ``cluster`` to ``path`` (``-`` = stdout); returns the number of bytes written."""
    text = dumps(cluster, fmt)
    data = text.encode("utf-8")
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with open(path, "wb") as f:
            f.write(data)
    return len(data)


def _parse_now(text: str) -> datetime:
    value = datetime.fromisoformat(text)  # Python 3.11 accepts a trailing Z
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--now", default=_ts(GENERATED_AT), help="clock of the generated cluster (RFC 3339)")
    parser.add_argument("-o", "--output", default="-", help="file to write; - for stdout (default)")
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.pods_per_node < 1:
        parser.error("--nodes and --pods-per-node must be at least 1")
    try:
        now = _parse_now(args.now)
    except ValueError:
        parser.error(f"--now {args.now!r}: expected an RFC 3339 time such as 2026-01-15T12:00:00Z")
    t0 = time.perf_counter()
    cluster = generate(args.nodes, args.pods_per_node, seed=args.seed, now=now)
    t1 = time.perf_counter()
    size = write(cluster, args.output, args.format)
    t2 = time.perf_counter()
    pods = sum(1 for o in cluster["items"] if o["kind"] == "Pod")
    print(f"generated {args.nodes} nodes, {pods} pods, {len(cluster['items'])} objects in {t1 - t0:.1f}s; "
          f"wrote {size / 1e6:.1f} MB ({args.format}) in {t2 - t1:.1f}s to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

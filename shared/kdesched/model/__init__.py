"""Compact, immutable records built from raw Kubernetes API JSON, and the snapshot that holds them.

Why: the official client's generated models are far too slow and large for 150,000 pods; the
decision layers only need a few dozen fields per object. Everything here is standard library
(plus PyYAML for reading snapshot files) and has no notion of an API server.
"""

from kdesched.model.errors import ModelError
from kdesched.model.quantity import parse_quantity
from kdesched.model.records import (
    Namespace,
    Node,
    OwnerRef,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    PriorityClass,
    Taint,
    Toleration,
)
from kdesched.model.selectors import LabelSelector
from kdesched.model.snapshot import Snapshot

__all__ = [
    "LabelSelector",
    "ModelError",
    "Namespace",
    "Node",
    "OwnerRef",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "PriorityClass",
    "Snapshot",
    "Taint",
    "Toleration",
    "parse_quantity",
]

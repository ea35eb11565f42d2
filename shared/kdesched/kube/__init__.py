"""The kube layer: the only code in kdesched that talks to the API server.

Why a layer of its own: everything above it (evictor, engine, reactor, functions) works on raw
JSON, records and typed errors, and can be tested without a cluster; only this package imports
``kubernetes`` (enforced by import-linter in pyproject.toml).
"""

from kdesched.kube.client import RESOURCES, KubeClient, ListResult, RequestStats, Resource
from kdesched.kube.errors import (
    ApiError,
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    ServerError,
    TooManyRequests,
    Unavailable,
)
from kdesched.kube.lease import LeaseLock
from kdesched.kube.snapshot import load_live_snapshot

__all__ = [
    "RESOURCES",
    "ApiError",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "Gone",
    "KubeClient",
    "LeaseLock",
    "ListResult",
    "NotFound",
    "RequestStats",
    "Resource",
    "ServerError",
    "TooManyRequests",
    "Unavailable",
    "load_live_snapshot",
]

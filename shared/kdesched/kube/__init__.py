"""The kube layer: the only code in kdesched that talks to the API server.

Why a layer of its own: everything above it (evictor, engine, reactor, functions) works on raw
JSON, records and typed errors, and can be tested without a cluster; only this package imports
``kubernetes`` (enforced by import-linter in pyproject.toml).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kdesched.kube.client import KubeClient, ListResult
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
    from kdesched.kube.resources import RESOURCES, Resource
    from kdesched.kube.snapshot import load_live_snapshot
    from kdesched.kube.transport import RequestStats

# Loaded on first use (PEP 562): importing kdesched.kube.errors must not load the kubernetes
# client, whose import `kdesched simulate` never needs (its cost: docs/benchmarks.md, "Figures
# behind the code").
_LAZY = {
    "RESOURCES": "resources", "KubeClient": "client", "ListResult": "client", "RequestStats": "transport",
    "Resource": "resources", "ApiError": "errors", "ConfigError": "errors", "Conflict": "errors",
    "Forbidden": "errors", "Gone": "errors", "NotFound": "errors", "ServerError": "errors",
    "TooManyRequests": "errors", "Unavailable": "errors", "LeaseLock": "lease",
    "load_live_snapshot": "snapshot",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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

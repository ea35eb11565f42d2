"""What the kube layer's errors mean for a function's answer, by type: for the functions that talk
to the API server (the evicting functions, the classifier, ``serve``'s endpoint).

Why not in :mod:`kdesched_functions.common`: importing :mod:`kdesched.kube.errors` loads tenacity,
~0.008 s of every start, and ``deadletter`` never calls the API server (docs/reactor.md, "Cold
start"). An app is given these answers when it is built (``create_function_app(answers=...)``);
kdesched's own errors carry theirs (:mod:`kdesched.errors`).
"""

from __future__ import annotations

from kdesched.kube.errors import (
    ApiError,
    ConfigError,
    Forbidden,
    Gone,
    ServerError,
    TooManyRequests,
    Unavailable,
)

from kdesched_functions.common import TypeAnswers

API_ANSWERS: TypeAnswers = (
    (Forbidden, 500, "the API server refused (check RBAC): "),
    ((Unavailable, ServerError, TooManyRequests, Gone), 503, "API server unavailable: "),
    (ApiError, 500, "API error: "),
    (ConfigError, 500, "cluster configuration: "),
)
"""The kube layer's errors, first match wins: 503 (with Retry-After) for an API server that is
failing or unreachable for now, 500 for one that refuses or for a configuration that cannot work."""

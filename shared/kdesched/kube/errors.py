"""Typed API errors, mapped once from HTTP responses and transport failures.

Why: callers decide on *what happened* (the pod is gone, a PDB said no, the server is overloaded,
the connection dropped), never on ``ApiException.status`` integers or urllib3 exception classes.
The mapping lives here and only here (kopf ``clients/errors.py::check_response``); the k8s
``Status`` message is kept, trimmed, because it is what an operator needs to read ("Cannot evict
pod as it would violate the pod's disruption budget.").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

MAX_MESSAGE_CHARS = 400


class ConfigError(Exception):
    """No usable cluster configuration (kubeconfig file, context or in-cluster service account)."""


class ApiError(Exception):
    """The API server answered with an error, or could not be reached (``status`` is None)."""

    retryable = False

    def __init__(self, status: int | None, reason: str, message: str, *,
                 status_reason: str = "", details: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        # the k8s Status ``reason`` (NotFound, AlreadyExists, Conflict, TooManyRequests...)
        self.status_reason = status_reason
        self.details: Mapping[str, Any] = details or {}
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"HTTP {self.status} {self.reason}".strip() if self.status is not None else self.reason
        return f"{head}: {self.message}" if self.message else head


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class Forbidden(ApiError):
    """403 (and 401): RBAC or authentication refused the request; retrying will not help."""


class Conflict(ApiError):
    """409: a resourceVersion or uid precondition failed, or the object already exists."""


class Gone(ApiError):
    """410: the resourceVersion is too old (watch or continue token); re-list and start again."""


class TooManyRequests(ApiError):
    """429: throttled, or an eviction refused by a PodDisruptionBudget. ``retry_after`` in seconds."""

    retryable = True

    def __init__(self, status: int | None, reason: str, message: str, *, retry_after: float | None = None,
                 status_reason: str = "", details: Mapping[str, Any] | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(status, reason, message, status_reason=status_reason, details=details)


class ServerError(ApiError):
    """5xx: the server failed; worth retrying with backoff."""

    retryable = True


class Unavailable(ApiError):
    """No HTTP answer at all: connection refused or reset, timeout, TLS failure."""

    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(None, "Unavailable", message)


def trim(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_retry_after(value: Any) -> float | None:
    """``Retry-After`` as seconds (the API server sends an integer; HTTP dates are not used)."""
    if value in (None, ""):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None


def _header(headers: Any, name: str) -> Any:
    if headers is None:
        return None
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    value = getter(name)
    return value if value is not None else getter(name.lower())


def error_from_response(status: int, reason: str, body: bytes | str | None, headers: Any = None) -> ApiError:
    """The typed error for an HTTP error response; the body is a k8s ``Status`` when the API sent one."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else (body or "")
    message, status_reason, details = "", "", {}
    try:
        payload = json.loads(text) if text else None
    except ValueError:
        payload = None
    if isinstance(payload, Mapping) and payload.get("kind") == "Status":
        message = str(payload.get("message") or "")
        status_reason = str(payload.get("reason") or "")
        raw_details = payload.get("details")
        details = dict(raw_details) if isinstance(raw_details, Mapping) else {}
    elif text:
        message = text
    return error_from_status(status, reason, trim(message), status_reason=status_reason, details=details,
                             retry_after_header=_header(headers, "Retry-After"))


def error_from_status(status: int, reason: str, message: str, *, status_reason: str = "",
                      details: Mapping[str, Any] | None = None, retry_after_header: Any = None) -> ApiError:
    """The typed error for a status code (also used for ``ERROR`` events of a watch stream)."""
    kwargs: dict[str, Any] = {"status_reason": status_reason, "details": details}
    if status == 404:
        return NotFound(status, reason or "Not Found", message, **kwargs)
    if status in (401, 403):
        return Forbidden(status, reason or "Forbidden", message, **kwargs)
    if status == 409:
        return Conflict(status, reason or "Conflict", message, **kwargs)
    if status == 410:
        return Gone(status, reason or "Gone", message, **kwargs)
    if status == 429:
        retry_after = _parse_retry_after(retry_after_header)
        if retry_after is None and details:
            retry_after = _parse_retry_after(details.get("retryAfterSeconds"))
        return TooManyRequests(status, reason or "Too Many Requests", message, retry_after=retry_after, **kwargs)
    if 500 <= status <= 599:
        return ServerError(status, reason or "Server Error", message, **kwargs)
    return ApiError(status, reason or "Error", message, **kwargs)


def error_from_api_exception(exc: Any) -> ApiError:
    """Map a ``kubernetes.client.exceptions.ApiException`` (duck-typed: status, reason, body, headers).

    The client reports transport-level TLS failures as status 0: that is :class:`Unavailable`.
    """
    status = getattr(exc, "status", None)
    reason = str(getattr(exc, "reason", "") or "")
    if not isinstance(status, int) or status == 0:
        return Unavailable(trim(reason or str(exc)))
    return error_from_response(status, reason, getattr(exc, "body", None), getattr(exc, "headers", None))


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def transport_reason(exc: BaseException) -> str:
    """An operator's words for a transport failure: "connection refused", "timed out", "TLS
    handshake failed: ...", "name not resolved: ..." instead of urllib3's nested class names."""
    cause: BaseException = exc
    for _ in range(5):  # MaxRetryError.reason -> NewConnectionError / SSLError / ... (bounded walk)
        inner = getattr(cause, "reason", None)
        if not isinstance(inner, BaseException):
            break
        cause = inner
    name = type(cause).__name__
    text = str(cause)
    if "SSL" in name or "CERTIFICATE" in text.upper():
        return f"TLS handshake failed ({trim(text, 200)})"
    if "Timeout" in name or "timed out" in text:
        return "timed out"
    found = _ERRNO.search(text)
    if found:
        words = found.group(1).strip().rstrip(".")
        words = words[:1].lower() + words[1:]
        if "resolution" in words or "not known" in words or "nodename" in words:
            return f"the host name could not be resolved ({words})"
        return words
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror[:1].lower() + cause.strerror[1:]
    return trim(f"{name}: {text}", 300)


def unavailable_from(exc: BaseException) -> Unavailable:
    """A transport failure (urllib3 error, OSError) as :class:`Unavailable`, in an operator's words
    (:func:`transport_reason`)."""
    return Unavailable(f"cannot connect: {transport_reason(exc)}")

"""Typed API errors, mapped once from HTTP responses and transport failures.

Why: callers decide on *what happened* (the pod is gone, a PDB said no, the server is overloaded,
the connection dropped), never on ``ApiException.status`` integers or urllib3 exception classes.
The mapping lives here and only here (kopf ``clients/errors.py::check_response``); the k8s
``Status`` message is kept, trimmed, because it is what an operator needs to read ("Cannot evict
pod as it would violate the pod's disruption budget.").

Which errors are worth retrying is decided here too, once, for reads and evictions alike
(:func:`is_transient`, :func:`cause_of`; the rule is written out in docs/cli.md, "Faults and
retries"). It follows client-go's REST client (``rest/with_retry.go`` ``checkWait`` and
``rest/request.go``): a 429 or a 5xx that carries ``Retry-After`` is retried after that wait, and a
GET whose connection was reset or ended early is retried; a POST is never retried on a transport
error there. kdesched goes a little further where retrying cannot do harm: 502/503/504 (a proxy or
an API server that is not answering yet) are transient without ``Retry-After``, a read's plain 500
is retried (a GET changes nothing; etcd's "request timed out" / "leader changed" are 500s), and an
eviction whose connection dropped is retried because the eviction carries a uid precondition and
its outcome is confirmed by a GET (:mod:`kdesched.evictor.execute`). A 429 the Eviction API sends
for a PodDisruptionBudget is not throttling: it is a refusal (:func:`is_pdb_refusal`), retried by
the evictor's own rule because a budget comes back. Everything else is deterministic here: another
4xx, 501 and 505+, a write's 500 without ``Retry-After``. (The evictor still retries an eviction's
plain 500 by its own rule, reading the pod back, except the API server's "This pod has more than
one PodDisruptionBudget", which would say the same for a minute: :mod:`kdesched.evictor.execute`.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from tenacity import RetryCallState, wait_exponential_jitter
from tenacity.stop import stop_base
from tenacity.wait import wait_base

MAX_MESSAGE_CHARS = 400

# what the Eviction API says when a PodDisruptionBudget refuses (v1.24 ``pkg/registry/core/pod/
# storage/eviction.go``: a 429 whose Status carries a cause with reason "DisruptionBudget")
PDB_CAUSE_REASON = "DisruptionBudget"
PDB_REFUSAL_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget"
# 500s that say the storage was briefly unavailable (etcd), not that the request is wrong
TRANSIENT_500_MESSAGES = ("etcdserver: request timed out", "etcdserver: leader changed",
                          "etcdserver: too many requests", "context deadline exceeded",
                          "the server was unable to return a response in the time allotted")
TRANSIENT_5XX = (502, 503, 504)


class Cause:
    """Why an API request did not succeed, as reports and metrics name it (``cause``)."""

    DISRUPTION_BUDGET = "disruption-budget"  # the Eviction API's 429 for a PodDisruptionBudget
    THROTTLED = "throttled"  # 429 from API Priority and Fairness or max-inflight (no PDB cause)
    SERVER_ERROR = "server-error"  # a 5xx
    CONNECTION = "connection"  # no HTTP answer: refused, reset, timed out, TLS
    REJECTED = "rejected"  # a deterministic refusal: 4xx other than 404/409/410/429 (403, 400, 422...)
    NOT_FOUND = "not-found"
    CONFLICT = "conflict"
    GONE = "gone"


class ConfigError(Exception):
    """No usable cluster configuration (kubeconfig file, context or in-cluster service account)."""


class ApiError(Exception):
    """The API server answered with an error, or could not be reached (``status`` is None).

    ``retry_after``: the answer's ``Retry-After`` in seconds (header, else the Status details'
    ``retryAfterSeconds``), for a 429 or a 5xx; None when it did not say."""

    def __init__(self, status: int | None, reason: str, message: str, *,
                 status_reason: str = "", details: Mapping[str, Any] | None = None,
                 retry_after: float | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        # the k8s Status ``reason`` (NotFound, AlreadyExists, Conflict, TooManyRequests...)
        self.status_reason = status_reason
        self.details: Mapping[str, Any] = details or {}
        self.retry_after = retry_after
        super().__init__(self._render())

    @property
    def retryable(self) -> bool:
        """Worth retrying a read (:func:`is_transient` with ``read=True``)."""
        return is_transient(self, read=True)

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
    """429: throttled, or an eviction refused by a PodDisruptionBudget (:func:`is_pdb_refusal`).
    ``retry_after`` in seconds."""


class ServerError(ApiError):
    """5xx: the server failed; transient or not by :func:`is_transient`."""


class Unavailable(ApiError):
    """No HTTP answer at all: connection refused or reset, timeout, TLS failure.

    ``maybe_sent``: the request may have reached the server (the connection dropped or timed out
    after it was written), so a write may have been carried out; False when the connection was
    never made (refused, name not resolved, TLS handshake)."""

    def __init__(self, message: str, *, maybe_sent: bool = False) -> None:
        self.maybe_sent = maybe_sent
        super().__init__(None, "Unavailable", message)


def is_pdb_refusal(exc: BaseException) -> bool:
    """The Eviction API's 429 for a PodDisruptionBudget: a Status cause with reason
    ``DisruptionBudget``, or (an older or proxied answer without causes) its message."""
    if not isinstance(exc, ApiError) or exc.status != 429:
        return False
    causes = exc.details.get("causes")
    for c in causes if isinstance(causes, list) else ():
        if isinstance(c, Mapping) and c.get("reason") == PDB_CAUSE_REASON:
            return True
    return PDB_REFUSAL_MESSAGE.lower() in (exc.message or "").lower()


def is_transient(exc: BaseException, *, read: bool) -> bool:
    """Whether the same request may succeed if sent again after a wait (the one rule, for reads
    and evictions; see the module docstring and docs/cli.md). ``read``: a GET (LIST or one
    object), which changes nothing and so may also be retried after a plain 500."""
    if isinstance(exc, Unavailable):
        # client-go retries a GET whose connection was reset or ended early, not one that could not
        # connect (refused, unresolved, TLS): a run against a wrong address fails at once. An
        # eviction that could not connect is retried (nothing was sent; the API server may be
        # restarting mid-run) as well as one whose answer was lost (confirmed afterwards).
        return exc.maybe_sent or not read
    if not isinstance(exc, ApiError) or exc.status is None:
        return False
    status = exc.status
    if status == 429:
        return not is_pdb_refusal(exc)
    if status in TRANSIENT_5XX:
        return True
    if 500 <= status <= 599 and status != 501 and exc.retry_after is not None:
        return True  # client-go's checkWait: any 5xx that says when to come back
    if status == 500:
        text = (exc.message or "").lower()
        return read or any(m.lower() in text for m in TRANSIENT_500_MESSAGES)
    return False


def cause_of(exc: BaseException) -> str:
    """The :class:`Cause` of a failed request, for reports and metrics."""
    if isinstance(exc, Unavailable):
        return Cause.CONNECTION
    if not isinstance(exc, ApiError) or exc.status is None:
        return Cause.REJECTED
    if exc.status == 429:
        return Cause.DISRUPTION_BUDGET if is_pdb_refusal(exc) else Cause.THROTTLED
    if exc.status >= 500:
        return Cause.SERVER_ERROR
    return {404: Cause.NOT_FOUND, 409: Cause.CONFLICT, 410: Cause.GONE}.get(exc.status, Cause.REJECTED)


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
    if status == 429 or status >= 500:
        retry_after = _parse_retry_after(retry_after_header)
        if retry_after is None and details:
            retry_after = _parse_retry_after(details.get("retryAfterSeconds"))
        kwargs["retry_after"] = retry_after
    if status == 404:
        return NotFound(status, reason or "Not Found", message, **kwargs)
    if status in (401, 403):
        return Forbidden(status, reason or "Forbidden", message, **kwargs)
    if status == 409:
        return Conflict(status, reason or "Conflict", message, **kwargs)
    if status == 410:
        return Gone(status, reason or "Gone", message, **kwargs)
    if status == 429:
        return TooManyRequests(status, reason or "Too Many Requests", message, **kwargs)
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
    if "RemoteDisconnected" in text or "without response" in text:
        return "the server closed the connection without an answer"
    if "IncompleteRead" in text or "IncompleteRead" in name:
        return "the answer was cut off"
    if "Connection reset" in text or name == "ConnectionResetError":
        return "connection reset"
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


def _never_connected(exc: BaseException) -> bool:
    """True when the failure happened before a request could be written: no connection was made
    (refused, unresolved name, connect timeout, TLS handshake)."""
    cause: BaseException | None = exc
    for _ in range(5):
        if cause is None:
            break
        name = type(cause).__name__
        if name in ("NewConnectionError", "ConnectTimeoutError", "NameResolutionError", "SSLError",
                    "ConnectionRefusedError", "gaierror"):
            return True
        inner = getattr(cause, "reason", None)
        cause = inner if isinstance(inner, BaseException) else None
    return False


def unavailable_from(exc: BaseException) -> Unavailable:
    """A transport failure (urllib3 error, OSError) as :class:`Unavailable`, in an operator's words
    (:func:`transport_reason`); ``maybe_sent`` unless the connection was never made."""
    never = _never_connected(exc)
    prefix = "cannot connect" if never else "connection lost"
    return Unavailable(f"{prefix}: {transport_reason(exc)}", maybe_sent=not never)


# -- retry timing (tenacity), shared by the client's reads, the evictor and Events ---------------------


def budget_used(state: RetryCallState) -> float:
    """Time spent so far: wall clock, or the (possibly injected, instant) sleeps if larger."""
    return max(state.seconds_since_start or 0.0, state.idle_for)


class StopAfterBudget(stop_base):
    """Like ``stop_after_delay``, but also counts the sleeps, so an injected sleep keeps the budget."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, retry_state: RetryCallState) -> bool:
        # the wait is clipped to the remaining budget, so the attempt after it finds the budget spent
        return budget_used(retry_state) >= self.seconds


class WaitHonouringRetryAfter(wait_base):
    """Exponential backoff with jitter; a ``Retry-After`` the server sent wins (up to
    ``max_retry_after`` seconds: a server asking for an hour does not hold a run for an hour);
    never past the total budget."""

    def __init__(self, initial: float, maximum: float, total: float, max_retry_after: float | None = None) -> None:
        self.total = total
        self.max_retry_after = max_retry_after
        self.backoff = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            wait = exc.retry_after
            if self.max_retry_after is not None:
                wait = min(wait, self.max_retry_after)
        else:
            wait = float(self.backoff(retry_state))
        remaining = self.total - budget_used(retry_state)
        return float(max(0.0, min(wait, remaining)))

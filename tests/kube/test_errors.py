"""Mapping HTTP answers and transport failures to the typed errors, once.

Covers: status code -> class, the k8s Status message kept (and trimmed), Retry-After from the
header or from Status details, non-Status bodies, the client's status-0 TLS failures.
"""

from __future__ import annotations

import json

import pytest
from kdesched.kube.errors import (
    MAX_MESSAGE_CHARS,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    ServerError,
    TooManyRequests,
    Unavailable,
    error_from_api_exception,
    error_from_response,
)
from kubernetes.client.exceptions import ApiException


def status(code: int, message: str, **extra: object) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "reason": "X", "code": code, **extra}).encode()


@pytest.mark.parametrize(("code", "cls", "retryable"), [
    (401, Forbidden, False), (403, Forbidden, False), (404, NotFound, False), (409, Conflict, False),
    (410, Gone, False), (422, ApiError, False), (429, TooManyRequests, True), (500, ServerError, True),
    (503, ServerError, True),
], ids=lambda v: str(v) if isinstance(v, int) else None)
def test_status_code_maps_to_typed_error(code: int, cls: type, retryable: bool) -> None:
    err = error_from_response(code, "Reason", status(code, "the message"))
    assert type(err) is cls
    assert err.status == code and err.message == "the message" and err.retryable is retryable
    assert "the message" in str(err)


@pytest.mark.parametrize(("headers", "details", "expected"), [
    ({"Retry-After": "7"}, None, 7.0),
    ({"retry-after": "2"}, None, 2.0),
    ({}, {"retryAfterSeconds": 3}, 3.0),
    ({"Retry-After": "5"}, {"retryAfterSeconds": 3}, 5.0),
    ({}, None, None),
    ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None, None),
])
def test_retry_after(headers: dict[str, str], details: dict[str, int] | None, expected: float | None) -> None:
    body = status(429, "slow down", **({"details": details} if details else {}))
    err = error_from_response(429, "Too Many Requests", body, headers)
    assert isinstance(err, TooManyRequests) and err.retry_after == expected


def test_non_status_body_is_kept_trimmed() -> None:
    err = error_from_response(502, "Bad Gateway", b"<html>" + b"x" * 2000 + b"</html>")
    assert isinstance(err, ServerError)
    assert err.message.startswith("<html>x") and err.message.endswith("...")
    assert len(err.message) == MAX_MESSAGE_CHARS


def test_status_details_are_kept() -> None:
    body = status(429, "Cannot evict pod", details={"causes": [{"reason": "DisruptionBudget"}]})
    err = error_from_response(429, "", body)
    assert err.details["causes"][0]["reason"] == "DisruptionBudget"
    assert err.reason == "Too Many Requests"


def test_api_exception_mapping() -> None:
    exc = ApiException(status=404, reason="Not Found", body=status(404, 'pods "a" not found').decode())
    err = error_from_api_exception(exc)
    assert isinstance(err, NotFound) and err.message == 'pods "a" not found'
    tls = error_from_api_exception(ApiException(status=0, reason="SSLError\ncertificate verify failed"))
    assert isinstance(tls, Unavailable) and tls.status is None and "certificate verify failed" in tls.message


def test_transport_failures_in_an_operators_words() -> None:
    import urllib3
    from kdesched.kube.errors import transport_reason, unavailable_from

    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", urllib3.exceptions.NewConnectionError(
        None, "HTTPSConnection(host='127.0.0.1', port=1): Failed to establish a new connection: "
              "[Errno 111] Connection refused"))
    assert transport_reason(refused) == "connection refused"
    assert str(unavailable_from(refused)).endswith("cannot connect: connection refused")
    assert "MaxRetryError" not in str(unavailable_from(refused))
    dns = urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.NameResolutionError(
        "no-such-host.invalid", None, OSError(-2, "Name or service not known")))  # type: ignore[arg-type]
    assert transport_reason(dns).startswith("the host name could not be resolved")
    timeout = urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.ConnectTimeoutError(None, "timed out"))
    assert transport_reason(timeout) == "timed out"
    tls = urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.SSLError("CERTIFICATE_VERIFY_FAILED"))
    assert transport_reason(tls).startswith("TLS handshake failed")

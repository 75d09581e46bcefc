"""Provider failures as :class:`~hypha_celery.backends.BackendError` kinds (issue 14, point 3).

=========================  =====================  =========  ======================
what happened              kind                   retryable  notes
=========================  =====================  =========  ======================
HTTP 429                   ``rate_limited``       yes        ``retry_after`` seconds
                                                             from ``retry-after-ms``
                                                             / ``retry-after``
HTTP 401, 403              ``authentication``     no
HTTP 400, 404, 422         ``invalid_request``    no
HTTP >= 500, overloaded    ``server_error``       yes        Anthropic 529 included
other HTTP statuses        ``http_error``         408/409
connection, timeout        ``transport``          yes        before or mid-stream
stream ended early         ``incomplete_stream``  yes        no terminal event: never
                                                             a short answer
event not JSON / bad args  ``malformed_stream``   no
error event in the stream  by its type/code                  as the HTTP rows
``close()`` was called     ``cancelled``          no
=========================  =====================  =========  ======================

The SDKs' own retries are off (``max_retries=0``): graph nodes retry through their
``RetryPolicy`` and agents through ``handle_error``, which see these kinds. ``message``
keeps the provider's text for operators, with the key and anything shaped like a key
replaced by ``[redacted]``; ``raw`` is not kept (an SDK exception holds the request).
The mapping reads the SDKs' exception classes by name (both SDKs share them), so this
module imports neither SDK.

A Celery soft time limit (``SoftTimeLimitExceeded``) raised inside a call is never turned
into a kind: every handler re-raises :data:`PASSTHROUGH` first, so the node's time limit
is what the runtime records.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from billiard.exceptions import SoftTimeLimitExceeded

from hypha_celery.backends.error import BackendError, classify_status

__all__ = ["PASSTHROUGH", "ModelErrorKind", "cancelled", "error_kind", "from_exception",
           "from_payload", "incomplete_stream", "malformed_stream", "retry_after", "scrub"]

class ModelErrorKind(StrEnum):
    """The kinds a model call fails with: the table above, and what is refused before
    anything is sent (``missing_key``, ``invalid_request`` for an unknown option,
    ``invalid_tool``). ``model.call.failed`` carries the kind as ``error_kind``; the
    metrics' model-call failure counter uses it as a label (any other kind counts as
    ``other``, so the label stays bounded)."""

    RATE_LIMITED = "rate_limited"
    AUTHENTICATION = "authentication"
    INVALID_REQUEST = "invalid_request"
    SERVER_ERROR = "server_error"
    HTTP_ERROR = "http_error"
    TRANSPORT = "transport"
    INCOMPLETE_STREAM = "incomplete_stream"
    MALFORMED_STREAM = "malformed_stream"
    CANCELLED = "cancelled"
    PROVIDER_ERROR = "provider_error"
    MISSING_KEY = "missing_key"
    INVALID_TOOL = "invalid_tool"


def error_kind(exc: BaseException) -> str | None:
    """The kind of a failed call's exception: a ``BackendError``'s ``kind``, else None
    (a time limit, a bug in the node)."""
    return exc.kind if isinstance(exc, BackendError) else None


#: Exceptions no handler of a model call may swallow.
PASSTHROUGH: tuple[type[BaseException], ...] = (SoftTimeLimitExceeded,)

_MESSAGE_CHARS = 2000
_KEYLIKE = re.compile(r"\b(sk|rk|pk|sess)-[A-Za-z0-9_\-]{6,}|(?i:bearer)\s+[^\s\"',}]+")
#: Error ``type`` / ``code`` values found in error bodies and stream error events.
_PAYLOAD_KINDS: dict[str, str] = {
    "rate_limit_error": "rate_limited", "rate_limit_exceeded": "rate_limited",
    "overloaded_error": "server_error", "api_error": "server_error",
    "server_error": "server_error", "timeout_error": "server_error",
    "authentication_error": "authentication", "permission_error": "authentication",
    "invalid_api_key": "authentication", "billing_error": "authentication",
    "invalid_request_error": "invalid_request", "not_found_error": "invalid_request",
    "invalid_prompt": "invalid_request", "context_length_exceeded": "invalid_request",
}
_RETRYABLE_KINDS = frozenset({"rate_limited", "server_error", "transport", "incomplete_stream"})


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` without the ``secrets`` and without key-shaped tokens, at most 2,000 chars."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)[:_MESSAGE_CHARS]


def retry_after(headers: Mapping[str, str] | Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP
    date), None when absent or unreadable."""
    if headers is None:
        return None
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return round(millis / 1000.0, 3)
    value = headers.get("retry-after")
    seconds = _number(value)
    if seconds is not None or not isinstance(value, str):
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return round(max(0.0, when.timestamp() - time.time()), 3)


def from_exception(vendor: str, exc: BaseException, *, key: str | None) -> BackendError:
    """Any failure of an SDK call or of reading its stream, as a ``BackendError``."""
    if isinstance(exc, BackendError):
        exc.message = scrub(exc.message, key)
        return exc
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = _describe(exc)
    if "APIStatusError" in names:
        return _status_error(vendor, exc, text, key)
    if names & {"APIConnectionError", "TransportError", "TimeoutException", "OSError"}:
        return BackendError(vendor, "transport", True, message=scrub(text, key))
    if "APIError" in names:  # an error payload inside a stream (no HTTP status)
        return from_payload(vendor, getattr(exc, "body", None), scrub(text, key))
    if isinstance(exc, ValueError):  # JSON that does not parse (events, tool arguments)
        return malformed_stream(vendor, f"{type(exc).__name__}")
    return BackendError(vendor, "provider_error", False, message=scrub(text, key))


def from_payload(vendor: str, payload: Any, message: str = "",
                 status: int | None = None) -> BackendError:
    """An error reported in a body or a stream event (``{"error": {"type", "code",
    "message"}}`` or the inner object), classified by its type or code. ``message`` must
    already be scrubbed."""
    inner = payload.get("error", payload) if isinstance(payload, dict) else None
    kind = "provider_error"
    if isinstance(inner, dict):
        for field in ("code", "type"):
            found = _PAYLOAD_KINDS.get(str(inner.get(field)))
            if found is not None:
                kind = found
                break
    return BackendError(vendor, kind, kind in _RETRYABLE_KINDS, status, message=message)


def incomplete_stream(vendor: str, detail: str = "") -> BackendError:
    """The stream ended (EOF, cut connection) before the provider's terminal event."""
    return BackendError(vendor, "incomplete_stream", True,
                        message=detail or "the stream ended before its terminal event")


def malformed_stream(vendor: str, detail: str) -> BackendError:
    return BackendError(vendor, "malformed_stream", False, message=detail[:_MESSAGE_CHARS])


def cancelled(vendor: str) -> BackendError:
    return BackendError(vendor, "cancelled", False, message="the stream was closed")


def _status_error(vendor: str, exc: BaseException, text: str, key: str | None) -> BackendError:
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    message = scrub(text, key)
    if not isinstance(status, int) or status < 300:  # an error event inside a 200 stream
        return from_payload(vendor, body, message)
    kind, retryable = classify_status(status)
    if kind == "http_error" and isinstance(body, dict):
        payload_error = from_payload(vendor, body, message, status)
        if payload_error.kind != "provider_error":
            return payload_error
    response = getattr(exc, "response", None)
    wait = retry_after(getattr(response, "headers", None)) if kind == "rate_limited" else None
    return BackendError(vendor, kind, retryable, status, wait, message)


def _describe(exc: BaseException) -> str:
    request_id = getattr(exc, "request_id", None)
    suffix = f" (request id {request_id})" if isinstance(request_id, str) else ""
    return f"{type(exc).__name__}: {exc}{suffix}"


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 and number == number and number != float("inf") else None


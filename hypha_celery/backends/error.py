"""``BackendError``: a normalized provider failure (GenAgent ``Backend.Error``, #432).

``message`` and ``raw`` may hold secrets (request bodies, keys echoed back by a provider),
so they never appear in ``str()``, ``repr()``, ``args`` or ``to_json()``: only provider,
kind, retryable and status (plus ``retry_after`` in JSON) do. Never retried automatically:
``retryable`` is advice for the application's ``handle_error``.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter
from typing_extensions import TypedDict  # pydantic reads it (python < 3.12)

from hypha_celery.errors import HyphaRuntimeError

_RETRYABLE_ERRNOS = frozenset({errno.ETIMEDOUT, errno.ECONNRESET, errno.EPIPE})
# timeout / closed / connection reset (Req's :timeout, :closed, :econnreset)
_RETRYABLE_TRANSPORT = (TimeoutError, ConnectionResetError, BrokenPipeError,
                        ConnectionAbortedError)
#: kind -> the class a node's ``RetryPolicy`` sees (:func:`hypha_celery.graph.classify`)
_ERROR_CLASSES = {"rate_limited": "rate_limit", "server_error": "transient",
                  "transport": "transient", "incomplete_stream": "transient",
                  "timeout": "timeout", "authentication": "policy", "missing_key": "policy",
                  "invalid_request": "validation", "malformed_stream": "validation",
                  "invalid_option": "validation", "invalid_model": "validation",
                  "invalid_tool": "validation"}


class BackendErrorJson(TypedDict):
    """A :class:`BackendError` as JSON (``to_json``): what events and logs carry."""

    provider: str
    kind: str
    retryable: bool
    status: int | None
    retry_after: str | int | float | None


#: Reads a :class:`BackendErrorJson` (``BackendError.from_json``).
_ERROR_JSON = TypeAdapter(BackendErrorJson)


class BackendError(HyphaRuntimeError):
    """A backend could not start a session or dispatch a prompt, classified by ``kind``."""

    def __init__(self, provider: str, kind: str, retryable: bool, status: int | None = None,
                 retry_after: str | int | float | None = None, message: str = "",
                 raw: Any = None) -> None:
        self.provider = provider
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.message = message
        self.raw = raw
        super().__init__(self._summary())

    def _summary(self) -> str:
        status = "" if self.status is None else f" status={self.status}"
        return f"{self.provider} backend error: {self.kind} (retryable={self.retryable}){status}"

    def __str__(self) -> str:
        return self._summary()

    def __repr__(self) -> str:
        return (f"BackendError(provider={self.provider!r}, kind={self.kind!r}, "
                f"retryable={self.retryable!r}, status={self.status!r})")

    @property
    def error_class(self) -> str | None:
        """The retry class of this kind (``rate_limited`` -> ``rate_limit``, transport and
        server errors -> ``transient`` ...), None to let the status decide."""
        found = _ERROR_CLASSES.get(self.kind)
        if found is None and self.retryable:
            return "transient"
        return found

    def to_json(self) -> BackendErrorJson:
        """Content-free: safe for events, logs and metrics. (Written by hand: an exception
        is no dataclass; its JSON's shape is :class:`BackendErrorJson`.)"""
        return {"provider": self.provider, "kind": self.kind, "retryable": self.retryable,
                "status": self.status, "retry_after": self.retry_after}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> BackendError:
        """The error :meth:`to_json` wrote (other keys ignored), read by
        :data:`_ERROR_JSON` (a ``ValidationError`` for another shape)."""
        return cls(**_ERROR_JSON.validate_python(doc))

    @classmethod
    def http(cls, provider: str, status: int, body: Any = None,
             retry_after: str | int | float | None = None) -> BackendError:
        kind, retryable = classify_status(status)
        return cls(provider, kind, retryable, status, retry_after, _body_message(body), body)

    @classmethod
    def normalize(cls, provider: str, value: Any) -> BackendError:
        if isinstance(value, BackendError):
            return value
        if isinstance(value, tuple):
            if len(value) == 3 and value[0] == "http_error" and isinstance(value[1], int):
                return cls.http(provider, value[1], value[2])
            if len(value) == 2 and isinstance(value[0], str):
                return cls(provider, value[0], False, message=_text(value[1]), raw=value[1])
        if isinstance(value, OSError):  # ConnectionError, TimeoutError, socket errors
            retryable = (isinstance(value, _RETRYABLE_TRANSPORT)
                         or value.errno in _RETRYABLE_ERRNOS)
            return cls(provider, "transport", retryable,
                       message=f"{type(value).__name__}: {value}", raw=value)
        return cls(provider, "provider_error", False, message=_text(value), raw=value)


def classify_status(status: int) -> tuple[str, bool]:
    """The §2.4 table: HTTP status → (kind, retryable)."""
    if status == 429:
        return "rate_limited", True
    if status in (401, 403):
        return "authentication", False
    if status in (400, 404, 422):
        return "invalid_request", False
    if status >= 500:
        return "server_error", True
    return "http_error", status in (408, 409, 425)


def _body_message(body: Any) -> str:
    if isinstance(body, dict):
        inner = body.get("error")
        body = inner.get("message") if isinstance(inner, dict) else body.get("message", inner)
    return _text(body)


def _text(value: Any) -> str:
    return value[:2000] if isinstance(value, str) else ""

"""Retry policies and error classification.

A node error is classified into one :data:`ErrorClass`; a :class:`RetryPolicy`
retries only the classes in its ``retry_on``. Delays are exponential with a
*deterministic* jitter seeded from the execution id and attempt (FNV-1a, as in
hypha), so a replayed run computes the same delays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import TypeAdapter

from hypha_celery.errors import GraphSpecError

ErrorClass = Literal["transient", "rate_limit", "timeout", "validation", "policy", "unknown"]
ERROR_CLASSES: tuple[str, ...] = get_args(ErrorClass)

#: Classes a default ``RetryPolicy()`` retries.
DEFAULT_RETRY_ON: tuple[ErrorClass, ...] = ("transient", "rate_limit", "timeout")

_TRANSIENT_TYPES = (ConnectionError, TimeoutError, OSError)
_VALIDATION_TYPES = (ValueError, TypeError, KeyError, LookupError, AssertionError)


def _name_class(name: str) -> ErrorClass | None:
    """Rules on the upper-cased type name / code, first match wins (hypha's order)."""
    n = re.sub(r"[\s\-]", "_", name).upper()
    if "RATE_LIMIT" in n or "RATELIMIT" in n or "TOOMANYREQUESTS" in n or n == "429":
        return "rate_limit"
    if "POLICY" in n or "DENIED" in n or "PERMISSION" in n or "FORBIDDEN" in n:
        return "policy"
    if "TIMEOUT" in n or "TIMEDOUT" in n:
        return "timeout"
    if "VALIDATION" in n or n.startswith("INVALID") or n in ("400", "422"):
        return "validation"
    if "TRANSIENT" in n or "UNAVAILABLE" in n or "CONNECTION" in n or n.startswith("ECONN"):
        return "transient"
    return None


def _status_class(status: Any) -> ErrorClass | None:
    if not isinstance(status, int):
        return None
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "policy"
    if status in (400, 422):
        return "validation"
    if status in (408, 504):
        return "timeout"
    if status >= 500:
        return "transient"
    return None


def classify(exc: BaseException) -> ErrorClass:
    """The class of a node error.

    An exception may say so itself with an ``error_class`` attribute (one of
    :data:`ERROR_CLASSES`); else an HTTP-style ``status`` / ``status_code``; else the
    type name (``RateLimitError`` → rate_limit, ``*Timeout*`` → timeout, ...); else
    the built-in type (``ConnectionError``/``OSError`` → transient, ``ValueError`` /
    ``TypeError`` / ``KeyError`` → validation); else ``unknown``.
    """
    own = getattr(exc, "error_class", None)
    if own in ERROR_CLASSES:
        return own  # type: ignore[no-any-return]
    status = getattr(exc, "status_code", getattr(exc, "status", None))
    found = _status_class(status)
    if found is None:
        for cls in type(exc).__mro__:
            found = _name_class(cls.__name__)
            if found is not None or cls in (Exception, BaseException):
                break
    if found is not None:
        return found
    if isinstance(exc, _TRANSIENT_TYPES):
        return "transient"
    if isinstance(exc, _VALIDATION_TYPES):
        return "validation"
    return "unknown"


def fnv1a(text: str) -> int:
    """32-bit FNV-1a hash."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` in all (the first try included); delay before attempt n+1 is
    ``min(max_backoff, backoff * 2**(n-1))`` ± ``jitter`` × that, deterministic."""

    max_attempts: int = 3
    backoff: float = 0.25
    max_backoff: float = 30.0
    jitter: float = 0.2
    retry_on: tuple[ErrorClass, ...] = DEFAULT_RETRY_ON

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise GraphSpecError("RetryPolicy.max_attempts must be an int >= 1")
        if self.backoff < 0 or self.max_backoff < 0 or self.max_backoff < self.backoff:
            raise GraphSpecError("RetryPolicy needs 0 <= backoff <= max_backoff")
        if not 0 <= self.jitter <= 1:
            raise GraphSpecError("RetryPolicy.jitter must be within [0, 1]")
        retry_on = tuple(self.retry_on)
        unknown = [c for c in retry_on if c not in ERROR_CLASSES]
        if unknown:
            raise GraphSpecError(
                f"RetryPolicy.retry_on has unknown classes {unknown}; known: {list(ERROR_CLASSES)}")
        object.__setattr__(self, "retry_on", retry_on)

    def retries(self, error_class: str, attempt: int) -> bool:
        """Whether attempt ``attempt`` (1-based) that failed with ``error_class`` retries."""
        return attempt < self.max_attempts and error_class in self.retry_on

    def delay(self, execution_id: str, attempt: int) -> float:
        """Seconds to wait before the attempt after ``attempt``."""
        base = min(self.max_backoff, self.backoff * 2.0 ** max(0, attempt - 1))
        unit = fnv1a(f"{execution_id}:{attempt}") / 0xFFFFFFFF  # [0, 1]
        value = base * (1 + self.jitter * (2 * unit - 1))
        return round(float(min(self.max_backoff, max(0.0, value))), 3)

    def to_json(self) -> dict[str, object]:
        """Every field, ``retry_on`` a list."""
        json: dict[str, object] = _POLICY.dump_python(self, mode="json")
        return json


_POLICY = TypeAdapter(RetryPolicy)
NO_RETRY = RetryPolicy(max_attempts=1)

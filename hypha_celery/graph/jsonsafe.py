"""JSON checks: only JSON goes on the wire and into the store."""

from __future__ import annotations

import json
from typing import Any, cast

from hypha_celery.events.view import ErrorJson
from hypha_celery.graph.retry import classify

_dumps = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def json_size(value: Any) -> int:
    """Encoded size in bytes; raises TypeError/ValueError for non-JSON values."""
    return len(_dumps(value).encode())


def json_size_or_none(value: Any) -> int | None:
    """:func:`json_size`, or None for a value that is not JSON."""
    try:
        return len(_dumps(value).encode())
    except (TypeError, ValueError, RecursionError):
        return None


def is_json(value: Any) -> bool:
    try:
        _dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def error_json(exc: BaseException) -> dict[str, str]:
    """An exception as data: type name, message and class (no traceback, no locals)."""
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "class": classify(exc)}


def error_data(exc: BaseException) -> ErrorJson:
    """:func:`error_json` typed as the error of an outcome."""
    return cast(ErrorJson, error_json(exc))

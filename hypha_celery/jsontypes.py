"""The JSON types, defined once: what a value is when it is data we do not own.

``JsonValue`` is pydantic's recursive JSON type (``None | bool | int | float | str |
list[JsonValue] | dict[str, JsonValue]``); ``JsonObject`` is a JSON object. Use them where
a value really is arbitrary JSON -- a user's input or output, a provider's or a CLI's
wire data, an event's free-form ``data`` -- so it stays data: a reader narrows it
(``isinstance``) before using it, and mypy says so when it does not. Where the structure
is ours, write a dataclass or a pydantic model instead (docs/architecture.md,
"Serialization").

This module imports nothing of hypha_celery: every layer may use it.
"""

from __future__ import annotations

from typing import TypeAlias

from pydantic import JsonValue

__all__ = ["JsonObject", "JsonValue", "json_object", "json_str"]

JsonObject: TypeAlias = dict[str, JsonValue]


def json_object(value: object) -> JsonObject:
    """``value`` when it is a JSON object, else an empty one: reading optional nested
    objects of someone else's JSON (``json_object(line.get("message"))``)."""
    return value if isinstance(value, dict) else {}


def json_str(value: object, default: str = "") -> str:
    """``value`` when it is a string, else ``default``."""
    return value if isinstance(value, str) else default

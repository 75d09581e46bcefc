"""Command-line values that select runs: ``--session`` and ``--since`` (``hypha export``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import click

__all__ = ["parse_session", "parse_since"]


def parse_session(value: str | None) -> tuple[str, str] | None:
    """``--session USER_ID:SESSION_ID`` (split at the first colon)."""
    if value is None:
        return None
    user, sep, session = value.partition(":")
    if not sep or not user or not session:
        raise click.BadParameter(f"{value!r} is not USER_ID:SESSION_ID",
                                 param_hint="'--session'")
    return user, session


def parse_since(value: str | None) -> float | None:
    """``--since``: epoch seconds, or an ISO 8601 time (UTC when it has no offset)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise click.BadParameter(f"{value!r} is not a time", param_hint="'--since'")
        return seconds
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither an ISO 8601 time nor epoch seconds",
                                 param_hint="'--since'") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()

"""Command-line values that select runs: ``--session`` and ``--since`` (``hypha export``)."""

from __future__ import annotations

import click

from hypha_celery.store import parse_time

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


def parse_since(value: str | None, hint: str = "--since") -> float | None:
    """``--since`` / ``--until``: epoch seconds, or an ISO 8601 time (UTC when it has no
    offset): :func:`~hypha_celery.store.parse_time`."""
    if value is None:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{hint}'") from None

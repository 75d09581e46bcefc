"""The runs list's query string -> a :class:`~hypha_celery.store.RunFilter` and a page
cursor, checked: a value that is not valid is a :class:`BadQuery` (a 400 page that
names the parameter), never a store error.

``graph``, ``user``, ``session``: exact ids (at most :data:`MAX_ID` characters);
``status``: one of the run statuses; ``since`` / ``until``: creation time as an ISO
8601 date or time (UTC without an offset) or epoch seconds; ``before``: the cursor of
the next page (a row id); ``limit``: 1 to :data:`MAX_LIMIT`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from hypha_celery.events import RunStatus
from hypha_celery.store import RunFilter, parse_time

__all__ = ["MAX_ID", "MAX_LIMIT", "BadQuery", "RunQuery", "parse_query"]

MAX_ID = 200
MAX_LIMIT = 200
_STATUSES = tuple(s.value for s in RunStatus if s is not RunStatus.NEW)


class BadQuery(ValueError):
    """A query-string value the console does not accept; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


@dataclass(frozen=True)
class RunQuery:
    """What the runs list was asked for, as given (for the form and the next link)."""

    graph: str = ""
    status: str = ""
    user: str = ""
    session: str = ""
    since: str = ""
    until: str = ""
    before: int | None = None
    limit: int = 50

    def filter(self) -> RunFilter:
        return RunFilter(graph_id=self.graph or None, status=self.status or None,
                         user_id=self.user or None, session_id=self.session or None,
                         created_since=_time("since", self.since),
                         created_until=_time("until", self.until))

    def link(self, before: int | None) -> str:
        """The query string of this listing's page before the row ``before``."""
        from urllib.parse import urlencode

        pairs = {f.name: getattr(self, f.name) for f in fields(self)
                 if f.name not in ("before", "limit") and getattr(self, f.name)}
        if self.limit != 50:
            pairs["limit"] = str(self.limit)
        if before is not None:
            pairs["before"] = str(before)
        return urlencode(pairs)


def _time(param: str, value: str) -> float | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise BadQuery(param, str(exc)) from None


def _int(param: str, value: str, low: int, high: int) -> int:
    if not value.isdigit() or not low <= int(value) <= high:
        raise BadQuery(param, f"not a whole number from {low} to {high}")
    return int(value)


def _id(param: str, value: str) -> str:
    if len(value) > MAX_ID or not value.isprintable():
        raise BadQuery(param, f"not an id (printable, at most {MAX_ID} characters)")
    return value


def parse_query(params: Mapping[str, str]) -> RunQuery:
    """The runs list's parameters, checked (unknown parameters are ignored)."""
    status = params.get("status", "")
    if status and status not in _STATUSES:
        raise BadQuery("status", f"not one of {', '.join(_STATUSES)}")
    before = params.get("before", "")
    q = RunQuery(graph=_id("graph", params.get("graph", "")), status=status,
                 user=_id("user", params.get("user", "")),
                 session=_id("session", params.get("session", "")),
                 since=_id("since", params.get("since", "")),
                 until=_id("until", params.get("until", "")),
                 before=_int("before", before, 1, 2**63 - 1) if before else None,
                 limit=_int("limit", params.get("limit", "50"), 1, MAX_LIMIT))
    q.filter()  # the times parse
    return q

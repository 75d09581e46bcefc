"""The run projection (``hypha_runs``): a row <-> the run view, and the reads of runs.

A row holds the view as its ``doc`` (without ``seq`` and ``updated_at``, which are
columns of their own) and a few of its keys as indexed columns. :func:`view_of`,
:func:`doc_of` and :func:`columns_of` are the only places that convert."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import Select

from hypha_celery.errors import RunNotFound
from hypha_celery.events.view import View, view_of_row
from hypha_celery.store.engine import Engines, driver_sql
from hypha_celery.store.schema import runs

VIEW_COLUMNS = ("graph_id", "status", "user_id", "session_id", "lane", "waiting", "deadline",
                "idempotency_key", "created_at", "updated_at")
#: what :func:`view_of` takes, first in a select
VIEW_ROW = (runs.c.doc, runs.c.seq, runs.c.updated_at)


def view_of(row: Sequence[Any]) -> View:
    """The view of a row starting ``doc, seq, updated_at`` (:data:`VIEW_ROW`)."""
    return view_of_row(row[0], row[1], row[2])


def doc_of(view: View) -> dict[str, Any]:
    """The ``doc`` column of ``view``."""
    return {k: v for k, v in view.items() if k not in ("seq", "updated_at")}


def columns_of(view: View) -> dict[str, Any]:
    """The indexed columns of ``view`` (:data:`VIEW_COLUMNS`)."""
    doc: Mapping[str, Any] = view
    cols = {k: doc[k] for k in VIEW_COLUMNS}
    cols["status"] = str(cols["status"])  # a Status: the column holds its value
    return cols


#: Most rows :meth:`Runs.list_runs` returns at once.
MAX_LIST = 1000


@dataclass(frozen=True)
class RunFilter:
    """Which runs :meth:`Runs.list_runs` lists: every field that is not None narrows it
    (equal to it; times in epoch seconds, ``*_since`` inclusive, ``*_until`` exclusive)."""

    graph_id: str | None = None
    status: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    created_since: float | None = None
    created_until: float | None = None
    updated_since: float | None = None
    updated_until: float | None = None


def parse_time(text: str) -> float:
    """A :class:`RunFilter` time as people and scripts write it: epoch seconds, or an
    ISO 8601 date or time (UTC when it has no offset). ``ValueError`` with a message
    for anything else (the CLI's options and the console's query string both say it)."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"{text!r} is not a time")
        return seconds
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither an ISO 8601 time nor epoch seconds") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True)
class RunRow:
    """One run of a listing: its columns, never its input, state or result. ``id`` is the
    row's place (newest highest): the keyset cursor of the next page."""

    id: int
    run_id: str
    graph_id: str
    status: str
    user_id: str | None
    session_id: str | None
    seq: int
    created_at: float
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON values (without ``id``, the store's own)."""
        return {"run_id": self.run_id, "graph_id": self.graph_id, "status": self.status,
                "user_id": self.user_id, "session_id": self.session_id, "seq": self.seq,
                "created_at": self.created_at, "updated_at": self.updated_at}


_LISTED = (runs.c.id, runs.c.run_id, runs.c.graph_id, runs.c.status, runs.c.user_id,
           runs.c.session_id, runs.c.seq, runs.c.created_at, runs.c.updated_at)


def _filtered(q: Select[Any], f: RunFilter) -> Select[Any]:
    c = runs.c
    for column, value in ((c.graph_id, f.graph_id), (c.status, f.status),
                          (c.user_id, f.user_id), (c.session_id, f.session_id)):
        if value is not None:
            q = q.where(column == value)
    for column, since, until in ((c.created_at, f.created_since, f.created_until),
                                 (c.updated_at, f.updated_since, f.updated_until)):
        if since is not None:
            q = q.where(column >= since)
        if until is not None:
            q = q.where(column < until)
    return q


#: A run's view by id: the statements of the per-step path are built once (SQLAlchemy then
#: computes their cache key once, not at every execution: about 0.1 ms of CPU a query).
#: :data:`VIEW_ROW` of one run as plain driver SQL (PostgreSQL's per-step reads)
PG_BY_ID = f"SELECT doc, seq, updated_at FROM {runs.name} WHERE run_id = %s"
PG_BY_ID_OWNED = PG_BY_ID + " AND user_id = %s"
_BY_ID = sa.select(*VIEW_ROW).where(runs.c.run_id == sa.bindparam("b_run_id"))
_BY_ID_OWNED = _BY_ID.where(runs.c.user_id == sa.bindparam("b_owner"))
_BY_ID_LOCKED = {False: _BY_ID.with_for_update(), True: _BY_ID_OWNED.with_for_update()}


def by_id(run_id: str, owner: str | None, *, lock: bool = False
          ) -> tuple[Select[Any], dict[str, str]]:
    """The select of run ``run_id``'s view (of ``owner``'s runs only, when given; ``FOR
    UPDATE`` with ``lock``) and its parameters."""
    params = {"b_run_id": run_id}
    if owner is not None:
        params["b_owner"] = owner
    if lock:
        return _BY_ID_LOCKED[owner is not None], params
    return (_BY_ID if owner is None else _BY_ID_OWNED), params


def owned(q: Select[Any], owner: str | None) -> Select[Any]:
    """``q`` narrowed to the runs of ``owner`` (unchanged for None: unscoped)."""
    return q if owner is None else q.where(runs.c.user_id == owner)


class Runs(Engines):
    """Reads of the projection (without a lock; autocommit on PostgreSQL), each narrowed
    to :attr:`owner`'s runs on a scoped store."""

    def load(self, run_id: str) -> View | None:
        self.ensure_schema()
        if self.dialect == "postgresql":  # every step reads its run: plain driver SQL
            sql, args = ((PG_BY_ID, [run_id]) if self.owner is None
                         else (PG_BY_ID_OWNED, [run_id, self.owner]))
            with self.reader.connect() as conn:
                found = driver_sql(conn, sql, args).first()
            return None if found is None else view_of(found)
        q, params = by_id(run_id, self.owner)
        with self.reader.connect() as conn:
            row = conn.execute(q, params).first()
        return None if row is None else view_of(row)

    def get(self, run_id: str) -> View:
        view = self.load(run_id)
        if view is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        return view

    def load_many(self, run_ids: list[str]) -> dict[str, View]:
        """Projections of ``run_ids`` (one query; unknown ids are left out)."""
        if not run_ids:
            return {}
        self.ensure_schema()
        q = owned(sa.select(*VIEW_ROW, runs.c.run_id).where(runs.c.run_id.in_(run_ids)),
                  self.owner)
        with self.reader.connect() as conn:
            return {r.run_id: view_of(r) for r in conn.execute(q)}

    def find_idempotent(self, key: str) -> str | None:
        self.ensure_schema()
        with self.reader.connect() as conn:
            return conn.execute(owned(
                sa.select(runs.c.run_id).where(runs.c.idempotency_key == key), self.owner)
            ).scalar()

    def run_ids(self, *, status: str | None = None, limit: int = 100) -> list[str]:
        """Ids of the newest runs (in ``status``), newest first."""
        self.ensure_schema()
        q = owned(sa.select(runs.c.run_id), self.owner).order_by(runs.c.id.desc()).limit(limit)
        if status:
            q = q.where(runs.c.status == status)
        with self.reader.connect() as conn:
            return list(conn.execute(q).scalars())

    def list_runs(self, filters: RunFilter | None = None, *, limit: int = 50,
                  before: int | None = None) -> list[RunRow]:
        """Runs matching ``filters``, newest first, at most ``limit`` (1 to
        :data:`MAX_LIST`); ``before``: only rows older than that :attr:`RunRow.id` (the
        last row of the page before: keyset paging, as fast on the thousandth page as on
        the first). Graph, user and session each have an index ordered by ``id``, creation
        time one of its own; the time of the last event has none (it changes every step)."""
        if not 1 <= limit <= MAX_LIST:
            raise ValueError(f"limit must be 1 to {MAX_LIST}, not {limit}")
        self.ensure_schema()
        q = _filtered(owned(sa.select(*_LISTED), self.owner), filters or RunFilter())
        if before is not None:
            q = q.where(runs.c.id < before)
        q = q.order_by(runs.c.id.desc()).limit(limit)
        with self.reader.connect() as conn:
            return [RunRow(*r) for r in conn.execute(q)]

    def session_runs(self, user_id: str, session_id: str) -> list[str]:
        """Ids of the runs of ``(user_id, session_id)``, in the order they were created
        (the session index serves it)."""
        self.ensure_schema()
        q = (owned(sa.select(runs.c.run_id), self.owner)
             .where(runs.c.user_id == user_id, runs.c.session_id == session_id)
             .order_by(runs.c.id))
        with self.reader.connect() as conn:
            return list(conn.execute(q).scalars())

    def by_status(self, status: str, limit: int = 100) -> list[View]:
        """Projections of runs in ``status``, oldest first (the status index serves it)."""
        self.ensure_schema()
        q = (owned(sa.select(*VIEW_ROW), self.owner)
             .where(runs.c.status == status).order_by(runs.c.id).limit(limit))
        with self.reader.connect() as conn:
            return [view_of(r) for r in conn.execute(q)]

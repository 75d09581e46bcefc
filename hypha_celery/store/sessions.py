"""The rows of sessions (``hypha_sessions``): one per ``(user_id, session_id)``.

A session is opened by the first run started in it: :meth:`SessionRows.open_session`
inserts its row in that run's transaction (first writer wins; a concurrent second start
finds the row and writes nothing), and the lifecycle writer appends ``session.created``
to that run. A session is ``active`` until it is closed: :meth:`SessionRows.close_session`
sets ``closed_at`` in the transaction that appends ``session.closed`` (to the same run);
:meth:`SessionRows.merge_metadata` writes the merge a ``session.updated`` records.
:class:`Sessions` reads them, narrowed to :attr:`owner` on a scoped store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hypha_celery.jsontypes import JsonObject
from hypha_celery.store.engine import Engines, insert_for
from hypha_celery.store.schema import runs, sessions

__all__ = ["MAX_SESSIONS", "SessionRow", "SessionRows", "SessionStatus", "Sessions",
           "insert_session", "session_key"]

#: The most sessions one :meth:`Sessions.sessions` call lists.
MAX_SESSIONS = 500


def session_key(user_id: str | None, session_id: str) -> str:
    """The unique key of a session: the lane key of its pair (NULL users included)."""
    return json.dumps([user_id, session_id])


class SessionStatus(StrEnum):
    """hypha's ``RuntimeSession.status``: ``closed`` once ``session.closed`` exists."""

    ACTIVE = "active"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A session: who and which, the profile applied when it opened, its metadata, the
    run that opened it, how many runs it has had so far and when it closed (None:
    active)."""

    user_id: str | None
    session_id: str
    profile: str | None
    pack: str | None
    metadata: JsonObject
    first_run_id: str
    created_at: float
    runs: int = 0
    closed_at: float | None = None

    @property
    def status(self) -> SessionStatus:
        return SessionStatus.ACTIVE if self.closed_at is None else SessionStatus.CLOSED


class SessionRows:
    """Session statements in the transaction of ``conn`` (mixed into ``Tx``)."""

    conn: Connection
    _dialect: str

    def open_session(self, user_id: str | None, session_id: str, *, run_id: str,
                     profile: str | None, pack: str | None, metadata: JsonObject,
                     at: float) -> bool:
        """Insert the session's row unless it exists; whether this call opened it."""
        return insert_session(self.conn, self._dialect, SessionRow(
            user_id, session_id, profile, pack, metadata, run_id, at))

    def lock_session(self, user_id: str | None, session_id: str) -> SessionRow | None:
        """The session's row, locked for this transaction on PostgreSQL (a close and a
        start of the same session take turns); None: no such session (of the owner)."""
        q = sa.select(*_COLUMNS).where(sessions.c.key == session_key(user_id, session_id))
        owner: str | None = getattr(self, "_owner", None)
        if owner is not None:
            q = q.where(sessions.c.user_id == owner)
        if self._dialect == "postgresql":
            q = q.with_for_update()
        row = self.conn.execute(q).first()
        return None if row is None else _row(row, 0)

    def close_session(self, user_id: str | None, session_id: str, *, at: float) -> bool:
        """Mark the session closed at ``at`` unless it is; whether this call closed it."""
        q = (sessions.update()
             .where(sessions.c.key == session_key(user_id, session_id),
                    sessions.c.closed_at.is_(None))
             .values(closed_at=at).returning(sessions.c.id))
        return self.conn.execute(q).first() is not None

    def merge_metadata(self, user_id: str | None, session_id: str, change: JsonObject
                       ) -> JsonObject:
        """The session's metadata with ``change`` on top (the caller wins, key by key),
        written; the row must be locked (:meth:`lock_session`)."""
        key = session_key(user_id, session_id)
        have = self.conn.execute(sa.select(sessions.c.meta).where(sessions.c.key == key))
        merged: JsonObject = {**dict(have.scalar() or {}), **change}
        self.conn.execute(sessions.update().where(sessions.c.key == key).values(meta=merged))
        return merged


def insert_session(conn: Connection, dialect: str, row: SessionRow) -> bool:
    """Insert ``row`` unless its session exists (first writer wins); whether it did. An
    import projects the ``session.created`` events it brings through here too."""
    ins = insert_for(dialect)(sessions).values(
        key=session_key(row.user_id, row.session_id), user_id=row.user_id,
        session_id=row.session_id, profile=row.profile, pack=row.pack, meta=row.metadata,
        first_run_id=row.first_run_id, created_at=row.created_at)
    ins = ins.on_conflict_do_nothing(index_elements=["key"]).returning(sessions.c.id)
    return conn.execute(ins).first() is not None  # rowcount: -1 in a pipeline


def _row(r: Any, count: int) -> SessionRow:
    """A ``SessionRow`` of a result row of :data:`_COLUMNS`."""
    m = r._mapping
    return SessionRow(user_id=m["user_id"], session_id=m["session_id"],
                      profile=m["profile"], pack=m["pack"], metadata=dict(m["meta"] or {}),
                      first_run_id=m["first_run_id"], created_at=float(m["created_at"]),
                      runs=count, closed_at=None if m["closed_at"] is None
                      else float(m["closed_at"]))


_COLUMNS = (sessions.c.user_id, sessions.c.session_id, sessions.c.profile, sessions.c.pack,
            sessions.c.meta, sessions.c.first_run_id, sessions.c.created_at,
            sessions.c.closed_at)


class Sessions(Engines):
    """Reads of sessions, each narrowed to :attr:`owner`'s on a scoped store."""

    def session(self, user_id: str | None, session_id: str) -> SessionRow | None:
        """The session ``(user_id, session_id)`` (None: none, or not the owner's)."""
        self.ensure_schema()
        q = sa.select(*_COLUMNS).where(sessions.c.key == session_key(user_id, session_id))
        if self.owner is not None:
            q = q.where(sessions.c.user_id == self.owner)
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
            if row is None:
                return None
            return _row(row, self._count(conn, user_id, session_id))

    def sessions(self, *, user_id: str | None = None, limit: int = 50) -> list[SessionRow]:
        """The newest sessions first (of ``user_id`` if given), at most ``limit``
        (capped at :data:`MAX_SESSIONS`), with their run counts."""
        self.ensure_schema()
        q = sa.select(*_COLUMNS).order_by(sessions.c.id.desc())
        q = q.limit(max(1, min(limit, MAX_SESSIONS)))
        for owner in (user_id, self.owner):
            if owner is not None:
                q = q.where(sessions.c.user_id == owner)
        with self.reader.connect() as conn:
            found = list(conn.execute(q))
            return [_row(r, self._count(conn, r.user_id, r.session_id)) for r in found]

    def opened_since(self, since: float) -> int:
        """How many sessions opened at or after ``since`` (epoch seconds)."""
        self.ensure_schema()
        q = sa.select(sa.func.count()).select_from(sessions).where(
            sessions.c.created_at >= since)
        if self.owner is not None:
            q = q.where(sessions.c.user_id == self.owner)
        with self.reader.connect() as conn:
            return int(conn.execute(q).scalar() or 0)

    @staticmethod
    def _count(conn: Connection, user_id: str | None, session_id: str) -> int:
        user = runs.c.user_id.is_(None) if user_id is None else runs.c.user_id == user_id
        q = sa.select(sa.func.count()).select_from(runs).where(
            runs.c.session_id == session_id, user)
        return int(conn.execute(q).scalar() or 0)

"""Governed memory's SQL (``hypha_memory*``): records, their revisions, the operation ids
of writes, the embedding outbox and vectors, and full-text retrieval on both backends.

The policy, the checks and the events are :mod:`hypha_celery.memory`'s; this module
stores what it decided. Every write is one transaction: the record, its revision, its
operation id, its outbox row and the full-text index (PostgreSQL: a generated column;
SQLite: triggers) move together. Every read is narrowed to one user first and to the
records visible in the caller's scope (:func:`visible`); on a scoped store
(:meth:`~hypha_celery.store.engine.Engines.scoped`) another user's records do not exist.

Retrieval queries arrive parsed (:class:`ParsedQuery`, built by
:mod:`hypha_celery.memory`'s parser) and are compiled here to a ``tsquery`` or an FTS5
``MATCH`` expression whose every token is a run of letters and digits, bound as a
parameter: nothing of the caller's text reaches SQL as syntax.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from hypha_celery.errors import (
    MemoryConflict,
    MemoryNotFound,
    MemoryOperationConflict,
    NotPermitted,
)
from hypha_celery.jsontypes import JsonObject
from hypha_celery.store.engine import Engines, insert_for
from hypha_celery.store.schema import (
    memory,
    memory_ops,
    memory_outbox,
    memory_revisions,
    memory_vectors,
)

__all__ = ["MEMORY_SEARCH_OBJECTS", "MemoryRevisionRow", "MemoryRow", "MemoryStore",
           "ParsedQuery", "QueryTerm", "ScopeIds", "fts5_match", "index_tokens",
           "pg_owner_token", "tsquery", "visible"]

#: What migration 0010 creates outside :data:`~hypha_celery.store.schema.metadata` (the
#: full-text index; SQLAlchemy cannot describe it): a comparison of the schema with the
#: metadata leaves these names out.
MEMORY_SEARCH_OBJECTS = frozenset({
    "search", "ix_hypha_memory_search",  # PostgreSQL: the tsvector column, its GIN index
    "hypha_memory_fts", "hypha_memory_fts_data", "hypha_memory_fts_idx",  # SQLite FTS5
    "hypha_memory_fts_docsize", "hypha_memory_fts_config",
})

ACTIVE = "active"
DELETED = "deleted"
#: What the index reads as a token: a run of letters and digits (ASCII punctuation and
#: ``_`` separate tokens on both backends).
_TOKEN = re.compile(r"[^\W_]+")
_SEARCH: sa.ColumnClause[Any] = sa.literal_column("hypha_memory.search")
_FTS: sa.ColumnClause[Any] = sa.literal_column("hypha_memory_fts")
_fts_table = sa.table("hypha_memory_fts", sa.column("rowid"))


def index_tokens(text: str) -> list[str]:
    """The tokens the full-text index makes of ``text`` (lower case)."""
    return [t.lower() for t in _TOKEN.findall(text)]


# -- scope ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScopeIds:
    """A memory scope's ids: the owner and the optional narrower ids."""

    user_id: str
    tenant_id: str | None = None
    workspace_id: str | None = None
    session_id: str | None = None
    agent_id: str | None = None
    pack_id: str | None = None

    def narrower(self) -> dict[str, str | None]:
        return {f.name: getattr(self, f.name) for f in fields(ScopeIds)[1:]}


def visible(scope: ScopeIds) -> list[sa.ColumnElement[bool]]:
    """The records a read in ``scope`` sees: the user's, whose every narrower id is NULL
    (wider than the scope) or the scope's."""
    where = [memory.c.user_id == scope.user_id]
    for name, value in scope.narrower().items():
        col = memory.c[name]
        where.append(col.is_(None) if value is None else sa.or_(col.is_(None), col == value))
    return where


# -- parsed queries ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueryTerm:
    """A word (one token) or a phrase (tokens in order, adjacent)."""

    tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """Every group must match (a group: any of its terms); no excluded term may."""

    groups: tuple[tuple[QueryTerm, ...], ...]
    excluded: tuple[QueryTerm, ...] = ()


def _pg_term(term: QueryTerm) -> str:
    return "(" + " <-> ".join(f"'{t}'" for t in term.tokens) + ")"


def tsquery(query: ParsedQuery) -> str:
    """``query`` as ``to_tsquery`` text (tokens quoted: letters and digits only)."""
    parts = ["(" + " | ".join(_pg_term(t) for t in group) + ")" for group in query.groups]
    parts += [f"!{_pg_term(t)}" for t in query.excluded]
    return " & ".join(parts)


def _fts_term(term: QueryTerm) -> str:
    return 'body : "' + " ".join(term.tokens) + '"'


def pg_owner_token(user_id: str) -> str:
    """The user's lexeme in PostgreSQL's ``search`` column (``'u' || md5(user_id)``)."""
    return "u" + hashlib.md5(user_id.encode(), usedforsecurity=False).hexdigest()


def owner_token(user_id: str) -> str:
    """The FTS5 token of a user (the triggers' ``'u' || hex(user_id)``)."""
    return "u" + user_id.encode().hex().upper()


def fts5_match(query: ParsedQuery, user_id: str) -> str:
    """``query`` as an FTS5 ``MATCH`` expression, led by the user's owner token."""
    expr = f'owner : "{owner_token(user_id)}"'
    for group in query.groups:
        expr += " AND (" + " OR ".join(_fts_term(t) for t in group) + ")"
    for term in query.excluded:
        expr = f"({expr}) NOT {_fts_term(term)}"
    return expr


# -- rows ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MemoryRow:
    """A record as stored (``body`` None: deleted)."""

    record_id: str
    scope: ScopeIds
    memory_type: str
    status: str
    revision: int
    body: str | None
    tags: tuple[str, ...]
    operation_id: str
    provenance: JsonObject | None
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class MemoryRevisionRow:
    """One revision of a record (``body`` None once the record is deleted)."""

    record_id: str
    revision: int
    status: str
    body: str | None
    tags: tuple[str, ...]
    operation_id: str
    at: float


_COLUMNS = (memory.c.record_id, memory.c.user_id, memory.c.tenant_id, memory.c.workspace_id,
            memory.c.session_id, memory.c.agent_id, memory.c.pack_id, memory.c.memory_type,
            memory.c.status, memory.c.revision, memory.c.body, memory.c.tags,
            memory.c.operation_id, memory.c.provenance, memory.c.created_at,
            memory.c.updated_at)


def _row(r: Any) -> MemoryRow:
    m = r._mapping
    scope = ScopeIds(m["user_id"], m["tenant_id"], m["workspace_id"], m["session_id"],
                     m["agent_id"], m["pack_id"])
    return MemoryRow(m["record_id"], scope, m["memory_type"], m["status"], int(m["revision"]),
                     m["body"], tuple(m["tags"] or ()), m["operation_id"],
                     None if m["provenance"] is None else dict(m["provenance"]),
                     float(m["created_at"]), float(m["updated_at"]))


@dataclass(frozen=True, slots=True)
class NewRecord:
    """What an add writes (the manager checked it)."""

    record_id: str
    scope: ScopeIds
    memory_type: str
    body: str
    tags: tuple[str, ...]
    provenance: JsonObject | None


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _raced(write: Callable[_P, _R]) -> Callable[_P, _R]:
    """``write`` again once if a concurrent write of the same operation id committed
    first (the primary key of ``hypha_memory_ops``): the second run finds it."""

    @wraps(write)
    def again(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return write(*args, **kwargs)
        except IntegrityError:
            return write(*args, **kwargs)

    return again


# -- the store's memory ----------------------------------------------------------------------
class MemoryStore(Engines):
    """Memory records and their retrieval (mixed into :class:`EventStore`)."""

    def _owned(self, user_id: str, *, write: bool) -> None:
        """On a scoped store only the owner's memory exists (a write: NotPermitted)."""
        if self.owner is not None and user_id != self.owner:
            if write:
                raise NotPermitted("a user's store writes that user's memory only")
            raise MemoryNotFound("no such memory record")

    # -- writes ----------------------------------------------------------------------------
    @_raced
    def memory_add(self, new: NewRecord, *, operation_id: str, digest: str,
                   at: float) -> tuple[MemoryRow, bool]:
        """Insert ``new`` (revision 1) under ``operation_id``; an operation id written
        before returns that record and True (``digest`` must be the same, else
        :class:`MemoryOperationConflict`)."""
        self._owned(new.scope.user_id, write=True)
        self.ensure_schema()
        with self.engine.begin() as conn:
            done = self._replayed(conn, new.scope.user_id, operation_id, "add", digest)
            if done is not None:
                return self._current(conn, done), True
            self._record_op(conn, new.scope.user_id, operation_id, "add", new.record_id, 1,
                            digest, at)
            conn.execute(memory.insert().values(
                record_id=new.record_id, **_scope_values(new.scope),
                memory_type=new.memory_type, status=ACTIVE, revision=1, body=new.body,
                tags=list(new.tags), operation_id=operation_id, provenance=new.provenance,
                created_at=at, updated_at=at))
            self._revision(conn, new.record_id, 1, ACTIVE, new.body, new.tags,
                           operation_id, at)
            return self._current(conn, new.record_id), False

    @_raced
    def memory_update(self, scope: ScopeIds, record_id: str, body: str,
                      tags: tuple[str, ...] | None, provenance: JsonObject | None, *,
                      expected_revision: int, operation_id: str, digest: str,
                      at: float) -> tuple[MemoryRow, bool]:
        """Write revision ``expected_revision + 1`` of a record visible in ``scope``
        (:class:`MemoryConflict` if it is at another revision)."""
        self._owned(scope.user_id, write=True)
        self.ensure_schema()
        with self.engine.begin() as conn:
            done = self._replayed(conn, scope.user_id, operation_id, "update", digest)
            if done is not None:
                return self._current(conn, done), True
            row = self._locked(conn, scope, record_id)
            if row.revision != expected_revision:
                raise MemoryConflict(record_id, expected_revision, row.revision)
            revision = row.revision + 1
            tags = row.tags if tags is None else tags
            values: dict[str, Any] = {"revision": revision, "body": body, "tags": list(tags),
                                      "operation_id": operation_id, "updated_at": at}
            if provenance is not None:
                values["provenance"] = provenance
            conn.execute(memory.update().where(memory.c.record_id == record_id)
                         .values(**values))
            self._revision(conn, record_id, revision, ACTIVE, body, tags, operation_id, at)
            self._record_op(conn, scope.user_id, operation_id, "update", record_id,
                            revision, digest, at)
            return self._current(conn, record_id), False

    @_raced
    def memory_delete(self, scope: ScopeIds, record_id: str, *, operation_id: str,
                      digest: str, at: float) -> tuple[int, bool]:
        """Delete a record visible in ``scope``: the row stays as a tombstone (id,
        revision, status) with no body; every revision's body and tags are erased, its
        vector dropped, its operations' digests cleared. Its new revision, and whether
        ``operation_id`` had done it already."""
        self._owned(scope.user_id, write=True)
        self.ensure_schema()
        with self.engine.begin() as conn:
            ops = memory_ops.c
            found = conn.execute(sa.select(ops.kind, ops.record_id, ops.revision).where(
                ops.user_id == scope.user_id, ops.operation_id == operation_id)).first()
            if found is not None:
                if found.kind != "delete" or found.record_id != record_id:
                    raise MemoryOperationConflict(operation_id)
                return int(found.revision), True
            row = self._locked(conn, scope, record_id)
            revision = row.revision + 1
            conn.execute(memory.update().where(memory.c.record_id == record_id).values(
                status=DELETED, revision=revision, body=None, tags=[], provenance=None,
                operation_id=operation_id, updated_at=at))
            conn.execute(memory_revisions.update()
                         .where(memory_revisions.c.record_id == record_id)
                         .values(body=None, tags=[]))
            conn.execute(memory_ops.update().where(ops.record_id == record_id)
                         .values(digest=None))
            conn.execute(memory_vectors.delete().where(memory_vectors.c.record_id == record_id))
            self._revision(conn, record_id, revision, DELETED, None, (), operation_id, at)
            self._record_op(conn, scope.user_id, operation_id, "delete", record_id,
                            revision, digest, at)
            return revision, False

    def _replayed(self, conn: Connection, user_id: str, operation_id: str, kind: str,
                  digest: str) -> str | None:
        """The record an earlier write under ``operation_id`` wrote (None: none)."""
        ops = memory_ops.c
        found = conn.execute(sa.select(ops.kind, ops.record_id, ops.digest).where(
            ops.user_id == user_id, ops.operation_id == operation_id)).first()
        if found is None:
            return None
        if found.kind != kind or found.digest != digest:
            raise MemoryOperationConflict(operation_id)
        return str(found.record_id)

    def _record_op(self, conn: Connection, user_id: str, operation_id: str, kind: str,
                   record_id: str, revision: int, digest: str, at: float) -> None:
        """The operation's row (a concurrent writer of the same id: the primary key
        makes the later transaction fail, and nothing of it is written); the outbox row
        of the write."""
        conn.execute(memory_ops.insert().values(
            user_id=user_id, operation_id=operation_id, kind=kind, record_id=record_id,
            revision=revision, digest=digest, at=at))
        conn.execute(memory_outbox.insert().values(record_id=record_id, revision=revision,
                                                   created_at=at))

    @staticmethod
    def _revision(conn: Connection, record_id: str, revision: int, status: str,
                  body: str | None, tags: Sequence[str], operation_id: str,
                  at: float) -> None:
        conn.execute(memory_revisions.insert().values(
            record_id=record_id, revision=revision, status=status, body=body,
            tags=list(tags), operation_id=operation_id, at=at))

    def _locked(self, conn: Connection, scope: ScopeIds, record_id: str) -> MemoryRow:
        """The active record, visible in ``scope``, locked (PostgreSQL); else
        :class:`MemoryNotFound`."""
        q = sa.select(*_COLUMNS).where(memory.c.record_id == record_id,
                                       memory.c.status == ACTIVE, *visible(scope))
        if self.dialect == "postgresql":
            q = q.with_for_update()
        row = conn.execute(q).first()
        if row is None:
            raise MemoryNotFound(f"no memory record {record_id!r} in this scope")
        return _row(row)

    @staticmethod
    def _current(conn: Connection, record_id: str) -> MemoryRow:
        row = conn.execute(sa.select(*_COLUMNS).where(memory.c.record_id == record_id)).one()
        found = _row(row)
        if found.status != ACTIVE:
            raise MemoryNotFound(f"memory record {record_id!r} was deleted")
        return found

    # -- reads -----------------------------------------------------------------------------
    def memory_get(self, scope: ScopeIds, record_id: str) -> MemoryRow | None:
        """The active record ``record_id`` if visible in ``scope`` (else None)."""
        self._owned(scope.user_id, write=False)
        self.ensure_schema()
        q = sa.select(*_COLUMNS).where(memory.c.record_id == record_id,
                                       memory.c.status == ACTIVE, *visible(scope))
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
        return None if row is None else _row(row)

    def memory_history(self, scope: ScopeIds, record_id: str,
                       limit: int) -> list[MemoryRevisionRow] | None:
        """The revisions of a record visible in ``scope`` (deleted ones too: without
        bodies), oldest first, at most ``limit`` (the newest); None: no such record."""
        self._owned(scope.user_id, write=False)
        self.ensure_schema()
        exists = sa.select(memory.c.pos).where(memory.c.record_id == record_id,
                                               *visible(scope))
        r = memory_revisions.c
        q = (sa.select(r.record_id, r.revision, r.status, r.body, r.tags, r.operation_id,
                       r.at).where(r.record_id == record_id)
             .order_by(r.revision.desc()).limit(limit))
        with self.reader.connect() as conn:
            if conn.execute(exists).first() is None:
                return None
            rows = list(conn.execute(q))
        return [MemoryRevisionRow(x.record_id, int(x.revision), x.status, x.body,
                                  tuple(x.tags or ()), x.operation_id, float(x.at))
                for x in reversed(rows)]

    def memory_list(self, scope: ScopeIds, *, memory_type: str | None, limit: int,
                    after: str | None) -> list[MemoryRow]:
        """Active records visible in ``scope``, oldest first; ``after``: a record id of
        the previous page (its last)."""
        self._owned(scope.user_id, write=False)
        self.ensure_schema()
        q = sa.select(*_COLUMNS).where(memory.c.status == ACTIVE, *visible(scope))
        if memory_type is not None:
            q = q.where(memory.c.memory_type == memory_type)
        if after is not None:
            start = sa.select(memory.c.pos).where(memory.c.record_id == after,
                                                  memory.c.user_id == scope.user_id)
            q = q.where(memory.c.pos > start.scalar_subquery())
        q = q.order_by(memory.c.pos).limit(limit)
        with self.reader.connect() as conn:
            return [_row(r) for r in conn.execute(q)]

    def memory_search(self, scope: ScopeIds, query: ParsedQuery, *, limit: int,
                      memory_types: Sequence[str] | None) -> list[tuple[MemoryRow, float]]:
        """The active records visible in ``scope`` matching ``query``, best first (score:
        higher is better; ``ts_rank_cd`` on PostgreSQL, ``-bm25`` on SQLite)."""
        self._owned(scope.user_id, write=False)
        self.ensure_schema()
        where = [memory.c.status == ACTIVE, *visible(scope)]
        if memory_types is not None:
            where.append(memory.c.memory_type.in_(list(memory_types)))
        if self.dialect == "postgresql":
            simple: sa.ColumnClause[Any] = sa.literal_column("'simple'::regconfig")
            terms = tsquery(query)
            tsq = sa.func.to_tsquery(simple, sa.bindparam("q", terms))
            mine = sa.func.to_tsquery(simple, sa.bindparam(
                "qu", f"'{pg_owner_token(scope.user_id)}' & ({terms})"))
            score: Any = sa.func.ts_rank_cd(_SEARCH, tsq)  # ranked on the terms alone
            q = (sa.select(*_COLUMNS, score.label("score"))
                 .where(_SEARCH.op("@@")(mine), *where)
                 .order_by(score.desc(), memory.c.pos.desc()))
        else:
            bm25 = sa.func.bm25(_FTS, 0.0, 1.0)
            q = (sa.select(*_COLUMNS, (-bm25).label("score"))
                 .select_from(_fts_table.join(memory, memory.c.pos == _fts_table.c.rowid))
                 .where(_FTS.op("MATCH")(fts5_match(query, scope.user_id)), *where)
                 .order_by(bm25, memory.c.pos.desc()))
        with self.reader.connect() as conn:
            return [(_row(r), float(r.score)) for r in conn.execute(q.limit(limit))]

    # -- the embedding projection -----------------------------------------------------------
    def memory_outbox(self, limit: int) -> list[tuple[int, str]]:
        """The oldest outbox rows: ``(id, record_id)``."""
        self.ensure_schema()
        o = memory_outbox.c
        with self.reader.connect() as conn:
            return [(int(i), str(r)) for i, r in conn.execute(
                sa.select(o.id, o.record_id).order_by(o.id).limit(limit))]

    def memory_bodies(self, record_ids: Sequence[str]) -> list[tuple[str, str, int, str]]:
        """``(record_id, user_id, revision, body)`` of those of ``record_ids`` active."""
        self.ensure_schema()
        q = sa.select(memory.c.record_id, memory.c.user_id, memory.c.revision,
                      memory.c.body).where(memory.c.record_id.in_(list(record_ids)),
                                           memory.c.status == ACTIVE)
        with self.reader.connect() as conn:
            return [(r.record_id, r.user_id, int(r.revision), r.body) for r in conn.execute(q)]

    def memory_put_vectors(self, done: Sequence[int],
                           vectors: Sequence[tuple[str, str, int, list[float]]],
                           drop: Sequence[str]) -> None:
        """One transaction: the vectors of ``vectors`` written (a newer revision's stays),
        those of ``drop`` removed, the outbox rows ``done`` deleted."""
        self.ensure_schema()
        v = memory_vectors.c
        with self.engine.begin() as conn:
            if drop:
                conn.execute(memory_vectors.delete().where(v.record_id.in_(list(drop))))
            for record_id, user_id, revision, vector in vectors:
                ins = insert_for(self.dialect)(memory_vectors).values(
                    record_id=record_id, user_id=user_id, revision=revision, vector=vector)
                conn.execute(ins.on_conflict_do_update(
                    index_elements=["record_id"], set_={"revision": revision,
                                                        "vector": vector},
                    where=v.revision <= revision))
            if done:
                conn.execute(memory_outbox.delete().where(memory_outbox.c.id.in_(list(done))))

    def memory_requeue(self) -> int:
        """Drop every vector and queue every active record again (a rebuild); how many."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(memory_vectors.delete())
            conn.execute(memory_outbox.delete())
            pick = sa.select(memory.c.record_id, memory.c.revision,
                             memory.c.updated_at).where(memory.c.status == ACTIVE)
            done = conn.execute(memory_outbox.insert().from_select(
                ["record_id", "revision", "created_at"], pick))
            return max(0, done.rowcount or 0)

    def memory_vectors(self, scope: ScopeIds, limit: int
                       ) -> Iterator[tuple[MemoryRow, list[float]]]:
        """The vectors of active records visible in ``scope`` (at most ``limit``)."""
        self._owned(scope.user_id, write=False)
        self.ensure_schema()
        q = (sa.select(*_COLUMNS, memory_vectors.c.vector)
             .select_from(memory.join(memory_vectors,
                                      memory_vectors.c.record_id == memory.c.record_id))
             .where(memory.c.status == ACTIVE, memory_vectors.c.user_id == scope.user_id,
                    *visible(scope)).limit(limit))
        with self.reader.connect() as conn:
            rows = list(conn.execute(q))
        for r in rows:
            yield _row(r), [float(x) for x in r.vector]

    def memory_pgvector(self) -> bool:
        """Whether the server has the ``vector`` extension installed (pgvector)."""
        if self.dialect != "postgresql":
            return False
        self.ensure_schema()
        with self.reader.connect() as conn:
            return conn.execute(sa.text(
                "SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first() is not None


def _scope_values(scope: ScopeIds) -> dict[str, str | None]:
    return {"user_id": scope.user_id, **scope.narrower()}

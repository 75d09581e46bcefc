"""SQLAlchemy event store (SQLite for the embedded default, PostgreSQL for production).

Every write is one transaction that locks the run row (``SELECT ... FOR UPDATE``
on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), appends events with the next
``seq`` values, folds them into the projection and writes both. Two writers of
one run are therefore serialized; the fencing checks the caller makes on the
locked view are race-free.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import sqlalchemy as sa
from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _to_json
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from hypha_celery.errors import (
    EmptyImport,
    ExtraNotInstalled,
    ImportConflict,
    IncompleteRun,
    InvalidRun,
    NotTheLifecycleWriter,
    RunNotFound,
    SetupError,
    StoreConflict,
    UnknownEventKind,
)
from hypha_celery.events.envelope import KINDS, Event, EventType, enrich
from hypha_celery.events.fold import PASSIVE_KINDS, apply_event, fold, new_view
from hypha_celery.events.jsontext import prebuilt
from hypha_celery.events.view import View, view_of_row
from hypha_celery.store.schema import circuits, dead_letters, events, lanes, leases, outcomes, runs

_dumps = partial(json.dumps, allow_nan=False, separators=(",", ":"))
_VIEW_COLUMNS = ("graph_id", "status", "user_id", "session_id", "lane", "waiting", "deadline",
                 "idempotency_key", "created_at", "updated_at")


# Per-edge statements on PostgreSQL, sent as plain driver SQL: SQLAlchemy's statement
# building costs ~0.3-0.5 ms a call here, more than the round trip itself.
_PG_READ_EDGE = (
    "SELECT r.doc, r.seq, r.updated_at, "
    "(SELECT o.data FROM hypha_outcomes o WHERE o.idem = %s) "
    "FROM hypha_runs r WHERE r.run_id = %s"
)
_PG_PUT_OUTCOME = (
    "INSERT INTO hypha_outcomes (idem, run_id, data) VALUES (%s, %s, %s::json) "
    "ON CONFLICT (idem) DO NOTHING"
)
_PG_GET_OUTCOME = "SELECT data FROM hypha_outcomes WHERE idem = %s"
# the same insert, plus (in the same round trip) whether the run still awaits the fan-out
_PG_PUT_EDGE = (
    "WITH ins AS (INSERT INTO hypha_outcomes (idem, run_id, data) VALUES (%s, %s, %s::json) "
    "ON CONFLICT (idem) DO NOTHING RETURNING 1) "
    "SELECT (SELECT count(*) FROM ins), r.status, r.waiting FROM hypha_runs r "
    "WHERE r.run_id = %s"
)


# One passive event in one statement: bump the run's seq under its row lock, insert.
_PG_APPEND = (
    "WITH r AS (UPDATE hypha_runs SET seq = seq + 1, updated_at = %(ts)s "
    "WHERE run_id = %(run)s RETURNING seq) "
    "INSERT INTO hypha_events (run_id, seq, kind, ts, data, idem) "
    "SELECT %(run)s, r.seq, %(kind)s, %(ts)s, %(data)s::json, %(idem)s FROM r RETURNING seq"
)
_SQLITE_BUMP = "UPDATE hypha_runs SET seq = seq + 1, updated_at = ? WHERE run_id = ? RETURNING seq"
_SQLITE_APPEND = ("INSERT INTO hypha_events (run_id, seq, kind, ts, data, idem) "
                  "VALUES (?, ?, ?, ?, ?, ?)")


def _pg_append(engine: Engine, row: tuple[str, str, float, str, str | None]) -> int | None:
    """:data:`_PG_APPEND` on the driver connection in autocommit (the statement is the
    transaction: one round trip). SQLAlchemy's execution path would cost ~30 % more."""
    run_id, kind, ts, data, idem = row
    raw = engine.raw_connection()
    try:
        conn: Any = raw.driver_connection
        conn.autocommit = True
        try:
            found = conn.execute(_PG_APPEND, {"run": run_id, "kind": kind, "ts": ts,
                                              "data": data, "idem": idem}).fetchone()
        finally:
            conn.autocommit = False
    finally:
        raw.close()
    return None if found is None else int(found[0])


def _sqlite_append(engine: Engine, row: tuple[str, str, float, str, str | None]
                   ) -> int | None:
    """:data:`_SQLITE_BUMP` + :data:`_SQLITE_APPEND` in one ``BEGIN IMMEDIATE``
    transaction, on the driver connection: SQLAlchemy's statement machinery would cost
    more than SQLite itself here."""
    run_id, kind, ts, data, idem = row
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            found = cur.execute(_SQLITE_BUMP, (ts, run_id)).fetchone()
            if found is not None:
                cur.execute(_SQLITE_APPEND, (run_id, found[0], kind, ts, data, idem))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        finally:
            cur.close()
    finally:
        raw.close()
    return None if found is None else int(found[0])


#: What :mod:`hypha_celery.runtime.lifecycle` passes as ``writer``: the one canonical
#: writer of ``run.*`` events (hypha's RunManager); :meth:`Tx.append` refuses them otherwise.
LIFECYCLE_WRITER = object()


def check_append(kind: str, writer: object = None) -> None:
    """The checks every appended event passes, whoever appends it: a type of the
    taxonomy (:class:`UnknownEventKind`), and ``run.*`` only from the lifecycle writer
    (:class:`NotTheLifecycleWriter`)."""
    if kind.startswith("run.") and writer is not LIFECYCLE_WRITER:
        raise NotTheLifecycleWriter(
            f"{kind} is a run lifecycle event: only hypha_celery.runtime.lifecycle "
            "appends those")
    if kind not in KINDS:
        raise UnknownEventKind(f"{kind!r} is not an event type of the taxonomy")


class Tx:
    """One store transaction. Use through :meth:`EventStore.transaction`."""

    def __init__(self, conn: Connection, dialect: str) -> None:
        self.conn = conn
        self._dialect = dialect
        self._views: dict[str, View] = {}
        self._new: set[str] = set()
        self._active: set[str] = set()  # runs whose doc changed
        self._expected: dict[str, int] = {}  # optimistic writes: run_id -> seq read
        self._rows: list[dict[str, Any]] = []
        self._after: list[Callable[[], None]] = []

    @property
    def dialect(self) -> str:
        return self._dialect

    # -- reads -----------------------------------------------------------
    def lock(self, run_id: str) -> View | None:
        """Lock the run row for this transaction and return its projection."""
        if run_id in self._views:
            return self._views[run_id]
        q = sa.select(runs.c.doc, runs.c.seq, runs.c.updated_at).where(runs.c.run_id == run_id)
        if self._dialect == "postgresql":
            q = q.with_for_update()
        row = self.conn.execute(q).first()
        if row is None:
            return None
        view = view_of_row(row.doc, row.seq, row.updated_at)
        self._views[run_id] = view
        return view

    def expect(self, view: View) -> View:
        """Write ``view`` (read earlier, without a lock) optimistically: the commit
        fails with :class:`StoreConflict` if the run moved past ``view["seq"]``."""
        run_id = view["run_id"]
        self._views[run_id] = view
        self._expected[run_id] = view["seq"]
        return view

    def recorded(self, idem: str) -> dict[str, Any] | None:
        """The data of the event recorded under idempotency key ``idem``, if any."""
        row = self.conn.execute(sa.select(events.c.data).where(events.c.idem == idem)).first()
        return dict(row.data) if row else None

    # -- writes ----------------------------------------------------------
    def create(self, view: View) -> None:
        """Register a brand-new run whose events follow via :meth:`append`."""
        view["seq"] = 0
        self._views[view["run_id"]] = view
        self._new.add(view["run_id"])

    def append(
        self, run_id: str, kind: EventType, data: Mapping[str, Any], idem: str | None = None,
        ts: float | None = None, *, writer: object = None,
    ) -> View:
        check_append(kind, writer)
        view = self._views[run_id]
        ts = time.time() if ts is None else ts
        apply_event(view, kind, data, ts)
        view["seq"] += 1
        if kind not in PASSIVE_KINDS:
            self._active.add(run_id)
        self._rows.append(
            {"run_id": run_id, "seq": view["seq"], "kind": kind, "ts": ts, "data": data,
             "idem": idem}
        )
        return view

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after.append(fn)

    def lane_active(self, lane: str) -> str | None:
        """Lock the lane row (creating it) and return its active run id."""
        ins = _insert(self._dialect)(lanes).values(lane=lane, active_run_id=None)
        self.conn.execute(ins.on_conflict_do_nothing(index_elements=["lane"]))
        q = sa.select(lanes.c.active_run_id).where(lanes.c.lane == lane)
        if self._dialect == "postgresql":
            q = q.with_for_update()
        return self.conn.execute(q).scalar_one()  # type: ignore[no-any-return]

    def set_lane_active(self, lane: str, run_id: str | None) -> None:
        self.conn.execute(
            lanes.update().where(lanes.c.lane == lane).values(active_run_id=run_id)
        )

    def queued_in_lane(self, lane: str) -> list[str]:
        q = (sa.select(runs.c.run_id)
             .where(runs.c.lane == lane, runs.c.status == "queued").order_by(runs.c.id))
        return list(self.conn.execute(q).scalars())

    # -- commit ----------------------------------------------------------
    def _flush(self) -> None:
        for run_id in self._new:
            view = self._views[run_id]
            self.conn.execute(runs.insert().values(run_id=run_id, seq=view["seq"],
                                                   doc=_doc(view), **_cols(view)))
        for run_id, view in self._views.items():
            if run_id in self._new or view["seq"] == 0:
                continue
            values: dict[str, Any] = {"seq": view["seq"], "updated_at": view["updated_at"]}
            if run_id in self._active:
                values.update(doc=_doc(view), **_cols(view))
            where = runs.c.run_id == run_id
            if run_id in self._expected:
                where = sa.and_(where, runs.c.seq == self._expected[run_id])
            done = self.conn.execute(runs.update().where(where).values(**values))
            if done.rowcount != 1:
                raise StoreConflict(f"run {run_id} moved on (optimistic write)")
        if len(self._rows) >= _COPY_FROM and self._dialect == "postgresql":
            _insert_event_rows(self.conn, ((r["run_id"], r["seq"], r["kind"], r["ts"],
                                            _json(r["data"]), r["idem"]) for r in self._rows))
        elif self._rows:
            self.conn.execute(events.insert(), self._rows)


def _inserted_id(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def _run_all(actions: list[Callable[[], None]]) -> None:
    """Run every after-commit action even if one fails; re-raise the first error."""
    first: BaseException | None = None
    for fn in actions:
        try:
            fn()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


def _doc(view: View) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k not in ("seq", "updated_at")}


def _cols(view: View) -> dict[str, Any]:
    doc: Mapping[str, Any] = view
    cols = {k: doc[k] for k in _VIEW_COLUMNS}
    cols["status"] = str(cols["status"])  # a Status: the column holds its value
    return cols


def _insert(dialect: str) -> Any:
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


class EventStore:
    """Append-only events with a per-run projection. Safe to share across threads;
    each process (after fork) builds its own engine."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Engine | None = None
        self._reader: Engine | None = None
        self._unflushed: Engine | None = None
        self._unflushed_pid = 0
        self._pid = 0
        self._lock = threading.Lock()
        self._migrated = False

    # -- engine ----------------------------------------------------------
    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            with self._lock:
                if self._engine is None or self._pid != os.getpid():
                    for old in (self._engine, self._reader):
                        if old is not None:
                            old.dispose(close=False)
                    self._engine = _make_engine(self.url)
                    self._reader = (
                        _make_engine(self.url, writer=False) if self.url.startswith("sqlite")
                        else self._engine.execution_options(isolation_level="AUTOCOMMIT"))
                    self._pid = os.getpid()
        return self._engine

    @property
    def unflushed(self) -> Engine:
        """Autocommit engine whose commits PostgreSQL acknowledges before the WAL
        flush (``synchronous_commit=off``): for records a later durable commit
        covers. On SQLite, the writer."""
        if self.dialect == "sqlite":
            return self.engine
        if self._unflushed is None or self._unflushed_pid != os.getpid():
            self._unflushed = _make_engine(self.url, unflushed=True)
            self._unflushed_pid = os.getpid()
        return self._unflushed

    @property
    def reader(self) -> Engine:
        """Engine for read-only queries (on SQLite: without the write lock)."""
        self.engine  # noqa: B018  (builds both engines for this process)
        assert self._reader is not None
        return self._reader

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent, race-safe)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7405219)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        self._migrated = True

    def ensure_schema(self) -> None:
        if not self._migrated:
            self.migrate()

    # -- transactions ----------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A durable write transaction; after-commit actions run once it committed."""
        self.ensure_schema()
        try:
            with self.engine.begin() as conn:
                tx = Tx(conn, self.dialect)
                yield tx
                tx._flush()
        except IntegrityError as exc:
            raise StoreConflict(f"concurrent append lost a race: {exc.orig}") from None
        _run_all(tx._after)

    def append(self, run_id: str, kind: EventType, data: Mapping[str, Any], *,
               idem: str | None = None, ts: float | None = None) -> int:
        """Append one event to ``run_id`` in its own durable transaction; its ``seq``.

        A fact that leaves the run projection as it is (a call, a message, an
        evaluation: :data:`~hypha_celery.events.fold.PASSIVE_KINDS`) is one statement —
        one round trip and one commit on PostgreSQL —, which bumps the run row's ``seq``
        under its row lock and inserts the event. Any other type goes through
        :meth:`transaction` (lock, fold, write). ``run.*`` events are refused
        (:class:`NotTheLifecycleWriter`), as an unknown type (:class:`UnknownEventKind`);
        an unknown run is :class:`RunNotFound`, a taken ``idem`` :class:`StoreConflict`.
        """
        check_append(kind)
        if kind not in PASSIVE_KINDS:
            return self._append_folded(run_id, kind, data, idem, ts)
        self.ensure_schema()
        ts = time.time() if ts is None else ts
        row = (run_id, kind, ts, _dumps(data), idem)
        try:
            append = _pg_append if self.dialect == "postgresql" else _sqlite_append
            seq = append(self.engine, row)
        except self.engine.dialect.loaded_dbapi.Error as exc:  # as SQLAlchemy would raise it
            error = sa.exc.DBAPIError.instance(_PG_APPEND, None, exc,
                                               self.engine.dialect.loaded_dbapi.Error)
            if isinstance(error, IntegrityError):
                raise StoreConflict(f"concurrent append lost a race: {exc}") from None
            raise error from None
        if seq is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        return seq

    def _append_folded(self, run_id: str, kind: EventType, data: Mapping[str, Any],
                       idem: str | None, ts: float | None) -> int:
        with self.transaction() as tx:
            if tx.lock(run_id) is None:
                raise RunNotFound(f"no run {run_id!r} in the event store")
            return int(tx.append(run_id, kind, data, idem=idem, ts=ts)["seq"])

    # -- reads -----------------------------------------------------------
    def load(self, run_id: str) -> View | None:
        self.ensure_schema()
        with self.reader.connect() as conn:
            row = conn.execute(
                sa.select(runs.c.doc, runs.c.seq, runs.c.updated_at).where(runs.c.run_id == run_id)
            ).first()
        if row is None:
            return None
        return view_of_row(row.doc, row.seq, row.updated_at)

    read = load  # a read without a lock; autocommit on PostgreSQL

    def load_many(self, run_ids: list[str]) -> dict[str, View]:
        """Projections of ``run_ids`` (one query; unknown ids are left out)."""
        if not run_ids:
            return {}
        self.ensure_schema()
        q = sa.select(runs.c.run_id, runs.c.doc, runs.c.seq, runs.c.updated_at).where(
            runs.c.run_id.in_(run_ids))
        with self.reader.connect() as conn:
            return {r.run_id: view_of_row(r.doc, r.seq, r.updated_at) for r in conn.execute(q)}

    def read_edge(self, run_id: str, idem: str) -> tuple[View | None, dict[str, Any] | None]:
        """The run view and the edge outcome already stored under ``idem`` (one query)."""
        self.ensure_schema()
        if self.dialect == "postgresql":  # per-edge hot path: plain driver SQL
            with self.reader.connect() as conn:
                row = conn.exec_driver_sql(_PG_READ_EDGE, (idem, run_id)).first()
            if row is None:
                return None, None
            return view_of_row(row[0], row[1], row[2]), row[3]
        found = sa.select(outcomes.c.data).where(outcomes.c.idem == idem).scalar_subquery()
        q = sa.select(runs.c.doc, runs.c.seq, runs.c.updated_at, found.label("found")).where(
            runs.c.run_id == run_id)
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None, None
        view = view_of_row(row.doc, row.seq, row.updated_at)
        return view, (dict(row.found) if row.found is not None else None)

    def put_outcome(self, run_id: str, idem: str, data: dict[str, Any]) -> dict[str, Any]:
        """Store an edge outcome once; returns the stored one (the first writer wins).
        Not fsynced on its own: the reducer's durable commit flushes it."""
        self.ensure_schema()
        if self.dialect == "postgresql":  # per-edge hot path: plain driver SQL
            with self.unflushed.connect() as conn:
                done = conn.exec_driver_sql(_PG_PUT_OUTCOME, (idem, run_id, _dumps(data)))
                if done.rowcount == 1:
                    return data
                stored = conn.exec_driver_sql(_PG_GET_OUTCOME, (idem,)).scalar_one()
                return dict(stored)
        ins = _insert(self.dialect)(outcomes).values(idem=idem, run_id=run_id, data=data)
        with self.unflushed.begin() as conn:
            done = conn.execute(ins.on_conflict_do_nothing(index_elements=["idem"]))
            if done.rowcount == 1:
                return data
            stored = conn.execute(sa.select(outcomes.c.data).where(outcomes.c.idem == idem))
            return dict(stored.scalar_one())

    def put_edge_outcome(self, run_id: str, idem: str, data: dict[str, Any], awaited: str
                         ) -> tuple[dict[str, Any], bool]:
        """:meth:`put_outcome` for an edge, also telling whether the run still awaits
        ``awaited`` (its fan-out) — one round trip on PostgreSQL."""
        if self.dialect != "postgresql":
            stored = self.put_outcome(run_id, idem, data)
            view = self.read(run_id)
            return stored, bool(view and view["status"] == "running"
                                and view["waiting"] == awaited)
        self.ensure_schema()
        with self.unflushed.connect() as conn:
            row = conn.exec_driver_sql(_PG_PUT_EDGE, (idem, run_id, _dumps(data), run_id)).first()
            still = row is not None and row[1] == "running" and row[2] == awaited
            if row is not None and row[0] == 1:
                return data, still
            stored = conn.exec_driver_sql(_PG_GET_OUTCOME, (idem,)).scalar_one()
            return dict(stored), still

    def outcomes(self, idems: list[str]) -> dict[str, dict[str, Any]]:
        """``idem -> data`` of stored edge outcomes (one query)."""
        if not idems:
            return {}
        q = sa.select(outcomes.c.idem, outcomes.c.data).where(outcomes.c.idem.in_(idems))
        with self.reader.connect() as conn:
            return {row.idem: dict(row.data) for row in conn.execute(q)}

    def get(self, run_id: str) -> View:
        view = self.load(run_id)
        if view is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        return view

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The run's events as envelopes (see :func:`~hypha_celery.events.envelope.enrich`;
        causation ids are found within the events read). Read as :meth:`history` reads:
        a ``seq`` range, plain driver SQL."""
        self.ensure_schema()
        upto = _MAX_SEQ if limit is None else after_seq + max(limit, 0)
        owner = sa.select(runs.c.user_id, runs.c.session_id, runs.c.graph_id).where(
            runs.c.run_id == run_id)
        with gc_paused(), self.reader.connect() as conn:
            rows, datas = _run_rows(conn, (run_id, after_seq, upto))
            run = conn.execute(owner).first() if rows else None
        pairs = zip(rows, datas, strict=True)
        return enrich(((r[0], r[1], r[2], r[3], d, r[5]) for r, d in pairs),
                      dict(run._mapping) if run is not None else None)

    def rebuild(self, run_id: str) -> View:
        """The projection computed from the events alone."""
        evs = self.events(run_id)
        if not evs:
            raise RunNotFound(f"no events for run {run_id!r}")
        view = fold(run_id, ((e.kind, e.data, e.ts) for e in evs))
        view["seq"] = evs[-1].seq
        return view

    def find_idempotent(self, key: str) -> str | None:
        self.ensure_schema()
        with self.reader.connect() as conn:
            return conn.execute(
                sa.select(runs.c.run_id).where(runs.c.idempotency_key == key)
            ).scalar()

    def run_ids(self, *, status: str | None = None, limit: int = 100) -> list[str]:
        self.ensure_schema()
        q = sa.select(runs.c.run_id).order_by(runs.c.id.desc()).limit(limit)
        if status:
            q = q.where(runs.c.status == status)
        with self.reader.connect() as conn:
            return list(conn.execute(q).scalars())

    # -- export / import -------------------------------------------------
    def export_runs(self, run_ids: Iterable[str] | None = None, *,
                    session: tuple[str, str] | None = None, since: float | None = None,
                    ) -> list[dict[str, Any]]:
        """The runs an export selects, ``{run_id, user_id, session_id, graph_id, seq,
        updated_at}`` each: ``run_ids`` in that order (an unknown id raises
        :class:`RunNotFound`), else every run, oldest first; narrowed to one
        ``(user_id, session_id)`` and to runs with activity (their last event) at or after
        ``since`` (epoch seconds)."""
        self.ensure_schema()
        c = runs.c
        q = sa.select(c.run_id, c.user_id, c.session_id, c.graph_id, c.seq, c.updated_at)
        with self.reader.connect() as conn:
            if run_ids is None:
                found = [dict(r._mapping) for r in conn.execute(q.order_by(c.id))]
            else:
                wanted = list(dict.fromkeys(run_ids))
                by_id: dict[str, dict[str, Any]] = {}
                for chunk in _chunks(wanted, _IN_CHUNK):
                    by_id.update((r.run_id, dict(r._mapping))
                                 for r in conn.execute(q.where(c.run_id.in_(chunk))))
                missing = [r for r in wanted if r not in by_id]
                if missing:
                    raise RunNotFound(f"no run {missing[0]!r} in the event store")
                found = [by_id[r] for r in wanted]
        return [run for run in found
                if (session is None or (run["user_id"], run["session_id"]) == session)
                and (since is None or run["updated_at"] >= since)]

    def export(self, run_ids: Iterable[str] | None = None, *,
               session: tuple[str, str] | None = None, since: float | None = None,
               ) -> Iterator[Event]:
        """Every event of the runs :meth:`export_runs` selects, run by run in ``seq``
        order, as :meth:`events` gives them (unsealed). Reads in bulk: one query per
        batch of runs holding up to ~50,000 events."""
        for run, rows in export_rows(self, run_ids, session=session, since=since):
            yield from enrich(rows, run)

    def history(self, run_id: str, after_seq: int = 0, *, batch: int = 20_000,
                ) -> Iterator[tuple[str, dict[str, Any], float]]:
        """The run's events as ``(kind, data, ts)``, what :func:`fold` takes, oldest first,
        read ``batch`` at a time: the fast path to project a long history (no envelopes
        are built; plain driver SQL, ``data`` read as text and decoded in one parse per
        batch, as an export reads).

        A batch is a ``seq`` range (a run's ``seq`` has no gaps), not ``ORDER BY seq
        LIMIT n``: PostgreSQL, its statistics not yet updated after a burst of appends,
        plans that as a scan of the run's every event and a sort spilling to disk per
        batch; a range is an index scan of the batch alone (sorted here, in case)."""
        self.ensure_schema()
        while True:
            with gc_paused(), self.reader.connect() as conn:
                rows, datas = _run_rows(conn, (run_id, after_seq, after_seq + batch),
                                        _HISTORY)
            yield from zip(map(_kind_of, rows), datas, map(_ts_of, rows), strict=True)
            if len(rows) < batch:
                return
            after_seq += batch

    def import_events(self, evs: Iterable[Event], *,
                      where: Callable[[Event], str] | None = None,
                      checked: Mapping[str, View] | None = None,
                      json_payloads: bool = False) -> ImportResult:
        """Import events (an :meth:`export` of this or another store) in ONE transaction:
        all of them, or nothing when anything is wrong.

        Each run's events must be complete (``seq`` 1..n, else :class:`IncompleteRun`),
        start with ``run.created`` and fold into a projection (:class:`InvalidRun`). Per
        event id (``<run_id>:<seq>``): an event the store has with the same content is
        skipped, so importing twice adds nothing; a different one is an
        :class:`ImportConflict`. A run the store has fewer events of gets the rest, and
        its projection is refolded. Events keep their idempotency keys (a key another
        event of the store holds is a conflict); the run row's ``idempotency_key`` column
        stays NULL: ``start(idempotency_key=)`` keys belong to the store that issued them.
        ``where(event)`` names an event's place in error messages (e.g. ``FILE:LINE``);
        ``checked`` maps run ids whose events the caller already passed through
        :func:`check_run` (so they are in ``seq`` order) to the fold it returned;
        ``json_payloads``: the payloads hold JSON values only (``str``, ``int``,
        ``float``, ``bool``, ``None``, lists and dicts of them), as parsed from JSON, which
        the store then encodes the faster way.
        """
        plans = _plan_runs(evs, where, checked or {})
        self.ensure_schema()
        try:
            with self.engine.begin() as conn:
                present = self._import_present(conn, plans, where)
                _check_keys(conn, plans, where)
                self._import_write(conn, plans, _json_data if json_payloads else _json)
        except IntegrityError as exc:  # a concurrent writer got there in between
            raise ImportConflict("", "the store refused the import, nothing was imported: "
                                     f"{' '.join(str(exc.orig).split())}") from None
        written = [p for p in plans if p.start < len(p.events)]
        return ImportResult(runs=len(written), present=present,
                            events=sum(len(p.events) - p.start for p in written))

    def _import_present(self, conn: Connection, plans: list[_RunImport],
                        where: Callable[[Event], str] | None) -> int:
        """Lock the rows of the runs the store has and compare their stored events with
        the imported ones; returns how many are present already."""
        q = sa.select(runs.c.run_id)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        by_id = {p.run_id: p for p in plans}
        known: list[str] = []
        for chunk in _chunks(list(by_id), _IN_CHUNK):
            known.extend(conn.execute(q.where(runs.c.run_id.in_(chunk))).scalars())
        present = 0
        for run_id, stored in _event_rows(conn, known).items():
            plan = by_id[run_id]
            for ev, row in zip(plan.events, stored, strict=False):
                what = _differs(ev, row)
                if what:
                    raise ImportConflict(ev.id, f"{_at(where, ev)}event {ev.id} differs from "
                                         f"the one the store has under that id ({what}); "
                                         "nothing was imported")
            plan.start = min(len(stored), len(plan.events))
            plan.new_run = False
            present += plan.start
        return present

    def _import_write(self, conn: Connection, plans: list[_RunImport],
                      encode: Callable[[Any], str]) -> None:
        new_runs: list[dict[str, Any]] = []
        todo: list[list[Event]] = []
        for plan in plans:
            if plan.start == len(plan.events):
                continue
            view = plan.view
            if plan.new_run:
                # the key stays in the events and the projection document, but is not
                # claimed in this store's unique column
                new_runs.append({"run_id": plan.run_id, "seq": view["seq"], "doc": _doc(view),
                                 **_cols(view), "idempotency_key": None})
            else:
                cols = {k: v for k, v in _cols(view).items() if k != "idempotency_key"}
                conn.execute(runs.update().where(runs.c.run_id == plan.run_id).values(
                    seq=view["seq"], doc=_doc(view), **cols))
            todo.append(plan.events[plan.start:])
        if new_runs:
            conn.execute(runs.insert(), new_runs)
        if todo:
            _insert_event_rows(conn, ((run_id, seq, kind, ts, encode(data), idem)
                                      for evs in todo
                                      for run_id, seq, kind, ts, data, idem in map(_row_of, evs)))

    # -- dead letters ------------------------------------------------------
    def add_dead_letter(self, record: Mapping[str, Any], conn: Connection | None = None) -> int:
        """Store a dead-letter record (keys: run_id, execution_id, task, queue, args,
        reason, error_class, error, attempts); returns its id."""
        self.ensure_schema()
        row = {"run_id": None, "execution_id": None, "queue": None, "attempts": 1,
               "error": {}, "error_class": "unknown", **record, "status": "open",
               "created_at": time.time()}
        for key in ("run_id", "execution_id", "task", "queue", "reason", "error_class"):
            if isinstance(row[key], str):  # never fail on a column size (a hostile message)
                row[key] = row[key][:getattr(dead_letters.c[key].type, "length", None)]
        if conn is not None:
            return _inserted_id(conn.execute(dead_letters.insert().values(**row)))
        with self.engine.begin() as c:
            return _inserted_id(c.execute(dead_letters.insert().values(**row)))

    def dead_letters(self, *, status: str | None = "open", run_id: str | None = None,
                     limit: int = 100) -> list[dict[str, Any]]:
        """Dead-letter records, newest first (``status=None``: all)."""
        self.ensure_schema()
        q = sa.select(dead_letters).order_by(dead_letters.c.id.desc()).limit(limit)
        if status is not None:
            q = q.where(dead_letters.c.status == status)
        if run_id is not None:
            q = q.where(dead_letters.c.run_id == run_id)
        with self.reader.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def dead_letter(self, dead_letter_id: int) -> dict[str, Any] | None:
        self.ensure_schema()
        q = sa.select(dead_letters).where(dead_letters.c.id == dead_letter_id)
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
        return dict(row._mapping) if row else None

    def mark_redriven(self, dead_letter_id: int, conn: Connection) -> bool:
        """Mark an open record redriven (in the caller's transaction); False if it was not open."""
        done = conn.execute(dead_letters.update().where(
            dead_letters.c.id == dead_letter_id, dead_letters.c.status == "open"
        ).values(status="redriven", redriven_at=time.time()))
        return bool(done.rowcount == 1)

    def purge_dead_letters(self, ids: Iterable[int] | None = None) -> int:
        """Delete open dead-letter records (all, or ``ids``); returns how many."""
        self.ensure_schema()
        q = dead_letters.delete().where(dead_letters.c.status == "open")
        if ids is not None:
            q = q.where(dead_letters.c.id.in_(list(ids)))
        with self.engine.begin() as conn:
            return int(conn.execute(q).rowcount)

    # -- leases ------------------------------------------------------------
    def heartbeat(self, rows: list[dict[str, Any]]) -> None:
        """Upsert lease rows ``{execution_id, run_id, worker, started_at, heartbeat_at}``
        (unflushed: a lost heartbeat only delays recovery)."""
        if not rows:
            return
        self.ensure_schema()
        ins = _insert(self.dialect)(leases)
        stmt = ins.on_conflict_do_update(index_elements=["execution_id"],
                                         set_={"heartbeat_at": ins.excluded.heartbeat_at,
                                               "worker": ins.excluded.worker})
        with self.unflushed.begin() as conn:
            conn.execute(stmt, rows)

    def drop_leases(self, execution_ids: list[str]) -> None:
        if not execution_ids:
            return
        self.ensure_schema()
        with self.unflushed.begin() as conn:
            conn.execute(leases.delete().where(leases.c.execution_id.in_(execution_ids)))

    def prune_leases(self, older_than: float) -> int:
        """Delete lease rows whose heartbeat is older than ``older_than`` (bounded table)."""
        self.ensure_schema()
        with self.unflushed.begin() as conn:
            done = conn.execute(leases.delete().where(leases.c.heartbeat_at < older_than))
            return int(done.rowcount)

    def leases(self, execution_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not execution_ids:
            return {}
        q = sa.select(leases).where(leases.c.execution_id.in_(execution_ids))
        with self.reader.connect() as conn:
            return {r.execution_id: dict(r._mapping) for r in conn.execute(q)}

    # -- circuit breakers --------------------------------------------------
    def circuit(self, key: str) -> dict[str, Any] | None:
        self.ensure_schema()
        with self.reader.connect() as conn:
            row = conn.execute(sa.select(circuits).where(circuits.c.key == key)).first()
        return dict(row._mapping) if row else None

    def record_failure(self, key: str, now: float, threshold: int, reset: float
                       ) -> tuple[bool, float]:
        """Count one failure against ``key``'s circuit. Returns (opened_now, open_until).
        ``threshold`` failures within ``reset`` seconds open it for ``reset`` seconds."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            ins = _insert(self.dialect)(circuits).values(key=key, failures=0, window_start=now,
                                                         open_until=0.0)
            conn.execute(ins.on_conflict_do_nothing(index_elements=["key"]))
            q = sa.select(circuits).where(circuits.c.key == key)
            if self.dialect == "postgresql":
                q = q.with_for_update()
            row = conn.execute(q).one()
            failures = 1 if now - row.window_start > reset else row.failures + 1
            start = now if failures == 1 else row.window_start
            opened = failures >= threshold and row.open_until <= now
            until = now + reset if opened else row.open_until
            conn.execute(circuits.update().where(circuits.c.key == key).values(
                failures=0 if opened else failures, window_start=now if opened else start,
                open_until=until))
        return opened, until

    def record_success(self, key: str) -> None:
        self.ensure_schema()
        with self.unflushed.begin() as conn:
            conn.execute(circuits.update().where(circuits.c.key == key, circuits.c.failures > 0)
                         .values(failures=0))

    # -- the supervisor's sweep query -------------------------------------
    def stale_runs(self, *, idle_before: float, now: float, limit: int = 500
                   ) -> list[dict[str, Any]]:
        """Running runs with no event since ``idle_before``, or past their deadline:
        ``{run_id, status, seq, waiting, deadline, updated_at}``, oldest first.
        Served by the status index (no per-step column is indexed). Quarantined and
        parked runs wait for a human and are not returned."""
        self.ensure_schema()
        c = runs.c
        q = (sa.select(c.run_id, c.status, c.seq, c.waiting, c.deadline, c.updated_at)
             .where(c.status == "running",
                    sa.or_(c.updated_at < idle_before, c.deadline < now))
             .order_by(c.updated_at).limit(limit))
        with self.reader.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def by_status(self, status: str, limit: int = 100) -> list[View]:
        """Projections of runs in ``status``, oldest first (the status index serves it)."""
        self.ensure_schema()
        q = (sa.select(runs.c.run_id, runs.c.doc, runs.c.seq, runs.c.updated_at)
             .where(runs.c.status == status).order_by(runs.c.id).limit(limit))
        with self.reader.connect() as conn:
            return [view_of_row(r.doc, r.seq, r.updated_at) for r in conn.execute(q)]

    def last_event(self, run_id: str, kind: str) -> Event | None:
        """The newest event of ``kind`` in a run."""
        q = (sa.select(events.c.run_id, events.c.seq, events.c.kind, events.c.ts, events.c.data,
                       events.c.idem)
             .where(events.c.run_id == run_id, events.c.kind == kind)
             .order_by(events.c.seq.desc()).limit(1))
        with self.reader.connect() as conn:
            r = conn.execute(q).first()
        return enrich([(r.run_id, r.seq, r.kind, r.ts, dict(r.data), r.idem)])[0] if r else None

    def recorded(self, idem: str) -> bool:
        with self.reader.connect() as conn:
            return conn.execute(sa.select(events.c.id).where(events.c.idem == idem)).first() \
                is not None

    def dispose(self) -> None:
        engines = (self._engine, self._reader, self._unflushed)
        for engine in {id(e): e for e in engines if e is not None}.values():
            engine.dispose()
        self._engine = self._reader = self._unflushed = None


# -- export / import helpers ---------------------------------------------------
_IN_CHUNK = 500  # ids per IN (...) list
# events per commit from which PostgreSQL gets them by COPY (two round trips, then the
# rows in one stream) rather than one pipelined INSERT each (one round trip)
_COPY_FROM = 64
_EXPORT_BATCH = 50_000  # events per bulk read of an export
_EventRow = tuple[str, int, str, float, dict[str, Any], str | None]
# binary COPY: the driver's C dumpers, and less for the server to parse; ``data`` goes as
# text, which is what json's binary form is
_COPY_EVENTS = ("COPY hypha_events (run_id, seq, kind, ts, data, idem) FROM STDIN "
                "(FORMAT BINARY)")
_COPY_TYPES = ["text", "int4", "text", "float8", "text", "text"]
# stored rows ``(run_id, seq, kind, ts, data, idem)``; ``data`` read as text on PostgreSQL
_RUN_ROWS = "SELECT run_id, seq, kind, ts, data{}, idem FROM hypha_events"
_EVENT_ROWS = _RUN_ROWS.format("") + " WHERE run_id"  # of a list of runs
_PG_EVENT_ROWS = _RUN_ROWS.format("::text") + " WHERE run_id = ANY(%s)"
_HISTORY = "SELECT NULL, seq, kind, ts, data{}, NULL FROM hypha_events"  # what fold needs
_IN_RANGE = " WHERE run_id = {0} AND seq > {0} AND seq <= {0}"
_MAX_SEQ = 2**31 - 1
_row_seq = itemgetter(1)
_kind_of = itemgetter(2)
_ts_of = itemgetter(3)
_loads = json.loads
_HELD_KEYS = "SELECT run_id, seq, idem FROM hypha_events WHERE idem"
_PG_HELD_KEYS = _HELD_KEYS + " IN (SELECT json_array_elements_text(%s::json)) LIMIT 1"
_INSERT_EVENTS = "INSERT INTO hypha_events (run_id, seq, kind, ts, data, idem) VALUES "
_row_of = attrgetter("run_id", "seq", "type", "timestamp", "payload", "idempotency_key")
#: ``_dumps(value)`` without building an encoder per call (same text)
_json = prebuilt(json.JSONEncoder(allow_nan=False, separators=(",", ":"), check_circular=False))


def _json_data(value: Any) -> str:
    """:func:`_json` of a value of JSON types only (``str``, ``int``, ``float``, ``bool``,
    ``None``, lists and dicts of them): by pydantic's serializer (about twice as fast),
    when its text is ASCII with finite numbers only; then it is the same JSON, only its
    float exponents are shorter (``1e-7`` for ``1e-07``: the same number). It would turn
    other types (datetimes, sets, ...) into JSON where :func:`_json` refuses them."""
    try:
        text = _to_json(value)
    except PydanticSerializationError:  # a lone surrogate
        return _json(value)
    if not text.isascii() or b"NaN" in text or b"Infinity" in text:
        return _json(value)  # ASCII escapes; refused NaN / Infinity
    return text.decode()


RUN_ID_MAX = 64  # hypha_runs.run_id
IDEM_MAX = 200  # hypha_events.idem
_by_seq = attrgetter("seq")
_run_of = attrgetter("run_id")
_idem_of = attrgetter("idempotency_key")
_T = TypeVar("_T")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while many objects are made and kept (bulk
    reads, imports): its passes over them would double the cost. Events hold no
    reference cycles; the collector runs again afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class ImportResult(NamedTuple):
    """What :meth:`EventStore.import_events` did."""

    runs: int  #: runs that got events: new runs and runs the store had fewer events of
    events: int  #: events written
    present: int  #: events the store had already (same id, same content): skipped


@dataclass
class _RunImport:
    run_id: str
    events: list[Event]  # seq 1..n
    view: View  # the fold of all of them
    start: int = 0  # events[:start] are in the store already
    new_run: bool = True


def _chunks(items: list[_T], size: int) -> Iterator[list[_T]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _batches(selected: list[dict[str, Any]], limit: int) -> Iterator[list[dict[str, Any]]]:
    """Runs grouped so that a group holds about ``limit`` events (a bigger run: alone)."""
    batch: list[dict[str, Any]] = []
    count = 0
    for run in selected:
        if batch and (count + run["seq"] > limit or len(batch) >= _IN_CHUNK):
            yield batch
            batch, count = [], 0
        batch.append(run)
        count += run["seq"]
    if batch:
        yield batch


def export_rows(store: EventStore, run_ids: Iterable[str] | None = None, *,
                session: tuple[str, str] | None = None, since: float | None = None,
                ) -> Iterator[tuple[dict[str, Any], list[_EventRow]]]:
    """What :meth:`EventStore.export` reads: ``(run, rows)`` for each run
    :meth:`EventStore.export_runs` selects (and its ``run`` dict), its stored rows
    ``(run_id, seq, kind, ts, data, idem)`` in ``seq`` order (``rows`` and ``run`` are
    what :func:`~hypha_celery.events.envelope.enrich` takes). Reads in bulk: one query per
    batch of runs holding up to ~50,000 events."""
    selected = store.export_runs(run_ids, session=session, since=since)
    for batch in _batches(selected, _EXPORT_BATCH):
        with store.reader.connect() as conn:
            rows = _event_rows(conn, [run["run_id"] for run in batch])
        for run in batch:
            yield run, rows.get(run["run_id"], [])


def _event_rows(conn: Connection, run_ids: list[str]) -> dict[str, list[_EventRow]]:
    """``run_id -> [(run_id, seq, kind, ts, data, idem), ...]`` in ``seq`` order.

    Plain driver SQL with ``data`` read as text and decoded here: SQLAlchemy's row and
    JSON processing cost more than the query. PostgreSQL returns the rows unsorted (its
    sort of a big batch spills to disk) and they are sorted here."""
    out: dict[str, list[_EventRow]] = {}
    pg = conn.dialect.name == "postgresql"
    for chunk in _chunks(run_ids, _IN_CHUNK):
        if pg:
            rows = conn.exec_driver_sql(_PG_EVENT_ROWS, (chunk,)).all()
        else:
            marks = ", ".join("?" * len(chunk))
            rows = conn.exec_driver_sql(f"{_EVENT_ROWS} IN ({marks}) ORDER BY run_id, seq",
                                        tuple(chunk)).all()
        datas = _load_all([row[4] for row in rows])
        group: list[_EventRow] = []
        run_id = None
        for (rid, seq, kind, ts, _, idem), data in zip(rows, datas, strict=True):
            if rid != run_id:
                run_id = rid
                group = out.setdefault(rid, [])
            group.append((rid, seq, kind, ts, data, idem))
    if pg:
        for group in out.values():
            group.sort(key=_row_seq)
    return out


def _load_all(texts: list[str]) -> list[Any]:
    """``json.loads`` of each text (stored ``data``: one JSON value each, as the store
    writes it; PostgreSQL's json type checks it), in one parse of them all; a text that is
    not one JSON value (nothing else writes them) is found and raises as ``json.loads``."""
    if not texts:
        return []
    try:
        datas = _loads(f"[{','.join(texts)}]")
    except (TypeError, ValueError):
        datas = None
    if not isinstance(datas, list) or len(datas) != len(texts):
        return list(map(_loads, texts))
    return datas


def _at(where: Callable[[Event], str] | None, ev: Event) -> str:
    return f"{where(ev)}: " if where is not None else ""


def _plan_runs(evs: Iterable[Event], where: Callable[[Event], str] | None,
               checked: Mapping[str, View]) -> list[_RunImport]:
    by_run: dict[str, list[Event]] = {}
    for run_id, group in groupby(evs, _run_of):  # an export lists runs one after another
        by_run.setdefault(run_id, []).extend(group)
    if not by_run:
        raise EmptyImport("no events to import")
    plans = []
    for run_id, run_evs in by_run.items():
        if run_id in checked:
            run_evs.sort(key=_by_seq)  # the caller checked its own list
            plans.append(_RunImport(run_id, run_evs, checked[run_id]))
        else:
            plans.append(_RunImport(run_id, run_evs, check_run(run_id, run_evs, where)))
    return plans


def check_run(run_id: str, evs: list[Event], where: Callable[[Event], str] | None = None,
              ) -> View:
    """Sort one run's events by ``seq`` (in place) and check they make a run: numbered
    1..n (:class:`IncompleteRun`), no ``seq`` twice, ``run.created`` first, folding into a
    projection whose columns fit the store (:class:`InvalidRun`). Returns the fold."""
    evs.sort(key=_by_seq)
    if not run_id or len(run_id) > RUN_ID_MAX:
        raise InvalidRun(f"{_at(where, evs[0])}run id {run_id!r} must have 1 to "
                         f"{RUN_ID_MAX} characters")
    if list(map(_by_seq, evs)) != [*range(1, len(evs) + 1)]:  # else 1..n, seen at once
        _seq_error(run_id, evs, where)
    if evs[0].type != "run.created":
        raise InvalidRun(f"{_at(where, evs[0])}run {run_id} must start with run.created, "
                         f"not {evs[0].type} ({run_id}:1)")
    view = new_view(run_id)
    for ev in evs:
        try:
            apply_event(view, ev.type, ev.payload, ev.timestamp)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidRun(f"{_at(where, ev)}event {run_id}:{ev.seq} ({ev.type}) does not "
                             f"fold into run {run_id} ({type(exc).__name__}: {exc})") from None
        if ev.idempotency_key is not None and len(ev.idempotency_key) > IDEM_MAX:
            raise InvalidRun(f"{_at(where, ev)}event {run_id}:{ev.seq} has an idempotency "
                             f"key longer than {IDEM_MAX} characters")
    return close_run(view, evs, where)


def close_run(view: View, evs: list[Event], where: Callable[[Event], str] | None = None,
              ) -> View:
    """The end of :func:`check_run`, for a caller that folded the events into ``view``
    one at a time with its checks (numbered 1..n, ``run.created`` first, each folds, no
    idempotency key longer than ``IDEM_MAX``): ``seq`` set, the columns checked."""
    view["seq"] = len(evs)
    _check_columns(view, where, evs[0])
    return view


def _seq_error(run_id: str, evs: list[Event], where: Callable[[Event], str] | None) -> None:
    """Raise what is wrong with the ``seq`` numbers of one run's sorted events."""
    for expected, ev in enumerate(evs, 1):
        if ev.seq == expected:
            continue
        if ev.seq < 1:
            raise InvalidRun(f"{_at(where, ev)}event seq {ev.seq} of run {run_id} is not >= 1")
        if ev.seq < expected:
            raise InvalidRun(f"{_at(where, ev)}run {run_id} has two events {run_id}:{ev.seq}")
        raise IncompleteRun(f"{_at(where, ev)}run {run_id} has no event seq {expected}, the "
                            f"next is {run_id}:{ev.seq} (events must be numbered from 1 "
                            "without gaps)")


def _check_columns(view: View, where: Callable[[Event], str] | None, first: Event) -> None:
    """The projection's column values fit ``hypha_runs`` (types, lengths, NOT NULL); an
    error names the run's ``first`` event's place."""
    run_id = view["run_id"]
    if not isinstance(view["graph_id"], str) or not view["graph_id"]:
        raise InvalidRun(f"{_at(where, first)}run.created of run {run_id} has no graph_id")
    for key, value in _cols(view).items():
        column = runs.c[key]
        if value is None:
            ok = bool(column.nullable)
        elif column.type.python_type is str:
            length = getattr(column.type, "length", None)
            ok = isinstance(value, str) and (length is None or len(value) <= length)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise InvalidRun(f"{_at(where, first)}run {run_id}: {key} {value!r:.60} does not "
                             f"fit the store ({column.type})")


def _differs(ev: Event, row: _EventRow) -> str:
    """The first stored field in which ``ev`` differs from the stored ``row``, or ''."""
    for name, mine, stored in (("type", ev.type, row[2]), ("timestamp", ev.timestamp, row[3]),
                               ("payload", ev.payload, row[4]),
                               ("idempotency_key", ev.idempotency_key, row[5])):
        if mine != stored:
            return name
    return ""


def _check_keys(conn: Connection, plans: list[_RunImport],
                where: Callable[[Event], str] | None) -> None:
    """The idempotency keys of the events to write are held by no other event."""
    owner: dict[str | None, Event] = {}
    count = 0
    for plan in plans:
        evs = plan.events[plan.start:]
        keys = list(map(_idem_of, evs))
        owner.update(zip(keys, evs, strict=True))
        count += len(keys) - keys.count(None)
    owner.pop(None, None)
    if len(owner) != count:  # a key twice: which
        _key_twice(plans, where)
    keys = list(owner)
    found: list[Any] = []
    if conn.dialect.name == "postgresql":  # one query, the keys as one JSON array
        found += conn.exec_driver_sql(_PG_HELD_KEYS, (_json(keys),)).all()
    else:  # plain driver SQL: building these statements costs more than running them
        for chunk in _chunks(keys, _IN_CHUNK):
            marks = ", ".join("?" * len(chunk))
            found += conn.exec_driver_sql(f"{_HELD_KEYS} IN ({marks}) LIMIT 1",
                                          tuple(chunk)).all()
    for run_id, seq, key in found[:1]:
        ev = owner[key]
        raise ImportConflict(ev.id, f"{_at(where, ev)}event {ev.id} has the idempotency "
                                 f"key {key!r} of event {run_id}:{seq} in the store; "
                                 "nothing was imported")


def _key_twice(plans: list[_RunImport], where: Callable[[Event], str] | None) -> None:
    """Raise the conflict of the first event to write whose idempotency key an earlier
    one has."""
    owner: dict[str, Event] = {}
    for plan in plans:
        for ev in plan.events[plan.start:]:
            key = ev.idempotency_key
            if key is None:
                continue
            if key in owner:
                raise ImportConflict(ev.id, f"{_at(where, ev)}event {ev.id} has the "
                                     f"idempotency key {key!r} of event {owner[key].id}")
            owner[key] = ev


def _run_rows(conn: Connection, params: tuple[str, int, int], select: str = _RUN_ROWS,
              ) -> tuple[list[Any], list[Any]]:
    """The events of run ``params[0]`` with ``params[1] < seq <= params[2]`` in ``seq``
    order: the rows ``(run_id, seq, kind, ts, data, idem)`` of ``select``, ``data`` as
    stored text, and the decoded ``data`` of each (one parse). PostgreSQL's rows come
    unsorted and are sorted here."""
    if conn.dialect.name == "postgresql":
        rows: list[Any] = _pg_fetch(conn, select.format("::text") + _IN_RANGE.format("%s"),
                                    params)
        rows.sort(key=_row_seq)
    else:
        sql = select.format("") + _IN_RANGE.format("?") + " ORDER BY seq"
        rows = list(conn.exec_driver_sql(sql, params).all())
    return rows, _load_all([row[4] for row in rows])


def _pg_fetch(conn: Connection, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` through the driver's binary protocol (less for the server to
    format and for the driver to parse than text)."""
    cursor = conn.connection.driver_connection.cursor(binary=True)  # type: ignore[union-attr]
    try:
        return cursor.execute(sql, params).fetchall()  # type: ignore[no-any-return]
    except conn.dialect.loaded_dbapi.Error as exc:  # as SQLAlchemy would have raised it
        raise sa.exc.DBAPIError.instance(sql, params, exc,
                                         conn.dialect.loaded_dbapi.Error) from None
    finally:
        cursor.close()


def _insert_event_rows(conn: Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Bulk insert (``data`` already JSON text): COPY on PostgreSQL (``rows`` made as
    they are sent, while the server takes in those before), else one prepared INSERT run
    for every row."""
    if conn.dialect.name != "postgresql":
        rows = list(rows)
        if rows:
            conn.exec_driver_sql(_INSERT_EVENTS + "(?, ?, ?, ?, ?, ?)", rows)
        return
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        with cursor.copy(_COPY_EVENTS) as copy:
            copy.set_types(_COPY_TYPES)
            for row in rows:
                copy.write_row(row)
    except conn.dialect.loaded_dbapi.Error as exc:  # as SQLAlchemy would have raised it
        raise sa.exc.DBAPIError.instance(_COPY_EVENTS, None, exc,
                                         conn.dialect.loaded_dbapi.Error) from None
    finally:
        cursor.close()


def _make_engine(url: str, *, writer: bool = True, unflushed: bool = False) -> Engine:
    try:
        if url.startswith("sqlite"):
            return _sqlite_engine(url, writer=writer)
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        # no pre-ping: it would add a round trip to every step; a dead connection
        # fails its transaction, which is retried by the caller or the supervisor
        if unflushed:
            return sa.create_engine(url, json_serializer=_dumps, pool_size=2, max_overflow=10,
                                    pool_recycle=3600, isolation_level="AUTOCOMMIT",
                                    connect_args={"options": "-c synchronous_commit=off"})
        return sa.create_engine(url, json_serializer=_dumps, pool_size=5, max_overflow=10,
                                pool_recycle=3600)
    except ModuleNotFoundError as exc:
        raise ExtraNotInstalled(
            f"the store URL {url.split('@')[-1]!r} needs {exc.name}: "
            "pip install 'hypha-celery[postgres]'"
        ) from None
    except (SQLAlchemyError, ValueError) as exc:
        raise SetupError(f"invalid store URL: {exc}") from None


def _journal_wal(cur: Any, wait: float = 30.0) -> None:
    """Switch to WAL. On a fresh database the switch needs an exclusive lock and
    SQLite answers "database is locked" at once instead of using the busy timeout
    when another connection is opening the file too: retry for up to ``wait`` s."""
    import sqlite3

    end = time.monotonic() + wait
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > end:
                raise
            time.sleep(0.01)


def _sqlite_engine(url: str, *, writer: bool = True) -> Engine:
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, json_serializer=_dumps,
                              connect_args={"timeout": 30, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        _journal_wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # writers take the lock up front (no deadlocking lock upgrades); readers don't
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")

    return engine

"""The engines of one store URL (per process), the dialect setup and the schema.

SQLite is the embedded default, PostgreSQL production. Every other store module is a
mixin of :class:`Engines`: it reaches the database through ``engine`` (durable writes),
``reader`` (reads without a write lock) and ``unflushed`` (records a later durable commit
covers).
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Self, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from hypha_celery.errors import ExtraNotInstalled, SetupError
from hypha_celery.middleware._process import on_fork

#: compact JSON, NaN refused: what the engines write into JSON columns
dumps = partial(json.dumps, allow_nan=False, separators=(",", ":"))

#: PostgreSQL connections per engine and process, opened on demand and then kept (none
#: beyond them: an overflow connection closed when returned made a burst of io turns
#: open and close one PostgreSQL backend every few turns), and the seconds a thread
#: waits for a free one before failing.
POOL_SIZE = 15
UNFLUSHED_POOL_SIZE = 12
MAX_OVERFLOW = 0
POOL_TIMEOUT = 30.0
#: Seconds PostgreSQL lets a transaction of ours sit idle before it ends the session:
#: a worker cut off from the database mid-transaction (its host lost its network) would
#: otherwise hold its row locks, and stall the supervisor's sweep that needs one, until
#: TCP keepalive gives up (hours). Our transactions never wait on anything but the store.
IDLE_IN_TRANSACTION_TIMEOUT_S = 60
_IDLE_IN_TX = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_S * 1000}"

#: What a store that cannot be reached (or refuses the connection) raises.
STORE_ERRORS: tuple[type[BaseException], ...] = (sa.exc.OperationalError,)


def store_error(exc: BaseException) -> str | None:
    """The driver's message of a database error, or None if ``exc`` is not one."""
    return str(exc.orig) if isinstance(exc, sa.exc.DBAPIError) else None


def display_url(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    return sa.engine.make_url(url).render_as_string(hide_password=True)


#: PostgreSQL's SQLSTATE for "permission denied".
_INSUFFICIENT_PRIVILEGE = "42501"


class Engines:
    """The engines of ``url``, built once per process (after a fork: again); the schema
    brought to the newest migration before the first use."""

    #: The user id every read and lock of a run is narrowed to (:meth:`scoped`); None:
    #: unscoped, the trusted view of the whole store.
    owner: str | None = None

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: Engine | None = None
        self._reader: Engine | None = None
        self._unflushed: Engine | None = None
        self._lock = threading.Lock()
        self._migrate_lock = threading.Lock()
        self._migrated = False
        on_fork(self._after_fork)

    def _after_fork(self) -> None:
        """A forked child uses none of its parent's connections: each engine's pool is
        replaced, the parent's connections left to the parent (``close=False``); a view
        from :meth:`scoped` shares the engines, so it is renewed too."""
        self._lock = threading.Lock()
        for engine in (self._engine, self._reader, self._unflushed):
            if engine is not None:
                engine.dispose(close=False)

    def scoped(self, owner: str) -> Self:
        """This store narrowed to the runs of user ``owner``: reads, locks, exports and
        dead letters of other users' runs (and of runs of no user) find nothing, as for
        an id that does not exist. Shares this store's engines (never ``dispose`` it)."""
        _ = self.engine  # built once, here, so both share the pools
        view = copy.copy(self)
        view.owner = owner
        return view

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._reader = (
                        make_engine(self.url, writer=False) if self.url.startswith("sqlite")
                        else None)
                    engine = make_engine(self.url)
                    if self._reader is None:
                        self._reader = engine.execution_options(isolation_level="AUTOCOMMIT")
                    self._engine = engine
        return self._engine

    @property
    def unflushed(self) -> Engine:
        """Autocommit engine whose commits PostgreSQL acknowledges before the WAL
        flush (``synchronous_commit=off``): for records a later durable commit
        covers. On SQLite, the writer."""
        if self.dialect == "sqlite":
            return self.engine
        if self._unflushed is None:
            with self._lock:
                if self._unflushed is None:
                    self._unflushed = make_engine(self.url, unflushed=True)
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
            try:
                command.upgrade(cfg, "head")
            except sa.exc.ProgrammingError as exc:
                if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
                    raise
                raise SetupError(
                    "the store's schema is not at the newest migration and this database "
                    "role may not change it (permission denied): migrate as the schema's "
                    "owner first (docs/security.md, Least privilege)") from None
        self._migrated = True

    def ensure_schema(self) -> None:
        """Migrate once per process: the first caller migrates, concurrent threads
        wait for it (a thread pool's first tasks all arrive at once)."""
        if self._migrated:
            return
        with self._migrate_lock:
            if not self._migrated:
                self.migrate()

    def dispose(self) -> None:
        engines = (self._engine, self._reader, self._unflushed)
        for engine in {id(e): e for e in engines if e is not None}.values():
            engine.dispose()
        self._engine = self._reader = self._unflushed = None


def insert_for(dialect: str) -> Any:
    """The dialect's ``insert`` (it has ``on_conflict_do_nothing`` / ``_do_update``)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


def inserted_id(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def as_raised(dialect: Any, sql: str, params: Any, exc: Exception) -> sa.exc.StatementError:
    """The driver error ``exc`` of plain driver SQL, as SQLAlchemy would have raised it."""
    return sa.exc.DBAPIError.instance(sql, params, exc, dialect.loaded_dbapi.Error)


@dataclass(frozen=True, slots=True)
class Fetched:
    """What :func:`driver_sql` returns: the rows (empty for a statement returning none)
    and the driver's row count."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def all(self) -> list[tuple[Any, ...]]:
        return self.rows

    def scalar_one(self) -> Any:
        if len(self.rows) != 1:
            raise sa.exc.NoResultFound("expected exactly one row")
        return self.rows[0][0]


def driver_sql(conn: Connection, sql: str, params: Sequence[Any] = ()) -> Fetched:
    """Plain driver SQL (``%s`` parameters) on the driver connection under ``conn``, every
    row fetched: the hot path's statements (an agent's turn, a node's step) skip
    SQLAlchemy's execution layer, about 45 µs of CPU per statement on PostgreSQL. A
    driver error is raised as SQLAlchemy would have raised it."""
    def run(cursor: Any) -> Fetched:
        cursor.execute(sql, params)
        rows = cursor.fetchall() if cursor.description is not None else []
        return Fetched(rows, cursor.rowcount)

    return cast(Fetched, driver_call(conn, sql, params, run))


def driver_call(conn: Connection, sql: str, params: Any, fn: Callable[[Any], Any], *,
                binary: bool = False) -> Any:
    """``fn(cursor)`` on a cursor of the driver connection under ``conn`` (``binary``: of
    the driver's binary protocol); a driver error is raised as SQLAlchemy would have
    raised it."""
    driver: Any = conn.connection.driver_connection
    cursor = driver.cursor(binary=True) if binary else driver.cursor()
    try:
        return fn(cursor)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise as_raised(conn.dialect, sql, params, exc) from None
    finally:
        cursor.close()


def make_engine(url: str, *, writer: bool = True, unflushed: bool = False) -> Engine:
    try:
        if url.startswith("sqlite"):
            return _sqlite_engine(url, writer=writer)
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
        # no pre-ping: it would add a round trip to every step; a dead connection
        # fails its transaction, which is retried by the caller or the supervisor.
        # Bounded pools (POOL_SIZE connections per engine and process, kept once opened):
        # an io worker's hundreds of threads share them, each holding one only for a
        # transaction, and wait up to POOL_TIMEOUT seconds for a free one
        if unflushed:
            return sa.create_engine(url, json_serializer=dumps, pool_size=UNFLUSHED_POOL_SIZE,
                                    max_overflow=MAX_OVERFLOW, pool_timeout=POOL_TIMEOUT,
                                    pool_recycle=3600, isolation_level="AUTOCOMMIT",
                                    connect_args={"options": "-c synchronous_commit=off"})
        return sa.create_engine(url, json_serializer=dumps, pool_size=POOL_SIZE,
                                max_overflow=MAX_OVERFLOW, pool_timeout=POOL_TIMEOUT,
                                pool_recycle=3600, connect_args={"options": _IDLE_IN_TX})
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
    engine = sa.create_engine(url, json_serializer=dumps,
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


@contextmanager
def scratch_database(admin_url: str, prefix: str = "hypha_test_") -> Iterator[str]:
    """A new, empty PostgreSQL database on the server of ``admin_url`` (a role that may
    create databases): its URL, and the database dropped afterwards (connections to it
    closed by force). For tests and benches that must not share tables."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield sa.make_url(admin_url).set(database=name).render_as_string(
                hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()

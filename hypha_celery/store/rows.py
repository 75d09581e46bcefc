"""Stored event rows ``(run_id, seq, kind, ts, data, idem)`` in bulk: ``data`` as JSON
text in and out, the bulk insert (binary COPY on PostgreSQL), reads of a ``seq`` range
and of a batch of runs. Plain driver SQL throughout: SQLAlchemy's statement building and
row processing cost more than the queries here."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, TypeVar

from pydantic_core import PydanticSerializationError
from pydantic_core import to_json as _to_json
from sqlalchemy.engine import Connection

from hypha_celery.events.jsontext import prebuilt
from hypha_celery.store.engine import driver_call

IN_CHUNK = 500  # ids per IN (...) list
#: events per commit from which PostgreSQL gets them by COPY (two round trips, then the
#: rows in one stream) rather than one pipelined INSERT each (one round trip)
COPY_FROM = 64
EventRow = tuple[str, int, str, float, dict[str, object], str | None]
#: ``dumps(value)`` without building an encoder per call (same text)
json_text = prebuilt(json.JSONEncoder(allow_nan=False, separators=(",", ":"),
                                      check_circular=False))

# binary COPY: the driver's C dumpers, and less for the server to parse; ``data`` goes as
# text, which is what json's binary form is
_COPY_EVENTS = ("COPY hypha_events (run_id, seq, kind, ts, data, idem) FROM STDIN "
                "(FORMAT BINARY)")
_COPY_TYPES = ["text", "int4", "text", "float8", "text", "text"]
_DATA = 4  # the ``data`` column's place
_COPY_BYTES_TYPES = [*_COPY_TYPES[:_DATA], "bytea", *_COPY_TYPES[_DATA + 1:]]  # data as bytes
_INSERT_EVENTS = "INSERT INTO hypha_events (run_id, seq, kind, ts, data, idem) VALUES "
# stored rows ``(run_id, seq, kind, ts, data, idem)``; ``data`` read as text on PostgreSQL
RUN_ROWS = "SELECT run_id, seq, kind, ts, data{}, idem FROM hypha_events"
HISTORY = "SELECT NULL, seq, kind, ts, data{}, NULL FROM hypha_events"  # what fold needs
_EVENT_ROWS = RUN_ROWS.format("") + " WHERE run_id"  # of a list of runs
_PG_EVENT_ROWS = RUN_ROWS.format("::text") + " WHERE run_id = ANY(%s)"
_IN_RANGE = " WHERE run_id = {0} AND seq > {0} AND seq <= {0}"
_row_seq = itemgetter(1)
_loads = json.loads
_T = TypeVar("_T")


def json_data(value: Any) -> str:
    """:func:`json_text` of a value of JSON types only (``str``, ``int``, ``float``,
    ``bool``, ``None``, lists and dicts of them): by pydantic's serializer (about twice as
    fast), when its text is ASCII with finite numbers only; then it is the same JSON, only
    its float exponents are shorter (``1e-7`` for ``1e-07``: the same number). It would
    turn other types (datetimes, sets, ...) into JSON where :func:`json_text` refuses them."""
    try:
        text = _to_json(value)
    except PydanticSerializationError:  # a lone surrogate
        return json_text(value)
    if not text.isascii() or b"NaN" in text or b"Infinity" in text:
        return json_text(value)  # ASCII escapes; refused NaN / Infinity
    return text.decode()


def load_all(texts: list[str]) -> list[Any]:
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


def chunks(items: list[_T], size: int) -> Iterator[list[_T]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def insert_rows(conn: Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Bulk insert (``data`` already JSON text): COPY on PostgreSQL (``rows`` made as
    they are sent, while the server takes in those before), else one prepared INSERT run
    for every row."""
    if conn.dialect.name != "postgresql":
        rows = list(rows)
        if rows:
            conn.exec_driver_sql(_INSERT_EVENTS + "(?, ?, ?, ?, ?, ?)", rows)
        return

    def copy_rows(cursor: Any) -> None:
        with cursor.copy(_COPY_EVENTS) as copy:
            copy.set_types(_COPY_TYPES)
            for row in rows:
                copy.write_row(row)

    driver_call(conn, _COPY_EVENTS, None, copy_rows)


@contextmanager
def event_copy(conn: Connection) -> Iterator[Callable[[Iterable[tuple[Any, ...]]], None]]:
    """A COPY of event rows kept open across the caller's work (PostgreSQL): yields
    ``send(rows)``, which writes rows ``(run_id, seq, kind, ts, data, idem)``, ``data``
    JSON text as UTF-8 bytes (sent as they are: the server reads a binary COPY's json
    field as text, and the bytes skip a decode and an encode), as :func:`insert_rows`
    does; the COPY ends when the block does (cancelled when it raises). The server takes
    the rows in as they come, while the caller goes on. A driver error is the driver's
    (the caller rolls back)."""
    driver: Any = conn.connection.driver_connection
    with driver.cursor() as cursor:
        _bytes_as_bytea(cursor)
        with cursor.copy(_COPY_EVENTS) as copy:
            copy.set_types(_COPY_BYTES_TYPES)
            write = copy.write_row

            def send(rows: Iterable[tuple[Any, ...]]) -> None:
                for row in rows:
                    write(row)

            yield send


def _bytes_as_bytea(cursor: Any) -> None:
    """``bytes`` dumped as ``bytea`` by the driver's own dumper (its C one, when built) on
    this cursor: the one it finds for ``bytea`` is the DB-API ``Binary`` wrapper's, in
    Python, which costs a call per row."""
    from psycopg.types.string import BytesBinaryDumper

    cursor.adapters.register_dumper(bytes, BytesBinaryDumper)


def run_rows(conn: Connection, params: tuple[str, int, int], select: str = RUN_ROWS,
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
    return rows, load_all([row[4] for row in rows])


def event_rows(conn: Connection, run_ids: list[str]) -> dict[str, list[EventRow]]:
    """``run_id -> [(run_id, seq, kind, ts, data, idem), ...]`` in ``seq`` order.

    Plain driver SQL with ``data`` read as text and decoded here: SQLAlchemy's row and
    JSON processing cost more than the query. PostgreSQL returns the rows unsorted (its
    sort of a big batch spills to disk) and they are sorted here."""
    out: dict[str, list[EventRow]] = {}
    pg = conn.dialect.name == "postgresql"
    for chunk in chunks(run_ids, IN_CHUNK):
        if pg:
            rows = conn.exec_driver_sql(_PG_EVENT_ROWS, (chunk,)).all()
        else:
            marks = ", ".join("?" * len(chunk))
            rows = conn.exec_driver_sql(f"{_EVENT_ROWS} IN ({marks}) ORDER BY run_id, seq",
                                        tuple(chunk)).all()
        datas = load_all([row[4] for row in rows])
        group: list[EventRow] = []
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


def _pg_fetch(conn: Connection, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` through the driver's binary protocol (less for the server to
    format and for the driver to parse than text)."""
    def fetch(cursor: Any) -> list[tuple[Any, ...]]:
        return cursor.execute(sql, params).fetchall()  # type: ignore[no-any-return]

    return driver_call(conn, sql, params, fetch, binary=True)  # type: ignore[no-any-return]

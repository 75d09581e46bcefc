"""Importing events (an export of this or another store) in one transaction: the plan
per run, the checks of a run's events (:func:`check_run`), the comparison with what the
store has, the bulk write; and :class:`ImportStream`, the same transaction written while
its input is still being read (PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import sqlalchemy as sa
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from hypha_celery.errors import EmptyImport, ImportConflict, IncompleteRun, InvalidRun
from hypha_celery.events.envelope import Event
from hypha_celery.events.fold import apply_event, new_view
from hypha_celery.events.payloads import (
    SessionClosed,
    SessionCreated,
    SessionUpdated,
    parse_payload,
)
from hypha_celery.events.view import View
from hypha_celery.jsontypes import JsonObject
from hypha_celery.store.engine import Engines, driver_call, driver_sql, dumps
from hypha_celery.store.projection import columns_of, doc_of
from hypha_celery.store.rows import (
    IN_CHUNK,
    EventRow,
    chunks,
    event_copy,
    event_rows,
    insert_rows,
    json_data,
    json_text,
)
from hypha_celery.store.schema import runs, sessions
from hypha_celery.store.sessions import SessionRow, insert_session, session_key
from hypha_celery.store.tx import check_kind

RUN_ID_MAX = 64  # hypha_runs.run_id
IDEM_MAX = 200  # hypha_events.idem
_HELD_KEYS = "SELECT run_id, seq, idem FROM hypha_events WHERE idem"
_PG_HELD_KEYS = _HELD_KEYS + " IN (SELECT json_array_elements_text(%s::json)) LIMIT 1"
_PG_ANY_RUN = "SELECT run_id FROM hypha_runs WHERE run_id = ANY(%s) LIMIT 1"
# the rows of new runs, by binary COPY (what ``runs.insert()`` writes: ``doc`` as the
# engine's JSON text)
_RUN_COPY = (("run_id", "text"), ("seq", "int4"), ("graph_id", "text"), ("status", "text"),
             ("user_id", "text"), ("session_id", "text"), ("lane", "text"),
             ("waiting", "text"), ("deadline", "float8"), ("idempotency_key", "text"),
             ("created_at", "float8"), ("updated_at", "float8"), ("doc", "text"))
_RUN_COLUMNS = tuple(name for name, _ in _RUN_COPY)
_COPY_RUNS = f"COPY hypha_runs ({', '.join(_RUN_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COPY_RUN_TYPES = [kind for _, kind in _RUN_COPY]
_FLOAT_COLUMNS = frozenset(name for name, kind in _RUN_COPY if kind == "float8")
_row_fields = itemgetter("run_id", "seq", "type", "timestamp", "payload", "idempotency_key")
_fields = attrgetter("__dict__")  # an envelope's fields (pydantic's layout)
_by_seq = attrgetter("seq")
_run_of = attrgetter("run_id")
_type_of = attrgetter("type")
_idem_of = attrgetter("idempotency_key")

Where = Callable[[Event], str] | None  # names an event's place in error messages


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


class Imports(Engines):
    """The one-transaction import."""

    def import_events(self, evs: Iterable[Event], *, where: Where = None,
                      checked: Mapping[str, View] | None = None,
                      json_payloads: bool = False) -> ImportResult:
        """Import events (an :meth:`export` of this or another store) in ONE transaction:
        all of them, or nothing when anything is wrong.

        Each run's events must be complete (``seq`` 1..n, else :class:`IncompleteRun`),
        start with ``run.created`` and fold into a projection (:class:`InvalidRun`); each
        has a type of the taxonomy (:class:`UnknownEventKind`). Per
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
                _import_write(conn, plans, json_data if json_payloads else json_text)
        except IntegrityError as exc:  # a concurrent writer got there in between
            raise ImportConflict("", "the store refused the import, nothing was imported: "
                                     f"{' '.join(str(exc.orig).split())}") from None
        written = [p for p in plans if p.start < len(p.events)]
        return ImportResult(runs=len(written), present=present,
                            events=sum(len(p.events) - p.start for p in written))

    def _import_present(self, conn: Connection, plans: list[_RunImport], where: Where
                        ) -> int:
        """Lock the rows of the runs the store has and compare their stored events with
        the imported ones; returns how many are present already."""
        q = sa.select(runs.c.run_id)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        by_id = {p.run_id: p for p in plans}
        known: list[str] = []
        for chunk in chunks(list(by_id), IN_CHUNK):
            known.extend(conn.execute(q.where(runs.c.run_id.in_(chunk))).scalars())
        present = 0
        for run_id, stored in event_rows(conn, known).items():
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


def _import_write(conn: Connection, plans: list[_RunImport],
                  encode: Callable[[Any], str]) -> None:
    new_runs: list[dict[str, Any]] = []
    todo: list[list[Event]] = []
    for plan in plans:
        if plan.start == len(plan.events):
            continue
        view = plan.view
        if plan.new_run:
            new_runs.append(_new_run(plan.run_id, view))
        else:
            cols = {k: v for k, v in columns_of(view).items() if k != "idempotency_key"}
            conn.execute(runs.update().where(runs.c.run_id == plan.run_id).values(
                seq=view["seq"], doc=doc_of(view), **cols))
        todo.append(plan.events[plan.start:])
    if new_runs and conn.dialect.name == "postgresql":
        _copy_runs(conn, new_runs)
    elif new_runs:
        conn.execute(runs.insert(), new_runs)
    if todo:
        insert_rows(conn, _rows(todo, encode))
        _project_sessions(conn, [e for evs in todo for e in evs if e.type in _SESSION_KINDS])


def _new_run(run_id: str, view: View) -> dict[str, Any]:
    """The ``hypha_runs`` row of an imported run the store does not have: the run's
    idempotency key stays in its events and its projection document, but is not claimed
    in this store's unique column."""
    return {"run_id": run_id, "seq": view["seq"], "doc": doc_of(view), **columns_of(view),
            "idempotency_key": None}


def _rows(todo: list[list[Event]], encode: Callable[[Any], str],
          ) -> Iterator[tuple[Any, ...]]:
    """The stored rows ``(run_id, seq, kind, ts, data, idem)`` of events, ``data``
    encoded, read from each envelope's fields (its ``__dict__``: cheaper than its
    attributes)."""
    for evs in todo:
        for run_id, seq, kind, ts, data, idem in map(_row_fields, map(_fields, evs)):
            yield run_id, seq, kind, ts, encode(data), idem


_SESSION_KINDS = frozenset({"session.created", "session.updated", "session.closed"})


def _project_sessions(conn: Connection, evs: list[Event]) -> None:
    """The session rows as the imported session events leave them, in log order: a
    ``session.created`` opens its session (a session this store has already keeps its
    row: first writer wins); a ``session.updated`` merges its metadata over the row's (the
    caller wins, key by key); a ``session.closed`` sets ``closed_at`` to its time (once).
    The last two change only a session the event's run opened, as the lifecycle writer
    writes them to that run's log: a session another run opened here keeps its own."""
    for ev in evs:
        if ev.type == "session.created":
            s = ev.body_as(SessionCreated)
            insert_session(conn, conn.dialect.name, SessionRow(
                s.user_id, s.session_id, s.profile, s.pack, dict(s.metadata), ev.run_id,
                ev.timestamp))
        elif ev.type == "session.updated":
            u = ev.body_as(SessionUpdated)
            _merge_metadata(conn, _opened_by(ev.run_id, u.user_id, u.session_id), u.metadata)
        else:
            c = ev.body_as(SessionClosed)
            conn.execute(sessions.update()
                         .where(*_opened_by(ev.run_id, c.user_id, c.session_id),
                                sessions.c.closed_at.is_(None))
                         .values(closed_at=ev.timestamp))


def _opened_by(run_id: str, user_id: str | None, session_id: str
               ) -> tuple[sa.ColumnElement[bool], ...]:
    """The conditions of the row of session ``(user_id, session_id)`` if ``run_id``
    opened it."""
    return (sessions.c.key == session_key(user_id, session_id),
            sessions.c.first_run_id == run_id)


def _merge_metadata(conn: Connection, row: tuple[sa.ColumnElement[bool], ...],
                    change: JsonObject) -> None:
    have = conn.execute(sa.select(sessions.c.meta).where(*row)).first()
    if have is not None:
        merged: JsonObject = {**dict(have.meta or {}), **change}
        conn.execute(sessions.update().where(*row).values(meta=merged))


def _at(where: Where, ev: Event) -> str:
    return f"{where(ev)}: " if where is not None else ""


def _plan_runs(evs: Iterable[Event], where: Where, checked: Mapping[str, View],
               ) -> list[_RunImport]:
    by_run: dict[str, list[Event]] = {}
    for run_id, group in groupby(evs, _run_of):  # an export lists runs one after another
        by_run.setdefault(run_id, []).extend(group)
    if not by_run:
        raise EmptyImport("no events to import")
    plans = []
    for run_id, run_evs in by_run.items():
        if run_id in checked:
            for kind in set(map(_type_of, run_evs)):  # check_run's fold checks the others
                check_kind(kind)
            run_evs.sort(key=_by_seq)  # the caller checked its own list
            plans.append(_RunImport(run_id, run_evs, checked[run_id]))
        else:
            plans.append(_RunImport(run_id, run_evs, check_run(run_id, run_evs, where)))
    return plans


def check_run(run_id: str, evs: list[Event], where: Where = None) -> View:
    """Sort one run's events by ``seq`` (in place) and check they make a run: numbered
    1..n (:class:`IncompleteRun`), no ``seq`` twice, ``run.created`` first, folding into a
    projection whose columns fit the store (:class:`InvalidRun`; an event whose type is
    not of the taxonomy does not fold). Returns the fold."""
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
            _check_payload(ev)
            apply_event(view, ev.type, ev.payload, ev.timestamp)
        except _BadPayload as exc:
            raise InvalidRun(f"{_at(where, ev)}event {run_id}:{ev.seq} ({ev.type}) does not "
                             f"fold into run {run_id} ({exc})") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidRun(f"{_at(where, ev)}event {run_id}:{ev.seq} ({ev.type}) does not "
                             f"fold into run {run_id} ({type(exc).__name__}: {exc})") from None
        if ev.idempotency_key is not None and len(ev.idempotency_key) > IDEM_MAX:
            raise InvalidRun(f"{_at(where, ev)}event {run_id}:{ev.seq} has an idempotency "
                             f"key longer than {IDEM_MAX} characters")
    return close_run(view, evs, where)


class _BadPayload(Exception):
    """A payload of an imported event its type's model refuses (the problems, one line)."""


def _check_payload(ev: Event, most: int = 3) -> None:
    """``ev``'s payload validated against its type's model, as input from outside the log
    is: a missing or mistyped field refuses it; a field the model does not know (written by
    a newer version, or by hand) is tolerated, as the fold ignores it."""
    try:
        parse_payload(ev.type, ev.payload)
    except ValidationError as exc:
        errors = [e for e in exc.errors() if e["type"] != "extra_forbidden"]
        if errors:
            said = [_problem(e) for e in errors[:most]]
            more = f" (+{len(errors) - most} more)" if len(errors) > most else ""
            raise _BadPayload("; ".join(said) + more) from None


def _problem(err: ErrorDetails) -> str:
    where = ".".join(map(str, err["loc"])) or "payload"
    return f"no {where}" if err["type"] == "missing" else f"{where}: {err['msg']}"


def close_run(view: View, evs: list[Event], where: Where = None) -> View:
    """The end of :func:`check_run`, for a caller that folded the events into ``view``
    one at a time with its checks (numbered 1..n, ``run.created`` first, each folds, no
    idempotency key longer than ``IDEM_MAX``): ``seq`` set, the columns checked."""
    return close_fold(view, len(evs), evs[0], where)


def close_fold(view: View, count: int, first: Event, where: Where = None) -> View:
    """:func:`close_run` of a run of ``count`` events whose first is ``first``."""
    view["seq"] = count
    _check_columns(view, where, first)
    return view


def _seq_error(run_id: str, evs: list[Event], where: Where) -> None:
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


def _check_columns(view: View, where: Where, first: Event) -> None:
    """The projection's column values fit ``hypha_runs`` (types, lengths, NOT NULL); an
    error names the run's ``first`` event's place."""
    run_id = view["run_id"]
    if not isinstance(view["graph_id"], str) or not view["graph_id"]:
        raise InvalidRun(f"{_at(where, first)}run.created of run {run_id} has no graph_id")
    for key, value in columns_of(view).items():
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


def _differs(ev: Event, row: EventRow) -> str:
    """The first stored field in which ``ev`` differs from the stored ``row``, or ''."""
    for name, mine, stored in (("type", ev.type, row[2]), ("timestamp", ev.timestamp, row[3]),
                               ("payload", ev.payload, row[4]),
                               ("idempotency_key", ev.idempotency_key, row[5])):
        if mine != stored:
            return name
    return ""


def _check_keys(conn: Connection, plans: list[_RunImport], where: Where) -> None:
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
        found += conn.exec_driver_sql(_PG_HELD_KEYS, (json_text(keys),)).all()
    else:  # plain driver SQL: building these statements costs more than running them
        for chunk in chunks(keys, IN_CHUNK):
            marks = ", ".join("?" * len(chunk))
            found += conn.exec_driver_sql(f"{_HELD_KEYS} IN ({marks}) LIMIT 1",
                                          tuple(chunk)).all()
    for run_id, seq, key in found[:1]:
        ev = owner[key]
        raise ImportConflict(ev.id, f"{_at(where, ev)}event {ev.id} has the idempotency "
                                 f"key {key!r} of event {run_id}:{seq} in the store; "
                                 "nothing was imported")


def _key_twice(plans: list[_RunImport], where: Where) -> None:
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


class _Abandoned(Exception):
    """Rolls an :class:`ImportStream`'s transaction back."""


class ImportStream:
    """One import's transaction written while its input is still being read (PostgreSQL
    only): the events go to the server by one COPY, batch by batch (:meth:`send`), as
    the caller reads and checks the lines after them, so the server takes the rows in on
    its own core meanwhile; :meth:`commit` adds the run rows and the session rows and
    commits. The caller sends only what :meth:`Imports.import_events` would write of an
    input of runs the store does not have (checked events, ``seq`` 1..n, data encoded).

    It is for runs the store does not have: :meth:`open` gives up when the store has one
    of the first ones; a later run the store has (its events or its row), an idempotency
    key held twice (in the input or by a stored event) fail the COPY or the run rows'
    insert on the tables' unique constraints. Whatever fails, the transaction is rolled
    back and the stream is :attr:`given_up` (no exception): the caller then imports the
    classic way (:meth:`Imports.import_events`), which compares, names a conflict, or
    writes the rest of a run the store has fewer events of. Nothing is visible to others
    before :meth:`commit`; :meth:`abort` rolls back."""

    def __init__(self, store: Imports) -> None:
        self._store = store
        self._tx = ExitStack()  # the connection and its transaction
        self._copy = ExitStack()  # the COPY (closed before the transaction's other statements)
        self._conn: Connection | None = None
        self._send: Callable[[Iterable[tuple[Any, ...]]], None] | None = None
        self.given_up = store.dialect != "postgresql"
        self._connecting: threading.Thread | None = None
        if not self.given_up:  # a new connection takes tens of ms: meanwhile, the caller reads
            self._connecting = threading.Thread(target=self._connect, daemon=True,
                                                name="hypha-import-connect")
            self._connecting.start()

    def _connect(self) -> None:
        """Check out a connection and begin the transaction (in a thread of its own)."""
        try:
            self._store.ensure_schema()
            conn = self._tx.enter_context(self._store.engine.connect())
            self._tx.enter_context(conn.begin())
            self._conn = conn
        except Exception:  # the classic import will say what it is
            self._conn = None

    def open(self, run_ids: list[str]) -> bool:
        """Begin the COPY in the transaction, unless the store has one of ``run_ids``
        (the runs of the first batch): then give up. Whether it is open (once: a COPY
        takes the connection until :meth:`commit`)."""
        if self._send is not None:
            raise RuntimeError("ImportStream.open: the stream is open already")
        self._connected()
        conn = self._conn
        if self.given_up or conn is None:
            self.abort()
            return False
        try:
            if driver_sql(conn, _PG_ANY_RUN, (run_ids,)).rows:
                raise _Abandoned
            self._send = self._copy.enter_context(event_copy(conn))
        except Exception:  # the classic import will say what it is
            self.abort()
            return False
        return True

    def _connected(self) -> None:
        """Wait for :meth:`_connect`."""
        thread, self._connecting = self._connecting, None
        if thread is not None:
            thread.join()

    def send(self, rows: Iterable[tuple[Any, ...]]) -> bool:
        """COPY ``rows`` ``(run_id, seq, kind, ts, data, idem)`` (``data`` JSON text as
        UTF-8 bytes, :func:`event_copy`); whether the stream is still on."""
        if self.given_up or self._send is None:
            return False
        try:
            self._send(rows)
        except Exception:  # the classic import will say what it is
            self.abort()
            return False
        return True

    def commit(self, ended: list[tuple[str, View]], sessions: list[Event]) -> bool:
        """End the COPY, insert the rows of the runs ``ended`` (``(run_id, view)``, the
        views closed by :func:`close_run`) and project the ``sessions`` events (in log
        order), commit. Whether it committed (else it gave up: nothing written)."""
        if self.given_up or self._conn is None:
            return False
        conn = self._conn
        try:
            self._copy.close()
            _copy_runs(conn, [_new_run(run_id, view) for run_id, view in ended])
            _project_sessions(conn, sessions)
            self._tx.close()
        except Exception:  # the classic import will say what it is
            self.abort()
            return False
        return True

    def abort(self) -> None:
        """Roll back (the COPY cancelled); the stream has given up."""
        self._connected()
        self.given_up = True
        self._send = None
        for stack in (self._copy, self._tx):
            with suppress(Exception):  # rolled back, or the connection dropped
                stack.__exit__(_Abandoned, _Abandoned(), None)


def _copy_runs(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert the rows of new runs (:func:`_new_run`) by one COPY (PostgreSQL): what
    ``conn.execute(runs.insert(), rows)`` writes (1,000 runs: 57 ms of CPU that way)."""
    def copy_rows(cursor: Any) -> None:
        with cursor.copy(_COPY_RUNS) as copy:
            copy.set_types(_COPY_RUN_TYPES)
            for row in rows:
                copy.write_row([_run_value(name, row[name]) for name in _RUN_COLUMNS])

    driver_call(conn, _COPY_RUNS, None, copy_rows)


def _run_value(name: str, value: Any) -> Any:
    """A run row's value as its COPY sends it: ``doc`` as JSON text, numbers of the
    float columns as floats."""
    if name == "doc":
        return dumps(value)
    if value is not None and name in _FLOAT_COLUMNS:
        return float(value)
    return value

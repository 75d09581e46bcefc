"""The write path: :class:`Tx`, one store transaction, and the checks every appended event
passes (:func:`check_append`).

Every write is one transaction that locks the run row (``SELECT ... FOR UPDATE``
on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), appends events with the next
``seq`` values, folds them into the projection and writes both. Two writers of
one run are therefore serialized; the fencing checks the caller makes on the
locked view are race-free.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from hypha_celery.errors import NotTheLifecycleWriter, StoreConflict, UnknownEventKind
from hypha_celery.events.envelope import KINDS, EventType
from hypha_celery.events.fold import PASSIVE_KINDS, apply_event, apply_payload
from hypha_celery.events.payloads import Payload
from hypha_celery.events.view import View
from hypha_celery.store.engine import Engines, driver_sql
from hypha_celery.store.lanes import LaneRows
from hypha_celery.store.projection import (
    PG_BY_ID,
    PG_BY_ID_OWNED,
    by_id,
    columns_of,
    doc_of,
    view_of,
)
from hypha_celery.store.rows import COPY_FROM, insert_rows, json_text
from hypha_celery.store.schema import events, runs
from hypha_celery.store.sessions import SessionRows

#: What :mod:`hypha_celery.runtime.lifecycle` passes as ``writer``: the one canonical
#: writer of ``run.*`` and ``session.*`` events (hypha's RunManager); :meth:`Tx.append`
#: refuses them otherwise.
LIFECYCLE_WRITER = object()
_LIFECYCLE = ("run.", "session.")
#: The per-step statements, built once (see :func:`~hypha_celery.store.projection.by_id`).
_UPDATE = runs.update().where(runs.c.run_id == sa.bindparam("b_run_id"))
_UPDATE_EXPECTED = _UPDATE.where(runs.c.seq == sa.bindparam("b_seq"))
_INSERT_EVENTS = events.insert()
# the same on PostgreSQL as plain driver SQL (no SQLAlchemy execution layer per step)
_PG_INSERT_EVENTS = f"INSERT INTO {events.name} (run_id, seq, kind, ts, data, idem) VALUES "
_PG_EVENT_MARKS = "(%s, %s, %s, %s, %s::json, %s)"


def _pg_lock(run_id: str, owner: str | None) -> tuple[str, tuple[str, ...]]:
    if owner is None:
        return PG_BY_ID + " FOR UPDATE", (run_id,)
    return PG_BY_ID_OWNED + " FOR UPDATE", (run_id, owner)


def _pg_update(run_id: str, values: dict[str, Any], expected: int | None
               ) -> tuple[str, list[Any]]:
    """``UPDATE hypha_runs SET <values> WHERE run_id = ... [AND seq = expected]``."""
    sets = ", ".join(f"{c} = %s::json" if c == "doc" else f"{c} = %s" for c in values)
    params = [json_text(v) if c == "doc" else v for c, v in values.items()]
    sql = f"UPDATE {runs.name} SET {sets} WHERE run_id = %s"
    params.append(run_id)
    if expected is not None:
        sql += " AND seq = %s"
        params.append(expected)
    return sql, params


def check_kind(kind: str) -> None:
    """``kind`` is a type of the taxonomy (else :class:`UnknownEventKind`)."""
    if kind not in KINDS:
        raise UnknownEventKind(f"{kind!r} is not an event type of the taxonomy")


def check_append(kind: str, writer: object = None) -> None:
    """The checks every appended event passes, whoever appends it: a type of the
    taxonomy (:func:`check_kind`), and ``run.*`` and ``session.*`` only from the
    lifecycle writer (:class:`NotTheLifecycleWriter`)."""
    if kind.startswith(_LIFECYCLE) and writer is not LIFECYCLE_WRITER:
        raise NotTheLifecycleWriter(
            f"{kind} is a run or session lifecycle event: only "
            "hypha_celery.runtime.lifecycle appends those")
    check_kind(kind)


class Tx(LaneRows, SessionRows):
    """One store transaction. Use through :meth:`EventStore.transaction`."""

    def __init__(self, conn: Connection, dialect: str, owner: str | None = None) -> None:
        self.conn = conn
        self._dialect = dialect
        self._owner = owner  # a scoped store's: lock finds only this user's runs
        self._views: dict[str, View] = {}
        self._new: set[str] = set()
        self._active: set[str] = set()  # runs whose doc changed
        self._expected: dict[str, int] = {}  # optimistic writes: run_id -> seq read
        self._rows: list[dict[str, Any]] = []
        self._after: list[Callable[[], None]] = []
        self._before: list[Callable[[], None]] = []

    @property
    def dialect(self) -> str:
        return self._dialect

    # -- reads -----------------------------------------------------------
    def lock(self, run_id: str) -> View | None:
        """Lock the run row for this transaction and return its projection."""
        if run_id in self._views:
            return self._views[run_id]
        if self._dialect == "postgresql":  # every step: plain driver SQL
            found = driver_sql(self.conn, *_pg_lock(run_id, self._owner)).first()
            if found is None:
                return None
            view = self._views[run_id] = view_of(found)
            return view
        q, params = by_id(run_id, self._owner)
        row = self.conn.execute(q, params).first()
        if row is None:
            return None
        view = self._views[run_id] = view_of(row)
        return view

    def expect(self, view: View) -> View:
        """Write ``view`` (read earlier, without a lock) optimistically: the commit
        fails with :class:`StoreConflict` if the run moved past ``view["seq"]``."""
        run_id = view["run_id"]
        self._views[run_id] = view
        self._expected[run_id] = view["seq"]
        return view

    def event_data(self, idem: str) -> dict[str, Any] | None:
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
        """Append an event of type ``kind`` whose payload is the JSON object ``data``
        (one a node or a policy recorded; the runtime's own writers :meth:`emit`)."""
        check_append(kind, writer)
        view = self._views[run_id]
        ts = time.time() if ts is None else ts
        apply_event(view, kind, data, ts)
        return self._row(view, run_id, kind, data, idem, ts)

    def emit(self, run_id: str, payload: Payload, idem: str | None = None,
             ts: float | None = None, *, writer: object = None) -> View:
        """Append the event ``payload`` (its type is the model's ``kind``; its JSON
        :meth:`~hypha_celery.events.payloads.Payload.dump`)."""
        kind = payload.kind
        check_append(kind, writer)
        view = self._views[run_id]
        ts = time.time() if ts is None else ts
        apply_payload(view, payload, ts)
        return self._row(view, run_id, kind, payload.dump(), idem, ts)

    def _row(self, view: View, run_id: str, kind: str, data: Mapping[str, Any],
             idem: str | None, ts: float) -> View:
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

    def before_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once this transaction's writes are sent, its locks still held, right
        before the commit; if it raises, the transaction rolls back. For a message whose
        consumer waits on one of those locks: it travels while the commit flushes."""
        self._before.append(fn)

    # -- commit ----------------------------------------------------------
    def _flush(self) -> None:
        for run_id in self._new:
            view = self._views[run_id]
            self.conn.execute(runs.insert().values(run_id=run_id, seq=view["seq"],
                                                   doc=doc_of(view), **columns_of(view)))
        pg = self._dialect == "postgresql"
        # on PostgreSQL a step's few events go in the statement of the first run update
        events = self._pg_events() if pg and 0 < len(self._rows) < COPY_FROM else None
        for run_id, view in self._views.items():
            if run_id in self._new or view["seq"] == 0:
                continue
            values: dict[str, Any] = {"seq": view["seq"], "updated_at": view["updated_at"]}
            if run_id in self._active:
                values.update(doc=doc_of(view), **columns_of(view))
            if not self._update(run_id, values, self._expected.get(run_id), events):
                raise StoreConflict(f"run {run_id} moved on (optimistic write)")
            events = None
        if events is not None:
            driver_sql(self.conn, *events)
        elif len(self._rows) >= COPY_FROM and pg:
            insert_rows(self.conn, ((r["run_id"], r["seq"], r["kind"], r["ts"],
                                     json_text(r["data"]), r["idem"]) for r in self._rows))
        elif self._rows and not pg:
            self.conn.execute(_INSERT_EVENTS, self._rows)

    def _pg_events(self) -> tuple[str, list[Any]]:
        """The ``INSERT`` of this transaction's events and its parameters."""
        marks = ", ".join([_PG_EVENT_MARKS] * len(self._rows))
        return _PG_INSERT_EVENTS + marks, [
            v for r in self._rows for v in (r["run_id"], r["seq"], r["kind"], r["ts"],
                                            json_text(r["data"]), r["idem"])]

    def _update(self, run_id: str, values: dict[str, Any], expected: int | None,
                events: tuple[str, list[Any]] | None = None) -> bool:
        """Write ``values`` (the keys are columns) into run ``run_id``'s row (only while its
        seq is still ``expected``, when given), on PostgreSQL with ``events`` inserted by
        the same statement; False when no row was written."""
        if self._dialect == "postgresql":  # every step: plain driver SQL
            sql, params = _pg_update(run_id, values, expected)
            if events is not None:
                sql, params = f"WITH appended AS ({events[0]}) {sql}", [*events[1], *params]
            return driver_sql(self.conn, sql, params).rowcount == 1
        values["b_run_id"] = run_id
        update = _UPDATE
        if expected is not None:
            update, values["b_seq"] = _UPDATE_EXPECTED, expected
        return bool(self.conn.execute(update, values).rowcount == 1)


class Transactions(Engines):
    """The store's write transactions."""

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A durable write transaction; after-commit actions run once it committed."""
        self.ensure_schema()
        try:
            with self.engine.begin() as conn:
                tx = Tx(conn, self.dialect, self.owner)
                yield tx
                tx._flush()
                for fn in tx._before:
                    fn()
        except IntegrityError as exc:
            raise StoreConflict(f"concurrent append lost a race: {exc.orig}") from None
        _run_all(tx._after)


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

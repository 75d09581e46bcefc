"""The event log: appending one event, reading a run's events, its history, the export.

:meth:`EventLog.append` is the one-event write path; a transaction that appends several
is :class:`~hypha_celery.store.tx.Tx`. Both pass :func:`~hypha_celery.store.tx.check_append`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from hypha_celery.errors import RunNotFound, StoreConflict
from hypha_celery.events.envelope import Event, EventType, enrich
from hypha_celery.events.fold import PASSIVE_KINDS, fold
from hypha_celery.events.payloads import Payload
from hypha_celery.events.view import View
from hypha_celery.store.engine import as_raised, dumps
from hypha_celery.store.projection import Runs, owned
from hypha_celery.store.rows import (
    HISTORY,
    IN_CHUNK,
    EventRow,
    chunks,
    event_rows,
    gc_paused,
    run_rows,
)
from hypha_celery.store.schema import events, runs
from hypha_celery.store.tx import Transactions, check_append

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
_EXPORT_BATCH = 50_000  # events per bulk read of an export
_MAX_SEQ = 2**31 - 1
_kind_of = itemgetter(2)
_ts_of = itemgetter(3)


class EventLog(Transactions, Runs):
    """Appends and reads of ``hypha_events``."""

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
        row = (run_id, kind, ts, dumps(data), idem)
        try:
            append = _pg_append if self.dialect == "postgresql" else _sqlite_append
            seq = append(self.engine, row)
        except self.engine.dialect.loaded_dbapi.Error as exc:  # as SQLAlchemy would raise it
            error = as_raised(self.engine.dialect, _PG_APPEND, None, exc)
            if isinstance(error, IntegrityError):
                raise StoreConflict(f"concurrent append lost a race: {exc}") from None
            raise error from None
        if seq is None:
            raise RunNotFound(f"no run {run_id!r} in the event store")
        return seq

    def emit(self, run_id: str, payload: Payload, *, idem: str | None = None,
             ts: float | None = None) -> int:
        """:meth:`append` the event ``payload`` (its type the model's ``kind``, its JSON
        :meth:`~hypha_celery.events.payloads.Payload.dump`); its ``seq``."""
        return self.append(run_id, payload.kind, payload.dump(), idem=idem, ts=ts)

    def _append_folded(self, run_id: str, kind: EventType, data: Mapping[str, Any],
                       idem: str | None, ts: float | None) -> int:
        with self.transaction() as tx:
            if tx.lock(run_id) is None:
                raise RunNotFound(f"no run {run_id!r} in the event store")
            return int(tx.append(run_id, kind, data, idem=idem, ts=ts)["seq"])

    def events(self, run_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The run's events as envelopes (see :func:`~hypha_celery.events.envelope.enrich`;
        causation ids are found within the events read). Read as :meth:`history` reads:
        a ``seq`` range, plain driver SQL."""
        self.ensure_schema()
        upto = _MAX_SEQ if limit is None else after_seq + max(limit, 0)
        owner = sa.select(runs.c.user_id, runs.c.session_id, runs.c.graph_id).where(
            runs.c.run_id == run_id)
        with gc_paused():  # the envelopes too: collections over them cost as much again
            with self.reader.connect() as conn:
                if self.owner is None:  # agents' events too: they have no run row
                    rows, datas = run_rows(conn, (run_id, after_seq, upto))
                    run = conn.execute(owner).first() if rows else None
                else:  # the row read first, its owner checked: no round trip more
                    run = conn.execute(owner).first()
                    if run is None or run.user_id != self.owner:
                        return []
                    rows, datas = run_rows(conn, (run_id, after_seq, upto))
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
        if self.owner is not None:
            with self.reader.connect() as conn:
                if not _owns(conn, run_id, self.owner):
                    return
        while True:
            with gc_paused(), self.reader.connect() as conn:
                rows, datas = run_rows(conn, (run_id, after_seq, after_seq + batch), HISTORY)
            yield from zip(map(_kind_of, rows), datas, map(_ts_of, rows), strict=True)
            if len(rows) < batch:
                return
            after_seq += batch

    def last_event(self, run_id: str, kind: str) -> Event | None:
        """The newest event of ``kind`` in a run."""
        q = (sa.select(events.c.run_id, events.c.seq, events.c.kind, events.c.ts, events.c.data,
                       events.c.idem)
             .where(events.c.run_id == run_id, events.c.kind == kind)
             .order_by(events.c.seq.desc()).limit(1))
        with self.reader.connect() as conn:
            if self.owner is not None and not _owns(conn, run_id, self.owner):
                return None
            r = conn.execute(q).first()
        return enrich([(r.run_id, r.seq, r.kind, r.ts, dict(r.data), r.idem)])[0] if r else None

    def has_event(self, idem: str) -> bool:
        """Whether an event is recorded under idempotency key ``idem``."""
        with self.reader.connect() as conn:
            return conn.execute(sa.select(events.c.id).where(events.c.idem == idem)).first() \
                is not None

    # -- export ------------------------------------------------------------
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
        q = owned(sa.select(c.run_id, c.user_id, c.session_id, c.graph_id, c.seq,
                            c.updated_at), self.owner)
        with self.reader.connect() as conn:
            if run_ids is None:
                found = [dict(r._mapping) for r in conn.execute(q.order_by(c.id))]
            else:
                wanted = list(dict.fromkeys(run_ids))
                by_id: dict[str, dict[str, Any]] = {}
                for chunk in chunks(wanted, IN_CHUNK):
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


def export_rows(store: EventLog, run_ids: Iterable[str] | None = None, *,
                session: tuple[str, str] | None = None, since: float | None = None,
                ) -> Iterator[tuple[dict[str, Any], list[EventRow]]]:
    """What :meth:`EventStore.export` reads: ``(run, rows)`` for each run
    :meth:`EventStore.export_runs` selects (and its ``run`` dict), its stored rows
    ``(run_id, seq, kind, ts, data, idem)`` in ``seq`` order (``rows`` and ``run`` are
    what :func:`~hypha_celery.events.envelope.enrich` takes). Reads in bulk: one query per
    batch of runs holding up to ~50,000 events."""
    selected = store.export_runs(run_ids, session=session, since=since)
    for batch in _batches(selected, _EXPORT_BATCH):
        with store.reader.connect() as conn:
            rows = event_rows(conn, [run["run_id"] for run in batch])
        for run in batch:
            yield run, rows.get(run["run_id"], [])


def _batches(selected: list[dict[str, Any]], limit: int) -> Iterator[list[dict[str, Any]]]:
    """Runs grouped so that a group holds about ``limit`` events (a bigger run: alone)."""
    batch: list[dict[str, Any]] = []
    count = 0
    for run in selected:
        if batch and (count + run["seq"] > limit or len(batch) >= IN_CHUNK):
            yield batch
            batch, count = [], 0
        batch.append(run)
        count += run["seq"]
    if batch:
        yield batch


def _owns(conn: Connection, run_id: str, owner: str) -> bool:
    """Whether ``run_id`` is a run of user ``owner``."""
    q = sa.select(runs.c.id).where(runs.c.run_id == run_id, runs.c.user_id == owner)
    return conn.execute(q).first() is not None


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

"""The agents' tables: agent rows, their events, tell results, the completion outbox and
the caller leases, read and written here and nowhere else.

A row of ``hypha_agents`` holds the agent doc (JSON, the shape is
:class:`hypha_celery.agents.doc.AgentDoc`'s) and, in a column of its own, the backend
session, written only when it changed. The agent's events go into ``hypha_events`` under
its incarnation id, each kind passing :func:`~hypha_celery.store.tx.check_append` first.
The doc is plain JSON at this level: the agents package gives it its type."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from hypha_celery.events import EventType
from hypha_celery.events.payloads import AgentStarted
from hypha_celery.store.engine import driver_sql, dumps
from hypha_celery.store.facade import EventStore
from hypha_celery.store.rows import json_text
from hypha_celery.store.schema import agent_outbox, agent_results, agents, events, leases
from hypha_celery.store.tx import Tx, check_append

_PG_LOCK = (f"SELECT doc, session::text, seq, control, heartbeat_at FROM {agents.name} "
            "WHERE name = %s FOR UPDATE")
_PG_APPEND = f"INSERT INTO {events.name} (run_id, seq, kind, ts, data, idem) VALUES "

#: ``update``'s "leave this column as it is".
KEEP: Final = object()


class StoredJson:
    """A JSON column as stored (its text, or None for SQL ``NULL``), parsed on first use
    (:meth:`value`): the session column of a locked agent row, which most of an agent's
    transactions never look at (a Mock session holds every script; parsing it on each of
    a turn's locks cost about 1 ms per turn at 20 KB)."""

    __slots__ = ("_parsed", "_value", "text")

    def __init__(self, text: str | None) -> None:
        self.text = text
        self._value: Any = None
        self._parsed = False

    @property
    def parsed(self) -> bool:
        return self._parsed

    def value(self) -> Any:
        if not self._parsed:
            self._value = None if self.text is None else json.loads(self.text)
            self._parsed = True
        return self._value


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One locked agent row: the doc JSON, the session column (unparsed) and the
    bookkeeping."""

    doc: dict[str, Any]
    session: StoredJson
    seq: int
    control: str | None
    heartbeat_at: float | None


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One event of an agent's stream (content free: ids, origins, reasons)."""

    incarnation: str
    seq: int
    kind: EventType
    ts: float
    data: object


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A completion not yet delivered."""

    id: int
    incarnation: str
    ref: str
    target: Any
    message: Any


# -- the agent row ---------------------------------------------------------------------
def lock(tx: Tx, name: str) -> AgentRow | None:
    """Lock agent ``name``'s row for ``tx`` (``FOR UPDATE`` on PostgreSQL) and read it."""
    if tx.dialect == "postgresql":  # every agent step: plain driver SQL
        row = driver_sql(tx.conn, _PG_LOCK, (name,)).first()
        if row is None:
            return None
        return AgentRow(row[0], StoredJson(row[1]), int(row[2]), row[3], row[4])
    q = sa.select(agents.c.doc, sa.type_coerce(agents.c.session, sa.Text).label("session"),
                  agents.c.seq, agents.c.control, agents.c.heartbeat_at
                  ).where(agents.c.name == name)
    row = tx.conn.execute(q).first()
    if row is None:
        return None
    return AgentRow(row.doc, StoredJson(row.session), int(row.seq), row.control,
                    row.heartbeat_at)


def update(tx: Tx, name: str, incarnation: str, doc: object, phase: str, seq: int, *,
           session: Any = KEEP, control: Any = KEEP, beat: bool = False,
           events: Sequence[AgentEvent] = (),
           answers: Sequence[tuple[str, dict[str, Any]]] = ()) -> None:
    """Write the doc, its phase and seq; the session and control columns only when given,
    the heartbeat when ``beat``; insert ``events`` and keep the asks' outcomes
    ``answers`` (``(ref, outcome)``, as :func:`put_result` ``internal``) first (on
    PostgreSQL in the same statement: every agent step writes them together)."""
    now = time.time()
    values = {"doc": doc, "phase": phase, "seq": seq, "updated_at": now}
    if session is not KEEP:
        values["session"] = session
    if control is not KEEP:
        values["control"] = control
    if beat:
        values["heartbeat_at"] = now
    if tx.dialect == "postgresql":
        _pg_update(tx, name, incarnation, values, events, answers)
        return
    for ref, outcome in answers:
        put_result(tx, incarnation, ref, outcome, 0, 0, 0, internal=True)
    append(tx, events)
    tx.conn.execute(agents.update().where(_row(name, incarnation)).values(**values))


_JSON_COLUMNS = frozenset({"doc", "session"})


def _pg_update(tx: Tx, name: str, incarnation: str, values: dict[str, Any],
               rows: Sequence[AgentEvent], answers: Sequence[tuple[str, dict[str, Any]]]
               ) -> None:
    sets = ", ".join(f"{c} = %s::json" if c in _JSON_COLUMNS else f"{c} = %s" for c in values)
    params = [dumps(v) if c in _JSON_COLUMNS else v for c, v in values.items()]
    heads: list[str] = []
    first: list[Any] = []
    if rows:
        head, inserted = _pg_events(rows)
        heads.append(f"appended AS ({head})")
        first += inserted
    for i, (ref, outcome) in enumerate(answers):
        heads.append(f"answered{i} AS ({_PG_PUT_ASK})")
        first += [incarnation, ref, dumps({**outcome, "internal": True})]
    sql = f"UPDATE {agents.name} SET {sets} WHERE name = %s AND incarnation = %s"
    if heads:
        sql = f"WITH {', '.join(heads)} {sql}"
    driver_sql(tx.conn, sql, (*first, *params, name, incarnation))


def _pg_events(rows: Sequence[AgentEvent]) -> tuple[str, list[Any]]:
    """The ``INSERT`` of ``rows`` (each kind checked) and its parameters."""
    for ev in rows:
        check_append(ev.kind)
    marks = ", ".join(["(%s, %s, %s, %s, %s::json, NULL)"] * len(rows))
    return _PG_APPEND + marks, [v for e in rows
                                for v in (e.incarnation, e.seq, e.kind, e.ts, dumps(e.data))]


def delete(tx: Tx, name: str, incarnation: str) -> None:
    """Delete the agent row and its tell results (ask answers wait for their askers)."""
    tx.conn.execute(agents.delete().where(_row(name, incarnation)))
    tx.conn.execute(agent_results.delete().where(
        agent_results.c.incarnation == incarnation, agent_results.c.bytes > 0))


def append(tx: Tx, rows: Sequence[AgentEvent]) -> None:
    """Insert agent events, each kind checked by the one check every append passes."""
    if rows and tx.dialect == "postgresql":
        sql, params = _pg_events(rows)
        driver_sql(tx.conn, sql, tuple(params))
        return
    for ev in rows:
        check_append(ev.kind)
    if rows:
        tx.conn.execute(events.insert(), [
            {"run_id": e.incarnation, "seq": e.seq, "kind": e.kind, "ts": e.ts,
             "data": e.data, "idem": None} for e in rows])


def create(store: EventStore, name: str, incarnation: str, kind: str, phase: str,
           doc: object, session: Any) -> bool:
    """Insert a new agent row and its ``agent.started`` event; False when the name is
    taken."""
    with store.transaction() as tx:
        if lock(tx, name) is not None:
            return False
        now = time.time()
        tx.conn.execute(agents.insert().values(
            name=name, incarnation=incarnation, kind=kind, phase=phase, seq=1, control=None,
            heartbeat_at=None, created_at=now, updated_at=now, doc=doc, session=session))
        started = AgentStarted(name=name, kind_=kind)
        append(tx, [AgentEvent(incarnation, 1, started.kind, now, started.dump())])
    return True


def read(store: EventStore, name: str) -> dict[str, Any] | None:
    """The doc of agent ``name`` with its ``session``, unlocked; None when there is none."""
    store.ensure_schema()
    with store.reader.connect() as conn:
        row = conn.execute(sa.select(agents.c.doc, agents.c.session)
                           .where(agents.c.name == name)).first()
    return None if row is None else {**row.doc, "session": row.session}


def control(store: EventStore, name: str, incarnation: str) -> tuple[bool, str | None]:
    """(alive, control) of one incarnation: a cheap poll by primary key."""
    with store.reader.connect() as conn:
        row = conn.execute(sa.select(agents.c.incarnation, agents.c.control)
                           .where(agents.c.name == name)).first()
    if row is None or row.incarnation != incarnation:
        return False, None
    return True, row.control


def heartbeat(store: EventStore, name: str, incarnation: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(agents.update().where(_row(name, incarnation))
                     .values(heartbeat_at=time.time()))


#: Rows per statement of the batched reads and heartbeats below (not on PostgreSQL).
BATCH = 500
_PG_STOPPED = (
    "SELECT w.n, w.i, w.r FROM json_to_recordset(%s::json) AS w(n text, i text, r text) "
    f"LEFT JOIN {agents.name} a ON a.name = w.n AND a.incarnation = w.i "
    "WHERE a.name IS NULL OR a.control = w.r")
_PG_HEARTBEATS = (f"UPDATE {agents.name} SET heartbeat_at = %s "
                  "WHERE incarnation IN (SELECT json_array_elements_text(%s::json))")


def stopped(store: EventStore, turns: Sequence[tuple[str, str, str]]
            ) -> set[tuple[str, str, str]]:
    """Of the running turns ``(name, incarnation, ref)``, those to end: their agent is
    gone or replaced, or its control column names the turn (an interrupt). On
    PostgreSQL one statement whose turns are one JSON parameter and which returns only
    those (a process with 500 turns polls every 50 ms: the rows of the 500 would cost more
    than the query); elsewhere one read per :data:`BATCH` agents."""
    if not turns:
        return set()
    with store.reader.connect() as conn:
        if conn.dialect.name == "postgresql":
            doc = json_text([{"n": n, "i": i, "r": r} for n, i, r in turns])
            rows = conn.exec_driver_sql(_PG_STOPPED, (doc,))
            return {(name, incarnation, ref) for name, incarnation, ref in rows}
        found: dict[tuple[str, str], str | None] = {}
        for chunk in _chunks(sorted({(n, i) for n, i, _ in turns})):
            q = sa.select(agents.c.name, agents.c.incarnation, agents.c.control).where(
                agents.c.name.in_([n for n, _ in chunk]))
            for r in conn.execute(q):
                found[(r.name, r.incarnation)] = r.control
    return {t for t in turns if (t[0], t[1]) not in found or found[(t[0], t[1])] == t[2]}


def heartbeats(store: EventStore, rows: Sequence[tuple[str, str]]) -> None:
    """Beat every ``(name, incarnation)`` of ``rows``: on PostgreSQL one statement (the
    incarnation ids as one JSON array: they are unique, so they alone pick the rows),
    elsewhere one per :data:`BATCH` rows."""
    now = time.time()
    with store.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(_PG_HEARTBEATS, (now, json_text([i for _, i in rows])))
            return
        for chunk in _chunks(rows):
            conn.execute(agents.update().where(
                agents.c.name.in_([n for n, _ in chunk]),
                agents.c.incarnation.in_([i for _, i in chunk])).values(heartbeat_at=now))


def _chunks(rows: Sequence[tuple[str, str]]) -> list[Sequence[tuple[str, str]]]:
    return [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)]


def names(store: EventStore, prefix: str = "") -> list[str]:
    """Names of the live agents (those starting with ``prefix``)."""
    store.ensure_schema()
    q = sa.select(agents.c.name)
    if prefix:
        q = q.where(sa.func.substr(agents.c.name, 1, len(prefix)) == prefix)
    with store.reader.connect() as conn:
        return list(conn.execute(q).scalars())


def phases(store: EventStore) -> dict[str, int]:
    """How many live agents are in each phase (``idle``, ``busy``...): for metrics."""
    store.ensure_schema()
    with store.reader.connect() as conn:
        rows = conn.execute(sa.select(agents.c.phase, sa.func.count())
                            .group_by(agents.c.phase))
        return {str(phase): int(n) for phase, n in rows}


def stale(store: EventStore, before: float, limit: int) -> list[tuple[str, Any, float]]:
    """Busy agents whose owner has not beaten (or that nobody took) since ``before``:
    ``(name, doc without the session, last sign of life)``, oldest first."""
    store.ensure_schema()
    beat = sa.func.coalesce(agents.c.heartbeat_at, agents.c.updated_at)
    with store.reader.connect() as conn:
        rows = conn.execute(sa.select(agents.c.name, agents.c.doc, beat.label("beat"))
                            .where(agents.c.phase == "busy", beat < before)
                            .order_by(beat).limit(limit))
        return [(r.name, r.doc, float(r.beat)) for r in rows]


def _row(name: str, incarnation: str) -> Any:
    return sa.and_(agents.c.name == name, agents.c.incarnation == incarnation)


# -- results cache ---------------------------------------------------------------------
def result(tx: Tx, ref: str, incarnation: str) -> Any:
    """The stored outcome JSON of ``ref`` (with its ``internal`` flag) when it is one of
    the agent ``incarnation``'s, else None."""
    return _result(tx.conn, ref, incarnation)


def _result(conn: Any, ref: str, incarnation: str | None = None) -> Any:
    q = sa.select(agent_results.c.outcome).where(agent_results.c.ref == ref)
    if incarnation is not None:
        q = q.where(agent_results.c.incarnation == incarnation)
    row = conn.execute(q).first()
    return None if row is None else row.outcome


def put_result(tx: Tx, incarnation: str, ref: str, outcome: dict[str, Any], nbytes: int,
               max_count: int, max_bytes: int, internal: bool = False) -> None:
    """Cache a tell result (evicting the oldest over the bounds) or keep an ask's outcome
    (``internal``: outside the bounds, deleted when the asker reads it)."""
    conn = tx.conn
    if tx.dialect == "postgresql":  # every finished turn: plain driver SQL
        _pg_put_result(tx, incarnation, ref, outcome, nbytes, max_count, max_bytes, internal)
        return
    conn.execute(agent_results.delete().where(agent_results.c.ref == ref))
    if not internal and (max_count == 0 or nbytes > max_bytes):
        return
    conn.execute(agent_results.insert().values(
        incarnation=incarnation, ref=ref, bytes=nbytes if not internal else 0,
        outcome={**outcome, "internal": internal}))
    if internal:
        return
    rows = conn.execute(sa.select(agent_results.c.id, agent_results.c.bytes)
                        .where(agent_results.c.incarnation == incarnation,
                               agent_results.c.bytes > 0)
                        .order_by(agent_results.c.id.desc())).all()
    total, evict = 0, []
    for count, r in enumerate(rows, start=1):
        total += int(r.bytes)
        if count > max_count or total > max_bytes:
            evict.append(r.id)
    if evict:
        conn.execute(agent_results.delete().where(agent_results.c.id.in_(evict)))


def _pg_put_result(tx: Tx, incarnation: str, ref: str, outcome: dict[str, Any],
                   nbytes: int, max_count: int, max_bytes: int, internal: bool) -> None:
    """:func:`put_result` in two statements (an ask's outcome in one): the older results
    past the bounds (counted from the newest back, the new one first) are deleted beside
    the insert."""
    conn = tx.conn
    data = dumps({**outcome, "internal": internal})
    if internal:  # an ask's outcome, in one statement (replacing an earlier one)
        driver_sql(conn, _PG_PUT_ASK, (incarnation, ref, data))
        return
    driver_sql(conn, _PG_DROP_RESULT, (ref,))
    if max_count == 0 or nbytes > max_bytes:
        return
    driver_sql(conn, _PG_PUT_RESULT, (incarnation, max_count - 1, max_bytes - nbytes,
                                      incarnation, ref, nbytes, data))


_PG_DROP_RESULT = f"DELETE FROM {agent_results.name} WHERE ref = %s"
_PG_PUT_ASK = (f"INSERT INTO {agent_results.name} (incarnation, ref, bytes, outcome) "
               "VALUES (%s, %s, 0, %s::json) ON CONFLICT (ref) DO UPDATE SET "
               "incarnation = EXCLUDED.incarnation, bytes = 0, outcome = EXCLUDED.outcome")
# the eviction sees the rows before the insert: it leaves room for the new one
_PG_PUT_RESULT = (
    f"WITH evicted AS (DELETE FROM {agent_results.name} WHERE id IN (SELECT id FROM ("
    "SELECT id, row_number() OVER w AS n, sum(bytes) OVER w AS total "
    f"FROM {agent_results.name} WHERE incarnation = %s AND bytes > 0 "
    "WINDOW w AS (ORDER BY id DESC)) older WHERE n > %s OR total > %s)) "
    f"INSERT INTO {agent_results.name} (incarnation, ref, bytes, outcome) "
    "VALUES (%s, %s, %s, %s::json)")


def take_result(store: EventStore, ref: str) -> Any:
    """Read and delete the outcome JSON of ``ref`` (an asker collecting its answer)."""
    if store.dialect == "postgresql":  # every ask: one autocommit statement, not waiting
        # for the WAL flush (the asker has its answer either way; a crash of PostgreSQL
        # within its WAL writer's delay leaves the row, which the asker never reads again)
        with store.unflushed.connect() as conn:
            row = driver_sql(conn, _PG_TAKE_RESULT, (ref,)).first()
        return None if row is None else row[0]
    with store.engine.begin() as conn:
        found = _result(conn, ref)
        if found is not None:
            conn.execute(agent_results.delete().where(agent_results.c.ref == ref))
    return found


_PG_TAKE_RESULT = f"DELETE FROM {agent_results.name} WHERE ref = %s RETURNING outcome"


# -- completion outbox ----------------------------------------------------------------
def outbox(tx: Tx, incarnation: str, ref: str, target: object, message: object) -> int:
    res = tx.conn.execute(agent_outbox.insert().values(
        incarnation=incarnation, ref=ref, target=target, message=message,
        created_at=time.time()))
    key = res.inserted_primary_key
    assert key is not None
    return int(key[0])


def sent(store: EventStore, outbox_id: int) -> None:
    with store.engine.begin() as conn:
        conn.execute(agent_outbox.delete().where(agent_outbox.c.id == outbox_id))


def unsent(store: EventStore, before: float, limit: int = 200) -> list[OutboxRow]:
    store.ensure_schema()
    with store.reader.connect() as conn:
        rows = conn.execute(sa.select(agent_outbox).where(agent_outbox.c.created_at < before)
                            .order_by(agent_outbox.c.id).limit(limit))
        return [OutboxRow(int(r.id), r.incarnation, r.ref, r.target, r.message)
                for r in rows]


# -- caller leases ---------------------------------------------------------------------
def caller_beat(tx: Tx, lease: str) -> float | None:
    """The last heartbeat of caller lease ``lease`` (read in ``tx``), None when absent."""
    beat = tx.conn.execute(sa.select(leases.c.heartbeat_at)
                           .where(leases.c.execution_id == lease)).scalar()
    return None if beat is None else float(beat)


__all__ = ["BATCH", "KEEP", "AgentEvent", "AgentRow", "OutboxRow", "StoredJson", "append",
           "caller_beat",
           "control", "create", "delete", "heartbeat", "heartbeats", "lock",
           "names", "outbox", "put_result", "read", "result", "sent", "stale", "stopped",
           "take_result",
           "unsent", "update"]

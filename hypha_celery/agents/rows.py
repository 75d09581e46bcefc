"""The agent row, read and written in store transactions.

``AgentTx`` locks one agent's row (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite
transactions take the write lock at ``BEGIN``), exposes its ``doc`` for change, and on
commit writes the doc, the phase column and the agent's events (in ``hypha_events`` under
the incarnation id, ``seq`` continuing the row's). Events carry no prompt text.

The backend session lives in a column of its own (``doc["session"]`` to the code): it is
written only when it changed, so a transaction that moves a turn along rewrites the small
doc and not the session (a Mock session holds every script; a real one may be large)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from hypha_celery.errors import AgentNotFound
from hypha_celery.store import EventStore, Tx
from hypha_celery.store.schema import agent_outbox, agent_results, agents, events

Doc = dict[str, Any]


def phase(doc: Doc) -> str:
    if doc.get("pump"):
        return "busy"
    return "halted" if doc.get("halted") else "idle"


def prompts_lane(incarnation: str) -> str:
    return f"a:{incarnation}:p"


def notifications_lane(incarnation: str) -> str:
    return f"a:{incarnation}:n"


class AgentTx:
    def __init__(self, tx: Tx, name: str, doc: Doc, seq: int, session: Any = None) -> None:
        self.tx = tx
        self.name = name
        self.doc = {**doc, "session": session}
        self._session = session
        self.seq = seq
        self._events: list[dict[str, Any]] = []
        self.control: str | None = None
        self.set_control: bool = False
        self.heartbeat_at: float | None = None
        self.beat = False
        self.deleted = False

    @property
    def incarnation(self) -> str:
        return str(self.doc["incarnation"])

    def event(self, kind: str, data: dict[str, Any] | None = None) -> None:
        self.seq += 1
        self._events.append({"run_id": self.incarnation, "seq": self.seq, "kind": kind,
                             "ts": time.time(), "data": data or {}, "idem": None})

    def after_commit(self, fn: Callable[[], None]) -> None:
        self.tx.after_commit(fn)

    def write_control(self, value: str | None) -> None:
        self.control = value
        self.set_control = True

    def delete(self) -> None:
        self.deleted = True

    def flush(self) -> None:
        conn = self.tx.conn
        if self._events:
            conn.execute(events.insert(), self._events)
        where = sa.and_(agents.c.name == self.name, agents.c.incarnation == self.incarnation)
        if self.deleted:
            conn.execute(agents.delete().where(where))
            # tell results go with the agent; ask answers (bytes 0) wait for their askers
            conn.execute(agent_results.delete().where(
                agent_results.c.incarnation == self.incarnation, agent_results.c.bytes > 0))
            return
        doc, session = _split(self.doc)
        values: dict[str, Any] = {"doc": doc, "phase": phase(doc), "seq": self.seq,
                                  "updated_at": time.time()}
        if session is not self._session and session != self._session:
            values["session"] = session
        if self.set_control:
            values["control"] = self.control
        if self.beat:
            values["heartbeat_at"] = time.time()
        conn.execute(agents.update().where(where).values(**values))


def _split(doc: Doc) -> tuple[Doc, Any]:
    """(the doc to store, the session column)."""
    rest = dict(doc)
    return rest, rest.pop("session", None)


def _lock(tx: Tx, name: str) -> Any:
    q = sa.select(agents.c.doc, agents.c.session, agents.c.seq, agents.c.control,
                  agents.c.heartbeat_at).where(agents.c.name == name)
    if tx.dialect == "postgresql":
        q = q.with_for_update()
    return tx.conn.execute(q).first()


@contextmanager
def locked(store: EventStore, name: str, incarnation: str | None = None
           ) -> Iterator[AgentTx]:
    """Lock agent ``name`` (of ``incarnation`` when given) for one transaction. Raises
    :class:`AgentNotFound` when there is no such live agent."""
    with store.transaction() as tx:
        row = _lock(tx, name)
        if row is None or (incarnation is not None and row.doc["incarnation"] != incarnation):
            raise AgentNotFound(name)
        atx = AgentTx(tx, name, row.doc, int(row.seq), row.session)
        atx.control, atx.heartbeat_at = row.control, row.heartbeat_at
        yield atx
        atx.flush()


def create(store: EventStore, name: str, kind: str, doc: Doc) -> bool:
    """Insert a new agent row; False when the name is taken."""
    with store.transaction() as tx:
        if _lock(tx, name) is not None:
            return False
        now = time.time()
        stored, session = _split(doc)
        tx.conn.execute(agents.insert().values(
            name=name, incarnation=doc["incarnation"], kind=kind, phase=phase(doc), seq=1,
            control=None, heartbeat_at=None, created_at=now, updated_at=now, doc=stored,
            session=session))
        tx.conn.execute(events.insert().values(
            run_id=doc["incarnation"], seq=1, kind="agent.started", ts=now,
            data={"name": name, "kind": kind}, idem=None))
    return True


def read(store: EventStore, name: str) -> Doc | None:
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
        conn.execute(agents.update().where(
            sa.and_(agents.c.name == name, agents.c.incarnation == incarnation))
            .values(heartbeat_at=time.time()))


def names(store: EventStore) -> list[str]:
    store.ensure_schema()
    with store.reader.connect() as conn:
        return list(conn.execute(sa.select(agents.c.name)).scalars())


def stale(store: EventStore, before: float, limit: int) -> list[tuple[str, Doc, float]]:
    """Busy agents whose owner has not beaten (or that nobody took) since ``before``:
    ``(name, doc, last sign of life)``, oldest first."""
    store.ensure_schema()
    beat = sa.func.coalesce(agents.c.heartbeat_at, agents.c.updated_at)
    with store.reader.connect() as conn:
        rows = conn.execute(sa.select(agents.c.name, agents.c.doc, beat.label("beat"))
                            .where(agents.c.phase == "busy", beat < before)
                            .order_by(beat).limit(limit))
        return [(r.name, dict(r.doc), float(r.beat)) for r in rows]  # without the session


# -- results cache ---------------------------------------------------------------------
def result(conn: Any, ref: str) -> dict[str, Any] | None:
    row = conn.execute(sa.select(agent_results.c.outcome)
                       .where(agent_results.c.ref == ref)).first()
    return None if row is None else dict(row.outcome)


def put_result(tx: Tx, incarnation: str, ref: str, outcome: dict[str, Any], nbytes: int,
               max_count: int, max_bytes: int, internal: bool = False) -> None:
    """Cache a tell result (evicting the oldest over the bounds) or keep an ask's outcome
    (``internal``: outside the bounds, deleted when the asker reads it)."""
    conn = tx.conn
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


def take_result(store: EventStore, ref: str) -> dict[str, Any] | None:
    with store.engine.begin() as conn:
        found = result(conn, ref)
        if found is not None:
            conn.execute(agent_results.delete().where(agent_results.c.ref == ref))
    return found


# -- completion outbox ----------------------------------------------------------------
def outbox(tx: Tx, incarnation: str, ref: str, tgt: dict[str, Any],
           message: dict[str, Any]) -> int:
    res = tx.conn.execute(agent_outbox.insert().values(
        incarnation=incarnation, ref=ref, target=tgt, message=message,
        created_at=time.time()))
    key = res.inserted_primary_key
    assert key is not None
    return int(key[0])


def sent(store: EventStore, outbox_id: int) -> None:
    with store.engine.begin() as conn:
        conn.execute(agent_outbox.delete().where(agent_outbox.c.id == outbox_id))


def unsent(store: EventStore, before: float, limit: int = 200) -> list[dict[str, Any]]:
    store.ensure_schema()
    with store.reader.connect() as conn:
        rows = conn.execute(sa.select(agent_outbox).where(agent_outbox.c.created_at < before)
                            .order_by(agent_outbox.c.id).limit(limit))
        return [dict(r._mapping) for r in rows]

"""The message bus's rows: ``hypha_messages`` and the live counters of
``hypha_bus_queues``, read and written here and nowhere else (the policy over them —
scope, bounds, retries, events — is :mod:`hypha_celery.bus`).

Lock order, every operation: message rows, then the queue row, then run rows (the
caller's ``tx.lock``). A pull takes its rows with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so concurrent pullers of one queue never take the same message and never
wait for each other; SQLite transactions are ``BEGIN IMMEDIATE`` (one writer)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from hypha_celery.store.engine import insert_for
from hypha_celery.store.facade import EventStore
from hypha_celery.store.schema import agents, bus_queues, messages, runs
from hypha_celery.store.tx import Tx

#: Live statuses: they count against a queue's bounds.
LIVE = ("queued", "delivered")
#: The values of ``to_kind`` (``hypha_celery.bus.EndpointKind``): the bounded label set of
#: the bus gauges.
RECIPIENT_KINDS = ("runtime", "session", "workflow", "agent", "tool", "human")
#: Rows :func:`listing` returns at most.
MAX_LIST = 1_000

_COLUMNS = (messages.c.pos, messages.c.doc, messages.c.status, messages.c.attempt_count,
            messages.c.available_at, messages.c.expires_at, messages.c.lease_until,
            messages.c.bytes, messages.c.reason, messages.c.updated_at, messages.c.queue,
            messages.c.run_id)


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One stored message: the doc as published and the columns that change."""

    pos: int
    doc: dict[str, Any]
    status: str
    attempt_count: int
    available_at: float
    expires_at: float | None
    lease_until: float | None
    bytes: int
    reason: str | None
    updated_at: float
    queue: str
    run_id: str | None


@dataclass(frozen=True, slots=True)
class NewMessage:
    """What :func:`insert` writes."""

    message_id: str
    queue: str
    to_kind: str
    user_id: str
    run_id: str | None
    fsm_state: str | None
    correlation_id: str | None
    available_at: float
    expires_at: float | None
    bytes: int
    created_at: float
    doc: dict[str, Any]
    #: Inserted delivered (handed to a direct consumer in the publishing transaction):
    #: its lease's end; None: queued.
    lease_until: float | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """A message's new status (and what goes with it) written by :func:`update`."""

    pos: int
    status: str
    attempt_count: int
    available_at: float
    lease_until: float | None
    reason: str | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Live messages by recipient kind: count, bytes, the oldest one's creation time."""

    to_kind: str
    status: str
    count: int
    oldest: float | None


def _row(r: Any) -> MessageRow:
    return MessageRow(int(r.pos), dict(r.doc), r.status, int(r.attempt_count),
                      float(r.available_at), r.expires_at, r.lease_until, int(r.bytes),
                      r.reason, float(r.updated_at), r.queue, r.run_id)


# -- queues ---------------------------------------------------------------------------
def queue_reserve(tx: Tx, queue: str, count: int, nbytes: int) -> tuple[int, int]:
    """Count ``count`` messages of ``nbytes`` into the queue's live counters (creating
    its row) in one statement that locks the row; the counters after. The caller checks
    the bounds and raises (the transaction rolls the reservation back)."""
    ins = insert_for(tx.dialect)(bus_queues).values(queue=queue, live_count=count,
                                                    live_bytes=nbytes)
    ins = ins.on_conflict_do_update(index_elements=["queue"], set_={
        "live_count": bus_queues.c.live_count + count,
        "live_bytes": bus_queues.c.live_bytes + nbytes})
    row = tx.conn.execute(ins.returning(bus_queues.c.live_count,
                                        bus_queues.c.live_bytes)).one()
    return int(row[0]), int(row[1])


def queue_add(tx: Tx, queue: str, count: int, nbytes: int) -> None:
    """Add ``count`` messages of ``nbytes`` to the queue's live counters (negative:
    messages settled)."""
    tx.conn.execute(bus_queues.update().where(bus_queues.c.queue == queue).values(
        live_count=bus_queues.c.live_count + count,
        live_bytes=bus_queues.c.live_bytes + nbytes))


# -- messages -------------------------------------------------------------------------
def insert(tx: Tx, new: Sequence[NewMessage]) -> None:
    """Insert messages, queued (or delivered: ``lease_until`` given, its first delivery);
    a taken id: ``IntegrityError``, the transaction's ``StoreConflict``."""
    tx.conn.execute(messages.insert(), [
        {"message_id": m.message_id, "queue": m.queue, "to_kind": m.to_kind,
         "user_id": m.user_id, "run_id": m.run_id, "fsm_state": m.fsm_state,
         "correlation_id": m.correlation_id,
         "status": "queued" if m.lease_until is None else "delivered",
         "attempt_count": 0 if m.lease_until is None else 1,
         "available_at": m.available_at, "expires_at": m.expires_at,
         "lease_until": m.lease_until, "bytes": m.bytes, "created_at": m.created_at,
         "updated_at": m.created_at, "doc": m.doc} for m in new])


def lock(tx: Tx, message_ids: Sequence[str]) -> list[MessageRow]:
    """Lock message rows (``FOR UPDATE`` on PostgreSQL, in queue order) and read them."""
    q = (sa.select(*_COLUMNS).where(messages.c.message_id.in_(message_ids))
         .order_by(messages.c.pos))
    if tx.dialect == "postgresql":
        q = q.with_for_update()
    return [_row(r) for r in tx.conn.execute(q)]


def head(tx: Tx, queue: str, now: float, limit: int, after: int = 0, *,
         run_id: str | None = None, fsm_state: str | None = None,
         correlation_id: str | None = None) -> list[MessageRow]:
    """Lock the first ``limit`` queued messages of ``queue`` available by ``now`` (after
    position ``after``), in queue order, filtered by run, FSM state and correlation id;
    expired ones included (the caller dead-letters them)."""
    q = (sa.select(*_COLUMNS)
         .where(*_filters(queue, run_id, fsm_state, correlation_id), messages.c.pos > after,
                messages.c.status == "queued", messages.c.available_at <= now)
         .order_by(messages.c.pos).limit(limit))
    return _locked(tx, q)


def stale(tx: Tx, queue: str, now: float, limit: int, *, run_id: str | None = None,
          fsm_state: str | None = None, correlation_id: str | None = None,
          ) -> list[MessageRow]:
    """Lock delivered messages of ``queue`` whose consumer let the ack deadline pass."""
    q = (sa.select(*_COLUMNS)
         .where(*_filters(queue, run_id, fsm_state, correlation_id),
                messages.c.status == "delivered", messages.c.lease_until <= now)
         .order_by(messages.c.pos).limit(limit))
    return _locked(tx, q)


def _filters(queue: str, run_id: str | None, fsm_state: str | None,
             correlation_id: str | None) -> list[Any]:
    filters = [messages.c.queue == queue]
    for column, value in ((messages.c.run_id, run_id), (messages.c.fsm_state, fsm_state),
                          (messages.c.correlation_id, correlation_id)):
        if value is not None:
            filters.append(column == value)
    return filters


def _locked(tx: Tx, q: Any) -> list[MessageRow]:
    if tx.dialect == "postgresql":
        q = q.with_for_update(skip_locked=True)
    return [_row(r) for r in tx.conn.execute(q)]


def update(tx: Tx, changes: Sequence[Change]) -> None:
    """Write each message's new status, attempt count, availability, lease and reason."""
    if not changes:
        return
    stmt = messages.update().where(messages.c.pos == sa.bindparam("p")).values(
        status=sa.bindparam("s"), attempt_count=sa.bindparam("a"),
        available_at=sa.bindparam("v"), lease_until=sa.bindparam("l"),
        reason=sa.bindparam("r"), updated_at=sa.bindparam("u"))
    tx.conn.execute(stmt, [{"p": c.pos, "s": c.status, "a": c.attempt_count,
                            "v": c.available_at, "l": c.lease_until, "r": c.reason,
                            "u": c.updated_at} for c in changes])


def extend(store: EventStore, message_id: str, lease_until: float) -> bool:
    """Move a delivered message's lease end to ``lease_until``; whether it was
    delivered."""
    store.ensure_schema()
    with store.engine.begin() as conn:
        result = conn.execute(messages.update().where(
            messages.c.message_id == message_id, messages.c.status == "delivered",
        ).values(lease_until=lease_until))
    return bool(result.rowcount)


# -- recipients -----------------------------------------------------------------------
def agent_exists(tx: Tx, name: str) -> bool:
    q = sa.select(agents.c.name).where(agents.c.name == name)
    return tx.conn.execute(q).first() is not None


def reply_waiting(tx: Tx, queue: str, correlation_id: str) -> bool:
    """Whether ``queue`` holds a queued message with ``correlation_id`` (a parked
    workflow's reply: :func:`hypha_celery.runtime.coordinator.resume`)."""
    return tx.conn.execute(_reply(queue, correlation_id)).first() is not None


def reply_queued(store: EventStore, queue: str, correlation_id: str) -> bool:
    """:func:`reply_waiting` outside a transaction (no lock: the supervisor's look)."""
    store.ensure_schema()
    with store.reader.connect() as conn:
        return conn.execute(_reply(queue, correlation_id)).first() is not None


def _reply(queue: str, correlation_id: str) -> Any:
    return sa.select(messages.c.pos).where(
        messages.c.queue == queue, messages.c.correlation_id == correlation_id,
        messages.c.status == "queued").limit(1)


def run_exists(tx: Tx, run_id: str) -> bool:
    q = sa.select(runs.c.run_id).where(runs.c.run_id == run_id)
    return tx.conn.execute(q).first() is not None


# -- reads ----------------------------------------------------------------------------
def get(store: EventStore, message_id: str) -> MessageRow | None:
    store.ensure_schema()
    with store.reader.connect() as conn:
        row = conn.execute(sa.select(*_COLUMNS)
                           .where(messages.c.message_id == message_id)).first()
    return None if row is None else _row(row)


def listing(store: EventStore, *, run_id: str | None = None, queue: str | None = None,
            statuses: Iterable[str] = (), limit: int = 100) -> list[MessageRow]:
    """Messages of a run or a queue (in queue order), at most ``limit``
    (:data:`MAX_LIST`)."""
    store.ensure_schema()
    q = sa.select(*_COLUMNS)
    if run_id is not None:
        q = q.where(messages.c.run_id == run_id)
    if queue is not None:
        q = q.where(messages.c.queue == queue)
    wanted = list(statuses)
    if wanted:
        q = q.where(messages.c.status.in_(wanted))
    q = q.order_by(messages.c.pos).limit(max(0, min(limit, MAX_LIST)))
    with store.reader.connect() as conn:
        return [_row(r) for r in conn.execute(q)]


def depths(store: EventStore) -> list[QueueDepth]:
    """Live messages by recipient kind and status, with the oldest one's creation time."""
    store.ensure_schema()
    q = (sa.select(messages.c.to_kind, messages.c.status, sa.func.count(),
                   sa.func.min(messages.c.created_at))
         .where(messages.c.status.in_(LIVE))
         .group_by(messages.c.to_kind, messages.c.status))
    with store.reader.connect() as conn:
        return [QueueDepth(str(k), str(s), int(n), None if t is None else float(t))
                for k, s, n, t in conn.execute(q)]


def fullest(store: EventStore) -> tuple[int, int]:
    """The largest live (count, bytes) of any queue."""
    store.ensure_schema()
    q = sa.select(sa.func.max(bus_queues.c.live_count), sa.func.max(bus_queues.c.live_bytes))
    with store.reader.connect() as conn:
        count, nbytes = conn.execute(q).one()
    return int(count or 0), int(nbytes or 0)


def prune(store: EventStore, before: float, limit: int = 10_000) -> int:
    """Delete up to ``limit`` settled messages last changed before ``before``; how many."""
    store.ensure_schema()
    done = sa.select(messages.c.pos).where(
        messages.c.status.not_in(LIVE), messages.c.updated_at < before).limit(limit)
    with store.engine.begin() as conn:
        result = conn.execute(messages.delete().where(messages.c.pos.in_(done)))
    return int(result.rowcount or 0)


def stalled(store: EventStore, to_kind: str, now: float, before: float,
            limit: int) -> list[str]:
    """Queues of recipients of ``to_kind`` holding a message available since ``before``
    (or delivered, its ack deadline passed by ``now``): at most ``limit``."""
    store.ensure_schema()
    waiting = sa.or_(
        sa.and_(messages.c.status == "queued", messages.c.available_at <= before),
        sa.and_(messages.c.status == "delivered", messages.c.lease_until <= now))
    q = (sa.select(messages.c.queue).where(messages.c.to_kind == to_kind,
                                           messages.c.status.in_(LIVE), waiting)
         .group_by(messages.c.queue).limit(limit))
    with store.reader.connect() as conn:
        return [str(r) for r in conn.execute(q).scalars()]


# -- operator reads (``Bus.search``) ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MessageQuery:
    """What :func:`search` matches: each field given narrows it (``queue_prefix``
    ``user:session:``, ``queue_suffix`` ``:kind:id``: LIKE patterns, escaped)."""

    run_id: str | None = None
    user_id: str | None = None
    to_kind: str | None = None
    queue: str | None = None
    queue_prefix: str | None = None
    queue_suffix: str | None = None
    statuses: tuple[str, ...] = ()


def search(store: EventStore, query: MessageQuery, limit: int = 100) -> list[MessageRow]:
    """The newest ``limit`` (:data:`MAX_LIST`) messages matching ``query``, newest first."""
    store.ensure_schema()
    q = sa.select(*_COLUMNS)
    for column, value in ((messages.c.run_id, query.run_id),
                          (messages.c.user_id, query.user_id),
                          (messages.c.to_kind, query.to_kind),
                          (messages.c.queue, query.queue)):
        if value is not None:
            q = q.where(column == value)
    if query.queue_prefix is not None:
        q = q.where(messages.c.queue.startswith(query.queue_prefix, autoescape=True))
    if query.queue_suffix is not None:
        q = q.where(messages.c.queue.endswith(query.queue_suffix, autoescape=True))
    if query.statuses:
        q = q.where(messages.c.status.in_(query.statuses))
    q = q.order_by(messages.c.pos.desc()).limit(max(0, min(limit, MAX_LIST)))
    with store.reader.connect() as conn:
        return [_row(r) for r in conn.execute(q)]

"""Lanes: one active item at a time, a bounded FIFO of pending items, cancel-queued.

The one implementation of "one at a time, bounded, cancellable" in hypha-celery. Graph
runs that share ``(user_id, session_id)`` go through a lane (the run is the item), and so
does every conversational agent: its prompt mailbox and its deferred notifications are two
lanes. A lane is a row of ``hypha_lanes`` (active item, pending count and bytes) plus its
items in ``hypha_lane_items``. Every operation runs inside a store transaction and starts
by locking the lane row (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite transactions are
``BEGIN IMMEDIATE``), so admission is atomic across processes and machines: twenty
concurrent callers against room for three give exactly three admissions.

Bounds are explicit: :class:`Bound` ``(max_count, max_bytes)``; an item's size is the
length of its JSON encoding as the caller measures it (:func:`json_size`). ``max_count=0``
disables queueing (every push is overloaded). A refused push returns the overload info
GenAgent returns (``queue``, ``limit``, pending and incoming sizes, the maxima) and writes
nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from hypha_celery.store import Tx
from hypha_celery.store.schema import lane_items, lanes

DEFAULT_MAX_COUNT = 1_000
DEFAULT_MAX_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class Bound:
    max_count: int = DEFAULT_MAX_COUNT
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        for field, value in (("max_count", self.max_count), ("max_bytes", self.max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{field} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class LaneState:
    active: str | None
    pending_count: int
    pending_bytes: int


@dataclass(frozen=True, slots=True)
class Item:
    ref: str
    bytes: int
    payload: Any


def json_size(value: Any) -> int:
    """Bytes of ``value``'s compact JSON: the unit of every lane byte bound."""
    return len(json.dumps(value, separators=(",", ":")).encode())


def overload(queue: str, state: LaneState, incoming: int,
             bound: Bound) -> dict[str, Any] | None:
    """The overload info if one more item of ``incoming`` bytes does not fit, else None."""
    if state.pending_count + 1 > bound.max_count:
        limit = "count"
    elif state.pending_bytes + incoming > bound.max_bytes:
        limit = "bytes"
    else:
        return None
    return {"queue": queue, "limit": limit, "pending_count": state.pending_count,
            "pending_bytes": state.pending_bytes, "incoming_bytes": incoming,
            "max_count": bound.max_count, "max_bytes": bound.max_bytes}


def lock(tx: Tx, lane: str) -> LaneState:
    """Lock the lane row (creating it) and read it."""
    ins = _insert(tx)(lanes).values(lane=lane, active_run_id=None, pending_count=0,
                                   pending_bytes=0)
    tx.conn.execute(ins.on_conflict_do_nothing(index_elements=["lane"]))
    q = sa.select(lanes.c.active_run_id, lanes.c.pending_count, lanes.c.pending_bytes).where(
        lanes.c.lane == lane)
    if tx.dialect == "postgresql":
        q = q.with_for_update()
    row = tx.conn.execute(q).one()
    return LaneState(row.active_run_id, int(row.pending_count), int(row.pending_bytes))


def set_active(tx: Tx, lane: str, ref: str | None) -> None:
    tx.conn.execute(lanes.update().where(lanes.c.lane == lane).values(active_run_id=ref))


def push(tx: Tx, lane: str, ref: str, nbytes: int, payload: Any = None, *,
         bound: Bound | None = None, queue: str = "prompts") -> dict[str, Any] | None:
    """Append an item at the tail unless ``bound`` refuses it (returns the overload info,
    writes nothing)."""
    state = lock(tx, lane)
    if bound is not None:
        info = overload(queue, state, nbytes, bound)
        if info is not None:
            return info
    tx.conn.execute(lane_items.insert().values(lane=lane, ref=ref, bytes=nbytes,
                                               payload=payload))
    _count(tx, lane, 1, nbytes)
    return None


def pop(tx: Tx, lane: str) -> Item | None:
    """Take the oldest pending item (the lane row must be locked by this transaction)."""
    row = tx.conn.execute(
        sa.select(lane_items.c.id, lane_items.c.ref, lane_items.c.bytes, lane_items.c.payload)
        .where(lane_items.c.lane == lane).order_by(lane_items.c.id).limit(1)).first()
    if row is None:
        return None
    tx.conn.execute(lane_items.delete().where(lane_items.c.id == row.id))
    _count(tx, lane, -1, -int(row.bytes))
    return Item(row.ref, int(row.bytes), row.payload)


def remove(tx: Tx, lane: str, ref: str) -> Item | None:
    """Remove the pending item ``ref`` (cancel-queued); frees its count and bytes at once."""
    row = tx.conn.execute(
        sa.select(lane_items.c.id, lane_items.c.bytes, lane_items.c.payload)
        .where(lane_items.c.lane == lane, lane_items.c.ref == ref)).first()
    if row is None:
        return None
    tx.conn.execute(lane_items.delete().where(lane_items.c.id == row.id))
    _count(tx, lane, -1, -int(row.bytes))
    return Item(ref, int(row.bytes), row.payload)


def items(tx: Tx, lane: str) -> list[Item]:
    rows = tx.conn.execute(
        sa.select(lane_items.c.ref, lane_items.c.bytes, lane_items.c.payload)
        .where(lane_items.c.lane == lane).order_by(lane_items.c.id))
    return [Item(r.ref, int(r.bytes), r.payload) for r in rows]


def clear(tx: Tx, lane: str) -> list[Item]:
    """Remove every pending item (in order) and return them."""
    taken = items(tx, lane)
    if taken:
        tx.conn.execute(lane_items.delete().where(lane_items.c.lane == lane))
        _count(tx, lane, -len(taken), -sum(i.bytes for i in taken))
    return taken


def drop(tx: Tx, lane: str) -> None:
    """Delete the lane and its items (an agent that stopped)."""
    tx.conn.execute(lane_items.delete().where(lane_items.c.lane == lane))
    tx.conn.execute(lanes.delete().where(lanes.c.lane == lane))


def _count(tx: Tx, lane: str, count: int, nbytes: int) -> None:
    tx.conn.execute(lanes.update().where(lanes.c.lane == lane).values(
        pending_count=lanes.c.pending_count + count,
        pending_bytes=lanes.c.pending_bytes + nbytes))


def _insert(tx: Tx) -> Any:
    if tx.dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    from sqlalchemy.dialects import sqlite

    return sqlite.insert


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_COUNT", "Bound", "Item", "LaneState", "clear",
           "drop", "items", "json_size", "lock", "overload", "pop", "push", "remove",
           "set_active"]

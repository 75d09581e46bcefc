"""Lanes: one active item at a time, a bounded FIFO of pending items, cancel-queued.

The one implementation of "one at a time, bounded, cancellable" in hypha-celery. Graph
runs that share ``(user_id, session_id)`` go through a lane (the run is the item), and so
does every conversational agent: its prompt mailbox and its deferred notifications are two
lanes. A lane is a row of ``hypha_lanes`` (active item, pending count and bytes) plus its
items in ``hypha_lane_items`` (their statements: :mod:`hypha_celery.store.lanes`; this
module is the policy over them). Every operation runs inside a store transaction and starts
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

from hypha_celery.store import Item, LaneState, Tx

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
    return tx.lane_lock(lane)


def set_active(tx: Tx, lane: str, ref: str | None) -> None:
    tx.lane_set_active(lane, ref)


def push(tx: Tx, lane: str, ref: str, nbytes: int, payload: Any = None, *,
         bound: Bound | None = None, queue: str = "prompts") -> dict[str, Any] | None:
    """Append an item at the tail unless ``bound`` refuses it (returns the overload info,
    writes nothing)."""
    state = tx.lane_lock(lane)
    if bound is not None:
        info = overload(queue, state, nbytes, bound)
        if info is not None:
            return info
    tx.lane_push(lane, Item(ref, nbytes, payload))
    return None


def pop(tx: Tx, lane: str) -> Item | None:
    """Take the oldest pending item (the lane row must be locked by this transaction)."""
    return tx.lane_pop(lane)


def pop_first(tx: Tx, first: str, second: str | None) -> tuple[Item | None, Item | None]:
    """Take the oldest pending item of ``first``, else of ``second`` (when given): the
    item taken from each, at most one set (both lane rows locked by this transaction)."""
    return tx.lane_pop_first(first, second)


def remove(tx: Tx, lane: str, ref: str) -> Item | None:
    """Remove the pending item ``ref`` (cancel-queued); frees its count and bytes at once."""
    return tx.lane_remove(lane, ref)


def items(tx: Tx, lane: str) -> list[Item]:
    return tx.lane_items(lane)


def clear(tx: Tx, lane: str) -> list[Item]:
    """Remove every pending item (in order) and return them."""
    return tx.lane_clear(lane)


def drop(tx: Tx, lane: str) -> None:
    """Delete the lane and its items (an agent that stopped)."""
    tx.lane_drop(lane)


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_COUNT", "Bound", "Item", "LaneState", "clear",
           "drop", "items", "json_size", "lock", "overload", "pop", "pop_first", "push",
           "remove",
           "set_active"]

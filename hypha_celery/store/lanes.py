"""The rows of lanes: ``hypha_lanes`` (active item, pending count and bytes) and the FIFO
of ``hypha_lane_items``. Statements of a transaction, mixed into
:class:`~hypha_celery.store.tx.Tx`; the policy over them (bounds, overload, who goes
next) is :mod:`hypha_celery.lanes`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from hypha_celery.store.engine import driver_sql, insert_for
from hypha_celery.store.schema import lane_items, lanes


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


def _pg_taken(name: str, extra: str = "") -> str:
    """The ``WITH`` parts that take a lane's oldest item (as ``name``, returning ``lane,
    ref, bytes, payload``; ``extra``: a further condition) and count it off its lane."""
    return (f"{name} AS (DELETE FROM {lane_items.name} WHERE id = (SELECT id FROM "
            f"{lane_items.name} WHERE lane = %s{extra} ORDER BY id LIMIT 1) "
            "RETURNING lane, ref, bytes, payload), "
            f"counted_{name} AS (UPDATE {lanes.name} SET pending_count = pending_count - 1, "
            f"pending_bytes = pending_bytes - (SELECT bytes FROM {name}) "
            f"WHERE lane = %s AND EXISTS (SELECT 1 FROM {name}))")


_PG_POP = f"WITH {_pg_taken('taken')} SELECT ref, bytes, payload FROM taken"
# the same for lane 1, else (none taken there) lane 2 (NULL: none): rows (lane, ...)
_PG_POP_FIRST = (
    f"WITH {_pg_taken('taken1')}, "
    f"{_pg_taken('taken2', ' AND NOT EXISTS (SELECT 1 FROM taken1)')} "
    "SELECT lane, ref, bytes, payload FROM taken1 UNION ALL "
    "SELECT lane, ref, bytes, payload FROM taken2")


class LaneRows:
    """Lane statements in the transaction of ``conn``. Every one but :meth:`lane_lock`
    expects the lane row locked by it."""

    conn: Connection
    _dialect: str

    def lane_lock(self, lane: str) -> LaneState:
        """Lock the lane row (creating it) and read it."""
        ins = insert_for(self._dialect)(lanes).values(lane=lane, active_run_id=None,
                                                      pending_count=0, pending_bytes=0)
        self.conn.execute(ins.on_conflict_do_nothing(index_elements=["lane"]))
        q = sa.select(lanes.c.active_run_id, lanes.c.pending_count,
                      lanes.c.pending_bytes).where(lanes.c.lane == lane)
        if self._dialect == "postgresql":
            q = q.with_for_update()
        row = self.conn.execute(q).one()
        return LaneState(row.active_run_id, int(row.pending_count), int(row.pending_bytes))

    def lane_set_active(self, lane: str, ref: str | None) -> None:
        self.conn.execute(lanes.update().where(lanes.c.lane == lane).values(active_run_id=ref))

    def lane_push(self, lane: str, item: Item) -> None:
        """Append ``item`` at the tail."""
        self.conn.execute(lane_items.insert().values(lane=lane, ref=item.ref, bytes=item.bytes,
                                                     payload=item.payload))
        self._lane_count(lane, 1, item.bytes)

    def lane_pop(self, lane: str) -> Item | None:
        """Take the oldest pending item (on PostgreSQL in one statement: an agent looks
        at its queues after every turn, and they are mostly empty)."""
        if self._dialect == "postgresql":
            found = driver_sql(self.conn, _PG_POP, (lane, lane)).first()
            return None if found is None else Item(found[0], int(found[1]), found[2])
        row = self.conn.execute(
            sa.select(lane_items.c.id, lane_items.c.ref, lane_items.c.bytes,
                      lane_items.c.payload)
            .where(lane_items.c.lane == lane).order_by(lane_items.c.id).limit(1)).first()
        if row is None:
            return None
        self.conn.execute(lane_items.delete().where(lane_items.c.id == row.id))
        self._lane_count(lane, -1, -int(row.bytes))
        return Item(row.ref, int(row.bytes), row.payload)

    def lane_pop_first(self, first: str, second: str | None) -> tuple[Item | None, Item | None]:
        """Take the oldest pending item of lane ``first``, else (when ``second`` is given)
        of lane ``second``: ``(first's item, second's item)``, at most one of them set. On
        PostgreSQL one statement (an agent looks at its notifications, then its prompts,
        after every turn, and both are mostly empty)."""
        if self._dialect != "postgresql":
            item = self.lane_pop(first)
            if item is not None or second is None:
                return item, None
            return None, self.lane_pop(second)
        rows = driver_sql(self.conn, _PG_POP_FIRST, (first, first, second, second)).all()
        found = {r[0]: Item(r[1], int(r[2]), r[3]) for r in rows}
        return found.get(first), (found.get(second) if second is not None else None)

    def lane_remove(self, lane: str, ref: str) -> Item | None:
        """Take the pending item ``ref``."""
        row = self.conn.execute(
            sa.select(lane_items.c.id, lane_items.c.bytes, lane_items.c.payload)
            .where(lane_items.c.lane == lane, lane_items.c.ref == ref)).first()
        if row is None:
            return None
        self.conn.execute(lane_items.delete().where(lane_items.c.id == row.id))
        self._lane_count(lane, -1, -int(row.bytes))
        return Item(ref, int(row.bytes), row.payload)

    def lane_items(self, lane: str) -> list[Item]:
        """The pending items, oldest first."""
        rows = self.conn.execute(
            sa.select(lane_items.c.ref, lane_items.c.bytes, lane_items.c.payload)
            .where(lane_items.c.lane == lane).order_by(lane_items.c.id))
        return [Item(r.ref, int(r.bytes), r.payload) for r in rows]

    def lane_clear(self, lane: str) -> list[Item]:
        """Take every pending item (in order)."""
        taken = self.lane_items(lane)
        if taken:
            self.conn.execute(lane_items.delete().where(lane_items.c.lane == lane))
            self._lane_count(lane, -len(taken), -sum(i.bytes for i in taken))
        return taken

    def lane_drop(self, lane: str) -> None:
        """Delete the lane and its items."""
        self.conn.execute(lane_items.delete().where(lane_items.c.lane == lane))
        self.conn.execute(lanes.delete().where(lanes.c.lane == lane))

    def _lane_count(self, lane: str, count: int, nbytes: int) -> None:
        self.conn.execute(lanes.update().where(lanes.c.lane == lane).values(
            pending_count=lanes.c.pending_count + count,
            pending_bytes=lanes.c.pending_bytes + nbytes))

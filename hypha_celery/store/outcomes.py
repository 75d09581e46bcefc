"""Edge outcomes (``hypha_outcomes``): what each edge of a fan-out returned, stored once
(the first writer wins) before its reducer step folds them. The per-edge statements are
plain driver SQL on PostgreSQL: SQLAlchemy's statement building costs ~0.3-0.5 ms a call
here, more than the round trip itself."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hypha_celery.events.view import View
from hypha_celery.store.engine import driver_sql, dumps, insert_for
from hypha_celery.store.projection import VIEW_ROW, Runs, view_of
from hypha_celery.store.schema import outcomes, runs

_PG_READ_EDGE = (
    "SELECT r.doc, r.seq, r.updated_at, "
    "(SELECT o.data FROM hypha_outcomes o WHERE o.idem = %s) "
    "FROM hypha_runs r WHERE r.run_id = %s"
)
_PG_PUT_OUTCOME = (
    "INSERT INTO hypha_outcomes (idem, run_id, data) VALUES (%s, %s, %s::json) "
    "ON CONFLICT (idem) DO NOTHING"
)
_PG_GET_OUTCOME = "SELECT data FROM hypha_outcomes WHERE idem = %s"
# the same insert, plus (in the same round trip) whether the run still awaits the fan-out
_PG_PUT_EDGE = (
    "WITH ins AS (INSERT INTO hypha_outcomes (idem, run_id, data) VALUES (%s, %s, %s::json) "
    "ON CONFLICT (idem) DO NOTHING RETURNING 1) "
    "SELECT (SELECT count(*) FROM ins), r.status, r.waiting FROM hypha_runs r "
    "WHERE r.run_id = %s"
)


class Outcomes(Runs):
    """Stores and reads of edge outcomes."""

    def read_edge(self, run_id: str, idem: str) -> tuple[View | None, dict[str, Any] | None]:
        """The run view and the edge outcome already stored under ``idem`` (one query)."""
        self.ensure_schema()
        if self.dialect == "postgresql":  # per-edge hot path: plain driver SQL
            with self.reader.connect() as conn:
                row = driver_sql(conn, _PG_READ_EDGE, (idem, run_id)).first()
            if row is None:
                return None, None
            return view_of(row), row[3]
        found = sa.select(outcomes.c.data).where(outcomes.c.idem == idem).scalar_subquery()
        q = sa.select(*VIEW_ROW, found.label("found")).where(runs.c.run_id == run_id)
        with self.reader.connect() as conn:
            row = conn.execute(q).first()
        if row is None:
            return None, None
        return view_of(row), (dict(row.found) if row.found is not None else None)

    def put_outcome(self, run_id: str, idem: str, data: dict[str, Any]) -> dict[str, Any]:
        """Store an edge outcome once; returns the stored one (the first writer wins).
        Not fsynced on its own: the reducer's durable commit flushes it."""
        self.ensure_schema()
        if self.dialect == "postgresql":  # per-edge hot path: plain driver SQL
            with self.unflushed.connect() as conn:
                put = driver_sql(conn, _PG_PUT_OUTCOME, (idem, run_id, dumps(data)))
                if put.rowcount == 1:
                    return data
                stored = driver_sql(conn, _PG_GET_OUTCOME, (idem,)).scalar_one()
                return dict(stored)
        ins = insert_for(self.dialect)(outcomes).values(idem=idem, run_id=run_id, data=data)
        with self.unflushed.begin() as conn:
            done = conn.execute(ins.on_conflict_do_nothing(index_elements=["idem"]))
            if done.rowcount == 1:
                return data
            stored = conn.execute(sa.select(outcomes.c.data).where(outcomes.c.idem == idem))
            return dict(stored.scalar_one())

    def put_edge_outcome(self, run_id: str, idem: str, data: dict[str, Any], awaited: str
                         ) -> tuple[dict[str, Any], bool]:
        """:meth:`put_outcome` for an edge, also telling whether the run still awaits
        ``awaited`` (its fan-out) — one round trip on PostgreSQL."""
        if self.dialect != "postgresql":
            stored = self.put_outcome(run_id, idem, data)
            view = self.load(run_id)
            return stored, bool(view and view["status"] == "running"
                                and view["waiting"] == awaited)
        self.ensure_schema()
        with self.unflushed.connect() as conn:
            row = driver_sql(conn, _PG_PUT_EDGE, (idem, run_id, dumps(data), run_id)).first()
            still = row is not None and row[1] == "running" and row[2] == awaited
            if row is not None and row[0] == 1:
                return data, still
            stored = driver_sql(conn, _PG_GET_OUTCOME, (idem,)).scalar_one()
            return dict(stored), still

    def outcomes(self, idems: list[str]) -> dict[str, dict[str, Any]]:
        """``idem -> data`` of stored edge outcomes (one query)."""
        if not idems:
            return {}
        q = sa.select(outcomes.c.idem, outcomes.c.data).where(outcomes.c.idem.in_(idems))
        with self.reader.connect() as conn:
            return {row.idem: dict(row.data) for row in conn.execute(q)}

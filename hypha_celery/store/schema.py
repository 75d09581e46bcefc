"""Tables of the event store. Alembic migrations mirror this module exactly."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)

metadata = MetaData()

_ID = BigInteger().with_variant(Integer, "sqlite")

runs = Table(
    "hypha_runs",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False, unique=True),
    Column("graph_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("user_id", String(200)),
    Column("session_id", String(200)),
    Column("lane", String(420)),
    Column("seq", Integer, nullable=False),
    Column("waiting", String(120)),
    Column("deadline", Float),
    Column("idempotency_key", String(200), unique=True),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("doc", JSON, nullable=False),
    # No per-step column is indexed (updated_at, seq, doc change every step), so
    # PostgreSQL can update the row in place (HOT) on the hot path.
    Index("ix_hypha_runs_status", "status"),
    Index("ix_hypha_runs_lane_status", "lane", "status", "id"),
)

events = Table(
    "hypha_events",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("ts", Float, nullable=False),
    Column("data", JSON, nullable=False),
    Column("idem", String(200), unique=True),
    UniqueConstraint("run_id", "seq", name="uq_hypha_events_run_seq"),
)

lanes = Table(
    "hypha_lanes",
    metadata,
    Column("lane", String(420), primary_key=True),
    Column("active_run_id", String(64)),
)

# Edge outcomes as they arrive, before the reducer's step writes them to the log as
# node.started / node.completed events. Keyed "<execution>:done": a redelivered edge
# finds its outcome here and is not run again; no run-row lock is taken per edge.
outcomes = Table(
    "hypha_outcomes",
    metadata,
    Column("idem", String(200), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("data", JSON, nullable=False),
    Index("ix_hypha_outcomes_run", "run_id"),
)

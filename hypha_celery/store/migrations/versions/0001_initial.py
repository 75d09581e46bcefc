"""initial schema: runs, events, lanes, outcomes

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "hypha_runs",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False, unique=True),
        sa.Column("graph_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("user_id", sa.String(200)),
        sa.Column("session_id", sa.String(200)),
        sa.Column("lane", sa.String(420)),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("waiting", sa.String(120)),
        sa.Column("deadline", sa.Float),
        sa.Column("idempotency_key", sa.String(200), unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("doc", sa.JSON, nullable=False),
    )
    op.create_index("ix_hypha_runs_status", "hypha_runs", ["status"])
    op.create_index("ix_hypha_runs_lane_status", "hypha_runs", ["lane", "status", "id"])
    op.create_table(
        "hypha_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("idem", sa.String(200), unique=True),
        sa.UniqueConstraint("run_id", "seq", name="uq_hypha_events_run_seq"),
    )
    op.create_table(
        "hypha_lanes",
        sa.Column("lane", sa.String(420), primary_key=True),
        sa.Column("active_run_id", sa.String(64)),
    )


    op.create_table(
        "hypha_outcomes",
        sa.Column("idem", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_hypha_outcomes_run", "hypha_outcomes", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_hypha_outcomes_run", "hypha_outcomes")
    op.drop_table("hypha_outcomes")
    op.drop_table("hypha_lanes")
    op.drop_table("hypha_events")
    op.drop_index("ix_hypha_runs_lane_status", "hypha_runs")
    op.drop_index("ix_hypha_runs_status", "hypha_runs")
    op.drop_table("hypha_runs")

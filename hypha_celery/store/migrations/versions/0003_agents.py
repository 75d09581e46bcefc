"""lanes with bounded pending items; conversational agents

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("hypha_lanes") as batch:
        batch.add_column(sa.Column("pending_count", sa.Integer, nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("pending_bytes", sa.BigInteger, nullable=False,
                                   server_default="0"))
    op.create_table(
        "hypha_lane_items",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("lane", sa.String(420), nullable=False),
        sa.Column("ref", sa.String(64), nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("payload", sa.JSON),
        sa.UniqueConstraint("lane", "ref", name="uq_hypha_lane_items_lane_ref"),
    )
    op.create_index("ix_hypha_lane_items_lane", "hypha_lane_items", ["lane", "id"])
    # runs queued in a lane before this revision become its items, in arrival order
    op.execute(
        "INSERT INTO hypha_lane_items (lane, ref, bytes, payload) "
        "SELECT lane, run_id, 0, NULL FROM hypha_runs "
        "WHERE status = 'queued' AND lane IS NOT NULL ORDER BY id")
    op.execute(
        "UPDATE hypha_lanes SET pending_count = (SELECT count(*) FROM hypha_lane_items i "
        "WHERE i.lane = hypha_lanes.lane)")
    op.create_table(
        "hypha_agents",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("incarnation", sa.String(32), nullable=False, unique=True),
        sa.Column("kind", sa.String(200), nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("control", sa.String(120)),
        sa.Column("heartbeat_at", sa.Float),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("doc", sa.JSON, nullable=False),
        sa.Column("session", sa.JSON, nullable=False),
    )
    op.create_index("ix_hypha_agents_phase", "hypha_agents", ["phase", "heartbeat_at"])
    op.create_table(
        "hypha_agent_results",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("incarnation", sa.String(32), nullable=False),
        sa.Column("ref", sa.String(64), nullable=False, unique=True),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("outcome", sa.JSON, nullable=False),
    )
    op.create_index("ix_hypha_agent_results_agent", "hypha_agent_results",
                    ["incarnation", "id"])
    op.create_table(
        "hypha_agent_outbox",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("incarnation", sa.String(32), nullable=False),
        sa.Column("ref", sa.String(64), nullable=False),
        sa.Column("target", sa.JSON, nullable=False),
        sa.Column("message", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hypha_agent_outbox")
    op.drop_table("hypha_agent_results")
    op.drop_table("hypha_agents")
    op.drop_table("hypha_lane_items")
    with op.batch_alter_table("hypha_lanes") as batch:
        batch.drop_column("pending_bytes")
        batch.drop_column("pending_count")

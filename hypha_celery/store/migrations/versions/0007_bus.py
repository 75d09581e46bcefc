"""the message bus: hypha_messages (one row per message) and hypha_bus_queues (a queue's
live count and bytes)

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "hypha_messages",
        sa.Column("pos", _ID, primary_key=True, autoincrement=True),
        sa.Column("message_id", sa.String(100), nullable=False, unique=True),
        sa.Column("queue", sa.String(420), nullable=False),
        sa.Column("to_kind", sa.String(16), nullable=False),
        sa.Column("user_id", sa.String(100), nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("fsm_state", sa.String(120)),
        sa.Column("correlation_id", sa.String(120)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt_count", sa.Integer, nullable=False),
        sa.Column("available_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float),
        sa.Column("lease_until", sa.Float),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("reason", sa.String(200)),
        sa.Column("doc", sa.JSON, nullable=False),
    )
    op.create_index("ix_hypha_messages_queue", "hypha_messages", ["queue", "status", "pos"])
    op.create_index("ix_hypha_messages_run", "hypha_messages", ["run_id", "pos"])
    op.create_index("ix_hypha_messages_live", "hypha_messages",
                    ["status", "to_kind", "created_at"])
    op.create_table(
        "hypha_bus_queues",
        sa.Column("queue", sa.String(420), primary_key=True),
        sa.Column("live_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("live_bytes", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("hypha_bus_queues")
    op.drop_index("ix_hypha_messages_live", "hypha_messages")
    op.drop_index("ix_hypha_messages_run", "hypha_messages")
    op.drop_index("ix_hypha_messages_queue", "hypha_messages")
    op.drop_table("hypha_messages")

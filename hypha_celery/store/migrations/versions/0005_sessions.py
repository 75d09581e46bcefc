"""sessions: one row per (user_id, session_id), written by the run that opened it

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "hypha_sessions",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(420), nullable=False, unique=True),
        sa.Column("user_id", sa.String(200)),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("profile", sa.String(200)),
        sa.Column("pack", sa.String(200)),
        sa.Column("meta", sa.JSON, nullable=False),
        sa.Column("first_run_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_hypha_sessions_user", "hypha_sessions", ["user_id", "id"])
    op.create_index("ix_hypha_sessions_created", "hypha_sessions", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_hypha_sessions_created", "hypha_sessions")
    op.drop_index("ix_hypha_sessions_user", "hypha_sessions")
    op.drop_table("hypha_sessions")

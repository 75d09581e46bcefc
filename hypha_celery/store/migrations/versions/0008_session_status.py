"""a session's status: hypha_sessions.closed_at (NULL: active; set with session.closed)

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hypha_sessions", sa.Column("closed_at", sa.Float()))


def downgrade() -> None:
    with op.batch_alter_table("hypha_sessions") as batch:
        batch.drop_column("closed_at")

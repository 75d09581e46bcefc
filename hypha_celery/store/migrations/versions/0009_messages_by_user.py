"""a user's bus messages, newest first: an index of hypha_messages on (user_id, pos), the
filter and order of ``Bus.search(user_id=...)`` / ``hypha bus list --user``

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_hypha_messages_user", "hypha_messages", ["user_id", "pos"])


def downgrade() -> None:
    op.drop_index("ix_hypha_messages_user", "hypha_messages")

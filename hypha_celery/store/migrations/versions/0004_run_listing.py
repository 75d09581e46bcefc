"""indexes for listing runs by graph, user, session and creation time, newest first

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# Columns written once when the run is created: an update of a run's step (seq, doc,
# updated_at) stays HOT on PostgreSQL.
_INDEXES = (("ix_hypha_runs_graph", ["graph_id", "id"]),
            ("ix_hypha_runs_user", ["user_id", "id"]),
            ("ix_hypha_runs_session", ["session_id", "id"]),
            ("ix_hypha_runs_created", ["created_at"]))


def upgrade() -> None:
    for name, columns in _INDEXES:
        op.create_index(name, "hypha_runs", columns)


def downgrade() -> None:
    for name, _columns in reversed(_INDEXES):
        op.drop_index(name, "hypha_runs")

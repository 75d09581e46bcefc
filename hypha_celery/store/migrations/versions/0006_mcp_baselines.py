"""mcp baselines: the MCP gateway's approved capability contracts, per server and tool

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hypha_mcp_baselines",
        sa.Column("server", sa.String(200), primary_key=True),
        sa.Column("capability", sa.String(200), primary_key=True),
        sa.Column("capability_hash", sa.String(64), nullable=False),
        sa.Column("approved_hash", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("side_effect", sa.String(32), nullable=False),
        sa.Column("contract", sa.JSON, nullable=False),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("decided_by", sa.String(200)),
        sa.Column("decided_at", sa.Float),
    )
    op.create_index("ix_hypha_mcp_baselines_status", "hypha_mcp_baselines", ["status"])


def downgrade() -> None:
    op.drop_index("ix_hypha_mcp_baselines_status", "hypha_mcp_baselines")
    op.drop_table("hypha_mcp_baselines")

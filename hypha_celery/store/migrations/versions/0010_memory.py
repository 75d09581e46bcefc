"""governed memory: records, revisions, operation ids, the embedding outbox and vectors;
full-text search (PostgreSQL: a generated tsvector column with a GIN index; SQLite: an
FTS5 table kept by triggers)

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")
#: ASCII punctuation, read as spaces by the index (the query parser splits on it too)
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def upgrade() -> None:
    op.create_table(
        "hypha_memory",
        sa.Column("pos", _ID, primary_key=True, autoincrement=True),
        sa.Column("record_id", sa.String(64), nullable=False, unique=True),
        sa.Column("user_id", sa.String(200), nullable=False),
        sa.Column("tenant_id", sa.String(200)),
        sa.Column("workspace_id", sa.String(200)),
        sa.Column("session_id", sa.String(200)),
        sa.Column("agent_id", sa.String(200)),
        sa.Column("pack_id", sa.String(200)),
        sa.Column("memory_type", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("body", sa.Text),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("operation_id", sa.String(200), nullable=False),
        sa.Column("provenance", sa.JSON),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_hypha_memory_user", "hypha_memory", ["user_id", "memory_type", "pos"])
    op.create_table(
        "hypha_memory_revisions",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("record_id", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("body", sa.Text),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("operation_id", sa.String(200), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.UniqueConstraint("record_id", "revision", name="uq_hypha_memory_revisions_rev"),
    )
    op.create_table(
        "hypha_memory_ops",
        sa.Column("user_id", sa.String(200), primary_key=True),
        sa.Column("operation_id", sa.String(200), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("record_id", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("digest", sa.String(64)),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_table(
        "hypha_memory_outbox",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("record_id", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "hypha_memory_vectors",
        sa.Column("record_id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(200), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("vector", sa.JSON, nullable=False),
    )
    op.create_index("ix_hypha_memory_vectors_user", "hypha_memory_vectors", ["user_id"])
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_search()
    else:
        _sqlite_search()


def _postgresql_search() -> None:
    # the text's tokens, then one token of the user ('u' + md5 of the id): a search ANDs
    # it with the query, so the GIN index intersects one user's postings (fast scan)
    # rather than every user's postings of a common word
    punct = _PUNCT.replace("'", "''")
    op.execute(
        "ALTER TABLE hypha_memory ADD COLUMN search tsvector GENERATED ALWAYS AS "
        f"(to_tsvector('simple'::regconfig, translate(coalesce(body, ''), '{punct}', "
        f"'{' ' * len(_PUNCT)}')) || to_tsvector('simple'::regconfig, 'u' || md5(user_id)))"
        " STORED")
    op.execute("CREATE INDEX ix_hypha_memory_search ON hypha_memory USING gin (search)")


def _sqlite_search() -> None:
    # contentless: the index only (the bodies are in hypha_memory); the triggers keep it
    # in the writing transaction. ``owner`` is a token of the user id (an index lead;
    # every query also filters hypha_memory.user_id).
    op.execute("CREATE VIRTUAL TABLE hypha_memory_fts USING fts5(owner, body, content='', "
               "tokenize=\"unicode61 remove_diacritics 0\")")
    owner = "'u' || hex(new.user_id)"
    old_owner = "'u' || hex(old.user_id)"
    op.execute(
        "CREATE TRIGGER hypha_memory_fts_ai AFTER INSERT ON hypha_memory "
        "WHEN new.body IS NOT NULL BEGIN "
        f"INSERT INTO hypha_memory_fts(rowid, owner, body) VALUES (new.pos, {owner}, "
        "new.body); END")
    op.execute(
        "CREATE TRIGGER hypha_memory_fts_ad AFTER DELETE ON hypha_memory "
        "WHEN old.body IS NOT NULL BEGIN "
        "INSERT INTO hypha_memory_fts(hypha_memory_fts, rowid, owner, body) "
        f"VALUES ('delete', old.pos, {old_owner}, old.body); END")
    op.execute(  # in order: the old body out, then the new one in
        "CREATE TRIGGER hypha_memory_fts_au AFTER UPDATE OF body ON hypha_memory BEGIN "
        "INSERT INTO hypha_memory_fts(hypha_memory_fts, rowid, owner, body) "
        f"SELECT 'delete', old.pos, {old_owner}, old.body WHERE old.body IS NOT NULL; "
        f"INSERT INTO hypha_memory_fts(rowid, owner, body) SELECT new.pos, {owner}, "
        "new.body WHERE new.body IS NOT NULL; END")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        for trigger in ("ai", "ad", "au"):
            op.execute(f"DROP TRIGGER IF EXISTS hypha_memory_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS hypha_memory_fts")
    op.drop_index("ix_hypha_memory_vectors_user", "hypha_memory_vectors")
    op.drop_table("hypha_memory_vectors")
    op.drop_table("hypha_memory_outbox")
    op.drop_table("hypha_memory_ops")
    op.drop_table("hypha_memory_revisions")
    op.drop_index("ix_hypha_memory_user", "hypha_memory")
    op.drop_table("hypha_memory")

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
    Text,
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
    # listings newest first (``Runs.list_runs``) by graph, user, session or creation
    # time; written once per run (these columns never change)
    Index("ix_hypha_runs_graph", "graph_id", "id"),
    Index("ix_hypha_runs_user", "user_id", "id"),
    Index("ix_hypha_runs_session", "session_id", "id"),
    Index("ix_hypha_runs_created", "created_at"),
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

# A lane: one active item at a time, a bounded FIFO of pending items (hypha_celery.lanes).
# Graph runs sharing (user_id, session_id) and each agent's prompt and notification queues
# are lanes. ``pending_count`` / ``pending_bytes`` are what admission checks, under the lock
# of this row, so concurrent callers on different machines see one order.
lanes = Table(
    "hypha_lanes",
    metadata,
    Column("lane", String(420), primary_key=True),
    Column("active_run_id", String(64)),
    Column("pending_count", Integer, nullable=False, server_default="0"),
    Column("pending_bytes", BigInteger, nullable=False, server_default="0"),
)

lane_items = Table(
    "hypha_lane_items",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("lane", String(420), nullable=False),
    Column("ref", String(64), nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("payload", JSON),
    UniqueConstraint("lane", "ref", name="uq_hypha_lane_items_lane_ref"),
    Index("ix_hypha_lane_items_lane", "lane", "id"),
)

# Conversational agents (hypha_celery.agents): one row per live agent name. ``doc`` holds
# the callback state, the flags and the current turn; ``session`` the backend session
# (written only when it changes); the mailbox is
# two lanes (``a:<incarnation>:p`` prompts, ``a:<incarnation>:n`` notifications). An idle
# agent is this row and nothing else: no worker memory, no timers. ``control`` carries an
# interrupt request the turn's worker polls; ``heartbeat_at`` is refreshed while a worker
# owns the agent, so the supervisor can tell a dead owner from a slow turn.
agents = Table(
    "hypha_agents",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("incarnation", String(32), nullable=False, unique=True),
    Column("kind", String(200), nullable=False),
    Column("phase", String(16), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("control", String(120)),
    Column("heartbeat_at", Float),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("doc", JSON, nullable=False),
    Column("session", JSON, nullable=False),
    Index("ix_hypha_agents_phase", "phase", "heartbeat_at"),
)

# Outcomes of finished tell requests kept for ``poll`` (bounded per agent by count and
# bytes, oldest evicted first) and cancel tombstones.
agent_results = Table(
    "hypha_agent_results",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("incarnation", String(32), nullable=False),
    Column("ref", String(64), nullable=False, unique=True),
    Column("bytes", Integer, nullable=False),
    Column("outcome", JSON, nullable=False),
    Index("ix_hypha_agent_results_agent", "incarnation", "id"),
)

# Completions written in the transaction that decided them and deleted once delivered:
# a worker that dies in between leaves the row for the supervisor to send.
agent_outbox = Table(
    "hypha_agent_outbox",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("incarnation", String(32), nullable=False),
    Column("ref", String(64), nullable=False),
    Column("target", JSON, nullable=False),
    Column("message", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
)

# Edge outcomes as they arrive, before the reducer's step writes them to the log as
# node.execution.started / node.execution.completed events. Keyed "<execution>:done": a redelivered
# edge
# finds its outcome here and is not run again; no run-row lock is taken per edge.
outcomes = Table(
    "hypha_outcomes",
    metadata,
    Column("idem", String(200), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("data", JSON, nullable=False),
    Index("ix_hypha_outcomes_run", "run_id"),
)

# Messages hypha gave up on: retries exhausted, delivered more than the delivery limit,
# malformed (not JSON, unknown task, wrong schema) or abandoned by recovery. The project's
# own dead-letter store on every broker (Redis has none; RabbitMQ's dead-letter queue is
# drained into it). ``args`` is the task's JSON arguments, for ``hypha dlq redrive``.
dead_letters = Table(
    "hypha_dead_letters",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("run_id", String(64)),
    Column("execution_id", String(120)),
    Column("task", String(200), nullable=False),
    Column("queue", String(200)),
    Column("args", JSON, nullable=False),
    Column("reason", String(40), nullable=False),
    Column("error_class", String(40), nullable=False),
    Column("error", JSON, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("redriven_at", Float),
    Index("ix_hypha_dead_letters_status", "status", "id"),
    Index("ix_hypha_dead_letters_run", "run_id"),
)

# Liveness of node executions that run longer than the lease interval: a worker-process
# thread writes a row once a node has run for one interval and refreshes ``heartbeat_at``
# while it runs. Fast nodes never write one. The supervisor reads them to tell "started,
# still alive" from "started, worker gone" from "never started".
leases = Table(
    "hypha_leases",
    metadata,
    Column("execution_id", String(120), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("worker", String(200), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
)

# Circuit breakers per dependency key: ``failures`` within the window starting at
# ``window_start``; the circuit is open until ``open_until``.
circuits = Table(
    "hypha_circuits",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("failures", Integer, nullable=False),
    Column("window_start", Float, nullable=False),
    Column("open_until", Float, nullable=False),
)

# A session: one row per (user_id, session_id), written by the run that opened it (with
# its ``session.created`` event); ``key`` is the lane key of the pair (unique with NULLs).
sessions = Table(
    "hypha_sessions",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("key", String(420), nullable=False, unique=True),
    Column("user_id", String(200)),
    Column("session_id", String(200), nullable=False),
    Column("profile", String(200)),
    Column("pack", String(200)),
    Column("meta", JSON, nullable=False),
    Column("first_run_id", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("closed_at", Float),  # set with its session.closed event (0008)
    Index("ix_hypha_sessions_user", "user_id", "id"),
    Index("ix_hypha_sessions_created", "created_at"),
)

# The message bus (hypha_celery.bus): one row per message, kept after it settles (its
# status and reason are the record of a message with no run). ``doc`` is the message as
# published; the columns are what changes and what pulls filter on. ``pos`` orders a
# queue (FIFO); a pull takes rows with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL.
messages = Table(
    "hypha_messages",
    metadata,
    Column("pos", _ID, primary_key=True, autoincrement=True),
    Column("message_id", String(100), nullable=False, unique=True),
    Column("queue", String(420), nullable=False),
    Column("to_kind", String(16), nullable=False),
    Column("user_id", String(100), nullable=False),
    Column("run_id", String(64)),
    Column("fsm_state", String(120)),
    Column("correlation_id", String(120)),
    Column("status", String(16), nullable=False),
    Column("attempt_count", Integer, nullable=False),
    Column("available_at", Float, nullable=False),
    Column("expires_at", Float),
    Column("lease_until", Float),
    Column("bytes", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("reason", String(200)),
    Column("doc", JSON, nullable=False),
    Index("ix_hypha_messages_queue", "queue", "status", "pos"),
    Index("ix_hypha_messages_run", "run_id", "pos"),
    Index("ix_hypha_messages_live", "status", "to_kind", "created_at"),
    Index("ix_hypha_messages_user", "user_id", "pos"),  # a user's, newest first (0009)
)

# A bus queue's live (queued or delivered) messages in count and bytes: what admission
# checks under this row's lock (the bounds of hypha_celery.bus.BusLimits).
bus_queues = Table(
    "hypha_bus_queues",
    metadata,
    Column("queue", String(420), primary_key=True),
    Column("live_count", Integer, nullable=False, server_default="0"),
    Column("live_bytes", BigInteger, nullable=False, server_default="0"),
)

# The MCP gateway's baselines: one row per (server, capability), the contract last seen
# (``capability_hash`` over its canonical JSON) and the one an operator (or the drift policy
# ``accept``) approved; ``status`` is ``approved`` when they are the same, else
# ``quarantined`` (hypha_celery.mcp; written by discovery and ``hypha mcp accept``).
mcp_baselines = Table(
    "hypha_mcp_baselines",
    metadata,
    Column("server", String(200), primary_key=True),
    Column("capability", String(200), primary_key=True),
    Column("capability_hash", String(64), nullable=False),
    Column("approved_hash", String(64)),
    Column("status", String(16), nullable=False),
    Column("side_effect", String(32), nullable=False),
    Column("contract", JSON, nullable=False),
    Column("first_seen", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("decided_by", String(200)),
    Column("decided_at", Float),
    Index("ix_hypha_mcp_baselines_status", "status"),
)

# Governed memory (hypha_celery.memory): one row per record, its current revision. The
# scope is the owner (``user_id``, required) plus optional narrower ids; ``body`` is NULL
# once the record is deleted (the row stays as a tombstone: id, revision, status).
# Full-text search is kept outside this metadata (migration 0010; SQLAlchemy cannot
# describe it): on PostgreSQL the generated ``search`` tsvector column and its GIN index,
# on SQLite the FTS5 table ``hypha_memory_fts`` kept by triggers (see MEMORY_SEARCH_OBJECTS
# in hypha_celery.store.memory).
memory = Table(
    "hypha_memory",
    metadata,
    Column("pos", _ID, primary_key=True, autoincrement=True),
    Column("record_id", String(64), nullable=False, unique=True),
    Column("user_id", String(200), nullable=False),
    Column("tenant_id", String(200)),
    Column("workspace_id", String(200)),
    Column("session_id", String(200)),
    Column("agent_id", String(200)),
    Column("pack_id", String(200)),
    Column("memory_type", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("body", Text),
    Column("tags", JSON, nullable=False),
    Column("operation_id", String(200), nullable=False),
    Column("provenance", JSON),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # every read is one user's: the user's records by type, oldest first
    Index("ix_hypha_memory_user", "user_id", "memory_type", "pos"),
)

# A record's revisions (history): bodies erased when the record is deleted.
memory_revisions = Table(
    "hypha_memory_revisions",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("record_id", String(64), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("body", Text),
    Column("tags", JSON, nullable=False),
    Column("operation_id", String(200), nullable=False),
    Column("at", Float, nullable=False),
    UniqueConstraint("record_id", "revision", name="uq_hypha_memory_revisions_rev"),
)

# The operation ids of a user's memory writes (idempotency): what each wrote and the
# digest of its request (a second request under the same id must be the same).
memory_ops = Table(
    "hypha_memory_ops",
    metadata,
    Column("user_id", String(200), primary_key=True),
    Column("operation_id", String(200), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("record_id", String(64), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("digest", String(64)),
    Column("at", Float, nullable=False),
)

# Embedding work: one row per write of a record, in the write's transaction; drained by
# hypha_celery.memory.EmbeddingIndex.sync.
memory_outbox = Table(
    "hypha_memory_outbox",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("record_id", String(64), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
)

# The embedding projection: one vector per active record (JSON floats), rebuildable from
# hypha_memory at any time.
memory_vectors = Table(
    "hypha_memory_vectors",
    metadata,
    Column("record_id", String(64), primary_key=True),
    Column("user_id", String(200), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("vector", JSON, nullable=False),
    Index("ix_hypha_memory_vectors_user", "user_id"),
)

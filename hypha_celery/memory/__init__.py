"""Governed memory (issue 26): records scoped by user, typed, revisioned; idempotent
writes, optimistic updates, history, deletion; a write policy; full-text retrieval
(PostgreSQL full-text search, SQLite FTS5) and optional embeddings; events that carry
references, never text. ``docs/memory.md``."""

from hypha_celery.memory._embeddings import Embed, EmbeddingIndex
from hypha_celery.memory._manager import Emit, MemoryManager
from hypha_celery.memory._policy import WriteDecision, WritePolicy, WriteRequest, WriteVerdict
from hypha_celery.memory._query import parse_query, query_hash, words_query
from hypha_celery.memory._types import (
    MAX_ID_CHARS,
    MemoryHit,
    MemoryLimits,
    MemoryProvenance,
    MemoryRecord,
    MemoryRevision,
    MemoryScope,
    MemoryStatus,
    MemoryType,
)

__all__ = [
    # the API
    "MemoryManager", "Emit",
    # the vocabulary
    "MemoryScope", "MemoryType", "MemoryStatus", "MemoryRecord", "MemoryRevision",
    "MemoryHit", "MemoryProvenance", "MemoryLimits", "MAX_ID_CHARS",
    # the write policy
    "WritePolicy", "WriteDecision", "WriteRequest", "WriteVerdict",
    # the query language
    "parse_query", "query_hash", "words_query",
    # embeddings
    "EmbeddingIndex", "Embed",
]

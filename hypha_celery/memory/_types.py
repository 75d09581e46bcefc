"""The vocabulary of governed memory: scopes, types, statuses, records, hits, bounds."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from hypha_celery.errors import MemoryScopeRequired
from hypha_celery.jsontypes import JsonObject
from hypha_celery.store.memory import MemoryRevisionRow, MemoryRow, ScopeIds

__all__ = ["DEFAULT_LIMITS", "MAX_ID_CHARS", "MemoryHit", "MemoryLimits", "MemoryProvenance",
           "MemoryRecord", "MemoryRevision", "MemoryScope", "MemoryStatus", "MemoryType"]

#: The longest id of a scope (user, tenant, ...), an operation id and a provenance field.
MAX_ID_CHARS = 200


@dataclass(frozen=True, slots=True)
class MemoryScope(ScopeIds):
    """Whose memory: ``user_id`` (required, the boundary no read or write crosses) and
    optional narrower ids. A record written in a scope carries all of its ids; a read in a
    scope sees the user's records whose every narrower id is unset or the scope's (a
    read in ``(alice, session s1)`` sees alice's user-wide records and those of s1)."""

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            raise MemoryScopeRequired("a memory scope needs a user_id (MEMORY_SCOPE_REQUIRED)")
        for name, value in (("user_id", self.user_id), *self.narrower().items()):
            if value is not None and (not isinstance(value, str) or not value
                                      or len(value) > MAX_ID_CHARS):
                raise MemoryScopeRequired(
                    f"memory scope {name} must be a non-empty string of at most "
                    f"{MAX_ID_CHARS} characters")

    @property
    def key(self) -> str:
        """A stable text of the scope's ids (what events carry): compact JSON."""
        return json.dumps([self.user_id, *self.narrower().values()],
                          separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def of(cls, ids: ScopeIds) -> MemoryScope:
        return ids if isinstance(ids, MemoryScope) else cls(ids.user_id, **ids.narrower())


class MemoryType(StrEnum):
    """What a record is (hypha's record types; only ``working`` is short-term)."""

    WORKING = "working"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    PREFERENCE = "preference"


class MemoryStatus(StrEnum):
    """``deleted``: a tombstone (id, revision, status; no body)."""

    ACTIVE = "active"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class MemoryProvenance:
    """Where a record came from: the run that wrote it and/or a free source label."""

    run_id: str | None = None
    source: str | None = None

    def json(self) -> JsonObject:
        return {"run_id": self.run_id, "source": self.source}

    @classmethod
    def of(cls, data: JsonObject | None) -> MemoryProvenance | None:
        if data is None:
            return None
        run_id, source = data.get("run_id"), data.get("source")
        return cls(run_id if isinstance(run_id, str) else None,
                   source if isinstance(source, str) else None)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One record at its current revision."""

    id: str
    scope: MemoryScope
    memory_type: MemoryType
    text: str
    tags: tuple[str, ...]
    revision: int
    status: MemoryStatus
    operation_id: str
    provenance: MemoryProvenance | None
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, row: MemoryRow) -> MemoryRecord:
        return cls(row.record_id, MemoryScope.of(row.scope), MemoryType(row.memory_type),
                   row.body or "", row.tags, row.revision, MemoryStatus(row.status),
                   row.operation_id, MemoryProvenance.of(row.provenance), row.created_at,
                   row.updated_at)

    def json(self) -> JsonObject:
        """The record as JSON (an export line, ``hypha memory show --json``)."""
        return {"id": self.id, "scope": {"user_id": self.scope.user_id,
                                         **self.scope.narrower()},
                "memory_type": self.memory_type.value, "text": self.text,
                "tags": list(self.tags), "revision": self.revision,
                "status": self.status.value, "operation_id": self.operation_id,
                "provenance": None if self.provenance is None else self.provenance.json(),
                "created_at": self.created_at, "updated_at": self.updated_at}


@dataclass(frozen=True, slots=True)
class MemoryRevision:
    """One revision in a record's history (``text`` None: erased by the deletion)."""

    record_id: str
    revision: int
    status: MemoryStatus
    text: str | None
    tags: tuple[str, ...]
    operation_id: str
    at: float

    @classmethod
    def of(cls, row: MemoryRevisionRow) -> MemoryRevision:
        return cls(row.record_id, row.revision, MemoryStatus(row.status), row.body, row.tags,
                   row.operation_id, row.at)


@dataclass(frozen=True, slots=True)
class MemoryHit:
    """A retrieved record and its score (higher is better; comparable within one
    search only)."""

    record: MemoryRecord
    score: float


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    """Every bound of governed memory (count and bytes)."""

    #: A record's text, UTF-8 bytes (MemoryRecordTooLarge past it).
    max_record_bytes: int = 16 * 1024
    #: Tags per record, and characters per tag.
    max_tags: int = 16
    max_tag_chars: int = 64
    #: A retrieval query: characters, and words and phrases (included or excluded).
    max_query_chars: int = 512
    max_query_terms: int = 32
    #: Hits one search returns, records one list page returns, revisions one history
    #: returns (the newest).
    max_results: int = 100
    max_list: int = 500
    max_history: int = 1000
    #: Vectors one embedding search compares (one user's, in its scope).
    max_vector_scan: int = 100_000


#: The defaults (what ``MemoryLimits()`` is).
DEFAULT_LIMITS = MemoryLimits()

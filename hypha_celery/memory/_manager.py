"""``MemoryManager``: governed memory's one API (add, update, delete, get, list, history,
search, export), its checks and its events, over the store's memory tables."""

from __future__ import annotations

import builtins
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import suppress

from hypha_celery.errors import (
    GovernedMemoryError,
    MemoryNotFound,
    MemoryRecordTooLarge,
    MemoryScopeRequired,
)
from hypha_celery.events import payloads as ev
from hypha_celery.jsontypes import JsonObject
from hypha_celery.memory._policy import DEFAULT_POLICY, WritePolicy, WriteRequest, check_write
from hypha_celery.memory._query import parse_query, query_hash
from hypha_celery.memory._types import (
    DEFAULT_LIMITS,
    MAX_ID_CHARS,
    MemoryHit,
    MemoryLimits,
    MemoryProvenance,
    MemoryRecord,
    MemoryRevision,
    MemoryScope,
    MemoryType,
)
from hypha_celery.store.facade import EventStore
from hypha_celery.store.memory import NewRecord

__all__ = ["Emit", "MemoryManager"]

#: Where a call's events go (the caller decides which log): references only.
Emit = Callable[[ev.Payload], None]


def _no_emit(_: ev.Payload) -> None:
    return None


def _digest(value: JsonObject) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _prov(provenance: MemoryProvenance | None) -> JsonObject | None:
    return None if provenance is None else provenance.json()


def _key(scope: object) -> str:
    """The scope's key for an event ("" when there is no scope)."""
    return scope.key if isinstance(scope, MemoryScope) else ""


def _code(exc: BaseException) -> str:
    return str(getattr(exc, "code", type(exc).__name__))


class MemoryManager:
    """Governed memory on ``store`` (an :class:`EventStore` or its URL).

    Writes are checked (scope, policy, bounds) before anything is written, are
    idempotent by ``operation_id`` (per user) and emit ``memory.write.*`` /
    ``memory.delete.*`` events through ``emit``; :meth:`search` emits ``memory.read.*``.
    Events carry ids, revisions, the scope's key and a query's hash: never text."""

    def __init__(self, store: EventStore | str, *, policy: WritePolicy = DEFAULT_POLICY,
                 limits: MemoryLimits = DEFAULT_LIMITS,
                 clock: Callable[[], float] = time.time,
                 new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self.store = EventStore(store) if isinstance(store, str) else store
        self.policy = policy
        self.limits = limits
        self._clock = clock
        self._new_id = new_id

    # -- writes ------------------------------------------------------------------------
    def add(self, scope: MemoryScope | None, memory_type: MemoryType | str, text: str, *,
            operation_id: str, tags: Iterable[str] = (),
            provenance: MemoryProvenance | None = None, emit: Emit | None = None,
            step: int | None = None) -> MemoryRecord:
        """Write a new record (revision 1) in ``scope``. The same ``operation_id`` again
        with the same request returns the record it wrote (``reused=True`` in the
        committed event); with another request :class:`MemoryOperationConflict`."""
        out = emit or _no_emit
        op = self._op_id(operation_id)
        kind = self._type(memory_type)
        out(ev.MemoryWriteRequested(operation_id=op, step=step,
                                    scope=_key(scope), memory_type=kind.value))
        try:
            tag_list = self._checked(scope, kind, text, tags, op, None, provenance)
            assert scope is not None
            record_id = self._new_id()
            out(ev.MemoryWriteValidated(operation_id=op, step=step))
            digest = _digest({"op": "add", "scope": scope.key, "type": kind.value,
                              "text": text, "tags": list(tag_list),
                              "provenance": _prov(provenance)})
            row, reused = self.store.memory_add(
                NewRecord(record_id, scope, kind.value, text, tag_list,
                          _prov(provenance)),
                operation_id=op, digest=digest, at=self._clock())
        except GovernedMemoryError as exc:
            out(self._rejected(op, step, exc))
            raise
        out(ev.MemoryWriteCommitted(operation_id=op, step=step, record_id=row.record_id,
                                    revision=row.revision, reused=reused))
        return MemoryRecord.of(row)

    def update(self, scope: MemoryScope | None, record_id: str, text: str, *,
               expected_revision: int, operation_id: str, tags: Iterable[str] | None = None,
               provenance: MemoryProvenance | None = None, emit: Emit | None = None,
               step: int | None = None) -> MemoryRecord:
        """Write the next revision of a record (optimistic: :class:`MemoryConflict`, with
        ``.current``, unless it is at ``expected_revision``). ``tags`` None: kept."""
        out = emit or _no_emit
        op = self._op_id(operation_id)
        current: MemoryRecord | None = None
        with suppress(GovernedMemoryError):
            current = self.get(scope, record_id)
        out(ev.MemoryWriteRequested(operation_id=op, step=step, scope=_key(scope),
                                    memory_type=current.memory_type.value if current else "",
                                    record_id=record_id, expected_revision=expected_revision))
        try:
            if current is None:
                self._scope(scope)
                raise MemoryNotFound(f"no memory record {record_id!r} in this scope")
            kind = current.memory_type
            given = None if tags is None else tags
            tag_list = self._checked(scope, kind, text, given or (), op, record_id,
                                     provenance or (current.provenance if current else None))
            assert scope is not None
            out(ev.MemoryWriteValidated(operation_id=op, step=step, record_id=record_id))
            digest = _digest({"op": "update", "record": record_id, "text": text,
                              "tags": None if given is None else list(tag_list),
                              "expected": expected_revision,
                              "provenance": _prov(provenance)})
            row, reused = self.store.memory_update(
                scope, record_id, text, None if given is None else tag_list,
                _prov(provenance), expected_revision=expected_revision,
                operation_id=op, digest=digest, at=self._clock())
        except GovernedMemoryError as exc:
            out(self._rejected(op, step, exc))
            raise
        out(ev.MemoryWriteCommitted(operation_id=op, step=step, record_id=row.record_id,
                                    revision=row.revision, reused=reused))
        return MemoryRecord.of(row)

    def delete(self, scope: MemoryScope | None, record_id: str, *, operation_id: str,
               emit: Emit | None = None, step: int | None = None) -> int:
        """Delete a record: gone at once from get, list, search, history's bodies and
        exports; its revision (a tombstone) returned. Idempotent by ``operation_id``."""
        out = emit or _no_emit
        op = self._op_id(operation_id)
        out(ev.MemoryDeleteRequested(operation_id=op, step=step, record_id=record_id))
        try:
            scope = self._scope(scope)
            revision, _ = self.store.memory_delete(
                scope, record_id, operation_id=op,
                digest=_digest({"op": "delete", "record": record_id}), at=self._clock())
        except GovernedMemoryError as exc:
            out(ev.MemoryDeleteFailed(operation_id=op, step=step, record_id=record_id,
                                      error=_code(exc), reason=str(exc)))
            raise
        out(ev.MemoryDeleteCompleted(operation_id=op, step=step, record_id=record_id,
                                     revision=revision))
        return revision

    # -- reads -------------------------------------------------------------------------
    def get(self, scope: MemoryScope | None, record_id: str) -> MemoryRecord:
        """The record, if active and visible in ``scope`` (else :class:`MemoryNotFound`:
        another user's record looks the same as none)."""
        row = self.store.memory_get(self._scope(scope), record_id)
        if row is None:
            raise MemoryNotFound(f"no memory record {record_id!r} in this scope")
        return MemoryRecord.of(row)

    def list(self, scope: MemoryScope | None, *, memory_type: MemoryType | str | None = None,
             limit: int = 50, after: str | None = None) -> builtins.list[MemoryRecord]:
        """Active records visible in ``scope``, oldest first, a page of at most ``limit``
        (bounded by ``MemoryLimits.max_list``); the next page: ``after=page[-1].id``."""
        kind = None if memory_type is None else self._type(memory_type).value
        rows = self.store.memory_list(self._scope(scope), memory_type=kind,
                                      limit=max(1, min(limit, self.limits.max_list)),
                                      after=after)
        return [MemoryRecord.of(r) for r in rows]

    def history(self, scope: MemoryScope | None, record_id: str
                ) -> builtins.list[MemoryRevision]:
        """A record's revisions, oldest first (the newest ``max_history``); a deleted
        record's too, without text."""
        rows = self.store.memory_history(self._scope(scope), record_id,
                                         self.limits.max_history)
        if rows is None:
            raise MemoryNotFound(f"no memory record {record_id!r} in this scope")
        return [MemoryRevision.of(r) for r in rows]

    def search(self, scope: MemoryScope | None, query: str, *, limit: int = 10,
               memory_types: Sequence[MemoryType | str] | None = None,
               operation_id: str | None = None, emit: Emit | None = None,
               step: int | None = None) -> builtins.list[MemoryHit]:
        """Full-text retrieval in ``scope``, best first, at most ``limit`` (bounded by
        ``MemoryLimits.max_results``); the query language: :mod:`._query`.
        :class:`InvalidMemoryQuery` for a malformed query."""
        out = emit or _no_emit
        op = operation_id or uuid.uuid4().hex
        limit = max(1, min(limit, self.limits.max_results))
        kinds = None if memory_types is None else [self._type(t).value for t in memory_types]
        out(ev.MemoryReadRequested(operation_id=op, step=step,
                                   scope=_key(scope),
                                   query_hash=query_hash(query if isinstance(query, str)
                                                         else ""),
                                   limit=limit, memory_types=kinds))
        try:
            parsed = parse_query(query, self.limits)
            found = self.store.memory_search(self._scope(scope), parsed, limit=limit,
                                             memory_types=kinds)
        except GovernedMemoryError as exc:
            out(ev.MemoryReadFailed(operation_id=op, step=step, error=_code(exc),
                                    reason=str(exc)))
            raise
        hits = [MemoryHit(MemoryRecord.of(row), score) for row, score in found]
        out(ev.MemoryReadCompleted(operation_id=op, step=step, records=[
            {"id": h.record.id, "revision": h.record.revision} for h in hits]))
        return hits

    def export(self, scope: MemoryScope | None) -> Iterator[str]:
        """The active records visible in ``scope`` as JSONL lines (deleted ones never)."""
        after: str | None = None
        while True:
            page = self.list(scope, limit=self.limits.max_list, after=after)
            for record in page:
                yield json.dumps(record.json(), sort_keys=True, ensure_ascii=False)
            if len(page) < self.limits.max_list:
                return
            after = page[-1].id

    # -- checks ------------------------------------------------------------------------
    @staticmethod
    def _scope(scope: MemoryScope | None) -> MemoryScope:
        if not isinstance(scope, MemoryScope):
            raise MemoryScopeRequired("a memory call needs a MemoryScope with a user_id "
                                      "(MEMORY_SCOPE_REQUIRED)")
        return scope

    @staticmethod
    def _op_id(operation_id: str) -> str:
        if not isinstance(operation_id, str) or not operation_id or \
                len(operation_id) > MAX_ID_CHARS:
            raise GovernedMemoryError(f"operation_id must be a non-empty string of at most "
                                      f"{MAX_ID_CHARS} characters")
        return operation_id

    @staticmethod
    def _type(memory_type: MemoryType | str) -> MemoryType:
        try:
            return MemoryType(memory_type)
        except ValueError:
            raise GovernedMemoryError(
                f"unknown memory type {memory_type!r} (one of "
                f"{', '.join(t.value for t in MemoryType)})") from None

    def _checked(self, scope: MemoryScope | None, kind: MemoryType, text: str,
                 tags: Iterable[str], op: str, record_id: str | None,
                 provenance: MemoryProvenance | None) -> tuple[str, ...]:
        """The write's checks in hypha's order, then the bounds; the tags as stored."""
        if not isinstance(text, str) or not text.strip():
            raise GovernedMemoryError("a memory record's text must be a non-empty string")
        size = len(text.encode())
        tag_list = tuple(tags)
        request = None if not isinstance(scope, MemoryScope) else WriteRequest(
            scope, kind, op, record_id, size, tag_list, provenance)
        check_write(self.policy, request)
        limits = self.limits
        if size > limits.max_record_bytes:
            raise MemoryRecordTooLarge("the memory record's text", size,
                                       limits.max_record_bytes,
                                       "MemoryLimits.max_record_bytes")
        if len(tag_list) > limits.max_tags:
            raise GovernedMemoryError(f"{len(tag_list)} tags, more than the bound of "
                                      f"{limits.max_tags} (MemoryLimits.max_tags)")
        for tag in tag_list:
            if not isinstance(tag, str) or not tag or len(tag) > limits.max_tag_chars:
                raise GovernedMemoryError(f"a tag must be a non-empty string of at most "
                                          f"{limits.max_tag_chars} characters "
                                          "(MemoryLimits.max_tag_chars)")
        return tag_list

    @staticmethod
    def _rejected(op: str, step: int | None, exc: GovernedMemoryError) -> ev.Payload:
        return ev.MemoryWriteRejected(operation_id=op, step=step, error=_code(exc),
                                      reason=str(exc), review=bool(getattr(exc, "review",
                                                                           False)))

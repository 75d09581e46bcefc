"""Governed memory as a client sees it: ``hypha.memory`` (the operator's, any user) and
``hypha.as_user(u).memory`` (:class:`ScopedMemory`: user ``u``'s only).

A user's client never reads or writes another user's memory: a read naming another user
(get, list, history, search, export) is :class:`MemoryNotFound`, as for a record that does
not exist; a write naming another user (add, update, delete) is :class:`NotPermitted`,
before anything is looked up. Without a scope, a call is in the user's user-wide scope.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Sequence

from hypha_celery.errors import MemoryNotFound, NotPermitted
from hypha_celery.memory import (
    Emit,
    MemoryHit,
    MemoryManager,
    MemoryProvenance,
    MemoryRecord,
    MemoryRevision,
    MemoryScope,
    MemoryType,
)

__all__ = ["ScopedMemory"]


class ScopedMemory:
    """``manager`` narrowed to ``owner``: every call is in a scope of that user."""

    def __init__(self, manager: MemoryManager, owner: str) -> None:
        self._manager = manager
        self.owner = owner

    def scope(self, **narrower: str | None) -> MemoryScope:
        """A scope of this user (``session_id=...``, ``agent_id=...``, ...)."""
        return MemoryScope(self.owner, **narrower)

    def _read(self, scope: MemoryScope | None) -> MemoryScope:
        if scope is None:
            return MemoryScope(self.owner)
        if scope.user_id != self.owner:
            raise MemoryNotFound("no such memory in this scope")
        return scope

    def _write(self, scope: MemoryScope | None) -> MemoryScope:
        if scope is None:
            return MemoryScope(self.owner)
        if scope.user_id != self.owner:
            raise NotPermitted("a user's client writes that user's memory only")
        return scope

    # -- writes ----------------------------------------------------------------------
    def add(self, scope: MemoryScope | None, memory_type: MemoryType | str, text: str, *,
            operation_id: str, tags: Iterable[str] = (),
            provenance: MemoryProvenance | None = None, emit: Emit | None = None,
            step: int | None = None) -> MemoryRecord:
        return self._manager.add(self._write(scope), memory_type, text,
                                 operation_id=operation_id, tags=tags, provenance=provenance,
                                 emit=emit, step=step)

    def update(self, scope: MemoryScope | None, record_id: str, text: str, *,
               expected_revision: int, operation_id: str, tags: Iterable[str] | None = None,
               provenance: MemoryProvenance | None = None, emit: Emit | None = None,
               step: int | None = None) -> MemoryRecord:
        return self._manager.update(self._write(scope), record_id, text,
                                    expected_revision=expected_revision,
                                    operation_id=operation_id, tags=tags,
                                    provenance=provenance, emit=emit, step=step)

    def delete(self, scope: MemoryScope | None, record_id: str, *, operation_id: str,
               emit: Emit | None = None, step: int | None = None) -> int:
        return self._manager.delete(self._write(scope), record_id,
                                    operation_id=operation_id, emit=emit, step=step)

    # -- reads -----------------------------------------------------------------------
    def get(self, scope: MemoryScope | None, record_id: str) -> MemoryRecord:
        return self._manager.get(self._read(scope), record_id)

    def list(self, scope: MemoryScope | None = None, *,
             memory_type: MemoryType | str | None = None, limit: int = 50,
             after: str | None = None) -> builtins.list[MemoryRecord]:
        return self._manager.list(self._read(scope), memory_type=memory_type, limit=limit,
                                  after=after)

    def history(self, scope: MemoryScope | None, record_id: str
                ) -> builtins.list[MemoryRevision]:
        return self._manager.history(self._read(scope), record_id)

    def search(self, scope: MemoryScope | None, query: str, *, limit: int = 10,
               memory_types: Sequence[MemoryType | str] | None = None,
               operation_id: str | None = None, emit: Emit | None = None,
               step: int | None = None) -> builtins.list[MemoryHit]:
        return self._manager.search(self._read(scope), query, limit=limit,
                                    memory_types=memory_types, operation_id=operation_id,
                                    emit=emit, step=step)

    def export(self, scope: MemoryScope | None = None) -> Iterator[str]:
        return self._manager.export(self._read(scope))

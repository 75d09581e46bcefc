"""The governed memory a node's context gets (``ctx.recall`` / ``ctx.remember``): the
runtime's :class:`~hypha_celery.memory.MemoryManager` bound to the run's user and
session (see :mod:`hypha_celery.graph.memory`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from hypha_celery.errors import MemoryNotFound
from hypha_celery.events import View
from hypha_celery.events import payloads as ev
from hypha_celery.graph.memory import MemoryRefJson, Recalled, Remembered
from hypha_celery.memory import (
    Emit,
    MemoryHit,
    MemoryProvenance,
    MemoryRecord,
    MemoryRevision,
    MemoryScope,
    MemoryType,
)
from hypha_celery.runtime.core import Runtime

__all__ = ["MemoryAccess", "RunMemory", "run_memory"]


class MemoryAccess(Protocol):
    """What :class:`RunMemory` uses of a memory manager (the operator's
    :class:`~hypha_celery.memory.MemoryManager` or a user's scoped one)."""

    def add(self, scope: MemoryScope | None, memory_type: MemoryType | str, text: str, *,
            operation_id: str, tags: Iterable[str] = (),
            provenance: MemoryProvenance | None = None, emit: Emit | None = None,
            step: int | None = None) -> MemoryRecord: ...

    def get(self, scope: MemoryScope | None, record_id: str) -> MemoryRecord: ...

    def history(self, scope: MemoryScope | None, record_id: str) -> list[MemoryRevision]: ...

    def search(self, scope: MemoryScope | None, query: str, *, limit: int = 10,
               memory_types: Sequence[MemoryType | str] | None = None,
               operation_id: str | None = None, emit: Emit | None = None,
               step: int | None = None) -> list[MemoryHit]: ...


class RunMemory:
    """:class:`~hypha_celery.graph.memory.MemoryPort` over ``manager`` in ``scope``;
    writes carry the run as their provenance."""

    def __init__(self, manager: MemoryAccess, scope: MemoryScope, run_id: str) -> None:
        self._manager, self._scope, self._run_id = manager, scope, run_id

    @property
    def scope_key(self) -> str:
        return self._scope.key

    def search(self, query: str, limit: int,
               memory_types: Sequence[str] | None) -> list[Recalled]:
        hits = self._manager.search(self._scope, query, limit=limit, memory_types=memory_types)
        return [Recalled(h.record.id, h.record.revision, h.record.memory_type.value,
                         h.record.text, h.score) for h in hits]

    def read(self, refs: Sequence[MemoryRefJson]) -> list[Recalled]:
        return [self._revision(ref) for ref in refs]

    def _revision(self, ref: MemoryRefJson) -> Recalled:
        for rev in self._manager.history(self._scope, ref["id"]):
            if rev.revision == ref["revision"] and rev.text is not None:
                return Recalled(ref["id"], rev.revision, self._type(ref["id"]), rev.text,
                                ref["score"])
        raise MemoryNotFound(f"memory record {ref['id']} revision {ref['revision']} is "
                             "no longer held (deleted, or past the history bound)")

    def _type(self, record_id: str) -> str:
        try:
            return self._manager.get(self._scope, record_id).memory_type.value
        except MemoryNotFound:
            return ""

    def write(self, text: str, memory_type: str, tags: Sequence[str],
              operation_id: str) -> Remembered:
        committed: list[ev.MemoryWriteCommitted] = []

        def seen(payload: ev.Payload) -> None:  # the events are the call's (attempts.py)
            if isinstance(payload, ev.MemoryWriteCommitted):
                committed.append(payload)

        record = self._manager.add(self._scope, memory_type, text, operation_id=operation_id,
                                   tags=tags, provenance=MemoryProvenance(run_id=self._run_id),
                                   emit=seen)
        return Remembered(record.id, record.revision, any(c.reused for c in committed))


def run_memory(rt: Runtime, view: View) -> RunMemory | None:
    """The memory of the run ``view`` (None: the run has no user); called at a node's
    first memory call."""
    user = view["user_id"]
    if not user:
        return None
    return RunMemory(rt.memory_manager(), MemoryScope(user, session_id=view["session_id"]),
                     view["run_id"])

"""Governed memory as a node sees it: ``ctx.recall`` and ``ctx.remember``.

A node reads and writes the memory of its run's user (and session) only: the runtime
gives the node's context a :class:`MemoryPort` bound to that scope (a run without a
``user_id`` has none: :class:`~hypha_celery.errors.MemoryScopeRequired`). Both are
recorded calls of the ``memory`` family: a read as ``memory.read.requested |
completed | failed`` with the records it returned as ``id@revision`` references (the
query only as its hash), a write as ``memory.write.requested | validated | committed``
or ``rejected`` (the record's id and revision, never its text). A replay serves them
from the recording: a read returns the same revisions (read back by id and revision,
whatever the memory holds now), a write writes nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from typing_extensions import TypedDict

__all__ = ["MemoryPort", "MemoryRefJson", "Recalled", "Remembered"]


@dataclass(frozen=True, slots=True)
class Recalled:
    """One record a read returned: its id, the revision read, its type, its text and
    its rank (higher is better)."""

    id: str
    revision: int
    memory_type: str
    text: str
    score: float


@dataclass(frozen=True, slots=True)
class Remembered:
    """A write's result: the record and its revision; ``reused`` when the operation id
    was written before (nothing new was written)."""

    id: str
    revision: int
    reused: bool


class MemoryRefJson(TypedDict):
    """A read's recorded output, per record: no text."""

    id: str
    revision: int
    score: float


class MemoryPort(Protocol):
    """Memory bound to one run's scope (the runtime's implementation is over
    :class:`~hypha_celery.memory.MemoryManager`)."""

    @property
    def scope_key(self) -> str:
        """The scope's key (ids only), recorded with each call."""
        ...

    def search(self, query: str, limit: int,
               memory_types: Sequence[str] | None) -> list[Recalled]:
        """Full-text retrieval, best first."""
        ...

    def read(self, refs: Sequence[MemoryRefJson]) -> list[Recalled]:
        """The recorded revisions (a replay); a revision no longer held raises
        :class:`~hypha_celery.errors.MemoryNotFound`."""
        ...

    def write(self, text: str, memory_type: str, tags: Sequence[str],
              operation_id: str) -> Remembered:
        """Add a record (idempotent by ``operation_id``)."""
        ...

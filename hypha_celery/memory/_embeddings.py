"""``EmbeddingIndex``: optional vectors of memory records, a projection fed by the outbox.

Every write of a record queues an outbox row in its transaction; :meth:`EmbeddingIndex.sync`
drains it (embedding the current text of each record named, dropping the vector of a
record that is gone); :meth:`EmbeddingIndex.rebuild` throws the vectors away and queues
every active record again. The structured record stays the source of truth: the vectors
can be rebuilt at any time, with another embedding function too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hypha_celery.errors import SetupError
from hypha_celery.memory._types import (
    DEFAULT_LIMITS,
    MemoryHit,
    MemoryLimits,
    MemoryRecord,
    MemoryScope,
)
from hypha_celery.store.facade import EventStore

__all__ = ["Embed", "EmbeddingIndex"]

#: Texts in, one vector of ``dim`` floats per text out (same order).
Embed = Callable[[list[str]], list[list[float]]]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class EmbeddingIndex:
    """Vectors of ``store``'s memory records by ``embed`` (``dim`` floats each), stored as
    JSON and compared by cosine similarity within one user's scope. ``pgvector`` says
    whether the PostgreSQL server has the extension (it is detected, never required;
    the comparison is the same either way)."""

    def __init__(self, store: EventStore, embed: Embed, dim: int, *,
                 limits: MemoryLimits = DEFAULT_LIMITS) -> None:
        if dim < 1:
            raise SetupError("an embedding dimension is at least 1")
        self.store, self.embed, self.dim, self.limits = store, embed, dim, limits

    @property
    def pgvector(self) -> bool:
        return self.store.memory_pgvector()

    def sync(self, batch: int = 256) -> int:
        """Drain the outbox, ``batch`` rows per transaction; how many rows it took.
        Idempotent: a row taken twice writes the same vector."""
        total = 0
        while rows := self.store.memory_outbox(max(1, batch)):
            ids = sorted({record_id for _, record_id in rows})
            live = self.store.memory_bodies(ids)
            vectors = self._vectors([body for *_, body in live]) if live else []
            found = {record_id for record_id, *_ in live}
            self.store.memory_put_vectors(
                [i for i, _ in rows],
                [(r, u, rev, v) for (r, u, rev, _), v in zip(live, vectors, strict=True)],
                [r for r in ids if r not in found])
            total += len(rows)
        return total

    def rebuild(self, batch: int = 256) -> int:
        """Every vector again from the records (after a change of ``embed``); how many
        records were embedded."""
        self.store.memory_requeue()
        return self.sync(batch)

    def search(self, scope: MemoryScope, text: str, k: int = 10) -> list[MemoryHit]:
        """The ``k`` records visible in ``scope`` nearest to ``text`` (at most
        ``MemoryLimits.max_results``), by cosine similarity; only records synced so far."""
        [query] = self._vectors([text])
        k = max(1, min(k, self.limits.max_results))
        scored = [(MemoryRecord.of(row), _cosine(query, vector))
                  for row, vector in self.store.memory_vectors(MemoryScope.of(scope),
                                                               self.limits.max_vector_scan)
                  if len(vector) == self.dim]
        scored.sort(key=lambda pair: (-pair[1], pair[0].id))
        return [MemoryHit(record, score) for record, score in scored[:k]]

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        vectors = self.embed(texts)
        if len(vectors) != len(texts) or any(len(v) != self.dim for v in vectors):
            raise SetupError(f"the embedding function must return one vector of {self.dim} "
                             f"floats per text ({len(texts)} texts)")
        return [[float(x) for x in v] for v in vectors]

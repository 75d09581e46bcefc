"""The embedding projection: the outbox written with each write, drained idempotently,
rebuilt from the records, searched by cosine within one user's scope."""

from __future__ import annotations

import hashlib
import math
import uuid

import pytest
import sqlalchemy as sa

from hypha_celery.errors import SetupError
from hypha_celery.memory import EmbeddingIndex, MemoryManager, MemoryScope
from hypha_celery.store.memory import index_tokens

DIM = 32


def embed(texts: list[str]) -> list[list[float]]:
    """A hashed bag of words (deterministic, no model)."""
    out = []
    for text in texts:
        v = [0.0] * DIM
        for token in index_tokens(text):
            v[int(hashlib.sha256(token.encode()).hexdigest(), 16) % DIM] += 1.0
        out.append(v)
    return out


def outbox(manager: MemoryManager) -> int:
    with manager.store.engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM hypha_memory_outbox")).scalar()
                   or 0)


def op() -> str:
    return uuid.uuid4().hex


def test_sync_search_update_delete_rebuild(manager: MemoryManager, scope: MemoryScope) -> None:
    index = EmbeddingIndex(manager.store, embed, DIM)
    index.sync()  # other tests' rows (the PostgreSQL database is shared)
    tea = manager.add(scope, "semantic", "green tea with honey", operation_id=op())
    cof = manager.add(scope, "semantic", "black coffee no sugar", operation_id=op())
    other = manager.add(MemoryScope(scope.user_id + "-x"), "semantic", "green tea with honey",
                        operation_id=op())
    assert outbox(manager) >= 3
    assert index.search(scope, "green tea") == []  # not synced yet
    assert index.sync(batch=2) >= 3 and outbox(manager) == 0
    hits = index.search(scope, "green tea", k=5)
    assert [h.record.id for h in hits] == [tea.id, cof.id]
    assert hits[0].score == pytest.approx(
        sum(embed(["green tea"])[0][i] * embed(["green tea with honey"])[0][i]
            for i in range(DIM)) / (math.sqrt(2) * 2))
    assert other.id not in {h.record.id for h in hits}
    assert index.sync() == 0  # nothing left; again changes nothing
    manager.update(scope, cof.id, "green tea latte", expected_revision=1, operation_id=op())
    manager.delete(scope, tea.id, operation_id=op())
    assert index.search(scope, "green tea", k=5)[0].record.id == cof.id  # deleted: at once
    index.sync()
    assert [h.record.id for h in index.search(scope, "green tea", k=5)] == [cof.id]
    assert index.rebuild() >= 1
    assert [(h.record.id, h.record.revision) for h in index.search(scope, "latte")] == [
        (cof.id, 2)]


def test_a_wrong_embedding_function_is_a_setup_error(manager: MemoryManager,
                                                     scope: MemoryScope) -> None:
    index = EmbeddingIndex(manager.store, lambda texts: [[1.0]] * len(texts), DIM)
    with pytest.raises(SetupError, match="32 floats"):
        index.search(scope, "x")
    with pytest.raises(SetupError):
        EmbeddingIndex(manager.store, embed, 0)


def test_pgvector_is_detected_never_required(manager: MemoryManager) -> None:
    index = EmbeddingIndex(manager.store, embed, DIM)
    assert isinstance(index.pgvector, bool)
    if manager.store.dialect == "sqlite":
        assert index.pgvector is False

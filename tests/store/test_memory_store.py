"""The memory tables at the SQL level: the full-text index follows every write in its
transaction, a scoped store finds only its owner's memory, a failed write leaves nothing."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from hypha_celery.errors import MemoryNotFound, NotPermitted
from hypha_celery.store import EventStore
from hypha_celery.store.memory import NewRecord, ParsedQuery, QueryTerm, ScopeIds


def query(*words: str) -> ParsedQuery:
    return ParsedQuery(tuple((QueryTerm((w,)),) for w in words))


def add(store: EventStore, scope: ScopeIds, body: str) -> str:
    record_id = uuid.uuid4().hex
    store.memory_add(NewRecord(record_id, scope, "semantic", body, (), None),
                     operation_id=uuid.uuid4().hex, digest="d", at=1.0)
    return record_id


def found(store: EventStore, scope: ScopeIds, *words: str) -> list[str]:
    return [r.record_id for r, _ in store.memory_search(scope, query(*words), limit=10,
                                                        memory_types=None)]


@pytest.fixture
def scope() -> ScopeIds:
    return ScopeIds(f"u-{uuid.uuid4().hex[:8]}")


def test_the_index_follows_updates_and_deletes(store: EventStore, scope: ScopeIds) -> None:
    r = add(store, scope, "alpha beta")
    assert found(store, scope, "alpha") == [r]
    store.memory_update(scope, r, "gamma", None, None, expected_revision=1,
                        operation_id=uuid.uuid4().hex, digest="d", at=2.0)
    assert found(store, scope, "alpha") == [] and found(store, scope, "gamma") == [r]
    store.memory_delete(scope, r, operation_id=uuid.uuid4().hex, digest="d", at=3.0)
    assert found(store, scope, "gamma") == []
    if store.dialect == "sqlite":  # the FTS5 index holds no token of the record any more
        with store.engine.connect() as conn:
            n = conn.execute(sa.text("SELECT count(*) FROM hypha_memory_fts WHERE "
                                     "hypha_memory_fts MATCH 'gamma OR alpha'")).scalar()
        assert n == 0


def test_punctuation_and_case_agree_on_both_backends(store: EventStore,
                                                     scope: ScopeIds) -> None:
    r = add(store, scope, "Mail me: ALICE@example.com, v1.5 (snake_case) e-mail")
    for word in ("alice", "example", "com", "v1", "5", "snake", "case", "mail", "e"):
        assert found(store, scope, word) == [r], word
    assert found(store, scope, "v") == [] and found(store, scope, "ali") == []


def test_a_scoped_store_has_only_its_owners_memory(store: EventStore,
                                                   scope: ScopeIds) -> None:
    r = add(store, scope, "private words")
    other = store.scoped(scope.user_id + "-x")
    with pytest.raises(MemoryNotFound):
        other.memory_get(scope, r)
    with pytest.raises(NotPermitted):
        other.memory_delete(scope, r, operation_id="o", digest="d", at=1.0)
    assert store.scoped(scope.user_id).memory_get(scope, r) is not None


def test_a_failed_write_leaves_nothing(store: EventStore, scope: ScopeIds) -> None:
    r = add(store, scope, "one")
    with pytest.raises(MemoryNotFound):
        store.memory_update(scope, "missing", "two", None, None, expected_revision=1,
                            operation_id="op-x", digest="d", at=2.0)
    with store.engine.connect() as conn:
        ops = conn.execute(sa.text("SELECT count(*) FROM hypha_memory_ops WHERE user_id = :u"),
                           {"u": scope.user_id}).scalar()
    assert ops == 1 and store.memory_get(scope, r) is not None

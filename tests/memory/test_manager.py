"""The contract of MemoryManager on SQLite and PostgreSQL: idempotent writes, optimistic
updates, history, deletion (gone at once), policy, scope, bounds, events."""

from __future__ import annotations

import json
import uuid

import pytest

from hypha_celery.errors import (
    GovernedMemoryError,
    MemoryConflict,
    MemoryNotFound,
    MemoryOperationConflict,
    MemoryRecordTooLarge,
    MemoryScopeRequired,
    MemoryWriteDenied,
)
from hypha_celery.memory import (
    MemoryLimits,
    MemoryManager,
    MemoryProvenance,
    MemoryScope,
    MemoryStatus,
    MemoryType,
    WriteDecision,
    WritePolicy,
    WriteRequest,
    WriteVerdict,
)
from hypha_celery.store import EventStore
from tests.memory.conftest import Recorder

SECRET = "the launch code is swordfish"


def op() -> str:
    return uuid.uuid4().hex


def test_add_get_and_the_committed_events(manager: MemoryManager, scope: MemoryScope,
                                          rec: Recorder) -> None:
    r = manager.add(scope, MemoryType.SEMANTIC, SECRET, operation_id="o1", tags=["x"],
                    provenance=MemoryProvenance(run_id="run-1"), emit=rec)
    assert (r.revision, r.status, r.text, r.tags) == (1, MemoryStatus.ACTIVE, SECRET, ("x",))
    assert manager.get(scope, r.id) == r
    assert rec.kinds == ["memory.write.requested", "memory.write.validated",
                         "memory.write.committed"]
    committed = rec.events[-1].dump()
    assert committed["record_id"] == r.id and committed["revision"] == 1
    assert rec.events[0].dump()["scope"] == scope.key


def test_the_same_operation_twice_writes_once(manager: MemoryManager, scope: MemoryScope,
                                              rec: Recorder) -> None:
    first = manager.add(scope, "episodic", "met Bob", operation_id="o1")
    again = manager.add(scope, "episodic", "met Bob", operation_id="o1", emit=rec)
    assert again.id == first.id and again.revision == 1
    assert rec.events[-1].dump()["reused"] is True
    assert len(manager.list(scope)) == 1


def test_an_operation_id_reused_for_another_write_is_refused(
        manager: MemoryManager, scope: MemoryScope, rec: Recorder) -> None:
    manager.add(scope, "episodic", "met Bob", operation_id="o1")
    with pytest.raises(MemoryOperationConflict):
        manager.add(scope, "episodic", "met Carol", operation_id="o1", emit=rec)
    assert rec.kinds[-1] == "memory.write.rejected"
    assert [r.text for r in manager.list(scope)] == ["met Bob"]


def test_operation_ids_are_per_user(manager: MemoryManager, scope: MemoryScope) -> None:
    mine = manager.add(scope, "semantic", "a", operation_id="same")
    other = manager.add(MemoryScope(f"{scope.user_id}-2"), "semantic", "b",
                        operation_id="same")
    assert mine.id != other.id


def test_optimistic_update_and_history(manager: MemoryManager, scope: MemoryScope) -> None:
    r = manager.add(scope, "preference", "likes tea", operation_id=op())
    u = manager.update(scope, r.id, "likes coffee", expected_revision=1, operation_id="u1")
    assert (u.revision, u.text, u.created_at) == (2, "likes coffee", r.created_at)
    with pytest.raises(MemoryConflict) as lost:
        manager.update(scope, r.id, "likes water", expected_revision=1, operation_id=op())
    assert lost.value.current == 2
    replay = manager.update(scope, r.id, "likes coffee", expected_revision=1,
                            operation_id="u1")
    assert replay.revision == 2
    assert [(h.revision, h.text) for h in manager.history(scope, r.id)] == [
        (1, "likes tea"), (2, "likes coffee")]
    assert [h.record.id for h in manager.search(scope, "coffee")] == [r.id]
    assert manager.search(scope, "tea") == []


def test_delete_is_gone_at_once_everywhere(manager: MemoryManager, scope: MemoryScope,
                                           rec: Recorder) -> None:
    keep = manager.add(scope, "semantic", "tea is green", operation_id=op())
    gone = manager.add(scope, "semantic", "tea is " + SECRET, operation_id=op())
    manager.update(scope, gone.id, "tea, " + SECRET, expected_revision=1, operation_id=op())
    revision = manager.delete(scope, gone.id, operation_id="d1", emit=rec)
    assert revision == 3
    assert rec.kinds == ["memory.delete.requested", "memory.delete.completed"]
    with pytest.raises(MemoryNotFound):
        manager.get(scope, gone.id)
    assert [h.record.id for h in manager.search(scope, "tea")] == [keep.id]
    assert [r.id for r in manager.list(scope)] == [keep.id]
    exported = list(manager.export(scope))
    assert [json.loads(line)["id"] for line in exported] == [keep.id]
    assert SECRET not in "".join(exported)
    history = manager.history(scope, gone.id)
    assert [(h.revision, h.status, h.text) for h in history] == [
        (1, MemoryStatus.ACTIVE, None), (2, MemoryStatus.ACTIVE, None),
        (3, MemoryStatus.DELETED, None)]
    assert manager.delete(scope, gone.id, operation_id="d1") == 3  # replayed
    with pytest.raises(MemoryNotFound):
        manager.delete(scope, gone.id, operation_id=op())
    with pytest.raises(MemoryNotFound):
        manager.update(scope, gone.id, "x", expected_revision=3, operation_id=op())


def test_the_deleted_body_is_erased_in_the_store(manager: MemoryManager, store: EventStore,
                                                 scope: MemoryScope) -> None:
    r = manager.add(scope, "semantic", SECRET, operation_id=op())
    manager.delete(scope, r.id, operation_id=op())
    import sqlalchemy as sa

    with store.engine.connect() as conn:
        bodies = conn.execute(sa.text(
            "SELECT body FROM hypha_memory WHERE record_id = :r UNION ALL "
            "SELECT body FROM hypha_memory_revisions WHERE record_id = :r"), {"r": r.id})
        assert [b for (b,) in bodies] == [None, None, None]


def test_a_scope_is_required(manager: MemoryManager, rec: Recorder) -> None:
    with pytest.raises(MemoryScopeRequired):
        MemoryScope("")
    with pytest.raises(MemoryScopeRequired):
        manager.add(None, "working", "x", operation_id="o", emit=rec)
    assert rec.kinds == ["memory.write.requested", "memory.write.rejected"]
    assert rec.events[-1].dump()["error"] == "MEMORY_SCOPE_REQUIRED"
    with pytest.raises(MemoryScopeRequired):
        manager.search(None, "x")
    with pytest.raises(MemoryScopeRequired):
        manager.get(None, "x")


def test_policy_deny_review_provenance_and_long_term(store: EventStore, scope: MemoryScope,
                                                     rec: Recorder) -> None:
    deny = MemoryManager(store, policy=WritePolicy(deny_types=frozenset({MemoryType.EPISODIC})))
    with pytest.raises(MemoryWriteDenied) as denied:
        deny.add(scope, "episodic", "x", operation_id=op(), emit=rec)
    assert not denied.value.review and rec.kinds[-1] == "memory.write.rejected"
    review = MemoryManager(store, policy=WritePolicy(
        review_types=frozenset({MemoryType.PREFERENCE})))
    with pytest.raises(MemoryWriteDenied) as held:
        review.add(scope, "preference", "x", operation_id=op(), emit=rec)
    assert held.value.review and rec.events[-1].dump()["review"] is True
    prov = MemoryManager(store, policy=WritePolicy(require_provenance=True))
    with pytest.raises(MemoryWriteDenied, match="provenance"):
        prov.add(scope, "semantic", "x", operation_id=op())
    prov.add(scope, "semantic", "x", operation_id=op(), provenance=MemoryProvenance(
        source="chat"))
    short = MemoryManager(store, policy=WritePolicy(allow_long_term=False))
    with pytest.raises(MemoryWriteDenied, match="working"):
        short.add(scope, "semantic", "x", operation_id=op())
    assert short.add(scope, "working", "x", operation_id=op()).memory_type == "working"

    def hook(request: WriteRequest) -> WriteDecision | None:
        assert request.text_bytes == 5
        return WriteDecision(WriteVerdict.REVIEW, "pii suspected")

    hooked = MemoryManager(store, policy=WritePolicy(hook=hook))
    with pytest.raises(MemoryWriteDenied, match="pii suspected") as by_hook:
        hooked.add(scope, "semantic", "hello", operation_id=op())
    assert by_hook.value.review
    assert len(deny.list(scope)) == 2  # nothing of the refused writes


def test_policy_order_deny_before_review(store: EventStore, scope: MemoryScope) -> None:
    both = frozenset({MemoryType.SEMANTIC})
    m = MemoryManager(store, policy=WritePolicy(deny_types=both, review_types=both,
                                                require_provenance=True))
    with pytest.raises(MemoryWriteDenied) as exc:
        m.add(scope, "semantic", "x", operation_id=op())
    assert not exc.value.review


def test_bounds(store: EventStore, scope: MemoryScope, rec: Recorder) -> None:
    m = MemoryManager(store, limits=MemoryLimits(max_record_bytes=10, max_tags=1))
    with pytest.raises(MemoryRecordTooLarge) as big:
        m.add(scope, "semantic", "é" * 6, operation_id=op(), emit=rec)
    assert big.value.size == 12 and "MemoryLimits.max_record_bytes" in str(big.value)
    assert rec.kinds[-1] == "memory.write.rejected"
    with pytest.raises(GovernedMemoryError, match="max_tags"):
        m.add(scope, "semantic", "x", operation_id=op(), tags=["a", "b"])
    with pytest.raises(GovernedMemoryError, match="operation_id"):
        m.add(scope, "semantic", "x", operation_id="")
    with pytest.raises(GovernedMemoryError, match="unknown memory type"):
        m.add(scope, "gossip", "x", operation_id=op())
    with pytest.raises(GovernedMemoryError, match="non-empty"):
        m.add(scope, "semantic", "  ", operation_id=op())
    assert m.list(scope) == []


def test_another_users_record_does_not_exist(manager: MemoryManager,
                                             scope: MemoryScope) -> None:
    r = manager.add(scope, "semantic", "tea secret", operation_id=op())
    other = MemoryScope(scope.user_id + "-other")
    for call in (lambda: manager.get(other, r.id), lambda: manager.history(other, r.id),
                 lambda: manager.update(other, r.id, "x", expected_revision=1,
                                        operation_id=op()),
                 lambda: manager.delete(other, r.id, operation_id=op())):
        with pytest.raises(MemoryNotFound) as exc:
            call()
        assert "other" not in str(exc.value)
    with pytest.raises(MemoryNotFound) as missing:
        manager.get(other, "no-such-id")
    assert str(missing.value).replace("no-such-id", r.id) == str(
        pytest.raises(MemoryNotFound, manager.get, other, r.id).value)
    assert manager.search(other, "tea") == [] and manager.list(other) == []
    assert manager.get(scope, r.id).revision == 1


def test_narrower_scopes(manager: MemoryManager, user: str) -> None:
    wide = manager.add(MemoryScope(user), "semantic", "tea wide", operation_id=op())
    s1 = manager.add(MemoryScope(user, session_id="s1"), "episodic", "tea s1",
                     operation_id=op())
    s2 = manager.add(MemoryScope(user, session_id="s2"), "episodic", "tea s2",
                     operation_id=op())
    seen = {h.record.id for h in manager.search(MemoryScope(user, session_id="s1"), "tea")}
    assert seen == {wide.id, s1.id}
    assert {r.id for r in manager.list(MemoryScope(user))} == {wide.id}
    with pytest.raises(MemoryNotFound):
        manager.get(MemoryScope(user, session_id="s1"), s2.id)
    assert manager.get(MemoryScope(user, session_id="s2", agent_id="a"), s2.id).id == s2.id


def test_search_filters_ranks_and_bounds(manager: MemoryManager, scope: MemoryScope) -> None:
    a = manager.add(scope, "semantic", "green tea green tea green tea", operation_id=op())
    b = manager.add(scope, "procedural", "brew tea for three minutes", operation_id=op())
    manager.add(scope, "semantic", "coffee only", operation_id=op())
    assert [h.record.id for h in manager.search(scope, "tea")] == [a.id, b.id]
    assert [h.record.id for h in manager.search(scope, "tea", memory_types=["procedural"])
            ] == [b.id]
    assert [h.record.id for h in manager.search(scope, "tea -green")] == [b.id]
    assert [h.record.id for h in manager.search(scope, '"three minutes" OR coffee')
            ] != []
    assert len(manager.search(scope, "tea", limit=1)) == 1
    assert len(manager.search(scope, "tea", limit=10_000)) == 2


def test_list_pages(manager: MemoryManager, scope: MemoryScope) -> None:
    ids = [manager.add(scope, "working", f"note {i}", operation_id=op()).id for i in range(5)]
    first = manager.list(scope, limit=2)
    second = manager.list(scope, limit=2, after=first[-1].id)
    rest = manager.list(scope, limit=2, after=second[-1].id)
    assert [r.id for r in first + second + rest] == ids
    assert [r.id for r in manager.list(scope, memory_type="semantic")] == []


def test_read_events_carry_references_only(manager: MemoryManager, scope: MemoryScope,
                                           rec: Recorder) -> None:
    r = manager.add(scope, "semantic", SECRET, operation_id=op(), emit=rec)
    manager.update(scope, r.id, SECRET + " again", expected_revision=1, operation_id=op(),
                   emit=rec)
    hits = manager.search(scope, "swordfish launch", operation_id="read-1", emit=rec)
    with pytest.raises(GovernedMemoryError):
        manager.search(scope, '"swordfish', emit=rec)
    manager.delete(scope, r.id, operation_id=op(), emit=rec)
    assert [h.record.id for h in hits] == [r.id]
    read = [e.dump() for e in rec.events if e.kind.startswith("memory.read.")]
    assert read[0]["operation_id"] == "read-1" and len(read[0]["query_hash"]) == 64
    assert read[1]["records"] == [{"id": r.id, "revision": 2}]
    assert rec.kinds[-3:] == ["memory.read.failed", "memory.delete.requested",
                              "memory.delete.completed"]
    text = rec.text()
    for word in ("swordfish", "launch", "again"):
        assert word not in text

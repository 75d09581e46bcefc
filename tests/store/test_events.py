"""``EventStore.append``: one event, its own transaction (one statement on PostgreSQL)."""

from __future__ import annotations

import threading

import pytest

from hypha_celery.errors import (
    NotTheLifecycleWriter,
    RunNotFound,
    StoreConflict,
    UnknownEventKind,
)
from hypha_celery.events import fold
from hypha_celery.store import EventStore
from tests.store.test_tx import new_run, started


def test_a_passive_event_moves_only_seq_and_updated_at(store: EventStore) -> None:
    run_id = new_run(store)
    before = store.get(run_id)
    seq = store.append(run_id, "tool.call.completed", {"call_id": "c1", "output": {"n": 1}},
                       ts=before["updated_at"] + 5)
    after = store.get(run_id)
    assert seq == before["seq"] + 1 == after["seq"]
    assert after["updated_at"] == before["updated_at"] + 5
    assert {k: v for k, v in after.items() if k not in ("seq", "updated_at")} == {
        k: v for k, v in before.items() if k not in ("seq", "updated_at")}
    last = store.events(run_id)[-1]
    assert (last.seq, last.type, last.payload) == (seq, "tool.call.completed",
                                                   {"call_id": "c1", "output": {"n": 1}})


def test_an_event_that_changes_the_projection_is_folded(store: EventStore) -> None:
    run_id = new_run(store)
    store.append(run_id, "node.execution.scheduled",
                 {"execution_id": f"{run_id}.1", "node_id": "n", "step": 1, "input": {}})
    view = store.get(run_id)
    assert view["waiting"] == f"{run_id}.1"
    rebuilt = fold(run_id, store.history(run_id))
    rebuilt["seq"] = view["seq"]
    assert rebuilt == view


def test_appends_interleave_with_locked_transactions_without_gaps(store: EventStore) -> None:
    run_id = new_run(store)
    errors: list[BaseException] = []

    def plain() -> None:
        try:
            for i in range(40):
                store.append(run_id, "message.enqueued", {"message_id": f"m{i}"})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def locked() -> None:
        try:
            for i in range(40):
                with store.transaction() as tx:
                    tx.lock(run_id)
                    tx.append(run_id, "node.execution.started", started(f"{run_id}.x{i}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=plain), threading.Thread(target=plain),
               threading.Thread(target=locked)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    seqs = [e.seq for e in store.events(run_id)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len(seqs) == 2 + 120 == store.get(run_id)["seq"]


def test_bad_appends_are_typed_and_write_nothing(store: EventStore) -> None:
    run_id = new_run(store)
    seq = store.get(run_id)["seq"]
    with pytest.raises(NotTheLifecycleWriter):
        store.append(run_id, "run.completed", {"result": 1})
    with pytest.raises(UnknownEventKind, match="tool.call.exploded"):
        store.append(run_id, "tool.call.exploded", {})
    with pytest.raises(RunNotFound):
        store.append("no-such-run", "tool.call.completed", {"call_id": "c"})
    store.append(run_id, "tool.call.completed", {"call_id": "c"}, idem="once")
    with pytest.raises(StoreConflict):
        store.append(run_id, "tool.call.completed", {"call_id": "c"}, idem="once")
    assert store.get(run_id)["seq"] == seq + 1 == len(store.events(run_id))
    # the connection the conflict happened on is usable again
    assert store.append(run_id, "tool.call.completed", {"call_id": "d"}) == seq + 2

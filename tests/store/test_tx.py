"""Per-run sequence, idempotency keys and the DB-level constraints behind them."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from hypha_celery.errors import StoreConflict
from hypha_celery.events import new_view
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore
from hypha_celery.store.schema import events, runs


def new_run(store: EventStore) -> str:
    run_id = uuid.uuid4().hex
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        lifecycle.record(tx, run_id, "run.created",
                         {"graph_id": "g", "input": {"q": 1}, "lane": None})
        lifecycle.record(tx, run_id, "run.started", {"execution_id": f"{run_id}.0"})
    return run_id


def started(execution_id: str) -> dict[str, Any]:
    return {"execution_id": execution_id, "node_id": "n", "attempt": 1, "worker": "test"}


def test_concurrent_writers_get_gap_free_unique_seqs(store: EventStore) -> None:
    run_id = new_run(store)
    per_writer, errors = 60, []
    barrier = threading.Barrier(2)

    def writer(name: str) -> None:
        try:
            barrier.wait()
            for i in range(per_writer):
                with store.transaction() as tx:
                    assert tx.lock(run_id) is not None
                    tx.append(run_id, "node.execution.started", started(f"{name}.{i}"))
                    if i % 3 == 0:  # several events in one transaction, too
                        tx.append(run_id, "node.execution.started", started(f"{name}.{i}b"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    evs = store.events(run_id)
    written = 2 + 2 * (per_writer + len(range(0, per_writer, 3)))
    assert [e.seq for e in evs] == list(range(1, written + 1))
    # each writer's own events keep their order
    for name in ("w1", "w2"):
        mine = [e.data["execution_id"] for e in evs if e.data.get("execution_id", "")
                .startswith(name)]
        assert mine == [x for i in range(per_writer)
                        for x in ([f"{name}.{i}"] + ([f"{name}.{i}b"] if i % 3 == 0 else []))]
    assert store.get(run_id)["seq"] == written


def test_duplicate_run_seq_rejected_by_the_database(store: EventStore) -> None:
    run_id = new_run(store)
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(events.insert().values(run_id=run_id, seq=1, kind="run.queued", ts=0.0,
                                            data={}, idem=None))
    assert [e.seq for e in store.events(run_id)] == [1, 2]


def test_duplicate_idem_rejected_by_the_database(store: EventStore) -> None:
    run_id, other = new_run(store), new_run(store)
    with store.transaction() as tx:
        tx.lock(run_id)
        tx.append(run_id, "node.execution.started", started("x"), idem=f"{run_id}:k")
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(events.insert().values(run_id=other, seq=99, kind="run.queued", ts=0.0,
                                            data={}, idem=f"{run_id}:k"))
    # NULL keys are not unique
    with store.engine.begin() as conn:
        conn.execute(events.insert().values(run_id=other, seq=3, kind="run.queued", ts=0.0,
                                            data={}, idem=None))


def test_duplicate_run_id_and_idempotency_key_rejected(store: EventStore) -> None:
    run_id = new_run(store)
    row = {"graph_id": "g", "status": "queued", "seq": 0, "created_at": 0.0, "updated_at": 0.0,
           "doc": {}}
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(runs.insert().values(run_id=run_id, **row))
    key = uuid.uuid4().hex
    with store.engine.begin() as conn:
        conn.execute(runs.insert().values(run_id=uuid.uuid4().hex, idempotency_key=key, **row))
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(runs.insert().values(run_id=uuid.uuid4().hex, idempotency_key=key, **row))


def test_idempotency_key_second_append_conflicts_and_rolls_back(store: EventStore) -> None:
    run_id = new_run(store)
    idem = f"{run_id}.1:done"
    first = {"execution_id": f"{run_id}.1", "node_id": "n", "update": {"a": 1}}
    with store.transaction() as tx:
        tx.lock(run_id)
        tx.append(run_id, "node.execution.completed", first, idem=idem)
    before = store.get(run_id)
    called: list[bool] = []
    with pytest.raises(StoreConflict), store.transaction() as tx:
        tx.lock(run_id)
        tx.append(run_id, "node.execution.started", started("y"))  # rolled back with the duplicate
        tx.append(run_id, "node.execution.completed", {**first, "update": {"a": 2}}, idem=idem)
        tx.after_commit(lambda: called.append(True))
    assert called == []
    evs = store.events(run_id)
    assert [e.kind for e in evs] == ["run.created", "run.started", "node.execution.completed"]
    assert evs[-1].data["update"] == {"a": 1}
    assert store.get(run_id) == before == store.rebuild(run_id)
    assert before["state"] == {"a": 1}
    with store.transaction() as tx:
        assert tx.event_data(idem) == first
        assert tx.event_data("nobody:done") is None


@pytest.mark.parametrize("count", [3, 64, 500], ids=["pipelined", "copy-edge", "copy"])
def test_a_large_commit_writes_every_event_as_given(store: EventStore, count: int) -> None:
    """From 64 events a PostgreSQL commit sends them by COPY: same rows, same text."""
    run_id = new_run(store)
    datas = [{"call_id": f"c{i}", "tool": "t", "output": {"s": "é\u2028\"x", "n": i / 3,
                                                         "l": [None, True, i]}}
             for i in range(count)]
    with store.transaction() as tx:
        tx.lock(run_id)
        for i, data in enumerate(datas):
            tx.append(run_id, "tool.call.completed", data, idem=f"{run_id}:{i}")
    evs = store.events(run_id)[2:]
    assert [e.data for e in evs] == datas
    assert [e.seq for e in evs] == list(range(3, count + 3))
    assert [e.idempotency_key for e in evs] == [f"{run_id}:{i}" for i in range(count)]
    assert store.get(run_id) == store.rebuild(run_id)


@pytest.mark.parametrize("count", [3, 200], ids=["pipelined", "copy"])
def test_a_taken_key_in_a_large_commit_conflicts_and_writes_nothing(store: EventStore,
                                                                     count: int) -> None:
    run_id = new_run(store)
    before = store.get(run_id)
    with pytest.raises(StoreConflict), store.transaction() as tx:
        tx.lock(run_id)
        for i in range(count):
            tx.append(run_id, "tool.call.completed", {"call_id": f"c{i}"},
                      idem=f"{run_id}:{i % (count - 1)}")
    assert len(store.events(run_id)) == 2
    assert store.get(run_id) == before


def test_after_commit_runs_only_after_commit(store: EventStore) -> None:
    run_id = new_run(store)
    seen: list[int] = []
    with store.transaction() as tx:
        tx.lock(run_id)
        tx.append(run_id, "node.execution.started", started("z"))
        tx.after_commit(lambda: seen.append(len(store.events(run_id))))
        assert seen == []
    assert seen == [3]


def test_before_commit_runs_with_the_writes_sent_and_the_lock_held(pg_url: str) -> None:
    store = EventStore(pg_url)
    store.migrate()
    try:
        run_id = new_run(store)
        seen: list[str] = []

        def check() -> None:  # another connection: the row still locked, nothing visible
            with store.engine.connect() as other:
                other.exec_driver_sql("SET lock_timeout = '50ms'")
                with pytest.raises(sa.exc.OperationalError):
                    other.exec_driver_sql(
                        "SELECT 1 FROM hypha_runs WHERE run_id = %s FOR UPDATE", (run_id,))
            seen.append("locked")

        with store.transaction() as tx:
            tx.lock(run_id)
            tx.append(run_id, "node.execution.started", started("b"))
            tx.before_commit(check)
            tx.after_commit(lambda: seen.append("committed"))
            tx.before_commit(lambda: seen.append(f"{tx._rows[-1]['seq']} sent"))
        assert seen == ["locked", "3 sent", "committed"]
        assert len(store.events(run_id)) == 3
    finally:
        store.dispose()


def test_before_commit_that_raises_rolls_back(store: EventStore) -> None:
    run_id = new_run(store)
    after: list[int] = []

    def refuse() -> None:
        raise RuntimeError("the message could not be sent")

    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.lock(run_id)
        tx.append(run_id, "node.execution.started", started("c"))
        tx.before_commit(refuse)
        tx.after_commit(lambda: after.append(1))
    assert after == []
    assert len(store.events(run_id)) == 2

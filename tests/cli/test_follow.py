"""``events --follow`` yields events as they land and stops at the terminal one."""

from __future__ import annotations

from pathlib import Path

from hypha_celery.cli.follow import follow
from hypha_celery.events import new_view
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore, Tx


def append(tx: Tx, run_id: str, kind: str, data: dict[str, object]) -> None:
    if kind.startswith("run."):
        lifecycle.record(tx, run_id, kind, data)
    else:
        tx.append(run_id, kind, data)


def test_follow_yields_new_events_and_stops_after_the_terminal_one(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'f.db'}")
    with store.transaction() as tx:
        tx.create(new_view("r"))
        lifecycle.record(tx, "r", "run.created", {"graph_id": "g"})
    pending = [("run.started", {"execution_id": "r.0"}), ("run.cancel.requested", {}),
               ("run.cancelled", {"reason": "cancelled"}), ("node.execution.late_result", {})]
    polls: list[float] = []

    def sleep(seconds: float) -> None:  # each idle poll, one more event is recorded
        polls.append(seconds)
        kind, data = pending.pop(0)
        with store.transaction() as tx:
            tx.lock("r")
            append(tx, "r", kind, data)

    try:
        seen = [e.kind for e in follow(store, "r", poll=0.01, sleep=sleep)]
        assert seen == ["run.created", "run.started", "run.cancel.requested", "run.cancelled"]
        assert polls == [0.01, 0.01, 0.01]
    finally:
        store.dispose()


def test_follow_gives_up_after_its_timeout(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'f.db'}")
    with store.transaction() as tx:
        tx.create(new_view("r"))
        lifecycle.record(tx, "r", "run.created", {"graph_id": "g"})
    try:
        assert [e.seq for e in follow(store, "r", poll=0.01, timeout=0.05)] == [1]
    finally:
        store.dispose()

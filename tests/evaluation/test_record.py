"""The recorder: evaluation's events only (the canonical-writer rule), passive, locked."""

from __future__ import annotations

import threading

import pytest

from hypha_celery.errors import NotRecordable, RunNotFound
from hypha_celery.evaluation import record
from tests.replay.support import app, finished, linear_graph


@pytest.mark.parametrize("type_", ["run.completed", "run.failed", "node.execution.completed",
                                   "node.execution.scheduled", "decision.policy.recorded",
                                   "recovery.run.redriven", "agent.turn.completed"])
def test_the_runtime_is_the_only_writer_of_the_run_lifecycle(sqlite_url: str,
                                                             type_: str) -> None:
    with app(sqlite_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        before = hypha.store.events(run_id)
        with pytest.raises(NotRecordable, match="written by the runtime only"):
            record(hypha.store, run_id, type_, {"result": "forged"})
        assert hypha.store.events(run_id) == before


def test_unknown_types_and_runs(sqlite_url: str) -> None:
    with app(sqlite_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        with pytest.raises(NotRecordable, match="unknown event type 'eval.done'"):
            record(hypha.store, run_id, "eval.done", {})
        with pytest.raises(RunNotFound):
            record(hypha.store, "no-such-run", "eval.started", {})


def test_recorded_events_are_passive(store_url: str) -> None:
    with app(store_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        before = hypha.store.load(run_id)
        event = record(hypha.store, run_id, "eval.completed", {"summary": {"status": "passed"}})
        after = hypha.store.load(run_id)
        stored = hypha.store.events(run_id)[-1]
        rebuilt = hypha.store.rebuild(run_id)
    assert before is not None and after is not None
    assert event.id == f"{run_id}:{before['seq'] + 1}" == stored.id
    assert (stored.type, stored.payload) == ("eval.completed", {"summary": {"status": "passed"}})
    assert after["status"] == "completed" and after["result"] == before["result"]
    assert after["state"] == before["state"] and after["seq"] == before["seq"] + 1
    assert rebuilt["result"] == before["result"]


def test_concurrent_recorders_keep_the_log_gap_free(store_url: str) -> None:
    with app(store_url, linear_graph()) as hypha:
        run_id = finished(hypha, "linear")
        first = hypha.store.load(run_id)
        assert first is not None
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(5):
                    record(hypha.store, run_id, "eval.started", {})
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seqs = [e.seq for e in hypha.store.events(run_id)]
    assert errors == []
    assert seqs == list(range(1, first["seq"] + 31))

"""JSONL export / import against the store, on SQLite and PostgreSQL: lossless,
idempotent per event id, one transaction, refusals that name the event, filters."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from hypha_celery.errors import (
    EmptyImport,
    ImportConflict,
    IncompleteRun,
    RunNotFound,
    UnknownEventKind,
)
from hypha_celery.events import Event
from hypha_celery.events.fold import fold, new_view
from hypha_celery.exchange import export_jsonl, import_parsed, parse_jsonl, write_jsonl
from hypha_celery.runtime import lifecycle
from hypha_celery.store import EventStore
from tests.conftest import migrated


def make_run(store: EventStore, *, steps: int = 2, user: str | None = "u",
             session: str | None = "s", key: str | None = None, ts: float | None = None,
             ) -> str:
    """A finished run written through the Tx API: created, started, ``steps`` node steps
    (with a model call and the ``:done`` idempotency keys), completed."""
    run_id = uuid.uuid4().hex
    t = time.time() if ts is None else ts
    created = {"graph_id": "g", "input": {"q": "é ✓"}, "user_id": user, "session_id": session,
               "lane": f"{user}:{session}" if user else None, "deadline": None,
               "max_steps": 10, "notify": None, "idempotency_key": key}
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        lifecycle.record(tx, run_id, "run.created", created, ts=t)
        lifecycle.record(tx, run_id, "run.started", {"execution_id": f"{run_id}.0"}, ts=t)
    for step in range(1, steps + 1):
        eid = f"{run_id}.{step}"
        with store.transaction() as tx:
            tx.lock(run_id)
            tx.append(run_id, "decision.policy.recorded",
                      {"step": step - 1, "type": "next", "node_id": "n"}, ts=t + step)
            tx.append(run_id, "node.execution.scheduled",
                      {"execution_id": eid, "node_id": "n", "step": step, "input": None},
                      ts=t + step)
            tx.append(run_id, "model.call.completed",
                      {"execution_id": eid, "call_id": f"{eid}.c", "output": {"x": 0.1}},
                      ts=t + step + 0.25)
            tx.append(run_id, "node.execution.completed",
                      {"execution_id": eid, "node_id": "n", "duration": 0.5,
                       "update": {f"k{step}": [1, 2.5, None, "ü"]}},
                      idem=f"{eid}:done", ts=t + step + 0.5)
    with store.transaction() as tx:
        tx.lock(run_id)
        tx.append(run_id, "decision.policy.recorded", {"step": steps, "type": "finish"},
                  ts=t + steps + 1)
        lifecycle.record(tx, run_id, "run.completed", {"result": {"ok": True}},
                         idem=f"{run_id}:terminal", ts=t + steps + 1)
    return run_id


def jsonl(evs: list[Event]) -> str:
    out = io.StringIO()
    write_jsonl(evs, out)
    return out.getvalue()


def export_text(store: EventStore, run_ids: list[str] | None = None, **kw: Any) -> str:
    out = io.StringIO()
    export_jsonl(store, out, run_ids, **kw)
    return out.getvalue()


def import_text(store: EventStore, text: str, source: str = "x.jsonl") -> Any:
    return import_parsed(store, parse_jsonl(text.splitlines(keepends=True), source))


def count_events(store: EventStore) -> int:
    with store.reader.connect() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM hypha_events").scalar_one())


@pytest.fixture
def fresh(fresh_url: str) -> Iterator[EventStore]:
    """An empty, migrated store of the same backend."""
    yield from migrated(fresh_url)


def test_round_trip_is_lossless(store: EventStore, fresh: EventStore) -> None:
    ids = [make_run(store, key=f"key-{uuid.uuid4().hex}"), make_run(store, steps=3, user=None,
                                                                     session=None)]
    text = export_text(store, ids)
    lines = text.splitlines()
    assert len(lines) == sum(len(store.events(r)) for r in ids)
    assert [Event.model_validate_json(line) for line in lines] == [
        e.sealed() for r in ids for e in store.events(r)]

    done = import_text(fresh, text)
    assert (done.runs, done.events, done.present) == (2, len(lines), 0)
    assert export_text(fresh) == text  # export -> import -> export: the same lines
    for run_id in ids:
        assert fresh.events(run_id) == store.events(run_id)  # idempotency keys included
        assert fresh.get(run_id) == store.get(run_id)
        assert fresh.get(run_id) == fresh.rebuild(run_id)
    assert any(e.idempotency_key for e in fresh.events(ids[0]))
    # the start key stays in the projection, but is not claimed in this store's column
    key = store.get(ids[0])["idempotency_key"]
    assert store.find_idempotent(key) == ids[0]
    assert fresh.find_idempotent(key) is None
    assert fresh.get(ids[0])["idempotency_key"] == key


def test_import_twice_adds_nothing_and_says_so(store: EventStore, fresh: EventStore) -> None:
    ids = [make_run(store), make_run(store)]
    text = export_text(store, ids)
    first = import_text(fresh, text)
    before = {r: (fresh.events(r), fresh.get(r)) for r in ids}
    again = import_text(fresh, text)
    assert (again.runs, again.events, again.present) == (0, 0, first.events)
    assert {r: (fresh.events(r), fresh.get(r)) for r in ids} == before
    assert import_text(store, text).present == first.events  # into its own source too


def test_import_is_idempotent_per_event_not_per_run(store: EventStore, fresh: EventStore,
                                                    ) -> None:
    run_id = make_run(store, steps=3)
    evs = store.events(run_id)
    import_text(fresh, jsonl(evs[:5]))  # an earlier export: the run's first 5 events
    assert len(fresh.events(run_id)) == 5
    done = import_text(fresh, jsonl(evs))
    assert (done.runs, done.events, done.present) == (1, len(evs) - 5, 5)
    assert fresh.events(run_id) == evs
    assert fresh.get(run_id) == store.get(run_id)
    # a store that is ahead of the file: everything in the file is present
    assert import_text(fresh, jsonl(evs[:7])).present == 7


def test_a_different_event_under_the_same_id_is_a_conflict(store: EventStore,
                                                           fresh: EventStore) -> None:
    run_id = make_run(store)
    evs = store.events(run_id)
    other = make_run(store)
    import_text(fresh, jsonl(evs))
    changed = [e.model_copy(update={"payload": {**e.payload, "duration": 9.0}})
               if e.seq == 6 else e for e in evs]
    text = jsonl(store.events(other)) + jsonl(changed)  # the other run comes first
    with pytest.raises(ImportConflict, match=rf"x.jsonl:\d+: event {run_id}:6 differs from "
                                             r"the one the store has .*\(payload\)") as info:
        import_text(fresh, text)
    assert info.value.event_id == f"{run_id}:6"
    assert fresh.load(other) is None  # nothing was imported
    assert fresh.events(run_id) == evs


def test_an_idempotency_key_held_by_another_event_is_a_conflict(store: EventStore,
                                                                fresh: EventStore) -> None:
    a, b = make_run(store), make_run(store)
    import_text(fresh, export_text(store, [a]))
    stolen = [e.model_copy(update={"idempotency_key": f"{a}.1:done"})
              if e.idempotency_key == f"{b}.1:done" else e for e in store.events(b)]
    with pytest.raises(ImportConflict, match=rf"event {b}:\d+ has the idempotency key "
                                             rf"'{a}.1:done' of event {a}:6 in the store"):
        import_text(fresh, jsonl(stolen))
    assert fresh.load(b) is None
    twice = [e.model_copy(update={"idempotency_key": "same"}) if e.seq in (6, 10) else e
             for e in store.events(b)]
    with pytest.raises(ImportConflict, match=rf"event {b}:10 has the idempotency key "
                                             rf"'same' of event {b}:6"):
        import_text(fresh, jsonl(twice))


def _fail_inserts_of(store: EventStore, run_id: str) -> None:
    """A trigger that makes inserting any event of ``run_id`` fail inside the database."""
    with store.engine.begin() as conn:
        if store.dialect == "sqlite":
            conn.exec_driver_sql(
                "CREATE TRIGGER fail_import BEFORE INSERT ON hypha_events "
                f"WHEN NEW.run_id = '{run_id}' BEGIN SELECT RAISE(ABORT, 'injected'); END")
            return
        conn.exec_driver_sql(
            "CREATE FUNCTION fail_import() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.run_id = '{run_id}' THEN RAISE EXCEPTION 'injected'; END IF; "
            "RETURN NEW; END $$")
        conn.exec_driver_sql("CREATE TRIGGER fail_import BEFORE INSERT ON hypha_events "
                             "FOR EACH ROW EXECUTE FUNCTION fail_import()")


def test_import_is_one_transaction(store: EventStore, fresh: EventStore) -> None:
    ids = [make_run(store) for _ in range(3)]
    old = make_run(store)
    evs = store.events(old)
    import_text(fresh, jsonl(evs[:4]))  # a run the import would extend
    _fail_inserts_of(fresh, ids[-1])  # the last run of the file fails in the database
    text = jsonl(evs) + export_text(store, ids)
    with pytest.raises((ImportConflict, sa.exc.DBAPIError), match="injected"):
        import_text(fresh, text)
    assert all(fresh.load(r) is None for r in ids)
    assert fresh.events(old) == evs[:4]
    assert fresh.get(old)["seq"] == 4
    assert count_events(fresh) == 4


def test_bad_runs_are_refused_before_anything_is_written(store: EventStore,
                                                         fresh: EventStore) -> None:
    good, gappy = make_run(store), make_run(store)
    evs = store.events(gappy)
    text = export_text(store, [good]) + jsonl([e for e in evs if e.seq != 3])
    with pytest.raises(IncompleteRun, match=rf"x.jsonl:\d+: run {gappy} has no event seq 3"):
        import_text(fresh, text)
    with pytest.raises(IncompleteRun, match=rf"^run {gappy} has no event seq 2, the next is "
                                            rf"{gappy}:3"):
        fresh.import_events([e for e in evs if e.seq != 2])  # the store checks it too
    with pytest.raises(EmptyImport, match="no events"):
        fresh.import_events([])
    assert fresh.load(good) is None and count_events(fresh) == 0


def test_a_type_outside_the_taxonomy_is_refused_in_a_checked_run(store: EventStore,
                                                                  fresh: EventStore) -> None:
    """The caller's ``checked`` runs skip :func:`check_run`, not the kind check."""
    run_id = make_run(store)
    evs = store.events(run_id)
    odd = Event.model_construct(**{**evs[2].__dict__, "type": "tool.call.exploded"})
    with pytest.raises(UnknownEventKind, match="tool.call.exploded"):
        fresh.import_events([*evs[:2], odd, *evs[3:]], checked={run_id: store.get(run_id)})
    assert fresh.load(run_id) is None and count_events(fresh) == 0


def test_export_filters(fresh: EventStore) -> None:
    now = time.time()
    old = make_run(fresh, user="u", session="s1", ts=now - 3600)
    mine = make_run(fresh, user="u", session="s1", ts=now)
    theirs = make_run(fresh, user="v", session="s1", ts=now)

    def runs_of(text: str) -> list[str]:
        return list(dict.fromkeys(Event.model_validate_json(line).run_id
                                  for line in text.splitlines()))

    assert runs_of(export_text(fresh)) == [old, mine, theirs]  # oldest first
    assert runs_of(export_text(fresh, [theirs, old])) == [theirs, old]
    assert runs_of(export_text(fresh, session=("u", "s1"))) == [old, mine]
    assert runs_of(export_text(fresh, since=now - 60)) == [mine, theirs]
    # activity: the run's last event (run.completed at now - 3600 + 3)
    assert runs_of(export_text(fresh, since=now - 3600 + 3)) == [old, mine, theirs]
    assert runs_of(export_text(fresh, session=("u", "s1"), since=now - 60)) == [mine]
    assert export_text(fresh, session=("nobody", "s1")) == ""
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        export_text(fresh, [mine, "nope"])


def test_history_folds_to_the_projection(store: EventStore) -> None:
    run_id = make_run(store, steps=5)
    view = fold(run_id, store.history(run_id, batch=7))  # several batches
    view["seq"] = store.get(run_id)["seq"]
    assert view == store.get(run_id)
    assert [k for k, _, _ in store.history(run_id)] == [e.kind for e in store.events(run_id)]
    assert list(store.history("no-such-run")) == []


def test_lines_in_any_order_import_the_same(store: EventStore, fresh: EventStore) -> None:
    ids = [make_run(store), make_run(store, steps=1)]
    text = export_text(store, ids)
    shuffled = "".join(reversed(text.splitlines(keepends=True)))
    done = import_text(fresh, shuffled)
    assert (done.runs, done.events) == (2, len(text.splitlines()))
    assert export_text(fresh, ids) == text
    assert all(fresh.get(r) == store.get(r) for r in ids)


def test_a_lone_surrogate_in_a_payload_exports_and_imports(sqlite_url: str,
                                                          tmp_path: Any) -> None:
    """Node output is checked with Python's JSON encoder, which lets a lone surrogate
    through as ``\\ud800``; the canonical JSON of an export is ASCII, so it still
    encodes, checksums and round-trips."""
    store = EventStore(sqlite_url)
    fresh = EventStore(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        run_id = make_run(store, steps=1)
        with store.transaction() as tx:
            tx.lock(run_id)
            tx.append(run_id, "eval.completed", {"note": "half \ud800 a pair", "ok": "é"})
        text = export_text(store, [run_id])
        assert text.isascii()
        assert import_text(fresh, text).events == len(store.events(run_id))
        assert fresh.events(run_id) == store.events(run_id)
    finally:
        store.dispose()
        fresh.dispose()

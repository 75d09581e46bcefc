"""``session_view``: the runs of one (user, session) in order, counts, activity, and
``active`` / ``idle``; ``stored_session`` reads them from a store of either backend."""

from __future__ import annotations

import uuid

from hypha_celery.events import Event, new_view
from hypha_celery.projections import (
    SessionRun,
    SessionView,
    StatusCounts,
    runs_of_session,
    session_view,
    stored_session,
)
from hypha_celery.store import EventStore
from tests.projections.support import Step, append, created, events, started

DONE: Step = ("run.completed", {"result": 1})


def run(run_id: str, steps: list[Step], t0: float, user: str = "u", session: str = "s"
        ) -> list[Event]:
    return events([created(user_id=user, session_id=session), *steps], run_id=run_id, t0=t0)


def test_runs_in_order_with_counts_and_activity() -> None:
    evs = [
        *run("b", [started()], t0=200.0),  # given first, created later
        *run("a", [started(), DONE], t0=100.0),
        *run("c", [("run.queued", {"behind": "b"})], t0=201.0),
        *run("x", [started()], t0=50.0, user="other"),  # same session id, another user
        *run("y", [started()], t0=60.0, session="other"),
    ]
    view = session_view(evs, "u", "s")
    assert view == SessionView(
        user_id="u", session_id="s", status="active",
        runs=(SessionRun(run_id="a", graph_id="g", status="completed", created_at=100.0,
                         ended_at=101.0),
              SessionRun(run_id="b", graph_id="g", status="running", created_at=200.0),
              SessionRun(run_id="c", graph_id="g", status="queued", created_at=201.0)),
        counts=StatusCounts(completed=1, running=1, queued=1),
        first_activity=100.0, last_activity=201.5)


def test_idle_when_every_run_ended() -> None:
    evs = [*run("a", [started(), DONE], t0=100.0),
           *run("b", [("run.cancelled", {"reason": "cancelled"})], t0=110.0)]
    view = session_view(evs, "u", "s")
    assert view.status == "idle"
    assert view.counts == StatusCounts(completed=1, cancelled=1)


def test_waiting_for_a_human_is_active() -> None:
    evs = run("a", [started(), ("run.waiting_human", {"review_id": "r"})], t0=100.0)
    assert session_view(evs, "u", "s").status == "active"


def test_a_session_without_runs_is_idle_and_empty() -> None:
    view = session_view(run("a", [started()], t0=1.0, user="other"), "u", "s")
    assert view == SessionView(user_id="u", session_id="s", status="idle")
    assert view.first_activity is None and view.last_activity is None


def test_two_users_sharing_a_session_id_are_separate_sessions() -> None:
    """hypha scenario 11's scoping: the key is (user, session), never the session alone."""
    evs = [*run("a1", [started()], t0=1.0, user="user-a", session="shared"),
           *run("b1", [started(), DONE], t0=2.0, user="user-b", session="shared")]
    a, b = session_view(evs, "user-a", "shared"), session_view(evs, "user-b", "shared")
    assert [r.run_id for r in a.runs] == ["a1"] and a.status == "active"
    assert [r.run_id for r in b.runs] == ["b1"] and b.status == "idle"


# -- over a store --------------------------------------------------------------

def _store_run(store: EventStore, user: str | None, session: str | None,
               steps: list[Step]) -> str:
    run_id = uuid.uuid4().hex
    kind, data = created(user_id=user, session_id=session)
    with store.transaction() as tx:
        tx.create(new_view(run_id))
        append(tx, run_id, kind, data)
        for kind, data in steps:
            append(tx, run_id, kind, data)
    return run_id


def test_stored_session(store: EventStore) -> None:
    u = f"u-{uuid.uuid4().hex}"  # the PostgreSQL database is shared by the test session
    first = _store_run(store, u, "s", [started(), DONE])
    _store_run(store, u, "other", [])
    _store_run(store, "other", "s", [])
    _store_run(store, None, None, [])
    second = _store_run(store, u, "s", [("run.queued", {"behind": first})])
    assert runs_of_session(store, u, "s") == [first, second]
    view = stored_session(store, u, "s")
    assert [(r.run_id, r.status) for r in view.runs] == [(first, "completed"),
                                                         (second, "queued")]
    assert view.status == "active"
    assert view == session_view(store.events(first) + store.events(second), u, "s")
    assert stored_session(store, "nobody", "s") == SessionView(user_id="nobody",
                                                               session_id="s", status="idle")

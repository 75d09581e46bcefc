"""Sessions: ``session.created`` once per ``(user_id, session_id)``, written by the run
that opened the session through the lifecycle writer; reads scoped to their user; bad
input refused before anything is recorded. On both store backends."""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Hypha, SessionOpening, SpecError, TooLarge
from hypha_celery.client.sessions import MAX_SESSION_METADATA_BYTES
from hypha_celery.errors import NotTheLifecycleWriter, SessionClosed
from hypha_celery.events.payloads import SessionClosed as SessionClosedEvent
from hypha_celery.events.payloads import SessionCreated, SessionUpdated
from hypha_celery.exchange import export_jsonl, import_parsed, parse_jsonl
from hypha_celery.store import RunFilter, SessionStatus
from tests.runtime.support import echo_graph, embedded, kinds


@pytest.fixture
def u() -> str:
    """A prefix of this test's user and session ids (PostgreSQL is shared by the tests)."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def hypha(store_url: str) -> Iterator[Hypha]:
    h = embedded(store_url)
    h.register(echo_graph())
    try:
        yield h
    finally:
        h.close()


def test_the_first_run_of_a_session_opens_it_and_later_runs_do_not(hypha: Hypha, u: str
                                                                   ) -> None:
    opening = SessionOpening(profile="support", pack="desk@1", metadata={"tier": "gold"})
    ann = f"ann-{u}"
    first = hypha.start("echo", 1, user_id=ann, session_id="s1", session=opening)
    assert first.wait(10) == 1
    second = hypha.start("echo", 2, user_id=ann, session_id="s1",
                         session=SessionOpening(profile="other"))
    assert second.wait(10) == 2
    assert kinds(first)[:2] == ["run.created", "session.created"]
    assert "session.created" not in kinds(second)
    [event] = [e for e in first.events() if e.kind == "session.created"]
    body = event.body_as(SessionCreated)
    assert (body.session_id, body.user_id, body.profile, body.pack, body.metadata) == (
        "s1", ann, "support", "desk@1", {"tier": "gold"})
    row = hypha.session("s1", user_id=ann)
    assert row is not None
    assert (row.profile, row.pack, row.metadata, row.first_run_id, row.runs) == (
        "support", "desk@1", {"tier": "gold"}, first.id, 2)


def test_the_same_session_id_of_two_users_is_two_sessions(hypha: Hypha, u: str) -> None:
    ann, bob = f"ann-{u}", f"bob-{u}"
    a = hypha.start("echo", 1, user_id=ann, session_id=u)
    b = hypha.start("echo", 1, user_id=bob, session_id=u)
    c = hypha.start("echo", 1, session_id=u)  # no user: a session of its own too
    for run in (a, b, c):
        run.wait(10)
        assert "session.created" in kinds(run)
    assert {(s.user_id, s.session_id) for s in hypha.sessions(limit=500)} >= {
        (ann, u), (bob, u), (None, u)}
    assert [s.user_id for s in hypha.sessions(user_id=bob)] == [bob]
    row = hypha.session(u)
    assert row is not None and (row.user_id, row.first_run_id, row.runs) == (None, c.id, 1)


def test_a_run_without_a_session_opens_none(hypha: Hypha, u: str) -> None:
    run = hypha.start("echo", 1, user_id=u)
    run.wait(10)
    assert "session.created" not in kinds(run)
    assert hypha.sessions(user_id=u) == []


def test_concurrent_first_runs_open_the_session_once(hypha: Hypha, u: str) -> None:
    barrier = threading.Barrier(4)
    ids: list[str] = []

    def start() -> None:
        barrier.wait(10)
        ids.append(hypha.start("echo", 1, user_id=u, session_id="race").id)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    opened = [i for i in ids if "session.created" in kinds(hypha.get_run(i))]
    assert len(ids) == 4
    assert len(opened) == 1
    row = hypha.session("race", user_id=u)
    assert row is not None and row.first_run_id == opened[0]


def test_a_scoped_client_sees_its_own_sessions_only(hypha: Hypha, u: str) -> None:
    hypha.as_user(f"ann-{u}").start("echo", 1, session_id="mine").wait(10)
    hypha.as_user(f"bob-{u}").start("echo", 1, session_id="theirs").wait(10)
    ann = hypha.as_user(f"ann-{u}")
    assert [s.session_id for s in ann.sessions()] == ["mine"]
    assert [s.session_id for s in ann.sessions(user_id=f"bob-{u}")] == []
    assert ann.session("theirs", user_id=f"bob-{u}") is None  # ann's, whatever is asked
    assert ann.session("mine") is not None


@pytest.mark.parametrize(("opening", "session_id", "error", "says"), [
    (SessionOpening(metadata={"x": "y" * MAX_SESSION_METADATA_BYTES}), "s", TooLarge,
     "session metadata is"),
    (SessionOpening(metadata={"f": {1, 2}}), "s", SpecError, "JSON-serializable"),  # type: ignore[dict-item]
    (SessionOpening(metadata=[1]), "s", SpecError, "JSON object"),  # type: ignore[arg-type]
    (SessionOpening(), None, SpecError, "needs a session_id"),
    ({"profile": "p"}, "s", SpecError, "takes a SessionOpening"),
])
def test_a_bad_session_opening_records_nothing(hypha: Hypha, u: str, opening: Any,
                                               session_id: str | None,
                                               error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        hypha.start("echo", 1, user_id=u, session_id=session_id, session=opening)
    assert hypha.store.list_runs(RunFilter(user_id=u)) == []
    assert hypha.sessions(user_id=u) == []


def test_session_events_come_only_from_the_lifecycle_writer(hypha: Hypha, u: str) -> None:
    run = hypha.start("echo", 1, user_id=u)
    run.wait(10)
    with pytest.raises(NotTheLifecycleWriter, match="session lifecycle event"), \
            hypha.store.transaction() as tx:
        tx.lock(run.id)
        tx.emit(run.id, SessionCreated(session_id="forged"))


def test_an_import_opens_the_sessions_its_runs_opened(hypha: Hypha, u: str,
                                                      tmp_path: Path) -> None:
    run = hypha.start("echo", 1, user_id=u, session_id="moved",
                      session=SessionOpening(profile="p", metadata={"k": 1}))
    run.wait(10)
    out = io.StringIO()
    export_jsonl(hypha.store, out, [run.id])
    other = embedded(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        import_parsed(other.store, parse_jsonl(out.getvalue().splitlines()))
        row = other.session("moved", user_id=u)
        assert row is not None and (row.profile, row.metadata, row.first_run_id) == (
            "p", {"k": 1}, run.id)
    finally:
        other.close()


# -- status: session.updated / session.closed ------------------------------------------
def test_closing_a_session_records_session_closed_once_and_refuses_new_runs(
        hypha: Hypha, u: str) -> None:
    ann = f"ann-{u}"
    first = hypha.start("echo", 1, user_id=ann, session_id="s1")
    assert first.wait(10) == 1
    row = hypha.session("s1", user_id=ann)
    assert row is not None and row.status == SessionStatus.ACTIVE and row.closed_at is None
    closed = hypha.close_session("s1", user_id=ann, reason="resolved")
    assert closed is not None and closed.status == SessionStatus.CLOSED
    assert closed.closed_at is not None
    again = hypha.close_session("s1", user_id=ann)  # idempotent: no second event
    assert again is not None and again.closed_at == closed.closed_at
    assert kinds(first)[-1] == "session.closed"  # after the run's terminal event
    [event] = [e for e in first.events() if e.kind == "session.closed"]
    assert event.body_as(SessionClosedEvent) == SessionClosedEvent(
        session_id="s1", user_id=ann, reason="resolved")
    assert hypha.store.get(first.id)["status"] == "completed"  # the run is unchanged
    with pytest.raises(SessionClosed, match="session 's1' of user .* is closed"):
        hypha.start("echo", 2, user_id=ann, session_id="s1")
    after = hypha.session("s1", user_id=ann)
    assert after is not None and after.runs == 1  # nothing recorded
    other = hypha.start("echo", 3, user_id=ann, session_id="s2")  # other sessions run
    assert other.wait(10) == 3


def test_closing_an_unknown_session_is_none(hypha: Hypha, u: str) -> None:
    assert hypha.close_session("nope", user_id=f"ann-{u}") is None


def test_updating_metadata_merges_with_the_caller_winning(hypha: Hypha, u: str) -> None:
    ann = f"ann-{u}"
    first = hypha.start("echo", 1, user_id=ann, session_id="s1",
                        session=SessionOpening(metadata={"tier": "gold", "lang": "en"}))
    first.wait(10)
    row = hypha.update_session("s1", {"tier": "platinum", "seat": 4}, user_id=ann)
    assert row is not None
    assert row.metadata == {"tier": "platinum", "lang": "en", "seat": 4}
    [event] = [e for e in first.events() if e.kind == "session.updated"]
    assert event.body_as(SessionUpdated).metadata == {"tier": "platinum", "seat": 4}
    with pytest.raises(TooLarge):
        hypha.update_session("s1", {"x": "y" * MAX_SESSION_METADATA_BYTES}, user_id=ann)
    hypha.close_session("s1", user_id=ann)
    with pytest.raises(SessionClosed):
        hypha.update_session("s1", {"tier": "bronze"}, user_id=ann)
    row = hypha.session("s1", user_id=ann)
    assert row is not None and row.metadata["tier"] == "platinum"


def test_a_scoped_client_closes_its_own_sessions_only(hypha: Hypha, u: str) -> None:
    hypha.as_user(f"bob-{u}").start("echo", 1, session_id="theirs").wait(10)
    ann = hypha.as_user(f"ann-{u}")
    assert ann.close_session("theirs", user_id=f"bob-{u}") is None
    row = hypha.session("theirs", user_id=f"bob-{u}")
    assert row is not None and row.status == SessionStatus.ACTIVE

"""An import rebuilds the sessions its runs opened from their ``session.created``,
``session.updated`` and ``session.closed`` events, in log order: an exported store imported
into an empty one lists the same sessions (status, closed_at, metadata). On both store
backends."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha, SessionOpening
from hypha_celery.exchange import export_jsonl, import_parsed, parse_jsonl
from hypha_celery.store import SessionRow, SessionStatus
from tests.runtime.support import echo_graph, embedded


def _hypha(url: str) -> Iterator[Hypha]:
    h = embedded(url)
    h.register(echo_graph())
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def source(store_url: str) -> Iterator[Hypha]:
    yield from _hypha(store_url)


@pytest.fixture
def target(fresh_url: str) -> Iterator[Hypha]:
    """A client of an empty store of the same backend."""
    yield from _hypha(fresh_url)


@pytest.fixture
def ann() -> str:
    """This test's user (PostgreSQL's ``store_url`` is shared by the tests)."""
    return f"ann-{uuid.uuid4().hex[:8]}"


def _export(hypha: Hypha, run_ids: list[str]) -> str:
    out = io.StringIO()
    export_jsonl(hypha.store, out, run_ids)
    return out.getvalue()


def _import(hypha: Hypha, text: str) -> Any:
    return import_parsed(hypha.store, parse_jsonl(text.splitlines(keepends=True), "x.jsonl"))


def _sessions(hypha: Hypha, user_id: str) -> list[SessionRow]:
    return sorted(hypha.sessions(user_id=user_id), key=lambda s: s.session_id)


def _start(hypha: Hypha, user_id: str, session_id: str, **kw: Any) -> str:
    run = hypha.start("echo", 1, user_id=user_id, session_id=session_id, **kw)
    run.wait(10)
    return run.id


def test_an_import_rebuilds_updated_and_closed_sessions(source: Hypha, target: Hypha,
                                                        ann: str) -> None:
    opening = SessionOpening(profile="desk", metadata={"tier": "gold", "lang": "en"})
    ids = [_start(source, ann, s, session=opening) for s in ("kept", "updated", "closed")]
    ids.append(_start(source, ann, "updated"))  # a second run of a session
    source.update_session("updated", {"tier": "platinum", "seat": 4}, user_id=ann)
    source.update_session("updated", {"seat": 5}, user_id=ann)  # log order: 5 wins
    source.update_session("closed", {"lang": "fr"}, user_id=ann)
    source.close_session("closed", user_id=ann, reason="resolved")
    want = _sessions(source, ann)
    by_id = {s.session_id: s for s in want}
    assert by_id["updated"].metadata == {"tier": "platinum", "lang": "en", "seat": 5}
    assert by_id["closed"].status == SessionStatus.CLOSED

    text = _export(source, ids)
    done = _import(target, text)
    assert (done.runs, done.present) == (4, 0)
    assert _sessions(target, ann) == want  # status, closed_at, metadata, created_at, runs
    assert target.sessions() == target.sessions(user_id=ann)  # nothing else

    again = _import(target, text)  # the same file again: nothing changes
    assert (again.runs, again.events, again.present) == (0, 0, done.events)
    assert _sessions(target, ann) == want


def test_an_import_of_a_longer_log_brings_a_session_up_to_date(source: Hypha,
                                                               target: Hypha, ann: str
                                                               ) -> None:
    """A run the store has fewer events of: its later session events change the row."""
    run_id = _start(source, ann, "s", session=SessionOpening(metadata={"a": 1}))
    _import(target, _export(source, [run_id]))
    source.update_session("s", {"b": 2}, user_id=ann)
    source.close_session("s", user_id=ann)
    text = _export(source, [run_id])
    done = _import(target, text)
    assert (done.runs, done.events) == (1, 2)
    [row] = _sessions(target, ann)
    assert (row.metadata, row.status) == ({"a": 1, "b": 2}, SessionStatus.CLOSED)
    assert _sessions(target, ann) == _sessions(source, ann)
    assert _import(target, text).events == 0
    assert _sessions(target, ann) == _sessions(source, ann)


def test_a_session_another_run_opened_here_keeps_its_own_row(source: Hypha, target: Hypha,
                                                             ann: str) -> None:
    """First writer wins: the imported run did not open the session here, so its
    session.updated and session.closed are facts of another store's session."""
    mine = _start(target, ann, "s", session=SessionOpening(metadata={"here": True}))
    theirs = _start(source, ann, "s", session=SessionOpening(metadata={"there": True}))
    source.update_session("s", {"x": 1}, user_id=ann)
    source.close_session("s", user_id=ann)
    before = _sessions(target, ann)
    _import(target, _export(source, [theirs]))
    [row] = _sessions(target, ann)
    assert (row.first_run_id, row.metadata, row.status) == (
        mine, {"here": True}, SessionStatus.ACTIVE)
    assert row.runs == 2 and [r.runs for r in before] == [1]

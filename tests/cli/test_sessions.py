"""``hypha sessions`` and ``hypha sessions show``: a table and ``--json``, ``--as-user``
scoping, an unknown session as one line (the PostgreSQL database is shared: unique ids)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from hypha_celery import Hypha, SessionOpening
from hypha_celery.errors import SessionClosed
from tests.cli.test_commands import invoke, one_line_error
from tests.runtime.support import echo_graph, embedded


@pytest.fixture
def world(store_url: str) -> Iterator[tuple[str, str, list[str]]]:
    """Two users' sessions: ann's ``desk`` (two runs, opened with a profile), bob's."""
    u = uuid.uuid4().hex[:8]
    hypha: Hypha = embedded(store_url)
    hypha.register(echo_graph())
    try:
        ann, bob = f"ann-{u}", f"bob-{u}"
        runs = [hypha.start("echo", i, user_id=ann, session_id="desk",
                            session=SessionOpening(profile="triage", pack="support@1",
                                                   metadata={"tier": "gold"}))
                for i in range(2)]
        runs.append(hypha.start("echo", 9, user_id=bob, session_id="other"))
        for r in runs:
            r.wait(10)
        yield ann, bob, [r.id for r in runs]
    finally:
        hypha.close()


def test_the_table_lists_a_users_sessions(store_url: str,
                                          world: tuple[str, str, list[str]]) -> None:
    ann, _, runs = world
    result = invoke("sessions", "--user", ann, store_url=store_url)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split() == ["USER", "SESSION", "STATUS", "PROFILE", "RUNS", "FIRST_RUN",
                              "CREATED"]
    assert row.split()[:6] == [ann, "desk", "active", "support@1:triage", "2", runs[0]]


def test_json_lines_carry_no_metadata_and_show_does(store_url: str,
                                                    world: tuple[str, str, list[str]]) -> None:
    ann, _, runs = world
    [line] = invoke("sessions", "--user", ann, "--json", store_url=store_url).stdout.splitlines()
    listed = json.loads(line)
    assert listed["session_id"] == "desk" and "metadata" not in listed
    shown = json.loads(invoke("sessions", "show", "desk", "--user", ann, "--json",
                              store_url=store_url).stdout)
    assert shown["metadata"] == {"tier": "gold"} and shown["profile"] == "triage"
    assert sorted(shown["run_ids"]) == sorted(runs[:2])


def test_show_prints_the_session_and_its_runs(store_url: str,
                                              world: tuple[str, str, list[str]]) -> None:
    ann, _, runs = world
    result = invoke("sessions", "show", "desk", "--user", ann, store_url=store_url)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "support@1:triage" in out and all(r in out for r in runs[:2])
    assert runs[2] not in out


def test_a_user_sees_only_their_own_sessions(store_url: str,
                                             world: tuple[str, str, list[str]]) -> None:
    ann, bob, _ = world
    mine = invoke("--as-user", bob, "sessions", "--json", store_url=store_url)
    assert [json.loads(x)["session_id"] for x in mine.stdout.splitlines()] == ["other"]
    theirs = invoke("--as-user", bob, "sessions", "show", "desk", "--user", ann,
                    store_url=store_url)
    assert "no session 'desk'" in one_line_error(theirs, 1)


def test_an_unknown_session_is_one_line(store_url: str) -> None:
    result = invoke("sessions", "show", f"nope-{uuid.uuid4().hex[:6]}", store_url=store_url)
    assert "no session 'nope-" in one_line_error(result, 1)


def test_close_closes_the_session_and_a_run_in_it_is_refused(
        store_url: str, world: tuple[str, str, list[str]]) -> None:
    ann, _, _ = world
    result = invoke("sessions", "close", ann, "desk", "--reason", "done", store_url=store_url)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"session desk of {ann}: closed\n"
    [line] = invoke("sessions", "--user", ann, "--json", store_url=store_url).stdout.splitlines()
    listed = json.loads(line)
    assert listed["status"] == "closed" and listed["closed_at"] is not None
    table = invoke("sessions", "--user", ann, store_url=store_url).stdout.splitlines()
    assert table[1].split()[2] == "closed"
    hypha = embedded(store_url)
    hypha.register(echo_graph())
    try:
        with pytest.raises(SessionClosed):
            hypha.start("echo", 1, user_id=ann, session_id="desk")
    finally:
        hypha.close()


def test_closing_an_unknown_or_someone_elses_session_is_one_line(
        store_url: str, world: tuple[str, str, list[str]]) -> None:
    ann, bob, _ = world
    unknown = invoke("sessions", "close", ann, "nope", store_url=store_url)
    assert one_line_error(unknown, 1) == f"hypha: error: no session 'nope' of user {ann!r}"
    theirs = invoke("--as-user", bob, "sessions", "close", ann, "desk", store_url=store_url)
    assert "no session 'desk'" in one_line_error(theirs, 1)

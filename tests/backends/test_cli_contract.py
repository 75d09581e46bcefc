"""The contract both CLI backends keep (ClaudeCodeBackend, CodexBackend), one test per
promise, run for each: the real CLI (pinned, scripts/install-clis) against the local fake
server, and the fake CLI (tests/fakes/bin/fake-cli) for crashes, exits, hangs and argv.
What only one CLI does is tested in its own module (test_claude_code.py, test_codex.py)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hypha_celery.backends import BackendError, Response, TurnError
from hypha_celery.errors import TurnFailed
from tests.backends.cli_support import (
    CLIS,
    Checkpoints,
    Cli,
    drain,
    dumps,
    kinds,
    turn,
    user_texts,
)
from tests.backends.hosted_support import Assistant
from tests.fakes.clis import gone, installed_clis, kill_leftovers
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, embedded


@pytest.fixture(params=CLIS, ids=[c.name for c in CLIS])
def cli(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Cli:
    """The CLI under test, its key in the environment."""
    described: Cli = request.param
    monkeypatch.setenv(described.key_env, described.secret)
    return described


@pytest.fixture
def executable(cli: Cli) -> str:
    return str(installed_clis() / cli.name)


@pytest.fixture
def home(cli: Cli, tmp_path: Path) -> Iterator[Path]:
    if cli.makes_state_dir:
        (tmp_path / cli.state_dir).mkdir()
    yield tmp_path


def test_a_conversation_resumes_by_session_id(cli: Cli, executable: str, fake: FakeLLM,
                                              home: Path) -> None:
    backend = cli.backend()
    session = backend.start_session(cli.options(executable, fake, home))
    assert session == {"opts": session["opts"], "session_id": None, "totals": {}}
    fake.script(*cli.replies())
    marks = Checkpoints()
    first, session = turn(backend, session, "hi", marks)
    assert isinstance(first, Response) and first.text == "Hello there"
    assert kinds(first) == cli.first_kinds
    sid = first.events[0].data["session_id"]
    assert marks.ids == [sid] and session["session_id"] == sid
    assert first.usage == cli.first_usage
    assert first.terminal.data["session_id"] == sid
    second, session = turn(backend, session, "bye")
    assert isinstance(second, Response) and second.text == "Bye"
    assert second.terminal.data["session_id"] == sid
    said = [t for t in user_texts(fake) if t in ("hi", "Hello there", "bye")]
    assert said == ["hi", "Hello there", "bye"]
    cli.check_totals(first, second, session)
    assert json.loads(json.dumps(session)) == session
    assert cli.secret not in dumps(session, [e.to_json() for e in first.events + second.events])
    header, value = cli.key_header(cli.secret)
    assert fake.requests[-1].headers[header] == value  # the key went to the CLI


@pytest.mark.parametrize(("status", "reason"), [(400, "invalid_request"),
                                                (401, "authentication")])
def test_an_api_error_is_typed_and_never_shows_the_key(cli: Cli, executable: str,
                                                       fake: FakeLLM, home: Path,
                                                       status: int, reason: str) -> None:
    backend = cli.backend()
    session = backend.start_session(cli.options(executable, fake, home))
    fake.default = Reply.error(status, message=f"bad request, key was {cli.secret}")
    events = drain(backend, session, "hi")
    assert events[0].kind == "session" and events[-1].kind == "error"
    assert events[-1].data["reason"] == reason
    assert events[-1].data["backend_error"]["status"] == status
    assert cli.secret not in dumps([e.to_json() for e in events])


@pytest.mark.parametrize("lost", ["11111111-1111-4111-8111-111111111111",
                                  "01a24050-0084-7b62-b5e5-390126b0f9a2"])
def test_a_session_the_cli_does_not_know_fails_the_turn(
        cli: Cli, executable: str, fake: FakeLLM, home: Path, lost: str) -> None:
    backend = cli.backend()
    session = backend.start_session(cli.options(executable, fake, home, session_id=lost))
    outcome, after = turn(backend, session, "hi")
    assert isinstance(outcome, TurnError) and outcome.reason == "session_not_found"
    assert after["session_id"] == lost


def test_start_refuses_bad_options_a_missing_cli_and_a_missing_key(
        cli: Cli, executable: str, fake: FakeLLM, home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    backend = cli.backend()
    good = cli.options(executable, fake, home)
    for more, kind in cli.bad_options:
        with pytest.raises(BackendError) as caught:
            backend.start_session({**good, **more})
        assert caught.value.kind == kind, more
    with pytest.raises(BackendError) as caught:
        backend.start_session({**good, "executable": f"no-such-{cli.name}"})
    assert caught.value.kind == "cli_not_installed" and cli.install_hint in str(caught.value)
    monkeypatch.delenv(cli.key_env)
    with pytest.raises(BackendError) as caught:
        backend.start_session(good)
    assert caught.value.kind == "missing_key"
    if cli.cli_auth is not None:  # the CLI's own login needs no key
        assert backend.start_session({**good, **cli.cli_auth})["session_id"] is None
    state = home / cli.state_dir  # nothing written by a start
    assert state.exists() == cli.makes_state_dir and not (state.exists() and any(
        state.iterdir()))


def test_a_worker_without_the_cli_fails_the_turn_before_dispatch(
        cli: Cli, executable: str, fake: FakeLLM, home: Path) -> None:
    backend = cli.backend()
    session = backend.start_session(cli.options(executable, fake, home))
    session["opts"]["executable"] = str(home / "gone" / cli.name)  # another host
    with pytest.raises(BackendError) as caught:
        backend.prompt(session, "hi")
    assert caught.value.kind == "cli_not_installed"
    assert fake.requests == []


def test_argv_never_holds_the_prompt_or_the_key(cli: Cli, fake: FakeLLM, home: Path) -> None:
    backend = cli.backend()
    session = backend.start_session(cli.fake_cli(fake, home, "argv", **cli.argv_options))
    session["session_id"] = "0b6c8f4e-3d1a-4c47-9f8e-2a4b6c8d0e1f"
    outcome, _ = turn(backend, session, "my secret plan")
    assert isinstance(outcome, Response)
    shown = json.loads(outcome.text)
    argv, env = shown["argv"], shown["env"]
    assert shown["prompt"] == "my secret plan"
    cli.check_argv(argv, session, fake)
    assert "my secret plan" not in argv and cli.secret not in " ".join(argv)
    # the key reached the CLI's environment, and the text the CLI printed was redacted
    expected = cli.argv_env(fake, home)
    assert {name: env.get(name) for name in expected} == expected
    assert "HYPHA_TEST_MARKER" not in env  # the worker's environment is not inherited


@pytest.mark.parametrize(("mode", "reason", "exit_code"), [
    ("crash", "cli_exit", -9), ("exit", "cli_exit", 3), ("malformed", "malformed_stream", None)])
def test_a_cli_that_crashes_exits_or_garbles_fails_the_turn(
        cli: Cli, fake: FakeLLM, home: Path, mode: str, reason: str,
        exit_code: int | None) -> None:
    backend = cli.backend()
    session = backend.start_session(cli.fake_cli(fake, home, mode))
    events = drain(backend, session, "hi")
    assert events[0].kind == "session" and events[-1].kind == "error"
    assert events[-1].data["reason"] == reason
    assert events[-1].data.get("exit_code") == exit_code


def test_cancel_kills_a_hanging_cli_and_its_children(cli: Cli, fake: FakeLLM,
                                                     home: Path) -> None:
    backend = cli.backend()
    pids_file = home / "pids"
    session = backend.start_session(cli.fake_cli(fake, home, "hang",
                                                 {"FAKE_CLI_PIDS": str(pids_file)}))
    events, _ = backend.prompt(session, "hi")
    assert next(events).kind == "session"
    working = next(events)
    assert working.kind == "text" and working.data == {"text": "working"}
    pids = [int(p) for p in pids_file.read_text().split()]  # written before "working"
    threading.Timer(0.1, backend.cancel).start()
    started = time.monotonic()
    rest = list(events)
    try:
        assert gone(pids, 3.0), "the CLI or its child survived cancel()"
    finally:
        kill_leftovers(pids)
    assert time.monotonic() - started < 3.0
    assert [e.kind for e in rest] == ["error"] and rest[0].data["reason"] == "cancelled"
    backend.cancel()  # again, after the end: harmless


def test_an_agent_resumes_and_never_shows_its_key(
        cli: Cli, executable: str, sqlite_url: str, fake: FakeLLM, home: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    hypha = embedded(sqlite_url)
    try:
        hypha.agents.start(Assistant, name="coder", backend=cli.backend,
                           llm=cli.options(executable, fake, home))
        fake.script(Reply.text("Hello from the model", chunks=3), Reply.text("Again"))
        assert hypha.agents.ask("coder", "hi", timeout=WAIT).text == "Hello from the model"
        assert hypha.agents.ask("coder", "more", timeout=WAIT).text == "Again"
        assert "Hello from the model" in list(user_texts(fake))  # the CLI resumed
        fake.default = Reply.error(400, message=f"invalid api key {cli.secret}")
        with pytest.raises(TurnFailed) as caught:
            hypha.agents.ask("coder", "again", timeout=WAIT)
        status = hypha.agents.status("coder")
        snapshot = hypha.agents.runtime_snapshot("coder")
        info = hypha.agents.whereis("coder")
        assert info is not None
        stored = [(e.kind, e.data) for e in hypha.store.events(info.incarnation)]
    finally:
        hypha.close()
    assert caught.value.reason == "invalid_request"
    for dump in (str(caught.value), repr(caught.value), repr(status), repr(snapshot),
                 str(stored), caplog.text):
        assert cli.secret not in dump

"""CodexBackend: the real ``codex`` CLI (pinned, scripts/install-clis) against the local
fake Responses server, and the fake CLI for a crash and a hang."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.backends import BackendError, CodexBackend, Response, TurnError
from hypha_celery.errors import TurnFailed
from tests.backends.cli_support import Checkpoints, drain, dumps, kinds, turn, user_texts
from tests.backends.hosted_support import Assistant
from tests.fakes.clis import FAKE_CLI, gone, installed_clis, kill_leftovers
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, embedded

SECRET = "sk-SENTINEL-codex-0123456789"


@pytest.fixture(scope="module")
def codex() -> str:
    return str(installed_clis() / "codex")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


def options(codex: str, fake: FakeLLM, tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"executable": codex, "base_url": fake.openai_url, "model": "fake-model",
            "codex_home": str(tmp_path / "codex"), "cwd": str(tmp_path),
            "env": {"HOME": str(tmp_path)}, "config": {"web_search": "disabled"}, **more}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "codex").mkdir()
    return tmp_path


def test_a_thread_resumes_by_its_id(codex: str, fake: FakeLLM, home: Path) -> None:
    backend = CodexBackend()
    session = backend.start_session(options(codex, fake, home))
    fake.script(Reply.text("Hello there", usage=(10, 4, 3, 0)),
                Reply.text("Bye", usage=(30, 2, 0, 0)))
    marks = Checkpoints()
    first, session = turn(backend, session, "hi", marks)
    assert isinstance(first, Response) and first.text == "Hello there"
    assert kinds(first) == ["session", "notice", "text", "usage", "result"]
    sid = first.events[0].data["session_id"]
    assert marks.ids == [sid] and session["session_id"] == sid
    assert first.usage == {"input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 3,
                           "cache_write_tokens": 0}
    second, session = turn(backend, session, "bye")
    assert isinstance(second, Response) and second.text == "Bye"
    assert second.terminal.data["session_id"] == sid
    said = [t for t in user_texts(fake) if t in ("hi", "Hello there", "bye")]
    assert said == ["hi", "Hello there", "bye"]
    # the CLI reports the thread's running total; the turn reports its own share
    assert second.usage is not None and second.usage["input_tokens"] == 30
    assert session["totals"]["usage"]["input_tokens"] == 40
    assert json.loads(json.dumps(session)) == session
    assert SECRET not in dumps(session, [e.to_json() for e in first.events + second.events])
    assert fake.requests[-1].headers["authorization"] == f"Bearer {SECRET}"


def test_a_tool_turn_runs_a_command(codex: str, fake: FakeLLM, home: Path) -> None:
    backend = CodexBackend()
    session = backend.start_session(options(codex, fake, home))
    fake.script(Reply.tool_call("exec_command", {"cmd": "echo hello-from-tool"}),
                Reply.text("the tool said hello"))
    outcome, _ = turn(backend, session, "run it")
    assert isinstance(outcome, Response) and outcome.text == "the tool said hello"
    uses = [e.data for e in outcome.events if e.kind == "tool_use"]
    results = [e.data for e in outcome.events if e.kind == "tool_result"]
    assert len(uses) == 1 and uses[0]["name"] == "command_execution"
    assert "echo hello-from-tool" in uses[0]["input"]["command"]
    assert results == [{"id": uses[0]["id"], "status": "completed", "exit_code": 0,
                        "chars": len("hello-from-tool\n")}]


@pytest.mark.parametrize(("status", "reason"), [(400, "invalid_request"),
                                                (401, "authentication")])
def test_an_api_error_is_typed_and_never_shows_the_key(codex: str, fake: FakeLLM, home: Path,
                                                       status: int, reason: str) -> None:
    backend = CodexBackend()
    session = backend.start_session(options(codex, fake, home))
    fake.default = Reply.error(status, message=f"bad request, key was {SECRET}")
    events = drain(backend, session, "hi")
    assert events[0].kind == "session" and events[-1].kind == "error"
    assert events[-1].data["reason"] == reason
    assert SECRET not in dumps([e.to_json() for e in events])


def test_a_thread_the_store_lost_fails_the_turn(
        codex: str, fake: FakeLLM, home: Path) -> None:
    backend = CodexBackend()
    lost = "01a24050-0084-7b62-b5e5-390126b0f9a2"
    session = backend.start_session(options(codex, fake, home, session_id=lost))
    outcome, after = turn(backend, session, "hi")
    assert isinstance(outcome, TurnError) and outcome.reason == "session_not_found"
    assert after["session_id"] == lost


def test_start_refuses_bad_options_a_missing_cli_and_a_missing_key(
        codex: str, fake: FakeLLM, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = CodexBackend()
    good = options(codex, fake, home)
    bad = [({"bogus": 1}, "invalid_option"), ({"sandbox": "none"}, "invalid_option"),
           ({"config": {"model_provider": "x"}}, "invalid_option"),
           ({"timeout": 0}, "invalid_option"), ({"extra_args": "--x"}, "invalid_option"),
           ({"executable": "no-such-codex"}, "cli_not_installed")]
    for more, kind in bad:
        with pytest.raises(BackendError) as caught:
            backend.start_session({**good, **more})
        assert caught.value.kind == kind, more
    with pytest.raises(BackendError) as caught:
        backend.start_session({**good, "executable": "no-such-codex"})
    assert "npm install -g @openai/codex" in str(caught.value)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(BackendError) as caught:
        backend.start_session(good)
    assert caught.value.kind == "missing_key"
    assert list((home / "codex").iterdir()) == []  # nothing written by a start


def fake_cli(fake: FakeLLM, home: Path, mode: str, env: dict[str, str] | None = None,
             **more: Any) -> dict[str, Any]:
    return options(str(FAKE_CLI), fake, home, env={
        "HOME": str(home), "FAKE_CLI_MODE": mode, "FAKE_CLI_DIALECT": "codex", **(env or {})},
        **more)


def test_argv_holds_neither_prompt_nor_key(fake: FakeLLM, home: Path) -> None:
    backend = CodexBackend()
    session = backend.start_session(fake_cli(fake, home, "argv", sandbox="workspace-write"))
    session["session_id"] = "0b6c8f4e-3d1a-4c47-9f8e-2a4b6c8d0e1f"
    outcome, _ = turn(backend, session, "my secret plan")
    assert isinstance(outcome, Response)
    shown = json.loads(outcome.text)
    argv, env = shown["argv"], shown["env"]
    assert shown["prompt"] == "my secret plan"
    assert argv[:4] == ["exec", "resume", "--json", "--skip-git-repo-check"]
    assert argv[-2:] == [session["session_id"], "-"]
    assert 'sandbox_mode="workspace-write"' in argv
    assert f'model_providers.hypha.base_url="{fake.openai_url}"' in argv
    assert "my secret plan" not in argv and SECRET not in " ".join(argv)
    # the key reached the CLI's environment, and the text the CLI printed was redacted
    assert env["HYPHA_CODEX_API_KEY"] == "[redacted]"
    assert env["CODEX_HOME"] == str(home / "codex")
    assert "HYPHA_TEST_MARKER" not in env  # the worker's environment is not inherited


@pytest.mark.parametrize(("mode", "reason"), [("crash", "cli_exit"), ("exit", "cli_exit"),
                                              ("malformed", "malformed_stream")])
def test_a_cli_that_crashes_exits_or_garbles_fails_the_turn(fake: FakeLLM, home: Path,
                                                            mode: str, reason: str) -> None:
    backend = CodexBackend()
    session = backend.start_session(fake_cli(fake, home, mode))
    events = drain(backend, session, "hi")
    assert events[-1].data["reason"] == reason
    if mode == "exit":
        assert events[-1].data["exit_code"] == 3


def test_cancel_kills_a_hanging_cli_and_its_children(fake: FakeLLM, home: Path) -> None:
    backend = CodexBackend()
    pids_file = home / "pids"
    session = backend.start_session(fake_cli(fake, home, "hang",
                                                     {"FAKE_CLI_PIDS": str(pids_file)}))
    events, _ = backend.prompt(session, "hi")
    threading.Timer(0.5, backend.cancel).start()
    rest = list(events)
    pids = [int(p) for p in pids_file.read_text().split()]
    try:
        assert gone(pids, 3.0), "the CLI or its child survived cancel()"
    finally:
        kill_leftovers(pids)
    assert [e.kind for e in rest] == ["session", "text", "error"]
    assert rest[-1].data["reason"] == "cancelled"


def test_an_agent_on_codex_resumes_and_never_shows_its_key(
        codex: str, sqlite_url: str, fake: FakeLLM, home: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    hypha = embedded(sqlite_url)
    try:
        hypha.agents.start(Assistant, name="coder", backend=CodexBackend,
                           llm=options(codex, fake, home))
        fake.script(Reply.text("Hello from the model"), Reply.text("Again"))
        assert hypha.agents.ask("coder", "hi", timeout=WAIT).text == "Hello from the model"
        assert hypha.agents.ask("coder", "more", timeout=WAIT).text == "Again"
        assert "Hello from the model" in list(user_texts(fake))  # the CLI resumed
        fake.default = Reply.error(400, message=f"invalid api key {SECRET}")
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
        assert SECRET not in dump

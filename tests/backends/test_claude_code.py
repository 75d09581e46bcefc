"""ClaudeCodeBackend: the real ``claude`` CLI (pinned, scripts/install-clis) against the
local fake Anthropic server, and the fake CLI for crashes, hangs and bad lines."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hypha_celery.backends import BackendError, ClaudeCodeBackend, Response, TurnError
from hypha_celery.errors import TurnFailed
from tests.backends.cli_support import Checkpoints, drain, dumps, kinds, turn, user_texts
from tests.backends.hosted_support import Assistant
from tests.fakes.clis import FAKE_CLI, gone, installed_clis, kill_leftovers
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, embedded

SECRET = "sk-ant-SENTINEL-claude-0123456789"


@pytest.fixture(scope="module")
def claude() -> str:
    return str(installed_clis() / "claude")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


def options(claude: str, fake: FakeLLM, tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"executable": claude, "base_url": fake.url, "model": "claude-test",
            "config_dir": str(tmp_path / "claude"), "cwd": str(tmp_path),
            "env": {"HOME": str(tmp_path)}, **more}


def test_a_conversation_resumes_by_session_id(claude: str, fake: FakeLLM,
                                              tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(claude, fake, tmp_path))
    assert session == {"opts": session["opts"], "session_id": None, "totals": {}}
    fake.script(Reply.text("Hello there", chunks=2, usage=(10, 4, 3, 2)), Reply.text("Bye"))
    marks = Checkpoints()
    first, session = turn(backend, session, "hi", marks)
    assert isinstance(first, Response) and first.text == "Hello there"
    assert kinds(first) == ["session", "text", "text", "usage", "result"]
    sid = first.events[0].data["session_id"]
    assert marks.ids == [sid] and session["session_id"] == sid
    assert first.usage == {"input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 3,
                           "cache_write_tokens": 2}
    assert first.terminal.data["session_id"] == sid
    assert first.terminal.data["cost_usd"] > 0 and first.terminal.data["model"] == "claude-test"
    second, session = turn(backend, session, "bye")
    assert isinstance(second, Response) and second.text == "Bye"
    assert second.terminal.data["session_id"] == sid
    said = [t for t in user_texts(fake) if t in ("hi", "Hello there", "bye")]
    assert said == ["hi", "Hello there", "bye"]
    assert 0 < second.terminal.data["cost_usd"] < session["totals"]["cost_usd"]
    assert json.loads(json.dumps(session)) == session
    everything = dumps(session, [e.to_json() for e in first.events + second.events])
    assert SECRET not in everything
    assert fake.requests[-1].headers["x-api-key"] == SECRET  # it went to the CLI


def test_a_tool_turn_runs_the_allowed_tool(claude: str, fake: FakeLLM, tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(claude, fake, tmp_path,
                                            allowed_tools=["Bash(echo *)"]))
    fake.script(Reply.tool_call("Bash", {"command": "echo hello-from-tool",
                                         "description": "say it"}, call_id="toolu_1"),
                Reply.text("the tool said hello"))
    outcome, _ = turn(backend, session, "run it")
    assert isinstance(outcome, Response) and outcome.text == "the tool said hello"
    uses = [e.data for e in outcome.events if e.kind == "tool_use"]
    results = [e.data for e in outcome.events if e.kind == "tool_result"]
    assert uses == [{"id": "toolu_1", "name": "Bash",
                     "input": {"command": "echo hello-from-tool", "description": "say it"}}]
    assert results == [{"id": "toolu_1", "is_error": False, "chars": len("hello-from-tool")}]
    assert outcome.terminal.data["num_turns"] == 2


def test_an_api_error_is_typed_and_never_shows_the_key(claude: str, fake: FakeLLM,
                                                       tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(claude, fake, tmp_path))
    fake.default = Reply.error(400, message=f"bad request, key was {SECRET}")
    events = drain(backend, session, "hi")
    assert events[0].kind == "session" and events[-1].kind == "error"
    assert events[-1].data["reason"] == "invalid_request"
    assert events[-1].data["backend_error"]["status"] == 400
    assert SECRET not in dumps([e.to_json() for e in events])


def test_an_unknown_session_fails_the_turn(claude: str, fake: FakeLLM, tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(claude, fake, tmp_path,
                                            session_id="11111111-1111-4111-8111-111111111111"))
    outcome, _ = turn(backend, session, "hi")
    assert isinstance(outcome, TurnError) and outcome.reason == "session_not_found"


def test_a_refused_checkpoint_fails_the_turn_and_stops_the_cli(claude: str, fake: FakeLLM,
                                                               tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(claude, fake, tmp_path))
    refuse = Checkpoints(refuse=BackendError("claude_code", "session_conflict", False))
    events = drain(backend, session, "hi", refuse)
    assert [e.kind for e in events] == ["error"]
    assert events[0].data["reason"] == "session_conflict"
    assert fake.requests == [] or fake.wait_closed(5)
    other = "22222222-2222-4222-8222-222222222222"
    stored = backend.checkpoint_session(session, other)
    assert backend.checkpoint_session(stored, other) == stored  # a repeat is fine
    with pytest.raises(BackendError) as caught:
        backend.checkpoint_session(stored, "33333333-3333-4333-8333-333333333333")
    assert caught.value.kind == "session_conflict"
    with pytest.raises(BackendError) as caught:
        backend.checkpoint_session(session, "not-a-uuid")
    assert caught.value.kind == "invalid_session_id"


def test_start_refuses_bad_options_a_missing_cli_and_a_missing_key(
        claude: str, fake: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = ClaudeCodeBackend()
    good = options(claude, fake, tmp_path)
    bad = [({"bogus": 1}, "invalid_option"), ({"permission_mode": "yolo"}, "invalid_option"),
           ({"max_turns": 0}, "invalid_option"), ({"base_url": "http://u:p@h"}, "invalid_option"),
           ({"env": {"X": "sk-live-abcdefghijkl"}}, "invalid_option"),
           ({"executable": "no-such-claude"}, "cli_not_installed"),
           ({"session_id": "nope"}, "invalid_session_id")]
    for more, kind in bad:
        with pytest.raises(BackendError) as caught:
            backend.start_session({**good, **more})
        assert caught.value.kind == kind, more
    with pytest.raises(BackendError) as caught:
        backend.start_session({**good, "executable": "no-such-claude"})
    assert "npm install -g @anthropic-ai/claude-code" in str(caught.value)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(BackendError) as caught:
        backend.start_session(good)
    assert caught.value.kind == "missing_key"
    assert backend.start_session({**good, "auth": "cli"})["session_id"] is None
    assert not (tmp_path / "claude").exists()  # nothing written by a start


def test_a_worker_without_the_cli_fails_the_turn_before_dispatch(
        claude: str, fake: FakeLLM, tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(claude, fake, tmp_path))
    session["opts"]["executable"] = str(tmp_path / "gone" / "claude")  # another host
    with pytest.raises(BackendError) as caught:
        backend.prompt(session, "hi")
    assert caught.value.kind == "cli_not_installed"
    assert fake.requests == []


def test_argv_never_holds_the_prompt_or_the_key(fake: FakeLLM, tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(
        str(FAKE_CLI), fake, tmp_path, env={"HOME": str(tmp_path), "FAKE_CLI_MODE": "argv"},
        allowed_tools=["Bash(echo *)", "Read"], max_turns=3, permission_mode="acceptEdits"))
    session["session_id"] = "0b6c8f4e-3d1a-4c47-9f8e-2a4b6c8d0e1f"
    outcome, _ = turn(backend, session, "my secret plan")
    assert isinstance(outcome, Response)
    shown = json.loads(outcome.text)
    argv, env = shown["argv"], shown["env"]
    assert shown["prompt"] == "my secret plan"
    assert argv[:5] == ["-p", "--output-format", "stream-json", "--verbose",
                        "--include-partial-messages"]
    for flag in ("--model", "--resume", "--max-turns", "--permission-mode", "--allowedTools"):
        assert flag in argv
    assert "my secret plan" not in argv and SECRET not in " ".join(argv)
    # the key reached the CLI's environment, and the text the CLI printed was redacted
    assert env["ANTHROPIC_API_KEY"] == "[redacted]" and env["ANTHROPIC_BASE_URL"] == fake.url
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "claude")
    assert "HYPHA_TEST_MARKER" not in env  # the worker's environment is not inherited


@pytest.mark.parametrize(("mode", "reason"), [("crash", "cli_exit"),
                                              ("malformed", "malformed_stream")])
def test_a_cli_that_crashes_or_garbles_fails_the_turn(fake: FakeLLM, tmp_path: Path,
                                                      mode: str, reason: str) -> None:
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(
        str(FAKE_CLI), fake, tmp_path, env={"HOME": str(tmp_path), "FAKE_CLI_MODE": mode}))
    events = drain(backend, session, "hi")
    assert events[0].kind == "session" and events[-1].data["reason"] == reason
    if mode == "crash":
        assert events[-1].data["exit_code"] == -9


def test_cancel_kills_a_hanging_cli_and_its_children(fake: FakeLLM, tmp_path: Path) -> None:
    backend = ClaudeCodeBackend()
    pids_file = tmp_path / "pids"
    session = backend.start_session(options(
        str(FAKE_CLI), fake, tmp_path, env={"HOME": str(tmp_path), "FAKE_CLI_MODE": "hang",
                                            "FAKE_CLI_PIDS": str(pids_file)}))
    events, _ = backend.prompt(session, "hi")
    assert next(events).kind == "session"
    assert next(events).data == {"text": "working"}
    pids = [int(p) for p in pids_file.read_text().split()]
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


def test_an_agent_on_claude_code_resumes_and_never_shows_its_key(
        claude: str, sqlite_url: str, fake: FakeLLM, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    hypha = embedded(sqlite_url)
    try:
        hypha.agents.start(Assistant, name="coder", backend=ClaudeCodeBackend,
                           llm=options(claude, fake, tmp_path))
        fake.script(Reply.text("Hello from the model", chunks=3), Reply.text("Again"))
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


def test_a_line_of_an_unexpected_shape_is_malformed(fake: FakeLLM, tmp_path: Path) -> None:
    script = tmp_path / "odd-cli"
    script.write_text("#!/bin/sh\ncat >/dev/null\n"
                      "echo '{\"type\": \"assistant\", \"message\": \"not an object\"}'\n")
    script.chmod(0o755)
    backend = ClaudeCodeBackend()
    session = backend.start_session(options(str(script), fake, tmp_path))
    events = drain(backend, session, "hi")
    assert [e.kind for e in events] == ["error"]
    assert events[0].data["reason"] == "malformed_stream"

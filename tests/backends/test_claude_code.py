"""ClaudeCodeBackend: what only the ``claude`` CLI does (an allowed tool, a refused
checkpoint, a line of an unexpected shape). What it shares with Codex is the contract in
test_cli_contract.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hypha_celery.backends import BackendError, ClaudeCodeBackend, Response
from tests.backends.cli_support import CLAUDE, Checkpoints, drain, turn
from tests.fakes.clis import installed_clis
from tests.fakes.llm_server import FakeLLM, Reply


@pytest.fixture(scope="module")
def claude() -> str:
    return str(installed_clis() / "claude")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLAUDE.key_env, CLAUDE.secret)


def options(claude: str, fake: FakeLLM, tmp_path: Path, **more: Any) -> dict[str, Any]:
    return CLAUDE.options(claude, fake, tmp_path, **more)


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

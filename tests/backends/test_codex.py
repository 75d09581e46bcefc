"""CodexBackend: what only the ``codex`` CLI does (its command tool). What it shares with
Claude Code is the contract in test_cli_contract.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypha_celery.backends import CodexBackend, Response
from tests.backends.cli_support import CODEX, turn
from tests.fakes.clis import installed_clis
from tests.fakes.llm_server import FakeLLM, Reply


@pytest.fixture(scope="module")
def codex() -> str:
    return str(installed_clis() / "codex")


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CODEX.key_env, CODEX.secret)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "codex").mkdir()
    return tmp_path


def test_a_tool_turn_runs_a_command(codex: str, fake: FakeLLM, home: Path) -> None:
    backend = CodexBackend()
    session = backend.start_session(CODEX.options(codex, fake, home))
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

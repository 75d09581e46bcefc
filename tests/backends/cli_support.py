"""What the Claude Code and Codex backend tests share: a turn as the agents runtime runs
it (with a checkpoint callback), the texts the fake server was sent, leak checks, and
each CLI described for the contract both keep (:class:`Cli`, tests/backends/
test_cli_contract.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypha_celery.backends import (
    Backend,
    ClaudeCodeBackend,
    CodexBackend,
    Response,
    Session,
    TurnError,
    collect,
)
from tests.fakes.clis import FAKE_CLI
from tests.fakes.llm_server import FakeLLM, Reply


@dataclass
class Checkpoints:
    """A checkpoint callback that records the ids (and can refuse them)."""

    ids: list[str] = field(default_factory=list)
    refuse: Exception | None = None

    def __call__(self, session_id: str) -> None:
        self.ids.append(session_id)
        if self.refuse is not None:
            raise self.refuse


def turn(backend: Backend, session: Session, prompt: str,
         checkpoint: Checkpoints | None = None) -> tuple[Response | TurnError, Session]:
    """One turn: prompt, collect, checkpoint_session on an acknowledged id,
    update_session on success."""
    checkpoint = checkpoint if checkpoint is not None else Checkpoints()
    events, session = backend.prompt(session, prompt, checkpoint)
    outcome = collect(prompt, events)
    for sid in checkpoint.ids[:1]:
        session = backend.checkpoint_session(session, sid)
    if isinstance(outcome, Response):
        session = backend.update_session(session, outcome.terminal.data)
    return outcome, session


def kinds(outcome: Response | TurnError) -> list[str]:
    events = outcome.events if isinstance(outcome, Response) else ()
    return [e.kind for e in events]


def user_texts(fake: FakeLLM) -> Iterator[str]:
    """Every text block or string content of the last request's messages / input."""
    body = fake.requests[-1].body
    for item in body.get("messages") or body.get("input") or []:
        content = item.get("content", "")
        if isinstance(content, str):
            yield content
            continue
        for block in content or []:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def dumps(*things: Any) -> str:
    return " ".join(json.dumps(t, default=repr) if not isinstance(t, str) else t
                    for t in things)


def drain(backend: Backend, session: Session, prompt: str,
          checkpoint: Checkpoints | None = None) -> list[Any]:
    """Every event of one turn, in order (for failed turns, whose outcome keeps none)."""
    events, _ = backend.prompt(session, prompt, checkpoint)
    return list(events)


@dataclass(frozen=True)
class Cli:
    """One CLI backend as the contract drives it: how to start it against the fake
    server, and what it must show where the two CLIs differ."""

    name: str  # the executable (in installed_clis()) and the test id
    backend: type[Backend]
    key_env: str
    secret: str
    state_dir: str  # the CLI's own directory under the test's home
    makes_state_dir: bool  # the test makes it (the CLI needs it to exist)
    settings: Callable[[FakeLLM, Path], dict[str, Any]]  # URL, model, state directory
    dialect: dict[str, str]  # the fake CLI's environment for this CLI's lines
    #: the conversation: two replies, the first turn's event kinds and usage
    replies: Callable[[], tuple[Reply, Reply]]
    first_kinds: list[str]
    first_usage: dict[str, int]
    check_totals: Callable[[Response, Response, Session], None]
    key_header: Callable[[str], tuple[str, str]]  # secret -> (header, value) sent
    bad_options: list[tuple[dict[str, Any], str]]  # -> BackendError kind
    install_hint: str
    cli_auth: dict[str, Any] | None  # options that need no key (the CLI's own login)
    argv_options: dict[str, Any]
    check_argv: Callable[[list[str], Session, FakeLLM], None]
    argv_env: Callable[[FakeLLM, Path], dict[str, str]]  # what the CLI's environment holds

    def options(self, executable: str, fake: FakeLLM, home: Path, **more: Any
                ) -> dict[str, Any]:
        return {"executable": executable, "cwd": str(home), "env": {"HOME": str(home)},
                **self.settings(fake, home), **more}

    def fake_cli(self, fake: FakeLLM, home: Path, mode: str,
                 env: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
        """Options that run the fake CLI (tests/fakes/bin/fake-cli) in ``mode``."""
        return self.options(str(FAKE_CLI), fake, home, env={
            "HOME": str(home), "FAKE_CLI_MODE": mode, **self.dialect, **(env or {})}, **more)


def _claude_totals(first: Response, second: Response, session: Session) -> None:
    assert first.terminal.data["cost_usd"] > 0 and first.terminal.data["model"] == "claude-test"
    assert 0 < second.terminal.data["cost_usd"] < session["totals"]["cost_usd"]


def _codex_totals(first: Response, second: Response, session: Session) -> None:
    # the CLI reports the thread's running total; the turn reports its own share
    assert second.usage is not None and second.usage["input_tokens"] == 30
    assert session["totals"]["usage"]["input_tokens"] == 40


def _claude_argv(argv: list[str], session: Session, fake: FakeLLM) -> None:
    assert argv[:5] == ["-p", "--output-format", "stream-json", "--verbose",
                        "--include-partial-messages"]
    for flag in ("--model", "--resume", "--max-turns", "--permission-mode", "--allowedTools"):
        assert flag in argv


def _codex_argv(argv: list[str], session: Session, fake: FakeLLM) -> None:
    assert argv[:4] == ["exec", "resume", "--json", "--skip-git-repo-check"]
    assert argv[-2:] == [session["session_id"], "-"]
    assert 'sandbox_mode="workspace-write"' in argv
    assert f'model_providers.hypha.base_url="{fake.openai_url}"' in argv


CLAUDE = Cli(
    name="claude", backend=ClaudeCodeBackend, key_env="ANTHROPIC_API_KEY",
    secret="sk-ant-SENTINEL-claude-0123456789", state_dir="claude", makes_state_dir=False,
    settings=lambda fake, home: {"base_url": fake.url, "model": "claude-test",
                                 "config_dir": str(home / "claude")},
    dialect={},
    replies=lambda: (Reply.text("Hello there", chunks=2, usage=(10, 4, 3, 2)),
                     Reply.text("Bye")),
    first_kinds=["session", "text", "text", "usage", "result"],
    first_usage={"input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 3,
                 "cache_write_tokens": 2},
    check_totals=_claude_totals,
    key_header=lambda secret: ("x-api-key", secret),
    bad_options=[({"bogus": 1}, "invalid_option"), ({"permission_mode": "yolo"}, "invalid_option"),
                 ({"max_turns": 0}, "invalid_option"),
                 ({"base_url": "http://u:p@h"}, "invalid_option"),
                 ({"env": {"X": "sk-live-abcdefghijkl"}}, "invalid_option"),
                 ({"executable": "no-such-claude"}, "cli_not_installed"),
                 ({"session_id": "nope"}, "invalid_session_id")],
    install_hint="npm install -g @anthropic-ai/claude-code",
    cli_auth={"auth": "cli"},
    argv_options={"allowed_tools": ["Bash(echo *)", "Read"], "max_turns": 3,
                  "permission_mode": "acceptEdits"},
    check_argv=_claude_argv,
    argv_env=lambda fake, home: {"ANTHROPIC_API_KEY": "[redacted]",
                                 "ANTHROPIC_BASE_URL": fake.url,
                                 "CLAUDE_CONFIG_DIR": str(home / "claude")},
)

CODEX = Cli(
    name="codex", backend=CodexBackend, key_env="OPENAI_API_KEY",
    secret="sk-SENTINEL-codex-0123456789", state_dir="codex", makes_state_dir=True,
    settings=lambda fake, home: {"base_url": fake.openai_url, "model": "fake-model",
                                 "codex_home": str(home / "codex"),
                                 "config": {"web_search": "disabled"}},
    dialect={"FAKE_CLI_DIALECT": "codex"},
    replies=lambda: (Reply.text("Hello there", usage=(10, 4, 3, 0)),
                     Reply.text("Bye", usage=(30, 2, 0, 0))),
    first_kinds=["session", "notice", "text", "usage", "result"],
    first_usage={"input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 3,
                 "cache_write_tokens": 0},
    check_totals=_codex_totals,
    key_header=lambda secret: ("authorization", f"Bearer {secret}"),
    bad_options=[({"bogus": 1}, "invalid_option"), ({"sandbox": "none"}, "invalid_option"),
                 ({"config": {"model_provider": "x"}}, "invalid_option"),
                 ({"timeout": 0}, "invalid_option"), ({"extra_args": "--x"}, "invalid_option"),
                 ({"executable": "no-such-codex"}, "cli_not_installed")],
    install_hint="npm install -g @openai/codex",
    cli_auth=None,
    argv_options={"sandbox": "workspace-write"},
    check_argv=_codex_argv,
    argv_env=lambda fake, home: {"HYPHA_CODEX_API_KEY": "[redacted]",
                                 "CODEX_HOME": str(home / "codex")},
)

CLIS = [CLAUDE, CODEX]

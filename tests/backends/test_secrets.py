"""A provider key never shows (issue 14, point 9), for every backend: an agent answers one
turn and fails the next with the key echoed by the provider; then the key is looked for in
the event log, the stored agent row (session included), status and snapshot dumps, the
logs, the live items, the Celery messages published (their arguments and the
``argsrepr`` / ``kwargsrepr`` Flower shows) and the failed turn's exception text."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from celery.signals import before_task_publish

from hypha_celery import Hypha
from hypha_celery.agents import Agent, NoReply, Response, TurnError
from hypha_celery.backends import (
    AnthropicBackend,
    Backend,
    BackendEvent,
    ClaudeCodeBackend,
    CodexBackend,
    MockBackend,
    OpenAIBackend,
)
from hypha_celery.errors import TurnFailed
from hypha_celery.live import agent_topic
from hypha_celery.store import agents as table
from tests.fakes.clis import installed_clis
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, embedded

KEY = "sk-SENTINEL-every-backend-0123456789abcdef"
KEY_ENV = "HYPHA_TEST_SENTINEL_KEY"


class Keeper(Agent):
    """Hands its ``llm`` start option to the backend; counts answers and errors."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {"answers": 0, "errors": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "answers": state["answers"] + 1})

    def handle_error(self, ref: str, error: TurnError, state: Any) -> NoReply:
        return NoReply({**state, "errors": state["errors"] + 1})


@dataclass(frozen=True)
class Rig:
    """How to run one backend against the local provider: its start options, and what the
    provider answers (the second answer is a failure quoting the key)."""

    backend: type[Backend]
    options: Callable[[FakeLLM], dict[str, Any]]
    replies: tuple[Reply, ...] = ()
    #: what the provider answers once the script is used up (a CLI retries a failure)
    default: Reply | None = None


def _mock(fake: FakeLLM) -> dict[str, Any]:
    return {"scripts": [[BackendEvent.new("text", {"text": "hi"}),
                         BackendEvent.new("result", {"text": "hi"})],
                        MockBackend.raising("provider said no")]}


def _cli(fake: FakeLLM, name: str, base_url: str) -> dict[str, Any]:
    home = tempfile.mkdtemp(prefix="hypha-secrets-")
    return {"executable": str(installed_clis() / name), "base_url": base_url,
            "model": "fake-model", "key_env": KEY_ENV, "cwd": home, "env": {"HOME": home},
            ("config_dir" if name == "claude" else "codex_home"): f"{home}/store"}


RIGS: dict[str, Rig] = {
    "mock": Rig(MockBackend, _mock),
    "openai": Rig(OpenAIBackend, lambda f: {"model": "gpt-test", "base_url": f.openai_url,
                                            "key_env": KEY_ENV},
                  (Reply.text("hello", chunks=2), Reply.error(401, message=f"bad key {KEY}"))),
    "openai-chat": Rig(OpenAIBackend, lambda f: {"model": "gpt-test", "api": "chat",
                                                 "base_url": f.openai_url, "key_env": KEY_ENV},
                       (Reply.text("hello", chunks=2),
                        Reply.error(429, retry_after="1", message=f"slow down {KEY}"))),
    "anthropic": Rig(AnthropicBackend, lambda f: {"model": "claude-test", "base_url": f.url,
                                                  "key_env": KEY_ENV},
                     (Reply.text("hello", chunks=2),
                      Reply.stream_error(message=f"overloaded for {KEY}"))),
    "claude_code": Rig(ClaudeCodeBackend, lambda f: _cli(f, "claude", f.url),
                       (Reply.text("hello", chunks=2),),
                       Reply.error(400, message=f"bad request from {KEY}")),
    "codex": Rig(CodexBackend, lambda f: _cli(f, "codex", f.openai_url),
                 (Reply.text("hello"),), Reply.error(400, message=f"bad request from {KEY}")),
}


@pytest.fixture
def published() -> Iterator[list[str]]:
    """Every Celery message published while the test runs, as Flower would see it."""
    seen: list[str] = []

    def record(sender: Any = None, body: Any = None, headers: Any = None,
               **kwargs: Any) -> None:
        seen.append(json.dumps({"body": body, "headers": headers}, default=repr))

    before_task_publish.connect(record, weak=False)
    yield seen
    before_task_publish.disconnect(record)


@pytest.mark.parametrize("name", sorted(RIGS))
def test_the_key_shows_nowhere(name: str, sqlite_url: str, fake: FakeLLM,
                               published: list[str], caplog: pytest.LogCaptureFixture,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    rig = RIGS[name]
    monkeypatch.setenv(KEY_ENV, KEY)
    caplog.set_level(logging.DEBUG)
    fake.script(*rig.replies)
    hypha = embedded(sqlite_url)
    if rig.default is not None:
        fake.default = rig.default
    try:
        dumps = run_turns(hypha, rig, fake)
    finally:
        hypha.close()
    dumps += [caplog.text, *published]
    leaks = [dump[:200] for dump in dumps if KEY in dump]
    assert leaks == []
    if rig.replies:  # the key did reach the provider, so it was there to leak
        headers = fake.requests[-1].headers
        assert KEY in headers.get("authorization", "") + headers.get("x-api-key", "")


def run_turns(hypha: Hypha, rig: Rig, fake: FakeLLM) -> list[str]:
    hypha.agents.start(Keeper, name="keeper", backend=rig.backend, llm=rig.options(fake))
    with hypha.live.subscribe(agent_topic("keeper"), timeout=WAIT) as live:
        assert hypha.agents.ask("keeper", "hello", timeout=WAIT).text
        with pytest.raises(TurnFailed) as failed:
            hypha.agents.ask("keeper", "again", timeout=WAIT)
        items = [next(live), next(live)]  # the first turn's first items at least
    status = hypha.agents.status("keeper")
    assert status.agent_state == {"answers": 1, "errors": 1}
    info = hypha.agents.whereis("keeper")
    assert info is not None
    return [str(failed.value), repr(failed.value), repr(status), str(status),
            repr(hypha.agents.runtime_snapshot("keeper")),
            json.dumps(table.read(hypha.store, "keeper"), default=repr),
            json.dumps([(e.kind, e.data) for e in hypha.store.events(info.incarnation)],
                       default=repr),
            json.dumps(items)]

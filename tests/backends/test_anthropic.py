"""AnthropicBackend: what is Anthropic's own (thinking), and a whole agent on it."""

from __future__ import annotations

import json

import pytest

from hypha_celery.backends import AnthropicBackend, Response
from tests.backends.hosted_support import KEY, options, through_agents, turn
from tests.fakes.llm_server import FakeLLM, Reply


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


def test_thinking_is_counted_and_never_kept(fake: FakeLLM) -> None:
    backend = AnthropicBackend()
    session = backend.start_session(options(fake, "messages", thinking_budget=1024,
                                            max_output_tokens=2048))
    fake.script(Reply.thinking("a private chain of thought", text="the answer"))
    outcome, session = turn(backend, session, "think")
    assert isinstance(outcome, Response) and outcome.text == "the answer"
    body = fake.requests[-1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["max_tokens"] == 2048
    assert [e.data for e in outcome.events if e.kind == "reasoning"] == [{"chars": 26}]
    assert "private" not in json.dumps([e.to_json() for e in outcome.events])
    assert "private" not in json.dumps(session)


def test_max_tokens_has_a_default(fake: FakeLLM) -> None:
    backend = AnthropicBackend()
    session = backend.start_session(options(fake, "messages", model="anthropic:claude-x"))
    turn(backend, session, "hi")
    body = fake.requests[-1].body
    assert (body["max_tokens"], body["model"]) == (4096, "claude-x")


def test_an_agent_on_anthropic_answers_and_never_shows_its_key(
        sqlite_url: str, fake: FakeLLM, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-SENTINEL-anthropic-agent-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    through_agents(sqlite_url, fake, "messages", caplog, secret)

"""OpenAIBackend: what is OpenAI's own (the API choice), and a whole agent on it."""

from __future__ import annotations

import pytest

from hypha_celery.backends import OpenAIBackend, Response
from tests.backends.hosted_support import KEY, options, through_agents, turn
from tests.fakes.llm_server import FakeLLM, Reply


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def test_responses_by_default_chat_on_request(fake: FakeLLM) -> None:
    backend = OpenAIBackend()
    routes = []
    for model_opts in ({"model": "gpt-test"}, {"model": "gpt-test", "api": "chat"},
                       {"model": "openai-chat:llama3:8b"}, {"model": "openai:gpt-x"}):
        session = backend.start_session({**options(fake, "responses"), **model_opts})
        outcome, _ = turn(backend, session, "hi")
        assert isinstance(outcome, Response)
        routes.append((fake.requests[-1].path, fake.requests[-1].body["model"]))
    assert routes == [("/v1/responses", "gpt-test"), ("/v1/chat/completions", "gpt-test"),
                      ("/v1/chat/completions", "llama3:8b"), ("/v1/responses", "gpt-x")]


def test_options_reach_the_request(fake: FakeLLM) -> None:
    backend = OpenAIBackend()
    session = backend.start_session(options(fake, "responses", max_output_tokens=33,
                                            temperature=0.5, reasoning_effort="low"))
    fake.script(Reply.thinking("private", text="fine"))
    outcome, _ = turn(backend, session, "hi")
    assert isinstance(outcome, Response) and outcome.text == "fine"
    body = fake.requests[-1].body
    assert (body["max_output_tokens"], body["temperature"], body["reasoning"]) == (
        33, 0.5, {"effort": "low"})
    assert [e.data for e in outcome.events if e.kind == "reasoning"] == [{"chars": 7}]


def test_an_agent_on_openai_answers_and_never_shows_its_key(
        sqlite_url: str, fake: FakeLLM, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-SENTINEL-openai-agent-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    through_agents(sqlite_url, fake, "responses", caplog, secret)

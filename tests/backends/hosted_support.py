"""Driving a hosted-model backend (OpenAI, Anthropic) turn by turn against the fake server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery.agents import Agent, NoReply
from hypha_celery.backends import (
    AnthropicBackend,
    HostedBackend,
    OpenAIBackend,
    Response,
    Session,
    TurnError,
    collect,
)
from hypha_celery.errors import TurnFailed
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, embedded

KEY = "sk-test-hosted-0123456789"
VARIANTS: dict[str, tuple[type[HostedBackend], dict[str, Any]]] = {
    "responses": (OpenAIBackend, {"model": "gpt-test"}),
    "chat": (OpenAIBackend, {"model": "gpt-test", "api": "chat"}),
    "messages": (AnthropicBackend, {"model": "claude-test"}),
}
SEARCH_SPEC = {"id": "kb.search", "description": "Search the knowledge base",
               "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}


def options(fake: FakeLLM, api: str, **more: Any) -> dict[str, Any]:
    cls, base = VARIANTS[api]
    url = fake.url if cls is AnthropicBackend else fake.openai_url
    return {**base, "base_url": url, **more}


def started(fake: FakeLLM, api: str, **more: Any) -> tuple[HostedBackend, Session]:
    backend = VARIANTS[api][0]()
    return backend, backend.start_session(options(fake, api, **more))


def turn(backend: HostedBackend, session: Session,
         prompt: str) -> tuple[Response | TurnError, Session]:
    """One turn as the agents runtime runs it: prompt, collect, update on success."""
    events, session = backend.prompt(session, prompt)
    outcome = collect(prompt, events)
    if isinstance(outcome, Response):
        session = backend.update_session(session, outcome.terminal.data)
    return outcome, session


def sent_messages(fake: FakeLLM) -> Iterator[str]:
    """The texts of every message of the last request but the system prompt, in order,
    whatever the API."""
    body = fake.requests[-1].body
    items = body.get("input") or body.get("messages") or []
    for item in items:
        if item.get("role") == "system":
            continue
        content = item.get("content", item.get("output", ""))
        if isinstance(content, list):
            for block in content:
                yield str(block.get("text", block.get("content", block.get("type"))))
        else:
            yield str(content if content else item.get("type", item.get("role")))


class Assistant(Agent):
    """Passes its ``llm`` start option to the backend; counts answers."""

    def init_agent(self, opts: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return dict(opts["llm"]), {"answers": 0}

    def handle_response(self, ref: str, response: Response, state: Any) -> NoReply:
        return NoReply({**state, "answers": state["answers"] + 1})


def through_agents(sqlite_url: str, fake: FakeLLM, api: str,
                   caplog: pytest.LogCaptureFixture, secret: str) -> None:
    """Start an agent on the backend in an embedded Hypha and ask it: once answered by the
    fake, once failing with the key echoed in the error body. The key shows nowhere."""
    caplog.set_level(logging.DEBUG)
    hypha = embedded(sqlite_url)
    try:
        backend = VARIANTS[api][0]
        hypha.agents.start(Assistant, name="assistant", backend=backend,
                           llm=options(fake, api))
        fake.script(Reply.text("Hello from the model", chunks=3),
                    Reply.error(401, message=f"invalid api key {secret}"))
        assert hypha.agents.ask("assistant", "hi", timeout=WAIT).text == "Hello from the model"
        with pytest.raises(TurnFailed) as caught:
            hypha.agents.ask("assistant", "again", timeout=WAIT)
        status = hypha.agents.status("assistant")
        snapshot = hypha.agents.runtime_snapshot("assistant")
        assert status.agent_state == {"answers": 1}
        info = hypha.agents.whereis("assistant")
        assert info is not None
        stored = [(e.kind, e.data) for e in hypha.store.events(info.incarnation)]
    finally:
        hypha.close()
    assert caught.value.reason == "authentication"
    auth = fake.requests[-1].headers
    assert secret in auth.get("authorization", "") + auth.get("x-api-key", "")
    for dump in (str(caught.value), repr(caught.value), repr(status), repr(snapshot),
                 str(stored), caplog.text):
        assert secret not in dump

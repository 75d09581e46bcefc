"""Calls through the provider modules to the fake model server, one API at a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypha_celery.backends import BackendError, BackendEvent
from hypha_celery.backends.llm.ref import ModelRef, provider
from hypha_celery.backends.llm.stream import LLMStream
from hypha_celery.backends.llm.types import LLMResult, ToolDecl
from tests.fakes.llm_server import FakeLLM

KEY = "sk-test-key-0123456789"
USER = ({"role": "user", "content": "hi"},)
#: the three APIs: model reference, route the fake sees
APIS = {"responses": "openai:gpt-test", "chat": "openai-chat:gpt-test",
        "messages": "anthropic:claude-test"}
ROUTES = {"responses": "/v1/responses", "chat": "/v1/chat/completions",
          "messages": "/v1/messages"}
SEARCH = ToolDecl("kb.search", "Search the knowledge base",
                  {"type": "object", "properties": {"q": {"type": "string"}},
                   "required": ["q"]})


@dataclass
class Outcome:
    events: list[BackendEvent]
    result: LLMResult | None = None
    error: BackendError | None = None

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def text(self) -> str:
        return "".join(e.data["text"] for e in self.events if e.kind == "text")


def base_url(fake: FakeLLM, api: str) -> str:
    return fake.url if api == "messages" else fake.openai_url


def open_call(fake: FakeLLM, api: str, messages: tuple[dict[str, Any], ...] = USER,
              tools: tuple[ToolDecl, ...] = (), key: str = KEY, url: str | None = None,
              timeout: float = 10.0, **options: Any) -> LLMStream:
    ref = ModelRef.parse(APIS[api])
    request = ref.request(messages, tools, **options)
    return provider(ref.provider).open_stream(
        request, key=key, base_url=url or base_url(fake, api), timeout=timeout)


def call(fake: FakeLLM, api: str, **kwargs: Any) -> Outcome:
    """Open and read one call to its end; a ``BackendError`` is caught into the outcome."""
    events: list[BackendEvent] = []
    try:
        with open_call(fake, api, **kwargs) as stream:
            for event in stream:
                events.append(event)
            return Outcome(events, stream.result)
    except BackendError as exc:
        return Outcome(events, None, exc)


def sent(fake: FakeLLM) -> dict[str, Any]:
    """The body of the last request the fake got."""
    body = fake.requests[-1].body
    assert isinstance(body, dict)
    return body

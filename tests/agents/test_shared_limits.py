"""Agent turns draw on the app's model rate limits: every backend instance the agents'
runtime builds is bound to ``Hypha.llm``'s services (issue 14, point 6)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.backends import OpenAIBackend
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.backends.llm.ratelimit import Limit, MemoryLimiter
from hypha_celery.errors import TurnFailed
from tests.backends.hosted_support import Assistant
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def test_a_turn_past_the_app_limit_fails_rate_limited_without_a_request(
        sqlite_url: str, fake: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-limits-0123456789")
    limiter = MemoryLimiter({"openai": Limit(rpm=1)})
    hypha = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True),
                  llm=LLMClient(limiter=limiter, max_wait=0))
    try:
        hypha.agents.start(Assistant, name="limited", backend=OpenAIBackend,
                           llm={"model": "gpt-test", "base_url": fake.openai_url})
        fake.script(Reply.text("first"))
        assert hypha.agents.ask("limited", "one", timeout=WAIT).text == "first"
        with pytest.raises(TurnFailed) as refused:
            hypha.agents.ask("limited", "two", timeout=WAIT)
    finally:
        hypha.close()
    assert refused.value.reason == "rate_limited"
    assert len(fake.requests) == 1  # the second turn never reached the provider
    assert limiter.stats()["refused"] == 1

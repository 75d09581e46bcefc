"""``ctx.llm`` and a provider's thinking (issue 26 point 4): a call whose stream reported
thinking writes ``thinking.started`` / ``thinking.completed`` (a character count, never
the text) right after its ``model.call.completed``, on every provider of the fake model
server; a call without thinking writes none; a replay calls nothing and writes none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Finish, Graph, Hypha, Next, NodeContext, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.events import payloads as ev
from hypha_celery.rerun import rerun
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT

KEY = "sk-test-thinking-0123456789"
THOUGHT = "THOUGHT-never-stored-0123"


@pytest.fixture
def hypha(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Hypha, FakeLLM]]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeLLM() as fake:
        h = Hypha(Settings(broker_url="memory://", result_backend="cache+memory://",
                           store_url=sqlite_url, embedded=True),
                  llm=LLMClient(base_urls={"openai": fake.openai_url, "anthropic": fake.url}))
        try:
            yield h, fake
        finally:
            h.close()


def graph(model: str) -> Graph:
    def ask(state: dict[str, Any], inp: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"answer": ctx.llm(model, [{"role": "user", "content": "hi"}]).text}

    def policy(ctx: Any) -> Any:
        return Next("ask", ctx.input) if ctx.step == 0 else Finish(ctx.state["answer"])
    return Graph(id="think", nodes={"ask": ask}, decision_policy=policy)


@pytest.mark.parametrize(("model", "raw"), [
    ("anthropic:claude-test", False), ("openai:gpt-test", False), ("openai:gpt-test", True),
    ("openai-chat:gpt-test", False)])
def test_thinking_is_written_as_counts_next_to_the_model_call(
        hypha: tuple[Hypha, FakeLLM], model: str, raw: bool) -> None:
    h, fake = hypha
    fake.script(Reply.thinking(THOUGHT, text="fine", raw=raw))
    h.register(graph(model))
    run = h.start("think", {})
    assert run.wait(WAIT) == "fine"
    events = run.events()
    kinds = [e.kind for e in events if e.kind.startswith(("model.call.", "thinking."))]
    assert kinds == ["model.call.started", "model.call.completed", "thinking.started",
                     "thinking.completed"]
    (done,) = [e.body for e in events if e.kind == "thinking.completed"]
    assert isinstance(done, ev.ThinkingCompleted)
    assert (done.node, done.step, done.mode, done.chars, done.summary) == \
        ("ask", None, "summary", len(THOUGHT), None)
    assert THOUGHT not in json.dumps([e.data for e in events])
    fake.stop()
    assert rerun(graph(model), events).ok


def test_a_call_without_thinking_writes_none(hypha: tuple[Hypha, FakeLLM]) -> None:
    h, fake = hypha
    fake.script(Reply.text("plain"))
    h.register(graph("anthropic:claude-test"))
    run = h.start("think", {})
    assert run.wait(WAIT) == "plain"
    assert not [e for e in run.events() if e.kind.startswith("thinking.")]

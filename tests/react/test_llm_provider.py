"""The ReAct workflow on a real provider: LLMProvider over the official SDKs and the fake
model server (tool call, then the answer), recorded through ctx.llm and replayable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.backends.llm.types import LLMResult, ToolCall
from hypha_celery.react import HAPPY_PATH, LLMProvider, model_decides, react_graph
from hypha_celery.rerun import rerun
from hypha_celery.runtime.config import IO_QUEUE
from hypha_celery.tools import ToolRegistry, ToolSpec
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT

KEY = "sk-test-react-0123456789"


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(ToolSpec(id="kb.search", description="Search the knowledge base",
                          side_effect="read",
                          input_schema={"type": "object", "properties": {"q": {"type": "string"}}}),
                 lambda args: {"answer": f"hypha is a framework ({args['q']})"})
    return reg


@pytest.fixture
def setup(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Hypha, FakeLLM]]:
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


@pytest.mark.parametrize("model", ["openai:gpt-test", "openai-chat:gpt-test",
                                   "anthropic:claude-test"])
def test_react_runs_a_tool_then_answers_on_a_real_provider(
        setup: tuple[Hypha, FakeLLM], model: str) -> None:
    h, fake = setup
    fake.script(Reply.tool_call("kb_search", {"q": "hypha"}, call_id="call_3"),
                Reply.text("hypha is a framework."))
    graph = react_graph(LLMProvider(model, max_output_tokens=200), registry(),
                        verify=model_decides)
    assert graph.nodes["reason"].models == (model,)
    h.register(graph)
    run = h.start("react", {"question": "what is hypha?"})
    assert run.wait(WAIT) == {"answer": "hypha is a framework.", "iterations": 2}
    events = run.events()
    assert list(h.store.get(run.id)["fsm"]["path"])[:len(HAPPY_PATH) - 3] == \
        list(HAPPY_PATH[:len(HAPPY_PATH) - 3])
    first, second = (json.dumps(r.body) for r in fake.requests)
    assert "kb_search" in first and "what is hypha?" in first
    assert "hypha is a framework (hypha)" in second  # the observation went back
    done = [e.payload for e in events if e.type == "model.call.completed"]
    assert [d["model"] for d in done] == [model, model]
    assert all(d["usage"]["output_tokens"] == 5 for d in done)
    assert "what is hypha?" not in json.dumps(
        [e.payload for e in events if e.type.startswith("model.call.")])
    fake.stop()
    report = rerun(react_graph(LLMProvider(model, max_output_tokens=200), registry(),
                               verify=model_decides), events)
    assert report.ok, report.divergence


def test_the_reason_node_goes_to_the_io_queue(setup: tuple[Hypha, FakeLLM]) -> None:
    from hypha_celery.runtime.coordinator import node_call
    from hypha_celery.runtime.protocol import NodeMessage

    h, _ = setup
    graph = react_graph(LLMProvider("openai:gpt-test"), registry())
    assert node_call(h._rt, graph, NodeMessage("r", "r.1", "reason", None)).queue == IO_QUEUE


def test_replies_become_actions() -> None:
    action = LLMProvider.action
    assert action(LLMResult("", (ToolCall("c1", "kb.search", {"q": "x"}),))) == {
        "action": "tool", "tool": "kb.search", "input": {"q": "x"}, "call_id": "c1"}
    assert action(LLMResult("Paris")) == {"action": "finish", "output": "Paris"}
    assert action(LLMResult('{"action": "human_review", "reason": "unsure"}')) == {
        "action": "human_review", "reason": "unsure"}
    assert action(LLMResult("{not json")) == {"action": "finish", "output": "{not json"}
    with pytest.raises(ValueError):
        LLMProvider("openai:x", thinking_budget=3)


def test_a_direct_call_uses_its_own_client(setup: tuple[Hypha, FakeLLM]) -> None:
    _, fake = setup
    fake.script(Reply.text("42"))
    provider = LLMProvider("openai:gpt-test",
                           client=LLMClient(base_urls={"openai": fake.openai_url}))
    request: dict[str, Any] = {"question": "6*7?", "tools": [], "memory": []}
    assert provider(request) == {"action": "finish", "output": "42"}

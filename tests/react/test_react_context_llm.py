"""ReAct's built context on a real provider: LLMProvider sends the step's built messages
(instructions, a skill, the user's memory as data, the question, the observation) over
the official SDKs to the fake model server, the catalog as function tools; a
re-execution builds the same context."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hypha_celery import Hypha, Settings
from hypha_celery.backends.llm.client import LLMClient
from hypha_celery.context import MEMORY_HEADER
from hypha_celery.memory import MemoryScope
from hypha_celery.react import LLMProvider, model_decides, react_graph
from hypha_celery.rerun import rerun
from hypha_celery.skills import SkillRegistry
from hypha_celery.tools import ToolRegistry, ToolSpec
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT

KEY = "sk-test-react-0123456789"
INSTRUCTIONS = "You are the refunds desk. Be brief."


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(ToolSpec(id="kb.search", description="Search the knowledge base",
                          side_effect="read",
                          input_schema={"type": "object", "properties": {"q": {"type": "string"}}}),
                 lambda args: {"answer": f"refunds take 5 days ({args['q']})"})
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


@pytest.fixture
def skills(tmp_path: Path) -> SkillRegistry:
    folder = tmp_path / "refunds"
    folder.mkdir()
    (folder / "SKILL.md").write_text(
        "---\nname: refunds\ndescription: Refund rules.\nversion: \"2\"\n"
        "activation: {mode: keyword, keywords: [refund]}\n---\n"
        "Never promise a refund before the lookup.\n")
    return SkillRegistry.from_dir(tmp_path)


@pytest.mark.parametrize("model", ["openai-chat:gpt-test", "anthropic:claude-test"])
def test_the_built_context_is_what_the_model_is_sent(
        setup: tuple[Hypha, FakeLLM], skills: SkillRegistry, model: str) -> None:
    h, fake = setup
    h.memory.add(MemoryScope("ana"), "preference", "ana wants her refund on her card",
                 operation_id="m1")
    fake.script(Reply.tool_call("kb_search", {"q": "refund"}, call_id="call_1"),
                Reply.text("5 days."))

    def graph() -> Any:
        return react_graph(LLMProvider(model, max_output_tokens=200), registry(),
                           verify=model_decides, instructions=INSTRUCTIONS, skills=skills,
                           memory=True)
    h.register(graph())
    run = h.start("react", {"question": "when is my refund due?"}, user_id="ana")
    assert run.wait(WAIT) == {"answer": "5 days.", "iterations": 2}
    first, second = (r.body for r in fake.requests)
    text = json.dumps(first)
    assert INSTRUCTIONS in text and "Never promise a refund" in text
    assert "ana wants her refund" in text  # recalled by the question's word "refund"
    assert "kb_search" in text  # the catalog still goes as function tools
    assert "refunds take 5 days (refund)" in json.dumps(second)  # the observation
    if model.startswith("openai-chat"):
        messages = first["messages"]
        assert [m["role"] for m in messages] == ["system", "system", "user", "user"]
        assert messages[2]["content"].startswith(MEMORY_HEADER)
        assert messages[3]["content"] == "when is my refund due?"
    events = run.events()
    hashes = [e.data["context_hash"] for e in events if e.kind == "inference.completed"]
    built = [e.data["context_hash"] for e in events if e.kind == "context.build.completed"]
    assert hashes == built and len(hashes) == 2
    fake.stop()
    report = rerun(graph(), events, memory=h.memory)
    assert report.ok, report.divergence

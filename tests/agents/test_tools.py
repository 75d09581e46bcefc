"""Governed tools for conversational agents (the tool-execution seam): a hosted-model agent
started with ``run_tools=True`` has its model's tool calls run through a GovernedRunner
within the turn, over real HTTP to the local model server, on every API; each step is an
event of the agent's stream; a denied call is an answer, not a crash; the rounds are
bounded. Without ``use_tools`` a tool call still ends the turn as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import AgentSpecError, AgentStartFailed, AgentTools, TurnFailed
from hypha_celery.backends import BackendError, OpenAIBackend
from hypha_celery.tools import ToolPolicy, ToolRegistry, ToolSpec
from tests.backends.hosted_support import KEY, SEARCH_SPEC, Assistant, options, sent_messages
from tests.fakes.llm_server import FakeLLM, Reply
from tests.runtime.support import WAIT, running

CALLS: list[Any] = []


def search(q: dict[str, Any]) -> list[str]:
    CALLS.append(q)
    return [f"article about {q['q']}"]


def registry() -> ToolRegistry:
    tools = ToolRegistry()
    tools.register(ToolSpec(id="kb.search", description="Search the knowledge base",
                            input_schema=SEARCH_SPEC["input_schema"], side_effect="read"),
                   search)
    return tools


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeLLM) -> Iterator[FakeLLM]:
    fake_server.requests.clear()
    fake_server.default = Reply.text("ok")
    yield fake_server
    assert fake_server.pending == 0, "a test left scripted replies behind"


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)


@pytest.fixture(params=["responses", "chat", "messages"])
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    CALLS.clear()
    with running(sqlite_url) as h:
        yield h


def start(hypha: Hypha, fake: FakeLLM, api: str, **more: Any) -> str:
    from tests.backends.hosted_support import VARIANTS

    hypha.agents.start(Assistant, name="helper", backend=VARIANTS[api][0],
                       llm=options(fake, api, **{"tools": [SEARCH_SPEC], "run_tools": True,
                                                  **more}))
    info = hypha.agents.whereis("helper")
    assert info is not None
    return info.incarnation


def kinds(hypha: Hypha, incarnation: str) -> list[str]:
    return [e.kind for e in hypha.store.events(incarnation)]


def test_a_tool_call_runs_governed_within_the_turn(hypha: Hypha, fake: FakeLLM,
                                                   api: str) -> None:
    hypha.agents.use_tools(AgentTools(registry()))
    incarnation = start(hypha, fake, api)
    fake.script(Reply.tool_call("kb_search", {"q": "passwords"}, call_id="call_7"),
                Reply.text("Use 'Forgot password'."))
    answer = hypha.agents.ask("helper", "how do I reset my password?", timeout=WAIT)
    assert answer.text == "Use 'Forgot password'."
    assert CALLS == [{"q": "passwords"}]
    assert json.dumps(["article about passwords"]) in list(sent_messages(fake))
    assert [e.data for e in answer.events if e.kind == "tool_result"] == [
        {"id": "call_7", "name": "kb.search", "status": "completed"}]
    stream = kinds(hypha, incarnation)
    turn = stream[stream.index("agent.turn.started"):stream.index("agent.turn.completed")]
    assert turn == ["agent.turn.started", "tool.call.requested", "tool.policy.checked",
                    "tool.call.started", "tool.call.completed"]
    completed = [e.data for e in hypha.store.events(incarnation)
                 if e.kind == "tool.call.completed"]
    assert [(c["call_id"], c["tool"], c["source"]) for c in completed] == [
        ("call_7", "kb.search", "local")]
    assert "passwords" not in json.dumps(completed)  # inputs are hashed, never recorded


def test_a_denied_call_is_the_models_answer(hypha: Hypha, fake: FakeLLM, api: str) -> None:
    hypha.agents.use_tools(AgentTools(registry(), ToolPolicy(id="none", deny=["kb.*"],
                                                             default_effect="allow")))
    incarnation = start(hypha, fake, api)
    fake.script(Reply.tool_call("kb_search", {"q": "x"}, call_id="call_1"),
                Reply.text("I may not search."))
    assert hypha.agents.ask("helper", "search x", timeout=WAIT).text == "I may not search."
    assert CALLS == []
    told = [m for m in sent_messages(fake) if "TOOL_POLICY_DENIED" in m]
    assert told and json.loads(told[0])["status"] == "denied"
    assert "tool.call.rejected" in kinds(hypha, incarnation)


def test_tool_rounds_are_bounded(hypha: Hypha, fake: FakeLLM) -> None:
    hypha.agents.use_tools(AgentTools(registry()))
    start(hypha, fake, "chat", max_tool_rounds=2)
    fake.script(*(Reply.tool_call("kb_search", {"q": str(i)}, call_id=f"c{i}")
                  for i in range(3)))
    with pytest.raises(TurnFailed) as info:
        hypha.agents.ask("helper", "loop", timeout=WAIT)
    assert info.value.reason == "tool_rounds_exhausted"
    assert len(CALLS) == 2


def test_without_governed_tools_a_tool_call_ends_the_turn(hypha: Hypha, fake: FakeLLM) -> None:
    start(hypha, fake, "chat")
    fake.script(Reply.tool_call("kb_search", {"q": "x"}, call_id="call_1"))
    answer = hypha.agents.ask("helper", "search x", timeout=WAIT)
    assert answer.terminal.data["tool_calls"] == [
        {"id": "call_1", "name": "kb.search", "arguments": {"q": "x"}}]
    assert CALLS == []


@pytest.mark.parametrize(("opts", "says"), [
    ({"run_tools": "yes"}, "run_tools must be true or false"),
    ({"max_tool_rounds": 0}, "max_tool_rounds must be an integer from 1 to 32"),
    ({"max_tool_rounds": 33}, "max_tool_rounds must be an integer from 1 to 32"),
])
def test_bad_tool_options_fail_the_start(hypha: Hypha, fake: FakeLLM, opts: dict[str, Any],
                                         says: str) -> None:
    with pytest.raises(AgentStartFailed, match="invalid_option"):
        start(hypha, fake, "chat", **opts)
    with pytest.raises(BackendError) as info:
        OpenAIBackend().start_session(options(fake, "chat", **opts))
    assert info.value.message == says


def test_use_tools_takes_agent_tools(hypha: Hypha) -> None:
    with pytest.raises(AgentSpecError, match="takes AgentTools"):
        hypha.agents.use_tools(registry())  # type: ignore[arg-type]

"""MCP tools for conversational agents: a hosted-model agent with ``run_tools=True`` and
``hypha.agents.use_tools(AgentTools(gateway.registry()))`` calls a real MCP server's
tool (a server process written with the SDK) through the same GovernedRunner as a node,
over real HTTP to the local model server; a quarantined tool is not in the registry."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hypha_celery import Hypha
from hypha_celery.agents import AgentTools
from hypha_celery.backends import OpenAIBackend
from hypha_celery.mcp import McpGateway, McpServer
from tests.backends.hosted_support import KEY, Assistant, options, sent_messages
from tests.fakes.llm_server import FakeLLM, Reply
from tests.mcp.conftest import server_id, stdio_transport
from tests.runtime.support import WAIT, running


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLM]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with FakeLLM() as server:
        yield server


@pytest.fixture
def hypha(sqlite_url: str) -> Iterator[Hypha]:
    with running(sqlite_url) as h:
        yield h


def test_an_agent_calls_an_mcp_tool_governed(hypha: Hypha, fake: FakeLLM, state: Path,
                                              make_gateway: Callable[..., McpGateway]
                                              ) -> None:
    server = McpServer(id=server_id(), transport=stdio_transport(state), trust="trusted",
                       drift="accept")
    gateway = make_gateway(server)
    gateway.discover(server.id)
    tool = f"{server.id}.echo"
    hypha.agents.use_tools(AgentTools(gateway.registry()))
    hypha.agents.start(Assistant, name="mcp-agent", backend=OpenAIBackend,
                       llm=options(fake, "chat", tools=gateway.specs(), run_tools=True))
    fake.script(Reply.tool_call(tool.replace(".", "_"), {"text": "hello"}, call_id="c1"),
                Reply.text("echoed"))
    answer = hypha.agents.ask("mcp-agent", "echo hello", timeout=WAIT)
    assert answer.text == "echoed"
    assert [e.data["status"] for e in answer.events if e.kind == "tool_result"] == [
        "completed"]
    assert any(json.loads(m) == {"text": "hello"} for m in sent_messages(fake)
               if m.startswith("{"))
    info = hypha.agents.whereis("mcp-agent")
    assert info is not None
    stream = hypha.store.events(info.incarnation)
    completed = [e.data for e in stream if e.kind == "tool.call.completed"]
    assert [(c["tool"], c["source"]) for c in completed] == [(tool, "mcp")]
    # the gateway's events go where the turn's tool events go: the agent's stream
    kinds = [e.kind for e in stream if e.kind.startswith(("tool.call.", "mcp.call."))]
    assert kinds == ["tool.call.requested", "tool.call.started", "mcp.call.started",
                     "mcp.call.completed", "tool.call.completed"]
    assert [e.data["tool"] for e in stream if e.kind.startswith("mcp.call.")] == [tool] * 2

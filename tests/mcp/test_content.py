"""A server's resources and prompts read through the gateway (``read_resource``,
``get_prompt``) from a real MCP server process, over stdio and streamable HTTP: typed
results, the same pooled connection as the tools, bounded by ``max_result_bytes``."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable

import pytest

from hypha_celery.errors import McpResultTooLarge, McpToolError
from hypha_celery.mcp import (
    HttpTransport,
    McpGateway,
    McpServer,
    Prompt,
    Resource,
    StdioTransport,
)
from tests.mcp.conftest import server_id

Make = Callable[..., McpGateway]


def test_a_resource_and_a_prompt_are_read_over_the_tools_connection(
        make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    server = McpServer(id=server_id(), transport=transport, trust="trusted", drift="accept")
    gateway = make_gateway(server)
    found = gateway.discover(server.id)
    assert (found.resources, found.prompts) == (("notes://today",), ("greet",))
    resource = gateway.read_resource(server.id, "notes://today")
    assert isinstance(resource, Resource)
    assert (resource.server, resource.uri, resource.text) == (server.id, "notes://today",
                                                              "nothing yet")
    content = resource.contents[0]
    assert (content.uri, content.mime_type, content.blob) == ("notes://today", "text/plain",
                                                              None)
    assert 0 < resource.size < 200
    prompt = gateway.get_prompt(server.id, "greet", {"name": "Ada"})
    assert isinstance(prompt, Prompt)
    assert [(m.role, m.text) for m in prompt.messages] == [("user", "Say hello to Ada.")]
    assert prompt.messages[0].content == {"type": "text", "text": "Say hello to Ada."}
    gateway.registry().resolve(f"{server.id}.echo").handler({"text": "x"})
    assert gateway.connection(server.id).opened == 1  # one session for all of it


def test_past_max_result_bytes_is_a_typed_error_and_the_connection_stays(
        make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    server = McpServer(id=server_id(), transport=transport, max_result_bytes=40)
    gateway = make_gateway(server)
    with pytest.raises(McpResultTooLarge, match=r"resource 'notes://today' is \d+ bytes"):
        gateway.read_resource(server.id, "notes://today")
    with pytest.raises(McpResultTooLarge, match="max_result_bytes=40"):
        gateway.get_prompt(server.id, "greet", {"name": "Ada" * 20})
    assert gateway.connection(server.id).opened == 1


def test_what_the_server_does_not_have_is_a_tool_error(
        make_gateway: Make, transport: StdioTransport | HttpTransport) -> None:
    server = McpServer(id=server_id(), transport=transport)
    gateway = make_gateway(server)
    with pytest.raises(McpToolError):
        gateway.read_resource(server.id, "notes://nowhere")
    with pytest.raises(McpToolError):
        gateway.get_prompt(server.id, "nothing")
    with pytest.raises(McpToolError, match="not a resource URI"):
        gateway.read_resource(server.id, "no uri at all")
    with pytest.raises(McpToolError):  # a required argument missing
        gateway.get_prompt(server.id, "greet")
    assert gateway.get_prompt(server.id, "greet", {"name": "Bo"}).messages[0].text == \
        "Say hello to Bo."


def test_hypha_mcp_inspect_lists_the_resources_and_prompts(store_url: str) -> None:
    from tests.cli.test_commands import invoke
    from tests.mcp.conftest import SERVER

    command = shlex.join([sys.executable, str(SERVER), "stdio"])
    found = invoke("mcp", "inspect", server_id(), "--command", command, store_url=store_url)
    assert found.exit_code == 0, found.output
    lines = found.stdout.splitlines()
    assert lines[0].split()[:2] == ["TOOL", "STATE"]
    assert lines[-2:] == ["resources: notes://today", "prompts: greet"]

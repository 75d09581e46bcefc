"""The MCP gateway: tools of MCP servers (the official ``mcp`` SDK, 1.x; extra ``mcp``)
as governed tools, over stdio and streamable HTTP.

An :class:`McpServer` profile says how to reach a server, how far to trust it, what a
changed tool does (``quarantine``, the default, or ``accept``), which tools to take and
the bounds of a call. An :class:`McpGateway` discovers each server's tools, judges each
against its baseline in the store (a new or changed contract is quarantined until an
operator accepts it: :func:`accept`, ``hypha mcp accept``), normalizes the others into
``ToolSpec`` s ``<server>.<tool>`` (``source="mcp"``, side-effect level by trust), and
gives them as a ``ToolRegistry`` that the governed runner, ReAct and ``ctx.llm`` take as
they take local tools; :func:`call_mcp` / :func:`mcp_node` call one from a node. One
connection per process and server, reused across tasks, reopened after the server died.
:meth:`McpGateway.read_resource` / :meth:`McpGateway.get_prompt` read a server's
resources and prompts over it (bounded by ``max_result_bytes``). Every call is counted
in the Prometheus metrics of the process (``hypha_mcp_calls_total``). See ``docs/mcp.md``.

Conversational agents take them through the tool-execution seam:
``hypha.agents.use_tools(AgentTools(gateway.registry()))`` (``hypha_celery.agents.tools``);
ReAct and agents' turns record ``mcp.call.*`` where their ``tool.call.*`` go
(:func:`recording`).
"""

from hypha_celery.mcp._capability import (
    SIDE_EFFECT_META,
    capability_hash,
    declared_level,
    effective_level,
)
from hypha_celery.mcp._connection import Connection
from hypha_celery.mcp._content import Prompt, PromptMessage, Resource, ResourceContent
from hypha_celery.mcp._discovery import DiscoveredTool, Discovery, ToolState
from hypha_celery.mcp._gateway import McpGateway, McpHandler, accept, recording
from hypha_celery.mcp._node import call_mcp, mcp_node
from hypha_celery.mcp._profile import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RESULT_BYTES,
    MAX_CALL_TIMEOUT,
    MAX_CONNECT_TIMEOUT,
    MAX_RESULT_BYTES,
    MAX_TOOLS,
    DriftPolicy,
    HttpTransport,
    McpServer,
    StdioTransport,
    Transport,
    Trust,
)

__all__ = [
    # profiles
    "DriftPolicy", "HttpTransport", "McpServer", "StdioTransport", "Transport", "Trust",
    "DEFAULT_CALL_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT", "DEFAULT_MAX_RESULT_BYTES",
    "MAX_CALL_TIMEOUT", "MAX_CONNECT_TIMEOUT",
    "MAX_RESULT_BYTES", "MAX_TOOLS",
    # the gateway and its discoveries
    "Connection", "DiscoveredTool", "Discovery", "McpGateway", "McpHandler", "ToolState",
    "accept", "recording",
    # resources and prompts
    "Prompt", "PromptMessage", "Resource", "ResourceContent",
    # trust and contracts
    "SIDE_EFFECT_META", "capability_hash", "declared_level", "effective_level",
    # from a node
    "call_mcp", "mcp_node",
]

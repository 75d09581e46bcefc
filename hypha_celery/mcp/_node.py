"""MCP tools from inside a node: :func:`call_mcp` (one governed call) and :func:`mcp_node`
(a node that makes one), both over ``hypha_celery.tools.run_governed``.

The call is the node's: ``tool.call.*`` (``source: "mcp"``) and ``mcp.call.*`` go to the
run's log with the node's outcome, the invocation id is the execution id, the workflow's
approval answers the review step. A failure the run must see is raised again after the
runner recorded it: ``McpUnavailable`` (transient), ``McpTimeout`` (timeout), for the
node's retry policy; ``McpOutcomeUnknown`` (an effect call lost mid-way: an
:class:`~hypha_celery.errors.EffectOutcomeUnknown`), which quarantines the run (no retry,
no ``run.failed``) until an operator releases it (the node runs again as its next attempt)
or fails it. The other failures (``McpToolError``, an output that breaks the output
schema, a denial) are the :class:`~hypha_celery.tools.ToolResult`.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypha_celery.errors import (
    GraphSpecError,
    McpError,
    McpOutcomeUnknown,
    McpTimeout,
    McpUnavailable,
)
from hypha_celery.graph import Node, NodeContext
from hypha_celery.graph.model import SideEffect
from hypha_celery.jsontypes import JsonObject, JsonValue
from hypha_celery.mcp._gateway import McpGateway
from hypha_celery.tools import ToolPolicy, ToolRegistry, ToolResult, run_governed, summary

__all__ = ["call_mcp", "mcp_node"]

#: Raised again from the node: retried by its policy, or (an unknown outcome) quarantining.
_RAISED = (McpUnavailable, McpTimeout, McpOutcomeUnknown)


def call_mcp(ctx: NodeContext, gateway: McpGateway, tool_id: str, args: JsonValue, *,
             policy: ToolPolicy | None = None, scope_allow: Sequence[str] | None = None,
             permission_scope: str | None = None) -> ToolResult:
    """Call the MCP tool ``tool_id`` (``<server>.<tool>``) through the governed runner
    from a node (see the module). A lost effect call raises
    :class:`~hypha_celery.errors.McpOutcomeUnknown` (the run is quarantined); a quarantined
    tool raises :class:`~hypha_celery.errors.CapabilityQuarantined` (class ``policy``: not
    retried).
    Call a tool whose level is ``external_effect`` / ``irreversible`` from an at-most-once
    node (``Node(side_effect=...)``), as for a local tool."""
    spec = gateway.spec(tool_id)
    failures: list[McpError] = []
    registry = ToolRegistry.of({tool_id: (spec, gateway.handler(spec, ctx.record, failures))})
    result = run_governed(ctx, registry, tool_id, args, policy=policy,
                          scope_allow=scope_allow, permission_scope=permission_scope)
    if result.status == "failed" and result.phase == "execute" and failures \
            and isinstance(failures[-1], _RAISED):
        raise failures[-1]
    return result


def mcp_node(gateway: McpGateway, tool_id: str, *, side_effect: SideEffect = "read",
             policy: ToolPolicy | None = None, output_to: str = "tool_result",
             scope_allow: Sequence[str] | None = None,
             permission_scope: str | None = None, **node: object) -> Node:
    """A node calling ``tool_id`` with its input, the result's summary (``status``,
    ``output``, ``code``, ``message``) under ``output_to``. ``side_effect`` places the
    node (the tool is discovered when the node first runs, not here): declare
    ``external_effect`` / ``irreversible`` for such a tool (at most once). ``node``:
    the other ``Node`` options (``retry``, ``timeout``, ``queue`` ...)."""
    if not isinstance(tool_id, str) or "." not in tool_id:
        raise GraphSpecError(f"mcp node: {tool_id!r} is not '<server>.<tool>'")

    def run(state: JsonObject, inp: JsonValue, ctx: NodeContext) -> dict[str, object]:
        result = call_mcp(ctx, gateway, tool_id, inp, policy=policy, scope_allow=scope_allow,
                          permission_scope=permission_scope)
        return {output_to: summary(result)}

    return Node(run, side_effect=side_effect, **node)  # type: ignore[arg-type]
